"""Where launch data lives on this machine (below the backends, which import nothing else here)."""

from __future__ import annotations

import os

TYPE_CHECKING = False
if TYPE_CHECKING:
    from ..store import Repository


def executions_dir(repo: Repository) -> str:
    """Each execution's folder: ``<git common dir>/gitwork/executions/<id>/`` (logs, exit code, stdin)."""
    return os.path.join(repo.common_dir, "gitwork", "executions")


CLONE_ID = "clone-id"


def clone_id(repo: Repository) -> str:
    """This clone's identity: ``k-`` and 16 random hex digits, made once and kept in
    ``<git common dir>/gitwork/clone-id`` (so every worktree of a clone shares it, and a copy of the
    working tree alone does not carry it). Two clones on one host differ by it: an execution is judged,
    and a coordinator lease held, per (host, clone). Made with a hard link, so two first callers agree
    on one id."""
    path = os.path.join(repo.common_dir, "gitwork", CLONE_ID)
    try:
        with open(path) as read:
            found = read.read().strip()
        if found:
            return found
    except FileNotFoundError:
        pass
    os.makedirs(os.path.dirname(path), exist_ok=True)
    from ..fsutil import write_new

    write_new(path, "k-" + os.urandom(8).hex() + "\n")  # if another process made it first, its id is the one
    with open(path) as read:
        return read.read().strip()
