"""The engine: (state snapshot, command document, now) → changes + events, or a refusal.

:func:`apply` reads only through the snapshot it is given and writes nothing. :func:`land` is the one
way an outcome becomes a commit, and :func:`run` the one loop that moves a ref by compare-and-swap:
the caller hands it a CAS (``workplane.LocalRef``: ``git update-ref`` on this clone;
``sync.ArbiterRef``: a push to the arbiter), which is the only difference between a local and a
remote write. On a lost race the loop runs the engine again on the new tip, so every rule here is
re-checked against the state that will actually be extended. Ops live in ``gitwork/ops`` and
declare themselves with :func:`op`: one declaration says everything about an op.
"""

from __future__ import annotations

import datetime as _dt
import json

from . import codec, ids, layout
from .commands import Field, check_unicode, parse_fields, validate
from .config import Settings
from .errors import Corrupt, Forbidden, GwError, Held, Invalid, NotFound, NotHolder, Stale
from .lazyre import Lazy
from .model import Item, Lease, load_item, load_lease, stamp
from .store import Snapshot, Store, identity_signature

TYPE_CHECKING = False  # typing costs ~15 ms to import; annotations are strings anyway
if TYPE_CHECKING:
    from collections.abc import Iterable
    from typing import Any, Callable


class OpSpec:
    """Everything about one op, as its :func:`op` declaration says it."""

    __slots__ = ("name", "fields", "func", "summary", "internal", "arbiter", "roles", "who", "mcp")

    def __init__(self, name: str, fields: dict[str, Field], func: Callable[[Context], None], summary: str,
                 internal: bool = False, arbiter: bool = False, roles: bool = False, who: str = "",
                 mcp: dict[str, Any] | None = None) -> None:
        self.name, self.fields, self.func, self.summary = name, fields, func, summary
        self.internal, self.arbiter, self.roles = internal, arbiter, roles
        self.who, self.mcp = who, mcp


OPS: dict[str, OpSpec] = {}

# What an ``mcp=`` exposure may say (``gitwork/mcp/tools.py``, ``Tool``): the verb it runs is required.
MCP_KEYS = frozenset(("verb", "summary", "fields", "rename", "defaults", "lease"))


def op(name: str, summary: str, *, internal: bool = False, arbiter: bool = False, roles: bool = False,
       who: str = "", mcp: str | dict[str, Any] | None = None,
       **spec: str) -> Callable[[Callable[[Context], None]], Callable[[Context], None]]:
    """Declare an op: its name, one-line summary, fields (see :func:`commands.parse_fields`) and flags.

    - ``who``: who may submit it, one sentence for people (docs/api.md prints it). Every public op
      says it; the rules themselves are the op's code (``roles.py``, the fencing rule).
    - ``mcp``: expose it as a ``gw mcp`` tool of the same name that runs a verb's plain function:
      ``"topic:function"`` under ``cli/commands/`` (the tool takes every field of the op, the verb's
      parameters named as the fields), or a
      mapping with that ``verb`` and any of ``summary``, ``fields`` (which fields, in order),
      ``rename`` (tool argument -> the verb's parameter), ``defaults`` and ``lease`` (``"grant"``:
      the connection remembers the lease granted; ``"end"``: forgets it).
    - ``internal=True``: a record op, a record of something gitwork itself did on the git side (a
      session branch made, a publish). Faces cannot submit it (``gw apply``, ``Workplane.submit``,
      ``Workplane.do``); only gitwork's own procedures can, through ``Workplane.submit_record``.
    - ``arbiter=True``: with an arbiter remote configured, the arbiter decides it (``sync/``): it
      lands only once it is on the remote's state ref. Every grant, renewal and end of a lease.
    - ``roles=True``: its rules depend on who acts (roles, holding the item). The arbiter's state hook
      re-applies every op, this one included, with its own settings (``derive.py``).
    """
    if not internal and not who:
        raise ValueError(f"op {name!r}: a public op says who may submit it (who=...)")
    if internal and mcp:
        raise ValueError(f"op {name!r}: a record op cannot be an MCP tool")
    exposure = {"verb": mcp} if isinstance(mcp, str) else mcp
    if exposure is not None and (not isinstance(exposure.get("verb"), str) or set(exposure) - MCP_KEYS):
        raise ValueError(f"op {name!r}: mcp= names a verb ('topic:function') and only {', '.join(sorted(MCP_KEYS))}")

    def register(func: Callable[[Context], None]) -> Callable[[Context], None]:
        OPS[name] = OpSpec(name, parse_fields(spec), func, summary, internal, arbiter, roles, who, exposure)
        return func

    return register


