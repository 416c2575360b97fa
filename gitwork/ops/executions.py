"""Execution records: an agent process started for an item, under its lease (docs/launch.md).

An execution goes ``reserved → launching → running → exited | lost | stopped | released`` (and ``failed``
when its command could not be started; ``released``: detached, not killed). Its current record is ``executions/<shard>/<id>.yaml``; every
transition is also an ``execution`` event in the item's ``events.log``, so the item's history says
what ran under which lease.

The record ops (``internal=True``: ``exec-reserve``, ``exec-state``) claim that gitwork's launcher
(``gitwork/launch``) reserved, started or saw the end of a process on this host, so no face may
submit them. ``exec-reserve`` is an **arbiter** op: one live execution per lane is a decision across
clones, and with ``launch`` (what ``gw run`` submits) it is the whole launch before the agent starts,
in one commit: the reservation, the caller's lease kept or claimed, and ``launching`` fenced on it.

The rules the engine enforces, whatever the launcher does:

- an item has at most one *live* execution (``reserved``, ``launching`` or ``running``) per *lane*:
  a second ``exec-reserve`` in the same lane is refused (75, naming it). An execution's lane is its
  multi-step session branch (``session`` and ``branch``: the parallel branches of one session run at
  once under the session's one lease), or the whole item when it has none: a plain execution
  conflicts with every live execution of the item, and a branch's with a plain one and with its
  own branch's;
- an id is reserved once, except an execution under which nothing ever ran (ended before
  ``launching``, or ``failed`` without a handle), which its retry reserves again under the same id, in the same lane of the same item
  (a branch's execution id is derived from the branch, a delegated start's from its request id: a
  retry must find its execution under that id, not under a new random one);
- ``env``: only the *names* of the extra environment variables the launcher gave the agent are
  recorded, never their values (they may be secrets; the state ref is shared);
- ``launching`` needs the holder's live lease (the fencing rule) and records its epoch and fence;
  one lease epoch launches at most once after a ``lost`` one: a lost process may still be alive
  somewhere, so the next launch must run under a new epoch, whose fence the lost one lacks.
"""

from __future__ import annotations

import datetime as _dt

from .. import codec
from ..clock import format_instant
from ..engine import Context, op
from ..errors import Held, Illegal, Invalid, NotFound, Stale
from ..model import CLOSED
from ..records.executions import (
    LIVE,
    TERMINAL,
    TRANSITIONS,
    check_clone,
    check_env_names,
    check_execution_id,
    coordinator_live,
    coordinator_path,
    execution_path,
    item_executions,
    lane,
    load_coordinator,
    load_execution,
    never_ran,
    same_lane,
)

TYPE_CHECKING = False  # typing costs ~15 ms to import; annotations are strings anyway
if TYPE_CHECKING:
    from typing import Any

def _save(ctx: Context, record: dict[str, Any], **event: Any) -> None:
    record["updated_at"] = ctx.when
    ctx.outcome.changes[execution_path(record["id"])] = codec.dump_yaml(record)
    event.setdefault("epoch", record.get("epoch"))  # the "lost under this epoch" rule reads it here
    event.setdefault("session", record.get("session"))  # and the one-live-execution-per-lane rule these
    event.setdefault("branch", record.get("branch"))
    ctx.event(record["item"], "execution", execution=record["id"], state=record["state"], **event)
    ctx.outcome.result = {"execution": record["id"], **{k: v for k, v in record.items() if k != "id"}}


# arbiter=True: one live execution per item (and lane) is a decision across clones, like the lease: two
# clones of one holder each reserving on their own state started two agents under one fence (the soak's I1).
@op("exec-reserve", "reserve an execution of an item; with launch, also its lease and launching (gw run: one commit)", internal=True, arbiter=True,
    item="item!", execution="short!", command="texts!", backend="name!", host="short!", launcher="mapping",
    build="mapping!", session="short", branch="short", env="texts", clone="short", launch="bool", ttl="duration")
