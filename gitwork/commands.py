"""Command documents: the one shape every mutation takes, and its validation.

A command document is a mapping with an ``op`` and that op's arguments, e.g.::

    {op: claim, item: w-3fa9c2, ttl: 15m, as: alice}

Each op declares its fields where it is implemented (``gitwork/ops``, ``@op``); the kinds a field
may have are declared here, in :data:`KINDS`, and nowhere else. :func:`validate` checks a document
against the op's declaration before the engine sees it, so the engine only meets clean input.
Fields every op accepts: ``op``, ``id`` (client-chosen command id; minted if absent), ``as`` (the
acting identity) and ``fence`` (the fencing token of the lease the author acts under).
"""

from __future__ import annotations

import re

from . import ids
from .codec import parse_duration
from .errors import Invalid
from .lazyre import Lazy

TYPE_CHECKING = False  # typing costs ~15 ms to import; annotations are strings anyway
if TYPE_CHECKING:
    from typing import Any, Callable

MAX_TITLE = 200
MAX_TEXT = 64 * 1024
MAX_SHORT = 1024
_CONTROL = Lazy("[\x00-\x08\x0b\x0c\x0e-\x1f\x7f\ufffe\uffff\ud800-\udfff]")
_LABEL = Lazy(r"[A-Za-z0-9][A-Za-z0-9_.:/+-]{0,63}\Z")


def check_text(value: Any, field: str, *, limit: int = MAX_TEXT, multiline: bool = True, empty: bool = True) -> str:
    if not isinstance(value, str):
        raise Invalid(f"{field} must be text")
    # Printable ASCII has none of _CONTROL: the usual text is answered without compiling it.
    if (not (value.isascii() and value.isprintable()) and _CONTROL.search(value)) or (not multiline and ("\n" in value or "\r" in value)):
        raise Invalid(f"{field} contains binary or control characters")
    if len(value.encode("utf-8", "surrogatepass")) > limit:
        raise Invalid(f"{field} is too long ({len(value)} characters; at most {limit} bytes)")
    if not empty and not value.strip():
        raise Invalid(f"{field} must not be empty")
    return value


def check_unicode(text: str, field: str) -> bytes:
    """``text`` as UTF-8; text that has no UTF-8 form (a lone surrogate, which a JSON ``\\ud800`` escape
    makes) is refused (exit 5): it could be neither written to the state ref nor printed."""
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise Invalid(f"{field} holds text that is not valid Unicode (a lone surrogate at character "
                      f"{exc.start})") from exc


def _title(value: Any, field: str) -> str:
    return check_text(value, field, limit=MAX_TITLE, multiline=False, empty=False).strip()


def _text(value: Any, field: str) -> str:
    return check_text(value, field)


def _short(value: Any, field: str) -> str:
    return check_text(value, field, limit=MAX_SHORT, multiline=False, empty=False).strip()


# A session's id (sessions/manifest.py names them): its date, time and a lower-case tail. A kind of its
# own so that every face refuses a malformed one by its schema, before any op reads the state.
SESSION_ID = re.compile(r"[0-9]{8}-[0-9]{6}-[a-z0-9][a-z0-9-]{0,120}\Z")


def _session(value: Any, field: str) -> str:
    text = _short(value, field)
    if not SESSION_ID.match(text):
        raise Invalid(f"malformed session id {text[:80]!r}: YYYYMMDD-HHMMSS-name, as gw session list shows them")
    return text


def _name(value: Any, field: str) -> str:
    # Identities and the names a document gives (as, to, owner, remote): the one identity rule.
    return ids.check_identity(value, field)


MAX_INT = 2**53  # whole numbers in documents stay exact in JSON readers everywhere


def _int(value: Any, field: str) -> int:
    if isinstance(value, bool):
        raise Invalid(f"{field} must be a whole number")
    if isinstance(value, str) and re.fullmatch(r"-?[0-9]{1,16}", value.strip()):
        value = int(value)
    if not isinstance(value, int):
        raise Invalid(f"{field} must be a whole number")
    if not -MAX_INT <= value <= MAX_INT:
        raise Invalid(f"{field} is out of range")
    return value


def _epoch(value: Any, field: str) -> int | str:
    # A message's lease epoch: the number its author read, or "current": read it on the tip the
    # command is applied to (the op then records the number in the document).
    if isinstance(value, str) and value.strip() == "current":
        return "current"
    return _int(value, field)


