"""``gw cost``: the execution ledger totalled per item, agent or day (docs/launch.md, "The execution
ledger"). A read of the state ref only: every execution record with the reports its agent made
(``ops/ledger.py``), its start and its end.

An execution counts on the day it was reserved (``created_at``, UTC) and for its agent: the holder of
the lease it ran under (``holder``), else whoever ran ``gw run`` (``by``). Its wall time runs from
``running`` (``started_at``) to its end (``ended_at``), or to now while it runs.
"""

from __future__ import annotations

import datetime as _dt

from . import money
from .clock import format_instant, parse_instant
from .errors import Invalid

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, Iterable, Iterator

    from .engine import View
    from .workplane import Workplane

GROUPS = ("item", "agent", "day")


def records(wp: Workplane) -> Iterator[dict[str, Any]]:
    """Every execution record on the state ref."""
    from .codec import load_yaml
    from .records.executions import EXECUTIONS, checked

    snapshot = wp.context().snapshot
    for shard, entry in snapshot.tree(EXECUTIONS).items():
        for name, blob in snapshot.store.read_tree(entry.oid).items():
            path = f"{EXECUTIONS}/{shard}/{name}"
            yield checked(load_yaml(snapshot.store.read_blob(blob.oid), what=path), path)


def agent_of(record: dict[str, Any]) -> str:
    return str(record.get("holder") or record.get("by") or "")


def wall_seconds(record: dict[str, Any], now: _dt.datetime) -> int:
    """From ``running`` to the end (or now); 0 for one that never ran."""
    start = record.get("started_at")
    if not start:
        return 0
    try:
        began = parse_instant(str(start))
        ended = parse_instant(str(record["ended_at"])) if record.get("ended_at") else now
    except ValueError:
        return 0
    return max(0, int((ended - began).total_seconds()))


def cost(wp: Workplane, item: str | None = None, agent: str | None = None, since: str | None = None,
         by: str = "item") -> dict[str, Any]:
    """Totals of tokens, cost (USD text) and wall time (seconds), one row per ``by`` key, and in all."""
    from .codec import parse_duration

    if by not in GROUPS:
        raise Invalid(f"--by must be one of {', '.join(GROUPS)} (got {by[:40]!r})")
    now = wp.now()
    after = format_instant(now - _dt.timedelta(seconds=parse_duration(since))) if since else None
    item_id = wp.resolve(item) if item else None
    return totals(records(wp) if item_id is None else item_records(wp.context(), item_id), now, by, item_id,
                  agent, after)


def totals(found: Iterable[dict[str, Any]], now: _dt.datetime, by: str = "item", item_id: str | None = None,
           agent: str | None = None, after: str | None = None) -> dict[str, Any]:
    from .records.ledger import usage

    rows: dict[str, dict[str, Any]] = {}
    total = _row("total")
    for record in found:
        if item_id is not None and record.get("item") != item_id:
            continue
        if agent is not None and agent_of(record) != agent:
            continue
        if after is not None and str(record.get("created_at") or "") < after:
            continue
        key = {"item": str(record.get("item")), "agent": agent_of(record),
               "day": str(record.get("created_at") or "")[:10]}[by]
        used = usage(record)
        for row in (rows.setdefault(key, _row(key)), total):
            row["executions"] += 1
            row["tokens_in"] += used["tokens_in"]
            row["tokens_out"] += used["tokens_out"]
            row["reports"] += used["reports"]
            row["cost"] = money.text(money.stored(row["cost"]) + money.stored(used["cost"]))
            row["wall_seconds"] += wall_seconds(record, now)
    return {"by": by, "since": after, "rows": [rows[k] for k in sorted(rows)], "total": total}


def _row(key: str) -> dict[str, Any]:
    return {"key": key, "executions": 0, "reports": 0, "tokens_in": 0, "tokens_out": 0, "cost": "0",
            "wall_seconds": 0}


def item_records(ctx: View, item_id: str) -> list[dict[str, Any]]:
    """The item's execution records (by its events: no scan of every execution)."""
    from .records.executions import item_executions, load_execution

    return [r for r in (load_execution(ctx, e) for e in item_executions(ctx, item_id)) if r is not None]


def item_cost(ctx: View, item_id: str) -> dict[str, Any]:
    """One item's ledger for ``gw show`` and the board: its totals and its budget (``budget_spent`` once
    its executions' cost reached it)."""
    from .records.ledger import budget_state

    found = totals(item_records(ctx, item_id), ctx.now, item_id=item_id)["total"]
    state = budget_state(ctx, ctx.item(item_id)) or {}
    return {**{k: v for k, v in found.items() if k != "key"}, **state}


def cost_line(ledger: dict[str, Any]) -> str | None:
    """``0.6 USD of a 0.5 USD budget (budget spent); 300 tokens in, 120 out; 2 executions, 41s``, or None
    for an item with neither executions nor a budget."""
    if not ledger.get("executions") and "budget" not in ledger:
        return None
    text = f"{ledger['cost']} USD"
    if "budget" in ledger:
        text += f" of a {ledger['budget']} USD budget" + (" (budget spent)" if ledger["budget_spent"] else "")
    return (f"{text}; {ledger['tokens_in']} tokens in, {ledger['tokens_out']} out; {ledger['executions']} "
            f"execution{'s' if ledger['executions'] != 1 else ''}, {ledger['wall_seconds']}s")
