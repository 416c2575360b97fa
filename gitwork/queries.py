"""Read-side questions over the summary index: which items are ready, in which order."""

from __future__ import annotations

import datetime as _dt

from .clock import parse_instant
from .index import CREATED, DEPS, EXPIRES, ID, LEASE_STATE, PRIORITY, STATUS, Index
from .model import held_for_others

TYPE_CHECKING = False  # typing costs ~15 ms to import; annotations are strings anyway
if TYPE_CHECKING:
    from typing import Any


def lease_is_live(row: tuple[Any, ...], now: _dt.datetime, margin: int) -> bool:
    """Whether someone else still holds the item, by a taker's clock (expiry plus margin)."""
    expires = parse_instant(row[EXPIRES]) if row[LEASE_STATE] == "active" and row[EXPIRES] else None
    return held_for_others(row[LEASE_STATE], expires, now, margin)


def order_key(row: tuple[Any, ...]) -> tuple[Any, ...]:
    """Best first: priority (0 is highest), then oldest, then id for a stable order."""
    return (row[PRIORITY], row[CREATED], row[ID])


def ready(index: Index, now: _dt.datetime, margin: int) -> list[tuple[Any, ...]]:
    """Open items with no live lease whose dependencies are all done, best first.

    An item left in progress by a holder whose lease expired (plus the margin) is ready again:
    a crashed worker must not strand its item until someone notices.
    """
    rows = index.items()
    out = []
    for row in rows.values():
        if row[STATUS] not in ("open", "in_progress") or lease_is_live(row, now, margin):
            continue
        if row[STATUS] == "in_progress" and row[LEASE_STATE] != "active":
            continue
        if all(rows.get(dep, (None,) * 14)[STATUS] == "done" for dep in row[DEPS]):
            out.append(row)
    out.sort(key=order_key)
    return out
