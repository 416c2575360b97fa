"""The invariants, checked continuously (I1, I2: :class:`Monitor`) and at the end (I3-I5).

- I1: at most one live agent process per item, anywhere: two live agents under one fence is always a
  violation; two under different fences may overlap only while the older one is within I2's grace.
- I2: a live agent whose fence is no longer current (in the view of the clone it runs in) is killed
  by that clone's coordinator: it is a violation once the agent has been stale for one coordinator
  interval plus slack (counted only while the harness means that clone's coordinator to run: no
  fault of ours holds it down) AND the coordinator has completed two passes since the staleness was
  first seen (the second began after it, so it saw it), plus a second for the kill to show. The
  window is measured in the coordinator's own passes, not in seconds of a loaded machine; a
  coordinator meant to run that completes no pass for ``stuck`` seconds while an agent is stale in
  its clone is a violation too (passes cannot hide a coordinator that does not run).
- I3: every command acknowledged to a client is on the arbiter exactly once, or was reported refused.
- I4: every state commit's tree is the engine's replay of its command on its parent
  (:func:`replay_mismatches`, reusable on any repository with a state ref).
- I5: ``git fsck`` clean everywhere; every clone at the arbiter's tip after the final sync.

I6-I8 and IP (path leases) are judged on the arbiter's history after the run: tests/harness/history.py.
"""

from __future__ import annotations

import collections
import contextlib
import subprocess
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from .ledger import Ledger
from .world import STATE, World, agent_records, is_agent, proc_alive, proc_state


def git_out(repo: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=repo, capture_output=True, text=True, timeout=60,
                          check=False).stdout


# --- I1 / I2: the agents ----------------------------------------------------------------------------


class LeaseReader:
    """The lease of an item as one clone sees it (its local state ref), through one ``cat-file --batch``."""

    def __init__(self, repo: Path) -> None:
        self.repo = repo
        self.proc = subprocess.Popen(["git", "cat-file", "--batch"], cwd=repo, stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)

    def lease(self, item: str) -> dict[str, str] | None:
        from gitwork import layout

        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write(f"{STATE}:{layout.item_path(item, layout.LEASE_FILE)}\n".encode())
        self.proc.stdin.flush()
        header = self.proc.stdout.readline().split()
        if len(header) < 3:
            return None
        data = self.proc.stdout.read(int(header[2]) + 1)
        fields = {}
        for line in data.decode(errors="replace").splitlines():
            key, sep, value = line.partition(":")
            if sep and not line.startswith(" "):
                fields[key.strip()] = value.strip().strip("'\"")
        return fields

    def close(self) -> None:
        if self.proc.stdin is not None:
            self.proc.stdin.close()
        self.proc.wait(timeout=10)


def is_current(lease: dict[str, str] | None, fence: int) -> bool:
    return lease is not None and lease.get("fence") == str(fence) and lease.get("state") == "active"


