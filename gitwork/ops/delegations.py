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

import hashlib

from .. import codec, layout
from ..delegation import protocol
from ..engine import Context, op
from ..errors import Invalid

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

DELEGATIONS = "delegations"
FIELDS: dict[str, Any] = dict(peer="name!", request="text!", request_signature="text!", receipt="text!", receipt_signature="text!")


def record_path(side: str, request_id: str) -> str:
    shard = hashlib.sha1(request_id.encode()).hexdigest()[:2]
    return f"{DELEGATIONS}/{side}/{shard}/{request_id}.yaml"


def derive(side: str, peer: str, request_text: str, request_signature: str, receipt_text: str,
           receipt_signature: str) -> dict[str, Any]:
    """The record of one exchange, every field taken from the signed request and receipt (``side`` and
    ``peer`` excepted: the folder it is stored in, and whose key signed). ``gw receipts verify``
    derives it again from a stored record's texts and compares every field."""
    request = protocol.parse_request(request_text)
    receipt = protocol.parse_receipt(receipt_text)
    if not protocol.chained(request_text, receipt):
        raise Invalid(f"the receipt does not answer request {request['id']} (id or request digest differ)")
    record = {"request_id": request["id"], "side": side, "peer": peer, "op": request["op"],
              "item": request.get("item"), "outcome": receipt["outcome"], "at": receipt["at"],
              "execution": receipt.get("execution") or request["args"].get("execution"),
              "epoch": receipt.get("epoch"), "fence": receipt.get("fence"),
              "request": request_text, "request_signature": request_signature,
              "receipt": receipt_text, "receipt_signature": receipt_signature}
    return {k: v for k, v in record.items() if v is not None}


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


def stored(snapshot: Any, side: str | None = None) -> list[tuple[str, dict[str, Any]]]:
    """``(path, record)`` of every delegation record at ``snapshot`` (``side``: only ``sent`` or
    ``received``), oldest first."""
    rows = []
    for each in (side,) if side else ("sent", "received"):
        for shard, entry in snapshot.tree(f"{DELEGATIONS}/{each}").items():
            for name, blob in snapshot.store.read_tree(entry.oid).items():
                path = f"{DELEGATIONS}/{each}/{shard}/{name}"
                rows.append((path, codec.load_yaml(snapshot.store.read_blob(blob.oid), what=path)))
    rows.sort(key=lambda r: (str(r[1].get("at")), str(r[1].get("request_id", ""))))
    return rows


def records(snapshot: Any, side: str | None = None) -> list[dict[str, Any]]:
    """Every delegation record at ``snapshot`` (``side``: only ``sent`` or ``received``), oldest first."""
    return [record for _path, record in stored(snapshot, side)]


def find(snapshot: Any, side: str, request_id: str) -> dict[str, Any] | None:
    data = snapshot.blob(record_path(side, request_id))
    return codec.load_yaml(data, what=record_path(side, request_id)) if data else None
