"""The thread format: where an item's conversation lives in the state and how it is read.

A plain module beside the engine (like ``model.py`` for items and leases): the conversation ops
(``ops/messages.py``, ``ops/conversation.py``) write through it, the read side (``conversations.py``,
``threads_index.py``) reads through it. It imports nothing above the store.

Where a thread lives, under the item's folder (docs/format.md has the full description)::

    thread/<group>/<segment>.log   one message per line (JSON), ``seq`` gapless from 1
    cursors.yaml                   per participant: ``read`` and ``responded`` (monotone)

A segment holds ``SEGMENT`` (100) messages and is named by the first sequence number it can hold,
zero-padded to 10 digits; a group folder holds ``GROUP`` (100) segments and is named the same way.
So a post rewrites one blob of at most 100 lines and two small trees, whatever the thread's size (a
single growing file would make each post O(thread) and the history O(n²)), and a replay from a cursor
starts at the segment holding it instead of reading the whole thread.

Cursors are prefixes: ``read: 7`` means every message up to #7 was seen; ``responded: 5`` that every
one up to #5 was answered (``reply`` names the message that did). Responded never exceeds read.

A message's ``id`` is the id of the command that posted it (client-chosen, so a retried post lands
once). Sequence numbers are assigned on the tip a command is applied to, so a stored command names
messages by id: an op given a number (``SEQ`` on the command line) resolves it on the tip it is
applied to and records the id in the document, so a replay onto another tip still names the same
message after renumbering.
"""

from __future__ import annotations

import bisect
import json
import re

from . import codec, layout
from .commands import parse_msgref
from .errors import Corrupt

TYPE_CHECKING = False  # typing costs ~15 ms to import; annotations are strings anyway
if TYPE_CHECKING:
    from collections.abc import Callable, Iterator
    from typing import Any

    from .store import Snapshot

SEGMENT = 100
GROUP = 100
SPAN = SEGMENT * GROUP
THREAD_DIR = "thread"
CURSORS_FILE = "cursors.yaml"
# Kinds a person or agent posts with `gw msg`; `decision` is written only by `decide`.
POST_KINDS = ("note", "question", "answer", "handoff", "decision-request")
KINDS = (*POST_KINDS, "decision")
# Kinds that wait for an answer: once read they stay in the inbox until the reader acknowledges a
# reply (`ack --responded`). Notes, answers and decisions only need reading.
ANSWERABLE = ("question", "decision-request", "handoff")
_NAME = re.compile(r"\d{10}\Z")
_SEGMENT_NAME = re.compile(r"(\d{10})\.log\Z")


# --- paths -----------------------------------------------------------------------------------------


def first_of(seq: int, size: int) -> int:
    """The first sequence number of the block of ``size`` that holds ``seq``."""
    return (seq - 1) // size * size + 1


def thread_dir(item_id: str) -> str:
    return f"{layout.item_dir(item_id)}/{THREAD_DIR}"


def segment_path(item_id: str, seq: int) -> str:
    return f"{thread_dir(item_id)}/{first_of(seq, SPAN):010d}/{first_of(seq, SEGMENT):010d}.log"


def cursors_path(item_id: str) -> str:
    return layout.item_path(item_id, CURSORS_FILE)


# --- reading a thread ------------------------------------------------------------------------------


_GROUP_MEMO: dict[tuple[str, int, int], list[tuple[int, str]]] = {}  # full groups never change


def _group_segments(snapshot: Snapshot, item_id: str, group_name: str, oid: str) -> list[tuple[int, str]]:
    key = (oid, SEGMENT, SPAN)
    known = _GROUP_MEMO.get(key)
    if known is not None:
        return known
    group_first = int(group_name)
    members = snapshot.store.read_tree(oid)
    out: list[tuple[int, str]] = []
    for name in sorted(members):
        match = _SEGMENT_NAME.match(name)
        seg = members[name]
        if match is None or seg.is_tree:
            raise Corrupt(f"unexpected {name!r} in the thread of {item_id}")
        first = int(match.group(1))
        if first != first_of(first, SEGMENT) or first_of(first, SPAN) != group_first:
            raise Corrupt(f"thread segment {group_name}/{name} of {item_id} is misnamed")
        out.append((first, seg.oid))
    if len(out) == SPAN // SEGMENT:
        _GROUP_MEMO[key] = out
    return out


