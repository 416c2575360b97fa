"""The import op: bring one item of another tracker to the state its source gives, idempotently.

``gitwork/importers`` reads a beads, GitHub, CSV or gitwork export and builds one ``import`` document
per item (sent in batches, ``ops/batch.py``); this op decides it on the tip like any command. The item's
id is derived from the source and its external id (or is the gitwork id itself for a gitwork export),
so a second import of the same source finds the item: fields the document carries are set, fields it
leaves out are left alone, and an item already as the source says is not touched at all (a re-import
of an unchanged file writes nothing). Comments become thread messages under ids of their own, posted
once. What gitwork has no field for is kept in the item's provenance. See docs/format.md, "Imported
items".
"""

from __future__ import annotations

import hashlib
import json
import re

from .. import codec, ids, layout
from ..commands import MAX_SHORT, MAX_TEXT, check_text
from ..engine import Context, op
from ..errors import Forbidden, Invalid
from ..model import CLOSED, Item
from ..thread import KINDS as MESSAGE_KINDS
from .common import check_cycle, end_lease, note_parent, parent_of

TYPE_CHECKING = False  # typing costs ~15 ms to import; annotations are strings anyway
if TYPE_CHECKING:
    from typing import Any

SOURCES = ("beads", "github", "csv", "gitwork")
_MESSAGE_ID = re.compile(r"[A-Za-z0-9_.:-]{4,64}\Z")
_INSTANT = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?(Z|[+-]\d\d:\d\d)\Z")


def _short(value: Any, field: str) -> str:
    return check_text(value, field, limit=MAX_SHORT, multiline=False)


def _instant(value: Any, field: str) -> str:
    if not isinstance(value, str) or not _INSTANT.match(value):
        raise Invalid(f"{field} must be an instant like 2030-01-01T12:00:00Z (got {str(value)[:40]!r})")
    return value


def _list_of_mappings(value: Any, field: str) -> list[dict[str, Any]]:
    if not isinstance(value, list) or not all(isinstance(v, dict) for v in value):
        raise Invalid(f"{field} must be a list of mappings")
    return value


def _criteria(value: Any) -> list[dict[str, Any]]:
    out = []
    for n, entry in enumerate(_list_of_mappings(value, "criteria"), 1):
        text = _short(entry.get("text"), f"criteria #{n} text").strip()
        if not text:
            raise Invalid(f"criteria #{n} text must not be empty")
        clean: dict[str, Any] = {"text": text, "checked": bool(entry.get("checked", False))}
        for key in ("by", "at"):
            if entry.get(key) is not None and clean["checked"]:
                clean[key] = _short(entry[key], f"criteria #{n} {key}")
        out.append(clean)
    return out


def _decisions(value: Any) -> list[dict[str, Any]]:
    out = []
    for n, entry in enumerate(_list_of_mappings(value, "decisions"), 1):
        clean = {"number": n, "text": _short(entry.get("text"), f"decisions #{n} text"),
                 "rationale": check_text(entry.get("rationale", ""), f"decisions #{n} rationale", limit=MAX_TEXT)}
        for key in ("by", "at"):
            if entry.get(key) is not None:
                clean[key] = _short(entry[key], f"decisions #{n} {key}")
        for key in ("question", "message"):
            if type(entry.get(key)) is int:
                clean[key] = entry[key]
        out.append(clean)
    return out


def _existing(ctx: Context, text: str) -> str:
    """The full id of an item that exists (``resolve`` reads the item's folder, not its file: an
    import of thousands of items does not parse each one it points at)."""
    return ctx.resolve(text)


def _links(ctx: Context, item_id: str, value: Any) -> list[dict[str, str]]:
    out = []
    for n, entry in enumerate(_list_of_mappings(value, "links"), 1):
        kind = _short(entry.get("kind"), f"links #{n} kind")
        target = _existing(ctx, _short(entry.get("item"), f"links #{n} item"))
        if target == item_id:
            raise Invalid(f"{item_id} cannot link to itself")
        link = {"kind": kind, "item": target}
        if link not in out:
            out.append(link)
    return out


