"""What more than one op module does: end a lease, record a decision (posting to a thread, which
``handoff`` shares with the conversation ops, is ``ops/conversation.py``).

Kept below ``items``, ``leases``, ``messages`` and ``sessions`` (it imports none of them), so ``done``
can end a lease and ``decide`` can record a decision without the op modules importing each other.
"""

from __future__ import annotations

from ..engine import Context
from ..errors import Illegal, Invalid
from ..model import Lease

TYPE_CHECKING = False  # typing costs ~15 ms to import; annotations are strings anyway
if TYPE_CHECKING:
    from typing import Any


def end_lease(ctx: Context, lease: Lease, state: str, reason: str | None = None, **extra: object) -> None:
    lease.state = state
    lease.ended_at = ctx.when
    lease.ended_by = ctx.actor
    lease.reason = reason
    ctx.save_lease(lease)
    if lease.paths:  # its globs are free again (gitwork/pathleases.py)
        from ..pathleases import drop

        drop(ctx, lease.item)
    item = ctx.item(lease.item)
    if item.status == "in_progress":
        item.status = "open"
        ctx.save_item(item)
    verb = {"released": "released", "revoked": "revoked", "handed-off": "handoff"}[state]
    ctx.event(lease.item, verb, epoch=lease.epoch, fence=lease.fence, holder=lease.holder, reason=reason, **extra)


def record_decision(ctx: Context, item_id: str, text: str, why: str, **extra: Any) -> dict[str, Any]:
    item = ctx.item(item_id)
    entry = {"number": len(item.decisions) + 1, "text": text, "rationale": why, "by": ctx.actor, "at": ctx.when, **extra}
    item.decisions = [*item.decisions, entry]
    ctx.save_item(item)
    ctx.event(item_id, "decision", number=entry["number"], text=text, rationale=why)
    ctx.say(f"decision on {item_id} by {ctx.actor}: {text}", item_id, fence=ctx.cmd.get("fence"))
    ctx.outcome.result = {"item": item_id, "decision": entry["number"]}
    return entry


def check_cycle(ctx: Context, item_id: str, deps: list[str]) -> None:
    """Refuse if ``item_id`` is reachable from any of ``deps`` (the new edges would close a loop)."""
    seen: set[str] = set()
    stack = [(d, [item_id, d]) for d in deps]
    while stack:
        current, path = stack.pop()
        if current == item_id:
            raise Invalid("dependency cycle: " + " -> ".join(path))
        if current in seen:
            continue
        seen.add(current)
        for nxt in ctx.item(current).depends_on:
            stack.append((nxt, [*path, nxt]))


def parent_of(ctx: Context, item_id: str) -> str | None:
    """``item_id``'s parent, remembered for the command: the memo is shared by the members of a batch, so
    a chain is read once per command, not once per member (an import of thousands); every op that sets
    a parent notes it (:func:`note_parent`)."""
    parents = ctx.memo("parents")
    if item_id not in parents:
        parents[item_id] = ctx.item(item_id).parent
    return parents[item_id]


def note_parent(ctx: Context, item_id: str, parent: str | None) -> None:
    ctx.memo("parents")[item_id] = parent


def refuse_open_dependencies(ctx: Context, item_id: str, verb: str) -> None:
    """Refuse (exit 6) to ``verb`` an item whose dependencies are not all done, unless ``force``: working on
    it, or closing it, before what it waits on is the mistake ``gw ready`` exists to avoid."""
    if ctx.cmd.get("force"):
        return
    waiting = [dep for dep in ctx.item(item_id).depends_on if ctx.item(dep).status != "done"]
    if waiting:
        named = ", ".join(f"{dep} ({ctx.item(dep).status})" for dep in waiting)
        raise Illegal(f"{item_id} depends on {named}: finish {'it' if len(waiting) == 1 else 'them'} first, or "
                      f"{verb} with --force", item=item_id, open=waiting)


def refuse_open_waits(ctx: Context, item_id: str, verb: str) -> None:
    """Refuse (exit 6) to ``verb`` an item that waits on a timer not yet passed, a ref or a command
    (ops/waits.py), unless ``force``: the same rule as open dependencies, and the same override."""
    if ctx.cmd.get("force"):
        return
    from ..model import describe_wait, open_waits

    waiting = open_waits(ctx.item(item_id).waits, ctx.now)
    if waiting:
        named = "; ".join(f"{describe_wait(w)} (wait {w['id']})" for w in waiting)
        raise Illegal(f"{item_id} is waiting on {named}: wait for it, or {verb} with --force", item=item_id,
                      waits=[w["id"] for w in waiting])
