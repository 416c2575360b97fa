"""A summary of every item at one state commit, for ``list``, ``ready`` and ``claim --next``.

Reading 100,000 item files per command would make listing cost grow with the item count, so the
summary lives in the read side's one SQLite cache (``cache.py``), brought up to date incrementally:
shard trees and item folders whose tree id did not change are not read again. The cache is derived
data (delete it at will).
"""

from __future__ import annotations

from .rows import item_summary as summary  # noqa: F401  (the row of one item; re-exported)

TYPE_CHECKING = False  # typing costs ~15 ms to import; annotations are strings anyway
if TYPE_CHECKING:
    from typing import Any

    from .store import Snapshot

# Per item: a tuple, cheap to marshal; field positions below.
ID, TITLE, STATUS, PRIORITY, LABELS, DEPS, CREATED, OWNER, HOLDER, LEASE_STATE, EXPIRES, EPOCH, FENCE, TREE, GATE = range(15)
# GATE: None, a timer's instant (ready once it passes) or model.GATE_OPEN (a ref or command wait is open)


class Index:
    """Every item's summary at one commit (``items``) and the items left out as corrupt (``problems``)."""

    def __init__(self, commit: str | None, rows: dict[str, tuple[Any, ...]], bad: dict[str, str]) -> None:
        self.commit = commit
        self._rows = rows
        self._bad = bad

    def items(self) -> dict[str, tuple[Any, ...]]:
        """Every sound item's summary (a corrupt item is left out: see :meth:`problems`)."""
        return self._rows

    def problems(self) -> dict[str, str]:
        """Item id → why it is left out (its file and what is wrong), for each item that does not parse."""
        if self._bad:
            note_problems(self._bad)
        return self._bad


# Corrupt items any summary in this process left out, for the CLI to name on stderr once per command
# (a listing, `ready` and `claim --next` all read through a summary; see cli/actions.invoke).
NOTED: dict[str, str] = {}
NOTED_MAX = 100_000


def note_problems(found: dict[str, str]) -> None:
    if len(NOTED) + len(found) > NOTED_MAX:
        NOTED.clear()  # a long-lived process (gw serve, gw mcp) never names them: bounded, not kept forever
    NOTED.update(found)


def _read(db: Any) -> Index:
    from .cache import ROW_COLUMNS, unpack_row

    rows: dict[str, tuple[Any, ...]] = {}
    bad: dict[str, str] = {}
    for record in db.execute(f"SELECT {ROW_COLUMNS}, problem FROM item"):
        if record[-1] is not None:
            bad[record[0]] = record[-1]
        else:
            rows[record[0]] = unpack_row(record[:-1])
    commit = db.execute("SELECT value FROM meta WHERE key='commit'").fetchone()[0] or None
    return Index(commit, rows, bad)


def load_index(snapshot: Snapshot, *, use_cache: bool = True) -> Index:
    from . import cache
    from .rows import thread_entry

    index: Index = cache.at(snapshot, _read, summary, thread_entry, use_cache=use_cache)
    index.problems()  # noted for the CLI's stderr: a reader of this summary skips these items
    return index


def rebuild(snapshot: Snapshot) -> tuple[str | None, int]:
    """Bring the cache to ``snapshot`` (from scratch after ``cache.drop``) without loading its rows:
    the commit it reflects and how many items it holds."""
    from . import cache
    from .rows import thread_entry

    def counted(db: Any) -> tuple[str | None, int]:
        bad = dict(db.execute("SELECT id, problem FROM item WHERE problem IS NOT NULL"))
        if bad:
            note_problems(bad)  # named on stderr by the CLI, as every reader of the summary does
        commit = db.execute("SELECT value FROM meta WHERE key='commit'").fetchone()[0] or None
        return commit, db.execute("SELECT count(*) FROM item").fetchone()[0]

    return cache.at(snapshot, counted, summary, thread_entry)  # type: ignore[no-any-return]
