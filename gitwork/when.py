"""A point in time as people write it on the command line: ``2026-12-01``, ``2026-12-01T09:00:00Z``,
``7d``/``2w``/``12h``/``90m`` back from now, ``today`` or ``yesterday`` (00:00 UTC). ``now`` is the
caller's, read from the one clock (clock.py), so tests pin it with freezegun or ``GW_NOW``."""

from __future__ import annotations

import datetime as _dt
import re

from .errors import Invalid

_BACK = re.compile(r"^(\d{1,6})([wdhm])$")
_UNIT = {"w": 7 * 86400, "d": 86400, "h": 3600, "m": 60}


def instant(text: str, now: _dt.datetime, flag: str) -> str:
    """``text`` as the canonical instant text (which sorts as time does: the cache compares it in SQL)."""
    from .clock import format_instant, parse_instant

    raw = str(text).strip().lower()
    midnight = now.replace(hour=0, minute=0, second=0, microsecond=0)
    if raw == "today":
        return format_instant(midnight)
    if raw == "yesterday":
        if midnight.date() == _dt.date.min:  # a clock pinned at year 1 (GW_NOW): no day before it
            raise Invalid(f"{flag} yesterday: further back than the calendar goes")
        return format_instant(midnight - _dt.timedelta(days=1))
    back = _BACK.match(raw)
    if back:
        try:
            return format_instant(now - _dt.timedelta(seconds=int(back.group(1)) * _UNIT[back.group(2)]))
        except OverflowError:  # before year 1 (999999w): no instant holds it
            raise Invalid(f"{flag} {str(text)[:40]!r}: further back than the calendar goes") from None
    if re.match(r"^\d{4}-\d{2}-\d{2}", raw):
        try:
            return format_instant(parse_instant(text.strip()))
        except ValueError:
            pass
    raise Invalid(f"{flag} {str(text)[:40]!r}: a date (2026-12-01), an instant (2026-12-01T09:00:00Z), "
                  "a time back from now (7d, 2w, 12h) or today/yesterday")


def filters(now: _dt.datetime, created_after: str | None = None, created_before: str | None = None,
            updated_after: str | None = None, updated_before: str | None = None) -> tuple[tuple[str, str, str], ...]:
    """The date filters as ``(column, operator, instant)`` for ``queries.statement``: after is from that
    instant on, before is strictly before it."""
    out = []
    for value, column, op, flag in ((created_after, "created", ">=", "--created-after"),
                                    (created_before, "created", "<", "--created-before"),
                                    (updated_after, "updated", ">=", "--updated-after"),
                                    (updated_before, "updated", "<", "--updated-before")):
        if value is not None:
            out.append((column, op, instant(value, now, flag)))
    return tuple(out)
