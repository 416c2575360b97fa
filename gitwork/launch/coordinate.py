"""``gw coordinate``: keep this host's executions and their leases in step (docs/launch.md).

Each tick, for every live execution recorded on this host:

- it is brought up to date with its backend (``run.probe``): an exit is recorded, a process that is
  gone is ``lost``;
- a running one whose lease ended (taken over, revoked, released, handed off, expired, or a newer
  epoch) is killed and recorded ``stopped``: the fence rule applied to processes;
- a running one whose lease is live is renewed, as its holder and under its fence, once less than
  half of the lease's ttl is left (so an interval well under half the ttl never lets it lapse);
- an execution that cannot be reconciled (its backend errs) ``failures`` passes in a row has its
  item handed off, fenced on its lease, with reason ``reconcile-failure``.
"""

from __future__ import annotations

import os
import time

from ..errors import GwError
from ..ops.executions import LIVE
from . import backend as backends
from .paths import executions_dir
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


def _streak(wp: Any, execution_id: str, failed: bool) -> int:
    """Consecutive reconcile failures of an execution, kept in its folder so ``--once`` runs count too."""
    path = os.path.join(executions_dir(wp.repo), execution_id, "reconcile-failures")
    if not failed:
        if os.path.exists(path):
            os.unlink(path)
        return 0
    try:
        with open(path) as read:
            count = int(read.read().strip() or 0) + 1
    except (FileNotFoundError, ValueError):
        count = 1
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path + ".tmp", "w") as out:
        out.write(f"{count}\n")
    os.replace(path + ".tmp", path)
    return count


def _hand_off(wp: Any, record: dict[str, Any], why: str) -> dict[str, Any]:
    """A streak of failures: hand the item off, fenced on the execution's lease (a newer lease is not
    touched: the fence is stale then), so another worker may take it at once."""
    wp.do("handoff", item=record["item"], reason="reconcile-failure", fence=record.get("fence"),
          message=f"coordinator on {host()}: execution {record['id']} could not be reconciled: {why}"[:500],
          **{"as": record.get("holder")})
    try:  # the lease is gone now: stop the process if the backend lets us (else the next pass does)
        _kill(wp, record, "reconcile-failure handoff")
    except GwError:
        pass
    return {"action": "handed-off", "reason": why}


def tick(wp: Any, failures: int = 3) -> list[dict[str, Any]]:
    """One pass over this host's live executions; what was done to each (``action``: exited, lost,
    failed, stopped, renewed, running, waiting, error, handed-off). ``failures`` consecutive errors
    reconciling one execution hand its item off with reason ``reconcile-failure``."""
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
                continue
            streak = _streak(wp, record["id"], True)
            if streak >= failures and record.get("fence") is not None:
                try:
                    done.append({**entry, **_hand_off(wp, record, error.message), "streak": streak})
                    continue
                except GwError as refused:  # the lease ended meanwhile: nothing to hand off
                    error = refused
            done.append({**entry, "action": "error", "error": error.kind, "message": error.message, "streak": streak})
            continue
        _streak(wp, record["id"], False)
    return done


def loop(wp: Any, interval: float, report: Any, failures: int = 3) -> None:
    """Tick every ``interval`` seconds until interrupted; ``report(actions)`` after each tick."""
    while True:
        started = time.monotonic()
        report(tick(wp, failures))
        time.sleep(max(0.0, interval - (time.monotonic() - started)))
