"""Conversation ops: msg, ack, ask, decide (the thread format is ``gitwork/thread.py``; posting and
resolving a message reference are in ``ops/conversation.py``, which ``handoff`` shares).

Every op here is a pure function of (snapshot, command, now): sequence numbers are assigned on the
tip the command is applied to, and a message reference given as a number is resolved here and
recorded in the document as the message's id, so a CAS retry (or a replay onto another machine's
tip) renumbers without changing what a command means.

The epoch rule, shared by all four: a message (or acknowledgement) from the item's holder is fenced
(``require_holder``: ``--fence``/``GW_FENCE`` or the holder by name); anyone else's carries the lease
epoch they read (``epoch``; ``"current"``, what the faces send when none is given, reads it on the
tip the command is applied to and records the number), and an ack or decision written under an
epoch older than the item's current one is refused as :class:`Stale`, naming the current epoch, so
nobody answers a conversation whose owner changed without noticing. A ``msg`` by a non-holder is
not refused for its epoch: it is recorded under the epoch it was written under, so its record
replays on any later tip as it was first applied (``stance(bygone=True)``).
"""

from __future__ import annotations

from ..engine import Context, op
from ..errors import Forbidden, Illegal, Invalid, Stale
from ..model import CLOSED, Lease
from ..roles import holder_check, require_decider
from ..thread import POST_KINDS, cursors_path, dump_cursors, load_cursors, replay
from .conversation import message, post_message, resolve_message, thread_ids

TYPE_CHECKING = False  # typing costs ~15 ms to import; annotations are strings anyway
if TYPE_CHECKING:
    from typing import Any



# --- the epoch rule --------------------------------------------------------------------------------


def stance(ctx: Context, item_id: str, *, bygone: bool = False) -> tuple[int, Lease | None]:
    """The epoch the author writes under, and the lease if the author acts as its holder.

    ``bygone`` (``msg``): a message by someone not acting as the holder (no fence in the document)
    written under an older epoch is not refused: it lands recorded under the epoch it was written
    under, so the new owner sees whom it was addressed to. Its record then replays on any later tip
    (a ``gw sync`` after a claim landed on the arbiter, the arbiter's hook) exactly as it was first
    applied, instead of an ``exit 0`` turning into a refusal later. A holder's message stays fenced.
    """
    lease = ctx.lease(item_id)
    given = ctx.cmd.get("epoch")
    if given == "current":
        # The author asks for the epoch as it is now: read on the tip the command lands on, and
        # recorded, so the stored document (and a replay of it elsewhere) carries the number.
        given = lease.epoch if lease is not None else 0
        ctx.cmd["epoch"] = given
    if bygone and ctx.cmd.get("fence") is None and type(given) is int and lease is not None \
            and 0 <= given < lease.epoch:
        return given, None
    as_holder = lease is not None and lease.is_active() and lease.holder == ctx.actor
    if ctx.cmd.get("fence") is not None or as_holder:
        held = holder_check(ctx, item_id)  # Stale when the fence is old or the lease ran out
        assert held is not None
        if given is not None and given < held.epoch:
            raise Stale(f"you read epoch {given} of {item_id}; it is at epoch {held.epoch}", item=item_id,
                        epoch=held.epoch)
        if given is not None and given > held.epoch:
            raise Invalid(f"epoch {given} of {item_id} does not exist (current epoch {held.epoch})")
        return held.epoch, held
    current = lease.epoch if lease is not None else 0
    if given is None:
        raise Invalid(f"a message or ack from someone not holding {item_id} must carry the lease epoch it was "
                      f"written under ('epoch'; {item_id} is at epoch {current})")
    if given < current:
        assert lease is not None
        raise Stale(
            f"{item_id} is at epoch {current} (holder {lease.holder}, {lease.state}) but you read epoch {given}: "
            "re-read the thread before writing to it",
            item=item_id, epoch=current, holder=lease.holder,
        )
    if given > current:
        raise Invalid(f"epoch {given} of {item_id} does not exist (current epoch {current})")
    return current, None


# --- who may post ----------------------------------------------------------------------------------

# The sources of authority to post on an item's thread, in the order they are asked (the first that
# grants answers; the order is the cost order: the thread is read only when nothing cheaper granted).
# Pinned by tests/test_conversation_scope.py; docs/leases.md, "Who may post".
POST_AUTHORITY = ("holder", "owner", "admin", "people", "addressee")


