"""Lease ops: claim (by id or the best ready item), renew, release, takeover, revoke, handoff.

Every grant bumps the item's epoch and draws the next fencing token from the one counter in
``counters.yaml``; since every command is a CAS on the same ref, tokens strictly increase across the
whole state. The rules, and why clocks only decide *when to try*, are in docs/leases.md.
"""

from __future__ import annotations

import datetime as _dt

from .. import layout
from ..clock import format_instant
from ..engine import Context, op
from ..errors import Corrupt, Held, Illegal, Invalid, NotFound, NotHolder, Stale
from ..model import CLOSED, HANDOFF_REASONS, Lease, usable_ttl
from ..roles import WHO_HOLDS, holder_check, require_revoker, require_steerer
from .common import end_lease, refuse_open_dependencies, refuse_open_waits

# How many of the best ready items a `claim --next` that lost a race spreads over.
SPREAD = 8
# How many of the best ready items a `claim --next` looks through when path leases are live (it skips
# those whose paths overlap another holder's live lease).
SCAN = 64



def _next(ctx: Context) -> str:
    """The item ``claim --next`` tries: the best ready one (the documented order) on a command's first
    attempt; after a lost race, one of the best few, drawn from the claimer's identity, the command id
    and the attempt (reproducible, and different for each claimer), so a crowd that all lost to the
    same winner does not pile onto the same next item. Which items are ready comes from the read cache
    at this very commit; the grant is decided on the tree (``_claimable``), as for any claim.

    (Spreading keeps losers off each other's items; it cannot make more than one of them win a round:
    every command is a compare-and-swap of the same ref, whichever item it names.)"""
    from ..queries import select

    command = ctx.cmd.get("id", "")
    tries = ctx.attempt  # engine.run's round: the op keeps no count of its own (apply is a pure function)
    from ..pathleases import index

    wanted = 1 if tries == 1 else SPREAD
    leased_paths = bool(index(ctx))  # no live path lease: nothing to skip, the plain (cheap) path
    # Items the face predicted would conflict with live work (conflicts.py: a live session branch changes
    # files their paths cover): ranked after every other candidate. Given in the document, so the choice
    # stays a function of it (the arbiter replays the recorded item, never the prediction).
    last = set(ctx.cmd.get("last") or ())
    # Items an earlier member of this batch changed (claimed, deferred...): the cache ranks the base
    # commit, where they were still ready; picking one refused the whole batch (75 "held by you").
    touched = {p.split("/")[2] for p in ctx.outcome.changes if p.startswith("items/") and p.count("/") >= 3}
    rows = select(ctx.snapshot, ctx.now, ctx.settings.clock_margin, ready=True, labels=ctx.cmd.get("labels") or (),
                  labels_any=ctx.cmd.get("labels_any") or (), owner=ctx.cmd.get("owner"), priority=ctx.cmd.get("priority"),
                  limit=SCAN if leased_paths or last or touched else wanted, shorten=False).rows
    candidates = [str(row[0]) for row in rows if str(row[0]) not in touched]
    skipped = 0
    if leased_paths:
        free = [c for c in candidates if not _paths_conflict(ctx, c)]
        skipped, candidates = len(candidates) - len(free), free
    if last:
        candidates = [c for c in candidates if c not in last] + [c for c in candidates if c in last]
    candidates = candidates[:wanted]
    if not candidates:
        more = f" ({skipped} skipped: their paths overlap live leases; see gw ready --explain)" if skipped else ""
        raise NotFound(f"no ready item to claim{more}")
    return candidates[spread_pick(ctx.actor, command, tries, len(candidates))]


def _paths_conflict(ctx: Context, item_id: str) -> bool:
    from ..pathleases import holders

    paths = ctx.item(item_id).paths or []
    return bool(paths) and bool(holders(ctx, item_id, paths, ctx.actor)[0])


