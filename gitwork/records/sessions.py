"""Which sessions of an item are open, read from its ``events.log``: what ``done`` and ``publish`` check.

A session is open from its ``session-start`` record until its ``publish`` or ``session-drop``. Kept
apart from the op modules (it imports none of them) so that ``done`` in ``ops/items.py`` can refuse
to strand a session without importing the session ops.
"""

from __future__ import annotations

import re

from ..errors import Illegal, Invalid
from ..model import Lease

TYPE_CHECKING = False  # typing costs ~15 ms to import; annotations are strings anyway
if TYPE_CHECKING:
    from typing import Any

    from ..engine import View


def open_sessions(ctx: View, item_id: str, lease: Lease | None = None) -> list[dict[str, Any]]:
    """Sessions of ``item_id`` neither published nor dropped, oldest first: ``{session, commit, fence, by}``.

    With ``lease``, only those started under it (same fence and epoch): a session started under an
    earlier lease is dead (its fence can no longer land anywhere), and only ``session drop`` ends it.
    """
    found: dict[Any, dict[str, Any]] = {}  # by the records' session field
    for event in ctx.records(item_id):
        kind = event.get("type")
        session = event.get("session")
        if kind == "session-start":
            found[session] = {"session": session, "commit": None, "fence": event.get("fence"),
                              "epoch": event.get("epoch"), "by": event.get("by")}
        elif kind == "session-commit" and session in found:
            found[session]["commit"] = event.get("commit")
            found[session]["files"] = [c.get("path") for c in event.get("files") or []]
        elif kind in ("publish", "session-drop"):
            found.pop(session, None)
    rows = list(found.values())
    if lease is not None:
        rows = [r for r in rows if r["fence"] == lease.fence and r["epoch"] == lease.epoch]
    return rows


def running_step_sessions(ctx: View, item_id: str) -> list[str]:
    """Multi-step sessions of the item created and not ended (``session-create`` without ``session-end``)."""
    running: list[Any] = []  # the records' session fields
    for event in ctx.records(item_id):
        if event.get("type") == "session-create":
            running.append(event.get("session"))
        elif event.get("type") == "session-end" and event.get("session") in running:
            running.remove(event.get("session"))
    return running


def describe(rows: list[dict[str, Any]]) -> str:
    return ", ".join(f"{r['session']} ({'commit ' + str(r['commit'])[:12] if r['commit'] else 'no commit yet'})"
                     for r in rows)


def refuse_open_sessions(ctx: View, item_id: str, lease: Lease | None, what: str,
                         but: str | None = None) -> None:
    """``done`` (and a closing ``publish``) must not strand the holder's open sessions: refuse, naming them."""
    if lease is None or not lease.is_active():
        return
    running = running_step_sessions(ctx, item_id)
    if running:
        raise Illegal(f"{what} {item_id} would strand its multi-step session(s) {', '.join(running)}: finish them "
                      "(`gw session done ID`) or stop them (`gw session stop ID`)", item=item_id, sessions=running)
    rows = [r for r in open_sessions(ctx, item_id, lease) if r["session"] != but]
    if rows:
        raise Illegal(f"{what} {item_id} would strand its open session(s) {describe(rows)}: publish a committed "
                      f"one (`gw done` publishes it when it is the only one), or drop it (`gw session drop ID`)",
                      item=item_id, sessions=[r["session"] for r in rows])


# --- multi-step sessions: the bounded JSON documents and their schemas (docs/sessions.md) -----------
#
# Shared by the ops (which re-check every manifest, request and response they record) and by the
# procedures in ``gitwork/sessions/steps.py`` (the gates). Kept here, below the op modules, so the
# engine never imports a procedure; the schemas are data files shipped in ``gitwork/sessions/schemas``.

SESSIONS_TREE = "sessions"  # on the state ref: sessions/<id>/state.json and each branch's request/response
MAX_DOCUMENT_BYTES = 60 * 1024  # a request.json or response.json (it travels in a command document too)
MAX_MANIFEST_BYTES = 60 * 1024  # state.json travels in a command document (texts are at most 64 KiB)
MAX_JSON_DEPTH = 16
_VALIDATORS: dict[str, Any] = {}


def schema_path(kind: str) -> str:
    import os

    return os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "sessions", "schemas",
                        f"{kind}.schema.json")


def _no_constants(text: str) -> None:
    raise ValueError(f"{text} is not JSON")


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    seen: dict[str, Any] = {}
    for key, value in pairs:
        if key in seen:
            raise ValueError(f"duplicate key {key[:40]!r}")
        seen[key] = value
    return seen


