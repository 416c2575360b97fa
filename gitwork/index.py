"""A summary of every item at one state commit, for ``list``, ``ready`` and ``claim --next``.

Reading 100,000 item files per command would make listing cost grow with the item count, so the
summary lives in the read side's one SQLite cache (``cache.py``), brought up to date incrementally:
shard trees and item folders whose tree id did not change are not read again. The cache is derived
data (delete it at will).
"""

from __future__ import annotations


from . import codec, layout
from .errors import Corrupt
from .model import item_problem, lease_problem
from .store import Snapshot

TYPE_CHECKING = False  # typing costs ~15 ms to import; annotations are strings anyway
if TYPE_CHECKING:
    from typing import Any

# Per item: a tuple, cheap to marshal; field positions below.
ID, TITLE, STATUS, PRIORITY, LABELS, DEPS, CREATED, OWNER, HOLDER, LEASE_STATE, EXPIRES, EPOCH, FENCE, TREE = range(14)


def summarise(item_doc: dict[str, Any], lease_doc: dict[str, Any] | None, tree: str) -> tuple[Any, ...]:
    lease = lease_doc or {}
    return (
        item_doc.get("id"),
        item_doc.get("title"),
        item_doc.get("status", "open"),
        item_doc.get("priority", 2),
        tuple(item_doc.get("labels") or ()),
        tuple(item_doc.get("depends_on") or ()),
        item_doc.get("created_at", ""),
        item_doc.get("owner"),
        lease.get("holder"),
        lease.get("state"),
        lease.get("expires_at"),
        lease.get("epoch", 0),
        lease.get("fence"),
        tree,
    )


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


def note_problems(found: dict[str, str]) -> None:
    NOTED.update(found)


def summary(snapshot: Snapshot, item_id: str, folder: str) -> tuple[tuple[Any, ...] | None, str | None]:
    """``(row, None)`` for a sound item folder, ``(None, problem)`` for one whose files do not parse."""
    store = snapshot.store
    try:
        files = store.read_tree(folder)
        item_entry, lease_entry = files.get(layout.ITEM_FILE), files.get(layout.LEASE_FILE)
        if item_entry is None:
            raise Corrupt(f"{layout.item_dir(item_id)} has no {layout.ITEM_FILE}")
        # Checked as strictly as the engine reads them (model.load_item/load_lease), so a bad value is
        # never sorted or compared here: the item is left out and named instead.
        item_path = layout.item_path(item_id, layout.ITEM_FILE)
        item_doc = codec.load_yaml(store.read_blob(item_entry.oid), what=item_path)
        found = item_problem(item_doc, item_id)
        if found is not None:
            raise Corrupt(f"{item_path}: {found}")
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
    from .threads_index import entry

    index: Index = cache.at(snapshot, _read, summary, entry, use_cache=use_cache)
    index.problems()  # noted for the CLI's stderr: a reader of this summary skips these items
    return index