def spread_pick(actor: str, command: str, tries: int, candidates: int) -> int:
    """Which of the best ``candidates`` ready items attempt ``tries`` of a ``claim --next`` takes."""
    if tries == 1 or candidates <= 1:
        return 0
    import random

    return random.Random(f"{actor}\0{command}\0{tries}").randrange(candidates)


def _grant(ctx: Context, item_id: str, previous: Lease | None, kind: str) -> Lease:
    item = ctx.item(item_id)
    counters = ctx.counters()
    last = counters.get("fence", 0)
    if type(last) is not int or last < 0:  # never int() it: "many", 2.5 or True must not become a fence
        raise Corrupt(f"{layout.COUNTERS}: fence must be a non-negative integer, not {last!r}"[:300],
                      file=layout.COUNTERS)
    fence = last + 1
    counters["fence"] = fence
    ttl = usable_ttl(ctx.cmd.get("ttl") or ctx.settings.default_ttl, ctx.settings.clock_margin)
    if item.paths or (previous is not None and previous.paths):
        _take_paths(ctx, item_id, item.paths or [])
    # Recorded: the default is this machine's setting (.workplane, GW_DEFAULT_TTL), and the arbiter
    # replays the document with its own settings (derive.py) and must derive the same lease.
    ctx.cmd["ttl"] = ttl
    lease = Lease(
        item=item_id,
        epoch=(previous.epoch if previous else 0) + 1,
        fence=fence,
        holder=ctx.actor,
        state="active",
        granted_at=ctx.when,
        expires_at=format_instant(ctx.now + _dt.timedelta(seconds=ttl)),
        ttl=ttl,
        grant=ctx.cmd["id"],
        paths=item.paths or None,
    )
    if item.status in ("open", "blocked"):
        item.status = "in_progress"
        ctx.save_item(item)
    ctx.save_lease(lease)
    ctx.save_counters(counters)
    took = None
    if previous is not None and previous.state in ("active", "handed-off"):
        took = {"holder": previous.holder, "epoch": previous.epoch, "fence": previous.fence, "state": previous.state}
    ctx.event(item_id, kind, epoch=lease.epoch, fence=fence, ttl=ttl, expires_at=lease.expires_at, previous=took)
    ctx.say(
        f"{kind} {item_id} by {ctx.actor} (epoch {lease.epoch}, fence {fence})",
        item_id,
        lease_epoch=lease.epoch,
        fence=fence,
    )
    ctx.outcome.result = lease_result(lease)
    return lease


def lease_result(lease: Lease) -> dict[str, object]:
    result: dict[str, object] = {
        "item": lease.item,
        "holder": lease.holder,
        "epoch": lease.epoch,
        "fence": lease.fence,
        "state": lease.state,
        "expires_at": lease.expires_at,
    }
    if lease.paths:
        result["paths"] = lease.paths
    return result


def _take_paths(ctx: Context, item_id: str, globs: list[str]) -> None:
    """The grant takes the item's path globs: refused (held, exit 75) while another holder's live lease
    holds an overlapping glob (gitwork/pathleases.py, docs/leases.md "Path leases")."""
    from ..pathleases import describe, holders, take

    conflicts, dead = holders(ctx, item_id, globs, ctx.actor)
    if conflicts:
        raise Held(f"{item_id}'s paths overlap a live lease: {describe(conflicts)}", item=item_id,
                   holder=conflicts[0]["holder"], conflicts=conflicts)
    take(ctx, item_id, globs, dead)


def _claimable(ctx: Context, item_id: str) -> Lease | None:
    item = ctx.item(item_id)
    if item.status in CLOSED:
        raise Illegal(f"{item_id} is {item.status}; reopen it before claiming")
    lease = ctx.lease(item_id)
    if lease is not None and not lease.takeable(ctx.now, ctx.settings.clock_margin):
        mine = " (by you: use renew)" if lease.holder == ctx.actor else ""
        raise Held(
            f"{item_id} is held by {lease.holder}{mine} until {lease.expires_at} (epoch {lease.epoch})",
            item=item_id,
            holder=lease.holder,
            expires_at=lease.expires_at,
        )
    return lease


