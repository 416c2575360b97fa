"""One seeded harness run: build the world, run the actors and faults for a bounded time, settle, check.

``Switches`` turns each actor and fault on or off (the integrator bisects with them); ``GW_HARNESS_OFF``
(comma-separated names, e.g. ``arbiter,stop-agent,mcp``) switches some off from the environment, and
``GW_HARNESS_CLONES`` sets the number of clones.
Everything the run starts is killed at the end, even when a check or the run itself fails.
"""

from __future__ import annotations

import dataclasses
import os
import random
import signal
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from conftest import gw_here

from . import history, invariants, webhooks
from .actors import (
    ArbiterRestClient,
    CliWorker,
    Coordinators,
    Launcher,
    McpClient,
    Publisher,
    Reporter,
    RestClient,
    Syncer,
)
from .faults import KINDS, Faults
from .ledger import Ledger
from .webhooks import Receiver
from .world import MARGIN, World, live_agents, wait_until

ACTORS = ("cli", "sync", "tmux", "subprocess", "coordinate", "rest", "rest-arbiter", "mcp", "delegate", "report",
          "publish")


@dataclass
class Switches:
    actors: tuple[str, ...] = ACTORS
    faults: tuple[str, ...] = KINDS
    clones: int = 3
    items: int = 6
    workers: int = 2
    launchers: int = 2
    interval: float = 1.0  # the coordinators' pass interval
    slack: float = 6.0  # I2's slack over one interval on a loaded 2-core machine
    hook: bool = True
    budget: str | None = "0.1"  # USD, of the first agent item (I8: its launches stop once its agents report that)

    @classmethod
    def from_env(cls, **overrides: Any) -> Switches:
        if os.environ.get("GW_HARNESS_CLONES"):  # e.g. 1: no two clones share a host's coordinator lease
            overrides.setdefault("clones", int(os.environ["GW_HARNESS_CLONES"]))
        switches = cls(**overrides)
        off = {name.strip() for name in os.environ.get("GW_HARNESS_OFF", "").split(",") if name.strip()}
        unknown = off - set(ACTORS) - set(KINDS) - {"hook"}
        if unknown:
            raise ValueError(f"GW_HARNESS_OFF names unknown actors/faults: {sorted(unknown)}")
        return dataclasses.replace(switches, actors=tuple(a for a in switches.actors if a not in off),
                                   faults=tuple(f for f in switches.faults if f not in off),
                                   hook=switches.hook and "hook" not in off)


@dataclass
class Report:
    seed: int
    seconds: float
    violations: list[str]
    counts: dict[str, int]
    acknowledged: dict[str, int]
    replay_problems: list[str]
    commits: int
    max_live_agents: int
    events: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)

    @property
    def broken(self) -> list[str]:
        """The invariants that broke (I1..I5, faces)."""
        return sorted({v.split(":", 1)[0] for v in self.violations})

    def summary(self) -> str:
        lines = [(f"harness seed {self.seed}: {self.seconds:.1f} s, {self.commits} commits on the arbiter, "
                  f"acknowledged {self.acknowledged}, max live agents {self.max_live_agents}"),
                 f"replay with GW_HARNESS_SEED={self.seed}"]
        lines += [f"  VIOLATION {v}" for v in self.violations[:40]]
        if len(self.violations) > 40:
            lines.append(f"  ... {len(self.violations) - 40} more")
        lines += [f"  ERROR {e}" for e in self.errors]
        return "\n".join(lines)


def sync_all(world: World, ledger: Ledger, rounds: int = 2) -> None:
    """``gw sync`` in every clone, ``rounds`` times (a clone's replay lands after the others' first
    round); a sync the arbiter did not answer (12) is retried, bounded; refusals are recorded."""
    for _round in range(rounds):
        for n, clone in enumerate(world.clones):
            for _attempt in range(4):  # 12 (unreachable): the daemon may still be coming up
                # in this process (conftest's gw_here: no interpreter start per call); nothing else of
                # the harness runs in this process by now
                done = gw_here(clone, "sync", "--json", "--as", "settle")
                if done.returncode != 12:
                    break
                ledger.log(f"settle: sync clone{n} -> 12, again: {done.stdout.strip()[:200]}")
                time.sleep(1.0)
            if done.returncode != 0:
                ledger.log(f"settle: sync clone{n} -> {done.returncode}: {done.stdout.strip()[:300]}")
            with_refused = invariants.json_or_none(done.stdout)
            if isinstance(with_refused, dict) and with_refused.get("refused"):
                ledger.refused([r["command_id"] for r in with_refused["refused"] if "command_id" in r])


