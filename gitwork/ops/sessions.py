"""Session ops on the state ref: session-start, session-commit, publish and session-drop (docs/sessions.md),
and the lifecycle of a multi-step session: session-create, -branch, -submit, -resume and -end.

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

from ..commands import SESSION_ID  # the one pattern (the session kind)
from ..engine import Context, op
from ..errors import Illegal, Invalid, Stale
from ..model import TRANSITIONS, Lease
from ..records.sessions import (
    MAX_MANIFEST_BYTES,
    branch_path,
    canonical,
    check_schema,
    load_json,
    manifest_path,
    open_sessions,
    parse_change,
    recorded_manifest,
    refuse_open_sessions,
    sha256,
)
from .common import end_lease

TYPE_CHECKING = False  # typing costs ~15 ms to import; annotations are strings anyway
if TYPE_CHECKING:
    from typing import Any

_COMMIT = re.compile(r"[0-9a-f]{40}([0-9a-f]{24})?\Z")


def _holder(ctx: Context, item_id: str) -> Lease:
    lease = ctx.require_holder(item_id)
    if lease is None:
        raise Stale(f"you hold no lease on {item_id} (you are {ctx.actor}): claim it first", item=item_id,
                    who=ctx.actor)
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


# --- multi-step sessions (docs/sessions.md, "Multi-step sessions") -----------------------------------
#
# Each lifecycle transition is one of these ops, so one commit: the command document carries the new
# manifest (and the request or response it records), the op checks that the transition is legal from
# the manifest the previous transition recorded, validates everything against the shipped schemas,
# and writes the manifest, the request or response and an event in the item's history. The procedure
# (``gitwork/sessions/steps.py``) mirrors the recorded manifest into the session folder afterwards.

_ENDED = ("done", "stopped")


def _step_start(ctx: Context, *, create: bool = False) -> tuple[str, Lease, dict[str, Any] | None, dict[str, Any]]:
    """Common checks: the holder's lease, the session id, the recorded and the new manifest."""
    item_id = ctx.target()
    lease = _holder(ctx, item_id)
    session = _session(ctx)
    previous = recorded_manifest(ctx, session)
    if create and previous is not None:
        raise Illegal(f"session {session} already exists on the record", session=session, taken=True)
    if not create and previous is None:
        raise Invalid(f"no session {session} on the record")
    new = check_schema("state", load_json(ctx.cmd["manifest"], "the new state.json", MAX_MANIFEST_BYTES),
                       "the new state.json")
    if new["id"] != session or new["item"] != item_id:
        raise Invalid(f"the manifest names session {new['id']} of {new['item']}, not {session} of {item_id}")
    if previous is not None:
        if previous["status"] in _ENDED:
            raise Illegal(f"session {session} is {previous['status']}: it takes no more transitions", session=session)
        for key, digest in previous["requests"].items():
            if new["requests"].get(key) != digest:
                raise Illegal(f"the request of {key} was recorded and may not change", session=session, branch=key)
        if new["chain"][: len(previous["chain"])] != previous["chain"]:
            raise Illegal("a session's chain only grows", session=session)
        for field in ("id", "project", "item", "holder", "chainName", "plan", "startedAt"):
            if new[field] != previous[field]:
                raise Illegal(f"a session's {field} never changes", session=session)
    return item_id, lease, previous, new


def _changed_branches(previous: dict[str, Any], new: dict[str, Any], allowed: set[str]) -> None:
    """Only the branches this transition is about may change status or response."""
    for key in set(previous["branches"]) | set(new["branches"]):
        if key in allowed:
            continue
        if previous["branches"].get(key) != new["branches"].get(key) or \
                previous["responses"].get(key) != new["responses"].get(key):
            raise Illegal(f"this transition may not change branch {key}", branch=key)


def _save_manifest(ctx: Context, item_id: str, new: dict[str, Any], kind: str, key: str | None = None,
                   **data: Any) -> None:
    session = new["id"]
    ctx.outcome.changes[manifest_path(session)] = canonical(new)
    ctx.event(item_id, kind, session=session, branch=key, status=new["status"], **data)
    ctx.outcome.result = {"item": item_id, "session": session, "branch": key, "status": new["status"],
                          "manifest": new}


@op("session-create", "record a multi-step session's manifest before its first operator starts", internal=True,
    item="item!", session="short!", chain="short!", manifest="text!")
def session_create(ctx: Context) -> None:
    item_id, lease, _previous, new = _step_start(ctx, create=True)
    if new["status"] != "running" or new["chain"] or new["requests"] or new["branches"] or new["current"] != 0:
        raise Invalid("a new session is running and has no branches yet")
    if new["chainName"] != ctx.cmd["chain"]:
        raise Invalid(f"the manifest is for chain {new['chainName']}, not {ctx.cmd['chain']}")
    if new["leases"].get(ctx.actor, {}).get("fence") != lease.fence:
        raise Invalid("the manifest must name the lease its holder acts under")
    _save_manifest(ctx, item_id, new, "session-create", chain=ctx.cmd["chain"], fence=lease.fence)
    ctx.say(f"session-create {new['id']} on {item_id} ({ctx.cmd['chain']}) by {ctx.actor}", item_id,
            fence=lease.fence, session=new["id"])


