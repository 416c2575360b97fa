"""The only source of "now" in gitwork.

Everything that needs the time calls :func:`now`. Tests drive it with freezegun (which patches
``datetime``); processes started by tests can be pinned with ``GW_NOW`` (an ISO-8601 instant),
because freezegun cannot reach into a child process.
"""

from __future__ import annotations

import datetime as _dt
import os

UTC = _dt.timezone.utc


def now() -> _dt.datetime:
    """The current instant, timezone-aware, UTC, whole seconds.

    ``GW_NOW``, when set, must be an ISO-8601 instant: anything else (``yesterday``, a blank value) is
    refused (exit 5) rather than silently replaced by the real time.
    """
    pinned = os.environ.get("GW_NOW")
    if pinned is None:
        return _dt.datetime.now(UTC).replace(microsecond=0)
    try:
        return parse_instant(pinned)
    except ValueError:
        from .errors import Invalid

        shown = repr(pinned[:40]) + ("..." if len(pinned) > 40 else "")
        raise Invalid(f"GW_NOW must be an ISO-8601 instant such as 2025-03-01T09:00:00Z (got {shown})") from None


def parse_instant(text: str) -> _dt.datetime:
    """An ISO-8601 instant (``Z`` or an offset; none means UTC); ``ValueError`` for anything else."""
    if not isinstance(text, str) or not text.strip() or len(text) > 64:
        raise ValueError(f"not an instant: {str(text)[:40]!r}")
    try:
        value = _dt.datetime.fromisoformat(text.strip().replace("Z", "+00:00"))
        if value.tzinfo is None:
            value = value.replace(tzinfo=UTC)
        return value.astimezone(UTC).replace(microsecond=0)
    except OverflowError as exc:  # e.g. year 1 with a positive offset
        raise ValueError(f"instant out of range: {text[:40]!r}") from exc


def format_instant(value: _dt.datetime) -> str:
    # Four digits of year always (strftime's %Y writes year 999 as "999"): the text sorts as time does,
    # which the read cache's date filters rely on (SQL compares it as text).
    v = value.astimezone(UTC)
    return f"{v.year:04d}-{v.month:02d}-{v.day:02d}T{v.hour:02d}:{v.minute:02d}:{v.second:02d}Z"


def parse_instant_epoch(seconds: int) -> _dt.datetime:
    return _dt.datetime.fromtimestamp(seconds, UTC)
