"""The publish queue's ops (docs/sessions.md, "The publish queue"): queue-add, queue-remove, and the
publisher's records queue-lease, queue-land and queue-return.

The queue is state (``records/queue.py``): an ordered list of sessions waiting to be landed on the code
remote's branch by the one publisher (``gw queue work``, ``pubqueue.py``). Every op here is decided by
the arbiter (``arbiter=True``) and, like every op, re-applied by its state hook (``derive.py``): a queue
entry written by hand, or a landing claimed under a publisher lease that was taken over, is refused at
the push whatever the client did.

- ``queue-add``: only the session's holder, under the live lease it started the session under, and only
  a session with its commit. The entry copies what the state says (commit, fence, epoch), never what
  the document says, so a queue entry cannot name a commit its session did not record.
- ``queue-remove``: the entry's holder, or an admin (with no admins configured, a person).
- ``queue-lease``: the publisher's fenced lease, one at a time across clones; each take is a new epoch,
  and ``queue-land``/``queue-return`` need the current one (a paused publisher whose lease was taken
  over is refused, exit 7).
- ``queue-land``: the head entry landed; recorded as the session's ``publish`` (so the session is no
  longer open), the item done and its lease released, as ``gw publish`` does (unless the holder has
  another open session under the lease: then the item stays in progress, nothing stranded).
- ``queue-return``: the head entry sent back to its holder, with a message in the item's thread quoting
  the failing gate's output (bounded); the item and its lease are not touched.
"""

from __future__ import annotations

import datetime as _dt
import re

from .. import codec
from ..clock import format_instant
from ..engine import Context, op
from ..errors import Held, Illegal, Invalid, NotFound, Stale
from ..model import TRANSITIONS
from ..records.queue import (
    PUBLISHER_PATH,
    SEQ_PATH,
    bounded,
    entries,
    entry_path,
    find_entry,
    load_publisher,
    next_seq,
    publisher_live,
)
from ..records.sessions import open_sessions
from ..roles import require_steerer
from .common import end_lease
from .conversation import post_message
from .sessions import SESSION_ID, _commit

TYPE_CHECKING = False  # typing costs ~15 ms to import; annotations are strings anyway
if TYPE_CHECKING:
    from typing import Any


_BRANCH = re.compile(r"[A-Za-z0-9_][A-Za-z0-9._/-]{0,199}\Z")


def _session(ctx: Context) -> str:
    session = ctx.cmd["session"]
    if not SESSION_ID.match(session):
        raise Invalid(f"malformed session id {session[:80]!r}")
    return session


def _queued(ctx: Context, session: str) -> dict[str, Any]:
    entry = find_entry(ctx, session)
    if entry is None:
        raise NotFound(f"session {session} is not in the publish queue (gw queue lists it)", session=session)
    return entry


@op("queue-add", "queue a committed session for the publisher to land (gw publish --queue)",
    who="only the session's holder, under the live lease it started the session under.",
    arbiter=True, mcp={"verb": "queue:enqueue", "fields": ("item", "session", "into")},
    item="item!", session="session!", into="short")
