"""How a session ends: ``done`` on every route (publishing all or nothing on ``publish``) and ``stop``;
its operators stopped, its source sessions ended, its lease released or the item done."""

from __future__ import annotations

import copy
import os
import shutil

from .. import clock
from ..errors import Illegal, Invalid, NonFastForward, NotFound
from ..store import crash_point
from . import Session
from . import drop as drop_source
from .manifest import Run, _open_run, _ordered, finished

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

    from ..workplane import Workplane

def stop_operators(wp: Workplane, session: str, reason: str) -> list[str]:
    """Stop every live execution of the session's branches on this host (a session stopped, or done):
    its operators must not go on writing into a session that has ended. The ids stopped."""
    from ..launch.run import host, runs
    from ..launch.run import stop as stop_execution
    from ..records.executions import LIVE

    stopped = []
    for row in runs(wp):
        if row.get("session") == session and row["state"] in LIVE and row.get("host") == host():
            stop_execution(wp, row["execution"], reason=reason)
            stopped.append(row["execution"])
    return stopped


def _lease_held(wp: Workplane, item_id: str) -> Any:
    lease = wp.lease(item_id)
    if lease is not None and lease.is_active() and lease.holder == wp.settings.identity():
        return lease
    return None


def _sources(run: Run) -> list[Session]:
    """The commit-once sessions of the source-writing branches, in chain order."""
    found = []
    for key in _ordered(run.manifest["branches"]):
        state = run.manifest["branches"][key]
        if state.get("source"):
            try:
                found.append(Session.load(run.where.top, state["source"]))
            except NotFound:
                continue
    return found


def done(wp: Workplane, session: str, route: str = "publish", fence: int | None = None) -> dict[str, Any]:
    """``done`` on every route (docs/sessions.md, "The lifecycle"): ``publish`` lands every source step's
    commit (all or none); ``user`` or ``external`` publishes nothing and drops the unpublished source
    sessions. Then, on every route, the manifest is recorded as the audit record, the item marked done
    (its lease released), the folder and the session branches deleted: only published commits and the
    audit record survive. Run again after a crash it finishes the rest."""
    if route not in ("user", "external", "publish"):
        raise Invalid(f"route must be user, external or publish (got {route[:40]!r})")
    run = _open_run(wp, session, fence)
    manifest = run.manifest
    if manifest["status"] == "done":
        return _finish(run)
    if manifest["status"] != "running" or not finished(manifest):
        raise Illegal(f"session {session} is {manifest['status']} and "
                      + ("has finished its chain" if finished(manifest) else "has not finished its chain")
                      + ": it cannot be done yet", session=session)
    item = wp.item(manifest["item"])
    unchecked = [n for n, c in enumerate(item.criteria, 1) if not c.get("checked")]
    if unchecked:  # every route marks the item done
        raise Illegal(f"{item.id} has unchecked criteria {unchecked}: check them before the session is done")
    if route == "publish":
        from .land import land

        landed = land(wp, session, manifest["item"], [r for r in _sources(run) if r.get("state") == "committed"])
        if landed["conflicts"]:
            _block_on_conflicts(run, landed)
    new = copy.deepcopy(manifest)
    new.update(status="done", route=route, stoppedAt=clock.format_instant(wp.now()))
    for lease in new["leases"].values():
        lease["released"] = True
    run.record("session-end", new, to="done", route=route)
    return _finish(run)


def _block_on_conflicts(run: Run, landed: dict[str, Any]) -> None:
    """Nothing landed: the session is ``blocked`` with the conflicting paths named (``gw step resume``
    takes it up again once they are resolved on the target), then exit 13."""
    conflicts = landed["conflicts"]
    new = copy.deepcopy(run.manifest)
    new.update(status="blocked", conflicts=conflicts,
               reason=f"publishing conflicts with {landed['target'][:12]} in {', '.join(conflicts)}"[:1024])
    run.record("session-end", new, to="blocked", route="publish", reason=new["reason"])
    raise NonFastForward(f"session {run.manifest['id']} was not published: its source conflicts with "
                         f"{landed['target'][:12]} in {', '.join(conflicts)}. Nothing landed; the session is "
                         "blocked. Resolve it on the target, then gw step resume and gw session done again.",
                         session=run.manifest["id"], conflicts=conflicts, target=landed["target"])


def _end_sources(run: Run) -> None:
    """A session that ended leaves no commit-once session open: those without a commit are dropped, and so
    are committed ones a done session did not publish (a person's route): only published commits survive."""
    manifest = run.manifest
    unpublished = ("started", "committed") if manifest["status"] == "done" else ("started",)
    for record in _sources(run):
        if record.get("state") in unpublished:
            drop_source(run.wp, record.id, reason=f"session {run.manifest['id']} ended")
        elif record.get("state") == "published":
            from . import git, is_published

            if os.path.isdir(record.folder):
                git("worktree", "remove", "--force", record.source, cwd=run.where.top, check=False)
                shutil.rmtree(record.folder, ignore_errors=True)
            # Its commit is on the target now: the session branch only pointed at it. Deleted only while it
            # still points there and that commit is reachable from a branch that is not a session branch.
            if record.get("commit") and is_published(record["commit"], run.where.top):
                git("update-ref", "-d", record.ref, record["commit"], cwd=run.where.top, check=False)


def _finish(run: Run) -> dict[str, Any]:
    manifest = run.manifest
    if manifest["status"] == "stopped":  # before the lease goes: its operators stop with the session
        stop_operators(run.wp, manifest["id"], f"session {manifest['id']} stopped")
    _end_sources(run)
    lease = _lease_held(run.wp, manifest["item"])
    if lease is not None:
        if manifest["status"] == "done":  # every route: the session finished its chain, the item is done
            run.wp.do("done", item=manifest["item"], fence=lease.fence,
                      reason=f"session {manifest['id']} done ({manifest.get('route')})")
        else:
            run.wp.do("release", item=manifest["item"], fence=lease.fence)
    crash_point("session-end-released")
    if manifest["status"] == "done":  # the spec: release the lease, delete the folder (the audit is on the ref)
        shutil.rmtree(run.where.folder, ignore_errors=True)
    return run.result()


def stop(wp: Workplane, session: str, reason: str | None = None, fence: int | None = None) -> dict[str, Any]:
    """``stop``: the session ends without finishing (recorded, lease released, folder kept for a person)."""
    run = _open_run(wp, session, fence)
    if run.manifest["status"] == "stopped":
        return _finish(run)
    if run.manifest["status"] == "done":
        raise Illegal(f"session {session} is done already", session=session)
    new = copy.deepcopy(run.manifest)
    new.update(status="stopped", stoppedAt=clock.format_instant(wp.now()), reason=reason)
    for lease in new["leases"].values():
        lease["released"] = True
    run.record("session-end", new, to="stopped", reason=reason)
    return _finish(run)


