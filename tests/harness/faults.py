"""The faults: kill -9 of any process the harness runs (and of the agents), the arbiter (``git daemon``)
stopped and started again, SIGSTOP/SIGCONT of holders (agents) and coordinators.

Each kind is switchable (``kinds``); every fault is logged in the ledger with its time, so a failing
seed's run can be read back.
"""

from __future__ import annotations

import contextlib
import os
import random
import signal
import threading
from typing import Any

from .actors import Coordinators
from .ledger import Ledger
from .world import World, agent_records, is_agent, proc_alive

KINDS = ("kill", "kill-agent", "arbiter", "stop", "stop-agent")
# How often each kind is picked: the arbiter's outages are rarer (each one makes every arbiter command
# of its length answer 12), so the rest of the system gets to run between them.
WEIGHTS = {"kill": 3.0, "kill-agent": 2.0, "arbiter": 0.7, "stop": 2.0, "stop-agent": 1.5}
KILLABLE = ("cli", "sync", "run", "coordinator", "serve", "mcp")


class Faults(threading.Thread):
    def __init__(self, world: World, ledger: Ledger, rng: random.Random, stop: threading.Event,
                 coordinators: Coordinators | None, kinds: tuple[str, ...] = KINDS,
                 every: tuple[float, float] = (0.6, 2.0), limit: int = 10_000) -> None:
        super().__init__(name="faults", daemon=True)
        self.world, self.ledger, self.rng, self.stop_event = world, ledger, rng, stop
        self.coordinators, self.kinds, self.every, self.limit = coordinators, kinds, every, limit
        self.arbiter_down = False
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            for _ in range(self.limit):
                if self.stop_event.wait(self.rng.uniform(*self.every)):
                    break
                if self.kinds:
                    weights = [WEIGHTS.get(kind, 1.0) for kind in self.kinds]
                    kind = self.rng.choices(self.kinds, weights=weights)[0]
                    getattr(self, "fault_" + kind.replace("-", "_"))()
        except BaseException as error:  # noqa: BLE001 - reported by the run
            self.error = error
            self.ledger.log(f"faults crashed: {error!r}")
        finally:
            if self.arbiter_down:
                self.world.daemon.start()
                self.arbiter_down = False

    def _mark(self, clone: Any) -> None:
        if self.coordinators is not None and clone is not None:
            with self.coordinators.lock:
                self.coordinators.faulted.add(clone)

    def fault_kill(self) -> None:
        victims = self.world.procs.live()
        victims = [p for p in victims if p.kind in KILLABLE]
        if not victims:
            return
        victim = self.rng.choice(victims)
        if victim.kind == "coordinator":
            self._mark(victim.clone)
        self.world.procs.signal(victim, signal.SIGCONT)
        self.world.procs.signal(victim, signal.SIGKILL)
        self.ledger.count(f"fault:kill:{victim.kind}")
        self.ledger.log(f"fault: kill -9 {victim.name} (pid {victim.popen.pid})")

    def _agent(self) -> int | None:
        live = [r["pid"] for r in agent_records(self.world.agents) if proc_alive(r["pid"]) and is_agent(r["pid"])]
        return self.rng.choice(live) if live else None

    def fault_kill_agent(self) -> None:
        pid = self._agent()
        if pid is None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
        self.ledger.count("fault:kill:agent")
        self.ledger.log(f"fault: kill -9 agent {pid}")

    def fault_arbiter(self) -> None:
        self.world.daemon.stop()
        self.arbiter_down = True
        self.ledger.count("fault:arbiter")
        down = self.rng.uniform(0.3, 2.0)
        self.ledger.log(f"fault: arbiter stopped for {down:.1f} s")
        self.stop_event.wait(down)
        self.world.daemon.start()
        self.arbiter_down = False
        self.ledger.log("fault: arbiter started again")

    def fault_stop(self) -> None:
        victims = [p for p in self.world.procs.live("coordinator") if not p.stopped]
        if not victims:
            return
        victim = self.rng.choice(victims)
        self._mark(victim.clone)
        pause = self.rng.uniform(0.3, 3.0)
        self.world.procs.signal(victim, signal.SIGSTOP)
        self.ledger.count("fault:stop:coordinator")
        self.ledger.log(f"fault: SIGSTOP {victim.name} for {pause:.1f} s")
        self.stop_event.wait(pause)
        self.world.procs.signal(victim, signal.SIGCONT)
        if self.coordinators is not None:
            with self.coordinators.lock:
                if victim.alive:
                    self.coordinators.faulted.discard(victim.clone)  # running again; a death is the supervisor's

    def fault_stop_agent(self) -> None:
        pid = self._agent()
        if pid is None:
            return
        pause = self.rng.uniform(0.3, 3.0)
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGSTOP)
        self.ledger.count("fault:stop:agent")
        self.ledger.log(f"fault: SIGSTOP agent {pid} for {pause:.1f} s")
        self.stop_event.wait(pause)
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGCONT)