def spec(name: str) -> OpSpec | None:
    """The declaration of op ``name`` (importing only its module), or ``None`` for an unknown op."""
    _load_ops(name)
    return OPS.get(name)


def declared(flag: str) -> frozenset[str]:
    """The names of every op declared with ``flag`` (``"arbiter"``, ``"roles"``, ``"internal"``)."""
    _load_ops()
    return frozenset(name for name, each in OPS.items() if getattr(each, flag))


def _load_ops(name: str | None = None) -> None:
    """Import the module of op ``name`` (or every op module), which registers its ops."""
    if name in OPS:
        return
    from . import ops

    ops.load(name)


def validate_command(doc: Any, *, internal: bool = True) -> dict[str, Any]:
    """A clean copy of ``doc`` (see ``commands.validate``) with a command id.

    ``internal=False`` also refuses record ops (``@op(..., internal=True)``): the public write path
    (``Workplane.submit``) passes it. Replaying commits of the state ref (``sync``) keeps the default:
    what it replays was written by gitwork.
    """
    if not isinstance(doc, dict):
        raise Invalid("a command document must be a mapping with an 'op'")
    try:
        # Documents from the Python API have not been through codec.load_input_document's bounds.
        codec.check_depth(doc)
    except ValueError as exc:
        raise Invalid(f"command document is {exc}") from exc
    name = doc.get("op")
    _load_ops(name if isinstance(name, str) else None)
    spec = OPS.get(name) if isinstance(name, str) else None
    if spec is None:
        _load_ops()  # so the error can list every op
        public = sorted(n for n, s in OPS.items() if not s.internal or internal)
        shown = repr(name[:40]) if isinstance(name, str) else repr(name)[:40]
        raise Invalid(f"unknown op {shown}; known: {', '.join(public)}")
    if spec.internal and not internal:
        raise Invalid(f"op {name!r} is a record that only gitwork itself writes (gw session, gw publish); "
                      "it cannot be submitted")
    clean = validate(doc, spec.fields)
    one_identity(clean, spec.fields)
    # Every kind refuses text with no UTF-8 form in its own words; this catches any a kind let through,
    # before it could fail the write (the record and the Command: line are UTF-8) as an internal error.
    check_unicode(json.dumps(clean, ensure_ascii=False), "the command document")
    clean.setdefault("id", ids.command_id())
    return clean


def member_identity(claimed: Any, envelope: str | None) -> None:
    """Refuse a nested document's ``as`` (``claimed``) unless absent, or a valid name that is ``envelope``'s."""
    if claimed is None:
        return
    ids.check_identity(claimed, "as")  # Invalid (5): not a name at all
    if envelope is not None and claimed != envelope:
        raise Forbidden(f"acts as {claimed!r} inside a document acting as {envelope}: one identity per document "
                        "(leave 'as' out of the members)", who=envelope)


def member_refusal(error: GwError, position: int, name: Any) -> GwError:
    """The same refusal (same class, so the same exit code), prefixed by the member it came from:
    ``#2 (revoke): ...``, with its ``position`` (``gw apply`` turns it into a line number)."""
    shown = name if isinstance(name, str) else "?"
    return type(error)(f"#{position} ({shown}): {error.message}", **{**error.details, "position": position})


# id(declaration) -> (the declaration, kept so its id is never reused; its fields of kind docs)
_CARRYING: dict[int, tuple[dict[str, Field], tuple[str, ...]]] = {}


def _carrying(fields: dict[str, Field]) -> tuple[str, ...]:
    """The fields of a declaration that carry command documents (kind ``docs``); remembered per declaration."""
    found = _CARRYING.get(id(fields))
    if found is None:
        found = _CARRYING[id(fields)] = (fields, tuple(name for name, field in fields.items() if field.kind == "docs"))
    return found[1]