def segments(snapshot: Snapshot, item_id: str, since: int = 0) -> list[tuple[int, str]]:
    """``(first seq, blob id)`` of each segment that may hold a message after ``since``, in order."""
    out: list[tuple[int, str]] = []
    groups = snapshot.tree(thread_dir(item_id))
    for group_name in sorted(groups):
        entry = groups[group_name]
        if not _NAME.match(group_name) or not entry.is_tree:
            raise Corrupt(f"unexpected {group_name!r} in the thread of {item_id}")
        group_first = int(group_name)
        if group_first != first_of(group_first, SPAN):
            raise Corrupt(f"thread group {group_name} of {item_id} is misnamed")
        if group_first + SPAN - 1 <= since:
            continue
        if since < group_first:
            out.extend(_group_segments(snapshot, item_id, group_name, entry.oid))
        else:
            out.extend(seg for seg in _group_segments(snapshot, item_id, group_name, entry.oid)
                       if seg[0] + SEGMENT - 1 > since)
    return out


def parse_segment(data: bytes, first: int, what: str) -> list[dict[str, Any]]:
    # One json.loads for the whole segment (lines joined into an array) is ~2x faster than one per
    # line; anything odd falls back to the line-by-line reader, which names the bad line.
    records: Any = None
    if data.endswith(b"\n") and b"\r" not in data:
        try:
            records = json.loads(b"[" + data[:-1].replace(b"\n", b",") + b"]")
        except ValueError:
            records = None
        if records is not None and not all(isinstance(r, dict) and type(r.get("seq")) is int for r in records):
            records = None
    if records is None:
        records = list(codec.iter_records(data, what=what))
    if len(records) > SEGMENT:
        raise Corrupt(f"{what} holds {len(records)} messages; a segment holds at most {SEGMENT}")
    for offset, record in enumerate(records):
        if record["seq"] != first + offset:
            raise Corrupt(f"{what} has message #{record['seq']} where #{first + offset} belongs")
    return records


def replay(snapshot: Snapshot, item_id: str, since: int = 0) -> Iterator[dict[str, Any]]:
    """Every message after ``since``, in order; a gap or a duplicate in storage is :class:`Corrupt`."""
    expected = since + 1
    previous: tuple[int, int] | None = None  # (first, count) of the segment before
    for first, oid in segments(snapshot, item_id, since):
        if previous is not None and (previous[1] != SEGMENT or first != previous[0] + SEGMENT):
            raise Corrupt(f"the thread of {item_id} has a gap before #{first}")
        if previous is None and first > expected:
            raise Corrupt(f"the thread of {item_id} has no segment holding #{expected}")
        records = parse_segment(snapshot.store.read_blob(oid), first, f"thread segment {first} of {item_id}")
        previous = (first, len(records))
        for record in records:
            if record["seq"] >= expected:
                yield record
                expected = record["seq"] + 1


def last_seq(snapshot: Snapshot, item_id: str) -> int:
    found = segments(snapshot, item_id, 0)
    if not found:
        return 0
    first, oid = found[-1]
    count = len(parse_segment(snapshot.store.read_blob(oid), first, f"thread segment {first} of {item_id}"))
    return first + count - 1


def message_at(read_file: Callable[[str], bytes | None], item_id: str, seq: int) -> dict[str, Any] | None:
    """The message numbered ``seq`` (``read_file(path)`` reads the state, pending writes included)."""
    if seq < 1:
        return None
    data = read_file(segment_path(item_id, seq))
    if not data:
        return None
    first = first_of(seq, SEGMENT)
    records = parse_segment(data, first, f"thread segment {first} of {item_id}")
    index = seq - first
    return records[index] if index < len(records) else None


# --- message ids ------------------------------------------------------------------------------------
# Refusing a duplicate message id needs every id in the thread. Full segments never change, so each
# one's ids are remembered by its blob id, in memory and in the read cache (``cache.sealed_ids``, long
# threads only), as ONE string of newline-separated ids: loading and searching 100,000 ids is then a
# memcpy and a substring search, not 100,000 dict insertions per post. Only the open (last) segment is
# parsed on every post.

_IDS_MEMO: dict[str, tuple[int, str]] = {}
_DISK_FROM = 3  # segments; shorter threads are cheaper to parse than to cache


