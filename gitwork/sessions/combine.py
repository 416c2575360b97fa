"""Combining a multi-step session's source commits without touching any worktree.

Two uses (docs/sessions.md, "Source-writing steps"):

- the **base** a later source step starts from: the frozen head with every earlier step's committed
  source on it (:func:`combine` over the earlier commits, in chain order);
- the **one result** ``gw session done`` lands: the target's tip with every source commit on it, made
  by fast-forwards and clean merges (``git merge-tree --write-tree``, no worktree, no index), then
  moved with ONE compare-and-swap ref update by the caller. A conflict makes nothing: the caller gets
  the conflicting paths and lands nothing.

A merge commit made here is a function of its inputs only (parents, tree, the acting identity, and the
merged commit's own committer date as its date), so a command killed half-way and run again makes the
very same commit, and a request that pins it is written with the very same bytes.
"""

from __future__ import annotations

from . import git, identity_env

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any


def is_ancestor(older: str, newer: str, cwd: str) -> bool:
    return git("merge-base", "--is-ancestor", older, newer, cwd=cwd, check=False).returncode == 0


def merge_tree(top: str, ours: str, theirs: str) -> tuple[str | None, list[str]]:
    """(tree, []) for a clean merge of ``theirs`` into ``ours``, or (None, conflicting paths)."""
    done = git("merge-tree", "--write-tree", "--name-only", "-z", "--no-messages", ours, theirs, cwd=top,
               check=False)
    parts = done.out.split("\0")
    if done.returncode == 1:
        return None, sorted({p.strip() for p in parts[1:] if p.strip()}) or ["(see git merge-tree)"]
    if done.returncode != 0:
        from ..errors import GitFailed

        raise GitFailed(f"git merge-tree failed: {done.err}", stderr=done.err)
    return parts[0].strip(), []


def combine(top: str, start: str, commits: list[str], *, actor: str, trailers: str, title: str
            ) -> dict[str, Any]:
    """``start`` with every commit of ``commits`` on it, in order: a commit already contained is skipped,
    one that descends from the result so far is fast-forwarded to, any other is merged (a merge commit,
    parents: the result so far, the commit). ``{"commit", "merged", "conflicts", "with"}``: on a conflict
    ``commit`` is the result before the commit that conflicts (``with``), and nothing was written."""
    current, merged = start, False
    # A commit a later one already holds (step 2's, that step 3 built on) is not merged again: the later
    # commit's own base merge is the one that counts, so a chain that built step on step fast-forwards.
    tips = [c for i, c in enumerate(commits) if not any(is_ancestor(c, later, top) for later in commits[i + 1:])]
    for commit in tips:
        if is_ancestor(commit, current, top):
            continue
        if is_ancestor(current, commit, top):
            current = commit
            continue
        tree, conflicts = merge_tree(top, current, commit)
        if tree is None:
            return {"commit": current, "merged": merged, "conflicts": conflicts, "with": commit}
        date = git("log", "-1", "--format=%ct", commit, cwd=top).out.strip()
        env = {**identity_env(top, actor), "GIT_AUTHOR_DATE": f"@{date} +0000", "GIT_COMMITTER_DATE": f"@{date} +0000"}
        message = f"{title} ({commit[:12]})\n\n{trailers}"
        current = git("commit-tree", tree, "-p", current, "-p", commit, "-F", "-", cwd=top, input=message.encode(),
                      env=env).out.strip()
        merged = True
    return {"commit": current, "merged": merged, "conflicts": [], "with": None}
