"""The world a harness run acts on: an arbiter served by ``git daemon`` with the server hook, N clones,
and the registry of every process the harness started.

Everything runs on 127.0.0.1 under one root folder. Every process the harness starts gets its own
session (process group), is registered in :class:`Procs`, and is killed by group at :meth:`World.close`,
whatever happened before (SIGCONT first, so a stopped one dies too).
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from conftest import git, gw_here, make_repo
from daemon import GitDaemon, bare_repo

STATE = "refs/gitwork/state"
MARGIN = "3s"

# The agent every `gw run` launches: it records who it is (pid, item, fence, execution, where it runs,
# the launch context naming its epoch) in one file named after its pid, then heartbeats (touches the
# file) until killed. A shell script: a Python start per agent would cost a core on this machine.
AGENT = """#!/bin/sh
# gitwork system harness agent
f="{agents}/$$"
epoch=$(sed -n 's/.*"epoch": *\\([0-9]*\\).*/\\1/p' "$GW_CONTEXT.json" 2>/dev/null | head -n 1)
[ -n "$epoch" ] || epoch=$(sed -n 's/.*"epoch": *\\([0-9]*\\).*/\\1/p' "$(dirname "$GW_CONTEXT")/launch.json" 2>/dev/null | head -n 1)
# what it cost, read by its wrapper when it ends and sent with the end (report id "exit"; I8 counts it once)
[ -n "$GW_REPORT" ] && printf '{{"cost": 0.05, "tokens_in": 100, "model": "harness"}}' > "$GW_REPORT"
printf '{{"pid": %s, "item": "%s", "fence": %s, "epoch": "%s", "execution": "%s", "cwd": "%s", "agent": "%s", "started": %s}}\\n' \\
  "$$" "$GW_ITEM" "${{GW_FENCE:-0}}" "$epoch" "$GW_EXECUTION" "$(pwd)" "$GW_AGENT" "$(date +%s)" > "$f.tmp" && mv "$f.tmp" "$f"
i=0
while [ $i -lt 3600 ]; do
  sleep 0.5
  touch "$f"
  i=$((i + 1))
