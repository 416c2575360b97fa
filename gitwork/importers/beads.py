"""beads' ``.beads/issues.jsonl``: one issue per line (docs/format.md, "Imported items", has the mapping).

Fields read: ``id``, ``title``, ``description``, ``acceptance_criteria`` (one criterion per non-empty
line, ``- [x]`` checked), ``status`` (:data:`STATUS`; docs/shadow.md has the table both ways; the
original kept when the mapping loses it), ``priority``, ``assignee``
(→ owner), ``labels``, ``dependencies`` (``blocks``, ``conditional-blocks``, ``waits-for`` → dependency;
``parent-child`` → parent; anything else, e.g. ``related``, ``discovered-from`` → a link that blocks
nothing; every edge is also kept as given), ``comments`` (→ thread messages, with their beads id and
time as given), ``created_at`` (and the text as given when it is not plain UTC seconds),
``close_reason``. Every other field
(``issue_type``, ``design``, ``notes``, ``updated_at``, ``closed_at``, ``external_ref``, ...) is kept
in the item's provenance.
"""

from __future__ import annotations

from .. import ids
from .fields import criteria_from_text, short_text, take_common
from .source import Problems, instant, message_id, odd_text, parse_lines

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

BLOCKING = ("blocks", "conditional-blocks", "waits-for")
# beads status -> gitwork status (docs/shadow.md, "Status mapping"). Only ``open`` is ready work: an
# issue someone works on there (in_progress, hooked) or that is not work to pick up (pinned, blocked,
# deferred, a custom status) stays out of ``gw ready``. The beads status is kept when the mapping
# loses it, so the beads export writes it back.
STATUS = {"open": "open", "in_progress": "in_progress", "hooked": "in_progress", "closed": "done",
          "blocked": "blocked", "deferred": "blocked", "pinned": "blocked"}
UNKNOWN_STATUS = "blocked"
_USED = ("id", "title", "description", "acceptance_criteria", "status", "priority", "assignee", "labels",
         "dependencies", "comments", "created_at", "close_reason")


def parse(text: str, path: str) -> list[dict[str, Any]]:
    return parse_lines(text, path, _record)


def _record(raw: dict[str, Any], line: int, problems: Problems) -> dict[str, Any] | None:
    external = raw.get("id")
    if not isinstance(external, str) or not external.strip():
        problems.add(line, "no 'id'")
        return None
    record: dict[str, Any] = {"external": external, "line": line}
    if ids.is_full(external):
        record["item"] = external  # an item made in gitwork, back from its beads export: its own id
    fields = {k: v for k, v in raw.items() if k not in _USED}
    status = raw.get("status") or "open"
    if not isinstance(status, str):
        problems.add(line, "status must be text")
        return None
    if status == "tombstone":
        record.update(tombstone=True, fields=fields)
        return record
    record["status"] = STATUS.get(status, UNKNOWN_STATUS)
    if record["status"] != status and status != "closed":
        fields["status"] = status
    if not take_common(record, fields, raw, line, problems, priority="priority", owner="assignee",
                       created_at="created_at"):
        return None
    if isinstance(raw.get("created_at"), str) and record.get("created_at") != raw["created_at"]:
        fields["created_at"] = raw["created_at"]  # as given (offset, fractions): the export writes it back
    criteria = raw.get("acceptance_criteria")
    if criteria:
        if not isinstance(criteria, str):
            problems.add(line, "acceptance_criteria must be text")
            return None
        record["criteria"] = criteria_from_text(criteria, fields)
    if raw.get("close_reason") and record["status"] == "done":
        record["closed_reason"] = short_text(raw["close_reason"], "close_reason", fields)
    elif raw.get("close_reason"):
        fields["close_reason"] = raw["close_reason"]
    if not _dependencies(record, raw.get("dependencies"), external, line, problems, fields):
        return None
    comments = raw.get("comments") or []
    if not isinstance(comments, list) or not all(isinstance(c, dict) for c in comments):
        problems.add(line, "comments must be a list of objects")
        return None
    odd = odd_text(comments, "text")
    if odd is not None:
        problems.add(line, f"comments #{odd} text must be text")
        return None
    record["comments"] = [
        {"id": message_id("beads", external, c.get("id", n)), "author": str(c.get("author") or "unknown"),
         "at": c.get("created_at"), "text": c.get("text"), "ref": c.get("id", n),
         "given_at": c["created_at"] if isinstance(c.get("created_at"), str)
         and instant(c["created_at"]) != c["created_at"] else None}
        for n, c in enumerate(comments, 1) if isinstance(c.get("text"), str) and c["text"].strip()
    ]
    record["fields"] = fields
    return record


def _dependencies(record: dict[str, Any], deps: Any, external: str, line: int, problems: Problems,
                  fields: dict[str, Any]) -> bool:
    if deps is None:
        return True
    if not isinstance(deps, list):
        problems.add(line, "dependencies must be a list")
        return False
    blocking: list[str] = []
    links: list[tuple[str, str]] = []
    own: list[dict[str, Any]] = []
    for dep in deps:
        if not isinstance(dep, dict) or not isinstance(dep.get("depends_on_id"), str):
            problems.add(line, "each dependency needs a 'depends_on_id'")
            return False
        if dep.get("issue_id") not in (None, external):
            continue  # an edge of another issue, listed here too
        own.append(dep)
        target, kind = dep["depends_on_id"], dep.get("type") or "blocks"
        if kind in BLOCKING:
            blocking.append(target)
            if kind != "blocks":
                fields.setdefault("dependency_types", {})[target] = kind
        elif kind == "parent-child" and "parent" not in record:
            record["parent"] = target
        else:
            links.append((kind, target))
    record["deps"] = blocking
    record["links"] = links
    if own:
        # Every edge as given (its type, time and author; those on ids outside the file included):
        # the beads export writes back each one gitwork still has, and every one it cannot have.
        fields["dependencies"] = own
    return True
