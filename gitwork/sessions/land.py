"""``gw session done`` (route ``publish``): every source branch of a multi-step session lands, or none.

1. The combined result is prepared without touching any worktree: the target's tip with each
   committed source commit on it, in chain order, by fast-forwards and clean merges
   (:func:`gitwork.sessions.combine.combine`, ``git merge-tree --write-tree``). Gates run on it in a
   scratch worktree when a merge was made (as ``gw publish`` does).
2. It lands with ONE compare-and-swap ref update of the target (``git update-ref REF NEW OLD``, or
   ``git merge --ff-only`` in the clean worktree that has the target checked out): all the branches
   or none. A target that moved meanwhile is read again and the result prepared again.
3. Then each commit-once session's ``publish`` is recorded (keep-open: the session's own end
   releases the lease). Killed between 2 and 3, the same command finds the commits already in the
   target, lands nothing more and records what is missing.

A conflict lands nothing and returns the conflicting paths: the caller blocks the session.
"""

from __future__ import annotations

from .. import clock
from ..errors import Invalid, NonFastForward
from ..store import crash_point
from . import Session, resolve_commit
from .combine import combine

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

    from ..workplane import Workplane


def land(wp: Workplane, session: str, item: str, records: list[Session]) -> dict[str, Any]:
    """Land ``records`` (committed commit-once sessions, in chain order) together; ``{"conflicts": [...]}``
    when they cannot be, with nothing changed."""
    from ..publish import MAX_ROUNDS, _move_local, _precheck, _refuse_dirty_checkout, _run_gates

    if not records:
        return {"conflicts": [], "commit": None, "mode": None}
    top = records[0].top
    into = next((r.get("into") for r in records if r.get("into")), None)
    if not into:
        raise Invalid(f"session {session}'s source steps started from a detached head: no branch to publish into")
    ref = f"refs/heads/{into}"
    first = records[0]
    _precheck(wp, {"op": "publish", "item": item, "session": first.id, "source": first["commit"],
                   "commit": first["commit"], "into": into, "mode": "fast-forward", "fence": first["fence"],
                   "keep_open": True})
    trailers = f"Work-Item: {item}\nFence: {first['fence']}\nSession: {session}\n"
    for _round in range(MAX_ROUNDS):
        target = resolve_commit(ref, top)
        _refuse_dirty_checkout(top, ref, into)  # before any work
        made = combine(top, target, [r["commit"] for r in records], actor=wp.settings.identity(),
                       trailers=trailers, title=f"Merge session {session} into {into}")
        if made["conflicts"]:
            return {"conflicts": made["conflicts"], "commit": None, "mode": None, "target": target,
                    "with": made["with"]}
        new = made["commit"]
        gates = _run_gates(records[-1], new, tuple(wp.settings.gates), into) if made["merged"] else []
        if new == target:
            break  # already landed (a re-run after a kill): only the records are missing
        moved, _worktree = _move_local(top, ref, into, new, target)
        if moved:
            break
    else:
        raise NonFastForward(f"{into} kept moving while publishing session {session}; try again")
    crash_point("session-publish-landed")  # the ref moved, no record yet: a re-run records, lands nothing
    mode = "merge" if made["merged"] else "fast-forward"
    for record in records:
        record.doc.update(state="published", published={
            "into": into, "remote": None, "mode": mode, "commit": new, "previous": target,
            "at": clock.format_instant(wp.now())})
        record.save()
        applied = wp.record("publish", item=item, session=record.id, source=record["commit"], commit=new,
                            previous=target, into=into, mode=mode, fence=record["fence"], keep_open=True)
        record.doc["published"]["recorded"] = applied.commit
        record.save()
        crash_point("session-publish-recorded")
    return {"conflicts": [], "commit": new, "mode": mode, "previous": target, "into": into, "gates": gates}