def settle(world: World, ledger: Ledger, switches: Switches, coordinators: Coordinators | None = None) -> None:
    """Every process continued, the arbiter up and idle, ``gw sync`` in every clone (so each learns
    the fences the others changed), then the coordinators get two passes each to kill what is stale
    (counted in their completed passes, however long a pass takes on a loaded machine; bounded)."""
    world.procs.continue_all()
    if world.daemon.proc is None:
        world.daemon.start()
    world.daemon.settle(timeout=60)
    sync_all(world, ledger, rounds=1)
    time.sleep(switches.interval)
    if coordinators is None:
        time.sleep(switches.interval + 3.0)
        return
    marks = {clone: coordinators.passes(clone) for clone in range(len(world.clones))}
    deadline = time.monotonic() + 60.0
    while time.monotonic() < deadline:
        coordinators.step()  # one that died is started again
        if all(coordinators.passes(clone) >= mark + 2 for clone, mark in marks.items()):
            break
        time.sleep(0.2)
    else:
        ledger.log(f"settle: the coordinators did not complete two passes each within 60 s: "
                   f"{ {c: coordinators.passes(c) - m for c, m in marks.items()} }")
    time.sleep(1.0)  # the kill of the last pass shows


def quiesce(world: World, ledger: Ledger) -> None:
    """The long-lived writers stopped (coordinators with SIGTERM: they release their lease on the way
    out; servers killed), then every clone synced twice: nothing writes any more, so every clone
    must be at the arbiter's tip (I5) and every acknowledged command on it (I3)."""
    for proc in world.procs.live("coordinator"):
        world.procs.signal(proc, signal.SIGTERM)
    for proc in world.procs.live("coordinator"):
        try:
            proc.popen.wait(timeout=15)
        except Exception:  # noqa: BLE001 - a coordinator that does not stop is killed, and said
            ledger.log(f"settle: {proc.name} did not stop on SIGTERM within 15 s; killed")
    world.procs.kill_all()
    world.daemon.settle(timeout=60)
    sync_all(world, ledger, rounds=2)


