"""Session ops on the state ref: session-start, session-commit, publish and session-drop (docs/sessions.md).

The git side (worktree, branch, commit, merge, push) is done by ``gitwork.sessions`` and
``gitwork.publish``; these ops are the fenced record of it. Each is a holder action: a session is
started, its one commit recorded and its publish recorded only under the fence of a live lease, and
the record goes into the item's own history (``events.log``) like every other event. A session is
*open* from its ``session-start`` until its ``publish`` or ``session-drop``; open sessions started
under the item's current lease are what ``done`` and ``publish`` look for (:func:`open_sessions`),
so that finishing an item never strands a session's commit silently.
"""

from __future__ import annotations

import re

from ..engine import Context, op
from ..errors import Illegal, Invalid, Stale
from ..model import TRANSITIONS, Lease
from .common import end_lease
from .session_records import open_sessions, refuse_open_sessions

TYPE_CHECKING = False  # typing costs ~15 ms to import; annotations are strings anyway
if TYPE_CHECKING:
    from typing import Any

SESSION_ID = re.compile(r"[0-9]{8}-[0-9]{6}-[a-z0-9][a-z0-9-]{0,120}\Z")
_COMMIT = re.compile(r"[0-9a-f]{40}([0-9a-f]{24})?\Z")
ABSENT = "-"  # a path that does not exist on that side of a change


def _holder(ctx: Context, item_id: str) -> Lease:
    lease = ctx.require_holder(item_id)
    if lease is None:
        raise Stale(f"you hold no lease on {item_id}: claim it first", item=item_id)
    return lease


def _session(ctx: Context) -> str:
    session = ctx.cmd["session"]
    if not SESSION_ID.match(session):
        raise Invalid(f"malformed session id {session!r}")
    return session


def _commit(ctx: Context, field: str) -> str | None:
    value = ctx.cmd.get(field)
    if value is not None and not _COMMIT.match(value):
        raise Invalid(f"{field} must be a full commit id (got {value!r})")
    return value


def parse_change(text: str) -> dict[str, Any]:
    """``"<before> <after> <path>"`` (``-`` for absent; like reference-transaction lines) → a record."""
    before, _, rest = text.partition(" ")
    after, _, path = rest.partition(" ")
    for blob in (before, after):
        if blob != ABSENT and not _COMMIT.match(blob):
            raise Invalid(f"bad change {text!r}: blob ids must be full hex ids or {ABSENT}")
    if not path or path.startswith("/") or ".." in path.split("/") or (before == after):
        raise Invalid(f"bad change {text!r}: expected '<before> <after> <relative path>' with a real change")
    return {"path": path, "before": None if before == ABSENT else before, "after": None if after == ABSENT else after}


def format_change(path: str, before: str | None, after: str | None) -> str:
    return f"{before or ABSENT} {after or ABSENT} {path}"


@op("session-start", "record a session branch opened by the holder of an item", internal=True,
    item="item!", session="short!", base="short!", branch="short!", into="short")
def session_start(ctx: Context) -> None:
    item_id = ctx.target()
    lease = _holder(ctx, item_id)
    session = _session(ctx)
    _commit(ctx, "base")
    if ctx.cmd["branch"] != f"session/{session}":
        raise Invalid(f"the branch of session {session} is session/{session}")
    ctx.event(item_id, "session-start", session=session, base=ctx.cmd["base"], branch=ctx.cmd["branch"],
              into=ctx.cmd.get("into"), epoch=lease.epoch, fence=lease.fence)
    ctx.say(f"session-start {session} on {item_id} by {ctx.actor} (fence {lease.fence})", item_id,
            lease_epoch=lease.epoch, fence=lease.fence, session=session)
    ctx.outcome.result = {"item": item_id, "session": session, "base": ctx.cmd["base"], "branch": ctx.cmd["branch"],
                          "into": ctx.cmd.get("into"), "epoch": lease.epoch, "fence": lease.fence}


@op("session-commit", "record a session's one commit: each file's blob before and after", internal=True,
    item="item!", session="short!", commit="short!", base="short!", files="texts!")
def session_commit(ctx: Context) -> None:
    item_id = ctx.target()
    lease = _holder(ctx, item_id)
    session = _session(ctx)
    _commit(ctx, "commit")
    _commit(ctx, "base")
    changes = [parse_change(text) for text in ctx.cmd["files"]]
    if not changes:
        raise Invalid("a session commit changes at least one file")
    ctx.event(item_id, "session-commit", session=session, commit=ctx.cmd["commit"], base=ctx.cmd["base"],
              files=changes, epoch=lease.epoch, fence=lease.fence)
    ctx.say(f"session-commit {session} on {item_id}: {ctx.cmd['commit'][:12]}, {len(changes)} file(s)", item_id,
            lease_epoch=lease.epoch, fence=lease.fence, session=session)
    ctx.outcome.result = {"item": item_id, "session": session, "commit": ctx.cmd["commit"], "files": changes,
                          "fence": lease.fence}


