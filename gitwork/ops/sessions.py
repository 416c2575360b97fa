"""Session ops on the state ref: session-start, session-commit and publish (see docs/sessions.md).

The git side (worktree, branch, commit, merge, push) is done by ``gitwork.sessions`` and
``gitwork.publish``; these ops are the fenced record of it. Each is a holder action: a session is
started, its one commit recorded and its publish recorded only under the fence of a live lease, and
the record goes into the item's own history (``events.log``) like every other event.
"""

from __future__ import annotations

import re

from ..engine import Context, op
from ..errors import Invalid, Stale
from ..model import Lease
from .leases import end_lease

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


@op("session-start", "record a session branch opened by the holder of an item",
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


@op("session-commit", "record a session's one commit: each file's blob before and after",
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


@op("publish", "record a session published into a branch, and release the lease",
    item="item!", session="short!", source="short!", commit="short!", previous="short", into="short!",
    remote="name", mode="fast-forward|merge!")
def publish(ctx: Context) -> None:
    item_id = ctx.target()
    lease = _holder(ctx, item_id)
    session = _session(ctx)
    for field in ("source", "commit", "previous"):
        _commit(ctx, field)
    where = ctx.cmd["into"] + (f" on {ctx.cmd['remote']}" if ctx.cmd.get("remote") else "")
    ctx.event(item_id, "publish", session=session, source=ctx.cmd["source"], commit=ctx.cmd["commit"],
              previous=ctx.cmd.get("previous"), into=ctx.cmd["into"], remote=ctx.cmd.get("remote"),
              mode=ctx.cmd["mode"], epoch=lease.epoch, fence=lease.fence)
    end_lease(ctx, lease, "released", reason="published")
    ctx.say(f"publish {session} into {where} by {ctx.actor} ({ctx.cmd['mode']} to {ctx.cmd['commit'][:12]}; "
            f"fence {lease.fence} released)", item_id, lease_epoch=lease.epoch, fence=lease.fence, session=session)
    ctx.outcome.result = {"item": item_id, "session": session, "commit": ctx.cmd["commit"], "into": ctx.cmd["into"],
                          "remote": ctx.cmd.get("remote"), "mode": ctx.cmd["mode"], "released": True,
                          "fence": lease.fence}
