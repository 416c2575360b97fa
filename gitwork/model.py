"""Plain data for what the state ref holds, with the rules that need no I/O.

Plain classes with a field table rather than dataclasses: ``import dataclasses`` alone costs ~25 ms of
every ``gw`` start-up on a small machine.
"""

from __future__ import annotations

import datetime as _dt

from .clock import format_instant, parse_instant
from .errors import Corrupt
from .paths import sound_globs

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

STATUSES = ("open", "in_progress", "blocked", "done", "cancelled")
CLOSED = ("done", "cancelled")
ITEM_TYPES = ("bug", "feature", "task", "epic", "chore")
DEFAULT_TYPE = "task"  # an item with no ``type`` is a task (items made before types existed too)

# Which status may follow which (anything else is refused as an illegal transition).
TRANSITIONS: dict[str, set[str]] = {
    "open": {"in_progress", "blocked", "done", "cancelled"},
    "in_progress": {"open", "blocked", "done", "cancelled"},
    "blocked": {"open", "in_progress", "done", "cancelled"},
    "done": {"open"},
    "cancelled": {"open"},
}

LEASE_STATES = ("active", "released", "revoked", "handed-off")


def _instant(value: Any) -> bool:
    if not isinstance(value, str):
        return False
    try:
        parse_instant(value)
    except ValueError:
        return False
    return True


def _count(value: Any) -> bool:
    return type(value) is int and value >= 0


def _texts(value: Any) -> bool:
    return isinstance(value, list) and all(isinstance(v, str) for v in value)


def _mappings(value: Any) -> bool:
    return isinstance(value, list) and all(isinstance(v, dict) for v in value)


def _optional(check: Any) -> Any:
    return lambda value: value is None or check(value)


def _amount(value: Any) -> bool:
    """An amount in USD as gitwork writes it (gitwork/money.py): text, canonical."""
    from .errors import Invalid
    from .money import parse_text

    try:
        return isinstance(value, str) and parse_text(value) == value
    except Invalid:
        return False


def _text(value: Any) -> bool:
    return isinstance(value, str)


def _mapping(value: Any) -> bool:
    return isinstance(value, dict)


class Declared:
    """One field of a :class:`Record`, declared once as a class attribute: ``title: str = field(...)``.

    The annotation types it, ``default`` fills it when absent (a callable makes a fresh one), and
    ``check``/``what`` are the rule a stored value is held to (:func:`problem`) and how a refusal names it.
    """

    __slots__ = ("default", "check", "what")

    def __init__(self, default: Any, check: Any, what: str) -> None:
        self.default, self.check, self.what = default, check, what


def field(check: Any, what: str, default: Any = None) -> Any:
    """Declare a record field (see :class:`Declared`); typed ``Any`` so the annotation beside it is the type."""
    return Declared(default, check, what)


class Record:
    """A mapping-shaped record whose fields are declared once, in file order, with :func:`field`.

    ``FIELDS`` (name, default) and ``SHAPE`` (name -> (check, what)) are derived from the declarations.
    """

    FIELDS: tuple[tuple[str, Any], ...] = ()
    SHAPE: dict[str, tuple[Any, str]] = {}
    REQUIRED: tuple[str, ...] = ()

    def __init_subclass__(cls) -> None:
        declared = [(name, value) for name, value in vars(cls).items() if isinstance(value, Declared)]
        cls.FIELDS = tuple((name, value.default) for name, value in declared)
        cls.SHAPE = {name: (value.check, value.what) for name, value in declared}
        for name, _ in declared:
            delattr(cls, name)  # an instance always sets it; a class attribute would only hide a missing one

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


_INSTANT = "an instant like 2030-01-01T12:00:00Z"