def _close_as_done(ctx: Context, item_id: str) -> None:
    """A closing publish marks the item ``done``, with the same criteria rule as ``gw done``."""
    item = ctx.item(item_id)
    reason = ctx.cmd.get("reason")
    open_criteria = [i + 1 for i, c in enumerate(item.criteria) if not c.get("checked")]
    if open_criteria and not ctx.cmd.get("force"):
        raise Illegal(f"{item_id} has unchecked criteria {open_criteria}: check them, publish with --force and a "
                      "--reason, or publish with --keep-open (the item stays yours and in progress)")
    if open_criteria and not reason:
        raise Invalid("--force needs a --reason")
    if "done" not in TRANSITIONS[item.status]:
        raise Illegal(f"{item.id} cannot go from {item.status} to done")
    item.status = "done"
    item.closed_reason = reason or f"published {ctx.cmd['session']}"
    ctx.save_item(item)
    ctx.event(item_id, "done", reason=item.closed_reason, session=ctx.cmd["session"],
              forced=bool(ctx.cmd.get("force")) or None)


@op("publish", "record a session published into a branch; marks the item done and releases the lease "
    "unless keep_open", internal=True, arbiter=True, item="item!", session="short!", source="short!", commit="short!",
    previous="short", into="short!", remote="name", mode="fast-forward|merge!", keep_open="bool", force="bool", reason="short")
def publish(ctx: Context) -> None:
    item_id = ctx.target()
    lease = _holder(ctx, item_id)
    session = _session(ctx)
    for field in ("source", "commit", "previous"):
        _commit(ctx, field)
    mine = [r for r in open_sessions(ctx, item_id, lease) if r["session"] == session]
    if not mine:
        raise Invalid(f"{session} is not an open session of {item_id} under its current lease (fence {lease.fence})")
    if mine[0]["by"] != ctx.actor:
        raise Stale(f"session {session} is {mine[0]['by']}'s, and you are {ctx.actor}: only its holder publishes it",
                    item=item_id, holder=mine[0]["by"])
    keep_open = bool(ctx.cmd.get("keep_open"))
    if not keep_open:
        refuse_open_sessions(ctx, item_id, lease, "publishing (which marks it done)", but=session)
    where = ctx.cmd["into"] + (f" on {ctx.cmd['remote']}" if ctx.cmd.get("remote") else "")
    ctx.event(item_id, "publish", session=session, source=ctx.cmd["source"], commit=ctx.cmd["commit"],
              previous=ctx.cmd.get("previous"), into=ctx.cmd["into"], remote=ctx.cmd.get("remote"),
              mode=ctx.cmd["mode"], epoch=lease.epoch, fence=lease.fence, keep_open=keep_open or None)
    if not keep_open:
        # Delivered work is done: it must never be offered by `ready` or claimed again (a merged PR
        # that says "Fixes #N" closes the issue). The status changes first, so ending the lease
        # below leaves it `done` rather than putting it back to `open`.
        _close_as_done(ctx, item_id)
        end_lease(ctx, lease, "released", reason="published")
    tail = "kept open" if keep_open else f"{item_id} done, fence {lease.fence} released"
    ctx.say(f"publish {session} into {where} by {ctx.actor} ({ctx.cmd['mode']} to {ctx.cmd['commit'][:12]}; "
            f"{tail})", item_id, lease_epoch=lease.epoch, fence=lease.fence, session=session)
    ctx.outcome.result = {"item": item_id, "session": session, "commit": ctx.cmd["commit"], "into": ctx.cmd["into"],
                          "remote": ctx.cmd.get("remote"), "mode": ctx.cmd["mode"], "released": not keep_open,
                          "status": ctx.item(item_id).status, "fence": lease.fence}


@op("session-drop", "record that a session was dropped: its commit (if any) will not be published",
    internal=True, item="item!", session="short!", keep_branch="bool", reason="short")
def session_drop(ctx: Context) -> None:
    """Only the identity that started the session may drop it, live lease or not: a session whose lease
    ended can no longer be published (its fence is dead), and this is how it is ended on the record."""
    item_id = ctx.target()
    session = _session(ctx)
    started = [e for e in ctx.records(item_id) if e.get("session") == session]
    if not any(e.get("type") == "session-start" for e in started):
        raise Invalid(f"{item_id} has no session {session}")
    if any(e.get("type") in ("publish", "session-drop") for e in started):
        ended = next(e["type"] for e in started if e.get("type") in ("publish", "session-drop"))
        raise Illegal(f"session {session} of {item_id} is already {'published' if ended == 'publish' else 'dropped'}")
    opener = next(e for e in started if e.get("type") == "session-start")
    if opener.get("by") != ctx.actor:
        raise Invalid(f"session {session} was started by {opener.get('by')}, not {ctx.actor}: only they may drop it")
    committed = next((e for e in started if e.get("type") == "session-commit"), None)
    lease = ctx.lease(item_id)
    live = bool(lease and lease.fence == opener.get("fence") and lease.epoch == opener.get("epoch")
                and lease.live_for_holder(ctx.now, ctx.settings.clock_margin))
    commit = committed.get("commit") if committed else None
    ctx.event(item_id, "session-drop", session=session, commit=commit,
              files=[c.get("path") for c in committed.get("files") or []] if committed else None,
              fence=opener.get("fence"), live=live, branch="kept" if ctx.cmd.get("keep_branch") else "deleted",
              reason=ctx.cmd.get("reason"))
    ctx.say(f"session-drop {session} on {item_id} by {ctx.actor}"
            + (f": commit {commit[:12]} will not be published" if commit else " (no commit)"), item_id,
            session=session)
    ctx.outcome.result = {"item": item_id, "session": session, "commit": commit, "live": live,
                          "branch": "kept" if ctx.cmd.get("keep_branch") else "deleted"}