def _parent(ctx: Context, item_id: str, value: str) -> str:
    parent = _existing(ctx, value)
    seen = {item_id}
    current: str | None = parent
    while current is not None:  # the parent chain must not come back to the item
        if current in seen:
            raise Invalid(f"parent cycle: {item_id} would be its own ancestor through {parent}")
        seen.add(current)
        current = parent_of(ctx, current)
    return parent


def _comments(value: Any) -> list[dict[str, Any]]:
    out = []
    first: dict[str, int] = {}
    for n, entry in enumerate(_list_of_mappings(value, "comments"), 1):
        where = f"comments #{n}"
        msg_id = entry.get("id")
        if not isinstance(msg_id, str) or not _MESSAGE_ID.match(msg_id):
            raise Invalid(f"{where} id must be 4-64 letters, digits and _.:- (got {str(msg_id)[:40]!r})")
        if first.setdefault(msg_id, n) != n:  # the thread keeps one message per id: the second would be lost
            raise Invalid(f"{where} id {msg_id!r} is comments #{first[msg_id]}'s too")
        kind = entry.get("kind", "note")
        if kind not in MESSAGE_KINDS:
            raise Invalid(f"{where} kind must be one of {', '.join(MESSAGE_KINDS)}")
        clean: dict[str, Any] = {"id": msg_id, "kind": kind, "by": ids.check_identity(entry.get("by"), f"{where} by"),
                                 "text": check_text(entry.get("text"), f"{where} text", empty=False)}
        if entry.get("at") is not None:
            clean["written_at"] = _instant(entry["at"], f"{where} at")
        if entry.get("to") is not None:
            clean["to"] = ids.check_identity(entry["to"], f"{where} to")
        if type(entry.get("reply_to")) is int and entry["reply_to"] >= 1:
            clean["reply_to"] = entry["reply_to"]
        for key in ("author", "choice", "given_at"):  # given_at: the source's time, as written there
            if entry.get(key) is not None:
                clean[key] = _short(entry[key], f"{where} {key}")
        if type(entry.get("ref")) is int or isinstance(entry.get("ref"), str):  # the source's comment id
            clean["ref"] = entry["ref"] if type(entry["ref"]) is int else _short(entry["ref"], f"{where} ref")
        out.append(clean)
    return out


# --- the three-way merge (docs/shadow.md, "Re-importing") ------------------------------------------
#
# The base is what the last import took from the source, field by field (``provenance.imported``);
# "ours" is the item now, "theirs" the document. A field changes only when the source changed it since
# the last import: gitwork's own work (an item done here, a dependency added here) is never undone.


def merge_value(base: Any, ours: Any, theirs: Any, *, prefer_source: bool = False,
                has_base: bool = True) -> tuple[Any, bool]:
    """The merged value and whether it is a conflict (both sides changed it, differently).

    Without a base (an item imported before bases were kept) any difference is a conflict: which
    side changed it cannot be known, and guessing could undo work done here."""
    if ours == theirs:
        return ours, False
    if has_base and theirs == base:
        return ours, False
    if has_base and ours == base:
        return theirs, False
    return (theirs if prefer_source else ours), True


def merge_set(base: list[Any], ours: list[Any], theirs: list[Any]) -> list[Any]:
    """Ours, minus what the source removed since the base, plus what it added (ours' order first).

    Never a conflict: an element added on either side is kept, one removed on either side goes."""
    removed = [x for x in base if x not in theirs]
    added = [x for x in theirs if x not in base]
    out = [x for x in ours if x not in removed]
    return out + [x for x in added if x not in out]


_SCALARS = ("title", "description", "priority", "owner", "closed_reason", "created_at", "status", "criteria",
            "decisions", "parent", "links")
_SETS = ("labels", "depends_on")
# Fields a source can drop entirely (an assignee removed, no parent any more): absent from an item's
# full document, they merge as the default against the base, like any change. Not links (a main
# document leaves forward links to a second one), nor title and created_at (never dropped).
_DROPPABLE = ("owner", "priority", "parent", "decisions", "closed_reason")
# A field missing from a base: the source did not carry it then, so it stood at the item's default.
_DEFAULTS: dict[str, Any] = {"description": "", "priority": 2, "status": "open", "criteria": [], "decisions": [],
                             "links": [], "labels": [], "depends_on": []}