def one_identity(doc: dict[str, Any], fields: dict[str, Field]) -> None:
    """One identity per document: every document ``doc`` carries (its fields of kind ``docs``, at any
    depth) leaves ``as`` out or names the identity ``doc`` acts as; each such ``as`` is a valid name.

    A document that names no identity yet (the work plane fills in its own) has only its members' names
    checked here; the batch op judges them against the identity it runs as (``ops/batch.py``). A foreign
    ``as`` is ``Forbidden`` (77; HTTP 403), as a document naming another identity is on ``gw serve``:
    a member cannot act as someone its envelope is not (issue 23). Checked before any member runs.
    """
    envelope = doc.get("as")
    for name in _carrying(fields):
        if not isinstance(doc.get(name), list):
            continue
        for position, member in enumerate(doc[name], 1):
            if not isinstance(member, dict):
                continue  # the docs kind refuses it (validate ran first)
            claimed = member.get("as")
            try:
                member_identity(claimed, envelope)
                inner = spec(member["op"]) if isinstance(member.get("op"), str) else None
                if inner is not None and _carrying(inner.fields):
                    # A member carrying documents of its own (a batch in a batch, refused later): judged too.
                    one_identity({**member, "as": envelope if claimed is None else claimed}, inner.fields)
            except GwError as error:
                raise member_refusal(error, position, member.get("op")) from error


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


class View:
    """A read-only view of the state at one snapshot, as of ``now``, with ``settings`` and the identity
    that reads (``actor``): what every read uses (``Workplane.context()``), and what an op's
    :class:`Context` builds on. It reads only through the snapshot and writes nothing."""

    def __init__(self, snapshot: Snapshot, now: _dt.datetime, settings: Settings, actor: str | None = None) -> None:
        self.snapshot = snapshot
        self.now = now
        self.when = stamp(now)
        self.settings = settings
        self.actor: str = actor or settings.identity()
        self._items: dict[str, Item] = {}
        self._leases: dict[str, Lease | None] = {}
        self._index: Any = None

    # --- reading -------------------------------------------------------------------------------

    def _pending_items(self) -> list[str]:
        """Ids of items written but not yet committed (an op's own writes; a view has none)."""
        return []

    def resolve(self, text: str) -> str:
        """A full item id from a unique prefix; reads a single shard when two digits are given."""
        hex_prefix = ids.normalise_prefix(text)
        full = ids.PREFIX + hex_prefix
        if ids.is_full(full) and self.file(layout.item_path(full, layout.ITEM_FILE)) is not None:
            return full  # a full id of an item that exists (a batch resolves hundreds: no listing)
        if len(hex_prefix) >= 2:
            names: Iterable[str] = self.snapshot.tree(f"{layout.ITEMS}/{hex_prefix[:2]}").keys()
        else:
            names = [
                name
                for shard, entry in self.snapshot.tree(layout.ITEMS).items()
                if shard.startswith(hex_prefix)
                for name in self.snapshot.store.read_tree(entry.oid)
            ]
        return ids.resolve(hex_prefix, {*names, *self._pending_items()}, text)  # an item changed in this command is in both

    def file(self, path: str) -> bytes | None:
        """A file of the state at the snapshot."""
        return self.snapshot.blob(path)

    def item(self, item_id: str) -> Item:
        cached = self._items.get(item_id)
        if cached is not None:
            return cached
        path = layout.item_path(item_id, layout.ITEM_FILE)
        data = self.file(path)
        if data is None:
            raise NotFound(f"no item {item_id}", id=item_id)
        item = load_item(data, item_id)  # Corrupt, naming the file, unless every field is sound
        self._items[item_id] = item
        return item

    def lease(self, item_id: str) -> Lease | None:
        if item_id not in self._leases:
            path = layout.item_path(item_id, layout.LEASE_FILE)
            data = self.file(path)
            if data is None:
                self._leases[item_id] = None
            else:
                self._leases[item_id] = load_lease(data, item_id)  # Corrupt, naming the file
        return self._leases[item_id]

    def counters(self) -> dict[str, Any]:
        data = self.file(layout.COUNTERS)
        return codec.load_yaml(data, what=layout.COUNTERS) if data else {}

    def records(self, item_id: str, name: str = layout.EVENTS_FILE) -> list[dict[str, Any]]:
        path = layout.item_path(item_id, name)
        data = self.file(path) or b""
        return list(codec.iter_records(data, what=path))

    def index(self) -> Any:
        """The summary index of every item at this snapshot (see ``index.py``)."""
        if self._index is None:
            from .index import load_index

            self._index = load_index(self.snapshot)
        return self._index

    # --- the fencing rule --------------------------------------------------------------------

    def fenced(self, item_id: str, fence: int | None, pinned: str | None = None) -> tuple[Lease | None, int | None]:
        """The fencing rule: refuse unless the actor may act on the item now; ``(its live lease or None,
        the fence acted under)``.

        With a fence (given, or implied when the actor is the holder by name): the lease must be
        active, carry that fence, and not have expired by the holder's clock minus the margin; a
        ``pinned`` grant (a replayed command's) must be the lease's. Without one: nobody else may hold
        a live lease on the item.
        """
        lease = self.lease(item_id)
        margin = self.settings.clock_margin
        if fence is None and lease is not None and lease.is_active() and lease.holder == self.actor:
            # The holder by name: act under the current fence, as if given. --fence also guards
            # against the holder's own stale processes.
            fence = lease.fence
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
            if pinned and lease.grant and pinned != lease.grant:
                raise Stale(f"fence {fence} on {item_id} now belongs to another grant (by {lease.holder})",
                            item=item_id)
            return lease, fence
        if lease is not None and not lease.takeable(self.now, margin):
            raise NotHolder(
                f"{item_id} is held by {lease.holder} (epoch {lease.epoch}); only its holder may do this, with --fence "
                f"(you are {self.actor})",
                item=item_id,
                holder=lease.holder,
                who=self.actor,
            )
        return None, None


