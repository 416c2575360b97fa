"""Encoding of everything stored on the state ref.

Two kinds of file:

* YAML documents (items, leases, counters) in one canonical block style that :func:`dump_yaml`
  writes and :func:`load_yaml` reads without importing a YAML library. Anything outside that canonical
  form (a file edited by hand, another tool's output) falls back to ruamel.yaml's safe loader, so the
  files stay ordinary YAML while the hot path stays free of a 40 ms import.
* Append-only logs: one JSON object per line (JSON is YAML too), each carrying its sequence number.
  Logs only ever grow by whole lines.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator

from .errors import Corrupt, Invalid
from .lazyre import Lazy

TYPE_CHECKING = False  # typing costs ~15 ms to import; annotations are strings anyway
if TYPE_CHECKING:
    from typing import Any

# Plain (unquoted) scalars are only used where no YAML reader could take them for anything else.
_PLAIN = re.compile(r"[A-Za-z_][A-Za-z0-9_./@+-]*\Z")
_RESERVED = {"true", "false", "yes", "no", "on", "off", "null", "y", "n", "nan", "inf"}
_KEY = re.compile(r"[A-Za-z_][A-Za-z0-9_-]*\Z")
_INT = re.compile(r"-?(0|[1-9][0-9]*)\Z")
# Characters YAML readers treat as breaks or refuse unescaped.
_ESCAPE = Lazy("[\u007f-\u009f\u2028\u2029\ufeff\ud800-\udfff\ufffe\uffff]")


_DECODER = json.JSONDecoder()


class _NotCanonical(Exception):
    pass


def _quote(text: str) -> str:
    out = json.dumps(text, ensure_ascii=False)
    if not _escaped(out):
        return out
    return _ESCAPE.sub(lambda m: "\\u%04x" % ord(m.group()), out)


def _escaped(text: str) -> bool:
    """Has ``text`` a character YAML output escapes (``_ESCAPE``)? ASCII without DEL has none: the
    usual text is answered without compiling the pattern."""
    return not (text.isascii() and "\x7f" not in text) and _ESCAPE.search(text) is not None


def _literal_ok(text: str) -> bool:
    if "\n" not in text or text.endswith("\n\n") or text.startswith((" ", "\n")):
        return False
    if _escaped(text) or any(c < " " and c != "\n" for c in text):
        return False
    return all(line == line.rstrip() for line in text.split("\n"))


def _scalar(value: Any) -> str:
    if value is None:
        return "null"
    if value is True:
        return "true"
    if value is False:
        return "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, str):
        if _PLAIN.match(value) and value.lower() not in _RESERVED:
            return value
        return _quote(value)
    raise TypeError(f"cannot store {type(value).__name__} in a gitwork YAML file")


def _emit(value: Any, indent: int, out: list[str], key_prefix: str) -> None:
    pad = " " * indent
    if isinstance(value, dict):
        if not value:
            out.append(f"{key_prefix}{{}}")
            return
        if key_prefix:
            out.append(key_prefix.rstrip())
            _emit_mapping(value, indent + 2, out)
        else:
            _emit_mapping(value, indent, out)
    elif isinstance(value, list):
        if not value:
            out.append(f"{key_prefix}[]")
            return
        out.append(key_prefix.rstrip())
        inner = " " * (indent + 2)
        for item in value:
            if isinstance(item, dict) and item:
                sub: list[str] = []
                _emit_mapping(item, indent + 4, sub)
                first = sub[0][indent + 4 :]
                out.append(f"{inner}- {first}")
                out.extend(sub[1:])
            elif isinstance(item, (dict, list)):
                if item:
                    raise TypeError("nested lists are not part of the gitwork format")
                out.append(f"{inner}- {'{}' if isinstance(item, dict) else '[]'}")
            else:
                out.append(f"{inner}- {_scalar(item)}")
    elif isinstance(value, str) and _literal_ok(value):
        chomp = "" if value.endswith("\n") else "-"
        out.append(f"{key_prefix}|{chomp}")
        body = value[:-1] if value.endswith("\n") else value
        for line in body.split("\n"):
            out.append(f"{pad}  {line}" if line else "")
    else:
        out.append(f"{key_prefix}{_scalar(value)}")


def _key(key: Any) -> str:
    if not isinstance(key, str):
        raise TypeError(f"mapping keys must be text, not {type(key).__name__}")
    if _KEY.match(key) and key.lower() not in _RESERVED:
        return key
    return _quote(key)  # identities such as alice@host/s12 or words such as "null" are quoted


def _emit_mapping(mapping: dict[str, Any], indent: int, out: list[str]) -> None:
    pad = " " * indent
    for key, value in mapping.items():
        _emit(value, indent, out, f"{pad}{_key(key)}: ")


def dump_yaml(doc: dict[str, Any]) -> bytes:
    """Serialise a mapping in gitwork's canonical YAML style (UTF-8, LF, trailing newline)."""
    if not doc:
        return b"{}\n"
    out: list[str] = []
    _emit_mapping(doc, 0, out)
    return ("\n".join(out) + "\n").encode("utf-8")