def queue_add(ctx: Context) -> None:
    item_id = ctx.target()
    session = _session(ctx)
    lease = ctx.require_holder(item_id)
    if lease is None:
        raise Stale(f"you hold no lease on {item_id} (you are {ctx.actor}): only the holder queues its session",
                    item=item_id, who=ctx.actor)
    mine = [r for r in open_sessions(ctx, item_id, lease) if r["session"] == session]
    if not mine:
        raise NotFound(f"{session} is not an open session of {item_id} under its current lease (fence {lease.fence})",
                       item=item_id, session=session)
    if mine[0]["by"] != ctx.actor:
        raise Stale(f"session {session} is {mine[0]['by']}'s, and you are {ctx.actor}: only its holder queues it",
                    item=item_id, holder=mine[0]["by"])
    if not mine[0]["commit"]:
        raise Invalid(f"session {session} has no commit yet: gw session commit --file PATH... -m MSG first",
                      session=session)
    if find_entry(ctx, session) is not None:
        raise Illegal(f"session {session} is already in the publish queue", session=session)
    others = [r["session"] for r in open_sessions(ctx, item_id, lease) if r["session"] != session]
    if others:
        raise Illegal(f"{item_id} has other open sessions under this lease ({', '.join(others)}): landing this one "
                      "marks the item done and would strand them; publish or drop them first", item=item_id)
    item = ctx.item(item_id)
    unchecked = [i + 1 for i, c in enumerate(item.criteria) if not c.get("checked")]
    if unchecked:
        raise Illegal(f"{item_id} has unchecked criteria {unchecked}: check them before queueing (landing marks it "
                      "done)", item=item_id)
    started = next(e for e in ctx.records(item_id) if e.get("type") == "session-start" and e.get("session") == session)
    into = ctx.cmd.get("into") or started.get("into") or "main"
    if into.startswith("refs/heads/"):
        into = into[len("refs/heads/"):]
    if not _BRANCH.match(into) or ".." in into or "//" in into or into.endswith((".lock", "/", ".")) \
            or into.startswith("session/"):
        # The publisher puts it in refspecs (fetch, push): only a plain branch name, never a session branch.
        raise Invalid(f"a session cannot be queued into {into[:80]!r}: a branch name (letters, digits, . _ - /), "
                      "not a session branch")
    ctx.cmd["into"] = into
    seq = next_seq(ctx)
    entry = {"seq": seq, "session": session, "item": item_id, "holder": ctx.actor, "fence": lease.fence,
             "epoch": lease.epoch, "commit": mine[0]["commit"], "into": into, "enqueued_at": ctx.when,
             "cmd": ctx.cmd["id"]}
    ctx.outcome.changes[entry_path(seq)] = codec.dump_yaml(entry)
    ctx.outcome.changes[SEQ_PATH] = codec.dump_yaml({"next": seq + 1})
    ctx.event(item_id, "queue-add", session=session, seq=seq, commit=entry["commit"], into=into,
              epoch=lease.epoch, fence=lease.fence)
    position = len(entries(ctx))
    ctx.say(f"queue-add {session} of {item_id} into {into} by {ctx.actor} (#{seq}, position {position})", item_id,
            lease_epoch=lease.epoch, fence=lease.fence, session=session)
    ctx.outcome.result = {**entry, "position": position}


@op("queue-remove", "take a session out of the publish queue",
    who="the queued session's holder; anyone else only as an admin (with no admins configured, a person).",
    arbiter=True, roles=True, session="session!", reason="short")
def queue_remove(ctx: Context) -> None:
    session = _session(ctx)
    entry = _queued(ctx, session)
    item_id = str(entry["item"])
    if entry.get("holder") != ctx.actor:
        require_steerer(ctx, item_id, f"remove {entry.get('holder')}'s session {session} from the publish queue")
    ctx.outcome.changes[entry_path(int(entry["seq"]))] = None
    ctx.event(item_id, "queue-remove", session=session, seq=entry["seq"], reason=ctx.cmd.get("reason"))
    ctx.say(f"queue-remove {session} (#{entry['seq']}) by {ctx.actor}", item_id, session=session)
    ctx.outcome.result = {"session": session, "item": item_id, "seq": entry["seq"], "removed": True}


@op("queue-lease", "take, renew or release the publisher's lease: one gw queue work at a time",
    internal=True, arbiter=True, action="take|renew|release!", holder="mapping!", ttl="duration!", epoch="int")
def queue_lease(ctx: Context) -> None:
    """``take``: refused (75) while another live publisher holds it; each take is a new epoch. ``renew``
    and ``release`` need the caller's epoch: a publisher whose lease was taken over learns it here (7)."""
    action, holder = ctx.cmd["action"], ctx.cmd["holder"]
    if ctx.cmd["ttl"] < 10:
        raise Invalid(f"a publisher lease of {ctx.cmd['ttl']}s would end before its first landing: 10s at least")
    record = load_publisher(ctx)
    if action == "take":
        if publisher_live(record, ctx.now) and record is not None:
            held = record.get("holder") or {}
            raise Held(f"a publisher runs already ({record.get('by')}, pid {held.get('pid')} on {held.get('host')}, "
                       f"epoch {record.get('epoch')}, lease until {record.get('expires_at')})",
                       epoch=record.get("epoch"), by=record.get("by"))
        record = {"epoch": int((record or {}).get("epoch") or 0) + 1, "by": ctx.actor, "holder": holder,
                  "taken_at": ctx.when}
    else:
        _require_publisher(ctx, record)
        assert record is not None
    record["state"] = "released" if action == "release" else "held"
    until = ctx.now if action == "release" else ctx.now + _dt.timedelta(seconds=ctx.cmd["ttl"])
    record["expires_at"] = format_instant(until)
    ctx.outcome.changes[PUBLISHER_PATH] = codec.dump_yaml(record)
    ctx.outcome.result = dict(record)
    ctx.say(f"queue-lease {action} epoch {record['epoch']} by {ctx.actor}")