class Context(View):
    """One attempt of one op: the :class:`View` it decides on (its reads see its own pending writes),
    the command document, the attempt number (1 on the first try; ``run`` passes it, so an op may act
    differently after a lost race without any state of its own) and the changes it builds."""

    def __init__(self, snapshot: Snapshot, cmd: dict[str, Any], now: _dt.datetime, settings: Settings,
                 attempt: int = 1) -> None:
        super().__init__(snapshot, now, settings, cmd.get("as"))
        self.cmd = cmd
        self.attempt = attempt
        self.outcome = Outcome()
        self._memos: dict[str, dict[str, Any]] = {}

    def _pending_items(self) -> list[str]:
        return [p.split("/")[2] for p in self.outcome.changes if p.endswith(layout.ITEM_FILE)]

    def target(self) -> str:
        """Resolve the command's ``item`` and record the full id in the command document."""
        full = self.resolve(self.cmd["item"])
        self.cmd["item"] = full
        return full

    def file(self, path: str) -> bytes | None:
        """A file of the state as this op sees it: its own pending writes, else the snapshot."""
        if path in self.outcome.changes:
            return self.outcome.changes[path]
        return self.snapshot.blob(path)

    def memo(self, name: str) -> dict[str, Any]:
        """A per-command scratch mapping an op module may keep derived reads in (a thread's last
        number, its ids). A Context lives for one attempt, so a retry starts with an empty one."""
        return self._memos.setdefault(name, {})

    def member(self, cmd: dict[str, Any]) -> Context:
        """A Context for one member of a batch (``ops/batch.py``): it sees the tree as the earlier
        members left it (their pending writes, through :class:`Pending`) and writes into the same
        changes; thread memos are shared, so message numbers continue across members."""
        child = Context(Pending(self.snapshot, self.outcome.changes), cmd, self.now, self.settings, self.attempt)
        child.outcome.changes = self.outcome.changes
        child._memos = self._memos
        return child

    def require_holder(self, item_id: str) -> Lease | None:
        """The fencing rule (:meth:`View.fenced`) for the command's ``fence``; the fence it acted under and
        the lease's grant are recorded in the document, so a replay is pinned to the same lease."""
        lease, fence = self.fenced(item_id, self.cmd.get("fence"), self.cmd.get("lease"))
        if fence is not None:
            self.cmd["fence"] = fence
        if lease is not None and lease.grant:
            self.cmd["lease"] = lease.grant
        return lease

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
        old = self.file(path) or b""
        last = 0
        if old:
            tail = old[: -1].rpartition(b"\n")[2]
            try:
                last = int(json.loads(tail)["seq"])
            except (ValueError, KeyError, TypeError, RecursionError) as exc:
                raise Corrupt(f"{path} ends in a bad record") from exc
        # The log owns "seq": a record's own data can never renumber the log (an op's field of the
        # same name is dropped here; ops name such numbers otherwise, e.g. "message").
        full = {"seq": last + 1}
        full.update((key, value) for key, value in record.items() if key != "seq")
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