def exec_reserve(ctx: Context) -> None:
    item_id = ctx.target()
    execution_id = check_execution_id(ctx.cmd["execution"])
    if not ctx.cmd["command"] or not ctx.cmd["command"][0]:
        raise Invalid("an execution needs a command")
    if bool(ctx.cmd.get("session")) != bool(ctx.cmd.get("branch")):
        raise Invalid("an execution of a session branch names both its session and its branch")
    if ctx.cmd.get("ttl") is not None and not ctx.cmd.get("launch"):
        raise Invalid("ttl is the lease's of a launch: give it with launch")
    mine = lane(ctx.cmd)
    env = check_env_names(list(ctx.cmd.get("env") or []))
    existing = load_execution(ctx, execution_id)
    again = 1
    if existing is not None:
        if existing.get("item") == item_id and existing.get("state") in LIVE:
            # Another gw run with the same --id reserved it first: the caller settles that one (75).
            raise Held(f"execution {execution_id} of {item_id} is being launched by another gw run", item=item_id,
                       execution=execution_id, state=existing["state"])
        if existing.get("item") != item_id or not never_ran(existing) or lane(existing) != mine:
            raise Invalid(f"execution {execution_id} exists already", execution=execution_id)
        again = int(existing.get("reserved") or 1) + 1  # it never launched: nothing ran under this id
    item = ctx.item(item_id)
    if item.status in CLOSED:
        raise Illegal(f"{item_id} is {item.status}; reopen it before running anything on it")
    from .ledger import refuse_over_budget

    refuse_over_budget(ctx, item, ctx.cmd.get("session"))
    for other, event in item_executions(ctx, item_id).items():
        if event["state"] in LIVE and same_lane(mine, lane(event)):
            raise Held(f"{item_id} already has execution {other} ({event['state']})"
                       + (f" of {event['session']} {event['branch']}" if lane(event) else "")
                       + f" (its host gone for good? once its lease ended: gw stop {other} --lost)", item=item_id,
                       execution=other, state=event["state"])
    lease = ctx.lease(item_id)
    if lease is not None and lease.holder != ctx.actor and not lease.takeable(ctx.now, ctx.settings.clock_margin):
        raise Held(f"{item_id} is held by {lease.holder} until {lease.expires_at} (epoch {lease.epoch})",
                   item=item_id, holder=lease.holder, expires_at=lease.expires_at)
    # The item's attempt number: its other executions so far, plus one (derived from the state the arbiter
    # decides on, so 1, 2, 3... across clones; an id reserved again, nothing having run under it, is
    # numbered again: after whatever ran meanwhile).
    attempt = 1 + sum(1 for other in item_executions(ctx, item_id) if other != execution_id)
    record = {"id": execution_id, "item": item_id, "state": "reserved", "attempt": attempt,
              "command": list(ctx.cmd["command"]),
              "backend": ctx.cmd["backend"], "host": ctx.cmd["host"], "by": ctx.actor, "created_at": ctx.when,
              "launcher": ctx.cmd.get("launcher"), "build": ctx.cmd["build"], "session": ctx.cmd.get("session"),
              "branch": ctx.cmd.get("branch"), "env": env or None, "reserved": again if again > 1 else None,
              "clone": check_clone(ctx.cmd["clone"]) if ctx.cmd.get("clone") else None}
    _save(ctx, {k: v for k, v in record.items() if v is not None}, backend=ctx.cmd["backend"], host=ctx.cmd["host"])
    ctx.say(f"exec-reserve {execution_id} on {item_id} by {ctx.actor} ({ctx.cmd['backend']} on {ctx.cmd['host']})",
            item_id, execution=execution_id)
    if ctx.cmd.get("launch"):
        _lease_and_launch(ctx, item_id, execution_id)


def _step(ctx: Context, doc: dict[str, Any], func: Any) -> Context:
    """One step of a launch, run by its own op on the tree the steps before it left (``Context.member``,
    as a batch's members), under this command's id and identity: its events name this command, and a
    lease it grants is this command's grant."""
    child = ctx.member({**doc, "id": ctx.cmd["id"], "as": ctx.actor})
    func(child)
    return child