def run_once(root: Path, seed: int, seconds: float, switches: Switches | None = None) -> Report:
    switches = switches or Switches.from_env()
    rng = random.Random(seed)
    ledger = Ledger()
    started = time.monotonic()
    world = World(root, clones=switches.clones, items=switches.items, hook=switches.hook, budget=switches.budget,
                  code="publish" in switches.actors)
    stop = threading.Event()
    threads: list[Any] = []
    errors: list[str] = []
    monitor = None
    replay: list[str] = []
    acknowledged: dict[str, int] = {}
    receiver: Receiver | None = None
    try:
        ledger.log(f"world ready in {time.monotonic() - started:.1f} s: {switches}")
        sub = lambda: random.Random(rng.getrandbits(64))
        coordinators = None
        if "coordinate" in switches.actors:
            coordinators = Coordinators(world, ledger, sub(), stop, "coordinators", interval=switches.interval)
            threads.append(coordinators)
        if "cli" in switches.actors:
            threads += [CliWorker(world, ledger, sub(), stop, f"w{n}", pause=(0.2, 0.8)) for n in range(switches.workers)]
        if "sync" in switches.actors:
            threads.append(Syncer(world, ledger, sub(), stop, "syncer", pause=(0.3, 1.0)))
        backends = tuple(b for b in ("tmux", "subprocess") if b in switches.actors)
        if backends:
            threads += [Launcher(world, ledger, sub(), stop, f"l{n}", backends=backends, pause=(0.5, 2.0))
                        for n in range(switches.launchers)]
        if "rest" in switches.actors:
            receiver = Receiver()
            threads.append(RestClient(world, ledger, sub(), stop, "resty", clone=1 % switches.clones,
                                      webhook=receiver))
        if "mcp" in switches.actors:
            threads.append(McpClient(world, ledger, sub(), stop, "mcpy", clone=2 % switches.clones))
        if "delegate" in switches.actors and switches.clones >= 2:
            from .delegation import Delegator

            threads.append(Delegator(world, ledger, sub(), stop, "laptop", pause=(1.0, 3.0)))
        if "report" in switches.actors:
            threads.append(Reporter(world, ledger, sub(), stop, "reporter", pause=(1.0, 3.0)))
        if "publish" in switches.actors:  # one session queued (six gw starts), in four tries at most
            threads.append(Publisher(world, ledger, sub(), stop, "pub", limit=4, pause=(0.5, 2.0)))
        faults = Faults(world, ledger, sub(), stop, coordinators, kinds=switches.faults)
        threads.append(faults)
        if "rest-arbiter" in switches.actors:  # the command service: gw serve on the arbiter's own repository
            # (made after the others, so every other actor's and the faults' seeded choices stay as they were)
            threads.append(ArbiterRestClient(world, ledger, sub(), stop, "restarb", clone=-1, pause=(0.2, 0.6)))
        up = (lambda clone: coordinators.up(clone)) if coordinators else (lambda clone: False)
        monitor = invariants.Monitor(world, ledger, stop, up=up, interval=switches.interval, slack=switches.slack,
                                     passes=coordinators.passes if coordinators else None)
        for thread in threads:
            thread.start()
        monitor.start()
        stop.wait(seconds)
        stop.set()
        # A call in flight when the time is up is not waited for (up to GW_TIMEOUT under load): what
        # it was told is not acknowledged, and a kill -9 is one more fault the settle must survive.
        deadline = time.monotonic() + 3.0
        for thread in threads:
            thread.join(timeout=max(0.0, deadline - time.monotonic()))
        for proc in world.procs.live():
            if proc.kind in ("cli", "sync", "run"):
                world.procs.signal(proc, signal.SIGCONT)
                world.procs.signal(proc, signal.SIGKILL)
        for thread in threads:
            thread.join(timeout=60)
            if thread.is_alive():
                errors.append(f"{thread.name} did not stop within 60 s")
            if getattr(thread, "error", None) is not None:
                errors.append(f"{thread.name}: {thread.error!r}")
        # The coordinators keep running through the settle (they must still kill what is stale).
        monitor.join(timeout=30)
        if monitor.error is not None:
            errors.append(f"monitor: {monitor.error!r}")
        if coordinators is not None:
            coordinators.faulted.clear()
            for _ in range(3):
                coordinators.step()
        settle(world, ledger, switches, coordinators)
        if "publish" in switches.actors:  # what is still queued is landed or sent back, with no fault
            # a publisher the faults killed holds its lease (10 s) until it expires: 75 till then
            deadline = time.monotonic() + 25.0
            while True:
                done = gw_here(world.clones[0], "queue", "work", "--once", "--ttl", "10s", "--as", "publisher",
                               "--json")
                if done.returncode != 75 or time.monotonic() > deadline:
                    break
                time.sleep(1.0)
            said = invariants.json_or_none(done.stdout) or {}
            ledger.log(f"settle: queue work -> {done.returncode}: {[h.get('outcome') for h in said.get('handled') or ()]}")
            for handled in said.get("handled") or ():
                ledger.count(f"queue:settle:{handled.get('outcome')}")
        monitor.final()
        ledger.count("I2:max-stale-ms", int(monitor.max_stale * 1000))
        ledger.count("I2:max-pass-gap-ms", int(monitor.max_pass_gap * 1000))
        quiesce(world, ledger)
        acknowledged = invariants.check_acknowledged(world, ledger)
        acknowledged.update(invariants.check_delegations(world, ledger))
        replay = invariants.replay_mismatches(world.arbiter)
        for problem in replay:
            ledger.violate("I4", problem)
        history.check_all(history.extract(world.arbiter, margin=int(MARGIN.rstrip("s"))), ledger,
                          moves=world.code_moves() if "publish" in switches.actors else None,
                          failing=[c for c in world.code_moves() if world.red(c)])
        invariants.check_sound(world, ledger)
        if receiver is not None:
            with receiver.lock:
                posts = list(receiver.posts)
            webhooks.check(posts, world.clones[1 % switches.clones], ledger)
    finally:
        stop.set()
        world.close()
        if receiver is not None:
            receiver.close()
        # Teardown is part of the contract: nothing the run started outlives it.
        leftovers = [f"{p.name} (pid {p.popen.pid})" for p in world.procs.all if p.alive]
        leftovers += [f"agent pid {pid}" for pid in live_agents(world.agents)]
        if leftovers:
            errors.append(f"left running after teardown: {leftovers}")
    commits = int(invariants.git_out(world.arbiter, "rev-list", "--count", invariants.STATE).strip() or 0)
    return Report(seed, time.monotonic() - started, list(ledger.violations), dict(sorted(ledger.counts.items())),
                  acknowledged, replay, commits, monitor.max_agents if monitor else 0, list(ledger.events), errors)


__all__ = ["ACTORS", "KINDS", "Report", "Switches", "run_once", "wait_until"]