class Monitor(threading.Thread):
    """I1 and I2, every ``period`` seconds while the run lasts (and once more by :meth:`check`)."""

    def __init__(self, world: World, ledger: Ledger, stop: threading.Event, *, up: Any, interval: float,
                 slack: float, period: float = 0.25, passes: Any = None, stuck: float = 45.0) -> None:
        super().__init__(name="monitor", daemon=True)
        self.world, self.ledger, self.stop_event = world, ledger, stop
        self.up, self.grace, self.period = up, interval + slack, period
        self.passes = passes  # clone -> passes its coordinators completed so far (None: seconds only)
        self.stuck = stuck
        self.stale_for: dict[int, float] = collections.defaultdict(float)  # pid -> coordinator-up seconds stale
        self.stale_mark: dict[int, tuple[int, float]] = {}  # pid -> (passes, seconds) when first seen stale
        self.last_pass: dict[int, tuple[int, float]] = {}  # clone -> (passes, coordinator-up seconds since it moved)
        self.max_pass_gap = 0.0
        self.two_passes_at: dict[int, float] = {}  # pid -> its stale seconds when the second pass was seen
        self.overlap: dict[tuple[int, int], float] = collections.defaultdict(float)
        self.max_stale = 0.0
        self.seen: set[int] = set()
        self.reported: set[tuple[str, Any]] = set()  # one violation per agent (or pair), not one per tick
        self.max_agents = 0
        self.error: BaseException | None = None

    def run(self) -> None:
        readers = [LeaseReader(clone) for clone in self.world.clones]
        last = time.monotonic()
        try:
            while not self.stop_event.wait(self.period):
                now = time.monotonic()
                self.check(readers, now - last)
                last = now
        except BaseException as error:  # noqa: BLE001 - reported by the run
            self.error = error
            self.ledger.log(f"monitor crashed: {error!r}")
        finally:
            for reader in readers:
                reader.close()

    def check(self, readers: list[LeaseReader], dt: float) -> None:
        live = [r for r in agent_records(self.world.agents) if proc_alive(r["pid"]) and is_agent(r["pid"])]
        self.max_agents = max(self.max_agents, len(live))
        alive = {r["pid"] for r in live}
        for pid in [pid for pid in self.stale_for if pid not in alive]:
            # a stale agent that ended (killed by its coordinator, or by a fault): I2 held for it
            self.ledger.count("I2:stale-agent-ended")
            del self.stale_for[pid]
            self.stale_mark.pop(pid, None)
            self.two_passes_at.pop(pid, None)
        done = {}
        if self.passes is not None:
            for clone in range(len(self.world.clones)):
                done[clone] = self.passes(clone)
                count, idle = self.last_pass.get(clone, (-1, 0.0))
                idle = 0.0 if done[clone] != count else idle + (dt if self.up(clone) else 0.0)
                self.last_pass[clone] = (done[clone], idle)
                self.max_pass_gap = max(self.max_pass_gap, idle)
        for agent in live:
            if agent["pid"] not in self.seen:
                self.seen.add(agent["pid"])
                self.ledger.count("agents-started")
        by_item: dict[str, list[dict[str, Any]]] = collections.defaultdict(list)
        for agent in live:
            by_item[agent["item"]].append(agent)
            clone = self.world.clone_of(agent["cwd"])
            if clone is None:
                continue
            if is_current(readers[clone].lease(agent["item"]), int(agent["fence"])):
                continue
            pid = agent["pid"]
            if self.up(clone) and proc_state(pid) != "T":
                self.stale_for[pid] += dt
            self.max_stale = max(self.max_stale, self.stale_for[pid])
            mark = self.stale_mark.setdefault(pid, (done.get(clone, 0), self.stale_for[pid]))
            since = done.get(clone, 0) - mark[0]
            # Two passes completed since: the second began after the staleness showed in this clone's
            # ref, and the kill takes effect at once (process group) -- a second on top for it to show.
            if since >= 2:
                self.two_passes_at.setdefault(pid, self.stale_for[pid])
            passed = self.passes is None or (pid in self.two_passes_at
                                             and self.stale_for[pid] - self.two_passes_at[pid] > 1.0)
            idle = self.last_pass.get(clone, (0, 0.0))[1]
            if ("I2", pid) in self.reported:
                continue
            where = f"agent pid {pid} ({agent['execution']}, item {agent['item']}, fence {agent['fence']}, clone{clone})"
            if self.stale_for[pid] > self.grace and passed:
                self.reported.add(("I2", pid))
                self.ledger.violate("I2", f"{where} still alive {self.stale_for[pid]:.1f} s after its fence stopped "
                                          f"being current, {since} coordinator passes since")
            elif self.passes is not None and idle > self.stuck:
                self.reported.add(("I2", pid))
                self.ledger.violate("I2", f"{where} stale for {self.stale_for[pid]:.1f} s; the clone's coordinator, "
                                          f"meant to run, completed no pass for {idle:.1f} s")
        for item, agents in by_item.items():
            if len(agents) < 2:
                continue
            fences = collections.Counter(int(a["fence"]) for a in agents)
            for fence, n in fences.items():
                if n > 1 and ("I1", (item, fence)) not in self.reported:
                    self.reported.add(("I1", (item, fence)))
                    same = [(a["pid"], a["execution"], a["cwd"].rsplit("/", 1)[-1]) for a in agents
                            if int(a["fence"]) == fence]
                    self.ledger.violate("I1", f"{n} live agents on item {item} under one fence {fence}: {same}")
            pids = sorted(a["pid"] for a in agents)
            key = (pids[0], pids[-1])
            self.overlap[key] += dt
            if all(self.stale_for.get(a["pid"], 0.0) <= self.grace for a in agents):
                continue
            if self.overlap[key] > 4 * self.grace and ("I1", key) not in self.reported:
                self.reported.add(("I1", key))
                self.ledger.violate("I1", f"{len(agents)} live agents on item {item} for {self.overlap[key]:.1f} s: "
                                          f"{[(a['pid'], a['fence'], a['execution']) for a in agents]}")

    def final(self) -> None:
        """One last look (after the settle): no two live agents on one item, none stale."""
        readers = [LeaseReader(clone) for clone in self.world.clones]
        try:
            self.check(readers, 0.0)
            live = [r for r in agent_records(self.world.agents) if proc_alive(r["pid"]) and is_agent(r["pid"])]
            for agent in live:
                clone = self.world.clone_of(agent["cwd"])
                if clone is not None and not is_current(readers[clone].lease(agent["item"]), int(agent["fence"])):
                    self.ledger.violate("I2", f"after the settle, agent pid {agent['pid']} ({agent['execution']}, "
                                              f"item {agent['item']}, fence {agent['fence']}, clone{clone}) "
                                              "is alive under a fence that is not current")
            for item, n in collections.Counter(a["item"] for a in live).items():
                if n > 1:
                    self.ledger.violate("I1", f"after the settle, {n} live agents on item {item}")
        finally:
            for reader in readers:
                reader.close()


