"""Execution records: an agent process started for an item, under its lease (docs/launch.md).

An execution goes ``reserved → launching → running → exited | lost | stopped | released`` (and ``failed``
when its command could not be started; ``released``: detached, not killed). Its current record is ``executions/<shard>/<id>.yaml``; every
transition is also an ``execution`` event in the item's ``events.log``, so the item's history says
what ran under which lease.

All three ops are **record ops** (``internal=True``): they claim that gitwork's launcher
(``gitwork/launch``) reserved, started or saw the end of a process on this host, so no face may
submit them. None is an **arbiter** op: they grant, renew and end no lease. Across machines the
lease is the mutex (``claim`` is decided by the arbiter) and the ``launching`` record is fenced on
it; a reservation only keeps two ``gw run`` of one clone from both getting as far as the claim.

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
import hashlib
import re

from .. import codec
from ..clock import format_instant, parse_instant
from ..engine import Context, op
from ..errors import Held, Illegal, Invalid, NotFound, Stale
from ..model import CLOSED

TYPE_CHECKING = False  # typing costs ~15 ms to import; annotations are strings anyway
if TYPE_CHECKING:
    from typing import Any

EXECUTIONS = "executions"
# Names a file and a tmux session: no '.', ':' (tmux target syntax) nor '/'.
EXECUTION_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]{3,63}\Z")
LIVE = ("reserved", "launching", "running")
# ``released``: detached without being killed (``gw detach``): its process may go on running, but gitwork
# no longer answers for it, so no coordinator judges it and its lane is free.
TERMINAL = ("exited", "lost", "stopped", "failed", "released")
TRANSITIONS = {
    "reserved": ("launching", "failed", "lost", "stopped"),
    "launching": ("running", "exited", "failed", "lost", "stopped"),
    "running": ("exited", "lost", "stopped", "released"),
}


def never_ran(record: dict[str, Any]) -> bool:
    """Did nothing ever run under this ended execution? Ended before ``launching`` (no fence), or
    ``failed`` with no handle (its launcher died, or its backend refused, before any process started)."""
    return record.get("state") in ("lost", "failed") and (
        record.get("fence") is None or (record.get("state") == "failed" and not record.get("handle")))


def execution_path(execution_id: str) -> str:
    return f"{EXECUTIONS}/{hashlib.sha1(execution_id.encode()).hexdigest()[:2]}/{execution_id}.yaml"


def check_execution_id(value: str) -> str:
    if not EXECUTION_ID.match(value):
        raise Invalid(f"bad execution id {value[:70]!r}: 4-64 letters, digits, _ and -, starting with a letter or digit")
    return value


def load_execution(ctx: Context, execution_id: str) -> dict[str, Any] | None:
    data = ctx.file(execution_path(execution_id))
    return codec.load_yaml(data, what=execution_path(execution_id)) if data else None


ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,127}\Z")
RESERVED_ENV = ("GW_AGENT", "GW_ITEM", "GW_FENCE", "GW_EXECUTION", "GW_CONTEXT")  # the launcher sets these


def lane(record: dict[str, Any]) -> tuple[str, str] | None:
    """The lane of an execution (record or event): its session branch, or None for the whole item."""
    if record.get("session") and record.get("branch"):
        return (str(record["session"]), str(record["branch"]))
    return None


def same_lane(one: tuple[str, str] | None, other: tuple[str, str] | None) -> bool:
    """Do two executions of one item exclude each other? A plain one excludes every other; branches
    of a session exclude only their own branch."""
    return one is None or other is None or one == other


def check_env_names(names: list[str]) -> list[str]:
    for name in names:
        if not ENV_NAME.match(name):
            raise Invalid(f"bad environment variable name {name[:70]!r}: letters, digits and _, not starting "
                          "with a digit")
        if name in RESERVED_ENV:
            raise Invalid(f"{name} is set by gw run itself (the agent's lease): it cannot be given")
    return sorted(set(names))


def item_executions(ctx: Context, item_id: str) -> dict[str, dict[str, Any]]:
    """The item's executions, each id mapped to its latest ``execution`` event (oldest id first)."""
    found: dict[str, dict[str, Any]] = {}
    for event in ctx.records(item_id):
        if event.get("type") == "execution":
            found[event["execution"]] = event
    return found


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
@op("exec-reserve", "reserve an execution of an item: the first step of gw run", internal=True, arbiter=True,
    item="item!", execution="short!", command="texts!", backend="name!", host="short!", launcher="mapping",
    build="mapping!", session="short", branch="short", env="texts", clone="short")
