"""The publish queue's records on the state ref (docs/sessions.md, "The publish queue"): formats and readers.

``queue/entries/<seq>.yaml``, one per queued session (``seq`` zero-padded, so the tree's order is the
queue's), ``queue/seq.yaml`` the next number (never reused, even after the entry it named is gone), and
``queue/publisher.yaml`` the publisher's own fenced lease: one ``gw queue work`` at a time across clones.
The rules are the ops' (``ops/queue.py``); this module holds the formats and the reads, below ``ops/`` so
the procedure (``pubqueue.py``) and the faces read them without importing an op module.
"""

from __future__ import annotations

from .. import codec
from .executions import coordinator_live

TYPE_CHECKING = False  # typing costs ~15 ms to import; annotations are strings anyway
if TYPE_CHECKING:
    from typing import Any

    from ..engine import View

QUEUE = "queue"
ENTRIES = f"{QUEUE}/entries"
SEQ_PATH = f"{QUEUE}/seq.yaml"
PUBLISHER_PATH = f"{QUEUE}/publisher.yaml"
# What a sent-back session's message quotes of the failing gate: its last lines, and at most this much.
OUTPUT_LINES = 20
OUTPUT_CHARS = 4000


def entry_path(seq: int) -> str:
    return f"{ENTRIES}/{seq:08d}.yaml"


def _whole(value: Any, least: int = 0) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= least


def record_problem(path: str, doc: dict[str, Any]) -> str | None:
    """What is wrong with a queue record's fields (None: sound), by its path: the fields its readers
    use as they are, so a record forged by hand is corrupt (8), never a Python error in ``gw queue``."""
    if path == SEQ_PATH:
        return None if _whole(doc.get("next"), 1) else f"next must be a whole number from 1, not {doc.get('next')!r}"[:200]
    if path == PUBLISHER_PATH:
        epoch = doc.get("epoch")
        return None if epoch is None or _whole(epoch) else f"epoch must be a whole number, not {epoch!r}"[:200]
    name = path.rsplit("/", 1)[-1].removesuffix(".yaml")
    if not _whole(doc.get("seq"), 1) or not name.isdigit() or doc["seq"] != int(name):
        return f"seq must be the file's number ({name}), not {doc.get('seq')!r}"[:200]
    for key in ("session", "item", "holder", "commit", "into"):
        if not isinstance(doc.get(key), str):
            return f"{key} must be a text, not {doc.get(key)!r}"[:200]
    for key in ("fence", "epoch"):
        if doc.get(key) is not None and not _whole(doc[key]):
            return f"{key} must be a whole number, not {doc[key]!r}"[:200]
    return None


def _checked(data: bytes, path: str) -> dict[str, Any]:
    from ..errors import Corrupt

    doc = codec.load_yaml(data, what=path)
    problem = record_problem(path, doc)
    if problem:
        raise Corrupt(f"{path}: {problem}")
    return doc


def entries(view: View) -> list[dict[str, Any]]:
    """The queued entries, head first. An op's own pending writes count (a batch member sees them)."""
    names = set(view.snapshot.tree(ENTRIES))
    pending = getattr(getattr(view, "outcome", None), "changes", {})
    names.update(p.rsplit("/", 1)[1] for p in pending if p.startswith(f"{ENTRIES}/"))
    found = []
    for name in sorted(names):
        path = f"{ENTRIES}/{name}"
        data = view.file(path)
        if data is not None:
            found.append(_checked(data, path))
    return sorted(found, key=lambda e: int(e["seq"]))


def next_seq(view: View) -> int:
    data = view.file(SEQ_PATH)
    return int(_checked(data, SEQ_PATH)["next"]) if data else 1


def find_entry(view: View, session: str) -> dict[str, Any] | None:
    return next((e for e in entries(view) if e.get("session") == session), None)


def load_publisher(view: View) -> dict[str, Any] | None:
    data = view.file(PUBLISHER_PATH)
    return _checked(data, PUBLISHER_PATH) if data else None


# The publisher's lease binds by the coordinator lease's rule (not released, not expired): one rule.
publisher_live = coordinator_live


def bounded(output: str) -> str:
    """The tail of a gate's output that a message may quote: its last lines, at most ``OUTPUT_CHARS``."""
    tail = "\n".join(output.rstrip().splitlines()[-OUTPUT_LINES:])
    return tail[-OUTPUT_CHARS:]