class Pending(Snapshot):
    """The base snapshot with a batch's pending writes on top: what a later member reads with
    ``blob`` (e.g. ``new``'s "already exists"). Only blobs are overlaid; listings of the tree go
    through ``Context`` (``resolve``), which sees pending item files itself."""

    def __init__(self, base: Snapshot, changes: dict[str, bytes | None]) -> None:
        super().__init__(base.store, base.commit, base.info)
        self.root = base.root
        self.changes = changes

    def blob(self, path: str) -> bytes | None:
        if path in self.changes:
            return self.changes[path]
        return super().blob(path)


def digest(cmd: dict[str, Any]) -> str:
    """The digest of a command document: SHA-256 of its canonical JSON (keys sorted, nulls left out)."""
    from .hashing import sha256_hex

    canonical = json.dumps({k: v for k, v in cmd.items() if v is not None}, ensure_ascii=False, sort_keys=True,
                           separators=(",", ":"))
    return "sha256:" + sha256_hex(canonical.encode("utf-8", "surrogatepass"))


def _earlier_result(record_path: str, earlier: bytes, cmd: dict[str, Any]) -> dict[str, Any]:
    """The first result of a command id that was applied before, if ``cmd`` is that same command.

    A command id names one command. The record keeps two digests: of the document as it was asked
    for (validated, ``as`` filled, before the op resolved anything) and as it was recorded (the
    ``Command:`` line, which ``sync`` replays). Matching either is a retry or a replay: answer as the
    first time. Anything else reuses the id for a different command: refused. Records written
    before digests existed have none and answer as a duplicate, as they always did.
    """
    try:
        record = json.loads(earlier)
        result = record.get("result", {})
        digests = record.get("digests")
    except (ValueError, RecursionError, AttributeError) as exc:
        raise Corrupt(f"{record_path} is not a JSON record") from exc
    if not isinstance(result, dict) or (digests is not None and not isinstance(digests, list)):
        raise Corrupt(f"{record_path} is not a command record")
    if digests is not None and digest(cmd) not in digests:
        raise Invalid(f"command id {cmd['id']} was used for a different command ({record.get('op')}); "
                      "use a new id", command_id=cmd["id"])
    return {**result, "duplicate": True}


def apply(snapshot: Snapshot, cmd: dict[str, Any], now: _dt.datetime, settings: Settings, *,
          requested: str | None = None, attempt: int = 1) -> Outcome:
    """Run a validated command against ``snapshot``; raise a :class:`GwError` to refuse.

    The outcome depends only on the arguments: ``attempt`` is which try of the command this is
    (``run`` counts its rounds), for an op that spreads its retries (``claim --next``).

    ``requested``: the digest of the document as first asked for, when ``cmd`` is a document already
    recorded (the arbiter's derive check, ``derive.py``, replays the ``Command:`` line, which holds
    what the op resolved; the first document is not in the commit, only its digest).
    """
    _load_ops(cmd["op"])
    record_path = layout.command_path(cmd["id"])
    earlier = snapshot.blob(record_path)
    if earlier is not None:
        # This command id was applied before (a retry whose first reply was lost, a re-sent
        # document, a replay of what already landed): answer as the first time, change nothing.
        outcome = Outcome()
        outcome.result = _earlier_result(record_path, earlier, cmd)
        return outcome
    requested = requested or digest(cmd)
    ctx = Context(snapshot, cmd, now, settings, attempt)
    OPS[cmd["op"]].func(ctx)
    outcome = ctx.outcome
    if outcome.changes:
        if snapshot.commit is None:
            _initialise(outcome)
        recorded = digest(cmd)
        record = {"op": cmd["op"], "at": ctx.when, "by": ctx.actor, "result": outcome.result,
                  "digests": [requested] if recorded == requested else [requested, recorded]}
        outcome.changes[record_path] = json.dumps(record, ensure_ascii=False, sort_keys=True).encode() + b"\n"
    outcome.trailers.setdefault("Command-Id", cmd["id"])
    return outcome