def _fence(value: Any, field: str) -> int:
    number = _int(value, field)
    if number < 1:
        raise Invalid(f"{field} must be a positive fencing token")
    return number


def _priority(value: Any, field: str) -> int:
    number = _int(value, field)
    if not 0 <= number <= 4:
        raise Invalid(f"{field} must be 0 (highest) to 4 (lowest)")
    return number


def _bool(value: Any, field: str) -> bool:
    if not isinstance(value, bool):
        raise Invalid(f"{field} must be true or false")
    return value


def _duration(value: Any, field: str) -> int:
    if isinstance(value, bool) or not isinstance(value, (str, int)):
        raise Invalid(f"{field} must be a duration like 15m")
    return parse_duration(value)


def _item(value: Any, field: str) -> str:
    if not isinstance(value, str):
        raise Invalid(f"{field} must be an item id")
    ids.normalise_prefix(value)
    return value.strip().lower()


def _items(value: Any, field: str) -> list[str]:
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list):
        raise Invalid(f"{field} must be a list of item ids")
    return [_item(v, field) for v in value]


def _labels(value: Any, field: str) -> list[str]:
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list):
        raise Invalid(f"{field} must be a list of labels")
    for label in value:
        if not isinstance(label, str) or not _LABEL.match(label):
            shown = repr(label[:40]) if isinstance(label, str) else type(label).__name__
            raise Invalid(f"bad label {shown}: letters, digits and _.:/+- only, at most 64")
    return list(value)


def _globs(value: Any, field: str) -> list[str]:
    from .paths import check_globs

    return check_globs(value, field)


def _texts(value: Any, field: str) -> list[str]:
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list):
        raise Invalid(f"{field} must be a list of texts")
    return [_short(v, field) for v in value]


def _ints(value: Any, field: str) -> list[int]:
    if not isinstance(value, list):
        value = [value]
    return [_int(v, field) for v in value]


def _mapping(value: Any, field: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise Invalid(f"{field} must be a mapping")
    for key, inner in value.items():
        _short(str(key), f"{field} key")
        if inner is not None:
            _short(str(inner), f"{field}.{key}")
    # Keys sorted: the recorded document (the Command line) is JSON with sorted keys, and an op that
    # writes this mapping out must write the same bytes when the arbiter replays it (derive.py).
    return {str(k): (str(v) if v is not None else None) for k, v in sorted(value.items(), key=lambda kv: str(kv[0]))}


_SEQ_REF = Lazy(r"#?(\d+)\Z")
_MESSAGE_ID = Lazy(r"[A-Za-z0-9_.:-]{4,64}\Z")


def parse_msgref(value: Any, field: str) -> int | str:
    """A message reference in a command document: an integer (or ``#N``) is a sequence number,
    any other text a message id; ``ITEM:N`` or ``ITEM:ID`` names a message of the item ``ITEM``
    (the op checks that it is the command's own item). Ids survive renumbering on another tip;
    numbers are for people, and the op records the id it resolves a number to."""
    if isinstance(value, bool):
        raise Invalid(f"{field} must be a message number or id")
    if isinstance(value, int):
        if value < 1:
            raise Invalid(f"{field} must be a message number from 1 (got {value})")
        return value
    if isinstance(value, str):
        text = value.strip()
        match = _SEQ_REF.match(text)
        if match:
            return parse_msgref(int(match.group(1)), field)
        item_text, sep, rest = text.partition(":")
        if sep and item_text.lower().startswith("w-") and (_SEQ_REF.match(rest) or _MESSAGE_ID.match(rest)):
            return f"{item_text}:{parse_msgref(rest, field)}"
        if _MESSAGE_ID.match(text):
            return text
    raise Invalid(f"{field} must be a message number (e.g. 3) or a message id, got {value!r}")


def _cmd_id(value: Any, field: str) -> str:
    # It names a file on the state ref (commands/), so it starts with a letter or digit: never ".git".
    if not isinstance(value, str) or not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_.:-]{3,63}", value):
        raise Invalid(f"{field} must be 4-64 characters of letters, digits and _.:- starting with a letter or digit")
    return value


def _usd(value: Any, field: str) -> str:
    # An amount of money (a cost, a budget): canonical decimal text, bounded (gitwork/money.py).
    from .money import parse_text

    return parse_text(value, field)


