"""One thread as an op sees it, its own pending post included: resolving a message reference, posting.

Shared by the conversation ops (``ops/messages.py``) and ``handoff`` (``ops/leases.py``, which
imports it only when it runs, so ``claim`` does not load the thread format); it imports no op module.
"""

from __future__ import annotations

from .. import codec
from ..engine import Context
from ..errors import Corrupt, Invalid, NotFound
from ..thread import MessageIds, last_seq, message_at, message_ids, segment_path, split_ref

TYPE_CHECKING = False  # typing costs ~15 ms to import; annotations are strings anyway
if TYPE_CHECKING:
    from typing import Any


def _memo(ctx: Context, name: str) -> dict[str, Any]:
    return ctx.memo(name)  # per-command memo: a Context lives for one attempt


def _last(ctx: Context, item_id: str) -> int:
    memo = _memo(ctx, "_thread_last")
    if item_id not in memo:
        memo[item_id] = last_seq(ctx.snapshot, item_id)
    return memo[item_id]


def thread_ids(ctx: Context, item_id: str) -> MessageIds:
    """Every message id of the thread and its number, this command's own posts included."""
    memo = _memo(ctx, "_thread_ids")
    if item_id not in memo:
        memo[item_id] = message_ids(ctx.snapshot, item_id)
    return memo[item_id]


def message(ctx: Context, item_id: str, seq: int) -> dict[str, Any]:
    record = message_at(ctx.file, item_id, seq)
    if record is None:
        raise Corrupt(f"message #{seq} of {item_id} is missing from its segment")
    return record


def _find(ctx: Context, item_id: str, ref: int | str, what: str) -> dict[str, Any]:
    """The message a reference names, or NotFound (a number past the end is a future message)."""
    other_text, inner = split_ref(ref)
    if other_text is not None and not (isinstance(ref, str) and ref in thread_ids(ctx, item_id)):
        other = ctx.resolve(other_text)
        if other != item_id:
            raise Invalid(f"{what} {ref!r} is a message in another thread ({other}): replies stay in the thread "
                          f"of {item_id}")
        ref = inner
    if isinstance(ref, int):
        last = _last(ctx, item_id)
        if ref > last:
            raise NotFound(f"{what}: no message #{ref} in the thread of {item_id} (last is #{last})",
                           item=item_id, last=last)
        return message(ctx, item_id, ref)
    seq = thread_ids(ctx, item_id).get(ref)
    if seq is None:
        raise NotFound(f"{what}: no message with id {ref!r} in the thread of {item_id}", item=item_id)
    return message(ctx, item_id, seq)


def resolve_message(ctx: Context, item_id: str, field: str, what: str) -> dict[str, Any]:
    """The message the command's ``field`` names (a number, ``#N``, ``ITEM:N`` or an id), on this tip.

    Like ``Context.target()`` for items, the document then records the message's id: numbers are
    assigned on the tip a command lands on, so a replay onto another tip must name the message by id.
    """
    record = _find(ctx, item_id, ctx.cmd[field], what)
    ctx.cmd[field] = record["id"]
    return record


def post_message(ctx: Context, item_id: str, kind: str, text: str, *, epoch: int, to: str | None = None,
                 reply_to: int | None = None, msg_id: str | None = None, **extra: Any) -> dict[str, Any]:
    """Append one message, numbered after the thread's last; its id is the command's id (or ``msg_id``:
    an imported comment keeps an id of its own, so a re-import finds it)."""
    msg_id = msg_id or ctx.cmd["id"]
    ids = thread_ids(ctx, item_id)
    if msg_id in ids:
        raise Invalid(f"message id {msg_id!r} is already used by #{ids[msg_id]} in the thread of {item_id}")
    seq = _last(ctx, item_id) + 1
    record: dict[str, Any] = {"seq": seq, "id": msg_id, "at": ctx.when, "by": ctx.actor, "kind": kind, "epoch": epoch}
    if to:
        record["to"] = to
    if reply_to is not None:
        record["reply_to"] = reply_to
    record["text"] = text
    record.update({k: v for k, v in extra.items() if v is not None})
    path = segment_path(item_id, seq)
    ctx.outcome.changes[path] = (ctx.file(path) or b"") + codec.encode_record(record)
    _memo(ctx, "_thread_last")[item_id] = seq
    ids[msg_id] = seq
    return record