class MessageIds:
    """Message id → sequence number over a whole thread, plus ids added by the current command."""

    def __init__(self, sealed: list[tuple[int, str]], open_ids: dict[str, int]) -> None:
        self.sealed = sealed  # (first seq, "\nid1\nid2\n...\n") per full segment
        self.open = open_ids
        self._joined: str | None = None
        self._starts: list[int] = []

    def get(self, msg_id: str) -> int | None:
        seq = self.open.get(msg_id)
        if seq is not None or not self.sealed:
            return seq
        if self._joined is None:
            # One string for the whole thread: one substring search instead of one per segment.
            position = 0
            for _first, joined in self.sealed:
                self._starts.append(position)
                position += len(joined)
            self._joined = "".join(joined for _first, joined in self.sealed)
        pos = self._joined.find(f"\n{msg_id}\n")
        if pos < 0:
            return None
        index = bisect.bisect_right(self._starts, pos) - 1
        return self.sealed[index][0] + self._joined.count("\n", self._starts[index], pos)

    def __contains__(self, msg_id: object) -> bool:
        return isinstance(msg_id, str) and "\n" not in msg_id and self.get(msg_id) is not None

    def __getitem__(self, msg_id: str) -> int:
        seq = self.get(msg_id)
        if seq is None:
            raise KeyError(msg_id)
        return seq

    def __setitem__(self, msg_id: str, seq: int) -> None:
        self.open[msg_id] = seq


def message_ids(snapshot: Snapshot, item_id: str) -> MessageIds:
    """Every message id of the thread at ``snapshot`` and its sequence number."""
    found = segments(snapshot, item_id, 0)
    sealed: list[tuple[int, str]] = []
    open_ids: dict[str, int] = {}
    learned: dict[str, tuple[int, str]] = {}
    if len(found) >= _DISK_FROM:
        # The last segment is usually the open one, never cached: it alone must not cost a lookup.
        missing = [oid for _first, oid in found[:-1] if oid not in _IDS_MEMO]
        if missing:
            from .cache import sealed_ids

            _IDS_MEMO.update(sealed_ids(snapshot.store.repo.gitwork_dir(), missing))
    for first, oid in found:
        known = _IDS_MEMO.get(oid)
        if known is None:
            records = parse_segment(snapshot.store.read_blob(oid), first, f"thread segment {first} of {item_id}")
            if len(records) == SEGMENT:
                known = (first, "\n" + "".join(f"{r.get('id')}\n" for r in records))
                _IDS_MEMO[oid] = learned[oid] = known
            else:
                open_ids.update((str(r.get("id")), r["seq"]) for r in records)
                continue
        sealed.append(known)
    if learned and len(found) >= _DISK_FROM:
        from .cache import remember_sealed_ids

        remember_sealed_ids(snapshot.store.repo.gitwork_dir(), learned)
    return MessageIds(sealed, open_ids)


# --- references to messages --------------------------------------------------------------------------


# ``parse_ref`` is the ``msgref`` field kind, declared with every other kind in ``commands.py``.
parse_ref = parse_msgref


def split_ref(ref: int | str) -> tuple[str | None, int | str]:
    """``(item text or None, number or id)`` of a parsed reference: ``"w-3fa9:3"`` → ``("w-3fa9", 3)``."""
    if isinstance(ref, int):
        return None, ref
    item_text, sep, rest = ref.partition(":")
    if not sep or not item_text.lower().startswith("w-"):
        return None, ref
    return item_text, int(rest) if rest.isdigit() else rest


# --- cursors ----------------------------------------------------------------------------------------


def load_cursors(data: bytes | None, item_id: str) -> dict[str, dict[str, Any]]:
    if not data:
        return {}
    doc = codec.load_yaml(data, what=f"cursors of {item_id}")
    rows = doc.get("cursors") or []
    out: dict[str, dict[str, Any]] = {}
    if not isinstance(rows, list):
        raise Corrupt(f"cursors of {item_id} is not a list")
    for row in rows:
        if not isinstance(row, dict) or not isinstance(row.get("who"), str):
            raise Corrupt(f"cursors of {item_id} has an entry without 'who'")
        read, responded = row.get("read", 0), row.get("responded", 0)
        if not isinstance(read, int) or not isinstance(responded, int) or responded > read:
            raise Corrupt(f"cursors of {item_id} for {row['who']} are inconsistent")
        out[row["who"]] = {k: v for k, v in row.items() if k != "who"}
    return out


def dump_cursors(cursors: dict[str, dict[str, Any]]) -> bytes:
    return codec.dump_yaml({"cursors": [{"who": who, **cursors[who]} for who in sorted(cursors)]})


def cursors(snapshot: Snapshot, item_id: str) -> dict[str, dict[str, Any]]:
    return load_cursors(snapshot.blob(cursors_path(item_id)), item_id)
