"""What every client was told: the acknowledged commands (I3's input), the refusals, the events.

Thread-safe: actors run in threads and append here. ``events`` is the run's log (faults, actions,
violations), printed on failure so a seed's run can be read back.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any


@dataclass
class Ack:
    """A command acknowledged to a client: exit 0 / HTTP 200 / MCP success, with its command id."""

    face: str
    command_id: str
    op: str
    clone: int
    at: float
    result: dict[str, Any]


@dataclass
class Ledger:
    t0: float = field(default_factory=time.monotonic)
    acks: list[Ack] = field(default_factory=list)
    refused_ids: set[str] = field(default_factory=set)  # reported refused to a client afterwards (gw sync)
    events: list[str] = field(default_factory=list)
    counts: dict[str, int] = field(default_factory=dict)
    violations: list[str] = field(default_factory=list)
    delegations: list[tuple[str, float]] = field(default_factory=list)  # (request id, when) acknowledged
    # (execution, report id, cost) of each exec-report acknowledged to a client (I8: found once)
    reports: list[tuple[str, str, Decimal]] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def now(self) -> float:
        return time.monotonic() - self.t0

    def log(self, text: str) -> None:
        with self._lock:
            self.events.append(f"{self.now():7.2f} {text}")

    def count(self, key: str, n: int = 1) -> None:
        with self._lock:
            self.counts[key] = self.counts.get(key, 0) + n

    def ack(self, face: str, doc: dict[str, Any], clone: int) -> None:
        """Record ``doc`` (a face's success JSON) if it acknowledges a command that changed the state."""
        cid, op = doc.get("command_id"), doc.get("op")
        if not isinstance(cid, str) or not isinstance(op, str):
            return
        if doc.get("duplicate") or doc.get("commit") is None:
            return  # an answer already there, or a no-op: nothing new to find on the arbiter
        with self._lock:
            self.acks.append(Ack(face, cid, op, clone, self.now(), doc))
            self.counts[f"ack:{face}:{op}"] = self.counts.get(f"ack:{face}:{op}", 0) + 1

    def refused(self, ids: list[str]) -> None:
        with self._lock:
            self.refused_ids.update(ids)

    def violate(self, invariant: str, text: str) -> None:
        line = f"{invariant}: {text}"
        with self._lock:
            if line not in self.violations:
                self.violations.append(line)
                self.events.append(f"{self.now():7.2f} VIOLATION {line}")
