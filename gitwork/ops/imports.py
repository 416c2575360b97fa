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

import re

from .. import ids, layout
from ..commands import MAX_SHORT, MAX_TEXT, check_text
from ..engine import Context, op
from ..errors import Forbidden, Invalid
from ..model import CLOSED, Item
from ..thread import KINDS as MESSAGE_KINDS
from .common import check_cycle, end_lease

TYPE_CHECKING = False  # typing costs ~15 ms to import; annotations are strings anyway
if TYPE_CHECKING:
    from typing import Any

SOURCES = ("beads", "github", "csv", "gitwork")
_MESSAGE_ID = re.compile(r"[A-Za-z0-9_.:-]{4,64}\Z")
_INSTANT = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?(Z|[+-]\d\d:\d\d)\Z")
# Item fields an import document sets directly when it carries them.
_PLAIN = ("title", "description", "priority", "owner", "closed_reason")


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


def _parent_of(ctx: Context, item_id: str) -> str | None:
    # Only `import` writes `parent`, and it notes each write here: the memo is shared by the members
    # of a batch, so a chain is read once per command, not once per member.
    parents = ctx.memo("_import_parents")
    if item_id not in parents:
        parents[item_id] = ctx.item(item_id).extra.get("parent")
    return parents[item_id]


def _parent(ctx: Context, item_id: str, value: str) -> str:
    parent = _existing(ctx, value)
    seen = {item_id}
    current: str | None = parent
    while current is not None:  # the parent chain must not come back to the item
        if current in seen:
            raise Invalid(f"parent cycle: {item_id} would be its own ancestor through {parent}")
        seen.add(current)
        current = _parent_of(ctx, current)
    return parent


def _comments(value: Any) -> list[dict[str, Any]]:
    out = []
    for n, entry in enumerate(_list_of_mappings(value, "comments"), 1):
        where = f"comments #{n}"
        msg_id = entry.get("id")
        if not isinstance(msg_id, str) or not _MESSAGE_ID.match(msg_id):
            raise Invalid(f"{where} id must be 4-64 letters, digits and _.:- (got {str(msg_id)[:40]!r})")
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
        for key in ("author", "choice"):
            if entry.get(key) is not None:
                clean[key] = _short(entry[key], f"{where} {key}")
        out.append(clean)
    return out


def _wanted(ctx: Context, item_id: str, current: Item | None) -> Item:
    """The item as the document says it should be: the current one (or a new one) with the
    document's fields set."""
    cmd = ctx.cmd
    if current is None:
        if "title" not in cmd:
            raise Invalid(f"importing {cmd['source']} {cmd['external']} creates {item_id}: it needs a title")
        item = Item(id=item_id, title=cmd["title"], created_at=cmd.get("created_at") or ctx.when,
                    provenance={"by": ctx.actor, "at": ctx.when})
    else:
        item = Item.from_doc(current.to_doc())
    for key in _PLAIN:
        if key in cmd:
            setattr(item, key, cmd[key])
    if "created_at" in cmd:
        item.created_at = cmd["created_at"]
    if "labels" in cmd:
        item.labels = sorted(set(cmd["labels"]))
    if "depends_on" in cmd:
        deps = []
        for dep in cmd["depends_on"]:
            full = _existing(ctx, dep)
            if full == item_id:
                raise Invalid(f"{item_id} cannot depend on itself")
            if full not in deps:
                deps.append(full)
        cmd["depends_on"] = deps  # recorded resolved
        item.depends_on = deps
    if "criteria" in cmd:
        item.criteria = _criteria(cmd["criteria"])
    if "decisions" in cmd:
        item.decisions = _decisions(cmd["decisions"])
    if "parent" in cmd:
        item.extra["parent"] = cmd["parent"] = _parent(ctx, item_id, cmd["parent"])
    if "links" in cmd:
        links = _links(ctx, item_id, cmd["links"])
        cmd["links"] = links
        if links:
            item.extra["links"] = links
        else:
            item.extra.pop("links", None)
    if "status" in cmd and not (cmd["status"] == "open" and item.status == "in_progress"):
        item.status = cmd["status"]  # an item someone holds here is "open" to the source: not a change
    if item.status not in CLOSED:
        item.closed_reason = None
    prov = dict(item.provenance)
    prov["source"] = {"kind": cmd["source"], "ref": cmd["external"], **({"url": cmd["url"]} if "url" in cmd else {})}
    for key in ("fields", "original"):
        if key in cmd:
            if not isinstance(cmd[key], dict):
                raise Invalid(f"{key} must be a mapping")
            if cmd[key]:
                prov[key] = cmd[key]
            else:
                prov.pop(key, None)
    item.provenance = prov
    return item


