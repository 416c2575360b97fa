"""``gw coordinate``: keep this host's executions and their leases in step (docs/launch.md).

Each tick, for every live execution recorded on this host:

- it is brought up to date with its backend (``run.probe``): an exit is recorded, a process that is
  gone is ``lost``;
- a running one whose lease ended (taken over, revoked, released, handed off, expired, or a newer
  epoch) is killed and recorded ``stopped``: the fence rule applied to processes;
- a running one whose lease is live is renewed, as its holder and under its fence, once less than
  half of the lease's ttl is left (so an interval well under half the ttl never lets it lapse).
"""

from __future__ import annotations

import time

from ..errors import GwError
from ..ops.executions import LIVE
from . import backend as backends
from .run import _handle_of, _mark, host, probe, runs

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any


def _lease_ended(wp: Any, record: dict[str, Any]) -> str | None:
    """Why the execution's lease is over, or None while it is live for its holder."""
    lease = wp.lease(record["item"])
    if lease is None or lease.fence != record.get("fence"):
        return f"its lease (fence {record.get('fence')}) was replaced" + (f" by {lease.holder}'s (fence {lease.fence})"
                                                                         if lease else "")
    if not lease.is_active():
        return f"its lease was {lease.state}"
    if not lease.live_for_holder(wp.now(), wp.settings.clock_margin):
        return "its lease expired"
    return None


def _kill(wp: Any, record: dict[str, Any], why: str) -> dict[str, Any]:
    backend = backends.get(record["backend"], wp.repo)
    handle = record.get("handle") or _handle_of(backend, record["id"])
    if handle:
        backend.kill(record["id"], handle)
    return _mark(wp, record, "stopped", reason=f"coordinator: {why}"[:200])


def tick(wp: Any) -> list[dict[str, Any]]:
    """One pass over this host's live executions; what was done to each (``action``: exited, lost,
    failed, stopped, renewed, running, waiting)."""
    done: list[dict[str, Any]] = []
    for row in runs(wp):
        if row["state"] not in LIVE or row.get("host") != host():
            continue
        record = {"id": row["execution"], **{k: v for k, v in row.items() if k not in ("execution", "existing")}}
        entry = {"execution": record["id"], "item": record["item"]}
        try:
            record = probe(wp, record)
            if record["state"] != "running":
                done.append({**entry, "action": record["state"] if record["state"] not in LIVE else "waiting",
                             "code": record.get("code")})
                continue
            why = _lease_ended(wp, record)
            if why:
                _kill(wp, record, why)
                done.append({**entry, "action": "stopped", "reason": why})
                continue
            lease = wp.lease(record["item"])
            left = (lease.expires() - wp.now()).total_seconds()
            if left < lease.ttl / 2:
                wp.do("renew", item=record["item"], fence=record["fence"], **{"as": record["holder"]})
                done.append({**entry, "action": "renewed"})
            else:
                done.append({**entry, "action": "running"})
        except GwError as error:
            if error.code == 7 and record.get("state") == "running":  # the renewal found the lease gone
                _kill(wp, record, error.message)
                done.append({**entry, "action": "stopped", "reason": error.message})
            else:
                done.append({**entry, "action": "error", "error": error.kind, "message": error.message})
    return done


def loop(wp: Any, interval: float, report: Any) -> None:
    """Tick every ``interval`` seconds until interrupted; ``report(actions)`` after each tick."""
    while True:
        started = time.monotonic()
        report(tick(wp))
        time.sleep(max(0.0, interval - (time.monotonic() - started)))