class Lease(Record):
    REQUIRED = ("item", "epoch", "fence", "holder", "state", "granted_at", "expires_at", "ttl")

    item: str = field(_text, "an item id")
    epoch: int = field(_count, "a non-negative integer")
    fence: int = field(_count, "a non-negative integer")
    holder: str = field(_text, "text")
    state: str = field(lambda v: v in LEASE_STATES, f"one of {', '.join(LEASE_STATES)}")
    granted_at: str = field(_instant, _INSTANT)
    expires_at: str = field(_instant, _INSTANT)
    ttl: int = field(lambda v: type(v) is int and v > 0, "a positive number of seconds")
    renewed_at: str | None = field(_optional(_instant), "an instant")
    ended_at: str | None = field(_optional(_instant), "an instant")
    ended_by: str | None = field(_optional(_text), "text")
    reason: str | None = field(_optional(_text), "text")
    handoff: dict[str, Any] | None = field(_optional(_mapping), "a mapping")
    # id of the command that granted this lease (pins replayed commands to it)
    grant: str | None = field(_optional(_text), "text")
    # the item's path globs when this lease was granted (gitwork/paths.py): held as long as the lease
    paths: list[str] | None = field(_optional(sound_globs), "a list of path globs")
    # what its executions may cost in all, USD (docs/launch.md, "Budgets"); absent: the .workplane default
    budget: str | None = field(_optional(_amount), "an amount in USD like \"2.5\"")

    def expires(self) -> _dt.datetime:
        return parse_instant(self.expires_at)

    def is_active(self) -> bool:
        return self.state == "active"

    def live_for_holder(self, now: _dt.datetime, margin: int) -> bool:
        """The holder's own view: the lease ends ``margin`` seconds early."""
        return self.is_active() and now < self.expires() - _dt.timedelta(seconds=margin)

    def takeable(self, now: _dt.datetime, margin: int) -> bool:
        """Another party's view: free once released/revoked/handed off, or expired plus margin."""
        return not held_for_others(self.state, self.expires() if self.state == "active" else None, now, margin)


def held_for_others(state: str | None, expires: _dt.datetime | None, now: _dt.datetime, margin: int) -> bool:
    """The one rule of lease liveness as anyone but the holder sees it: an active lease holds the item
    until its expiry plus the clock margin; an ended one (released, revoked, handed off) holds nothing.
    :meth:`Lease.takeable` and the read side's ``ready`` (``queries.lease_is_live``) both ask this."""
    if state != "active" or expires is None:
        return False
    return now < expires + _dt.timedelta(seconds=margin)


# Why a lease was handed over (`gw handoff --reason`): the op checks it, the board offers it.
HANDOFF_REASONS = ("done", "blocked", "needs-human", "timeout", "reconcile-failure", "reassign")

def usable_ttl(ttl: int, margin: int) -> int:
    """``ttl`` if a lease of that length is of any use to its holder; else refused (exit 5).

    The holder's own view ends a lease the clock margin early (``Lease.live_for_holder``), so a lease
    of at most the margin would be granted already unusable: every fenced command under it stale.
    Checked wherever a ttl is set: claim (``--next`` too, and ``gw run``'s and a delegation's claim),
    takeover and renew."""
    if ttl <= margin:
        from .codec import format_duration
        from .errors import Invalid

        raise Invalid(f"a lease of {format_duration(ttl)} would be unusable: its holder must stop the clock margin "
                      f"({format_duration(margin)}, setting clock_margin) before it expires; ask for more than "
                      f"{format_duration(margin)}", ttl=ttl, clock_margin=margin)
    return ttl


class Item(Record):
    REQUIRED = ("id", "title")

    id: str = field(_text, "text")
    title: str = field(_text, "text")
    status: str = field(lambda v: v in STATUSES, f"one of {', '.join(STATUSES)}", "open")
    priority: int = field(lambda v: type(v) is int and 0 <= v <= 4, "an integer from 0 to 4", 2)
    owner: str | None = field(_optional(_text), "text")
    labels: list[str] = field(_texts, "a list of text", list)
    depends_on: list[str] = field(_texts, "a list of item ids", list)
    description: str = field(_optional(_text), "text", "")
    provenance: dict[str, Any] = field(_optional(_mapping), "a mapping", dict)
    criteria: list[dict[str, Any]] = field(_mappings, "a list of mappings", list)
    decisions: list[dict[str, Any]] = field(_mappings, "a list of mappings", list)
    waiting: dict[str, Any] | None = field(_optional(_mapping), "a mapping")
    closed_reason: str | None = field(_optional(_text), "text")
    type: str | None = field(_optional(lambda v: v in ITEM_TYPES), f"one of {', '.join(ITEM_TYPES)}")
    parent: str | None = field(_optional(_text), "an item id")
    created_at: str = field(_optional(_text), "text", "")
    updated_at: str = field(_optional(_text), "text", "")
    # the paths the item will change (globs, gitwork/paths.py); a claim leases them; absent: none
    paths: list[str] | None = field(_optional(sound_globs), "a list of path globs")
    # what its executions may cost in all, USD (docs/launch.md, "Budgets"); absent: the .workplane default
    budget: str | None = field(_optional(_amount), "an amount in USD like \"2.5\"")
    # what the item waits on besides its dependencies (ops/waits.py): a timer, a ref, a command's exit
    waits: list[dict[str, Any]] | None = field(_optional(lambda v: _mappings(v) and all(_sound_wait(w) for w in v)),
                                               "a list of waits (kind timer, ref or command)")