def _lease_and_launch(ctx: Context, item_id: str, execution_id: str) -> None:
    """``launch``: gw run's steps before its agent starts, in the reservation's one commit (issue 27:
    one state commit, not three, before the pane): the caller's live lease on the item is kept, else
    a new one is claimed (``ttl``), and the execution becomes ``launching`` under it (``exec-state``'s
    fencing rule). A lease whose epoch lost an execution is released and claimed again first (a lost
    process may still run under its fence), unless another live execution still runs under it (75).
    All or nothing: a refused claim records no reservation either."""
    from .leases import claim, release

    lease = ctx.lease(item_id)
    keep = lease is not None and lease.is_active() and lease.holder == ctx.actor and lease.live_for_holder(
        ctx.now, ctx.settings.clock_margin)
    if lease is not None and keep:
        executions = item_executions(ctx, item_id)
        lost = [e for e in executions.values() if e["state"] == "lost" and e.get("epoch") == lease.epoch]
        if lost:
            others = [i for i, e in executions.items() if e["state"] in LIVE and i != execution_id]
            if others:  # a new epoch would end their lease under them: launch once they have ended
                raise Held(f"{item_id} needs a new lease epoch (execution {lost[0]['execution']} was lost under epoch "
                           f"{lease.epoch}), and {others[0]} still runs under it", item=item_id, execution=others[0])
            _step(ctx, {"op": "release", "item": item_id, "fence": lease.fence}, release)
            keep = False
    epoch = None  # the Lease-Epoch trailer: only when this commit grants the lease (serve/timeline.py starts a span)
    if not keep:
        granted = _step(ctx, {"op": "claim", "item": item_id, "ttl": ctx.cmd.get("ttl")}, claim)
        ctx.cmd["ttl"] = granted.cmd["ttl"]  # the default resolved here: the arbiter replays this very lease
        epoch = granted.outcome.result.get("epoch")
    launching = _step(ctx, {"op": "exec-state", "execution": execution_id, "to": "launching",
                            "launcher": ctx.cmd.get("launcher")}, exec_state)
    ctx.outcome.result = launching.outcome.result
    fence = launching.outcome.result.get("fence")
    ctx.say(f"exec-reserve {execution_id} on {item_id} by {ctx.actor} ({ctx.cmd['backend']} on {ctx.cmd['host']}), "
            f"launching under epoch {launching.outcome.result.get('epoch')}, fence {fence}", item_id,
            execution=execution_id, fence=fence, lease_epoch=epoch)


@op("exec-state", "record an execution's next state: launching (fenced), running, exited, failed, lost, stopped",
    internal=True, execution="short!", to="launching|running|exited|failed|lost|stopped|released!", handle="short",
    code="int", reason="short", launcher="mapping", item="item", report="data", report_error="short")
def exec_state(ctx: Context) -> None:
    """``item`` is the execution's, recorded in the document (sync follows a fenced command's lease by
    its item): declared, so the recorded document validates again when it is replayed on a later tip."""
    execution_id = check_execution_id(ctx.cmd["execution"])
    record = load_execution(ctx, execution_id)
    if record is None:
        raise NotFound(f"no execution {execution_id}", execution=execution_id)
    if ctx.cmd.get("item") not in (None, record["item"]):
        raise Invalid(f"execution {execution_id} runs {record['item']}, not {ctx.cmd['item']}", execution=execution_id)
    ctx.cmd["item"] = item_id = record["item"]
    to, now = ctx.cmd["to"], record["state"]
    if (ctx.cmd.get("report") is not None or ctx.cmd.get("report_error")) and to not in TERMINAL:
        raise Invalid("an agent's report.json is recorded with its execution's end")
    if to not in TRANSITIONS.get(now, ()):
        raise Illegal(f"execution {execution_id} is {now}; it cannot become {to}", execution=execution_id, state=now)
    extra: dict[str, Any] = {}
    if to == "launching":
        lease = ctx.require_holder(item_id)
        if lease is None:
            raise Stale(f"you hold no lease on {item_id}: claim it before launching", item=item_id)
        for other, event in item_executions(ctx, item_id).items():
            if other != execution_id and event["state"] == "lost" and event.get("epoch") == lease.epoch:
                raise Stale(f"execution {other} was lost under epoch {lease.epoch} of {item_id}: launch again only "
                            "under a new lease", item=item_id, execution=other)
        record.update(epoch=lease.epoch, fence=lease.fence, lease=lease.grant, holder=lease.holder)
        extra.update(epoch=lease.epoch, fence=lease.fence)
        if ctx.cmd.get("launcher"):
            record["launcher"] = ctx.cmd["launcher"]
    if to == "exited" and ctx.cmd.get("code") is None:
        raise Invalid("an exit needs its code")
    for field in ("handle", "code", "reason"):
        if ctx.cmd.get(field) is not None:
            record[field] = extra[field] = ctx.cmd[field]
    record["state"] = to
    if to == "running":
        record["started_at"] = ctx.when
    if to in TERMINAL:
        record["ended_at"] = ctx.when
        from .ledger import exit_report

        exit_report(ctx, record)  # what its report.json said (the execution ledger), with its end
    _save(ctx, record, **extra)
    detail = f" (code {ctx.cmd['code']})" if to == "exited" else (f" ({ctx.cmd['reason']})" if ctx.cmd.get("reason") else "")
    ctx.say(f"exec-state {execution_id} on {item_id}: {now} -> {to}{detail}", item_id, execution=execution_id,
            fence=record.get("fence") if to == "launching" else None)