def post_authority(ctx: Context, item_id: str) -> str | None:
    """Which source lets ``ctx.actor`` post on ``item_id`` (one of :data:`POST_AUTHORITY`), or None."""
    who = ctx.actor
    for source in POST_AUTHORITY:
        if source == "holder":
            lease = ctx.lease(item_id)
            if lease is not None and lease.is_active() and lease.holder == who:
                return source
        elif source == "owner":
            item = ctx.item(item_id)  # its `owner`; while it names none, whoever created it
            if who == (item.owner if item.owner else (item.provenance or {}).get("by")):
                return source
        elif source == "admin":
            if who in ctx.settings.admins:
                return source
        elif source == "people":
            if who in ctx.settings.people:
                return source
        elif any(record.get("to") == who for record in replay(ctx.snapshot, item_id)):
            return source  # "addressee": a message of its thread is addressed to them
    return None


def require_poster(ctx: Context, item_id: str) -> str:
    """Refuse a post by anyone no source of :data:`POST_AUTHORITY` lets post (exit 77)."""
    source = post_authority(ctx, item_id)
    if source is None:
        raise Forbidden(f"only its holder, its owner (its creator while it names none), an admin, a person listed in 'people' (.workplane) "
                        f"or someone its thread addresses may post on {item_id} (you are {ctx.actor})",
                        item=item_id, who=ctx.actor)
    return source


# --- shared pieces ---------------------------------------------------------------------------------


def _text(ctx: Context, key: str = "text") -> str:
    text = ctx.cmd[key]
    if not text.strip():
        raise Invalid(f"{'the message' if key == 'text' else key} must not be empty")
    return text


def _view(item_id: str, record: dict[str, Any]) -> dict[str, Any]:
    keys = ("seq", "id", "kind", "epoch", "by", "at", "to", "reply_to")
    return {"item": item_id, **{k: record[k] for k in keys if k in record}}


def _landed(ctx: Context, item_id: str, kind: str, text: str) -> bool:
    """A retried post (same message id) lands once: report the first landing and change nothing."""
    seq = thread_ids(ctx, item_id).get(ctx.cmd["id"])
    if seq is None:
        return False
    record = message(ctx, item_id, seq)
    if (record.get("by"), record.get("kind"), record.get("text")) != (ctx.actor, kind, text):
        raise Invalid(f"message id {ctx.cmd['id']!r} is already used by #{seq} in the thread of {item_id} "
                      "for a different message")
    ctx.say(f"{ctx.cmd['op']} {item_id}: already posted as #{seq}", item_id)
    ctx.outcome.result = {**_view(item_id, record), "duplicate": True}
    return True


def _said(ctx: Context, item_id: str, record: dict[str, Any], held: Lease | None, verb: str) -> None:
    to = f" to {record['to']}" if record.get("to") else ""
    ctx.say(
        f"{verb} {item_id} #{record['seq']} by {ctx.actor} ({record['kind']}{to}; epoch {record['epoch']})",
        item_id, lease_epoch=record["epoch"], fence=held.fence if held else None, message_seq=record["seq"],
    )
    ctx.outcome.result = _view(item_id, record)


# --- ops -------------------------------------------------------------------------------------------


@op("msg", "post a message to an item's thread", who=("its holder, its owner (its creator while it names none), admins (setting `admins`), persons listed in "
         "`people`, and anyone a message of its thread is addressed to; others are forbidden. Someone who does "
         "not hold the item gives the lease epoch it read (`epoch`); `kind: decision-request` is an `ask`: the "
         "holder only."),
    mcp={"verb": "messages:msg", "fields": ("item", "text", "kind", "reply_to", "to", "fence")}, roles=True, item="item!", text="text!", kind="|".join(POST_KINDS),
    reply_to="msgref", to="name", epoch="epoch", options="texts")
def msg(ctx: Context) -> None:
    item_id = ctx.target()
    ctx.item(item_id)
    kind = ctx.cmd.get("kind", "note")
    if _landed(ctx, item_id, kind, ctx.cmd["text"]):
        return
    if kind == "decision-request":
        _ask(ctx, item_id)  # a decision request posted as a message is an ask: it marks the item waiting
        return
    if ctx.cmd.get("options"):
        raise Invalid("options go with a decision request (gw ask, or --kind decision-request)")
    text = _text(ctx)
    epoch, held = stance(ctx, item_id, bygone=True)  # first: a lost lease's fence is 7, as for every fenced command
    require_poster(ctx, item_id)
    reply_to = resolve_message(ctx, item_id, "reply_to", "reply_to")["seq"] if "reply_to" in ctx.cmd else None
    record = post_message(ctx, item_id, kind, text, epoch=epoch, to=ctx.cmd.get("to"), reply_to=reply_to)
    _said(ctx, item_id, record, held, "msg")