WAIT_KINDS = ("timer", "ref", "command")
# The read cache's ``gate`` of an item waiting on a ref or a command: after every instant, so "gate <= now"
# (ready) is false until the wait ends by a command; a timer's gate is its instant, passed without one.
GATE_OPEN = "~"


def _sound_wait(wait: dict[str, Any]) -> bool:
    if wait.get("kind") not in WAIT_KINDS or not isinstance(wait.get("id"), str):
        return False
    if wait["kind"] == "timer":
        return _instant(wait.get("until"))
    if wait["kind"] == "ref":
        return isinstance(wait.get("ref"), str) and isinstance(wait.get("target"), str)
    return isinstance(wait.get("command"), str) and _count(wait.get("every")) and _count(wait.get("timeout"))


def gate_of(waits: Any) -> str | None:
    """The cache's ``gate`` of an item (``None``: it waits on nothing): ``GATE_OPEN`` while a ref or command
    wait is open, else the latest timer's instant (canonical text, so it compares as time does)."""
    if not waits:
        return None
    if any(w.get("kind") != "timer" for w in waits):
        return GATE_OPEN
    return max(format_instant(parse_instant(w["until"])) for w in waits)


def open_waits(waits: Any, now: _dt.datetime) -> list[dict[str, Any]]:
    """The waits that still hold the item at ``now``: every ref and command wait, and a timer not yet passed."""
    return [w for w in waits or () if w.get("kind") != "timer" or parse_instant(w["until"]) > now]


def describe_wait(wait: dict[str, Any]) -> str:
    """One wait in words: ``timer until …``, ``ref R reachable from main (on origin)``, ``command 'C'``."""
    kind = wait.get("kind")
    if kind == "timer":
        return f"timer until {wait.get('until')}"
    if kind == "ref":
        remote = f" on {wait['remote']}" if wait.get("remote") else ""
        return f"ref {wait.get('ref')} reachable from {wait.get('target')}{remote}"
    return f"command {wait.get('command')!r} (every {wait.get('every')}s, timeout {wait.get('timeout')}s)"


def stamp(now: _dt.datetime) -> str:
    return format_instant(now)


# --- reading records from the state, strictly --------------------------------------------------------
#
# A file in the state ref may have been written by another tool, a bad merge or a person: its fields are
# checked before anything compares, sorts or does arithmetic with them, so a bad value is reported as
# Corrupt (exit 8) naming the file, never a crash deep inside a command (priority "high" sorted against
# 2, expires_at "tomorrow" parsed as an instant, fence "many" plus one).


# field -> (check, what it must be); a field that is absent takes its default and is not checked
ITEM_SHAPE = Item.SHAPE
LEASE_SHAPE = Lease.SHAPE


def problem(doc: dict[str, Any], shape: dict[str, tuple[Any, str]], required: tuple[str, ...]) -> str | None:
    """The first thing wrong with ``doc`` against ``shape``, in words; ``None`` when it is sound."""
    for name in required:
        if doc.get(name) is None:
            return f"has no {name}"
    for name, value in doc.items():
        rule = shape.get(name)
        if rule is not None and value is not None and not rule[0](value):
            return f"{name} must be {rule[1]}, not {value!r}"[:300]
    return None


# The item fields whose rule every value of exactly this type passes (lists: when empty, or, for the
# two lists of text, when each value is exactly a str; status and priority: in their range), for
# item_problem's plain pass. Not a second declaration of the fields: one missing here (a new field) only
# sends its items through the rules (tests/test_cache_rows.py checks the answers against them).
_PLAIN_ITEM: dict[str, Any] = {"id": str, "title": str, "status": str, "priority": int, "owner": str, "labels": list,
               "depends_on": list, "description": str, "provenance": dict, "criteria": list, "decisions": list,
               "waiting": dict, "closed_reason": str, "parent": str, "created_at": str, "updated_at": str}
_TEXT_LISTS = ("labels", "depends_on")