# --- reading --------------------------------------------------------------------------------------


class _Parser:
    def __init__(self, text: str) -> None:
        self.lines = text.split("\n")
        if self.lines and self.lines[-1] == "":
            self.lines.pop()
        self.pos = 0

    def _skip_blank(self) -> None:
        while self.pos < len(self.lines) and not self.lines[self.pos].strip():
            self.pos += 1

    def _indent(self, line: str) -> int:
        return len(line) - len(line.lstrip(" "))

    def block(self, indent: int) -> Any:
        if indent > 2 * MAX_DEPTH:
            raise _NotCanonical  # the general reader refuses it with a reason
        self._skip_blank()
        if self.pos >= len(self.lines):
            raise _NotCanonical
        line = self.lines[self.pos]
        if self._indent(line) != indent:
            raise _NotCanonical
        if line[indent:].startswith("- "):
            return self.sequence(indent)
        return self.mapping(indent)

    def mapping(self, indent: int) -> dict[str, Any]:
        result: dict[str, Any] = {}
        while True:
            self._skip_blank()
            if self.pos >= len(self.lines):
                return result
            line = self.lines[self.pos]
            here = self._indent(line)
            if here < indent:
                return result
            if here > indent or line[indent:].startswith(("- ", "#")):
                raise _NotCanonical
            if line[indent] == '"':
                try:
                    key, end = _DECODER.raw_decode(line, indent)
                except ValueError as exc:
                    raise _NotCanonical from exc
                sep, rest = line[end : end + 1], line[end + 1 :]
                if sep != ":" or not isinstance(key, str):
                    raise _NotCanonical
            else:
                key, sep, rest = line[indent:].partition(":")
                if not sep or not _KEY.match(key) or key.lower() in _RESERVED:
                    raise _NotCanonical
            if key in result or (rest and rest[0] != " "):
                raise _NotCanonical
            rest = rest.strip()
            self.pos += 1
            if rest == "":
                result[key] = self.block(indent + 2)
            elif rest in ("|", "|-"):
                result[key] = self.literal(indent, keep=rest == "|")
            else:
                result[key] = scalar(rest)

    def sequence(self, indent: int) -> list[Any]:
        result: list[Any] = []
        while True:
            self._skip_blank()
            if self.pos >= len(self.lines):
                return result
            line = self.lines[self.pos]
            here = self._indent(line)
            if here < indent:
                return result
            if here > indent or not line[indent:].startswith("- "):
                raise _NotCanonical
            rest = line[indent + 2 :]
            if ": " in rest or rest.endswith(":"):
                if rest.startswith('"'):
                    raise _NotCanonical
                # "- key: value" opens a mapping whose keys sit two columns in.
                self.lines[self.pos] = " " * (indent + 2) + rest
                result.append(self.mapping(indent + 2))
            else:
                self.pos += 1
                result.append(scalar(rest.strip()))

    def literal(self, indent: int, keep: bool) -> str:
        body: list[str] = []
        inner = indent + 2
        while self.pos < len(self.lines):
            line = self.lines[self.pos]
            if line.strip() and self._indent(line) < inner:
                break
            body.append(line[inner:] if line.strip() else "")
            self.pos += 1
        while body and body[-1] == "":
            body.pop()
        if not body:
            raise _NotCanonical
        return "\n".join(body) + ("\n" if keep else "")


