"""Conversations, read side: a thread's messages, following a thread as it grows, the inbox.

Queries over the store only (a snapshot, or the store's tip for ``follow``): the library face
(``Workplane.thread``, ``follow``, ``inbox``, in ``workplane_messages.py``) resolves the item and the
reader, then calls these. The thread format is ``thread.py``; the inbox's per-commit summary of every
thread is ``threads_index.py``.
"""

from __future__ import annotations

import json
import time

from . import thread
from .errors import Invalid
from .thread import ANSWERABLE, first_of, message_at, parse_segment, replay, segment_path

TYPE_CHECKING = False  # typing costs ~15 ms to import; annotations are strings anyway
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any

    from .store import Snapshot, Store


def messages(snapshot: Snapshot, item_id: str, since: int = 0) -> list[dict[str, Any]]:
    """The messages of ``item_id``'s thread after ``since``, in order."""
    if since < 0:
        raise Invalid("--since must be 0 or a message number")
    return list(replay(snapshot, item_id, since))


def follow(store: Store, item_id: str, since: int, emit: Callable[[dict[str, Any]], None], *,
           timeout: float | None = None, poll: float = 0.2, refresh: Callable[[], object] | None = None,
           refresh_every: float = 2.0) -> int:
    """Emit every message after ``since``, then each new one as it lands; returns the last seq seen.

    Polling compares the tip (one ref read through the open ``cat-file`` process), so an idle follow
    costs next to nothing; the thread is read only when the ref moved. ``refresh`` (e.g. a pull from
    the arbiter remote) runs every ``refresh_every`` seconds. A pull may renumber local posts the
    arbiter had not seen; when the message at the last emitted number is no longer the one emitted,
    the thread is read again from ``since`` and only messages not yet emitted are printed.
    """
    deadline = time.monotonic() + timeout if timeout is not None else None
    next_refresh = time.monotonic()
    seen_tip: str | None = None
    emitted: set[str] = set()
    last, last_id = since, None
    while True:
        if refresh is not None and time.monotonic() >= next_refresh:
            refresh()
            next_refresh = time.monotonic() + refresh_every
        tip = store.tip()
        if tip is not None and tip != seen_tip:
            snapshot = store.snapshot(tip)
            start = last
            if last_id is not None:
                at_last = message_at(snapshot.blob, item_id, last)
                if at_last is None or at_last.get("id") != last_id:
                    start = since
            for record in replay(snapshot, item_id, start):
                last, last_id = record["seq"], record.get("id")
                if last_id in emitted:
                    continue
                emitted.add(str(last_id))
                emit(record)
            seen_tip = tip
        if deadline is not None and time.monotonic() >= deadline:
            return last
        time.sleep(poll if deadline is None else max(0.0, min(poll, deadline - time.monotonic())))


def _creators(snapshot: Snapshot, folders: dict[str, str], who: str) -> set[str]:
    """Of the items in ``folders`` (id -> the tree id of its folder), those ``who`` created."""
    from .codec import load_yaml
    from .errors import GwError
    from .layout import ITEM_FILE

    made = set()
    for item_id, folder in folders.items():
        try:
            entry = snapshot.store.read_tree(folder).get(ITEM_FILE)
            doc = load_yaml(snapshot.store.read_blob(entry.oid)) if entry is not None else {}
        except GwError:
            continue  # a bad item is named by the reads over the whole state
        provenance = doc.get("provenance")
        if isinstance(provenance, dict) and provenance.get("by") == who:
            made.add(item_id)
    return made