def _steered(ctx: Context, what: str, ended: str) -> tuple[str, dict[str, Any]]:
    """The live execution ``ctx.cmd["execution"]`` names, for steering it: whoever started it may, anyone
    else under the rule of ``revoke`` (``what``: the deed, with ``{by}`` and ``{id}``); ``ended``: why an
    execution no longer live is refused (6)."""
    from ..roles import require_steerer

    execution_id = check_execution_id(ctx.cmd["execution"])
    record = load_execution(ctx, execution_id)
    if record is None:
        raise NotFound(f"no execution {execution_id}", execution=execution_id)
    if record.get("by") != ctx.actor:
        require_steerer(ctx, record["item"], what.format(by=record.get("by"), id=execution_id))
    if record["state"] not in LIVE:
        raise Illegal(f"execution {execution_id} is {record['state']}: {ended}", execution=execution_id,
                      state=record["state"])
    return execution_id, record


@op("exec-lost", "declare a live execution lost (its host is gone for good), once its lease has ended",
    who=("whoever started the execution; anyone else: admins (setting `admins`; with no admins "
         "configured, any person). Agents only their own."),
    roles=True, arbiter=True, execution="short!", reason="short!")
def exec_lost(ctx: Context) -> None:
    """An execution the state holds live blocks every launch of its item on every clone until its host
    records its end; a host that never comes back would block it for good. Only its host can know the
    agent is gone, so this is a person's declaration, and only once the execution's lease is over (revoked,
    released, expired, replaced): an agent on a host merely cut off may still run, but nothing it does
    lands under its fence, and its coordinator stops it once it hears of the end. Then the item can be run
    again, under a new lease epoch (``exec-state``: an epoch that lost an execution launches nothing more)."""
    execution_id, record = _steered(ctx, "declare {by}'s execution {id} lost", "it is no longer live")
    item_id = record["item"]
    lease = ctx.lease(item_id)
    if record.get("fence") is not None and lease is not None and lease.fence == record.get("fence") \
            and lease.is_active() and lease.live_for_holder(ctx.now, ctx.settings.clock_margin):
        raise Illegal(f"execution {execution_id} runs under {lease.holder}'s live lease on {item_id} (fence "
                      f"{lease.fence}): revoke it first (its agent may still be at work), then declare it lost",
                      execution=execution_id, item=item_id)
    _step(ctx, {"op": "exec-state", "execution": execution_id, "to": "lost",
                "reason": f"declared lost by {ctx.actor}: {ctx.cmd['reason']}"[:200]}, exec_state)
    ctx.outcome.result = {"execution": execution_id, "item": item_id, "state": "lost"}


