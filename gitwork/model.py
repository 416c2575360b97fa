"""Plain data for what the state ref holds, with the rules that need no I/O."""

from __future__ import annotations

import datetime as _dt
from dataclasses import dataclass, field
from typing import Any

from .clock import format_instant, parse_instant

STATUSES = ("open", "in_progress", "blocked", "done", "cancelled")
CLOSED = ("done", "cancelled")

# Which status may follow which, and by which operation (anything else is refused as illegal).
TRANSITIONS: dict[str, set[str]] = {
    "open": {"in_progress", "blocked", "done", "cancelled"},
    "in_progress": {"open", "blocked", "done", "cancelled"},
    "blocked": {"open", "in_progress", "done", "cancelled"},
    "done": {"open"},
    "cancelled": {"open"},
}

LEASE_STATES = ("active", "released", "revoked", "handed-off", "taken-over")


@dataclass
class Lease:
    item: str
    epoch: int
    fence: int
    holder: str
    state: str
    granted_at: str
    expires_at: str
    ttl: int
    renewed_at: str | None = None
    ended_at: str | None = None
    ended_by: str | None = None
    reason: str | None = None
    handoff: dict[str, Any] | None = None

    @classmethod
    def from_doc(cls, doc: dict[str, Any]) -> Lease:
        known = {k: doc.get(k) for k in cls.__dataclass_fields__}
        return cls(**known)

    def to_doc(self) -> dict[str, Any]:
        doc = {k: getattr(self, k) for k in self.__dataclass_fields__}
        return {k: v for k, v in doc.items() if v is not None}

    def expires(self) -> _dt.datetime:
        return parse_instant(self.expires_at)

    def is_active(self) -> bool:
        return self.state == "active"

    def live_for_holder(self, now: _dt.datetime, margin: int) -> bool:
        """The holder's own view: the lease ends ``margin`` seconds early."""
        return self.is_active() and now < self.expires() - _dt.timedelta(seconds=margin)

    def takeable(self, now: _dt.datetime, margin: int) -> bool:
        """Another party's view: free once released/revoked/handed off, or expired plus margin."""
        if self.state != "active":
            return True
        return now >= self.expires() + _dt.timedelta(seconds=margin)


@dataclass
class Item:
    id: str
    title: str
    status: str = "open"
    priority: int = 2
    description: str = ""
    labels: list[str] = field(default_factory=list)
    owner: str | None = None
    provenance: dict[str, Any] = field(default_factory=dict)
    depends_on: list[str] = field(default_factory=list)
    criteria: list[dict[str, Any]] = field(default_factory=list)
    decisions: list[dict[str, Any]] = field(default_factory=list)
    created_at: str = ""
    updated_at: str = ""
    closed_reason: str | None = None
    waiting: dict[str, Any] | None = None

    _ORDER = (
        "id", "title", "status", "priority", "owner", "labels", "depends_on", "description",
        "provenance", "criteria", "decisions", "waiting", "closed_reason", "created_at", "updated_at",
    )

    @classmethod
    def from_doc(cls, doc: dict[str, Any]) -> Item:
        known = {k: doc[k] for k in cls._ORDER if k in doc}
        return cls(**known)

    def to_doc(self) -> dict[str, Any]:
        doc: dict[str, Any] = {}
        for key in self._ORDER:
            value = getattr(self, key)
            if value is None or (key in ("closed_reason", "waiting") and not value):
                continue
            doc[key] = value
        return doc


def stamp(now: _dt.datetime) -> str:
    return format_instant(now)