def _get(item: Item, field: str) -> Any:
    if field == "links":
        return item.extra.get("links") or []
    return getattr(item, field)


def _put(item: Item, field: str, value: Any) -> None:
    if field == "parent":
        item.parent = value or None
    elif field == "links":
        if value:
            item.extra[field] = value
        else:
            item.extra.pop(field, None)
    else:
        setattr(item, field, value)


def _theirs(ctx: Context, item_id: str) -> dict[str, Any]:
    """The document's fields, checked and resolved (full ids), as the item would hold them."""
    cmd = ctx.cmd
    out: dict[str, Any] = {}
    for key in ("title", "description", "priority", "owner", "closed_reason", "created_at", "status"):
        if key in cmd:
            out[key] = cmd[key]
    if "labels" in cmd:
        out["labels"] = sorted(set(cmd["labels"]))
    if "depends_on" in cmd:
        deps = []
        for dep in cmd["depends_on"]:
            full = _existing(ctx, dep)
            if full == item_id:
                raise Invalid(f"{item_id} cannot depend on itself")
            if full not in deps:
                deps.append(full)
        cmd["depends_on"] = out["depends_on"] = deps  # recorded resolved
    if "criteria" in cmd:
        out["criteria"] = _criteria(cmd["criteria"])
    if "decisions" in cmd:
        out["decisions"] = _decisions(cmd["decisions"])
    if "parent" in cmd:
        out["parent"] = cmd["parent"] = _parent(ctx, item_id, cmd["parent"])
    if "links" in cmd:
        out["links"] = cmd["links"] = _links(ctx, item_id, cmd["links"])
    return out


def _storable(value: Any, where: str) -> Any:
    """``value`` as the item file can hold it (what the source kept beside gitwork's fields): a number with
    a fraction as its text (``1.5`` → ``"1.5"``; a whole one as the integer), as the format's readers keep
    what YAML calls a float; a list directly inside a list has no form in the format, so it is refused."""
    if isinstance(value, float):
        return int(value) if value.is_integer() and abs(value) <= 2**53 else repr(value)
    if isinstance(value, dict):
        return {k: _storable(v, f"{where}.{k}") for k, v in value.items()}
    if isinstance(value, list):
        for n, entry in enumerate(value):
            if isinstance(entry, list) and entry:
                raise Invalid(f"{where}[{n}] holds a list directly inside a list, which the item file cannot "
                              "store (a list of mappings can)")
        return [_storable(v, f"{where}[{n}]") for n, v in enumerate(value)]
    return value


def _ticks(criteria: Any) -> list[tuple[Any, Any]]:
    return [(c.get("text"), bool(c.get("checked"))) for c in criteria or () if isinstance(c, dict)]


def _sorted(value: Any) -> Any:
    """``value`` with every mapping's keys in sorted order: the item file must not depend on the key
    order the document happened to have (the recorded ``Command:`` line sorts them, and a replay of
    it must write the same bytes)."""
    if isinstance(value, dict):
        return {k: _sorted(value[k]) for k in sorted(value)}
    if isinstance(value, list):
        return [_sorted(v) for v in value]
    return value


def _held_by_another(ctx: Context, item_id: str) -> str | None:
    lease = ctx.lease(item_id)
    if lease is None or not lease.is_active() or lease.takeable(ctx.now, ctx.settings.clock_margin):
        return None
    return lease.holder if lease.holder != ctx.actor else None