@op("exec-stop", "ask for a live execution to be stopped: its host's gw coordinate kills it and records it stopped",
    who=("whoever started the execution; anyone else: admins (setting `admins`; with no admins "
         "configured, any person). Agents only their own."),
    roles=True, execution="short!", reason="short!")
def exec_stop(ctx: Context) -> None:
    """A public op (the board's and any face's): it records the request on the execution, and the
    coordinator of the execution's host (the only process that can reach it) kills it on its next pass
    and records ``stopped`` with this reason. Whoever started the execution may ask; anyone else only
    under the rule of ``revoke`` (an admin; with no admins configured, a person)."""
    execution_id, record = _steered(ctx, "stop {by}'s execution {id}", "nothing to stop")
    item_id = record["item"]
    asked = record.get("stop_requested")
    if asked:
        raise Illegal(f"execution {execution_id} was already asked to stop by {asked.get('by')} ({asked.get('reason')})",
                      execution=execution_id, state=record["state"])
    record["stop_requested"] = {"by": ctx.actor, "at": ctx.when, "reason": ctx.cmd["reason"]}
    record["updated_at"] = ctx.when
    ctx.outcome.changes[execution_path(execution_id)] = codec.dump_yaml(record)
    ctx.event(item_id, "stop-requested", execution=execution_id, reason=ctx.cmd["reason"])
    ctx.say(f"exec-stop {execution_id} on {item_id} by {ctx.actor}: {ctx.cmd['reason']}", item_id,
            execution=execution_id)
    ctx.outcome.result = {"execution": execution_id, "item": item_id, "state": record["state"],
                          "stop_requested": record["stop_requested"]}


# --- the coordinator's own lease: one `gw coordinate` per host ----------------------------------------

@op("coord-lease", "take, renew or release the lease that makes one gw coordinate per host and clone",
    internal=True, host="short!", action="take|renew|release!", holder="mapping!", ttl="duration!", epoch="int",
    over="int", build="mapping", clone="short")
def coord_lease(ctx: Context) -> None:
    """``take``: refused (75) while another holder's lease is live, unless ``over`` names its epoch (the
    caller saw that holder's process dead on this host); each take is a new epoch. ``renew`` and
    ``release`` need the caller's epoch and holder: a coordinator whose lease was taken over learns it
    here (7) and stops."""
    host, action, holder, clone = ctx.cmd["host"], ctx.cmd["action"], ctx.cmd["holder"], ctx.cmd.get("clone")
    record = load_coordinator(ctx, host, clone)
    if action == "take":
        if record is not None and coordinator_live(record, ctx.now) and record.get("holder") != holder \
                and record.get("epoch") != ctx.cmd.get("over"):
            held = record.get("holder") or {}
            raise Held(f"a coordinator runs on {host} already (pid {held.get('pid')}, epoch {record.get('epoch')}, "
                       f"lease until {record.get('expires_at')})", host=host, pid=held.get("pid"),
                       epoch=record.get("epoch"))
        epoch = int((record or {}).get("epoch") or 0) + 1
        record = {"host": host, "clone": clone, "epoch": epoch, "holder": holder, "taken_at": ctx.when,
                  "build": ctx.cmd.get("build")}
    else:
        if record is None or record.get("epoch") != ctx.cmd.get("epoch") or record.get("holder") != holder \
                or record.get("state") == "released":
            now_held = (record or {}).get("holder") or {}
            raise Stale(f"the coordinator lease of {host} (epoch {ctx.cmd.get('epoch')}) was taken over"
                        + (f" by pid {now_held.get('pid')} (epoch {record.get('epoch')})" if record else ""),
                        host=host, epoch=(record or {}).get("epoch"))
    record["state"] = "released" if action == "release" else "held"
    until = ctx.now if action == "release" else ctx.now + _dt.timedelta(seconds=ctx.cmd["ttl"])
    record["expires_at"] = format_instant(until)
    ctx.outcome.changes[coordinator_path(host, clone)] = codec.dump_yaml({k: v for k, v in record.items() if v is not None})
    ctx.outcome.result = dict(record)
    ctx.say(f"coord-lease {action} {host} epoch {record['epoch']} (pid {holder.get('pid')})")
