"""What every reader shares: bounded reading, JSON lines, problems reported by line, instants, ids.

Kept apart from the package's ``__init__`` (the plan and the batches), so the readers import this
and nothing imports them back.
"""

from __future__ import annotations

import hashlib
import json
import re

from .. import ids
from ..codec import MAX_DEPTH, check_depth, has_lone_surrogate
from ..errors import Invalid, UsageError

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, Callable

MAX_FILE = 256 * 1024 * 1024  # a whole export (read line by line after that, but held whole)
MAX_DOCUMENT = 128 * 1024 * 1024  # an export that is one JSON document (GitHub's array): parsed whole
MAX_LINE = 8 * 1024 * 1024  # one JSON line (one issue with its comments)
MAX_ERRORS = 10  # malformed lines named in one report
# A JSON "\ud800" escape decodes to a str no UTF-8 can hold: refused where it is read, by its line.
LONE_SURROGATE = "holds a lone surrogate escape (\\ud800-\\udfff), not text"


class Problems:
    """Malformed input found while reading: each by line number, reported together as one line."""

    def __init__(self, path: str, unit: str = "line") -> None:
        self.path, self.unit = path, unit
        self.found: list[str] = []
        self.count = 0

    def add(self, line: int, message: str) -> None:
        self.count += 1
        if len(self.found) < MAX_ERRORS:
            # FILE:N: as every refusal by line reads (a GitHub export is one document: FILE: entry N:)
            where = f"{self.path}:{line}" if self.unit == "line" else f"{self.path}: {self.unit} {line}"
            self.found.append(f"{where}: {message}")

    def check(self) -> None:
        if self.count:
            more = f" (and {self.count - len(self.found)} more)" if self.count > len(self.found) else ""
            raise Invalid(f"{'; '.join(self.found)}{more}; nothing was imported",
                          problems=self.found, count=self.count)


def read_text(path: str, limit: int | None = None) -> str:
    """The whole file as text, at most ``limit`` bytes (default ``MAX_FILE``; ``-``: stdin); unreadable
    is a usage error."""
    import sys

    limit = MAX_FILE if limit is None else limit
    try:
        if path == "-":
            stream = getattr(sys.stdin, "buffer", None)  # a text stream in-process (tests): its text
            data = stream.read(limit + 1) if stream is not None else sys.stdin.read(limit + 1).encode("utf-8")
        else:
            with open(path, "rb") as handle:
                data = handle.read(limit + 1)
    except OSError as exc:
        raise UsageError(f"cannot read {path}: {exc.strerror or exc}") from exc
    if len(data) > limit:
        raise Invalid(f"{path} is larger than {limit // (1024 * 1024)} MiB")
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        line = data[: exc.start].count(b"\n") + 1
        raise Invalid(f"{path}:{line}: not UTF-8; nothing was imported") from exc


# The levels an import document puts around a line's values (the batch, its ops, the document, its
# fields): a line is bounded by what is left, so a deep value is refused here, by its line, not by the
# batch's own bound, which cannot say where in the file it came from.
WRAPPING = 4


def json_value(text: str, limit: int = MAX_DEPTH - WRAPPING) -> Any:
    """One JSON value, bounded in nesting (``ValueError`` with the reason)."""
    try:
        value = json.loads(text)
    except RecursionError:
        raise ValueError(f"nested deeper than {limit} levels") from None
    check_depth(value, limit)
    return value


def json_lines(text: str, path: str, problems: Problems) -> list[tuple[int, dict[str, Any]]]:
    """``(line number, object)`` for each non-blank line; malformed lines go to ``problems``."""
    out = []
    for number, line in enumerate(text.split("\n"), 1):
        if not line.strip():
            continue
        if len(line) > MAX_LINE:
            problems.add(number, f"longer than {MAX_LINE // (1024 * 1024)} MiB")
            continue
        try:
            value = json_value(line)
        except ValueError as exc:
            problems.add(number, f"not a JSON object ({str(exc).splitlines()[0][:120]})")
            continue
        if not isinstance(value, dict):
            problems.add(number, "not a JSON object")
            continue
        if "\\u" in line and has_lone_surrogate(value):
            problems.add(number, LONE_SURROGATE)
            continue
        out.append((number, value))
    return out


_CONTROL = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")


def clean(text: str) -> str:
    """Text without control characters (gitwork refuses them; tabs and line breaks stay)."""
    return _CONTROL.sub("", text)


_INSTANT = re.compile(r"(\d{4})-(\d\d)-(\d\d)[T ](\d\d):(\d\d):(\d\d)(?:[.,](\d+))?\s*(Z|[+-]\d\d:?\d\d)?\Z", re.I)


def instant(text: Any) -> str | None:
    """An ISO-8601 time as gitwork writes instants (UTC, seconds, ``Z``); ``None`` if it is not one."""
    import datetime as dt

    if not isinstance(text, str):
        return None
    match = _INSTANT.match(text.strip())
    if not match:
        return None
    year, month, day, hour, minute, second = (int(g) for g in match.groups()[:6])
    zone = match.group(8) or "Z"
    try:
        when = dt.datetime(year, month, day, hour, minute, second, tzinfo=dt.timezone.utc)
    except ValueError:
        return None
    if zone.upper() != "Z":
        sign = 1 if zone[0] == "+" else -1
        digits = zone[1:].replace(":", "")
        try:
            when -= sign * dt.timedelta(hours=int(digits[:2]), minutes=int(digits[2:]))
        except OverflowError:
            return None  # in UTC it is before year 1 or after 9999: no instant gitwork can write
    return when.strftime("%Y-%m-%dT%H:%M:%SZ")


item_id = ids.imported


def odd_text(comments: list[dict[str, Any]], key: str) -> int | None:
    """The number (from 1) of the first comment whose ``key`` is neither text nor absent/null, or None.
    Such a comment cannot be posted, and skipping it would lose it while the import answers success."""
    return next((n for n, c in enumerate(comments, 1) if c.get(key) is not None and not isinstance(c[key], str)),
                None)


def message_id(kind: str, external: str, comment: Any) -> str:
    return "m-" + hashlib.sha256(f"{kind}:{external}:{comment}".encode("utf-8", "surrogatepass")).hexdigest()[:16]


def parse_lines(text: str, path: str, record: Callable[[dict[str, Any], int, Problems], dict[str, Any] | None]
                ) -> list[dict[str, Any]]:
    """The records of a JSON-lines export: ``record(object, line, problems)`` for each line, every
    problem of the whole file reported at once (nothing is imported from a file with one)."""
    problems = Problems(path)
    records = []
    for line, raw in json_lines(text, path, problems):
        found = record(raw, line, problems)
        if found is not None:
            records.append(found)
    problems.check()
    return records