def _wanted(ctx: Context, item_id: str, current: Item | None, native: bool = False
            ) -> tuple[Item, list[dict[str, Any]]]:
    """The item as the merge of the document into the current one leaves it (or a new one), and the
    conflicts found (each left as gitwork has it, unless ``prefer: source``)."""
    cmd = ctx.cmd
    theirs = _theirs(ctx, item_id)
    conflicts: list[dict[str, Any]] = []
    if current is None:
        if "title" not in cmd:
            raise Invalid(f"importing {cmd['source']} {cmd['external']} creates {item_id}: it needs a title")
        item = Item(id=item_id, title=cmd["title"], created_at=cmd.get("created_at") or ctx.when,
                    provenance={"by": ctx.actor, "at": ctx.when})
        for field, value in theirs.items():
            _put(item, field, value)
        # Every merged field, carried or not: a field the source sets later (an assignee, the links a
        # second document brings) then merges against what this import left, not against nothing.
        base: dict[str, Any] = {field: _get(item, field) for field in _SCALARS + _SETS}
    else:
        item = Item.from_doc(current.to_doc())
        known = item.provenance.get("imported") if isinstance(item.provenance, dict) else None
        old = known if isinstance(known, dict) else {}
        base = dict(old)
        prefer = cmd.get("prefer") == "source"
        holder = _held_by_another(ctx, item_id)
        if isinstance(known, dict) and "title" in cmd and not cmd.get("tombstone"):  # the item's whole document
            for field in _DROPPABLE:
                if field not in theirs and field in known:
                    theirs[field] = _DEFAULTS.get(field)
        for field, value in theirs.items():
            ours = _get(item, field)
            if field in _SETS:
                _put(item, field, merge_set(list(old.get(field) or []), list(ours), list(value)))  # no base: []
                base[field] = value
                continue
            if field == "criteria" and _ticks(ours) == _ticks(value):
                base[field] = value
                continue  # who ticked a criterion here, and when, is no difference from the source
            merged, conflict = merge_value(old.get(field, _DEFAULTS.get(field)), ours, value, prefer_source=prefer,
                                           has_base=isinstance(known, dict))
            if field == "status" and holder and merged != ours and not prefer:
                merged, conflict = ours, True  # someone holds it here: the source cannot take it away
            if conflict:
                conflicts.append({"field": field, "gitwork": ours, "source": value,
                                  **({"base": old.get(field, _DEFAULTS.get(field))} if isinstance(known, dict) else {}),
                                  **({"holder": holder} if field == "status" and holder else {})})
            if not conflict or prefer:
                base[field] = value
            _put(item, field, merged)
    if item.status not in CLOSED:
        item.closed_reason = None
    if native:
        return item, conflicts
    prov = dict(item.provenance)
    prov["source"] = {"kind": cmd["source"], "ref": cmd["external"], **({"url": cmd["url"]} if "url" in cmd else {})}
    for key in ("fields", "original"):
        if key in cmd:
            if not isinstance(cmd[key], dict):
                raise Invalid(f"{key} must be a mapping")
            if cmd[key]:
                prov[key] = _sorted(_storable(cmd[key], key))
            else:
                prov.pop(key, None)
    if base:
        prov["imported"] = base
    item.provenance = prov
    return item, conflicts


# --- the digest of the last document taken whole (docs/shadow.md, "Re-importing") ------------------
#
# An item keeps, in ``provenance.digest``, the digest of the last full document whose every field the
# merge took (no conflict left): its base then equals that document, so the same document again can
# only leave the item as it is (theirs == base keeps ours, its comments are posted already). Such a
# document is answered "unchanged" from the item file's bytes, without parsing the item: this is what
# makes an unchanged re-import of thousands of items cheap. Any other outcome drops the digest.

_DIGEST_VERSION = "import/1"  # bump when the merge's meaning changes: older digests then never match


def _digest(cmd: dict[str, Any]) -> str | None:
    """The digest of an item's full document as sent (None for a tombstone or a links-only document)."""
    if "title" not in cmd or cmd.get("tombstone"):
        return None
    sent = {k: v for k, v in cmd.items() if k not in ("id", "as", "prefer")}
    text = json.dumps([_DIGEST_VERSION, sent], ensure_ascii=False, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:40]


def _stored_digest(raw: bytes) -> bytes | None:
    """The digest line of the item file's provenance (``  digest: ...``), read without parsing the
    file: the top-level ``provenance:`` key, then its own keys (two spaces in; deeper lines and block
    text are indented further, so nothing but the key itself can look like it)."""
    start = raw.find(b"\nprovenance:\n")
    if start < 0:
        return None
    for line in raw[start + 13:].split(b"\n"):
        if not line.startswith(b" "):
            return None  # the next top-level key: no digest
        if line.startswith(b"  digest: "):
            return line
    return None