MAX_BATCH = 1000  # members of one batch document (ops/batch.py); an import sends 500 items a batch
MAX_DATA = 256 * 1024  # canonical JSON bytes of one structured field (the import op's criteria, comments...)


def _docs(value: Any, field: str) -> list[dict[str, Any]]:
    # A batch's members: each is validated as a command document by the batch op itself, in order,
    # on the tree the members before it left (the engine is the one validator of an op's fields).
    if not isinstance(value, list) or not value:
        raise Invalid(f"{field} must be a non-empty list of command documents")
    if len(value) > MAX_BATCH:
        raise Invalid(f"{field} has {len(value)} documents; a batch takes at most {MAX_BATCH}")
    for position, doc in enumerate(value, 1):
        if not isinstance(doc, dict) or not isinstance(doc.get("op"), str):
            raise Invalid(f"{field} #{position} is not a command document (a mapping with an 'op')")
    return [dict(doc) for doc in value]


def _data(value: Any, field: str) -> Any:
    # Structured data an op checks itself (lists of mappings of texts); here only its JSON shape and size.
    import json

    try:
        text = json.dumps(value, ensure_ascii=False, allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise Invalid(f"{field} must be plain data (mappings, lists, text, numbers)") from exc
    size = len(check_unicode(text, field))
    if size > MAX_DATA:
        raise Invalid(f"{field} is too large ({size} bytes; at most {MAX_DATA})")
    return _sorted(value)


def _sorted(value: Any) -> Any:
    """``value`` with every mapping's keys in order: what the recorded (key-sorted JSON) document
    gives a replay, so an op storing the data builds the same bytes the first time and on replay."""
    if isinstance(value, dict):
        return {k: _sorted(value[k]) for k in sorted(value, key=str)}
    if isinstance(value, list):
        return [_sorted(v) for v in value]
    return value


KINDS: dict[str, Callable[[Any, str], Any]] = {
    "title": _title,
    "text": _text,
    "short": _short,
    "session": _session,
    "name": _name,
    "int": _int,
    "fence": _fence,
    "epoch": _epoch,
    "priority": _priority,
    "bool": _bool,
    "duration": _duration,
    "item": _item,
    "items": _items,
    "labels": _labels,
    "globs": _globs,
    "texts": _texts,
    "ints": _ints,
    "mapping": _mapping,
    "cmd_id": _cmd_id,
    "msgref": parse_msgref,
    "docs": _docs,
    "data": _data,
    "usd": _usd,
}


class Field:
    __slots__ = ("kind", "required", "choices")

    def __init__(self, kind: str, required: bool = False, choices: tuple[str, ...] = ()) -> None:
        self.kind, self.required, self.choices = kind, required, choices


def parse_fields(spec: dict[str, str]) -> dict[str, Field]:
    """``{"item": "item!", "ttl": "duration", "kind": "note|question"}`` → fields (``!`` = required)."""
    fields: dict[str, Field] = {}
    for name, text in spec.items():
        required = text.endswith("!")
        text = text.rstrip("!")
        if "|" in text:
            fields[name] = Field("short", required, tuple(text.split("|")))
        else:
            if text not in KINDS:
                raise ValueError(f"unknown field kind {text!r}")
            fields[name] = Field(text, required)
    return fields


# "lease" is filled in by the engine: the grant command id of the lease a fenced command acted under.
COMMON = parse_fields({"op": "short!", "id": "cmd_id", "as": "name", "fence": "fence", "lease": "cmd_id"})


def validate(doc: Any, fields: dict[str, Field]) -> dict[str, Any]:
    """Return a clean copy of ``doc``; refuse unknown fields, wrong types and missing arguments."""
    if not isinstance(doc, dict):
        raise Invalid("a command document must be a mapping with an 'op'")
    clean: dict[str, Any] = {}
    allowed = {**COMMON, **fields}
    for key, value in doc.items():
        spec = allowed.get(key)
        if spec is None:
            raise Invalid(f"unknown field {key!r} for op {doc.get('op')!r}")
        if value is None:
            continue
        checked = KINDS[spec.kind](value, key)
        if spec.choices and checked not in spec.choices:
            raise Invalid(f"{key} must be one of {', '.join(spec.choices)} (got {checked!r})")
        clean[key] = checked
    for key, spec in fields.items():
        if spec.required and key not in clean:
            raise Invalid(f"op {doc.get('op')!r} needs {key!r}")
    return clean
