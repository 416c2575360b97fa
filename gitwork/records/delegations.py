"""Delegation records (docs/security.md): ``delegations/<sent|received>/<shard>/<request id>.yaml``,
each derived from a signed request and its signed receipt, and how to read them.

What ``ops/delegations.py`` writes and the delegation procedures (``gitwork/delegation``) and
``gw receipts verify`` read.
"""

from __future__ import annotations

import hashlib

from .. import codec
from ..errors import Invalid
from . import protocol

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

DELEGATIONS = "delegations"


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
