"""Delegation records: a request sent to a peer or received from one, with the peer's signed receipt.

One file per request and side, ``delegations/<sent|received>/<shard>/<request id>.yaml``: the
request's exact signed text and signature, the receipt's and its signature, so ``gw receipts
verify`` can check both signatures and the chain request -> receipt at any later time; and, when
the item exists in this state, a ``delegation`` event in its ``events.log``.

Both ops are **record ops** (``internal=True``): only gitwork's delegation procedures write them,
after they have verified the signatures (the engine runs no ``ssh-keygen``; it checks what it can
alone: the documents parse and the receipt's digest names the request). A record is written once:
the same again changes nothing (a retry), a different one under the same request id is refused.
"""

from __future__ import annotations

from .. import codec, layout
from ..engine import Context, op
from ..errors import Invalid
from ..records import protocol
from ..records.delegations import derive, record_path

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

FIELDS: dict[str, Any] = dict(peer="name!", request="text!", request_signature="text!", receipt="text!", receipt_signature="text!")


def _record(ctx: Context, side: str) -> None:
    record = derive(side, ctx.cmd["peer"], ctx.cmd["request"], ctx.cmd["request_signature"], ctx.cmd["receipt"],
                    ctx.cmd["receipt_signature"])
    request = protocol.parse_request(ctx.cmd["request"])
    receipt = protocol.parse_receipt(ctx.cmd["receipt"])
    path = record_path(side, request["id"])
    earlier = ctx.file(path)
    if earlier is not None:
        if codec.load_yaml(earlier, what=path) == record:
            ctx.outcome.result = {"delegation": request["id"], "recorded": False}
            return  # the same record again: a retry, nothing changes
        raise Invalid(f"delegation {request['id']} is recorded already with another receipt", delegation=request["id"])
    ctx.outcome.changes[path] = codec.dump_yaml(record)
    item = request.get("item")
    if item and ctx.file(layout.item_path(item, layout.ITEM_FILE)) is not None:
        ctx.event(item, "delegation", delegation=request["id"], side=side, peer=ctx.cmd["peer"], delegated=request["op"],
                  outcome=receipt["outcome"], epoch=receipt.get("epoch"), fence=receipt.get("fence"))
    word = "to" if side == "sent" else "from"
    ctx.say(f"delegation-{side} {request['op']} {item or ''} {word} {ctx.cmd['peer']}: {receipt['outcome']}".replace("  ", " "),
            item, delegation=request["id"], peer=ctx.cmd["peer"])
    ctx.outcome.result = {"delegation": request["id"], "recorded": True}


@op("delegation-sent", "record a delegation request sent to a peer and the receipt it signed", internal=True,
    **FIELDS)
def delegation_sent(ctx: Context) -> None:
    _record(ctx, "sent")


@op("delegation-received", "record a delegation request received from a peer and the receipt signed here",
    internal=True, **FIELDS)
def delegation_received(ctx: Context) -> None:
    _record(ctx, "received")
