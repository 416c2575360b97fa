"""What acts on the world: each actor is a thread with its own seeded ``random.Random``, bounded in
count and time, whose processes are registered in the world's :class:`~harness.world.Procs` (so a
fault can kill them and teardown always does).

Every success a client sees (``gw --json`` exit 0, HTTP 200, an MCP result that is not an error) is
recorded in the ledger with its command id: I3 looks for each on the arbiter after the final settle.
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import select
import subprocess
import threading
import time
import urllib.error
import urllib.request
from decimal import Decimal
from pathlib import Path
from typing import Any

from .ledger import Ledger
from .world import Proc, World, gw_argv

GW_TIMEOUT = 30.0  # one gw call; a call stuck behind a stopped arbiter or holder is killed after this


class Actor(threading.Thread):
    """One seeded loop: ``step()`` until ``stop`` is set, the deadline passes or ``limit`` steps ran."""

    kind = "actor"

    def __init__(self, world: World, ledger: Ledger, rng: random.Random, stop: threading.Event, name: str,
                 limit: int = 10_000, pause: tuple[float, float] = (0.05, 0.3)) -> None:
        super().__init__(name=name, daemon=True)
        self.world, self.ledger, self.rng, self.stop_event, self.limit, self.pause = world, ledger, rng, stop, limit, pause
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            for _ in range(self.limit):
                if self.stop_event.is_set():
                    break
                self.step()
                self.stop_event.wait(self.rng.uniform(*self.pause))
        except BaseException as error:  # noqa: BLE001 - reported by the run, never swallowed
            self.error = error
            self.ledger.log(f"{self.name} crashed: {error!r}")
        finally:
            self.finish()

    def step(self) -> None:
        raise NotImplementedError

    def finish(self) -> None:
        pass

    # --- a gw child the faults can kill ---------------------------------------------------------

    def gw(self, clone: int, *args: str, env: dict[str, str] | None = None, kind: str = "cli",
           timeout: float = GW_TIMEOUT) -> tuple[int, Any, str]:
        """``gw ARGS --json`` in clone ``clone``: (exit code, its JSON or None, stderr)."""
        # --json goes before a `--` (gw run's agent command line is everything after it)
        cut = args.index("--") if "--" in args else len(args)
        argv = gw_argv(*args[:cut], "--json", *args[cut:])
        proc = self.world.procs.spawn(f"{self.name}-{args[0]}", kind, argv,
                                      self.world.clones[clone], env=env, clone=clone, stdout=subprocess.PIPE)
        try:
            out, _ = proc.popen.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.world.procs.signal(proc, 18)  # SIGCONT, then kill: a stuck call is not an answer
            self.world.procs.signal(proc, 9)
            out, _ = proc.popen.communicate()
            self.ledger.log(f"{self.name}: gw {' '.join(args)} timed out (killed)")
        err = Path(proc.meta["log"]).read_text(errors="replace") if Path(proc.meta["log"]).exists() else ""
        doc = None
        with contextlib.suppress(ValueError):
            doc = json.loads(out) if out.strip() else None
        code = proc.popen.returncode
        self.ledger.count(f"exit:{args[0]}:{code}")
        return code, doc, err


class CliWorker(Actor):
    """A worker on the CLI: claim / claim --next / renew / release / done / msg / new, on a random clone,
    under its own identity, acting on the leases it was granted (fenced) and on others' (refused)."""

    kind = "cli"

    def __init__(self, *args: Any, ttl: str = "10s", **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.me = self.name
        self.ttl = ttl
        self.held: dict[str, int] = {}

    def step(self) -> None:
        clone = self.rng.randrange(len(self.world.clones))
        items = list(self.world.worker_items) if self.rng.random() < 0.9 else list(self.world.items)
        op = self.rng.choices(["claim", "next", "renew", "release", "done", "msg", "new", "revoke", "defer",
                               "undefer", "force"], weights=[4, 2, 3, 2, 0.5, 3, 0.5, 1, 3, 1, 0.3])[0]
        if op == "revoke":
            items = list(self.world.agent_items)
        mine = list(self.held)
        item = self.rng.choice(mine) if mine and op in ("renew", "release", "done", "msg") and self.rng.random() < 0.8 \
            else self.rng.choice(items)
        fence = self.held.get(item, 1 + self.rng.randrange(50))
        env = {"GW_FENCE": str(fence)}
        if op in ("defer", "undefer", "force") and item not in self.held:
            env = {}  # nobody's fence: a person defers an item nobody holds (docs/everyday.md)
        if op == "claim":
            args: tuple[str, ...] = ("claim", item, "--ttl", self.ttl)
        elif op == "next":
            args = ("claim", "--next", "--ttl", self.ttl)
        elif op == "renew":
            args = ("renew", item, "--ttl", self.ttl)
        elif op == "release":
            args = ("release", item)
        elif op == "done":
            args = ("done", item, "--force", "--reason", "harness")
        elif op == "msg":
            args = ("msg", item, f"note {self.rng.randrange(10**6)}")
        elif op == "revoke":
            args = ("revoke", item, "--reason", "harness revokes")
        elif op == "defer":  # a timer of a few seconds: claims in its window must be refused (I6)
            args = ("defer", item, "--until", f"{self.rng.randrange(2, 7)}s")
        elif op == "undefer":
            args = ("undefer", item)
        elif op == "force":  # a claim past the item's waits: allowed (I6 exempts it)
            args = ("claim", item, "--ttl", self.ttl, "--force")
        else:
            args = ("new", f"harness extra {self.rng.randrange(10**6)}")
        code, doc, _ = self.gw(clone, *args, "--as", self.me, env=env)
        if code == 0 and isinstance(doc, dict):
            self.ledger.ack("cli", doc, clone)
            self.ledger.count(f"ok:{op}")
            if doc.get("op") == "claim" and doc.get("item"):
                self.held[doc["item"]] = int(doc["fence"])
            elif doc.get("op") in ("release", "done"):
                self.held.pop(item, None)
            elif doc.get("op") == "new" and doc.get("item"):
                self.world.items.append(doc["item"])
                self.world.worker_items.append(doc["item"])
        elif code in (7, 75) and op in ("renew", "release", "done", "msg"):
            self.held.pop(item, None)


class Reporter(Actor):
    """``gw report`` on a running agent's execution, as its agent (``GW_AGENT``, ``GW_FENCE``), in its clone;
    one report in three is sent again with the same id (a retry after a lost answer): I8 finds each
    acknowledged report once on its execution and the execution's cost the sum of its reports."""

    kind = "report"

    def step(self) -> None:
        from .world import agent_records, proc_alive

        live = [r for r in agent_records(self.world.agents) if proc_alive(r["pid"]) and r.get("agent")]
        if not live:
            return
        budgeted = [r for r in live if r["item"] == self.world.agent_items[0]]  # the item with a budget, mostly
        agent = self.rng.choice(sorted(budgeted if budgeted and self.rng.random() < 0.6 else live, key=lambda r: r["pid"]))
        clone = self.world.clone_of(agent["cwd"])
        if clone is None:
            return
        report_id = f"rpt-{self.rng.randrange(16**12):012x}"
        cost = self.rng.choice(["0.01", "0.05", "0.1"])
        for attempt in range(2 if self.rng.random() < 0.35 else 1):
            code, doc, _ = self.gw(clone, "report", "--execution", agent["execution"], "--cost", cost,
                                   "--tokens-in", "10", "--id", report_id, "--as", agent["agent"],
                                   env={"GW_FENCE": str(agent["fence"])}, kind="cli")
            if code != 0 or not isinstance(doc, dict):
                continue
            self.ledger.count(f"report:{'duplicate' if doc.get('duplicate') else 'ok'}:{attempt}")
            if not doc.get("duplicate"):
                self.ledger.ack("cli", doc, clone)
                with self.ledger._lock:
                    self.ledger.reports.append((agent["execution"], report_id, Decimal(cost)))


class Publisher(Actor):
    """A holder queues a one-commit session (claim, ``gw session start``, ``gw session commit``, ``gw publish
    --queue``), sometimes releasing its lease before the publisher's turn, and ``gw queue work --once`` runs
    in a random clone: I7 checks each landing against the entry and lease it was queued under, and every
    move of the arbiter's ``main`` against the landings recorded. Each step is a kill-able gw child."""

    kind = "publish"

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.n = 0
        self.queued = 0

    def step(self) -> None:
        if not self.world.queue_items or self.queued >= 1:  # one session queued: enough for a bounded run
            return
        self.n += 1
        clone = self.rng.randrange(len(self.world.clones))
        item = self.rng.choice(self.world.queue_items)
        code, doc, _ = self.gw(clone, "claim", item, "--ttl", "30s", "--as", self.name)
        if code != 0 or not isinstance(doc, dict):
            return
        self.ledger.ack("cli", doc, clone)
        fence = {"GW_FENCE": str(doc["fence"])}
        code, doc, _ = self.gw(clone, "session", "start", item, "--as", self.name, env=fence)
        if code != 0 or not isinstance(doc, dict) or not doc.get("worktree"):
            self.ledger.count(f"publish:start:{code}")
            return
        source = Path(doc["worktree"])
        # one in three fails the gate (world.GATE): it must be sent back, and main never moves to it
        name = f"queue/{self.name}-{self.n}.{'red' if self.rng.random() < 0.35 else 'txt'}"
        (source / "queue").mkdir(exist_ok=True)
        (source / name).write_text(f"{self.name} {self.n}\n")
        code, _doc, _ = self.gw_in(source, clone, "session", "commit", "--file", name, "-m", f"harness {name}",
                                   "--as", self.name, env=fence)
        if code != 0:
            self.ledger.count(f"publish:commit:{code}")
            return
        code, doc, _ = self.gw(clone, "publish", "--queue", "--as", self.name, env=fence)
        self.ledger.count(f"publish:queue:{code}")
        self.queued += code == 0
        if code == 0 and self.rng.random() < 0.3:  # the lease ends before its turn: it must be sent back
            self.gw(clone, "release", item, "--as", self.name, env=fence)
        code, doc, _ = self.gw(self.rng.randrange(len(self.world.clones)), "queue", "work", "--once", "--ttl", "10s",
                               "--as", "publisher")
        if isinstance(doc, dict):
            for handled in doc.get("handled") or ():
                self.ledger.count(f"queue:{handled.get('outcome')}")

    def gw_in(self, cwd: Path, clone: int, *args: str, env: dict[str, str] | None = None) -> tuple[int, Any, str]:
        """``gw ARGS`` in a session's worktree (of clone ``clone``)."""
        proc = self.world.procs.spawn(f"{self.name}-{args[0]}", "cli", gw_argv(*args, "--json"), cwd, env=env,
                                      clone=clone, stdout=subprocess.PIPE)
        try:
            out, _ = proc.popen.communicate(timeout=GW_TIMEOUT)
        except subprocess.TimeoutExpired:
            self.world.procs.signal(proc, 9)
            out, _ = proc.popen.communicate()
        self.ledger.count(f"exit:{args[0]}-{args[1]}:{proc.popen.returncode}")
        return proc.popen.returncode, None, out.decode(errors="replace")


class Syncer(Actor):
    """``gw sync`` in a random clone; the command ids a sync reports refused are reported to the client."""

    kind = "sync"

    def step(self) -> None:
        clone = self.rng.randrange(len(self.world.clones))
        code, doc, _err = self.gw(clone, "sync", "--as", "syncer", kind="sync")
        if isinstance(doc, dict) and doc.get("refused"):
            refused = [r["command_id"] for r in doc["refused"] if isinstance(r, dict) and "command_id" in r]
            self.ledger.refused(refused)
            ops = sorted({f"{r.get('op')}:{r.get('error')}" for r in doc["refused"] if isinstance(r, dict)})
            self.ledger.count("sync:refused", len(refused))
            self.ledger.log(f"sync clone{clone} -> {code}, refused {ops}")


class Launcher(Actor):
    """``gw run`` of the harness agent on a random item, on tmux (a private socket per clone) or
    subprocess, with a short lease the coordinator must keep renewing."""

    kind = "launch"

    def __init__(self, *args: Any, backends: tuple[str, ...] = ("tmux", "subprocess"), ttl: str = "20s",
                 **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.backends, self.ttl = backends, ttl

    def step(self) -> None:
        clone = self.rng.randrange(len(self.world.clones))
        item = self.rng.choice(list(self.world.agent_items))
        backend = self.rng.choice(self.backends)
        code, doc, _err = self.gw(clone, "run", item, "--backend", backend, "--ttl", self.ttl, "--as", self.name,
                                 "--", str(self.world.agent), kind="run")
        if code == 0 and isinstance(doc, dict):
            self.ledger.count(f"run:{backend}:{'existing' if doc.get('existing') else doc.get('state')}")


class Coordinators(Actor):
    """One ``gw coordinate`` per clone, kept running: one that died (kill -9, or an exit of its own) is
    started again. An exit the faults did not cause is logged with its code."""

    kind = "coordinator"

    def __init__(self, *args: Any, interval: float = 1.0, **kwargs: Any) -> None:
        kwargs.setdefault("pause", (0.2, 0.2))  # the supervisor's own period
        super().__init__(*args, **kwargs)
        self.interval = interval
        self.procs: dict[int, Proc] = {}
        self.faulted: set[int] = set()  # clones whose coordinator a fault killed or stopped just now
        self.lock = threading.Lock()
        self.logs: dict[int, list[str]] = {}  # every coordinator log of each clone, oldest first
        self.read: dict[str, tuple[int, int]] = {}  # log -> (bytes read, passes counted)

    def start_one(self, clone: int) -> None:
        # --json: one JSON line per completed pass in the log, which passes() counts
        argv = gw_argv("coordinate", "--interval", f"{int(self.interval * 1000)}ms" if self.interval < 1 else
                       f"{int(self.interval)}s", "--ttl", f"{max(3, int(self.interval * 3))}s", "--as", f"coord{clone}",
                       "--json")
        self.procs[clone] = self.world.procs.spawn(f"coordinate{clone}", "coordinator", argv, self.world.clones[clone],
                                                   clone=clone)
        self.logs.setdefault(clone, []).append(self.procs[clone].meta["log"])

    def passes(self, clone: int) -> int:
        """The passes the coordinators of ``clone`` completed so far (each prints one JSON line per pass):
        what I2 measures its window in, rather than seconds of a loaded machine."""
        total = 0
        for log in list(self.logs.get(clone, ())):
            done, counted = self.read.get(log, (0, 0))
            with contextlib.suppress(OSError), open(log, "rb") as f:
                f.seek(done)
                chunk = f.read()
                whole = chunk[: chunk.rfind(b"\n") + 1]  # a line still being written is counted next time
                counted += sum(1 for line in whole.splitlines() if line.startswith(b'{"ok": true, "host"'))
                done += len(whole)
            self.read[log] = (done, counted)
            total += counted
        return total

    def step(self) -> None:
        with self.lock:
            for clone in range(len(self.world.clones)):
                proc = self.procs.get(clone)
                if proc is None:
                    self.start_one(clone)
                elif not proc.alive:
                    code = proc.popen.returncode
                    if clone not in self.faulted:
                        tail = Path(proc.meta["log"]).read_text(errors="replace").strip().splitlines()[-1:]
                        self.ledger.log(f"coordinator clone{clone} exited {code} on its own: {tail}")
                        self.ledger.count(f"coordinator:exit:{code}")
                    self.faulted.discard(clone)
                    self.start_one(clone)

    def up(self, clone: int) -> bool:
        """The harness means this clone's coordinator to be running (no fault of ours holds it down)."""
        proc = self.procs.get(clone)
        if clone in self.faulted:
            return False
        return proc is not None and not proc.stopped

    def finish(self) -> None:
        pass  # the coordinators keep running through the settle; teardown kills them


def read_announcement(proc: Proc, timeout: float = 30.0) -> dict[str, Any]:
    """The first JSON document ``proc`` prints on stdout (``gw serve --json`` names its URL)."""
    assert proc.popen.stdout is not None
    deadline, said = time.monotonic() + timeout, b""
    while time.monotonic() < deadline and proc.alive:
        if select.select([proc.popen.stdout], [], [], 0.05)[0]:
            said += os.read(proc.popen.stdout.fileno(), 65536)
            with contextlib.suppress(ValueError):
                return dict(json.loads(said))
    raise RuntimeError(f"{proc.name} did not announce itself: {said!r}")


class RestClient(Actor):
    """A REST client of ``gw serve`` in one clone: POST /v1/commands with a bearer token, the command id
    chosen by the client; the server is started again when a fault killed it."""

    kind = "rest"
    face = "rest"  # its counts and acknowledgements in the ledger

    def __init__(self, *args: Any, clone: int = 1, ttl: str = "10s", webhook: Any = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.clone, self.ttl = clone, ttl
        self.webhook = webhook  # a harness.webhooks.Receiver its gw serve posts every state move to (IW)
        self.token = ""
        self.proc: Proc | None = None
        self.url = ""
        self.held: dict[str, int] = {}
        self.n = 0

    def repo(self) -> Path:
        """The repository its gw serve serves (and its token is added to)."""
        return self.world.clones[self.clone]

    def serve(self) -> None:
        if not self.token:
            made = json.loads(subprocess.run(gw_argv("serve", "token", "add", self.name, "--role", "agent", "--json"),
                                             cwd=self.repo(), capture_output=True, text=True,
                                             timeout=60).stdout)
            self.token = made["token"]
            if self.webhook is not None:
                self.webhook.configure(self.repo())
        self.proc = self.world.procs.spawn(f"serve-{self.name}", "serve",
                                           gw_argv("serve", "--bind", "127.0.0.1:0", "--json"),
                                           self.repo(), clone=self.clone, stdout=subprocess.PIPE)
        self.url = str(read_announcement(self.proc)["url"])

    def step(self) -> None:
        if self.proc is None or not self.proc.alive:
            try:
                self.serve()
            except (RuntimeError, OSError, ValueError, KeyError) as error:  # killed while starting: next step
                self.ledger.log(f"{self.face}: gw serve did not start: {error!r}")
                return
        self.n += 1
        item = self.rng.choice(list(self.held) or list(self.world.items)) if self.rng.random() < 0.5 \
            else self.rng.choice(list(self.world.items))
        op = self.rng.choice(["claim", "renew", "release", "msg"] if item in self.held else ["claim", "msg"])
        doc: dict[str, Any] = {"op": op, "item": item, "id": f"rest-{self.rng.randrange(16**12):012x}-{self.n}"}
        if op in ("claim", "renew"):
            doc["ttl"] = self.ttl
        if op == "msg":
            doc["text"] = f"rest note {self.n}"
        if item in self.held and op != "claim":
            doc["fence"] = self.held[item]
        request = urllib.request.Request(f"{self.url}/v1/commands", data=json.dumps(doc).encode(), method="POST",
                                         headers={"Authorization": f"Bearer {self.token}",
                                                  "Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(request, timeout=GW_TIMEOUT) as answer:
                status, body = answer.status, json.loads(answer.read())
        except urllib.error.HTTPError as error:
            status, body = error.code, None
            with contextlib.suppress(OSError, ValueError):
                self.ledger.log(f"{self.face} {op}: {status} {error.read()[:200]!r}")
        except (OSError, ValueError) as error:
            self.ledger.count(f"{self.face}:transport-error")
            self.ledger.log(f"{self.face} {op}: {error!r}")
            return
        self.ledger.count(f"{self.face}:{status}")
        if status == 500:  # 502-504 are documented answers (docs/serve.md: 12 is 504); 500 is a crash
            self.ledger.violate("faces", f"REST {op} answered HTTP {status}")
        if status == 200 and isinstance(body, dict):
            self.ledger.ack(self.face, body, self.clone)
            if body.get("op") == "claim":
                self.held[body["item"]] = int(body["fence"])
            elif body.get("op") == "release":
                self.held.pop(item, None)
        elif status in (409, 403, 423) and op != "claim":
            self.held.pop(item, None)


class ArbiterRestClient(RestClient):
    """A REST client of the command service at the arbiter (docs/deploy.md): ``gw serve`` on the arbiter's
    own bare repository, deciding each command in-process on the state ref the clones push to (and, with
    ``GW_HARNESS_ARBITER=batch``, the applier writes). The faults kill it like any server; the arbiter's
    outages (``git daemon`` stopped) do not reach it. Its acknowledgements carry clone -1 (none)."""

    face = "rest-arbiter"

    def repo(self) -> Path:
        return self.world.arbiter


class McpClient(Actor):
    """An MCP client of ``gw mcp`` on stdio (newline-delimited JSON-RPC, as the SDK's stdio transport), its
    server a registered child the faults can kill (started again then)."""

    kind = "mcp"

    def __init__(self, *args: Any, clone: int = 2, ttl: str = "10s", **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.clone, self.ttl = clone, ttl
        self.proc: Proc | None = None
        self.next_id = 0
        self.held: set[str] = set()
        self.buffer = b""

    def request(self, method: str, params: dict[str, Any], timeout: float = GW_TIMEOUT) -> dict[str, Any] | None:
        assert self.proc is not None and self.proc.popen.stdin is not None and self.proc.popen.stdout is not None
        self.next_id += 1
        message = {"jsonrpc": "2.0", "id": self.next_id, "method": method, "params": params}
        self.proc.popen.stdin.write(json.dumps(message).encode() + b"\n")
        self.proc.popen.stdin.flush()
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            while b"\n" in self.buffer:
                line, self.buffer = self.buffer.split(b"\n", 1)
                with contextlib.suppress(ValueError):
                    answer = json.loads(line)
                    if answer.get("id") == self.next_id:
                        return dict(answer)
            if not self.proc.alive:
                return None
            if select.select([self.proc.popen.stdout], [], [], 0.05)[0]:
                chunk = os.read(self.proc.popen.stdout.fileno(), 65536)
                if not chunk:
                    return None
                self.buffer += chunk
        return None

    def connect(self) -> None:
        self.buffer = b""
        self.proc = self.world.procs.spawn(f"mcp{self.clone}", "mcp", gw_argv("mcp", "--as", self.name),
                                           self.world.clones[self.clone], clone=self.clone,
                                           stdin=subprocess.PIPE, stdout=subprocess.PIPE)
        init = self.request("initialize", {"protocolVersion": "2025-03-26", "capabilities": {},
                                           "clientInfo": {"name": "gitwork-harness", "version": "1"}})
        if init is None:
            raise RuntimeError("gw mcp did not answer initialize")
        assert self.proc.popen.stdin is not None
        self.proc.popen.stdin.write(b'{"jsonrpc": "2.0", "method": "notifications/initialized"}\n')
        self.proc.popen.stdin.flush()

    def step(self) -> None:
        if self.proc is None or not self.proc.alive:
            try:
                self.connect()
            except (OSError, RuntimeError) as error:
                self.ledger.log(f"mcp connect: {error!r}")
                return
        item = self.rng.choice(list(self.world.items))
        tool = self.rng.choice(["claim", "msg", "renew", "release"] if self.held else ["claim", "msg"])
        if tool != "claim" and self.held and self.rng.random() < 0.8:
            item = self.rng.choice(sorted(self.held))
        arguments: dict[str, Any] = {"item": item}
        if tool in ("claim", "renew"):
            arguments["ttl"] = self.ttl
        if tool == "msg":
            arguments["text"] = f"mcp note {self.next_id}"
        try:
            answer = self.request("tools/call", {"name": tool, "arguments": arguments})
        except (OSError, ValueError) as error:
            self.ledger.log(f"mcp {tool}: {error!r}")
            return
        if answer is None or "result" not in answer:
            self.ledger.count("mcp:no-answer")
            return
        result = answer["result"]
        if result.get("isError"):
            self.ledger.count(f"mcp:{tool}:error")
            if tool != "claim":
                self.held.discard(item)
            return
        try:
            doc = json.loads(result["content"][0]["text"])
        except (KeyError, IndexError, ValueError):
            self.ledger.violate("faces", f"MCP {tool} success without a JSON document: {result!r:.200}")
            return
        self.ledger.count(f"mcp:{tool}:ok")
        if isinstance(doc, dict):
            self.ledger.ack("mcp", doc, self.clone)
            if tool == "claim" and doc.get("item"):
                self.held.add(doc["item"])
            elif tool == "release":
                self.held.discard(item)

    def finish(self) -> None:
        if self.proc is not None and self.proc.popen.stdin is not None:
            with contextlib.suppress(OSError):
                self.proc.popen.stdin.close()