def _plainly_sound(doc: dict[str, Any]) -> bool:
    """Whether ``problem(doc, ITEM_SHAPE, Item.REQUIRED)`` is surely None, judged by exact types alone
    (a rebuild checks 100,000 items: this pass costs a third of the rules'). False: ask the rules."""
    if type(doc.get("id")) is not str or type(doc.get("title")) is not str:
        return False
    plain = _PLAIN_ITEM
    for name, value in doc.items():
        kind = plain.get(name)
        if kind is None:
            if value is not None and name in ITEM_SHAPE:
                return False  # (paths, budget, type, waits: their own rules)
            continue
        if type(value) is not kind:
            return False
        if kind is list:
            if value:
                if name not in _TEXT_LISTS:
                    return False
                for each in value:
                    if type(each) is not str:
                        return False
        elif kind is int:
            if not 0 <= value <= 4:
                return False
        elif name == "status" and value not in STATUSES:
            return False
    return True


def item_problem(doc: dict[str, Any], item_id: str) -> str | None:
    found = None if _plainly_sound(doc) else problem(doc, ITEM_SHAPE, Item.REQUIRED)
    if found is None and doc["id"] != item_id:
        found = f"id {doc['id']!r} does not match its folder {item_id}"
    return found


def shard_problem(name: str, item_id: str) -> str | None:
    """What is wrong with an item folder ``items/<name>/<item_id>`` being there (None: its place).

    Only a forged tree has a folder outside its id's shard; the engine reads an item at
    ``layout.item_dir(id)`` alone, so such a folder is not that item, whatever it holds."""
    from .ids import shard
    from .layout import ITEMS, item_dir

    if shard(item_id) == name:
        return None
    return f"{ITEMS}/{name}/{item_id} is not in its id's shard (an item's folder is {item_dir(item_id)})"


def lease_problem(doc: dict[str, Any], item_id: str) -> str | None:
    found = problem(doc, LEASE_SHAPE, Lease.REQUIRED)
    if found is None and doc["item"] != item_id:
        found = f"item {doc['item']!r} does not match its folder {item_id}"
    return found


def _load(data: bytes, path: str) -> dict[str, Any]:
    from .codec import load_yaml

    return load_yaml(data, what=path)


def _load_checked(data: bytes, item_id: str, name: str, problem: Any) -> Any:
    """The mapping in an item's ``name`` file; Corrupt (naming the file) if ``problem`` finds a fault."""
    from .layout import item_path

    path = item_path(item_id, name)
    doc = _load(data, path)
    found = problem(doc, item_id)
    if found is not None:
        raise Corrupt(f"{path}: {found}", file=path)
    return doc


def load_item(data: bytes, item_id: str) -> Item:
    """An item from its ``item.yaml``; Corrupt (naming the file) unless every known field is sound."""
    from .layout import ITEM_FILE

    return Item.from_doc(_load_checked(data, item_id, ITEM_FILE, item_problem))


def load_lease(data: bytes, item_id: str) -> Lease:
    """A lease from its ``lease.yaml``; Corrupt (naming the file) unless every known field is sound."""
    from .layout import LEASE_FILE

    return Lease.from_doc(_load_checked(data, item_id, LEASE_FILE, lease_problem))


def state_file_problem(path: str, doc: dict[str, Any]) -> str | None:
    """What is wrong with the fields of a parsed YAML file of the state ref, by its path (None: sound).

    For checkers that see files rather than items (the arbiter's hook): ``items/xx/ID/item.yaml``,
    ``items/xx/ID/lease.yaml`` and ``counters.yaml`` are held to the rules the readers apply.
    """
    parts = path.split("/")
    if path == "counters.yaml":
        fence = doc.get("fence", 0)
        return None if _count(fence) else f"fence must be a non-negative integer, not {fence!r}"[:300]
    if len(parts) == 4 and parts[0] == "items" and parts[3] in ("item.yaml", "lease.yaml"):
        found = shard_problem(parts[1], parts[2])
        if found is not None:
            return found
    if len(parts) == 4 and parts[0] == "items" and parts[3] == "item.yaml":
        return item_problem(doc, parts[2])
    if len(parts) == 4 and parts[0] == "items" and parts[3] == "lease.yaml":
        return lease_problem(doc, parts[2])
    if len(parts) == 3 and parts[0] == "executions" and parts[2].endswith(".yaml"):
        from .records.executions import execution_problem

        return execution_problem(doc, parts[2].removesuffix(".yaml"))
    if parts[0] == "queue" and path.endswith(".yaml"):
        from .records.queue import record_problem

        return record_problem(path, doc)
    return None
