"""Conflict prediction (issue 29, point 2): which live work would collide, decided before anyone merges.

Two sources, both read-only (no worktree, no index, no ref touched):

- **path leases**: a candidate item's declared globs against the globs of other holders' live leases
  (``pathleases.holders``; cheap: one state file and the leases it names);
- **live session branches** (``refs/heads/session/*`` whose ``Work-Item:`` lease is live): the files a
  session's one commit changes (``git diff-tree``) against a candidate's globs, and, pair by pair,
  ``git merge-tree --write-tree`` of two sessions' tips (exit 1: they conflict; the conflicted files listed).

A procedure below the faces: ``gw conflicts``, ``gw ready --explain`` and ``claim --next`` (which passes
the predicted items as ``last`` to the claim op, so the engine's choice stays a function of the document).
"""

from __future__ import annotations

from . import gitcmd
from .paths import matches

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

    from .engine import View
    from .workplane import Workplane

SESSION_REFS = "refs/heads/session/"


class Session:
    """One live session branch: its ref, tip, item, holder and the files its commit changes."""

    __slots__ = ("ref", "tip", "item", "holder", "files")

    def __init__(self, ref: str, tip: str, item: str, holder: str, files: list[str]) -> None:
        self.ref, self.tip, self.item, self.holder, self.files = ref, tip, item, holder, files

    def to_json(self) -> dict[str, Any]:
        return {"branch": self.ref.removeprefix("refs/heads/"), "item": self.item, "holder": self.holder}


def _any_session_ref(common_dir: str) -> bool:
    """A session branch may exist: a loose one under ``refs/heads/session/`` or a packed one (read as files;
    a reftable or anything unusual answers yes, and git is asked)."""
    import os

    if os.path.isdir(os.path.join(common_dir, "refs", "heads", "session")):
        return True
    try:
        with open(os.path.join(common_dir, "packed-refs"), "rb") as packed:
            return b" refs/heads/session/" in packed.read()
    except FileNotFoundError:
        return os.path.exists(os.path.join(common_dir, "reftable"))
    except OSError:
        return True


def live_sessions(wp: Workplane, view: View) -> list[Session]:
    """Session branches whose ``Work-Item:`` lease is live (anyone's view: expiry plus the margin)."""
    if not _any_session_ref(wp.repo.common_dir):
        return []  # the common case: claim --next pays no git process for the prediction
    cwd = wp.repo.toplevel or wp.repo.git_dir
    done = gitcmd.run(["for-each-ref", "--format=%(refname)%00%(objectname)%00%(trailers:key=Work-Item,valueonly,"
                       "separator=%x1f)", SESSION_REFS], cwd=cwd, check=False)
    from . import ids
    from .errors import GwError

    live: list[tuple[str, str, str, str]] = []
    for line in done.out.splitlines():
        parts = line.split("\0")
        if len(parts) != 3 or not parts[2].strip():
            continue
        ref, tip, items = parts
        item = items.split("\x1f")[0].strip()
        if not ids.is_full(item):
            continue
        try:
            lease = view.lease(item)
        except GwError:  # a lease the state cannot read: not live work
            continue
        if lease is not None and not lease.takeable(view.now, view.settings.clock_margin):
            live.append((ref, tip, item, lease.holder))
    files = _changed_files(cwd, [tip for _, tip, _, _ in live])
    return [Session(ref, tip, item, holder, files.get(tip, [])) for ref, tip, item, holder in live]


def _changed_files(cwd: str, tips: list[str]) -> dict[str, list[str]]:
    """The files each commit changes against its first parent: one ``git log --no-walk`` for all of them."""
    if not tips:
        return {}
    done = gitcmd.run(["-c", "core.quotePath=false", "log", "--no-walk=unsorted", "--no-renames", "--name-only", "-z",
                       "--format=%x1e%H%x1f", *tips], cwd=cwd, check=False)
    out: dict[str, list[str]] = {}
    for record in done.out.split("\x1e")[1:]:
        commit, _, names = record.partition("\x1f")
        out[commit.strip()] = [n.strip("\n") for n in names.split("\0") if n.strip("\n")]
    return out


