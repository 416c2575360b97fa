"""``gw export --format jsonl|beads|csv``: every item at the state ref's tip, in a format an import reads.

- ``jsonl``: gitwork's own, one item per line with its thread: ``gw import jsonl`` rebuilds the same
  items (same ids, dependencies, parent, links, criteria, decisions, threads) in another repository.
- ``beads``: beads' issues.jsonl; an item imported from beads gets its beads id, original names and
  the fields gitwork kept for it back.
- ``csv``: the columns ``gw import csv`` reads without ``--map``.

Read-only: it reads one snapshot and writes only to the output stream.
"""

from __future__ import annotations

import json

from .. import layout
from ..model import CLOSED, shard_problem
from ..thread import replay
from .source import instant

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, TextIO

    from ..workplane import Workplane

FORMATS = ("jsonl", "beads", "csv")
CSV_COLUMNS = ("id", "title", "description", "status", "priority", "owner", "labels", "depends_on", "parent",
               "criteria", "closed_reason", "created_at", "url")
_INTERNAL_FIELDS = ("status", "unresolved", "dependency_types", "provenance", "acceptance_criteria", "title",
                    "close_reason", "dependencies", "created_at")


def items(wp: Workplane) -> list[dict[str, Any]]:
    """Every item at the tip as its document, with ``thread`` (its messages) and ``held_by`` (a live
    lease's holder), oldest first."""
    ctx = wp.context()
    out = []
    for shard, entry in sorted(ctx.snapshot.tree(layout.ITEMS).items()):
        if not entry.is_tree:
            continue
        for item_id in sorted(ctx.snapshot.store.read_tree(entry.oid)):
            if shard_problem(shard, item_id) is not None:
                continue  # a forged folder outside its shard is not that item (the engine never reads it)
            item = ctx.item(item_id)
            doc = item.to_doc()
            lease = ctx.lease(item_id)
            if lease is not None and not lease.takeable(ctx.now, ctx.settings.clock_margin):
                doc["held_by"] = lease.holder
            doc["thread"] = list(replay(ctx.snapshot, item_id))
            out.append(doc)
    out.sort(key=lambda d: (d.get("created_at") or "", d["id"]))
    return out


def write(wp: Workplane, fmt: str, out: TextIO) -> int:
    """Write every item in ``fmt`` to ``out``; how many items."""
    docs = items(wp)
    if fmt == "csv":
        _csv(docs, out)
    else:
        convert = _jsonl if fmt == "jsonl" else _beads(docs)
        for doc in docs:
            out.write(json.dumps(convert(doc), ensure_ascii=False, sort_keys=True) + "\n")
    return len(docs)


def _jsonl(doc: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in doc.items() if k != "updated_at"}


def _source(doc: dict[str, Any], kind: str) -> str | None:
    source = (doc.get("provenance") or {}).get("source") or {}
    return source.get("ref") if source.get("kind") == kind else None


# gitwork status -> beads status when the item does not still carry the beads status it came with.
BEADS_STATUS = {"open": "open", "in_progress": "in_progress", "blocked": "blocked", "done": "closed",
                "cancelled": "closed"}


def _unchanged_since_import(doc: dict[str, Any]) -> bool:
    """Whether every field the last import merged still has the value it left (nothing done here
    since): then the source's own times are still the truth about the item."""
    base = (doc.get("provenance") or {}).get("imported")
    if not isinstance(base, dict):
        return False
    now = {**doc, "links": doc.get("links") or []}
    return all(now.get(field) == value for field, value in base.items())


def _beads_status(doc: dict[str, Any], fields: dict[str, Any]) -> str:
    from .beads import STATUS, UNKNOWN_STATUS

    given = fields.get("status")
    base = (doc.get("provenance") or {}).get("imported") or {}
    if doc["status"] == "cancelled" and base.get("status") == "cancelled":
        return "tombstone"  # cancelled by the source's own deletion: deleted there, as beads says it
    if isinstance(given, str) and STATUS.get(given, UNKNOWN_STATUS) == doc["status"]:
        return given  # hooked, pinned, deferred, a custom status: as beads had it
    return BEADS_STATUS.get(doc["status"], "open")


