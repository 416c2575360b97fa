"""``gw receipts verify [ITEM]``: every stored delegation record, checked again from its bytes.

For each record on this state ref: the request's signature (by this side's key for a request sent
from here, by the peer's configured key for one received), the receipt's signature (the peer's, or
this side's), and the chain: the receipt names the request by id and by the digest of its bytes.
"""

from __future__ import annotations

from ..errors import Corrupt, GwError
from ..ops.delegations import records
from . import peers, protocol, signing

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

SELF = "self"


def check(record: dict[str, Any], config: peers.Config, own_key: str | None) -> list[str]:
    """What is wrong with one record (empty: it verifies)."""
    problems: list[str] = []
    peer = config.peers.get(str(record.get("peer")))
    peer_signers = [(peer.name, peer.key)] if peer is not None and peer.key else []
    own_signers = [(SELF, own_key)] if own_key else []
    request_signers, receipt_signers = ((own_signers, peer_signers) if record.get("side") == "sent"
                                        else (peer_signers, own_signers))
    for what, text, signature, signers in (
            ("request", record.get("request"), record.get("request_signature"), request_signers),
            ("receipt", record.get("receipt"), record.get("receipt_signature"), receipt_signers)):
        if not signers:
            problems.append(f"{what}: no key to check it with ({'this side' if signers is own_signers else 'peer ' + str(record.get('peer'))})")
            continue
        try:
            signing.verify(str(text).encode(), str(signature), signers, peers.NAMESPACE)
        except GwError as error:
            problems.append(f"{what}: {error.message}")
    try:
        receipt = protocol.parse_receipt(record.get("receipt"))
        if not protocol.chained(str(record.get("request")), receipt):
            problems.append("chain: the receipt answers another request (id or request digest differ)")
    except GwError as error:
        problems.append(f"receipt: {error.message}")
    return problems


def verify(wp: Any, item: str | None = None) -> list[dict[str, Any]]:
    """One row per record (``ok`` and ``problems``); raises nothing: the caller decides the exit."""
    config = peers.load(wp.repo)
    own_key = signing.public_key(config.signing_key) if config.signing_key else None
    item_id = wp.resolve(item) if item else None
    rows = []
    for record in records(wp.context().snapshot):
        if item_id is not None and record.get("item") != item_id:
            continue
        problems = check(record, config, own_key)
        rows.append({"delegation": record.get("request_id"), "side": record.get("side"), "peer": record.get("peer"),
                     "op": record.get("op"), "item": record.get("item"), "outcome": record.get("outcome"),
                     "ok": not problems, "problems": problems})
    return rows


def failed(rows: list[dict[str, Any]]) -> Corrupt | None:
    bad = [row for row in rows if not row["ok"]]
    if not bad:
        return None
    first = bad[0]
    return Corrupt(f"{len(bad)} of {len(rows)} delegation record(s) do not verify; first: {first['delegation']} "
                   f"({first['side']}, {first['peer']}): {first['problems'][0]}", failed=[r["delegation"] for r in bad])
