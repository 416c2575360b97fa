"""Plain data for what the state ref holds, with the rules that need no I/O.

Plain classes with a field table rather than dataclasses: ``import dataclasses`` alone costs ~25 ms of
every ``gw`` start-up on a small machine.
"""

from __future__ import annotations

import datetime as _dt

from .clock import format_instant, parse_instant

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

STATUSES = ("open", "in_progress", "blocked", "done", "cancelled")
CLOSED = ("done", "cancelled")

# Which status may follow which (anything else is refused as an illegal transition).
TRANSITIONS: dict[str, set[str]] = {
    "open": {"in_progress", "blocked", "done", "cancelled"},
    "in_progress": {"open", "blocked", "done", "cancelled"},
    "blocked": {"open", "in_progress", "done", "cancelled"},
    "done": {"open"},
    "cancelled": {"open"},
}

LEASE_STATES = ("active", "released", "revoked", "handed-off")


class Record:
    """A mapping-shaped record: ``FIELDS`` in file order, with defaults (callables make fresh ones)."""

    FIELDS: tuple[tuple[str, Any], ...] = ()
    REQUIRED: tuple[str, ...] = ()

    def __init__(self, **values: Any) -> None:
        names = {name for name, _ in self.FIELDS}
        unknown = set(values) - names
        if unknown:
            raise TypeError(f"unexpected fields {sorted(unknown)}")
        missing = [name for name in self.REQUIRED if values.get(name) is None]
        if missing:
            raise TypeError(f"missing fields {missing}")
        for name, default in self.FIELDS:
            value = values.get(name, None)
            if value is None:
                value = default() if callable(default) else default
            setattr(self, name, value)
        self.extra: dict[str, Any] = {}

    @classmethod
    def from_doc(cls, doc: dict[str, Any]) -> Any:
        names = {name for name, _ in cls.FIELDS}
        record = cls(**{k: v for k, v in doc.items() if k in names})
        # Fields this version does not know (another tool's, or a newer gitwork's within the same
        # format) are kept and written back unchanged, never silently dropped.
        record.extra = {k: v for k, v in doc.items() if k not in names}
        return record

    def to_doc(self) -> dict[str, Any]:
        doc = {}
        for name, _ in self.FIELDS:
            value = getattr(self, name)
            if value is not None:
                doc[name] = value
        for key, value in self.extra.items():
            doc.setdefault(key, value)
        return doc

    def __eq__(self, other: object) -> bool:
        return type(other) is type(self) and self.to_doc() == other.to_doc()  # type: ignore[attr-defined]

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.to_doc()!r})"


class Lease(Record):
    FIELDS = (
        ("item", None), ("epoch", None), ("fence", None), ("holder", None), ("state", None),
        ("granted_at", None), ("expires_at", None), ("ttl", None), ("renewed_at", None),
        ("ended_at", None), ("ended_by", None), ("reason", None), ("handoff", None), ("grant", None),
    )
    REQUIRED = ("item", "epoch", "fence", "holder", "state", "granted_at", "expires_at", "ttl")

    item: str
    epoch: int
    fence: int
    holder: str
    state: str
    granted_at: str
    expires_at: str
    ttl: int
    renewed_at: str | None
    ended_at: str | None
    ended_by: str | None
    reason: str | None
    handoff: dict[str, Any] | None
    grant: str | None  # id of the command that granted this lease (pins replayed commands to it)

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


class Item(Record):
    FIELDS = (
        ("id", None), ("title", None), ("status", "open"), ("priority", 2), ("owner", None),
        ("labels", list), ("depends_on", list), ("description", ""), ("provenance", dict),
        ("criteria", list), ("decisions", list), ("waiting", None), ("closed_reason", None),
        ("created_at", ""), ("updated_at", ""),
    )
    REQUIRED = ("id", "title")

    id: str
    title: str
    status: str
    priority: int
    owner: str | None
    labels: list[str]
    depends_on: list[str]
    description: str
    provenance: dict[str, Any]
    criteria: list[dict[str, Any]]
    decisions: list[dict[str, Any]]
    waiting: dict[str, Any] | None
    closed_reason: str | None
    created_at: str
    updated_at: str


def stamp(now: _dt.datetime) -> str:
    return format_instant(now)
