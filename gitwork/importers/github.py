"""GitHub issues as ``gh issue list --state all --json ...`` prints them: one JSON array of issues.

Fields read (any subset ``--json`` asked for): ``number`` (the external id), ``title``, ``body``
(→ description), ``state`` and ``stateReason`` (``CLOSED`` → done, or cancelled when ``NOT_PLANNED``),
``assignees`` (the first → owner; all kept), ``labels`` (their ``name``), ``comments`` (``author.login``,
``body``, ``createdAt`` → thread messages), ``createdAt``, ``url``. The rest (``author``, ``closedAt``,
``updatedAt``, ``milestone``, ``id``, ...) is kept in the item's provenance. Problems are reported by
the issue's position in the array ("entry N").
"""

from __future__ import annotations

from ..codec import MAX_DEPTH, has_lone_surrogate
from .fields import take_common
from .source import LONE_SURROGATE, MAX_DOCUMENT, WRAPPING, Problems, json_value, message_id, odd_text

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

_USED = ("number", "title", "body", "state", "stateReason", "assignees", "labels", "comments", "createdAt", "url")


def parse(text: str, path: str) -> list[dict[str, Any]]:
    from ..errors import Invalid

    if len(text) > MAX_DOCUMENT:
        raise Invalid(f"{path}: larger than {MAX_DOCUMENT // (1024 * 1024)} MiB (one JSON array is parsed whole); "
                      "export in parts (gh issue list --search ...) and import each")
    try:
        value = json_value(text, MAX_DEPTH - WRAPPING + 1) if text.strip() else []  # the array is one level
    except ValueError as exc:
        raise Invalid(f"{path}: not a JSON array of issues ({str(exc).splitlines()[0][:160]}); nothing was imported") from exc
    if not isinstance(value, list):
        raise Invalid(f"{path}: not a JSON array of issues (gh issue list --json ...); nothing was imported")
    problems = Problems(path, "entry")
    escapes = "\\u" in text
    records = []
    for position, raw in enumerate(value, 1):
        if not isinstance(raw, dict):
            problems.add(position, "not a JSON object")
            continue
        if escapes and has_lone_surrogate(raw):
            problems.add(position, LONE_SURROGATE)
            continue
        record = _record(raw, position, problems)
        if record is not None:
            records.append(record)
    problems.check()
    return records


def _logins(value: Any) -> list[str]:
    if not isinstance(value, list):
        return []
    return [v["login"] for v in value if isinstance(v, dict) and isinstance(v.get("login"), str) and v["login"]]


def _record(raw: dict[str, Any], position: int, problems: Problems) -> dict[str, Any] | None:
    number = raw.get("number")
    if type(number) is not int:
        problems.add(position, "no issue 'number'")
        return None
    external = str(number)
    fields = {k: v for k, v in raw.items() if k not in _USED}
    record: dict[str, Any] = {"external": external, "line": position}
    labels = raw.get("labels")
    if labels is not None and (not isinstance(labels, list) or not all(isinstance(v, dict) for v in labels)):
        problems.add(position, "labels must be a list of objects with a name")
        return None
    raw = {**raw, "labels": [v["name"] for v in labels or () if isinstance(v.get("name"), str)]}
    assignees = _logins(raw.get("assignees"))
    raw["owner"] = assignees[0] if assignees else None
    if len(assignees) > 1:
        fields["assignees"] = assignees
    if not take_common(record, fields, raw, position, problems, priority=None, owner="owner",
                       created_at="createdAt", description="body"):
        return None
    state = str(raw.get("state") or "OPEN").upper()
    if state == "CLOSED":
        record["status"] = "cancelled" if str(raw.get("stateReason") or "").upper() == "NOT_PLANNED" else "done"
        if raw.get("stateReason"):
            record["closed_reason"] = str(raw["stateReason"]).lower().replace("_", " ")
    elif state == "OPEN":
        record["status"] = "open"
    else:
        problems.add(position, f"unknown state {state[:20]!r} (OPEN or CLOSED)")
        return None
    if isinstance(raw.get("url"), str):
        record["url"] = raw["url"]
    comments = raw.get("comments") or []
    if not isinstance(comments, list) or not all(isinstance(c, dict) for c in comments):
        problems.add(position, "comments must be a list of objects")
        return None
    odd = odd_text(comments, "body")
    if odd is not None:
        problems.add(position, f"comments #{odd} body must be text")
        return None
    record["comments"] = [
        {"id": message_id("github", external, c.get("id") or c.get("url") or n),
         "author": (c.get("author") or {}).get("login") or "ghost" if isinstance(c.get("author"), (dict, type(None))) else "ghost",
         "at": c.get("createdAt"), "text": c.get("body")}
        for n, c in enumerate(comments, 1) if isinstance(c.get("body"), str) and c["body"].strip()
    ]
    record["fields"] = fields
    return record