@op("session-branch", "record a session branch with its request, hashed into the manifest", internal=True,
    item="item!", session="short!", key="short!", manifest="text!", request="text!")
def session_branch(ctx: Context) -> None:
    item_id, lease, previous, new = _step_start(ctx)
    assert previous is not None
    key = ctx.cmd["key"]
    exchange = key.count("/") == 2  # a nested exchange may open while another branch blocks the session
    if previous["status"] != "running" and not (exchange and previous["status"] == "blocked"):
        raise Illegal(f"session {new['id']} is {previous['status']}: resume it first", session=new["id"])
    if key in previous["requests"]:
        raise Illegal(f"branch {key} already exists", branch=key)
    data = ctx.cmd["request"].encode("utf-8")
    request = check_schema("request", load_json(data, f"the request of {key}"), f"the request of {key}")
    if request["branch"] != key or request["session"] != new["id"] or request["item"] != item_id:
        raise Invalid(f"the request names {request['branch']} of {request['session']}, not {key} of {new['id']}")
    if new["requests"].get(key) != sha256(data):
        raise Invalid(f"the manifest's hash of {key}'s request does not match the request")
    if new["steps"].get(key) != request["operator"] or new["branches"].get(key, {}).get("status") != "open":
        raise Invalid(f"the manifest must map {key} to its operator {request['operator']}, open")
    if new["status"] != previous["status"] or new["resumes"] != previous["resumes"]:
        raise Invalid("a new branch changes neither the session's status nor its resumes")
    resume = request.get("resume")
    if resume is not None and previous["steps"].get(resume) != request["operator"]:
        raise Invalid(f"resume names {resume}, which the manifest records for "
                      f"{previous['steps'].get(resume) or 'no operator'}, not {request['operator']}", branch=key)
    _changed_branches(previous, new, {key})
    ctx.outcome.changes[branch_path(new["id"], key, "request", "request.json")] = data
    _save_manifest(ctx, item_id, new, "session-branch", key, operator=request["operator"], request=sha256(data))
    ctx.say(f"session-branch {new['id']} {key} for {request['operator']}", item_id, fence=lease.fence,
            session=new["id"])


@op("session-submit", "record a branch's response after both gates passed", internal=True,
    item="item!", session="short!", key="short!", manifest="text!", response="text!", files="texts")
def session_submit(ctx: Context) -> None:
    item_id, lease, previous, new = _step_start(ctx)
    assert previous is not None
    key = ctx.cmd["key"]
    branch = previous["branches"].get(key)
    if branch is None:
        raise Invalid(f"no branch {key} in session {new['id']}")
    if branch["status"] != "open":
        raise Illegal(f"branch {key} is {branch['status']}, not open: it takes no response now", branch=key)
    data = ctx.cmd["response"].encode("utf-8")
    response = check_schema("response", load_json(data, f"the response of {key}"), f"the response of {key}")
    if key.count("/") == 2 and response["status"] == "waiting":
        raise Invalid(f"{key} is a nested exchange: it answers done or blocked, it does not wait again")
    if new["branches"].get(key, {}).get("status") != response["status"]:
        raise Invalid(f"the manifest must mark {key} {response['status']}")
    if new["resumes"] != previous["resumes"] or new["chain"] != previous["chain"]:
        raise Invalid("a response changes neither the resumes nor the chain")
    if new["responses"].get(key) != sha256(data):
        raise Invalid(f"the manifest's hash of {key}'s response does not match the response")
    allowed = {key}
    parent = key.rpartition("/")[0] if key.count("/") == 2 else None
    if response["status"] == "blocked":
        if new["status"] != "blocked":
            raise Invalid("a blocked response blocks the session")
        if parent:
            allowed.add(parent)  # an exchange that blocks blocks the branch that waits on it
            if new["branches"].get(parent, {}).get("status") != "blocked":
                raise Invalid(f"a blocked exchange blocks {parent}")
    elif new["status"] != previous["status"]:
        raise Invalid("only a blocked response changes the session's status")
    _changed_branches(previous, new, allowed)
    ctx.outcome.changes[branch_path(new["id"], key, "response", "response.json")] = data
    listing = "".join(f"{line}\n" for line in ctx.cmd.get("files") or [])
    ctx.outcome.changes[branch_path(new["id"], key, "response", "files.sha256")] = listing.encode("utf-8")
    _save_manifest(ctx, item_id, new, "session-submit", key, answer=response["status"], response=sha256(data))
    ctx.say(f"session-submit {new['id']} {key}: {response['status']}", item_id, fence=lease.fence, session=new["id"])