# --- I3: acknowledged means landed, once ------------------------------------------------------------


def command_id_counts(repo: Path) -> collections.Counter[str]:
    out = git_out(repo, "log", "--format=%(trailers:key=Command-Id,valueonly,separator=%x2C)", STATE)
    return collections.Counter(line.strip() for line in out.splitlines() if line.strip())


def refused_on_record(world: World) -> set[str]:
    """The command ids each clone keeps in ``refused.jsonl``: what ``gw status`` reports refused to the
    client after a ``gw sync`` turned them away (a local command acknowledged offline, decided later)."""
    import json

    found: set[str] = set()
    for clone in world.clones:
        path = clone / ".git" / "gitwork" / "refused.jsonl"
        if path.exists():
            for line in path.read_text().splitlines():
                with contextlib.suppress(ValueError, AttributeError):
                    found.add(json.loads(line).get("command_id"))
    return found


def check_acknowledged(world: World, ledger: Ledger) -> dict[str, int]:
    counts = command_id_counts(world.arbiter)
    ledger.refused(sorted(refused_on_record(world)))
    tally = collections.Counter[str]()
    for ack in ledger.acks:
        n = counts.get(ack.command_id, 0)
        if n == 1:
            tally["landed"] += 1
        elif n == 0 and ack.command_id in ledger.refused_ids:
            tally["reported-refused"] += 1
        elif n == 0:
            tally["lost"] += 1
            ledger.violate("I3", f"{ack.face} {ack.op} {ack.command_id} (clone{ack.clone}, acknowledged at "
                                 f"{ack.at:.2f} s) is not on the arbiter and was never reported refused")
        else:
            tally["duplicated"] += 1
            ledger.violate("I3", f"{ack.face} {ack.op} {ack.command_id} is on the arbiter {n} times")
    return dict(tally)


def delegation_records(repo: Path) -> collections.Counter[tuple[str, str]]:
    """(op, request id) of every ``delegation-sent``/``delegation-received`` record on the state ref."""
    import json

    found = collections.Counter[tuple[str, str]]()
    for line in git_out(repo, "log", "--format=%B", STATE).splitlines():
        if not line.startswith("Command: {") or '"op": "delegation-' not in line:
            continue
        with contextlib.suppress(ValueError, TypeError, KeyError):
            cmd = json.loads(line[len("Command: "):])
            found[(cmd["op"], json.loads(cmd["receipt"])["request"])] += 1
    return found


def check_delegations(world: World, ledger: Ledger) -> dict[str, int]:
    """Every delegation acknowledged to the sender (exit 0) is recorded once on each side."""
    records = delegation_records(world.arbiter)
    tally = collections.Counter[str]()
    for request, at in ledger.delegations:
        counts = {op: records.get((op, request), 0) for op in ("delegation-sent", "delegation-received")}
        if counts == {"delegation-sent": 1, "delegation-received": 1}:
            tally["delegation-landed"] += 1
        else:
            tally["delegation-bad"] += 1
            ledger.violate("I3", f"delegation {request} (acknowledged at {at:.2f} s) is on the arbiter as {counts}")
    return dict(tally)


# --- I4: every commit is its command's replay -------------------------------------------------------


