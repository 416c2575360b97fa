"""A summary of every item's thread and cursors at one state commit, for ``gw inbox``.

The inbox looks at every thread, so reading every segment per call would make it cost what the whole
conversation history costs. Like ``index.py``, the summary lives in the read side's one SQLite cache
(``cache.py``) and is brought up to date incrementally: a shard tree, an item folder, a thread tree or a segment whose
object id did not change is not read again (a post changes one segment of one thread). The cache is
derived data (delete it at will).
"""

from __future__ import annotations

import json
import sys

from .thread import CURSORS_FILE, THREAD_DIR, load_cursors, parse_segment, segments
from .store import Snapshot

TYPE_CHECKING = False  # typing costs ~15 ms to import; annotations are strings anyway
if TYPE_CHECKING:
    from typing import Any

    # (seq, to, by, kind, the record as JSON or "" when large) of one message that names an addressee
    Brief = tuple[int, str, str, str, str]
    # (segment blob id, its addressed messages)
    Segment = tuple[str, tuple[Brief, ...]]
    # (folder id, thread tree id, cursors blob id, segments, {who: (read, responded)}, last seq)
    Entry = tuple[str, "str | None", "str | None", tuple[Segment, ...], dict[str, tuple[int, int]], int]

FOLDER, THREAD, CURSORS, SEGMENTS, MARKS, LAST = range(6)


class ThreadsIndex:
    """Per item: the messages that name an addressee (whole), the cursors and the last sequence number.

    Only addressed messages are kept: an inbox needs every message of a thread only for the items its
    reader holds, which are few and are read live (from the reader's responded cursor on). That keeps
    the cache small enough to load on every ``gw inbox`` at 10,000 items.
    """

    def __init__(self, commit: str | None, threads: dict[str, Entry], bad: dict[str, str]) -> None:
        self.commit = commit
        self._threads = threads
        self.bad = bad
        self.extra: Any = None

    def items(self) -> dict[str, Entry]:
        """Item id → entry, only for items with a thread or cursors (a corrupt thread is left out)."""
        return self._threads


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


def entry(snapshot: Snapshot, item_id: str, folder_oid: str, previous: Entry | None) -> Entry:
    """The thread summary of one item folder (``Corrupt`` when its thread does not parse)."""
    return _entry(snapshot, item_id, folder_oid, previous)


def _read(db: Any, extra: Any = None) -> ThreadsIndex:
    import marshal

    threads: dict[str, Entry] = {}
    bad: dict[str, str] = {}
    for item_id, blob, problem in db.execute(
            "SELECT id, thread, thread_problem FROM item WHERE has_thread=1 OR thread_problem IS NOT NULL"):
        if problem is not None:
            bad[item_id] = problem
        else:
            threads[item_id] = marshal.loads(blob)
    commit = db.execute("SELECT value FROM meta WHERE key='commit'").fetchone()[0] or None
    out = ThreadsIndex(commit, threads, bad)
    out.extra = extra(db) if extra is not None else None
    return out


def load_threads(snapshot: Snapshot, *, use_cache: bool = True, extra: Any = None) -> ThreadsIndex:
    """Every thread's summary at ``snapshot``; ``extra(db)``, if given, is read in the same
    transaction (so it answers at the same commit) and kept as ``.extra``."""
    from . import cache
    from .index import note_problems, summary

    threads: ThreadsIndex = cache.at(snapshot, lambda db: _read(db, extra), summary, entry, use_cache=use_cache)
    if threads.bad:
        note_problems(threads.bad)
    return threads
