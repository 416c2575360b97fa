"""On-disk caches of data derived from one state commit (the summary index, the threads index).

Each cache is a marshal file ``<git common dir>/gitwork/<ref>.<name>`` holding ``(commit, shards)``,
where ``shards`` maps a shard folder name to ``(shard tree id, {item id: summary})`` so a later commit
is brought up to date by re-reading only the shards whose tree id changed. A cache is derived data:
unreadable or missing means rebuild, unwritable means a slower next command, never an error.
"""

from __future__ import annotations

import marshal
import os
import sys

from .store import Snapshot

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

PY = f"py{sys.version_info[0]}{sys.version_info[1]}"  # marshal's format may change between versions


def path_for(snapshot: Snapshot, name: str) -> str:
    ref = snapshot.store.ref.replace("/", "_")
    return os.path.join(snapshot.store.repo.gitwork_dir(), f"{ref}.{name}-{PY}.marshal")


def read(path: str) -> tuple[str | None, dict[str, Any]] | None:
    try:
        with open(path, "rb") as handle:
            commit, shards = marshal.load(handle)
        return commit, shards
    except (OSError, EOFError, ValueError, TypeError):
        return None


def write(path: str, commit: str | None, shards: dict[str, Any]) -> None:
    try:
        tmp = f"{path}.{os.getpid()}.{os.urandom(4).hex()}.tmp"
        with open(tmp, "wb") as handle:
            marshal.dump((commit, shards), handle)
        os.replace(tmp, path)  # atomic: concurrent readers see the old file or the new one
    except OSError:
        pass
