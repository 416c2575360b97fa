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
from ..thread import replay

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, TextIO

FORMATS = ("jsonl", "beads", "csv")
CSV_COLUMNS = ("id", "title", "description", "status", "priority", "owner", "labels", "depends_on", "parent",
               "criteria", "closed_reason", "created_at", "url")
_INTERNAL_FIELDS = ("status", "unresolved", "dependency_types", "provenance", "acceptance_criteria", "title",
                    "close_reason")


def items(wp: Any) -> list[dict[str, Any]]:
    """Every item at the tip as its document, with ``thread`` (its messages) and ``held_by`` (a live
    lease's holder), oldest first."""
    ctx = wp.context()
    out = []
    for shard, entry in sorted(ctx.snapshot.tree(layout.ITEMS).items()):
        if not entry.is_tree:
            continue
        for item_id in sorted(ctx.snapshot.store.read_tree(entry.oid)):
            item = ctx.item(item_id)
            doc = item.to_doc()
            lease = ctx.lease(item_id)
            if lease is not None and not lease.takeable(ctx.now, ctx.settings.clock_margin):
                doc["held_by"] = lease.holder
            doc["thread"] = list(replay(ctx.snapshot, item_id))
            out.append(doc)
    out.sort(key=lambda d: (d.get("created_at") or "", d["id"]))
    return out


def write(wp: Any, fmt: str, out: TextIO) -> int:
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


def _beads(docs: list[dict[str, Any]]) -> Any:
    names = {d["id"]: _source(d, "beads") or d["id"] for d in docs}

    def convert(doc: dict[str, Any]) -> dict[str, Any]:
        prov = doc.get("provenance") or {}
        fields = dict(prov.get("fields") or {})
        original = prov.get("original") or {}
        own = names[doc["id"]]
        status = {"done": "closed", "cancelled": "closed"}.get(doc["status"], doc["status"])
        if doc["status"] == "blocked" and fields.get("status") == "deferred":
            status = "deferred"
        out: dict[str, Any] = {k: v for k, v in fields.items() if k not in _INTERNAL_FIELDS}
        out.update(id=own, title=fields.get("title") or doc["title"], description=doc.get("description", ""),
                   status=status, priority=doc.get("priority", 2), issue_type=fields.get("issue_type", "task"),
                   created_at=doc.get("created_at"), updated_at=doc.get("updated_at"))
        owner = original.get("owner") or doc.get("owner") or doc.get("held_by")
        if owner:
            out["assignee"] = owner
        labels = original.get("labels") or {}
        out["labels"] = [labels.get(label, label) for label in doc.get("labels", [])]
        if doc.get("criteria"):
            out["acceptance_criteria"] = "\n".join(
                f"- [{'x' if c.get('checked') else ' '}] {c['text']}" for c in doc["criteria"])
        if doc["status"] in ("done", "cancelled"):
            out["close_reason"] = fields.get("close_reason") or doc.get("closed_reason") or doc["status"]
            out.setdefault("closed_at", doc.get("updated_at"))
        deps = [{"issue_id": own, "depends_on_id": names.get(d, d), "type": "blocks"} for d in doc.get("depends_on", [])]
        if doc.get("parent"):
            deps.append({"issue_id": own, "depends_on_id": names.get(doc["parent"], doc["parent"]), "type": "parent-child"})
        deps += [{"issue_id": own, "depends_on_id": names.get(link["item"], link["item"]), "type": link["kind"]}
                 for link in doc.get("links", [])]
        if deps:
            out["dependencies"] = deps
        comments = [{"id": n, "issue_id": own, "author": m.get("author") or m.get("by"), "text": m.get("text"),
                     "created_at": m.get("written_at") or m.get("at")} for n, m in enumerate(doc["thread"], 1)]
        if comments:
            out["comments"] = comments
        return out

    return convert


def _csv(docs: list[dict[str, Any]], out: TextIO) -> None:
    import csv

    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(CSV_COLUMNS)
    for doc in docs:
        source = (doc.get("provenance") or {}).get("source") or {}
        writer.writerow([
            doc["id"], doc["title"], doc.get("description", ""),
            "open" if doc["status"] == "in_progress" else doc["status"], doc.get("priority", 2),
            doc.get("owner") or "", ";".join(doc.get("labels", [])), ";".join(doc.get("depends_on", [])),
            doc.get("parent") or "",
            "\n".join(f"[{'x' if c.get('checked') else ' '}] {c['text']}" for c in doc.get("criteria", [])),
            doc.get("closed_reason") or "", doc.get("created_at") or "", source.get("url") or "",
        ])