@op("ack", "move your read or responded cursor on an item's thread", who="anyone; it moves the acting identity's own cursors.",
    mcp={"verb": "messages:ack", "fields": ("item", "upto", "read", "responded", "reply"),
         "rename": {"upto": "seq", "reply": "by"}}, item="item!", upto="msgref!", read="bool",
    responded="bool", reply="msgref", epoch="epoch")
def ack(ctx: Context) -> None:
    item_id = ctx.target()
    ctx.item(item_id)
    responded = bool(ctx.cmd.get("responded"))
    if responded and "reply" not in ctx.cmd:
        raise Invalid("responded needs the reply that answers it ('reply'; gw ack --responded needs --by REPLY_SEQ)")
    if not responded and "reply" in ctx.cmd:
        raise Invalid("a reply (--by) goes with --responded")
    epoch, held = stance(ctx, item_id)
    upto = resolve_message(ctx, item_id, "upto", "SEQ")["seq"]
    path = cursors_path(item_id)
    marks = load_cursors(ctx.file(path), item_id)
    mine = dict(marks.get(ctx.actor) or {"read": 0, "responded": 0})
    before = (mine.get("read", 0), mine.get("responded", 0))
    if responded:
        reply = resolve_message(ctx, item_id, "reply", "--by")
        if reply.get("by") != ctx.actor:
            raise Invalid(f"#{reply['seq']} was written by {reply.get('by')}: a response must be your own message")
        if reply["seq"] <= upto:
            raise Invalid(f"#{reply['seq']} does not come after #{upto}, so it cannot answer it")
        if reply.get("reply_to") is not None and reply["reply_to"] < upto:
            # A reply to an earlier message does not answer this one (a reply to a later message
            # does: cursors are prefixes).
            raise Invalid(f"#{reply['seq']} answers #{reply['reply_to']}, which is before #{upto}: it does not "
                          f"answer #{upto}")
        if upto > mine.get("responded", 0):
            mine["responded"], mine["reply"] = upto, reply["seq"]
    mine["read"] = max(mine.get("read", 0), upto)  # responded implies read
    after = (mine["read"], mine.get("responded", 0))
    result = {"item": item_id, "who": ctx.actor, "read": after[0], "responded": after[1], "epoch": epoch}
    if after == before:
        # Cursors never move backwards: acknowledging what is already acknowledged changes nothing.
        ctx.outcome.result = {**result, "unchanged": True}
        return
    mine["at"] = ctx.when
    marks[ctx.actor] = {"read": mine["read"], "responded": mine.get("responded", 0),
                        **{k: mine[k] for k in ("reply", "at") if k in mine}}
    ctx.outcome.changes[path] = dump_cursors(marks)
    what = f"responded #{after[1]} (by #{mine['reply']})" if after[1] != before[1] else f"read #{after[0]}"
    ctx.say(f"ack {item_id} by {ctx.actor}: {what}", item_id, lease_epoch=epoch, fence=held.fence if held else None)
    ctx.outcome.result = result


def _ask(ctx: Context, item_id: str) -> None:
    text = _text(ctx)
    options = list(ctx.cmd.get("options") or [])
    if len(set(options)) != len(options):
        raise Invalid("the options of a decision request must differ")
    item = ctx.item(item_id)
    if item.status in CLOSED:
        raise Illegal(f"{item_id} is {item.status}; reopen it before asking for a decision")
    epoch, held = stance(ctx, item_id)
    if held is None or held.holder != ctx.actor:  # the holder by name, and under the live fence
        _outsider_asks(ctx, item_id, held)
    if item.waiting:
        raise Illegal(f"{item_id} already waits for a decision on #{item.waiting.get('seq')}: decide that first")
    record = post_message(ctx, item_id, "decision-request", text, epoch=epoch, to=ctx.cmd.get("to"),
                          options=options or None)
    item.waiting = {"seq": record["seq"], "by": ctx.actor, "at": ctx.when, "question": text, "options": options,
                    "status": item.status}
    item.status = "blocked"  # waiting for a person: out of `gw ready` until decided
    ctx.save_item(item)
    ctx.event(item_id, "waiting", message=record["seq"], options=options or None)
    _said(ctx, item_id, record, held, "ask")