# --- the one path from an outcome to a commit ----------------------------------------------------


class Applied:
    """A command that landed: its commit, result and how many CAS attempts it took."""

    def __init__(self, command: dict[str, Any], commit: str | None, result: dict[str, Any], summary: str,
                 attempts: int) -> None:
        self.command, self.commit, self.result, self.summary, self.attempts = command, commit, result, summary, attempts

    def __repr__(self) -> str:
        return f"Applied({self.summary!r}, commit={self.commit}, result={self.result})"

    def to_json(self) -> dict[str, Any]:
        return {"ok": True, "op": self.command["op"], "command_id": self.command["id"], "commit": self.commit,
                **self.result}


def land(store: Store, snapshot: Snapshot, cmd: dict[str, Any], outcome: Outcome, now: _dt.datetime) -> str | None:
    """Write ``outcome`` as one commit on top of ``snapshot`` (``None``: no changes, no commit).

    The message carries the final command document (:func:`commit_message`), the author is the
    acting identity at ``now``. Only the objects are written: moving a ref is the CAS's business.
    """
    if outcome.empty:
        return None
    return store.write_commit(snapshot, outcome.changes, commit_message(cmd, outcome),
                              identity_signature(cmd["as"]), int(now.timestamp()))


def commit_body(store: Store, snapshot: Snapshot, cmd: dict[str, Any], outcome: Outcome, now: _dt.datetime) -> bytes:
    """The unsigned commit object :func:`land` writes for ``outcome`` (the arbiter's derive check
    compares a pushed commit with it: ``derive.py``); trees and blobs go to ``store.writer``."""
    return store.commit_body(snapshot, outcome.changes, commit_message(cmd, outcome), identity_signature(cmd["as"]),
                             int(now.timestamp()))


class CAS:
    """How :func:`run` moves a ref: the only thing a local write and an arbiter write differ in.

    :func:`run` drives it round by round, passing each round its number: ``begin(cmd, attempt)``
    starts a round (and may return the command's answer when another writer already decided it: a
    sibling process that carried it); ``base()`` is the snapshot the round builds on;
    ``expected(base)`` the value the ref must still have for ``swap(expected, new)`` to move it
    (``False``: someone moved it first); ``lost(attempt)`` ends a lost round (fetch, wait);
    ``again(error)`` says whether a refusal is worth another round (a remote's view may be old);
    ``landed`` finishes the write (``moved``: the ref was swapped). ``limit`` bounds the rounds.
    """

    limit = 1

    def begin(self, cmd: dict[str, Any], attempt: int) -> Applied | None:
        return None

    def base(self) -> Snapshot:
        raise NotImplementedError

    def expected(self, base: Snapshot) -> str | None:
        return base.commit

    def swap(self, old: str | None, new: str) -> bool:
        raise NotImplementedError

    def again(self, error: GwError) -> bool:
        return False

    def lost(self, attempt: int) -> None:
        pass

    def landed(self, applied: Applied, moved: bool) -> Applied:
        return applied

    def gave_up(self) -> GwError:
        return gave_up(self.limit)


def gave_up(rounds: int, remote: str | None = None) -> Held:
    """The one refusal of a write that lost every round of its CAS (exit 75, docs/exit-codes.md: retry
    later), locally or on the arbiter ``remote``; every loop that bounds its rounds ends with it."""
    if remote is None:
        return Held(f"gave up after {rounds} lost races")
    return Held(f"gave up after {rounds} lost races on {remote}", remote=remote)