def _beads(docs: list[dict[str, Any]]) -> Any:
    names = {d["id"]: _source(d, "beads") or d["id"] for d in docs}

    def convert(doc: dict[str, Any]) -> dict[str, Any]:
        prov = doc.get("provenance") or {}
        fields = dict(prov.get("fields") or {})
        original = prov.get("original") or {}
        own = names[doc["id"]]
        from_beads = _source(doc, "beads") is not None
        settled = _unchanged_since_import(doc)
        out: dict[str, Any] = {k: v for k, v in fields.items() if k not in _INTERNAL_FIELDS}
        title = fields.get("title") if settled and isinstance(fields.get("title"), str) else doc["title"]
        out.update(id=own, title=title, description=doc.get("description", ""),
                   status=_beads_status(doc, fields), priority=doc.get("priority", 2),
                   created_at=fields["created_at"] if instant(fields.get("created_at")) == doc.get("created_at")
                   else doc.get("created_at"))
        if not from_beads:
            out.setdefault("issue_type", "task")
        # While nothing was done here since the import, the source's own times and texts are still the
        # truth about the item: written back as given. Once something was, gitwork's.
        if not settled:
            out["updated_at"] = doc.get("updated_at")
            out.pop("closed_at", None)
        # Not a lease's holder: a lease is gitwork's, and importing the export back would make the
        # holder the item's owner. The status (in_progress) says someone works on it.
        owner = original.get("owner") or doc.get("owner")
        if owner:
            out["assignee"] = owner
        labels = original.get("labels") or {}
        out["labels"] = [labels.get(label, label) for label in doc.get("labels", [])]
        if settled and isinstance(fields.get("acceptance_criteria"), str):
            out["acceptance_criteria"] = fields["acceptance_criteria"]
        elif doc.get("criteria"):
            out["acceptance_criteria"] = "\n".join(
                f"- [{'x' if c.get('checked') else ' '}] {c['text']}" for c in doc["criteria"])
        if settled and fields.get("close_reason"):
            out["close_reason"] = fields["close_reason"]
        elif doc["status"] in CLOSED and doc.get("closed_reason"):
            out["close_reason"] = doc["closed_reason"]
        if doc["status"] in CLOSED and not settled:
            out["closed_at"] = doc.get("updated_at")  # closed here: its last change is the close
        deps = _edges(doc, own, names, fields)
        if deps:
            out["dependencies"] = deps
        comments = [{"id": m.get("ref", n), "issue_id": own, "author": m.get("author") or m.get("by"),
                     "text": m.get("text"), "created_at": m.get("given_at") or m.get("written_at") or m.get("at")}
                    for n, m in enumerate(doc["thread"], 1)]
        if comments:
            out["comments"] = comments
        return out

    return convert


def _edges(doc: dict[str, Any], own: str, names: dict[str, str], fields: dict[str, Any]) -> list[dict[str, Any]]:
    """Every dependency of the item in beads' form: each edge as the source gave it while gitwork still
    has it (or cannot have it: its target is not an item here), then the edges made in gitwork."""
    from .beads import BLOCKING

    ids = {name: item for item, name in names.items()}
    deps = list(doc.get("depends_on", []))
    parent = doc.get("parent")
    links = [(link["kind"], link["item"]) for link in doc.get("links", [])]
    out: list[dict[str, Any]] = []
    given = fields.get("dependencies")
    for edge in given if isinstance(given, list) else ():
        if not isinstance(edge, dict) or not isinstance(edge.get("depends_on_id"), str):
            continue
        target, kind = ids.get(edge["depends_on_id"]), edge.get("type") or "blocks"
        if target is None:
            out.append(edge)  # on an id outside this state: kept as given
        elif kind in BLOCKING and target in deps:
            deps.remove(target)
            out.append(edge)
        elif kind == "parent-child" and target == parent:
            parent = None
            out.append(edge)
        elif (kind, target) in links:
            links.remove((kind, target))
            out.append(edge)
        # else: removed in gitwork since the import
    known = fields.get("dependency_types")
    types: dict[str, str] = known if isinstance(known, dict) else {}
    out += [{"issue_id": own, "depends_on_id": names.get(d, d), "type": types.get(names.get(d, d), "blocks")}
            for d in deps]
    if parent:
        out.append({"issue_id": own, "depends_on_id": names.get(parent, parent), "type": "parent-child"})
    out += [{"issue_id": own, "depends_on_id": names.get(item, item), "type": kind} for kind, item in links]
    return out


def _csv(docs: list[dict[str, Any]], out: TextIO) -> None:
    import csv

    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(CSV_COLUMNS)
    for doc in docs:
        source = (doc.get("provenance") or {}).get("source") or {}
        writer.writerow([
            doc["id"], doc["title"], doc.get("description", ""),
            doc["status"], doc.get("priority", 2),
            doc.get("owner") or "", ";".join(doc.get("labels", [])), ";".join(doc.get("depends_on", [])),
            doc.get("parent") or "",
            "\n".join(f"[{'x' if c.get('checked') else ' '}] {c['text']}" for c in doc.get("criteria", [])),
            doc.get("closed_reason") or "", doc.get("created_at") or "", source.get("url") or "",
        ])