def load_json(data: bytes | str, what: str, limit: int = MAX_DOCUMENT_BYTES) -> Any:
    """Parse a JSON document within bounds: size first, then nesting depth; one-line ``Invalid`` otherwise."""
    import json

    from ..codec import check_depth
    from ..errors import Invalid

    raw = data.encode("utf-8", "surrogatepass") if isinstance(data, str) else data
    if len(raw) > limit:
        raise Invalid(f"{what} is too large ({len(raw)} bytes; at most {limit})")
    text = raw.decode("utf-8", "replace") if isinstance(data, bytes) else data
    # The depth is checked on the text before parsing: json's decoder recurses once per level. Few
    # brackets in all cannot nest deeply, so most documents skip the scan.
    if text.count("[") + text.count("{") > MAX_JSON_DEPTH:
        _check_nesting(text, what)
    try:
        doc = json.loads(text, parse_constant=_no_constants, object_pairs_hook=_unique_keys)
        check_depth(doc, MAX_JSON_DEPTH + 1)
    except (ValueError, RecursionError) as exc:
        first = str(exc).splitlines()[0][:200] if str(exc) else type(exc).__name__
        raise Invalid(f"{what} is not valid JSON: {first}") from None
    return doc


def _check_nesting(text: str, what: str) -> None:
    import re

    from ..errors import Invalid

    depth = deepest = 0
    # Strings are matched whole, so a bracket inside one never counts.
    for token in re.finditer(r'"(?:[^"\\]|\\.)*"|[\[\]{}]', text):
        char = token.group()
        if char in "[{":
            depth += 1
            if depth > deepest:
                deepest = depth
                if deepest > MAX_JSON_DEPTH:
                    raise Invalid(f"{what} is nested too deeply (more than {MAX_JSON_DEPTH} levels)")
        elif char in "]}":
            depth -= 1


def validator(kind: str) -> Any:
    """The compiled schema ``kind`` (``state``, ``request``, ``response``), compiled once per process."""
    compiled = _VALIDATORS.get(kind)
    if compiled is None:
        import json

        from ..errors import Invalid

        try:
            import fastjsonschema
        except ImportError:
            raise Invalid("multi-step sessions need the fastjsonschema package: "
                          "pip install 'gitwork[sessions]'") from None
        with open(schema_path(kind), encoding="utf-8") as handle:
            compiled = fastjsonschema.compile(json.load(handle))
        _VALIDATORS[kind] = compiled
    return compiled


def check_schema(kind: str, doc: Any, what: str) -> dict[str, Any]:
    """``doc`` if it satisfies the schema ``kind``; else ``Invalid`` naming the first violation on one line."""
    import fastjsonschema

    from ..errors import Invalid

    try:
        validator(kind)(doc)
    except fastjsonschema.JsonSchemaException as exc:
        message = " ".join(str(exc).split())[:240]  # a value error's message (a definition error has no .message)
        raise Invalid(f"{what} fails {kind}.schema.json: {message}", schema=kind) from None
    return doc


def canonical(doc: Any) -> bytes:
    """How gitwork writes a session document: sorted keys, two-space indent, one final newline."""
    import json

    return (json.dumps(doc, ensure_ascii=False, sort_keys=True, indent=2) + "\n").encode("utf-8")


def sha256(data: bytes) -> str:
    import hashlib

    return hashlib.sha256(data).hexdigest()


def manifest_path(session: str) -> str:
    return f"{SESSIONS_TREE}/{session}/state.json"


def branch_path(session: str, key: str, *rest: str) -> str:
    return "/".join((SESSIONS_TREE, session, key, *rest))


def recorded_manifest(ctx: View, session: str) -> dict[str, Any] | None:
    """The manifest as the last transition recorded it on the state ref (``None``: no such session)."""
    data = ctx.file(manifest_path(session))
    if data is None:
        return None
    return load_json(data, f"{manifest_path(session)} on the state ref", MAX_MANIFEST_BYTES)


# --- a session commit's changes, as its record and `gw session` write them ---------------------------

ABSENT = "-"  # a path that does not exist on that side of a change
_BLOB = re.compile(r"[0-9a-f]{40}([0-9a-f]{24})?\Z")


def parse_change(text: str) -> dict[str, Any]:
    """``"<before> <after> <path>"`` (``-`` for absent; like reference-transaction lines) → a record."""
    before, _, rest = text.partition(" ")
    after, _, path = rest.partition(" ")
    for blob in (before, after):
        if blob != ABSENT and not _BLOB.match(blob):
            raise Invalid(f"bad change {text!r}: blob ids must be full hex ids or {ABSENT}")
    if not path or path.startswith("/") or ".." in path.split("/") or (before == after):
        raise Invalid(f"bad change {text!r}: expected '<before> <after> <relative path>' with a real change")
    return {"path": path, "before": None if before == ABSENT else before, "after": None if after == ABSENT else after}


def format_change(path: str, before: str | None, after: str | None) -> str:
    return f"{before or ABSENT} {after or ABSENT} {path}"