def exec_reserve(ctx: Context) -> None:
    item_id = ctx.target()
    execution_id = check_execution_id(ctx.cmd["execution"])
    if not ctx.cmd["command"] or not ctx.cmd["command"][0]:
        raise Invalid("an execution needs a command")
    if bool(ctx.cmd.get("session")) != bool(ctx.cmd.get("branch")):
        raise Invalid("an execution of a session branch names both its session and its branch")
    mine = lane(ctx.cmd)
    env = check_env_names(list(ctx.cmd.get("env") or []))
    existing = load_execution(ctx, execution_id)
    attempt = 1
    if existing is not None:
        if existing.get("item") == item_id and existing.get("state") in LIVE:
            # Another gw run with the same --id reserved it first: the caller settles that one (75).
            raise Held(f"execution {execution_id} of {item_id} is being launched by another gw run", item=item_id,
                       execution=execution_id, state=existing["state"])
        if existing.get("item") != item_id or not never_ran(existing) or lane(existing) != mine:
            raise Invalid(f"execution {execution_id} exists already", execution=execution_id)
        attempt = int(existing.get("attempt") or 1) + 1  # it never launched: nothing ran under this id
    item = ctx.item(item_id)
    if item.status in CLOSED:
        raise Illegal(f"{item_id} is {item.status}; reopen it before running anything on it")
    for other, event in item_executions(ctx, item_id).items():
        if event["state"] in LIVE and same_lane(mine, lane(event)):
            raise Held(f"{item_id} already has execution {other} ({event['state']})"
                       + (f" of {event['session']} {event['branch']}" if lane(event) else ""), item=item_id,
                       execution=other, state=event["state"])
    lease = ctx.lease(item_id)
    if lease is not None and lease.holder != ctx.actor and not lease.takeable(ctx.now, ctx.settings.clock_margin):
        raise Held(f"{item_id} is held by {lease.holder} until {lease.expires_at} (epoch {lease.epoch})",
                   item=item_id, holder=lease.holder, expires_at=lease.expires_at)
    record = {"id": execution_id, "item": item_id, "state": "reserved", "command": list(ctx.cmd["command"]),
              "backend": ctx.cmd["backend"], "host": ctx.cmd["host"], "by": ctx.actor, "created_at": ctx.when,
              "launcher": ctx.cmd.get("launcher"), "build": ctx.cmd["build"], "session": ctx.cmd.get("session"),
              "branch": ctx.cmd.get("branch"), "env": env or None, "attempt": attempt if attempt > 1 else None,
              "clone": check_clone(ctx.cmd["clone"]) if ctx.cmd.get("clone") else None}
    _save(ctx, {k: v for k, v in record.items() if v is not None}, backend=ctx.cmd["backend"], host=ctx.cmd["host"])
    ctx.say(f"exec-reserve {execution_id} on {item_id} by {ctx.actor} ({ctx.cmd['backend']} on {ctx.cmd['host']})",
            item_id, execution=execution_id)


@op("exec-state", "record an execution's next state: launching (fenced), running, exited, failed, lost, stopped",
    internal=True, execution="short!", to="launching|running|exited|failed|lost|stopped|released!", handle="short",
    code="int", reason="short", launcher="mapping", item="item")
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
    if to in TERMINAL:
        record["ended_at"] = ctx.when
    _save(ctx, record, **extra)
    detail = f" (code {ctx.cmd['code']})" if to == "exited" else (f" ({ctx.cmd['reason']})" if ctx.cmd.get("reason") else "")
    ctx.say(f"exec-state {execution_id} on {item_id}: {now} -> {to}{detail}", item_id, execution=execution_id,
            fence=record.get("fence") if to == "launching" else None)


# --- the coordinator's own lease: one `gw coordinate` per host ----------------------------------------

COORDINATORS = "coordinators"
HOST = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]{0,63}\Z")


def check_clone(clone: str) -> str:
    if not HOST.match(clone):
        raise Invalid(f"bad clone id {clone[:70]!r}: letters, digits, _ and -")
    return clone


def coordinator_path(host: str, clone: str | None = None) -> str:
    """``coordinators/<host>.yaml``, or per clone ``coordinators/<host>/<clone>.yaml``: two clones on
    one host each have their own coordinator (each judges only its own executions)."""
    if not HOST.match(host):
        raise Invalid(f"bad host name {host[:70]!r} for a coordinator")
    return f"{COORDINATORS}/{host}/{check_clone(clone)}.yaml" if clone else f"{COORDINATORS}/{host}.yaml"


def load_coordinator(ctx: Context, host: str, clone: str | None = None) -> dict[str, Any] | None:
    data = ctx.file(coordinator_path(host, clone))
    return codec.load_yaml(data, what=coordinator_path(host, clone)) if data else None


def coordinator_live(record: dict[str, Any] | None, now: _dt.datetime) -> bool:
    """Does this lease still bind (not released, not expired)?"""
    if record is None or record.get("state") == "released":
        return False
    try:
        return parse_instant(str(record.get("expires_at"))) > now
    except ValueError:
        return False


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