def _digest_line(digest: str) -> bytes:
    return b"  " + codec.dump_yaml({"digest": digest}).rstrip(b"\n")


def _same_source(item: Item, kind: str, external: str) -> bool:
    source = item.provenance.get("source") if isinstance(item.provenance, dict) else None
    return isinstance(source, dict) and source.get("kind") == kind and source.get("ref") == external


def _but(doc: dict[str, Any], *keys: str) -> dict[str, Any]:
    return {k: v for k, v in (doc.get("provenance") or {}).items() if k not in keys}


def _changes(before: Item, after: Item) -> list[str]:
    """The fields that differ (the merge base alone changing reads as ``provenance``; the digest
    alone is no change: an item imported before digests were kept is not rewritten for one)."""
    old, new = before.to_doc(), after.to_doc()
    keys = sorted((set(old) | set(new)) - {"updated_at"})
    changed = [key for key in keys if old.get(key) != new.get(key)]
    if "provenance" in changed and (_but(old, "digest") == _but(new, "digest") or (
            len(changed) > 1 and _but(old, "imported", "digest") == _but(new, "imported", "digest"))):
        changed.remove("provenance")
    return changed


@op("import", "create or update an item from another tracker's export (idempotent; a three-way merge)", who="people and admins; agents never.",
    roles=True, item="item!", source="|".join(SOURCES) + "!", external="short!", url="short", title="title",
    description="text", status="open|in_progress|blocked|done|cancelled", priority="priority", labels="labels",
    owner="name", depends_on="items", parent="item", links="data", criteria="data", decisions="data",
    closed_reason="short", created_at="short", comments="data", fields="data", original="data", tombstone="bool",
    prefer="source|gitwork")
def import_item(ctx: Context) -> None:
    cmd = ctx.cmd
    item_id = cmd["item"]
    if ctx.settings.role(ctx.actor) == "agent":  # agents act only on what they hold: an import acts on anything
        raise Forbidden(f"{ctx.actor} is listed as an agent (setting 'agents'): agents do not import",
                        who=ctx.actor, role="agent")
    if not ids.is_full(item_id):
        raise Invalid(f"an imported item's id must be a full id (w- and 16 hex digits), got {item_id!r}")
    if "created_at" in cmd:
        _instant(cmd["created_at"], "created_at")
    source, external = cmd["source"], cmd["external"]
    derived = ids.imported_as(source, external)
    if item_id != derived:  # a chosen id could squat the one another source's item derives to
        raise Invalid(f"{source} {external!r} imports as {derived}, not {item_id}", item=item_id)
    digest = _digest(cmd)  # of the document as sent, before the merge resolves anything in it
    raw = ctx.file(layout.item_path(item_id, layout.ITEM_FILE))
    if raw is not None and digest is not None and _stored_digest(raw) == _digest_line(digest):
        ctx.outcome.result = {"item": item_id, "external": external, "action": "unchanged"}
        return
    current = ctx.item(item_id) if raw else None
    # An item made here, back from gitwork's own beads export (which names it by its gitwork id):
    # gitwork is its source of truth. Nothing about it is recorded as imported, no comment is posted,
    # and a field that differs is a conflict (there is no base), taken only with prefer: source.
    native = (source == "beads" and current is not None and external == item_id
              and not (isinstance(current.provenance, dict) and current.provenance.get("source")))
    if current is not None and not native and not _same_source(current, source, external):
        raise Invalid(f"{item_id} exists and was not imported from {source} {external!r}: the ids collide",
                      item=item_id)
    if cmd.get("tombstone"):
        # Deleted in the source: never a live item. One imported before is cancelled; none is created.
        if current is None or current.status == "cancelled":
            ctx.outcome.result = {"item": item_id, "external": external, "action": "unchanged"}
            return
        cmd.update(status="cancelled", closed_reason=cmd.get("closed_reason") or f"deleted in {source}")
    wanted, conflicts = _wanted(ctx, item_id, current, native=native)
    if not native:
        if digest is not None and (not conflicts or cmd.get("prefer") == "source"):
            wanted.provenance["digest"] = digest  # taken whole: the same document again changes nothing
        elif digest is not None or cmd.get("tombstone"):
            wanted.provenance.pop("digest", None)
    changed = _changes(current, wanted) if current is not None else ["created"]
    if current is not None and "status" in changed:
        lease = ctx.require_holder(item_id)  # someone else's live lease: refused (exit 7), not overridden
        if lease is not None and wanted.status in CLOSED:
            end_lease(ctx, lease, "released", reason=wanted.status)
    if "depends_on" in changed and current is not None:
        check_cycle(ctx, item_id, [d for d in wanted.depends_on if d not in current.depends_on])
    posted = 0 if native else _post(ctx, item_id, _comments(cmd.get("comments", [])))
    if changed:
        ctx.save_item(wanted)
        note_parent(ctx, item_id, wanted.parent)
        if current is None:
            ctx.event(item_id, "imported", source=source, external=external, title=wanted.title)
        else:
            ctx.event(item_id, "import-updated", source=source, external=external, changes=changed,
                      **({"conflicts": [c["field"] for c in conflicts]} if conflicts else {}))
    found = {"conflicts": conflicts} if conflicts else {}
    if not changed and not posted:
        ctx.outcome.result = {"item": item_id, "external": external, "action": "unchanged", **found}
        return
    action = "created" if current is None else "updated"
    ctx.say(f"import {source} {external} as {item_id}: {action}", item_id)
    ctx.outcome.result = {"item": item_id, "external": external, "action": action,
                          "changed": [c for c in changed if c != "created"], "comments": posted, **found}


