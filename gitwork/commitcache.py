"""On-disk caches of data derived from one state commit (the summary index, the threads index).

Each cache is a marshal file ``<git common dir>/gitwork/<ref>.<name>`` holding ``(commit, shards)``,
where ``shards`` maps a shard folder name to ``(shard tree id, {item id: summary}, {item id: (folder
tree id, problem)})`` so a later commit is brought up to date by re-reading only the shards whose tree
id changed. A cache is derived data: unreadable or missing means rebuild, unwritable means a slower next
command, never an error.

An item whose files do not parse (``Corrupt``) is kept aside with its problem rather than failing the
whole summary: one bad item must not take every listing down. Readers list the sound items and name
the bad ones (:func:`problems`); commands that need the bad item itself read it and fail on it.
"""

from __future__ import annotations

import marshal
import os
import sys

from .store import Snapshot

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any

PY = f"py{sys.version_info[0]}{sys.version_info[1]}"  # marshal's format may change between versions


def path_for(snapshot: Snapshot, name: str) -> str:
    ref = snapshot.store.ref.replace("/", "_")
    return os.path.join(snapshot.store.repo.gitwork_dir(), f"{ref}.{name}-{PY}.marshal")


def read(path: str) -> tuple[str | None, dict[str, Any]] | None:
    import gc

    try:
        with open(path, "rb") as handle:
            data = handle.read()
    except OSError:
        return None
    # Loading builds ~10 objects per item; the cyclic collector would walk the growing heap again and
    # again meanwhile (measured: 2x slower at 10,000 items). Nothing here can form a cycle.
    enabled = gc.isenabled()
    gc.disable()
    try:
        commit, shards = marshal.loads(data)
        return commit, shards
    except (EOFError, ValueError, TypeError):
        return None
    finally:
        if enabled:
            gc.enable()


def write(path: str, commit: str | None, shards: dict[str, Any]) -> None:
    try:
        tmp = f"{path}.{os.getpid()}.{os.urandom(4).hex()}.tmp"
        with open(tmp, "wb") as handle:
            marshal.dump((commit, shards), handle)
        os.replace(tmp, path)  # atomic: concurrent readers see the old file or the new one
    except OSError:
        pass


def refresh(
    snapshot: Snapshot,
    name: str,
    folder_of: Callable[[Any], str],
    summarise: Callable[[str, str, Any], Any],
    *,
    use_cache: bool = True,
) -> tuple[str | None, dict[str, Any]]:
    """``(commit, shards)`` for ``snapshot``: the cached one, brought up to date shard by shard.

    ``summarise(item_id, folder_tree_id, previous_entry)`` builds an item's entry; it is called only
    for item folders whose tree id differs from the cached entry's ``folder_of(entry)``.
    """
    from . import layout

    from .errors import Corrupt

    path = path_for(snapshot, name)
    cached = read(path) if use_cache else None
    if cached is not None and cached[0] == snapshot.commit:
        return cached
    old_shards = cached[1] if cached else {}
    shards: dict[str, Any] = {}
    for shard, entry in snapshot.tree(layout.ITEMS).items():
        previous = old_shards.get(shard)
        if previous is not None and previous[0] == entry.oid:
            shards[shard] = previous
            continue
        before = previous[1] if previous else {}
        bad_before = previous[2] if previous else {}
        members: dict[str, Any] = {}
        bad: dict[str, tuple[str, str]] = {}
        for item_id, folder in snapshot.store.read_tree(entry.oid).items():
            known = before.get(item_id)
            if known is not None and folder_of(known) == folder.oid:
                members[item_id] = known
            elif bad_before.get(item_id, ("",))[0] == folder.oid:
                bad[item_id] = bad_before[item_id]  # still the same broken files: not read again
            else:
                try:
                    members[item_id] = summarise(item_id, folder.oid, known)
                except Corrupt as error:
                    bad[item_id] = (folder.oid, error.message)
        shards[shard] = (entry.oid, members, bad)
    if use_cache:
        write(path, snapshot.commit, shards)
    return snapshot.commit, shards


def problems(shards: dict[str, Any]) -> dict[str, str]:
    """Item id → why it was left out of the summary (its files do not parse), for every bad item."""
    found: dict[str, str] = {}
    for shard in shards.values():
        for item_id, (_folder, message) in shard[2].items():
            found[item_id] = message
    return found
