"""The engine: (state snapshot, command document, now) → changes + events, or a refusal.

It reads only through the snapshot it is given and writes nothing: the caller (``workplane``)
turns the outcome into one commit and moves the ref by CAS. On a lost race the caller runs the
engine again on the new tip, so every rule here is re-checked against the state that will actually
be extended. Ops live in ``gitwork/ops`` and register themselves with :func:`op`.
"""

from __future__ import annotations

import datetime as _dt
import json

from . import codec, ids, layout
from .commands import Field, parse_fields, validate
from .config import Settings
from .errors import Corrupt, Invalid, NotFound, Stale
from .model import Item, Lease, load_item, load_lease, stamp
from .store import Snapshot

TYPE_CHECKING = False  # typing costs ~15 ms to import; annotations are strings anyway
if TYPE_CHECKING:
    from typing import Any, Callable


class OpSpec:
    __slots__ = ("name", "fields", "func", "summary")

    def __init__(self, name: str, fields: dict[str, Field], func: Callable[[Context], None], summary: str) -> None:
        self.name, self.fields, self.func, self.summary = name, fields, func, summary


OPS: dict[str, OpSpec] = {}


def op(name: str, summary: str, **spec: str) -> Callable[[Callable[[Context], None]], Callable[[Context], None]]:
    """Register an op implementation with its fields (see :func:`commands.parse_fields`)."""

    def register(func: Callable[[Context], None]) -> Callable[[Context], None]:
        OPS[name] = OpSpec(name, parse_fields(spec), func, summary)
        return func

    return register


def _load_ops(name: str | None = None) -> None:
    """Import the module of op ``name`` (or every op module), which registers its ops."""
    if name in OPS:
        return
    from . import ops

    ops.load(name)


def validate_command(doc: Any) -> dict[str, Any]:
    if not isinstance(doc, dict):
        raise Invalid("a command document must be a mapping with an 'op'")
    name = doc.get("op")
    _load_ops(name if isinstance(name, str) else None)
    spec = OPS.get(name) if isinstance(name, str) else None
    if spec is None:
        _load_ops()  # so the error can list every op
        raise Invalid(f"unknown op {name!r}; known: {', '.join(sorted(OPS))}")
    clean = validate(doc, spec.fields)
    clean.setdefault("id", ids.command_id())
    return clean


class Outcome:
    """What one command did: file changes, a one-line summary, trailers and a result for the caller."""

    def __init__(self) -> None:
        self.changes: dict[str, bytes | None] = {}
        self.summary = ""
        self.trailers: dict[str, str] = {}
        self.result: dict[str, Any] = {}

    @property
    def empty(self) -> bool:
        return not self.changes