def inbox(snapshot: Snapshot, who: str) -> dict[str, Any]:
    """Messages addressed to ``who`` or on items ``who`` holds or owns (its ``owner``, or its creator
    when it names no owner), not written by ``who``, split into
    ``unread`` (after the read cursor) and ``unanswered`` (read, not yet responded to, of a kind that
    waits for an answer), oldest first.

    Addressed messages come from the per-commit thread summary (``threads_index``); the threads of
    items ``who`` holds are read live from the responded cursor on, so only they cost a read.
    """
    from .threads_index import LAST, MARKS, SEGMENTS, load_threads

    # One read of the cache: the addressed messages and cursors of every thread, the items `who`
    # holds, and the titles of the items with a thread (the only ones an inbox row can name).
    threads_index = load_threads(snapshot, extra=lambda db: (
        [r[0] for r in db.execute("SELECT id FROM item WHERE lease_state = 'active' AND holder = ?"
                                  " AND problem IS NULL", (who,))],
        dict(db.execute("SELECT id, title FROM item WHERE problem IS NULL AND (has_thread = 1 OR"
                        " (lease_state = 'active' AND holder = ?))", (who,))),
        dict(db.execute("SELECT id, problem FROM item WHERE problem IS NOT NULL")),
        [r[0] for r in db.execute("SELECT id FROM item WHERE problem IS NULL AND has_thread = 1 AND owner = ?",
                                  (who,))],
        dict(db.execute("SELECT id, folder FROM item WHERE problem IS NULL AND has_thread = 1 AND owner IS NULL"))))
    # (folder: the tree id of the item's folder)
    threads = threads_index.items()
    held, titles, bad, owned, unowned = threads_index.extra
    if bad:
        from .index import note_problems

        note_problems(bad)  # named on stderr by the CLI, as for every read over the whole state
    held_set = set(held)
    # The items `who` owns with something after its responded mark: read live, like the held ones. The
    # creator is in item.yaml only, read for unowned threads that have something `who` has not answered.
    pending = {i: f for i, f in unowned.items() if i not in held_set and i in threads
               and threads[i][MARKS].get(who, (0, 0))[1] < threads[i][LAST]}
    owned_set = (set(owned) | _creators(snapshot, pending, who)) - held_set
    picked: list[tuple[str, int, str, str, dict[str, Any] | None]] = []  # item, seq, box, why, record

    def place(item_id: str, seq: int, by: str, kind: str, marks: tuple[int, int], why: str,
              record: dict[str, Any] | None) -> None:
        if by == who:
            return
        if seq > marks[0]:
            picked.append((item_id, seq, "unread", why, record))
        elif seq > marks[1] and kind in ANSWERABLE:
            picked.append((item_id, seq, "unanswered", why, record))

    for item_ids, why in ((held, "you hold it"), (sorted(owned_set), "you own it")):
        for item_id in item_ids:
            entry = threads.get(item_id)
            if entry is None:
                continue
            marks = entry[MARKS].get(who, (0, 0))
            if marks[1] >= entry[LAST]:
                continue
            for message in replay(snapshot, item_id, marks[1]):
                place(item_id, message["seq"], str(message.get("by")), str(message.get("kind")), marks, why, message)
    for item_id, entry in threads.items():
        if item_id in held_set or item_id in owned_set:
            continue
        marks = entry[MARKS].get(who, (0, 0))
        if marks[1] >= entry[LAST]:
            continue
        for _oid, briefs in entry[SEGMENTS]:
            for seq, to, by, kind, line in briefs:
                if to == who:
                    place(item_id, seq, by, kind, marks, "to you", json.loads(line) if line else None)

    parsed: dict[str, list[dict[str, Any]]] = {}  # each segment is parsed once, however many rows it feeds
    rows_out: list[tuple[str, str, int, str, dict[str, Any]]] = []
    for item_id, seq, box, why, record in picked:
        if record is None:
            path = segment_path(item_id, seq)
            first = first_of(seq, thread.SEGMENT)
            if path not in parsed:
                parsed[path] = parse_segment(snapshot.blob(path) or b"", first, f"thread segment {first} of {item_id}")
            records = parsed[path]
            record = records[seq - first] if seq - first < len(records) else {"seq": seq}
        view = {"item": item_id, "title": titles.get(item_id), "why": why, "box": box, **record}
        rows_out.append((str(record.get("at", "")), item_id, seq, box, view))
    rows_out.sort(key=lambda r: r[:3])
    out: dict[str, Any] = {"who": who, "unread": [], "unanswered": []}
    for _at, _item, _seq, box, view in rows_out:
        del view["box"]
        out[box].append(view)
    return out