@op("session-resume", "record a blocked session re-entered, or a waiting branch resumed after its exchange",
    internal=True, item="item!", session="short!", key="short", reason="block|wait!", manifest="text!")
def session_resume(ctx: Context) -> None:
    item_id, lease, previous, new = _step_start(ctx)
    assert previous is not None
    added = new["resumes"][len(previous["resumes"]):]
    if previous.get("conflicts") and ctx.cmd["reason"] == "block":
        # blocked at publish (its conflicts resolved by a person): running again, nothing re-entered
        if added or previous["status"] != "blocked" or new["status"] != "running" or new.get("conflicts"):
            raise Invalid("resuming a session blocked at publish makes it running and clears its conflicts")
        _changed_branches(previous, new, set())
        _save_manifest(ctx, item_id, new, "session-resume", None, reason="block")
        ctx.say(f"session-resume {new['id']} (publish conflicts resolved)", item_id, fence=lease.fence,
                session=new["id"])
        return
    if new["resumes"][: len(previous["resumes"])] != previous["resumes"] or not added:
        raise Invalid("a resume appends to resumes and keeps the earlier ones")
    if any(entry["reason"] != ctx.cmd["reason"] for entry in added):
        raise Invalid(f"every added resume must say {ctx.cmd['reason']}")
    if ctx.cmd["reason"] == "block":
        if previous["status"] != "blocked" or new["status"] != "running":
            raise Illegal(f"session {new['id']} is {previous['status']}: only a blocked session is resumed",
                          session=new["id"])
        for entry in added:
            if previous["branches"].get(entry["from"], {}).get("status") != "blocked":
                raise Invalid(f"{entry['from']} is not blocked")
        _changed_branches(previous, new, set())
        key = None
    else:
        key = ctx.cmd.get("key")
        if not key or previous["branches"].get(key, {}).get("status") != "waiting":
            raise Illegal(f"branch {key} is not waiting", branch=key)
        if len(added) != 1 or added[0]["branch"] != key or not added[0]["from"].startswith(key + "/") or \
                previous["branches"].get(added[0]["from"], {}).get("status") != "done":
            raise Invalid(f"{key} resumes after its nested exchange is done")
        if new["branches"][key]["status"] != "open" or new["status"] != previous["status"]:
            raise Invalid(f"a resumed {key} is open again")
        _changed_branches(previous, new, {key})
    _save_manifest(ctx, item_id, new, "session-resume", key, reason=ctx.cmd["reason"])
    ctx.say(f"session-resume {new['id']} ({ctx.cmd['reason']})" + (f" {key}" if key else ""), item_id,
            fence=lease.fence, session=new["id"])


@op("session-end", "record a multi-step session done (routed or published), stopped, or blocked because its "
    "publish conflicts", internal=True, item="item!", session="short!", to="done|stopped|blocked!", route="user|external|publish", manifest="text!",
    reason="short")
def session_end(ctx: Context) -> None:
    item_id, lease, previous, new = _step_start(ctx)
    assert previous is not None
    to = ctx.cmd["to"]
    if to == "blocked":  # gw session done found a conflict: nothing landed, the session waits for a person
        _changed_branches(previous, new, set())
        if previous["status"] != "running" or new["status"] != "blocked" or not new.get("conflicts") \
                or ctx.cmd.get("route") != "publish" or new.get("stoppedAt"):
            raise Invalid("a session blocked at publish is a running one, now blocked, naming its conflicts")
        _save_manifest(ctx, item_id, new, "session-end", to=to, route="publish", reason=ctx.cmd.get("reason"))
        ctx.say(f"session-end {new['id']}: blocked at publish ({', '.join(new['conflicts'][:5])})", item_id,
                fence=lease.fence, session=new["id"])
        return
    if new["status"] != to or not new.get("stoppedAt"):
        raise Invalid(f"the final manifest says {to} and when")
    _changed_branches(previous, new, set())
    if to == "done":
        if previous["status"] != "running":
            raise Illegal(f"session {new['id']} is {previous['status']}: resume it before it is done",
                          session=new["id"])
        unfinished = [k for k, b in previous["branches"].items() if b["status"] in ("open", "waiting")]
        last = [b for b in previous["branches"].values() if b["stage"] == previous["plan"][-1]]
        if unfinished or not last or any(b["status"] != "done" for k, b in previous["branches"].items()
                                         if k.startswith(f"step-{previous['current']}/")):
            raise Illegal(f"session {new['id']} has not finished its chain"
                          + (f" ({', '.join(sorted(unfinished))} still open)" if unfinished else ""),
                          session=new["id"])
        if new.get("route") != ctx.cmd.get("route"):
            raise Invalid("the final manifest names the route")
    _save_manifest(ctx, item_id, new, "session-end", to=to, route=ctx.cmd.get("route"), reason=ctx.cmd.get("reason"))
    ctx.say(f"session-end {new['id']}: {to}" + (f" ({ctx.cmd['route']})" if ctx.cmd.get("route") else ""), item_id,
            fence=lease.fence, session=new["id"])
