"""``gw receipts verify [ITEM]``: every stored delegation record, checked again from its bytes.

For each record on this state ref:

- the request's signature (by this side's key for a request sent from here, by the peer's key for
  one received), and the receipt's (the peer's, or this side's), each with the key that side had
  when the document was signed (its signed ``at``; the key history, ``keyring``): a key rotated out
  since still verifies what it signed while it was current;
- the chain: the receipt names the request by id and by the digest of its bytes;
- every other field of the record (``outcome``, ``item``, ``execution``, ``at``, ``op``, ``epoch``,
  ``fence``, ``request_id``...) against what the signed documents say, ``side`` against the folder the
  record is stored in, the file's name against the request id, and the copy of those fields in the
  item's ``delegation`` events: a field edited with plain git fails, named. For a request sent from here, the peer named is the one the request was meant for
  (its signed ``to`` is one of that peer's keys).
"""

from __future__ import annotations

from ..errors import Corrupt, GwError
from ..records import protocol
from ..records.delegations import derive, record_path, stored
from . import keyring, peers, signing

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

    from ..workplane import Workplane


def _signed_by(what: str, text: Any, signature: Any, at: Any, name: str, who: str,
               history: dict[str, list[dict[str, Any]]]) -> list[str]:
    keys = keyring.valid_at(history, name, at)
    if not keys:
        known = "no key known" if not history.get(name) else f"no key valid at {str(at)[:40]}"
        return [f"{what}: {known} for {who}"]
    try:
        signing.verify(str(text).encode(), str(signature), [(name, key) for key in keys], peers.NAMESPACE)
    except GwError as error:
        return [f"{what}: not signed by {who} ({error.message})"]
    return []


def _signer(text: str, signature: Any, at: Any, history: dict[str, list[dict[str, Any]]], but: str) -> str | None:
    """Which other peer's key (valid at ``at``) signed ``text``, if one did: names an edited ``peer`` field."""
    signers = [(name.partition(":")[2], key) for name in history if name.startswith("peer:") and name != but
               for key in keyring.valid_at(history, name, at)]
    if not signers:
        return None
    try:
        return f"peer {signing.verify(text.encode(), str(signature), signers, peers.NAMESPACE)}"
    except GwError:
        return None


EVENT_FIELDS = {"peer": "peer", "delegated": "op", "outcome": "outcome", "epoch": "epoch", "fence": "fence"}


def _event_problems(events: list[dict[str, Any]], expected: dict[str, Any]) -> list[str]:
    """The item's ``delegation`` events of this exchange (its copy of the record's fields in events.log)
    against the signed documents: an event edited with plain git fails too."""
    problems = []
    for event in events:
        if event.get("delegation") != expected["request_id"] or event.get("side") != expected["side"]:
            continue
        for name, field in EVENT_FIELDS.items():
            if event.get(name) != expected.get(field):
                problems.append(f"event {name}: the item's events.log says {str(event.get(name))[:60]!r}, the "
                                f"signed documents say {str(expected.get(field))[:60]!r}")
    return problems


def check(path: str, record: dict[str, Any], history: dict[str, list[dict[str, Any]]],
          events: list[dict[str, Any]] | None = None) -> list[str]:
    """What is wrong with one record (empty: it verifies); ``events``: the item's ``delegation`` events."""
    from .. import codec

    side = path.split("/")[1]
    peer = str(record.get("peer"))
    try:
        request = protocol.parse_request(record.get("request"))
        receipt = protocol.parse_receipt(record.get("receipt"))
        expected = derive(side, peer, record["request"], str(record.get("request_signature")), record["receipt"],
                          str(record.get("receipt_signature")))
    except (GwError, KeyError) as error:
        return [f"receipt: {getattr(error, 'message', error)}"]
    mine, theirs = (keyring.SELF, "this side"), (f"peer:{peer}", f"peer {peer}")
    request_by, receipt_by = (mine, theirs) if side == "sent" else (theirs, mine)
    problems = [*_signed_by("request", record["request"], record.get("request_signature"), request["at"],
                            *request_by, history),
                *_signed_by("receipt", record["receipt"], record.get("receipt_signature"), receipt["at"],
                            *receipt_by, history)]
    if problems and (side == "sent" and any(p.startswith("receipt:") for p in problems)
                     or side == "received" and any(p.startswith("request:") for p in problems)):
        text, signature, at = ((record["receipt"], record.get("receipt_signature"), receipt["at"]) if side == "sent"
                               else (record["request"], record.get("request_signature"), request["at"]))
        other = _signer(text, signature, at, history, f"peer:{peer}")
        if other:
            problems.append(f"peer: recorded {peer[:64]!r}, but {other} signed it")
    if side == "sent" and request["to"] not in keyring.ever(history, f"peer:{peer}"):
        problems.append(f"peer: the request was meant for another peer than {peer} (its signed to is not a key "
                        f"{peer} ever had here)")
    expected = codec.load_yaml(codec.dump_yaml(expected))  # as stored: the same YAML round trip
    for field in sorted(set(record) | set(expected)):
        if field not in expected:
            problems.append(f"{field}: not a field of a delegation record (nothing signed says it)")
        elif record.get(field) != expected[field]:
            problems.append(f"{field}: recorded {str(record.get(field))[:60]!r}, the signed documents say "
                            f"{str(expected[field])[:60]!r}")
    problems += _event_problems(events or [], expected)
    if path != record_path(side, request["id"]):
        problems.append(f"request_id: stored as {path}, the signed request is {request['id']}")
    return problems


def verify(wp: Workplane, item: str | None = None) -> list[dict[str, Any]]:
    """One row per record (``ok`` and ``problems``); raises nothing: the caller decides the exit."""
    history = peers.load(wp.repo).history(wp.now())
    item_id = wp.resolve(item) if item else None
    ctx = wp.context()
    events: dict[str, list[dict[str, Any]]] = {}
    rows = []
    for path, record in stored(ctx.snapshot):
        signed_item = _signed_item(record)
        if item_id is not None and item_id not in (record.get("item"), signed_item):
            continue  # the item the signed request names counts too: an edited item field hides nothing
        if isinstance(signed_item, str) and signed_item not in events:
            try:
                events[signed_item] = [e for e in ctx.records(signed_item) if e.get("type") == "delegation"]
            except GwError:
                events[signed_item] = []  # not an item here (a start of an item only the peer has)
        problems = check(path, record, history, events.get(signed_item) if isinstance(signed_item, str) else None)
        rows.append({"delegation": record.get("request_id"), "side": record.get("side"), "peer": record.get("peer"),
                     "op": record.get("op"), "item": record.get("item"), "outcome": record.get("outcome"),
                     "ok": not problems, "problems": problems})
    return rows


def _signed_item(record: dict[str, Any]) -> Any:
    try:
        return protocol.parse_request(record.get("request")).get("item")
    except GwError:
        return None


def failed(rows: list[dict[str, Any]]) -> Corrupt | None:
    bad = [row for row in rows if not row["ok"]]
    if not bad:
        return None
    first = bad[0]
    return Corrupt(f"{len(bad)} of {len(rows)} delegation record(s) do not verify; first: {first['delegation']} "
                   f"({first['side']}, {first['peer']}): {first['problems'][0]}", failed=[r["delegation"] for r in bad])
