"""Reading the fields every source shares into a source record, within gitwork's bounds.

A value gitwork would refuse is either reported as a problem of its line (a title that is missing, a
description over 64 KiB, a priority outside 0-4) or, where gitwork's field is narrower than the
source's (a title over 200 characters, a multi-line close reason), shortened with the original kept
in the record's ``fields``.
"""

from __future__ import annotations

import re

from ..commands import MAX_SHORT, MAX_TEXT, MAX_TITLE
from .source import Problems, clean, instant

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

_BOX = re.compile(r"^\s*(?:[-*+]|\d+[.)])?\s*(?:\[( |x|X)\]\s*)?")


def short_text(value: Any, name: str, fields: dict[str, Any], limit: int = MAX_SHORT) -> str:
    """One line of at most ``limit`` bytes; the original kept in ``fields`` when it had to change."""
    text = clean(str(value))
    one = " ".join(text.split())
    data = one.encode("utf-8")
    if len(data) > limit:
        one = data[:limit].decode("utf-8", "ignore").rstrip()
    if one != value:
        fields[name] = value
    return one


def criteria_from_text(text: str, fields: dict[str, Any]) -> list[dict[str, Any]]:
    """One criterion per non-empty line (a list marker and ``[ ]``/``[x]`` box are read, not kept)."""
    out: list[dict[str, Any]] = []
    for line in clean(text).splitlines():
        match = _BOX.match(line)
        body = line[match.end():].strip() if match else line.strip()
        if not body:
            continue
        checked = bool(match and match.group(1) in ("x", "X"))
        out.append({"text": short_text(body, "acceptance_criteria", fields), "checked": checked})
    if any(len(c["text"]) == 0 for c in out):
        fields["acceptance_criteria"] = text
    return out


def take_common(record: dict[str, Any], fields: dict[str, Any], raw: dict[str, Any], line: int,
                problems: Problems, *, priority: str | None, owner: str | None, created_at: str | None,
                title: str = "title", description: str = "description", labels: str | None = "labels") -> bool:
    """Title, description, priority, owner, labels and creation time into ``record``; False on a problem."""
    value = raw.get(title)
    if not isinstance(value, str) or not clean(value).strip():
        problems.add(line, f"no '{title}'")
        return False
    record["title"] = short_text(value, "title", fields, MAX_TITLE)
    text = raw.get(description)
    if text is not None:
        if not isinstance(text, str):
            problems.add(line, f"{description} must be text")
            return False
        if len(text.encode("utf-8")) > MAX_TEXT:
            problems.add(line, f"{description} is longer than {MAX_TEXT // 1024} KiB")
            return False
        record["description"] = clean(text)
    if priority and raw.get(priority) not in (None, ""):
        number = raw[priority]
        if isinstance(number, str) and re.fullmatch(r"[Pp]?[0-4]", number.strip()):
            number = int(number.strip()[-1])
        if type(number) is not int or not 0 <= number <= 4:
            problems.add(line, f"{priority} must be 0-4 (got {str(number)[:20]!r})")
            return False
        record["priority"] = number
    if owner and raw.get(owner):
        if not isinstance(raw[owner], str):
            problems.add(line, f"{owner} must be text")
            return False
        record["owner"] = clean(raw[owner]).strip() or None
    if labels and raw.get(labels) is not None:
        values = raw[labels]
        if not isinstance(values, list) or not all(isinstance(v, str) for v in values):
            problems.add(line, f"{labels} must be a list of text")
            return False
        record["labels"] = [v for v in (clean(v).strip() for v in values) if v]
    if created_at and raw.get(created_at):
        when = instant(raw[created_at])
        if when is None:
            fields[created_at] = raw[created_at]
        else:
            record["created_at"] = when
    return True
