"""A spreadsheet as CSV (RFC 4180: quoted fields may hold commas, quotes and line breaks), with a mapping.

``--map`` says which column holds which gitwork field: inline (``external=Key,title=Summary,owner=Assignee``)
or a JSON/YAML file holding that mapping. Fields: ``external`` and ``title`` (required), ``description``,
``status``, ``priority``, ``owner``, ``labels`` and ``depends_on`` (separated by ``;``), ``parent``,
``criteria`` (one per line), ``closed_reason``, ``created_at``, ``url``. Without ``--map`` the columns
are those ``gw export --format csv`` writes (``id`` is the external id). Every column not mapped is kept
in the item's provenance. Problems are reported by the line the row starts on.
"""

from __future__ import annotations

import csv
import io

from ..errors import Invalid, UsageError
from .fields import criteria_from_text, short_text, take_common
from .source import MAX_LINE, Problems

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

FIELDS = ("external", "title", "description", "status", "priority", "owner", "labels", "depends_on", "parent",
          "criteria", "closed_reason", "created_at", "url")
DEFAULT_MAP = {"external": "id", **{f: f for f in FIELDS if f != "external"}}
STATUS = {
    **dict.fromkeys(("open", "todo", "to do", "new", "backlog", ""), "open"),
    **dict.fromkeys(("in progress", "in_progress", "doing", "started"), "in_progress"),  # someone works on it
    **dict.fromkeys(("blocked", "on hold", "deferred", "waiting"), "blocked"),
    **dict.fromkeys(("done", "closed", "resolved", "complete", "completed", "fixed"), "done"),
    **dict.fromkeys(("cancelled", "canceled", "wontfix", "won't fix", "not planned", "duplicate"), "cancelled"),
}


def mapping_of(text: str | None) -> dict[str, str]:
    """The column of each gitwork field: inline ``field=Column,...``, a JSON/YAML file, or the default."""
    if text is None:
        return dict(DEFAULT_MAP)
    import os

    if os.path.isfile(text):
        from ..codec import load_input_document
        from ..errors import GwError

        try:
            with open(text, "rb") as handle:
                data = handle.read(MAX_LINE + 1)
            if len(data) > MAX_LINE:
                raise UsageError(f"--map {text}: larger than {MAX_LINE // (1024 * 1024)} MiB")
            doc = load_input_document(data.decode("utf-8"))
        except OSError as exc:
            raise UsageError(f"--map {text}: cannot read it ({exc.strerror or exc})") from exc
        except UnicodeDecodeError as exc:
            raise UsageError(f"--map {text}: not UTF-8 (byte {exc.start})") from exc
        except UsageError:
            raise
        except GwError as exc:
            raise UsageError(f"--map {text}: not a JSON or YAML mapping ({exc.message[:160]})") from exc
    else:
        doc = {}
        for part in text.split(","):
            field, sep, column = part.partition("=")
            if not sep:
                raise UsageError(f"--map {text!r}: expected field=Column pairs separated by commas, or a file")
            doc[field.strip()] = column.strip()
    if not isinstance(doc, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in doc.items()):
        raise UsageError("--map must map gitwork fields to column names")
    unknown = sorted(set(doc) - set(FIELDS))
    if unknown:
        raise UsageError(f"--map: unknown field {unknown[0]!r}; fields: {', '.join(FIELDS)}")
    for needed in ("external", "title"):
        if needed not in doc:
            raise UsageError(f"--map must say which column holds {needed!r}")
    return doc


def _split(value: str) -> list[str]:
    return [part.strip() for part in value.replace("\n", ";").split(";") if part.strip()]


def parse(text: str, path: str, mapping_text: str | None) -> list[dict[str, Any]]:
    mapping = mapping_of(mapping_text)
    csv.field_size_limit(MAX_LINE)
    reader = csv.reader(io.StringIO(text, newline=""), strict=True)
    problems = Problems(path)
    try:
        header = next(reader, None)
    except csv.Error as exc:
        raise Invalid(f"{path}:1: {exc}; nothing was imported") from exc
    if header is None:
        return []
    missing = [column for column in mapping.values() if column not in header]
    if missing:
        raise Invalid(f"{path}:1: no column {missing[0]!r} (the header has {', '.join(header)[:200]})")
    twice = [column for column in mapping.values() if header.count(column) > 1]
    if twice:  # which one holds the field cannot be known: never the last one silently
        raise Invalid(f"{path}:1: column {twice[0]!r} appears {header.count(twice[0])} times in the header; "
                      "rename one; nothing was imported")
    records = []
    start = reader.line_num + 1
    while True:
        try:
            row = next(reader)
        except StopIteration:
            break
        except csv.Error as exc:
            problems.add(start, str(exc))
            break  # the rest of the file cannot be read reliably after a broken quote
        line, start = start, reader.line_num + 1
        if not any(cell.strip() for cell in row):
            continue
        if len(row) != len(header):
            problems.add(line, f"{len(row)} cells where the header has {len(header)}")
            continue
        record = _record(dict(zip(header, row, strict=True)), mapping, line, problems)
        if record is not None:
            records.append(record)
    problems.check()
    return records


def _record(row: dict[str, str], mapping: dict[str, str], line: int, problems: Problems) -> dict[str, Any] | None:
    raw: dict[str, Any] = {field: row[column] for field, column in mapping.items()}
    used = set(mapping.values())
    fields: dict[str, Any] = {column: value for column, value in row.items() if column not in used and value != ""}
    external = raw.get("external", "").strip()
    if not external:
        problems.add(line, f"no {mapping['external']!r}")
        return None
    record: dict[str, Any] = {"external": external, "line": line}
    raw["labels"] = _split(raw.get("labels", "")) if "labels" in raw else None
    if not take_common(record, fields, raw, line, problems, priority="priority", owner="owner",
                       created_at="created_at"):
        return None
    status = raw.get("status", "").strip()
    if status.lower() not in STATUS:
        problems.add(line, f"unknown status {status[:30]!r} (open, in_progress, blocked, done, cancelled or a common synonym)")
        return None
    record["status"] = STATUS[status.lower()]
    if status and status != record["status"]:
        fields["status"] = status
    record["deps"] = _split(raw.get("depends_on", ""))
    if raw.get("parent", "").strip():
        record["parent"] = raw["parent"].strip()
    if raw.get("criteria", "").strip():
        record["criteria"] = criteria_from_text(raw["criteria"], fields)
    if raw.get("closed_reason", "").strip():
        record["closed_reason"] = short_text(raw["closed_reason"], "closed_reason", fields)
    if raw.get("url", "").strip():
        record["url"] = raw["url"].strip()
    record["fields"] = fields
    return record