class Context:
    """Everything one op may read and the changes it builds; reads see the op's own pending writes."""

    def __init__(self, snapshot: Snapshot, cmd: dict[str, Any], now: _dt.datetime, settings: Settings) -> None:
        self.snapshot = snapshot
        self.cmd = cmd
        self.now = now
        self.when = stamp(now)
        self.settings = settings
        self.actor: str = cmd.get("as") or settings.identity()
        self.outcome = Outcome()
        self._items: dict[str, Item] = {}
        self._leases: dict[str, Lease | None] = {}
        self._index: Any = None

    # --- reading -------------------------------------------------------------------------------

    def resolve(self, text: str) -> str:
        """A full item id from a unique prefix; reads a single shard when two digits are given."""
        hex_prefix = ids.normalise_prefix(text)
        if len(hex_prefix) >= 2:
            names = self.snapshot.tree(f"{layout.ITEMS}/{hex_prefix[:2]}").keys()
        else:
            names = [
                name
                for shard, entry in self.snapshot.tree(layout.ITEMS).items()
                if shard.startswith(hex_prefix)
                for name in self.snapshot.store.read_tree(entry.oid)
            ]
        pending = [p.split("/")[2] for p in self.outcome.changes if p.endswith(layout.ITEM_FILE)]
        return ids.resolve(hex_prefix, [*names, *pending], text)

    def target(self) -> str:
        """Resolve the command's ``item`` and record the full id in the command document."""
        full = self.resolve(self.cmd["item"])
        self.cmd["item"] = full
        return full

    def _file(self, path: str) -> bytes | None:
        if path in self.outcome.changes:
            return self.outcome.changes[path]
        return self.snapshot.blob(path)

    def item(self, item_id: str) -> Item:
        cached = self._items.get(item_id)
        if cached is not None:
            return cached
        data = self._file(layout.item_path(item_id, layout.ITEM_FILE))
        if data is None:
            raise NotFound(f"no item {item_id}", id=item_id)
        item = load_item(data, item_id)  # Corrupt, naming the file, unless every field is sound
        self._items[item_id] = item
        return item

    def lease(self, item_id: str) -> Lease | None:
        if item_id not in self._leases:
            data = self._file(layout.item_path(item_id, layout.LEASE_FILE))
            if data is None:
                self._leases[item_id] = None
            else:
                self._leases[item_id] = load_lease(data, item_id)  # Corrupt, naming the file
        return self._leases[item_id]

    def counters(self) -> dict[str, Any]:
        data = self._file(layout.COUNTERS)
        return codec.load_yaml(data, what=layout.COUNTERS) if data else {}

    def records(self, item_id: str, name: str = layout.EVENTS_FILE) -> list[dict[str, Any]]:
        data = self._file(layout.item_path(item_id, name)) or b""
        return list(codec.iter_records(data, what=f"{name} of {item_id}"))

    def index(self) -> Any:
        """The summary index of every item at this snapshot (see ``index.py``)."""
        if self._index is None:
            from .index import load_index

            self._index = load_index(self.snapshot)
        return self._index

    # --- the fencing rule --------------------------------------------------------------------

    def require_holder(self, item_id: str) -> Lease | None:
        """Refuse unless the actor may act on the item now; return its live lease, if any.

        With a fence (given, or implied when the actor is the holder by name): the lease must be
        active, carry that fence, and not have expired by the holder's clock minus the margin.
        Without one: nobody else may hold a live lease on the item.
        """
        lease = self.lease(item_id)
        fence = self.cmd.get("fence")
        margin = self.settings.clock_margin
        if fence is None and lease is not None and lease.is_active() and lease.holder == self.actor:
            # The holder by name: act under the current fence, and record it in the document (and
            # trailer) as if given. --fence also guards against the holder's own stale processes.
            fence = lease.fence
            self.cmd["fence"] = fence
        if fence is not None:
            if lease is None or lease.fence != fence:
                current = f"current fence {lease.fence}, {lease.state}" if lease else "never leased"
                raise Stale(f"fence {fence} is stale for {item_id} ({current})", item=item_id)
            if not lease.is_active():
                raise Stale(f"the lease on {item_id} (fence {fence}) was {lease.state}", item=item_id)
            if not lease.live_for_holder(self.now, margin):
                raise Stale(f"the lease on {item_id} (fence {fence}) has expired", item=item_id)
            # Fence numbers drawn offline can repeat on the arbiter; the grant's command id cannot.
            # A replayed command is pinned to the very lease it was made under.
            pinned = self.cmd.get("lease")
            if pinned and lease.grant and pinned != lease.grant:
                raise Stale(f"fence {fence} on {item_id} now belongs to another grant (by {lease.holder})",
                            item=item_id)
            if lease.grant:
                self.cmd["lease"] = lease.grant
            return lease
        if lease is not None and not lease.takeable(self.now, margin):
            raise Stale(
                f"{item_id} is held by {lease.holder} (epoch {lease.epoch}); only its holder may do this, with --fence",
                item=item_id,
                holder=lease.holder,
            )
        return None

    # --- writing -------------------------------------------------------------------------------

    def save_item(self, item: Item) -> None:
        item.updated_at = self.when
        self._items[item.id] = item
        self.outcome.changes[layout.item_path(item.id, layout.ITEM_FILE)] = codec.dump_yaml(item.to_doc())

    def save_lease(self, lease: Lease) -> None:
        self._leases[lease.item] = lease
        self.outcome.changes[layout.item_path(lease.item, layout.LEASE_FILE)] = codec.dump_yaml(lease.to_doc())

    def save_counters(self, counters: dict[str, Any]) -> None:
        self.outcome.changes[layout.COUNTERS] = codec.dump_yaml(counters)

    def append(self, item_id: str, name: str, record: dict[str, Any]) -> dict[str, Any]:
        """Append one record to an item's log, numbering it after the last one."""
        path = layout.item_path(item_id, name)
        old = self._file(path) or b""
        last = 0
        if old:
            tail = old[: -1].rpartition(b"\n")[2]
            try:
                last = int(json.loads(tail)["seq"])
            except (ValueError, KeyError, TypeError) as exc:
                raise Corrupt(f"{name} of {item_id} ends in a bad record") from exc
        full = {"seq": last + 1, **record}
        self.outcome.changes[path] = old + codec.encode_record(full)
        return full

    def event(self, item_id: str, kind: str, **data: Any) -> dict[str, Any]:
        record = {"at": self.when, "by": self.actor, "type": kind, "cmd": self.cmd["id"]}
        record.update({k: v for k, v in data.items() if v is not None})
        return self.append(item_id, layout.EVENTS_FILE, record)

    def say(self, summary: str, item_id: str | None = None, **trailers: Any) -> None:
        self.outcome.summary = summary
        if item_id:
            self.outcome.trailers["Work-Item"] = item_id
        for key, value in trailers.items():
            if value is not None:
                self.outcome.trailers["-".join(p.capitalize() for p in key.split("_"))] = str(value)


