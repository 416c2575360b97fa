"""The arbiter's side of the roles, now part of deriving the state (``gitwork/derive.py``).

The arbiter used to re-apply only the ops declared ``roles=True`` and look for a ``Forbidden``. It now
re-applies every pushed command with its own settings and requires the pushed commit to be exactly
the replay's (``derive.check_commits``): a role refusal is one of the refusals that check reports.
This module only keeps the old entry point.
"""

from __future__ import annotations


def check_commits(git_dir: str, ref: str, commits: list[tuple[str, str | None]]) -> list[str]:
    """Refusals for ``[(commit, parent)]`` about to land on ``ref`` of the repository at ``git_dir``
    (the parent is read from each commit; it is accepted for the old callers' sake)."""
    from .derive import check_commits as derive
    from .store import Repository, Store

    store = Store(Repository.discover(git_dir), ref)
    try:
        return derive(store, [commit for commit, _parent in commits])
    finally:
        store.close()
