"""A summary of every item's thread and cursors at one state commit, for ``gw inbox``.

The inbox looks at every thread, so reading every segment per call would make it cost what the whole
conversation history costs. Like ``index.py``, the summary lives in the read side's one SQLite cache
(``cache.py``) and is brought up to date incrementally: a shard tree, an item folder, a thread tree or a segment whose
object id did not change is not read again (a post changes one segment of one thread). The cache is
derived data (delete it at will).
"""

from __future__ import annotations

TYPE_CHECKING = False  # typing costs ~15 ms to import; annotations are strings anyway
if TYPE_CHECKING:
    from typing import Any

    from .store import Snapshot

    # (seq, to, by, kind, the record as JSON or "" when large) of one message that names an addressee
    Brief = tuple[int, str, str, str, str]
    # (segment blob id, its addressed messages)
    Segment = tuple[str, tuple[Brief, ...]]
    # (folder id, thread tree id, cursors blob id, segments, {who: (read, responded)}, last seq)
    Entry = tuple[str, "str | None", "str | None", tuple[Segment, ...], dict[str, tuple[int, int]], int]

from .rows import CURSORS, FOLDER, LAST, MARKS, SEGMENTS, THREAD  # noqa: F401  (an entry's fields)


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
    from .index import note_problems
    from .rows import item_summary, thread_entry

    threads: ThreadsIndex = cache.at(snapshot, lambda db: _read(db, extra), item_summary, thread_entry,
                                     use_cache=use_cache)
    if threads.bad:
        note_problems(threads.bad)
    return threads