def replay_mismatches(repo: Path | str, ref: str = STATE, *, limit: int | None = None) -> list[str]:
    """Re-apply each state commit's command with gitwork's engine to the commit's parent, at the
    commit's author time, and compare the tree it lands with the commit's tree.

    Works on a scratch copy of ``ref`` (replaying writes objects), with the settings of ``repo`` (the
    arbiter's roles). Returns one line per commit whose tree differs or whose command the engine
    refuses on replay; ``[]`` when every commit is what its command makes.
    """
    from gitwork import engine, layout, statecommit
    from gitwork.errors import GwError
    from gitwork.store import Repository, Store

    problems: list[str] = []
    with tempfile.TemporaryDirectory(prefix="gw-replay-") as scratch:
        subprocess.run(["git", "init", "-q", "--bare", scratch], check=True)
        for line in git_out(Path(repo), "config", "--get-regexp", r"^gitwork\.").splitlines():
            key, _, value = line.partition(" ")
            subprocess.run(["git", "config", key, value], cwd=scratch, check=True)
        subprocess.run(["git", "fetch", "-q", str(Path(repo).resolve()), f"+{ref}:{ref}"], cwd=scratch, check=True,
                       capture_output=True)
        commits = git_out(Path(scratch), "rev-list", "--reverse", "--parents", ref).split("\n")
        replay_repo = Repository.discover(scratch)
        store = Store(replay_repo, ref)
        try:
            for line in commits[: limit] if limit else commits:
                parts = line.split()
                if len(parts) < 2:
                    continue  # the root commit (gw init) has nothing to replay on
                commit, parent = parts[0], parts[1]
                if len(parts) > 2:
                    problems.append(f"{commit[:12]}: a merge on the state ref")
                    continue
                state = statecommit.read(store, commit)
                cmd = state.command
                if cmd is None or state.at is None:
                    problems.append(f"{commit[:12]}: no command document or author time")
                    continue
                try:
                    clean = engine.validate_command(dict(cmd))
                    base = store.snapshot(parent, at_tip=False)
                    outcome = engine.apply(base, clean, state.at, replay_repo.settings)
                    new = engine.land(store, base, clean, outcome, state.at)
                except GwError as error:
                    problems.append(f"{commit[:12]}: {cmd.get('op')} {cmd.get('id')} refused on replay: "
                                    f"{error.message}")
                    continue
                mine = store.snapshot(commit, at_tip=False).root
                replayed = store.snapshot(new, at_tip=False).root if new else base.root
                if mine != replayed:
                    differs = tree_difference(Path(scratch), mine, replayed, layout.command_path(clean["id"]))
                    if differs:
                        problems.append(f"{commit[:12]}: {cmd.get('op')} {cmd.get('id')} by {cmd.get('as')}: "
                                        f"its replay differs in {differs}")
        finally:
            store.close()
    return problems


def tree_difference(repo: Path, mine: str | None, replayed: str | None, record: str) -> list[str]:
    """The paths where two trees differ, leaving out what a replay cannot know: the digest of the
    command document *as first asked for* in its ``commands/`` record (format.md: only the machine
    that applied it first knows it). The record must otherwise be the same, and the replay's digest
    (of the recorded document) one of the original's."""
    import json

    out = git_out(repo, "diff-tree", "-r", "--name-only", "--no-commit-id", str(mine), str(replayed))
    paths = [p for p in out.splitlines() if p.strip()]
    if record in paths:
        ours = json.loads(git_out(repo, "cat-file", "blob", f"{mine}:{record}") or "{}")
        theirs = json.loads(git_out(repo, "cat-file", "blob", f"{replayed}:{record}") or "{}")
        digests_ok = set(theirs.pop("digests", [])) <= set(ours.pop("digests", []))
        if digests_ok and ours == theirs:
            paths.remove(record)
    return paths


# --- I5: sound and converged ------------------------------------------------------------------------


def fsck(repo: Path) -> str | None:
    done = subprocess.run(["git", "fsck", "--full", "--strict", "--no-dangling", "--no-progress"], cwd=repo,
                          capture_output=True, text=True, timeout=120, check=False)
    said = (done.stdout + done.stderr).strip()
    return None if done.returncode == 0 and "error" not in said.lower() else said[:500]


def check_sound(world: World, ledger: Ledger) -> None:
    for repo in [world.arbiter, *world.clones]:
        problem = fsck(repo)
        if problem:
            ledger.violate("I5", f"git fsck {repo.name}: {problem}")
    arbiter = world.tip()
    for n, clone in enumerate(world.clones):
        mine = world.tip(clone)
        if mine != arbiter:
            counts = git_out(clone, "rev-list", "--left-right", "--count", f"{mine}...{arbiter}").split() \
                if mine and arbiter else []
            where = (f"{counts[0]} local commits not on the arbiter, {counts[1]} of the arbiter's not here"
                     if len(counts) == 2 else "unrelated histories")
            ledger.violate("I5", f"clone{n} is at {str(mine)[:12]}, the arbiter at {str(arbiter)[:12]} ({where})")
    # What can stop every push while fetches work: a ref lock a killed git left on the arbiter.
    locks = sorted(str(p.relative_to(world.arbiter)) for p in world.arbiter.rglob("*.lock"))
    if locks:
        ledger.log(f"arbiter lock files after the settle: {locks}")


def json_or_none(text: str) -> Any:
    import json

    try:
        return json.loads(text) if text.strip() else None
    except ValueError:
        return None