def _outsider_asks(ctx: Context, item_id: str, held: Lease | None) -> None:
    """Only the holder, under its live fence, may make an item wait; everyone else posts a question.

    An item nobody holds is no exception: a waiting item leaves ``gw ready``, so an ask on it would
    let anyone park any free item. The holder asks; others ask the holder (or whoever) a question.
    """
    lease = ctx.lease(item_id)
    instead = f"post a question instead, which blocks nothing: gw msg {item_id} TEXT --kind question"
    if lease is not None and (not lease.takeable(ctx.now, ctx.settings.clock_margin) or held is not None):
        # Someone else's live lease; also its live fence given by anyone but its holder: a fence shows
        # which lease a command acts under, it does not make its bearer the holder.
        raise Forbidden(f"only the holder of {item_id} ({lease.holder}) may ask for a decision, which makes the item "
                        f"wait; you are {ctx.actor}: {instead}", item=item_id, holder=lease.holder, who=ctx.actor)
    raise Forbidden(f"nobody holds {item_id}: only its holder may ask for a decision, which makes the item wait; "
                    f"claim it first, or {instead}", item=item_id, who=ctx.actor)


@op("ask", "ask for a decision: posts a decision request and marks the item waiting", who="only the holder, under its live fence (any role): asking makes the item wait.",
    mcp={"verb": "messages:ask", "fields": ("item", "text", "options", "to", "fence"),
         "rename": {"text": "question", "options": "option"}}, roles=True, item="item!",
    text="text!", options="texts", to="name", epoch="epoch")
def ask(ctx: Context) -> None:
    item_id = ctx.target()
    ctx.item(item_id)
    if _landed(ctx, item_id, "decision-request", ctx.cmd["text"]):
        return
    _ask(ctx, item_id)


@op("decide", "answer a decision request: records a decision on the item and unblocks it", who=("admins, and the person the decision request was addressed to (`to`); with no admins "
         "configured, any person. Agents never."),
    mcp={"verb": "messages:decide", "fields": ("item", "question", "choose", "why"), "rename": {"question": "seq"}}, roles=True, item="item!",
    question="msgref!", choose="short!", why="text!", epoch="epoch")
def decide(ctx: Context) -> None:
    from .common import record_decision  # only decide records a decision: msg and ack need not load it

    item_id = ctx.target()
    item = ctx.item(item_id)
    if _landed(ctx, item_id, "decision", ctx.cmd["why"]):
        return
    if ctx.settings.role(ctx.actor) == "agent":  # before anything else: no answer about the thread helps an agent
        require_decider(ctx, item_id, {"seq": ctx.cmd["question"]})
    why = _text(ctx, "why")
    choose = ctx.cmd["choose"]
    epoch, held = stance(ctx, item_id)
    question = resolve_message(ctx, item_id, "question", "SEQ")
    qseq = question["seq"]
    if question.get("kind") != "decision-request":
        raise Invalid(f"#{qseq} of {item_id} is a {question.get('kind')}, not a decision request")
    if question.get("imported_by"):  # its `by` and `to` are the source's word, not an ask made here
        raise Invalid(f"#{qseq} of {item_id} was imported by {question['imported_by']}: a decision request asked "
                      "in another tracker is not one here; its holder asks again with gw ask")
    require_decider(ctx, item_id, question)
    earlier = [d for d in item.decisions if d.get("question") == qseq]
    if earlier:
        raise Illegal(f"#{qseq} of {item_id} was already decided: {earlier[0].get('text')!r} "
                      f"(decision {earlier[0].get('number')})")
    options = question.get("options") or []
    if options and choose not in options:
        raise Invalid(f"choose one of {', '.join(map(repr, options))} (got {choose!r})")
    record = post_message(ctx, item_id, "decision", why, epoch=epoch, to=question.get("by"), reply_to=qseq,
                          choice=choose)
    waiting = item.waiting
    if waiting and waiting.get("seq") == qseq:
        item.waiting = None
        if item.status == "blocked" and waiting.get("status") != "blocked":
            lease = ctx.lease(item_id)
            item.status = "in_progress" if lease is not None and lease.is_active() else "open"
    entry = record_decision(ctx, item_id, choose, why, question=qseq, message=record["seq"])
    _said(ctx, item_id, record, held, "decide")
    ctx.say(f"decide {item_id} #{qseq} by {ctx.actor}: {choose}", item_id, lease_epoch=epoch,
            fence=held.fence if held else None, message_seq=record["seq"])
    ctx.outcome.result = {**_view(item_id, record), "question": qseq, "choice": choose, "decision": entry["number"],
                          "status": item.status}
