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
    """The current instant, timezone-aware, UTC, whole seconds."""
    pinned = os.environ.get("GW_NOW")
    if pinned:
        return parse_instant(pinned)
    return _dt.datetime.now(UTC).replace(microsecond=0)


def parse_instant(text: str) -> _dt.datetime:
    value = _dt.datetime.fromisoformat(text.replace("Z", "+00:00"))
    if value.tzinfo is None:
        value = value.replace(tzinfo=UTC)
    return value.astimezone(UTC).replace(microsecond=0)


def format_instant(value: _dt.datetime) -> str:
    return value.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def parse_instant_epoch(seconds: int) -> _dt.datetime:
    return _dt.datetime.fromtimestamp(seconds, UTC)