def run(cas: CAS, cmd: dict[str, Any], now: Callable[[], _dt.datetime], settings: Settings) -> Applied:
    """Decide ``cmd`` on the CAS's base, land it as one commit and swap the ref; on a lost race, again.

    Each attempt works on a fresh copy of ``cmd``: ops record what they resolved (full ids, the item
    ``--next`` picked) in the document, and a retry must start from what the caller sent.
    """
    for attempt in range(1, cas.limit + 1):
        answered = cas.begin(cmd, attempt)
        if answered is not None:
            return answered  # decided by another writer this round (a sibling carried it)
        base = cas.base()
        base.check_format()
        at = now()
        attempt_cmd = dict(cmd)
        try:
            outcome = apply(base, attempt_cmd, at, settings, attempt=attempt)
            new = land(base.store, base, attempt_cmd, outcome, at) or base.commit
        except GwError as error:
            if cas.again(error):
                continue
            raise
        applied = Applied(attempt_cmd, new, outcome.result, outcome.summary, attempt)
        expected = cas.expected(base)
        if new == expected:
            return cas.landed(applied, False)  # nothing to move: a no-op, or an answer already there
        assert new is not None
        if cas.swap(expected, new):
            return cas.landed(applied, True)
        cas.lost(attempt)
    raise cas.gave_up()


def _initialise(outcome: Outcome) -> None:
    from . import FORMAT_VERSION
    from .store import FORMAT_FILE

    outcome.changes.setdefault(FORMAT_FILE, codec.dump_yaml({"format": FORMAT_VERSION}))


# Anything that could end or fake a line in a commit message (or in `git log`'s display of it) is
# written escaped: control characters, DEL, C1 controls, and the Unicode line and paragraph separators.
_LINE_BREAKING = Lazy("[\x00-\x1f\x7f-\x9f\u2028\u2029]")


def one_line(text: str) -> str:
    """``text`` as one line of a commit message: user text (titles, names, reasons) is escaped, so
    it can never start a line of its own, such as a planted ``Command:`` line or a trailer."""
    if text.isascii() and text.isprintable():  # none of _LINE_BREAKING: answered without compiling it
        return text
    return _LINE_BREAKING.sub(lambda m: json.dumps(m.group())[1:-1] if m.group() != "\t" else " ", text)


def commit_message(cmd: dict[str, Any], outcome: Outcome) -> str:
    """One human line, the command document, then trailers: ``git log`` of the ref is the audit trail.

    The layout is fixed (format.md): line 1 the summary, line 2 empty, line 3 ``Command: <json>``,
    line 4 empty, then one trailer per line. JSON escapes every line break inside the document, and
    :func:`one_line` those in the summary and the trailer values, so a message has exactly that shape
    whatever text a user gave.
    """
    document = json.dumps(cmd, ensure_ascii=False, sort_keys=True, separators=(", ", ": "))
    if not (document.isascii() and document.isprintable()):
        document = _LINE_BREAKING.sub(lambda m: "\\u%04x" % ord(m.group()), document)  # U+2028 and kin
    trailers = "\n".join(f"{one_line(k)}: {one_line(str(v))}" for k, v in outcome.trailers.items())
    return f"{one_line(outcome.summary or cmd['op'])}\n\nCommand: {document}\n\n{trailers}\n"


COMMAND_PREFIX = "Command: "


def parse_command_from_message(message: str) -> dict[str, Any] | None:
    """The command document of a state commit, read only from its fixed place: the third line.

    A message whose second line is not empty or whose third line is not ``Command: {...}`` (one JSON
    object) carries no document; no other line is ever taken for one.
    """
    lines = message.split("\n", 3)
    if len(lines) < 3 or lines[1] != "" or not lines[2].startswith(COMMAND_PREFIX + "{"):
        return None
    try:
        doc = json.loads(lines[2][len(COMMAND_PREFIX) :])
    except (ValueError, RecursionError):
        return None
    return doc if isinstance(doc, dict) else None