def _post(ctx: Context, item_id: str, comments: list[dict[str, Any]]) -> int:
    """Post the comments the thread does not hold yet (by message id), in order; how many were posted.

    The thread is append-only: a comment already posted is never rewritten (an edit in the source is
    not carried over; see docs/format.md)."""
    if not comments:
        return 0
    from .conversation import post_message, thread_ids

    known = thread_ids(ctx, item_id)
    lease = ctx.lease(item_id)
    epoch = lease.epoch if lease is not None else 0
    posted = 0
    for comment in comments:
        if comment["id"] in known:
            continue
        extra: dict[str, Any] = {k: comment[k] for k in ("by", "written_at", "author", "choice", "ref", "given_at")
                                 if k in comment}
        extra["imported_by"] = ctx.actor  # `by` is the source's author: who put it here is the importer
        post_message(ctx, item_id, comment["kind"], comment["text"], epoch=epoch, to=comment.get("to"),
                     reply_to=comment.get("reply_to"), msg_id=comment["id"], **extra)
        posted += 1
    if posted:
        ctx.event(item_id, "comments-imported", count=posted)
    return posted


_SHADOW = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}\Z")


@op("shadow-report", "record a shadow comparison's report on the state ref (docs/shadow.md)", who="anyone.",
    shadow="short!", report="data!")
def shadow_report(ctx: Context) -> None:
    from .. import codec

    name = ctx.cmd["shadow"]
    if not _SHADOW.match(name):
        raise Invalid(f"shadow name {name[:40]!r}: letters, digits and _.- only, at most 64")
    report = ctx.cmd["report"]
    if not isinstance(report, dict) or not isinstance(report.get("counts"), dict) \
            or type(report.get("compared")) is not int or type(report.get("agree")) is not int:
        raise Invalid("a shadow report is a mapping with compared, agree and counts")
    path = f"shadow/{name}/reports.log"  # append-only: the comparison window's history
    old = ctx.file(path) or b""
    record = {"seq": old.count(b"\n") + 1, "at": ctx.when, "by": ctx.actor, **report}
    ctx.outcome.changes[path] = old + codec.encode_record(record)
    ctx.say(f"shadow report {name} by {ctx.actor}: {report['agree']}/{report['compared']} agree")
    ctx.outcome.result = {"name": name, "seq": record["seq"], "compared": report["compared"], "agree": report["agree"]}