@op("claim", "acquire the lease on an item, or on the best ready item", who="anyone; refused (held) while someone else holds a live lease on the item.",
    mcp={"verb": "leases:claim", "summary": "take the lease on an item, or with next the best ready one (filters: "
         "labels, owner, priority); held by another: error held", "fields": ("item", "next", "ttl", "labels", "owner",
         "priority"), "rename": {"labels": "label"}, "lease": "grant"}, arbiter=True,
    item="item", next="bool", ttl="duration", labels="labels", labels_any="labels", owner="name",
    priority="priority", last="items", force="bool")
def claim(ctx: Context) -> None:
    if ctx.cmd.get("next"):
        if "item" in ctx.cmd:
            raise Invalid("give an item or --next, not both")
        item_id = _next(ctx)
        # The document in the commit names what was actually claimed: a replay on another tip
        # (sync) claims that item again rather than whatever is best there.
        ctx.cmd["item"] = item_id
        for key in ("next", "labels", "labels_any", "owner", "priority", "last"):
            ctx.cmd.pop(key, None)
        _grant(ctx, item_id, _claimable(ctx, item_id), "claim")
        return
    if any(key in ctx.cmd for key in ("labels", "labels_any", "owner", "priority", "last")):
        raise Invalid("--label, --label-any, --owner, --priority and last choose among ready items: use them with --next")
    if "item" not in ctx.cmd:
        raise Invalid("claim needs an item id, or --next")
    item_id = ctx.target()
    previous = _claimable(ctx, item_id)
    refuse_open_dependencies(ctx, item_id, "claim")
    refuse_open_waits(ctx, item_id, "claim")
    _grant(ctx, item_id, previous, "claim")


@op("takeover", "take an expired or handed-off lease", who="anyone, once the lease has expired or was handed off.", arbiter=True, item="item!", ttl="duration")
def takeover(ctx: Context) -> None:
    item_id = ctx.target()
    lease = ctx.lease(item_id)
    if lease is None or lease.state not in ("active", "handed-off"):
        raise Invalid(f"{item_id} has no lease to take over; use claim")
    _grant(ctx, item_id, _claimable(ctx, item_id), "takeover")


def _held(ctx: Context, item_id: str) -> Lease:
    lease = holder_check(ctx, item_id)
    if lease is None:
        last = ctx.lease(item_id)
        # Your own lease that ended (released, revoked, expired) is stale; never having held it is not.
        kind = Stale if last is not None and last.holder == ctx.actor else NotHolder
        raise kind(f"you hold no lease on {item_id} (you are {ctx.actor})", item=item_id, who=ctx.actor)
    if lease.holder != ctx.actor:
        # A fence is not a credential: presenting the holder's fence does not make you the holder
        # (an administrator ends someone's lease with revoke or takeover, never as them).
        raise NotHolder(f"you hold no lease on {item_id}: {lease.holder} holds it (epoch {lease.epoch}, fence "
                    f"{lease.fence}; you are {ctx.actor})", item=item_id, holder=lease.holder, who=ctx.actor)
    return lease


@op("renew", "extend the holder's lease", who=WHO_HOLDS,
    mcp={"verb": "leases:renew", "fields": ("item", "ttl", "fence"), "lease": "grant"}, arbiter=True, item="item!", ttl="duration")
def renew(ctx: Context) -> None:
    item_id = ctx.target()
    lease = _held(ctx, item_id)
    lease.ttl = usable_ttl(ctx.cmd.get("ttl") or lease.ttl, ctx.settings.clock_margin)
    lease.expires_at = format_instant(ctx.now + _dt.timedelta(seconds=lease.ttl))
    lease.renewed_at = ctx.when
    # Renewals are recorded by their commit only, not in events.log: a log line per renewal would
    # make every renewal rewrite an ever-growing blob.
    ctx.save_lease(lease)
    ctx.say(
        f"renew {item_id} by {ctx.actor} until {lease.expires_at} (epoch {lease.epoch}, fence {lease.fence})",
        item_id,
        lease_epoch=lease.epoch,
        fence=lease.fence,
    )
    ctx.outcome.result = lease_result(lease)


