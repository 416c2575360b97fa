"""Who may do what: the roles of the settings ``admins`` and ``agents`` (everyone else is a person).

The rules (docs/leases.md, "Roles"), checked by the ops on the exact state a command extends:

- ``revoke``: admins. With no ``admins`` configured (a fresh repository), any person, as before
  roles existed; agents never.
- ``handoff`` of someone else's live lease (the board's steering): admins, once ``admins`` is
  configured (a person is refused); without admins, hand-off stays the holder's (exit 7, as before).
  ``exec-stop`` of someone else's execution: as ``revoke``. A holder hands off its own lease, and
  whoever started an execution may ask for it to stop, whatever their role.
- ``decide``: admins, and the person the decision request was addressed to (``--to``). With no
  ``admins`` configured, any person. Agents never.
- The item's owner (its creator when no owner is named) and admins may change the title, labels and
  dependencies of an item someone else holds (``edit``), the rest stays the holder's: curating the
  backlog must not wait for a lease to end.
- Agents act on an item (``edit``, ``check``, ``decision``, ``done``, ``cancel``, ``reopen``) only
  while they hold its lease; a person may also act on an item nobody holds.
- ``ask`` (and ``msg --kind decision-request``): only the holder, under its live fence, whatever its
  role (``ops/messages.py``): asking makes the item wait, so nobody else may make it wait. Everyone
  may post a ``question``, which blocks nothing.

A refusal is :class:`Forbidden` (exit 77). These checks run in every gitwork process, which makes
them advice to honest clients: an identity is whatever ``--as`` says. docs/leases.md says where they
are enforced.
"""

from __future__ import annotations

from .errors import Forbidden, NotHolder, Stale

TYPE_CHECKING = False  # typing costs ~15 ms to import; annotations are strings anyway
if TYPE_CHECKING:
    from typing import Any

    from .engine import Context
    from .model import Item, Lease

# What the owner and admins may change on an item someone else holds (``edit``'s fields).
CURATED = frozenset(("title", "labels", "add_labels", "remove_labels", "add_deps", "remove_deps", "budget"))


# Who may submit the ops these rules guard, in words for people (each op's ``who=``; docs/api.md).
WHO_ACTS_ON = ("the holder, under its fence; while nobody holds a live lease, any person or admin. An agent only "
               "while it holds the lease.")
WHO_HOLDS = "only the holder of the item's live lease (any role), under its fence."


def _you(ctx: Context) -> str:
    return f"you are {ctx.actor} ({ctx.settings.role(ctx.actor)})"


def _admins(ctx: Context) -> str:
    return ", ".join(ctx.settings.admins)


def require_revoker(ctx: Context, item_id: str) -> None:
    """Refuse ``revoke`` unless the actor is an admin (or, with no admins configured, a person)."""
    role = ctx.settings.role(ctx.actor)
    if ctx.settings.admins and role != "admin":
        raise Forbidden(f"only an admin may revoke the lease on {item_id} (setting 'admins': {_admins(ctx)}); "
                        f"{_you(ctx)}", item=item_id, who=ctx.actor, role=role)
    if role == "agent":
        raise Forbidden(f"agents may not revoke (setting 'agents'); {_you(ctx)}: ask a person or an admin to revoke "
                        f"{item_id}", item=item_id, who=ctx.actor, role=role)


def require_steerer(ctx: Context, item_id: str, what: str) -> None:
    """Refuse steering someone else's work (``what``: "hand off bot's lease on w-1", ...) unless the
    actor is an admin (or, with no admins configured, a person): the rule of ``revoke``."""
    role = ctx.settings.role(ctx.actor)
    if ctx.settings.admins and role != "admin":
        raise Forbidden(f"only an admin may {what} (setting 'admins': {_admins(ctx)}); {_you(ctx)}",
                        item=item_id, who=ctx.actor, role=role)
    if role == "agent":
        raise Forbidden(f"agents may not {what} (setting 'agents'); {_you(ctx)}: ask a person or an admin",
                        item=item_id, who=ctx.actor, role=role)


def require_decider(ctx: Context, item_id: str, question: dict[str, Any]) -> None:
    """Refuse ``decide`` unless the actor is an admin or the person the request was addressed to.

    With no admins configured, any person may decide; an agent never may.
    """
    role = ctx.settings.role(ctx.actor)
    seq = question.get("seq")
    if role == "agent":
        raise Forbidden(f"{ctx.actor} is listed as an agent (setting 'agents'): agents may ask, but only a person "
                        f"may decide on {item_id}", item=item_id, who=ctx.actor, role=role)
    if ctx.settings.admins and role != "admin" and question.get("to") != ctx.actor:
        to = f"addressed to {question['to']}" if question.get("to") else "addressed to nobody"
        raise Forbidden(f"#{seq} of {item_id} is {to}: only that person or an admin (setting 'admins': "
                        f"{_admins(ctx)}) may decide it; {_you(ctx)}", item=item_id, who=ctx.actor, role=role)


