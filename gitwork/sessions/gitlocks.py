"""The locks a git killed outright left on what a session step writes next, removed by the one
stale-lock rule (``stalelocks.py``) before the step writes (tests/test_attack10_kill.py)."""

from __future__ import annotations

import os

TYPE_CHECKING = False
if TYPE_CHECKING:
    from ..store import Repository


def sweep_git_locks(repo: Repository, top: str, source: str | None = None, ref: str | None = None) -> None:
    """Remove the locks a git killed outright (kill -9 of a ``gw session`` step with its process group)
    left on what a session step writes next, by the one stale-lock rule (``stalelocks.py``: older than
    ``STALE_AFTER`` and no git of the repository or working in its work trees runs), said on stderr: the
    session worktree's ``index.lock`` and ``HEAD.lock`` (``source``), the session branch's lock (``ref``)
    and ``packed-refs.lock`` (a deletion takes it). Left alone, each failed every later commit or drop
    of the session, or kept the branch, until a person removed it. Otherwise a few ``lstat`` calls."""
    from ..stalelocks import sweep_and_say

    common = os.path.realpath(repo.common_dir)
    names = ["packed-refs"]
    if ref is not None:
        names.append(ref)
    admin = admin_dir(source) if source is not None else None
    if admin is not None and admin.startswith(common + os.sep):
        inside = os.path.relpath(admin, common).replace(os.sep, "/")
        names += [f"{inside}/index", f"{inside}/HEAD"]
    sweep_and_say(common, names, under="", work_tree=top)


def admin_dir(source: str) -> str | None:
    """The git folder of a linked worktree (``.git/worktrees/<name>``), from its ``.git`` file."""
    try:
        with open(os.path.join(source, ".git"), encoding="utf-8") as read:
            text = read.read(4096).strip()
    except (OSError, UnicodeDecodeError):
        return None
    if not text.startswith("gitdir: "):
        return None
    return os.path.realpath(os.path.join(source, text[len("gitdir: "):]))
