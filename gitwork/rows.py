"""What the read cache holds for one item folder: its summary row and its thread summary.

Both are functions of the folder's tree alone (``cache.py`` re-reads a folder only when its tree id
changed). The row layout is ``index.py``'s (``ID``, ``TITLE``, ...); the thread entry's is
``threads_index.py``'s (``FOLDER``, ``THREAD``, ...). Kept apart from both so that neither imports
the other and the cache imports neither.
"""

from __future__ import annotations

import json
import sys

from . import codec, layout
from .errors import Corrupt
from .model import gate_of, item_problem, lease_problem
from .thread import CURSORS_FILE, THREAD_DIR, load_cursors, parse_segment, segments

TYPE_CHECKING = False  # typing costs ~15 ms to import; annotations are strings anyway
if TYPE_CHECKING:
    from typing import Any, Final

    from .store import Snapshot
    from .threads_index import Brief, Entry, Segment

# A thread entry's fields (``threads_index.Entry``); Final, so mypy knows each field's type.
FOLDER: Final = 0
THREAD: Final = 1
CURSORS: Final = 2
SEGMENTS: Final = 3
MARKS: Final = 4
LAST: Final = 5


def summarise(item_doc: dict[str, Any], lease_doc: dict[str, Any] | None, tree: str) -> tuple[Any, ...]:
    get = item_doc.get
    lease = lease_doc.get if lease_doc else _NONE.get
    waits, prov = get("waits"), get("provenance")
    return (
        get("id"),
        get("title"),
        get("status", "open"),
        get("priority", 2),
        tuple(get("labels") or ()),
        tuple(get("depends_on") or ()),
        get("created_at", ""),
        get("owner"),
        lease("holder"),
        lease("state"),
        lease("expires_at"),
        lease("epoch", 0),
        lease("fence"),
        tree,
        gate_of(waits) if waits else None,  # GATE: what the item waits on besides dependencies (model.gate_of)
        get("updated_at") or get("created_at", ""),  # not in the listing's row (cache only)
        # (most items come from nowhere else: no call for them)
        aliases(item_doc) if isinstance(prov, dict) and prov.get("source") is not None else (),
    )


_NONE: dict[str, Any] = {}


def aliases(item_doc: dict[str, Any]) -> tuple[str, ...]:
    """The names an imported item had in its source (``provenance.source.ref``: ``bd-a2``, ``J-1``; a
    GitHub issue's number also as ``#12``), by which ``gw show`` and every verb find it (cache.alias)."""
    prov = item_doc.get("provenance")
    source = prov.get("source") if isinstance(prov, dict) else None
    if not isinstance(source, dict):
        return ()
    ref = source.get("ref")
    if not isinstance(ref, (str, int)) or isinstance(ref, bool) or not str(ref).strip():
        return ()
    ref = str(ref).strip()
    if source.get("kind") == "github" and ref.isdigit():
        return (ref, f"#{ref}")
    return (ref,)


def item_summary(snapshot: Snapshot, item_id: str, folder: str) -> tuple[tuple[Any, ...] | None, str | None]:
    """``(row, None)`` for a sound item folder, ``(None, problem)`` for one whose files do not parse."""
    store = snapshot.store
    try:
        files = store.read_tree(folder)
        item_entry, lease_entry = files.get(layout.ITEM_FILE), files.get(layout.LEASE_FILE)
        if item_entry is None:
            raise Corrupt(f"{layout.item_dir(item_id)} has no {layout.ITEM_FILE}")
        # Checked as strictly as the engine reads them (model.load_item/load_lease), so a bad value is
        # never sorted or compared here: the item is left out and named instead.
        data = store.read_blob(item_entry.oid)
        item_doc = _canonical(data)
        if item_doc is None:
            item_doc = codec.load_yaml(data, what=layout.item_path(item_id, layout.ITEM_FILE))
        found = item_problem(item_doc, item_id)
        if found is not None:
            raise Corrupt(f"{layout.item_path(item_id, layout.ITEM_FILE)}: {found}")
        lease_doc = None
        if lease_entry is not None:
            lease_path = layout.item_path(item_id, layout.LEASE_FILE)
            lease_doc = codec.load_yaml(store.read_blob(lease_entry.oid), what=lease_path)
            found = lease_problem(lease_doc, item_id)
            if found is not None:
                raise Corrupt(f"{lease_path}: {found}")
    except Corrupt as error:
        return None, error.message
    return summarise(item_doc, lease_doc, folder), None


def _canonical(data: bytes) -> dict[str, Any] | None:
    """What ``codec.load_yaml`` makes of a file in the canonical shape (its fast reader's answer, taken
    directly: no path to name it by unless it is refused), or None: ``load_yaml`` then reads it whole.
    A text with a ``\\u`` escape goes there too (it may hold a lone surrogate, which load_yaml refuses)."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        return None
    if "\\u" in text or "\\U" in text:
        return None
    return codec.load_canonical(text)


_intern = sys.intern  # names and kinds repeat: marshal then stores each once
_LINE_LIMIT = 4096  # addressed messages up to this size are kept whole: the inbox then reads no segment


def _brief(record: dict[str, Any]) -> Brief:
    line = json.dumps(record, ensure_ascii=False, separators=(",", ":"))
    return (record["seq"], _intern(str(record["to"])), _intern(str(record.get("by", ""))),
            _intern(str(record.get("kind", "note"))), line if len(line) <= _LINE_LIMIT else "")


def _segments(snapshot: Snapshot, item_id: str, before: tuple[Segment, ...]) -> tuple[tuple[Segment, ...], int]:
    known = dict(before)
    out: list[Segment] = []
    last = 0
    found = segments(snapshot, item_id, 0)
    for index, (first, oid) in enumerate(found):
        briefs = known.get(oid)
        if briefs is None or index == len(found) - 1:
            records = parse_segment(snapshot.store.read_blob(oid), first, f"thread segment {first} of {item_id}")
            last = first + len(records) - 1
            if briefs is None:
                briefs = tuple(_brief(r) for r in records if r.get("to"))
        out.append((oid, briefs))
    return tuple(out), last


def _entry(snapshot: Snapshot, item_id: str, folder_oid: str, previous: Entry | None) -> Entry:
    files = snapshot.store.read_tree(folder_oid)
    thread, cursor_file = files.get(THREAD_DIR), files.get(CURSORS_FILE)
    thread_oid = thread.oid if thread is not None and thread.is_tree else None
    cursors_oid = cursor_file.oid if cursor_file is not None else None
    if thread_oid is None:
        segs: tuple[Segment, ...] = ()
        last = 0
    elif previous is not None and previous[THREAD] == thread_oid:
        segs, last = previous[SEGMENTS], previous[LAST]
    else:
        segs, last = _segments(snapshot, item_id, previous[SEGMENTS] if previous else ())
    if cursors_oid is None:
        marks: dict[str, tuple[int, int]] = {}
    elif previous is not None and previous[CURSORS] == cursors_oid:
        marks = previous[MARKS]
    else:
        loaded = load_cursors(snapshot.store.read_blob(cursors_oid), item_id)
        marks = {_intern(who): (int(c.get("read", 0)), int(c.get("responded", 0))) for who, c in loaded.items()}
    return (folder_oid, thread_oid, cursors_oid, segs, marks, last)


def thread_entry(snapshot: Snapshot, item_id: str, folder_oid: str, previous: Entry | None) -> Entry:
    """The thread summary of one item folder (``Corrupt`` when its thread does not parse)."""
    return _entry(snapshot, item_id, folder_oid, previous)