def _require_publisher(ctx: Context, record: dict[str, Any] | None) -> None:
    """The fencing rule of the publisher's lease: the caller's epoch, its identity, still live."""
    if (record is None or record.get("epoch") != ctx.cmd.get("epoch") or record.get("by") != ctx.actor
            or not publisher_live(record, ctx.now)):
        now = f" (now epoch {record.get('epoch')}, {record.get('by')}, {record.get('state')})" if record else ""
        raise Stale(f"the publisher lease epoch {ctx.cmd.get('epoch')} is stale{now}", epoch=(record or {}).get("epoch"))


def _head(ctx: Context) -> dict[str, Any]:
    _require_publisher(ctx, load_publisher(ctx))
    session = _session(ctx)
    queued = entries(ctx)
    if not queued or queued[0].get("session") != session:
        raise Invalid(f"session {session} is not at the head of the publish queue", session=session)
    entry = queued[0]
    ctx.cmd["item"] = entry["item"]
    return entry


@op("queue-land", "record that the publisher landed the queue's head session", internal=True, arbiter=True,
    item="item", epoch="int!", session="short!", commit="short!", previous="short", remote="name",
    mode="fast-forward|merge|found!", gates="texts")
def queue_land(ctx: Context) -> None:
    entry = _head(ctx)
    item_id, session = str(entry["item"]), str(entry["session"])
    for field in ("commit", "previous"):
        _commit(ctx, field)
    lease = ctx.lease(item_id)
    if lease is None or not lease.is_active() or lease.fence != entry.get("fence"):
        raise Stale(f"the lease session {session} was queued under (fence {entry.get('fence')}) has ended: "
                    "it cannot land; send it back", item=item_id, session=session)
    ctx.outcome.changes[entry_path(int(entry["seq"]))] = None
    others = [r for r in open_sessions(ctx, item_id, lease) if r["session"] != session]
    ctx.event(item_id, "publish", session=session, source=entry["commit"], commit=ctx.cmd["commit"],
              previous=ctx.cmd.get("previous"), into=entry["into"], remote=ctx.cmd.get("remote"),
              mode=ctx.cmd["mode"], epoch=lease.epoch, fence=lease.fence, queued=entry["seq"],
              publisher=ctx.cmd["epoch"], keep_open=bool(others) or None)
    item = ctx.item(item_id)
    if not others and "done" in TRANSITIONS[item.status]:
        item.status = "done"
        item.closed_reason = f"published {session} (publish queue)"
        ctx.save_item(item)
        ctx.event(item_id, "done", reason=item.closed_reason, session=session, epoch=lease.epoch, fence=lease.fence)
        end_lease(ctx, lease, "released", reason="published")
    ctx.say(f"queue-land {session} into {entry['into']} by {ctx.actor} ({ctx.cmd['mode']} to "
            f"{ctx.cmd['commit'][:12]}; {item_id} {ctx.item(item_id).status})", item_id, session=session,
            fence=lease.fence)
    ctx.outcome.result = {"session": session, "item": item_id, "seq": entry["seq"], "commit": ctx.cmd["commit"],
                          "into": entry["into"], "mode": ctx.cmd["mode"], "status": ctx.item(item_id).status}


@op("queue-return", "record that the publisher sent the queue's head session back to its holder", internal=True,
    arbiter=True, item="item", epoch="int!", session="short!", reason="short!", output="text", gate="short")
def queue_return(ctx: Context) -> None:
    entry = _head(ctx)
    item_id, session = str(entry["item"]), str(entry["session"])
    ctx.outcome.changes[entry_path(int(entry["seq"]))] = None
    output = bounded(ctx.cmd.get("output") or "")
    ctx.cmd["output"] = output or None
    lease = ctx.lease(item_id)
    text = f"The publish queue sent session {session} back: {ctx.cmd['reason']}"
    if ctx.cmd.get("gate"):
        text += f"\nGate: {ctx.cmd['gate']}"
    if output:
        text += f"\n{output}"
    text += "\nFix it in a new session from the current " + str(entry["into"]) + ", then gw publish --queue again."
    record = post_message(ctx, item_id, "note", text, epoch=lease.epoch if lease else 0, to=str(entry["holder"]))
    ctx.event(item_id, "queue-return", session=session, seq=entry["seq"], reason=ctx.cmd["reason"],
              gate=ctx.cmd.get("gate"), message=record["seq"])
    ctx.say(f"queue-return {session} to {entry['holder']} by {ctx.actor}: {ctx.cmd['reason'][:120]}", item_id,
            session=session)
    ctx.outcome.result = {"session": session, "item": item_id, "seq": entry["seq"], "holder": entry["holder"],
                          "reason": ctx.cmd["reason"], "message": record["seq"]}
