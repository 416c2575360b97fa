"""Items that wait on events (docs/everyday.md, "Waiting on events"): ``defer``, ``undefer``, ``wait``,
``wait-end``.

An item's ``waits`` (item.yaml) lists what it waits on besides its dependencies: a timer (``defer
--until``), a ref reachable from another (a pull request merged into main), a command's exit (a CI
check). While one is open the item is not ready (``queries.READY_WHERE``, through the cache's ``gate``)
and a claim is refused (6) unless forced. A timer passes at read time, against the clock, with no
commit; a ref or command wait ends only by a command, ``wait-end``, which the coordinator (or ``gw waits
check``, gitwork/gates.py) submits once git or the command answered, and which the arbiter re-applies
like any op: who may record it is a rule of this op (roles.require_gatekeeper), not of the checker.
"""

from __future__ import annotations

import datetime as _dt
import re

from ..clock import format_instant, parse_instant
from ..codec import parse_duration
from ..engine import Context, op
from ..errors import Invalid, NotFound
from ..model import CLOSED, describe_wait
from ..roles import WHO_ACTS_ON, WHO_GATES, WHO_RUNS, act_on, require_command_waiter, require_gatekeeper

TYPE_CHECKING = False  # typing costs ~15 ms to import; annotations are strings anyway
if TYPE_CHECKING:
    from typing import Any

# A ref as git check-ref-format allows it, narrowed (no "..", "@{", leading "-" or "/", no ".lock" part):
# the coordinator hands it to git as an argument, so it must never read as an option or a revision range.
_REF = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_./+-]{0,199}\Z")
_REMOTE = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,63}\Z")
MIN_EVERY = 5  # seconds between two polls of a command, at the least
MAX_COMMAND = 1000  # bytes of a command line
OUTCOMES = ("satisfied", "failed", "timeout", "cancelled")


def parse_until(text: str, now: _dt.datetime) -> _dt.datetime:
    """``--until``: an ISO instant or date (UTC midnight), a duration from now (``2h``, ``3d``, ``1h30m``),
    or ``tomorrow`` (the next UTC midnight). Refused (5) unless it is after ``now``."""
    raw = text.strip()
    if raw.lower() == "tomorrow":
        when = _dt.datetime.combine(now.date() + _dt.timedelta(days=1), _dt.time(), tzinfo=_dt.timezone.utc)
    elif re.fullmatch(r"\d{4}-\d{2}-\d{2}", raw) or "T" in raw or ":" in raw:
        try:
            when = parse_instant(raw)
        except ValueError:
            raise Invalid(f"--until {raw[:40]!r} is not a date or instant: use e.g. 2h, 3d, tomorrow, 2030-01-31 "
                          "or 2030-01-31T09:00:00Z") from None
    else:
        try:
            when = now + _dt.timedelta(seconds=parse_duration(raw))
        except Invalid:
            raise Invalid(f"--until {raw[:40]!r} is not a duration, date or instant: use e.g. 2h, 3d, tomorrow, "
                          "2030-01-31 or 2030-01-31T09:00:00Z") from None
    if when <= now:
        raise Invalid(f"--until {format_instant(when)} is not in the future (now {format_instant(now)})")
    if when.year > 9999 - 1:
        raise Invalid("--until is too far in the future")
    return when


def _next_id(ctx: Context, item_id: str) -> str:
    """A wait's id: its number among every wait this item ever had (the events log is append-only, so a
    number never names two waits: an outcome recorded for an old wait cannot end a new one)."""
    declared = sum(1 for r in ctx.records(item_id) if r.get("type") in ("deferred", "wait"))
    # ...and after every id the item's file holds (one written by another tool has no event)
    held = [int(w["id"]) for w in ctx.item(item_id).waits or () if str(w.get("id", "")).isdigit()]
    return str(1 + max([declared, *held]))


def _open_item(ctx: Context, item_id: str) -> Any:
    item = ctx.item(item_id)
    if item.status in CLOSED:
        raise Invalid(f"{item_id} is {item.status}: a closed item waits on nothing")
    return item


@op("defer", "make an item wait until a time (not ready, not offered by claim --next, until then)",
    who=WHO_ACTS_ON, mcp={"verb": "items:defer", "fields": ("item", "until", "fence")}, roles=True,
    item="item!", until="short!")
def defer(ctx: Context) -> None:
    item_id = ctx.target()
    act_on(ctx, item_id)
    item = _open_item(ctx, item_id)
    until = format_instant(parse_until(ctx.cmd["until"], ctx.now))
    ctx.cmd["until"] = until  # recorded resolved: "2h" replayed later must mean the same instant
    wait = {"id": _next_id(ctx, item_id), "kind": "timer", "until": until, "by": ctx.actor, "at": ctx.when}
    item.waits = [w for w in item.waits or () if w.get("kind") != "timer"] + [wait]  # one timer: the newest
    ctx.save_item(item)
    ctx.event(item_id, "deferred", wait=wait["id"], until=until)
    ctx.say(f"defer {item_id} by {ctx.actor} until {until}", item_id, fence=ctx.cmd.get("fence"))
    ctx.outcome.result = {"item": item_id, "wait": wait["id"], "until": until}


@op("undefer", "end an item's timer: ready again now (if nothing else holds it)", who=WHO_ACTS_ON,
    mcp={"verb": "items:undefer", "fields": ("item", "fence")}, roles=True, item="item!")