done
"""
AGENT_MARK = b"harness-agent.sh"
GATE = "! git ls-files | grep -q '[.]red$'"
# The workers' items' globs, by turn: neighbours overlap (src/api/** and src/api/v1.py; docs and docs/**).
PATHS = (["src/api/**"], ["src/api/v1.py", "README.md"], ["docs"], ["docs/**/*.md"], ["tests/*.py"])


@dataclass
class Proc:
    """One process the harness started (the leader of its own process group)."""

    name: str
    kind: str
    popen: subprocess.Popen[bytes]
    clone: int | None = None
    stopped: bool = False
    meta: dict[str, Any] = field(default_factory=dict)

    @property
    def alive(self) -> bool:
        return self.popen.poll() is None


class Procs:
    """The registry: started with their own session, killed by group, never by name."""

    def __init__(self, logs: Path) -> None:
        self.logs = logs
        self.all: list[Proc] = []
        self._n = 0

    def spawn(self, name: str, kind: str, argv: list[str], cwd: Path, env: dict[str, str] | None = None,
              clone: int | None = None, stdin: int | IO[bytes] | None = subprocess.DEVNULL,
              stdout: int | IO[bytes] | None = None, **meta: Any) -> Proc:
        self._n += 1
        log = self.logs / f"{self._n:05d}-{name}.log"
        with open(log, "wb") as logfile:  # the child keeps its own copy of the descriptor
            popen = subprocess.Popen(argv, cwd=cwd, env={**os.environ, **(env or {})}, stdin=stdin,
                                     stdout=logfile if stdout is None else stdout,
                                     stderr=subprocess.STDOUT if stdout is None else logfile, start_new_session=True)
        proc = Proc(name, kind, popen, clone, meta={"log": str(log), **meta})
        self.all.append(proc)
        return proc

    def live(self, kind: str | None = None) -> list[Proc]:
        return [p for p in self.all if p.alive and (kind is None or p.kind == kind)]

    def signal(self, proc: Proc, sig: int) -> bool:
        try:
            os.killpg(proc.popen.pid, sig)
        except ProcessLookupError:
            return False
        if sig == signal.SIGSTOP:
            proc.stopped = True
        elif sig == signal.SIGCONT:
            proc.stopped = False
        return True

    def continue_all(self) -> None:
        for proc in self.all:
            if proc.stopped:
                self.signal(proc, signal.SIGCONT)

    def kill_all(self) -> None:
        for proc in self.all:
            if proc.alive:
                self.signal(proc, signal.SIGCONT)
                self.signal(proc, signal.SIGKILL)
        for proc in self.all:
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.popen.wait(timeout=5)


def gw_argv(*args: str) -> list[str]:
    return [sys.executable, "-m", "gitwork", *args]


def run(cwd: Path, *args: str, timeout: float = 60, env: dict[str, str] | None = None,
        input: str | None = None) -> subprocess.CompletedProcess[str]:
    """A bounded ``gw`` child (set-up and settling; actors use :meth:`Procs.spawn` to be killable)."""
    return subprocess.run(gw_argv(*args), cwd=cwd, capture_output=True, text=True, timeout=timeout, check=False,
                          env={**os.environ, **(env or {})}, input=input)


def ok(cwd: Path, *args: str, input: str | None = None) -> Any:
    """``gw ARGS --json`` for the set-up, in this process (conftest's ``gw_here``: the same entry point
    without an interpreter start per call; nothing runs concurrently yet)."""
    done = gw_here(cwd, *args, "--json", input=input)
    if done.returncode != 0:
        raise RuntimeError(f"gw {' '.join(args)} in {cwd} -> {done.returncode}: {done.stdout} {done.stderr}")
    return json.loads(done.stdout) if done.stdout.strip() else None


class World:
    """The arbiter (``served/arbiter.git`` behind ``git daemon``, pre-receive installed), ``clones`` clones
    made the arbiter's by ``gw init --remote origin``, and ``items`` items published from clone 0."""

    def __init__(self, root: Path, *, clones: int = 3, items: int = 8, hook: bool = True,
                 budget: str | None = None, code: bool = False) -> None:
        self.root = root
        (root / "logs").mkdir(parents=True, exist_ok=True)
        self.procs = Procs(root / "logs")
        self.agents = root / "agents"
        self.agents.mkdir(exist_ok=True)
        self.agent = root / "harness-agent.sh"
        self.agent.write_text(AGENT.format(agents=self.agents))
        self.agent.chmod(0o755)
        served = root / "served"
        served.mkdir(exist_ok=True)
        self.arbiter = bare_repo(served, "arbiter")
        self.daemon = GitDaemon(served)
        self.clones: list[Path] = []
        self.tmux_sockets: list[Path] = []
        self.daemon.start()
        try:
            self._build(clones, items, hook, budget, code)
        except BaseException:
            self.close()  # a set-up that failed half-way leaves no daemon or tmux server behind
            raise

    def _build(self, clones: int, items: int, hook: bool, budget: str | None, code: bool) -> None:
        self.url = self.daemon.url("arbiter")
        self.hook = hook
        # The clock margin (docs/leases.md) is 30 s by default: a lease is its holder's only until
        # expires_at - margin, so the run's short leases (seconds, to see them expire and be taken over
        # within a bounded run) need a short margin, the same on every clone and on the arbiter.
        git(self.arbiter, "config", "gitwork.clock-margin", MARGIN)
        if hook:
            ok(self.root, "hooks", "install", "--server", str(self.arbiter))
        # GW_HARNESS_ARBITER=batch: the batch arbiter (docs/deploy.md): lease commands go to the
        # arbiter's inbox and its post-receive hook applies them (needs the server hooks).
        self.batch = hook and os.environ.get("GW_HARNESS_ARBITER") == "batch"
        if self.batch:
            git(self.arbiter, "config", "gitwork.arbiter", "batch")
        for n in range(clones):
            path = make_repo(self.root / f"clone{n}")
            git(path, "remote", "add", "origin", self.url)
            # A private tmux server per clone (short path: a Unix socket path is at most 107 bytes).
            sock = Path(f"/tmp/gwh-{os.getpid()}-{id(self) % 100000}-{n}")
            self.tmux_sockets.append(sock)
            git(path, "config", "gitwork.tmuxSocket", str(sock))
            git(path, "config", "gitwork.clock-margin", MARGIN)
            if self.batch:
                git(path, "config", "gitwork.arbiter", "batch")
            ok(path, "init", "--remote", "origin")
            if n == 0:
                ok(path, "sync")
            self.clones.append(path)
        if code:
            self._code()
        # The items: one batch (one gw process, one commit), published with one sync.
        self.items: list[str] = [f"w-{os.urandom(8).hex()}" for _ in range(items)]
        # Two more for the publish queue's sessions (actors.Publisher), out of the other actors' way.
        self.queue_items = [f"w-{os.urandom(8).hex()}" for _ in range(2 if code else 0)]
        # The first half is run by agents (gw run, delegation); the workers act mostly on the rest, and
        # revoke on the agents' items (so fences go stale under running agents).
        self.agent_items = self.items[: max(1, items // 2)]
        self.worker_items = self.items[len(self.agent_items):]
        # The workers' items declare paths, overlapping in pairs (IP: a claim must not take globs that
        # overlap another holder's live path lease); the first agent item has a small budget (I8: no
        # launch once its agents reported that much).
        docs = []
        for n, item in enumerate(self.items):
            doc: dict[str, Any] = {"op": "new", "item": item, "title": f"harness item {n}"}
            if item in self.worker_items:
                doc["paths"] = PATHS[self.worker_items.index(item) % len(PATHS)]
            docs.append(doc)
        docs += [{"op": "new", "item": item, "title": f"harness queue item {n}"} for n, item in enumerate(self.queue_items)]
        if budget is not None:
            docs.append({"op": "edit", "item": self.agent_items[0], "budget": budget})
        ok(self.clones[0], "apply", "-", "--as", "seeder", input="".join(json.dumps(d) + "\n" for d in docs))
        ok(self.clones[0], "sync")
        for path in self.clones[1:]:
            ok(path, "sync")

    def _code(self) -> None:
        """A code branch ``main`` on the arbiter (the publish queue's target), its every move logged (I7
        reads the arbiter's reflog), checked out in every clone (a session starts from a branch)."""
        git(self.arbiter, "config", "core.logAllRefUpdates", "always")
        for path in self.clones:  # the gate every landing must pass: no *.red file (actors.Publisher writes some)
            git(path, "config", "gitwork.gates", GATE)
        first = self.clones[0]
        (first / "README.md").write_text("harness\n")
        git(first, "add", "README.md")
        git(first, "-c", "user.name=seeder", "-c", "user.email=seeder@harness", "commit", "-q", "-m", "base")
        git(first, "branch", "-M", "main")
        git(first, "push", "-q", "origin", "main")
        for path in self.clones[1:]:
            git(path, "fetch", "-q", "origin", "main")
            git(path, "reset", "-q", "--hard", "FETCH_HEAD")
            git(path, "branch", "-M", "main")

    def red(self, commit: str) -> bool:
        """``commit``'s tree holds a file the harness's gate refuses (``*.red``)."""
        names = subprocess.run(["git", "ls-tree", "-r", "--name-only", commit], cwd=self.arbiter, capture_output=True,
                               text=True, check=False).stdout.split()
        return any(name.endswith(".red") for name in names)

    def code_moves(self) -> list[str]:
        """The commits ``main`` was moved to on the arbiter after its creation (from its reflog)."""
        log = self.arbiter / "logs" / "refs" / "heads" / "main"
        lines = log.read_text().splitlines() if log.exists() else []
        return [line.split()[1] for line in lines[1:] if len(line.split()) > 1]

    # --- reading the state ----------------------------------------------------------------------

    def tip(self, repo: Path | None = None) -> str | None:
        done = subprocess.run(["git", "rev-parse", "-q", "--verify", STATE], cwd=repo or self.arbiter,
                              capture_output=True, text=True, check=False)
        return done.stdout.strip() or None

    def clone_of(self, path: str | Path) -> int | None:
        for n, clone in enumerate(self.clones):
            if Path(path).resolve() == clone.resolve():
                return n
        return None

    # --- teardown -------------------------------------------------------------------------------

    def kill_agents(self) -> None:
        """Every agent the harness's script started, wherever it runs (tmux or subprocess backend).

        Also the ones no record or handle names yet: a ``gw run`` killed by the teardown between its
        fork and its handle leaves an agent that writes its record a moment later (gw's coordinator
        would stop it; ours is gone by now). So /proc is scanned for this world's agent script (its
        full path: another harness run on the machine is left alone) until it is quiet twice. A world where
        no execution was ever recorded is done after one quiet look: ``gw run`` writes an execution's folder
        before its backend starts anything (gitwork/launch/run.py), and ``close`` has killed and reaped every
        process the harness started, so nothing is left that could still start an agent (the checker
        tests' worlds: 0.6 s of waiting each)."""
        mine = str(self.agent).encode()
        quiet = 0
        deadline = time.monotonic() + 10.0
        while quiet < 2 and time.monotonic() < deadline:
            found = set(live_agents(self.agents))
            for entry in os.listdir("/proc"):
                if entry.isdigit():
                    with contextlib.suppress(OSError), open(f"/proc/{entry}/cmdline", "rb") as cmdline:
                        if mine in cmdline.read():
                            found.add(int(entry))
            for pid in found:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(pid, signal.SIGKILL)
            for clone in self.clones:
                for handle in (clone / ".git" / "gitwork" / "executions").glob("*/handle"):
                    with contextlib.suppress(ValueError, OSError):
                        group = int(handle.read_text().partition("@")[0])
                        if is_agent_group(group):
                            os.killpg(group, signal.SIGKILL)
            quiet = quiet + 1 if not found else 0
            if quiet and not self.executions_recorded():
                return
            time.sleep(0.3)

    def executions_recorded(self) -> bool:
        """Some clone (or the arbiter) has an execution's folder: a ``gw run`` got as far as its launch."""
        places = [clone / ".git" / "gitwork" / "executions" for clone in self.clones]
        places.append(self.arbiter / "gitwork" / "executions")
        return any(place.is_dir() and any(place.iterdir()) for place in places)

    def close(self) -> None:
        self.procs.kill_all()
        for sock in self.tmux_sockets:
            if sock.exists():
                subprocess.run(["tmux", "-S", str(sock), "kill-server"], capture_output=True, timeout=10, check=False)
                with contextlib.suppress(OSError):
                    sock.unlink()
        self.kill_agents()
        self.daemon.stop()


def proc_alive(pid: int) -> bool:
    """``pid`` is a live (not zombie) process."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as stat:
            state = stat.read().rpartition(b")")[2].split()[0]
    except (OSError, IndexError):
        return False
    return state not in (b"Z", b"X")


def proc_state(pid: int) -> str | None:
    try:
        with open(f"/proc/{pid}/stat", "rb") as stat:
            return stat.read().rpartition(b")")[2].split()[0].decode()
    except (OSError, IndexError):
        return None


def is_agent(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as cmdline:
            return AGENT_MARK in cmdline.read()
    except OSError:
        return False


def is_agent_group(group: int) -> bool:
    """The group ``group`` is (still) one the subprocess backend made for a harness agent: its leader is
    the wrapper of our agent, or our agent; a reused pid of anything else is left alone."""
    try:
        with open(f"/proc/{group}/cmdline", "rb") as cmdline:
            text = cmdline.read()
    except OSError:
        return False
    return AGENT_MARK in text


def agent_records(agents: Path) -> list[dict[str, Any]]:
    """What each agent wrote about itself (one file per pid)."""
    found = []
    for entry in agents.iterdir():
        if not entry.name.isdigit():
            continue
        with contextlib.suppress(OSError, ValueError):
            record = json.loads(entry.read_text())
            record["mtime"] = entry.stat().st_mtime
            found.append(record)
    return found


def live_agents(agents: Path) -> list[int]:
    return [r["pid"] for r in agent_records(agents) if proc_alive(r["pid"]) and is_agent(r["pid"])]


def wait_until(predicate: Any, timeout: float, step: float = 0.1) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(step)
    return bool(predicate())