def apply(snapshot: Snapshot, cmd: dict[str, Any], now: _dt.datetime, settings: Settings) -> Outcome:
    """Run a validated command against ``snapshot``; raise a :class:`GwError` to refuse."""
    _load_ops(cmd["op"])
    record_path = layout.command_path(cmd["id"])
    earlier = snapshot.blob(record_path)
    if earlier is not None:
        # This command id was applied before (a retry whose first reply was lost, a re-sent
        # document, a replay of what already landed): answer as the first time, change nothing.
        outcome = Outcome()
        try:
            outcome.result = {**json.loads(earlier).get("result", {}), "duplicate": True}
        except ValueError as exc:
            raise Corrupt(f"{record_path} is not a JSON record") from exc
        return outcome
    ctx = Context(snapshot, cmd, now, settings)
    OPS[cmd["op"]].func(ctx)
    outcome = ctx.outcome
    if outcome.changes:
        if snapshot.commit is None:
            _initialise(outcome)
        record = {"op": cmd["op"], "at": ctx.when, "by": ctx.actor, "result": outcome.result}
        outcome.changes[record_path] = json.dumps(record, ensure_ascii=False, sort_keys=True).encode() + b"\n"
    outcome.trailers.setdefault("Command-Id", cmd["id"])
    return outcome


def _initialise(outcome: Outcome) -> None:
    from . import FORMAT_VERSION
    from .store import FORMAT_FILE

    outcome.changes.setdefault(FORMAT_FILE, codec.dump_yaml({"format": FORMAT_VERSION}))


def commit_message(cmd: dict[str, Any], outcome: Outcome) -> str:
    """One human line, the command document, then trailers: ``git log`` of the ref is the audit trail."""
    document = json.dumps(cmd, ensure_ascii=False, sort_keys=True, separators=(", ", ": "))
    trailers = "\n".join(f"{k}: {v}" for k, v in outcome.trailers.items())
    return f"{outcome.summary or cmd['op']}\n\nCommand: {document}\n\n{trailers}\n"


def parse_command_from_message(message: str) -> dict[str, Any] | None:
    for line in message.split("\n"):
        if line.startswith("Command: {"):
            try:
                return json.loads(line[len("Command: ") :])
            except ValueError:
                return None
    return None