def undefer(ctx: Context) -> None:
    item_id = ctx.target()
    act_on(ctx, item_id)
    item = ctx.item(item_id)
    timers = [w for w in item.waits or () if w.get("kind") == "timer"]
    if not timers:
        raise Invalid(f"{item_id} is not deferred")
    item.waits = [w for w in item.waits or () if w.get("kind") != "timer"] or None
    ctx.save_item(item)
    ctx.event(item_id, "undeferred", wait=timers[-1]["id"], until=timers[-1]["until"])
    ctx.say(f"undefer {item_id} by {ctx.actor}", item_id, fence=ctx.cmd.get("fence"))
    ctx.outcome.result = {"item": item_id, "wait": timers[-1]["id"]}


def _ref(value: str, what: str) -> str:
    if not _REF.match(value) or ".." in value or "//" in value or "@{" in value or value.endswith((".", "/", ".lock")):
        raise Invalid(f"{what} {value[:60]!r} is not a ref name git accepts (letters, digits, _./+-; no '..')")
    return value


def _command(text: str) -> list[str]:
    import shlex

    if len(text.encode()) > MAX_COMMAND:
        raise Invalid(f"--command is too long (at most {MAX_COMMAND} bytes)")
    try:
        argv = shlex.split(text)
    except ValueError as error:
        raise Invalid(f"--command does not parse as a command line: {error}") from None
    if not argv:
        raise Invalid("--command is empty")
    return argv


@op("wait", "make an item wait on a ref reachable from another (e.g. a PR merged into main) or on a "
    "command's exit (polled by the coordinator)", who=WHO_RUNS, roles=True,
    mcp={"verb": "items:wait", "summary": "make an item wait until a ref is reachable from another (your PR "
         "merged into main): not ready until the coordinator sees it", "fields": ("item", "ref", "reachable_from",
                                                                                 "remote", "fence")},
    item="item!", ref="short",
    reachable_from="short", remote="short", command="short", every="duration", timeout="duration")
def wait(ctx: Context) -> None:
    cmd = ctx.cmd
    item_id = ctx.target()
    if ("ref" in cmd) == ("command" in cmd):
        raise Invalid("wait on one thing: --ref REF or --command 'CMD'")
    spec: dict[str, Any]
    if "ref" in cmd:
        if "every" in cmd or "timeout" in cmd:
            raise Invalid("--every and --timeout are for --command waits")
        act_on(ctx, item_id)
        item = _open_item(ctx, item_id)
        remote = cmd.get("remote")
        if remote is not None and not _REMOTE.match(remote):
            raise Invalid(f"--remote {remote[:60]!r} is not a remote name")
        spec = {"kind": "ref", "ref": _ref(cmd["ref"], "--ref"),
                "target": _ref(cmd.get("reachable_from") or "main", "--reachable-from"), "remote": remote}
    else:
        if "reachable_from" in cmd or "remote" in cmd:
            raise Invalid("--reachable-from and --remote are for --ref waits")
        item = _open_item(ctx, item_id)
        require_command_waiter(ctx, item)
        _command(cmd["command"])
        every = cmd.get("every", 30)
        if every < MIN_EVERY:
            raise Invalid(f"--every must be at least {MIN_EVERY}s")
        spec = {"kind": "command", "command": cmd["command"], "every": every, "timeout": cmd.get("timeout", 7200)}
    entry = {"id": _next_id(ctx, item_id), **{k: v for k, v in spec.items() if v is not None}, "by": ctx.actor,
             "at": ctx.when}
    item.waits = [*(item.waits or ()), entry]
    ctx.save_item(item)
    ctx.event(item_id, "wait", wait=entry["id"], wait_kind=entry["kind"], what=describe_wait(entry),
              **{k: v for k, v in entry.items() if k not in ("id", "kind", "by", "at")})
    ctx.say(f"wait {item_id} by {ctx.actor} on {describe_wait(entry)}"[:200], item_id, fence=cmd.get("fence"))
    ctx.outcome.result = {"item": item_id, "wait": entry["id"], "kind": entry["kind"], "what": describe_wait(entry)}


@op("wait-end", "record the outcome of one of an item's waits (satisfied, failed, timeout) or cancel it; "
    "failed and timeout also block the item", who=WHO_GATES, roles=True, item="item!", wait="short!",
    outcome="|".join(OUTCOMES) + "!", code="int", detail="text", commit="short")
def wait_end(ctx: Context) -> None:
    cmd = ctx.cmd
    item_id = ctx.target()
    item = ctx.item(item_id)
    found = [w for w in item.waits or () if w.get("id") == cmd["wait"]]
    if not found:
        have = ", ".join(w["id"] for w in item.waits or ()) or "none"
        raise NotFound(f"{item_id} has no open wait {cmd['wait']} (open: {have})", item=item_id, wait=cmd["wait"])
    entry = found[0]
    require_gatekeeper(ctx, item_id, entry)
    outcome = cmd["outcome"]
    item.waits = [w for w in item.waits or () if w is not entry] or None
    blocks = outcome in ("failed", "timeout") and item.status in ("open", "in_progress")
    if blocks:
        item.status = "blocked"
    ctx.save_item(item)
    detail = cmd.get("detail")
    ctx.event(item_id, "wait-ended", wait=entry["id"], wait_kind=entry["kind"], outcome=outcome, what=describe_wait(entry),
              code=cmd.get("code"), commit=cmd.get("commit"), detail=detail[-2000:] if detail else None,
              blocked=blocks or None)
    ctx.say(f"wait-end {item_id} wait {entry['id']} {outcome} by {ctx.actor}", item_id)
    ctx.outcome.result = {"item": item_id, "wait": entry["id"], "outcome": outcome, "blocked": blocks}
