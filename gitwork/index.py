"""A summary of every item at one state commit, for ``list``, ``ready`` and ``claim --next``.

Reading 100,000 item files per command would make listing cost grow with the item count, so the
summary is cached on disk keyed by commit, and brought up to date incrementally: shard trees and item
folders whose tree id did not change are not read again. The cache is derived data (delete it at
will); it lives in ``<git common dir>/gitwork/`` and is written atomically.
"""

from __future__ import annotations


from . import codec, commitcache, layout
from .errors import Corrupt
from .model import item_problem, lease_problem
from .store import Snapshot

TYPE_CHECKING = False  # typing costs ~15 ms to import; annotations are strings anyway
if TYPE_CHECKING:
    from typing import Any

CACHE_VERSION = 3  # 3: shards carry the items left out as corrupt
_NAME = f"index-v{CACHE_VERSION}"

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
    def __init__(self, commit: str | None, shards: dict[str, Any]) -> None:
        self.commit = commit
        self.shards = shards

    def items(self) -> dict[str, tuple[Any, ...]]:
        """Every sound item's summary (a corrupt item is left out: see :meth:`problems`)."""
        merged: dict[str, tuple[Any, ...]] = {}
        for shard in self.shards.values():
            merged.update(shard[1])
        return merged

    def problems(self) -> dict[str, str]:
        """Item id → why it is left out (its file and what is wrong), for each item that does not parse."""
        found = commitcache.problems(self.shards)
        if found:
            note_problems(found)
        return found


# Corrupt items any summary in this process left out, for the CLI to name on stderr once per command
# (a listing, `ready` and `claim --next` all read through a summary; see cli/actions.invoke).
NOTED: dict[str, str] = {}


def note_problems(found: dict[str, str]) -> None:
    NOTED.update(found)


def load_index(snapshot: Snapshot, *, use_cache: bool = True) -> Index:
    store = snapshot.store

    def summary(item_id: str, folder: str, _previous: Any) -> tuple[Any, ...]:
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
        return summarise(item_doc, lease_doc, folder)

    index = Index(*commitcache.refresh(snapshot, _NAME, lambda row: row[TREE], summary, use_cache=use_cache))
    index.problems()  # noted for the CLI's stderr: a reader of this summary skips these items
    return index