def holder_check(ctx: Context, item_id: str) -> Lease | None:
    """``ctx.require_holder``, with the refusal naming who you are as well as who holds the item."""
    try:
        return ctx.require_holder(item_id)
    except Stale as error:
        holder = error.details.get("holder")
        if holder and holder != ctx.actor and "you are" not in error.message:
            error.message = f"{error.message} (you are {ctx.actor})"
            error.args = (error.message,)
            error.details.setdefault("who", ctx.actor)
        raise


def act_on(ctx: Context, item_id: str) -> Lease | None:
    """The fencing rule for commands that change an item, plus the agents' rule: hold it to act on it."""
    lease = holder_check(ctx, item_id)
    if lease is None and ctx.settings.role(ctx.actor) == "agent":
        raise Forbidden(f"{ctx.actor} is listed as an agent (setting 'agents'): agents act only on items they hold, "
                        f"and {ctx.actor} holds no lease on {item_id}: claim it first", item=item_id,
                        who=ctx.actor, role="agent")
    return lease


def curator(ctx: Context, item: Item) -> bool:
    """Whether the actor owns the item (or created it, when no owner is named) or is an admin."""
    owner = item.owner or (item.provenance or {}).get("by")
    return ctx.actor == owner or ctx.settings.role(ctx.actor) == "admin"


def edit_on(ctx: Context, item: Item, fields: set[str]) -> None:
    """``act_on`` for ``edit``: the owner and admins may change the ``CURATED`` fields of an item someone
    else holds, without its lease (and without a fence: the holder's fence is not theirs to present)."""
    try:
        act_on(ctx, item.id)
    except NotHolder as error:
        if not curator(ctx, item) or "fence" in ctx.cmd:
            raise
        if fields - CURATED:
            error.message = (f"{error.message}; as its owner or an admin you may change only the title, labels and "
                             f"dependencies (and its budget) of an item someone else holds (not {', '.join(sorted(fields - CURATED))})")
            error.args = (error.message,)
            raise


# Who may declare a command wait, and who may end any wait (ops/waits.py; docs/everyday.md, "Waiting on
# events"): a command wait runs a program on the coordinator's host, and ending a wait makes an item
# ready, so neither is left to whoever holds the item (an agent would end its own gate).
WHO_RUNS = ("a ref wait: as edit (the holder, or any person or admin while nobody holds it); a command wait "
            "(it runs on the coordinator's host): admins and the item's owner, with no admins configured any "
            "person; agents never.")
WHO_GATES = ("admins, and the person who declared the wait; with no admins configured, any person. Agents never "
             "(the coordinator records outcomes under its own identity, which must be allowed).")


def require_command_waiter(ctx: Context, item: Item) -> None:
    """Refuse declaring a command wait unless the actor is an admin or the item's owner (with no admins
    configured, any person); an agent never, whatever else it is."""
    role = ctx.settings.role(ctx.actor)
    what = f"declare a command wait on {item.id} (the coordinator runs it on its host)"
    if role == "agent":
        raise Forbidden(f"agents may not {what}; {_you(ctx)}", item=item.id, who=ctx.actor, role=role)
    if ctx.settings.admins and role != "admin" and not curator(ctx, item):
        raise Forbidden(f"only an admin or the item's owner may {what} (setting 'admins': {_admins(ctx)}); "
                        f"{_you(ctx)}", item=item.id, who=ctx.actor, role=role)


def require_gatekeeper(ctx: Context, item_id: str, wait: dict[str, Any]) -> None:
    """Refuse recording a wait's outcome (or ending it) unless the actor is an admin or declared it (with no
    admins configured, any person); an agent never: a forged "satisfied" would make its item ready."""
    role = ctx.settings.role(ctx.actor)
    what = f"end the {wait.get('kind')} wait {wait.get('id')} of {item_id}"
    if role == "agent":
        raise Forbidden(f"agents may not {what}; {_you(ctx)}", item=item_id, who=ctx.actor, role=role)
    if ctx.settings.admins and role != "admin" and wait.get("by") != ctx.actor:
        raise Forbidden(f"only an admin or its declarer ({wait.get('by')}) may {what} (setting 'admins': "
                        f"{_admins(ctx)}); {_you(ctx)}", item=item_id, who=ctx.actor, role=role)