def merge_conflicts(wp: Workplane, a: str, b: str) -> list[str] | None:
    """The files ``git merge-tree --write-tree`` finds conflicting between two tips (``None``: merges cleanly)."""
    cwd = wp.repo.toplevel or wp.repo.git_dir
    done = gitcmd.run(["merge-tree", "--write-tree", "--name-only", "--no-messages", a, b], cwd=cwd, check=False)
    if done.returncode == 0:
        return None
    if done.returncode != 1:
        return [f"(git merge-tree failed: {done.err[:120]})"]
    return sorted(set(done.out.splitlines()[1:])) or ["(conflict)"]


def predict(wp: Workplane, view: View, items: list[str], sessions: list[Session] | None = None) -> dict[str, list[dict[str, Any]]]:
    """For each of ``items`` with declared paths: what it would conflict with (empty lists left out)."""
    from .pathleases import holders

    if sessions is None:
        sessions = live_sessions(wp, view)
    out: dict[str, list[dict[str, Any]]] = {}
    for item_id in items:
        globs = view.item(item_id).paths or []
        if not globs:
            continue
        reasons: list[dict[str, Any]] = [{"kind": "paths", **c} for c in holders(view, item_id, globs, view.actor)[0]]
        for session in sessions:
            if session.item == item_id or session.holder == view.actor:
                continue
            touched = [f for f in session.files if any(matches(g, f) for g in globs)]
            if touched:
                reasons.append({"kind": "session", "branch": session.ref.removeprefix("refs/heads/"),
                                "item": session.item, "holder": session.holder, "files": touched[:10]})
        if reasons:
            out[item_id] = reasons
    return out


def rank_last(wp: Workplane, scan: int = 64) -> list[str]:
    """The best ``scan`` ready items that would touch files a live session branch (someone else's) changed:
    what ``claim --next`` ranks last. No live session branch: no git run beyond one ``for-each-ref``."""
    view = wp.context()
    sessions = live_sessions(wp, view)
    if not sessions:
        return []
    ready = [str(row[0]) for row in wp.ready()[:scan]]
    found = predict(wp, view, ready, sessions)
    return sorted(item for item, reasons in found.items() if any(r["kind"] == "session" for r in reasons))


def live_pairs(wp: Workplane) -> dict[str, Any]:
    """``gw conflicts``: the live pairs that would conflict if both published now."""
    from .pathleases import index
    from .paths import overlaps

    view = wp.context()
    leases = []
    for item_id, globs in sorted(index(view).items()):
        lease = view.lease(item_id)
        if lease is not None and not lease.takeable(view.now, view.settings.clock_margin):
            leases.append((item_id, lease.holder, globs))
    pairs: list[dict[str, Any]] = []
    for n, (a, holder_a, globs_a) in enumerate(leases):
        for b, holder_b, globs_b in leases[n + 1:]:
            if holder_a != holder_b and (found := overlaps(globs_a, globs_b)):
                pairs.append({"kind": "paths", "a": {"item": a, "holder": holder_a}, "b": {"item": b, "holder": holder_b},
                              "overlap": [list(p) for p in found]})
    sessions = live_sessions(wp, view)
    for n, one in enumerate(sessions):
        for other in sessions[n + 1:]:
            if one.item == other.item:
                continue
            files = merge_conflicts(wp, one.tip, other.tip)
            if files is not None:
                pairs.append({"kind": "session", "a": one.to_json(), "b": other.to_json(), "files": files})
    return {"ok": True, "pairs": pairs, "sessions": len(sessions), "path_leases": len(leases)}


def describe(reason: dict[str, Any]) -> str:
    """One predicted conflict in words (``gw ready --explain``)."""
    if reason["kind"] == "paths":
        pairs = ", ".join(f"{a} ~ {b}" for a, b in reason["overlap"][:3])
        return f"paths overlap {reason['item']} held by {reason['holder']} until {reason['expires_at']} ({pairs})"
    return f"would touch {', '.join(reason['files'][:3])} changed by live session {reason['branch']} ({reason['holder']})"
