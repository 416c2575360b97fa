"""gitwork's own export (``gw export --format jsonl``): one item per line, with its thread.

Everything needed to rebuild the items: ``id`` (kept: the import makes the same item), ``title``,
``description``, ``status`` (as given: ``in_progress`` stays ``in_progress``, with no lease, as for beads
and CSV, so it is not offered by ``gw ready``; docs/shadow.md, "Status mapping"),
``priority``, ``owner``, ``labels``, ``depends_on``, ``parent``, ``links``, ``criteria``, ``decisions``,
``closed_reason``, ``created_at`` and ``thread`` (each message with its id, author, kind and time).
The exported ``provenance`` is kept in the new item's provenance, under ``fields``.
"""

from __future__ import annotations

from .. import ids
from .fields import take_common
from .source import Problems, parse_lines

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

STATUSES = ("open", "in_progress", "blocked", "done", "cancelled")


def parse(text: str, path: str) -> list[dict[str, Any]]:
    return parse_lines(text, path, _record)


def _record(raw: dict[str, Any], line: int, problems: Problems) -> dict[str, Any] | None:
    item = raw.get("id")
    if not isinstance(item, str) or not ids.is_full(item):
        problems.add(line, "no gitwork item 'id' (w- and 16 hex digits)")
        return None
    record: dict[str, Any] = {"external": item, "item": item, "line": line}
    fields: dict[str, Any] = {}
    if not take_common(record, fields, raw, line, problems, priority="priority", owner="owner",
                       created_at="created_at"):
        return None
    status = raw.get("status", "open")
    if status not in STATUSES:
        problems.add(line, f"unknown status {str(status)[:20]!r}")
        return None
    record["status"] = status
    for key in ("depends_on", "criteria", "decisions", "links", "thread"):
        if not isinstance(raw.get(key, []), list):
            problems.add(line, f"{key} must be a list")
            return None
    record["deps"] = [d for d in raw.get("depends_on", []) if isinstance(d, str)]
    if isinstance(raw.get("parent"), str):
        record["parent"] = raw["parent"]
    record["links"] = [(link.get("kind"), link.get("item")) for link in raw.get("links", [])
                       if isinstance(link, dict) and isinstance(link.get("kind"), str) and isinstance(link.get("item"), str)]
    record["criteria"] = raw.get("criteria", [])
    record["decisions"] = raw.get("decisions", [])
    if isinstance(raw.get("closed_reason"), str):
        record["closed_reason"] = raw["closed_reason"]
    record["comments"] = [
        {"id": m.get("id"), "author": m.get("author") or m.get("by"), "at": m.get("written_at") or m.get("at"),
         "text": m.get("text"), "kind": m.get("kind"), "to": m.get("to"), "reply_to": m.get("reply_to"),
         "choice": m.get("choice")}
        for m in raw.get("thread", []) if isinstance(m, dict)
    ]
    if isinstance(raw.get("provenance"), dict) and raw["provenance"]:
        fields["provenance"] = raw["provenance"]
    record["fields"] = fields
    return record