def scalar(token: str) -> Any:
    if token in ("null", "~"):
        return None
    if token == "true":
        return True
    if token == "false":
        return False
    if _INT.match(token):
        try:
            return int(token)
        except ValueError as exc:  # more digits than int() reads (4300): no value gitwork can use
            raise _NotCanonical from exc
    if token == "[]":
        return []
    if token == "{}":
        return {}
    if token.startswith('"'):
        try:
            value = json.loads(token)
        except ValueError as exc:
            raise _NotCanonical from exc
        if not isinstance(value, str):
            raise _NotCanonical
        return value
    if _PLAIN.match(token) and token.lower() not in _RESERVED:
        return token
    raise _NotCanonical


def _plain_data(value: Any) -> Any:
    """Bring what a YAML reader may build (timestamps, floats, ...) down to the format's types.

    A hand-written ``created_at: 2025-03-01T10:00:00Z`` is a timestamp to YAML but a string to
    gitwork; anything else that is not text, a whole number, a boolean, null, a list or a mapping
    is kept as its text, so it can never break a later dump or the read cache.
    """
    if value is None or isinstance(value, (str, bool, int)):
        return value
    if isinstance(value, dict):
        return {str(k) if not isinstance(k, str) else k: _plain_data(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain_data(v) for v in value]
    import datetime as _dt

    if isinstance(value, _dt.datetime):
        if value.tzinfo is None:
            value = value.replace(tzinfo=_dt.timezone.utc)
        return value.astimezone(_dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    if isinstance(value, _dt.date):
        return value.isoformat()
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return str(value)


# Bounds on anything parsed by a general reader (command documents, non-canonical state files): no
# YAML anchors or aliases at all (an alias "bomb" of 1 KB expands to gigabytes), at most MAX_DEPTH
# levels of nesting (deeper input overflows the recursive readers), at most MAX_NODES scalars and
# collections, and a size limit given by the caller. Nothing gitwork writes comes near any of them.
MAX_DEPTH = 32
MAX_NODES = 20_000
MAX_INPUT_BYTES = 1024 * 1024  # a command document (gw apply); texts are at most 64 KiB each
MAX_STATE_YAML_BYTES = 4 * 1024 * 1024  # a non-canonical .yaml file on the state ref


def _check_events(yaml: Any, text: str) -> None:
    """Walk the YAML event stream once, refusing aliases, anchors, deep nesting and huge counts,
    before anything is built: the reader then never expands an alias or recurses deeply."""
    from ruamel.yaml.events import AliasEvent, CollectionEndEvent, CollectionStartEvent, NodeEvent

    depth = nodes = 0
    for event in yaml.parse(text):
        if isinstance(event, AliasEvent) or (isinstance(event, NodeEvent) and event.anchor is not None):
            raise ValueError("YAML anchors and aliases (&name, *name) are not accepted")
        if isinstance(event, CollectionStartEvent):
            depth += 1
            if depth > MAX_DEPTH:
                raise ValueError(f"nested deeper than {MAX_DEPTH} levels")
        elif isinstance(event, CollectionEndEvent):
            depth -= 1
        if isinstance(event, NodeEvent):
            nodes += 1
            if nodes > MAX_NODES:
                raise ValueError(f"more than {MAX_NODES} values")


def _ruamel_load(text: str, limit: int = MAX_STATE_YAML_BYTES) -> Any:
    if len(text) > limit or len(text.encode("utf-8", "surrogatepass")) > limit:
        raise ValueError(f"larger than {limit // 1024} KiB")
    from ruamel.yaml import YAML  # slow import: only for files not in canonical form
    from ruamel.yaml.error import YAMLError

    try:
        yaml = YAML(typ="safe", pure=True)
        _check_events(yaml, text)
        return _plain_data(YAML(typ="safe", pure=True).load(text))
    except YAMLError as exc:
        raise ValueError(str(exc).splitlines()[0] if str(exc) else "bad YAML") from exc
    except RecursionError as exc:  # a safety net: _check_events bounds the depth first
        raise ValueError(f"nested deeper than {MAX_DEPTH} levels") from exc
    except ValueError as exc:  # int()'s digit limit on a huge number: its reason, not Python's advice
        raise ValueError(str(exc).split(";")[0][:200]) from exc


def check_depth(value: Any, limit: int = MAX_DEPTH) -> None:
    """Refuse data nested deeper than ``limit`` (iteratively: the check itself cannot overflow)."""
    stack = [(value, 1)]
    while stack:
        current, depth = stack.pop()
        if isinstance(current, dict):
            children: Any = current.values()
        elif isinstance(current, list):
            children = current
        else:
            continue
        if depth > limit:
            raise ValueError(f"nested deeper than {limit} levels")
        stack.extend((child, depth + 1) for child in children)


# --- the fast reader: exactly the shape dump_yaml writes for item and lease files ------------------
#
# A cold rebuild of the read cache parses every item file (100,000 at scale); the general reader
# above costs ~100 µs a file in Python. This one recognises, line by line, the common part of
# dump_yaml's output (a mapping of scalars, of lists of scalars, and of mappings of scalars) and
# returns ``None`` for anything else (literal blocks, lists of mappings, quoted keys, blank lines,
# comments, odd spacing, ...), which the general reader then reads. tests/test_codec_fast.py holds it
# to the general reader: the same document, or a refusal to answer, for every text.

_FAST_TOKENS: dict[str, Any] = {}  # token -> immutable value (statuses, dates, numbers repeat across files)
_FAST_KEYS: set[str] = set()  # keys seen to be plain (not quoted, not a reserved word)
_DECLINE = object()


def _fast_scalar(token: str) -> Any:
    if token[:1] == '"' and token[-1:] == '"' and len(token) > 1 and '"' not in token[1:-1] and \
            "\\" not in token and token.isprintable():
        return token[1:-1]  # what json.loads makes of a quoted text without escapes or controls
    value = _FAST_TOKENS.get(token, _DECLINE)
    if value is not _DECLINE:
        return value
    if token == "[]":
        return []  # a fresh object each time: never cached
    if token == "{}":
        return {}
    if token[:1] == '"':  # escapes, controls: json's own reading, as the general reader's
        try:
            value = json.loads(token)
        except ValueError:
            return _DECLINE
        if not isinstance(value, str):
            return _DECLINE
    else:
        try:
            value = scalar(token)
        except _NotCanonical:
            return _DECLINE
    if len(_FAST_TOKENS) > 8192:
        _FAST_TOKENS.clear()
    _FAST_TOKENS[token] = value
    return value


def _fast_key(key: str) -> bool:
    if key in _FAST_KEYS:
        return True
    if not _KEY.match(key) or key.lower() in _RESERVED:
        return False
    if len(_FAST_KEYS) < 1024:
        _FAST_KEYS.add(key)
    return True


def load_canonical(text: str) -> dict[str, Any] | None:
    """The mapping of a text in gitwork's canonical style, or ``None`` when the text is not of the
    plain shape this reader knows (the general reader :func:`load_yaml` then decides)."""
    if text[-1:] != "\n":
        return None
    lines = text.split("\n")
    lines.pop()
    doc: dict[str, Any] = {}
    count = len(lines)
    at = 0
    while at < count:
        line = lines[at]
        at += 1
        key, sep, rest = line.partition(": ")
        if sep:
            if key in doc or not _fast_key(key) or not rest or rest[0] == " " or rest in ("|", "|-"):
                return None
            value = _fast_scalar(rest)
            if value is _DECLINE:
                return None
            doc[key] = value
            continue
        key = line[:-1]
        if line[-1:] != ":" or key in doc or not _fast_key(key):
            return None
        first = at
        while at < count and lines[at][:2] == "  ":
            at += 1
        if at == first:
            return None
        if lines[first][:4] == "  - ":
            items: list[Any] = []
            for child in lines[first:at]:
                token = child[4:]
                if child[:4] != "  - " or ": " in token or token[-1:] == ":" or not token or token[0] == " ":
                    return None
                value = _fast_scalar(token)
                if value is _DECLINE:
                    return None
                items.append(value)
            doc[key] = items
        else:
            inner: dict[str, Any] = {}
            for child in lines[first:at]:
                name, sep, rest = child[2:].partition(": ")
                if not sep or name in inner or not _fast_key(name) or not rest or rest[0] == " " or \
                        rest in ("|", "|-"):
                    return None
                value = _fast_scalar(rest)
                if value is _DECLINE:
                    return None
                inner[name] = value
            doc[key] = inner
    return doc if doc else None


def load_yaml(data: bytes | str, *, what: str = "document", allow_empty: bool = False,
              general: bool = False) -> dict[str, Any]:
    """Parse a YAML mapping; canonical files without ruamel, anything else with it.

    ``allow_empty`` reads a document with nothing but comments or blank lines as ``{}``. The plain
    shape of canonical files goes through :func:`load_canonical` first (``general``: never; for tests).
    """
    try:
        text = data.decode("utf-8") if isinstance(data, bytes) else data
    except UnicodeDecodeError as exc:
        raise Corrupt(f"{what} is not UTF-8 text") from exc
    if not general:
        fast = load_canonical(text)
        if fast is not None:
            return _encodable(fast, data, text, what)
    try:
        parser = _Parser(text)
        doc = parser.block(0)
        parser._skip_blank()
        if parser.pos != len(parser.lines):
            raise _NotCanonical
    except (_NotCanonical, IndexError, RecursionError):
        try:
            doc = _ruamel_load(text)
        except ValueError as exc:
            raise Corrupt(f"{what} is not valid YAML: {exc}") from exc
    if doc is None and allow_empty:
        return {}
    if not isinstance(doc, dict):
        raise Corrupt(f"{what} is not a YAML mapping")
    return _encodable(doc, data, text, what)


def has_lone_surrogate(value: Any) -> bool:
    """Whether a lone surrogate (no character: UTF-8 cannot hold it) is in ``value``, its keys or items."""
    if isinstance(value, str):
        return not value.isascii() and any("\ud800" <= c <= "\udfff" for c in value)
    if isinstance(value, dict):
        return any(has_lone_surrogate(k) or has_lone_surrogate(v) for k, v in value.items())
    if isinstance(value, list):
        return any(has_lone_surrogate(v) for v in value)
    return False


def _encodable(doc: dict[str, Any], data: bytes | str, text: str, what: str) -> dict[str, Any]:
    """``doc``, unless it holds a lone surrogate: Corrupt, as bytes that are not UTF-8 are.

    Decoded UTF-8 holds none, so only an escape (YAML's ``"\\ud800"``) can make one; a document
    read from bytes without ``\\u``/``\\U`` is not walked (a rebuild reads 100,000). Such a value
    would fail every later encode (SQLite, JSON out, the terminal), so it is refused here, once,
    where every state file is read."""
    if ("\\u" in text or "\\U" in text or not isinstance(data, bytes)) and has_lone_surrogate(doc):
        raise Corrupt(f"{what} holds a lone surrogate escape (\\ud800-\\udfff), not text")
    return doc


def load_input_document(text: str) -> Any:
    """Parse a user-supplied command document: JSON first (cheap), then YAML; bounded in size,
    nesting and (for YAML) without anchors or aliases, so it ends quickly in little memory."""
    if len(text) > MAX_INPUT_BYTES:
        raise Invalid(f"command document is larger than {MAX_INPUT_BYTES // 1024} KiB")
    stripped = text.lstrip()
    if stripped.startswith("{"):
        try:
            doc = json.loads(text)
        except RecursionError as exc:
            raise Invalid(f"command document is nested deeper than {MAX_DEPTH} levels") from exc
        except ValueError as exc:
            raise Invalid(f"command document is not valid JSON: {_first_line(exc)}") from exc
    else:
        try:
            doc = _ruamel_load(text, MAX_INPUT_BYTES)
        except ValueError as exc:
            raise Invalid(f"command document is not valid YAML: {_first_line(exc)}") from exc
    try:
        check_depth(doc)
    except ValueError as exc:
        raise Invalid(f"command document is {exc}") from exc
    return doc


def _first_line(exc: Exception) -> str:
    lines = str(exc).strip().splitlines()
    return lines[0][:200] if lines else type(exc).__name__


# --- append-only logs ------------------------------------------------------------------------------


def encode_record(record: dict[str, Any]) -> bytes:
    return (json.dumps(record, ensure_ascii=False, separators=(",", ":")) + "\n").encode("utf-8")


def iter_records(data: bytes, *, what: str = "log") -> Iterator[dict[str, Any]]:
    if data and not data.endswith(b"\n"):
        raise Corrupt(f"{what} ends in a partial record")
    for number, line in enumerate(data.split(b"\n")[:-1], start=1):
        try:
            record = json.loads(line)
        except (ValueError, RecursionError) as exc:
            raise Corrupt(f"{what} line {number} is not a JSON record") from exc
        if not isinstance(record, dict) or not isinstance(record.get("seq"), int):
            raise Corrupt(f"{what} line {number} has no sequence number")
        yield record


# --- durations ---------------------------------------------------------------------------------------

# At most 12 digits per part: far beyond the 366-day limit, and int() of it is instant.
_DURATION = Lazy(r"(?:([0-9]{1,12})d)?(?:([0-9]{1,12})h)?(?:([0-9]{1,12})m)?(?:([0-9]{1,12})s)?\Z")
_SECONDS = Lazy(r"[0-9]{1,20}\Z")


def parse_duration(text: str | int) -> int:
    """``"15m"``, ``"1h30m"``, ``"90s"``, ``"2d"`` or a number of seconds → seconds (> 0)."""
    if isinstance(text, int) and not isinstance(text, bool):
        seconds = text
    else:
        raw = str(text).strip().lower()
        if len(raw) > 64:
            raise Invalid(f"malformed duration {raw[:20]!r}...: use e.g. 90s, 15m, 1h30m, 2d")
        if _SECONDS.match(raw):
            seconds = int(raw)
        else:
            match = _DURATION.match(raw)
            if not raw or not match:
                raise Invalid(f"malformed duration {text!r}: use e.g. 90s, 15m, 1h30m, 2d")
            d, h, m, s = (int(g) if g else 0 for g in match.groups())
            seconds = ((d * 24 + h) * 60 + m) * 60 + s
    if seconds <= 0 or seconds > 366 * 86400:
        shown = text if not isinstance(text, int) or abs(text) < 10**12 else "a huge number"
        raise Invalid(f"duration {shown!r} out of range (1s to 366d)")
    return seconds


def format_duration(seconds: int) -> str:
    parts = []
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60), ("s", 1)):
        if seconds >= size:
            parts.append(f"{seconds // size}{unit}")
            seconds %= size
    return "".join(parts) or "0s"