def _same_source(item: Item, kind: str, external: str) -> bool:
    source = item.provenance.get("source") if isinstance(item.provenance, dict) else None
    return isinstance(source, dict) and source.get("kind") == kind and source.get("ref") == external


def _changes(before: Item, after: Item) -> list[str]:
    old, new = before.to_doc(), after.to_doc()
    keys = sorted((set(old) | set(new)) - {"updated_at"})
    return [key for key in keys if old.get(key) != new.get(key)]


@op("import", "create or update an item from another tracker's export (idempotent)", roles=True,
    item="item!", source="|".join(SOURCES) + "!", external="short!", url="short", title="title",
    description="text", status="open|blocked|done|cancelled", priority="priority", labels="labels", owner="name",
    depends_on="items", parent="item", links="data", criteria="data", decisions="data", closed_reason="short",
    created_at="short", comments="data", fields="data", original="data", tombstone="bool")
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
    current = ctx.item(item_id) if ctx.file(layout.item_path(item_id, layout.ITEM_FILE)) else None
    source, external = cmd["source"], cmd["external"]
    if current is not None and not _same_source(current, source, external):
        raise Invalid(f"{item_id} exists and was not imported from {source} {external!r}: the ids collide",
                      item=item_id)
    if cmd.get("tombstone"):
        # Deleted in the source: never a live item. One imported before is cancelled; none is created.
        if current is None or current.status == "cancelled":
            ctx.outcome.result = {"item": item_id, "external": external, "action": "unchanged"}
            return
        cmd.update(status="cancelled", closed_reason=cmd.get("closed_reason") or f"deleted in {source}")
    wanted = _wanted(ctx, item_id, current)
    changed = _changes(current, wanted) if current is not None else ["created"]
    if current is not None and "status" in changed:
        lease = ctx.require_holder(item_id)  # someone else's live lease: refused (exit 7), not overridden
        if lease is not None and wanted.status in CLOSED:
            end_lease(ctx, lease, "released", reason=wanted.status)
    if "depends_on" in changed and current is not None:
        check_cycle(ctx, item_id, [d for d in wanted.depends_on if d not in current.depends_on])
    posted = _post(ctx, item_id, _comments(cmd.get("comments", [])))
    if changed:
        ctx.save_item(wanted)
        ctx.memo("_import_parents")[item_id] = wanted.extra.get("parent")
        if current is None:
            ctx.event(item_id, "imported", source=source, external=external, title=wanted.title)
        else:
            ctx.event(item_id, "import-updated", source=source, external=external, changes=changed)
    if not changed and not posted:
        ctx.outcome.result = {"item": item_id, "external": external, "action": "unchanged"}
        return
    action = "created" if current is None else "updated"
    ctx.say(f"import {source} {external} as {item_id}: {action}", item_id)
    ctx.outcome.result = {"item": item_id, "external": external, "action": action,
                          "changed": [c for c in changed if c != "created"], "comments": posted}


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
        extra = {k: comment[k] for k in ("by", "written_at", "author", "choice") if k in comment}
        post_message(ctx, item_id, comment["kind"], comment["text"], epoch=epoch, to=comment.get("to"),
                     reply_to=comment.get("reply_to"), msg_id=comment["id"], **extra)
        posted += 1
    if posted:
        ctx.event(item_id, "comments-imported", count=posted)
    return posted


_SHADOW = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}\Z")


@op("shadow-report", "record a shadow comparison's report on the state ref (docs/shadow.md)",
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