@op("release", "give the lease up", who=WHO_HOLDS,
    mcp={"verb": "leases:release", "fields": ("item", "fence"), "lease": "end"}, arbiter=True, item="item!")
def release(ctx: Context) -> None:
    item_id = ctx.target()
    lease = _held(ctx, item_id)
    end_lease(ctx, lease, "released")
    ctx.say(f"release {item_id} by {ctx.actor} (epoch {lease.epoch}, fence {lease.fence})", item_id,
            lease_epoch=lease.epoch, fence=lease.fence)
    ctx.outcome.result = lease_result(lease)


@op("revoke", "end someone's lease administratively", who="admins (setting `admins`); with no admins configured, any person. Agents never.",
    mcp={"verb": "leases:revoke", "fields": ("item", "reason")}, arbiter=True, roles=True, item="item!", reason="short!")
def revoke(ctx: Context) -> None:
    item_id = ctx.target()
    require_revoker(ctx, item_id)
    lease = ctx.lease(item_id)
    if lease is None or not lease.is_active():
        raise Invalid(f"{item_id} has no active lease to revoke")
    end_lease(ctx, lease, "revoked", reason=ctx.cmd["reason"])
    ctx.say(f"revoke {item_id} from {lease.holder} by {ctx.actor} (epoch {lease.epoch}, fence {lease.fence})",
            item_id, lease_epoch=lease.epoch, fence=lease.fence)
    ctx.outcome.result = lease_result(lease)


@op("handoff", "hand the lease over: the next claimant need not wait for expiry (an admin may hand off anyone's)",
    who=("the holder, under its fence (any role); once `admins` is set, also an admin, for someone "
         "else's live lease (without a fence); a person is then refused (77)."),
    mcp={"verb": "leases:handoff", "fields": ("item", "reason", "message", "to", "fence"), "lease": "end"}, arbiter=True,
    roles=True, item="item!", reason="|".join(HANDOFF_REASONS) + "!", message="text", to="name")
def handoff(ctx: Context) -> None:
    item_id = ctx.target()
    lease = ctx.lease(item_id)
    if (lease is not None and lease.is_active() and lease.holder != ctx.actor and "fence" not in ctx.cmd
            and ctx.settings.admins and ctx.settings.role(ctx.actor) != "agent"):
        # Steering (the board's hand-off), once admins are configured: an admin hands someone else's live
        # lease over (a person is refused, 77). No fence is presented for it (a fence is not a
        # credential); without admins, or for an agent, hand-off stays the holder's (_held: exit 7).
        require_steerer(ctx, item_id, f"hand off {lease.holder}'s lease on {item_id}")
    else:
        lease = _held(ctx, item_id)
    lease.handoff = {"reason": ctx.cmd["reason"], "to": ctx.cmd.get("to"), "message": ctx.cmd.get("message")}
    lease.handoff = {k: v for k, v in lease.handoff.items() if v}
    end_lease(ctx, lease, "handed-off", reason=ctx.cmd["reason"], to=ctx.cmd.get("to"))
    # The next holder reads the thread, so the handoff and its reason are posted there too (fenced:
    # _held refused above unless the author still holds this epoch).
    from .conversation import post_message

    note = post_message(ctx, item_id, "handoff", ctx.cmd.get("message") or f"handed off: {ctx.cmd['reason']}",
                        epoch=lease.epoch, to=ctx.cmd.get("to"), reason=ctx.cmd["reason"])
    ctx.say(f"handoff {item_id} by {ctx.actor} ({ctx.cmd['reason']}; epoch {lease.epoch}, fence {lease.fence})",
            item_id, lease_epoch=lease.epoch, fence=lease.fence, message_seq=note["seq"])
    ctx.outcome.result = {**lease_result(lease), "seq": note["seq"]}
