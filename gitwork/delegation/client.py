"""The sender's side: ``gw delegate``, ``gw delegation observe|cancel``.

One exchange: build the request, sign it with ``gitwork.signingKey``, keep the signed bytes in
``<common git dir>/gitwork/delegations/<id>.json`` until an answer came, send it to the peer's
``/delegation/<op>``, verify the receipt (the peer's signature with the key configured for it, and
that it answers exactly this request), and only then record request and receipt on this state ref
(``delegation-sent``). Anything that fails a check writes nothing. An answer that is not a receipt
signed by the peer (none at all, a reset, a proxy's 504, an unsigned refusal, garbage) leaves the
outcome unknown (exit 12) and the request kept: sending the same request id again re-sends the very
same signed bytes, and the peer answers with its original receipt if it had acted.
"""

from __future__ import annotations

import json
import os

from .. import __version__, clock
from ..errors import (
    Ambiguous,
    Corrupt,
    Forbidden,
    GwError,
    Held,
    Illegal,
    Invalid,
    NotFound,
    RemoteError,
    Stale,
    UsageError,
)
from ..records import protocol
from ..records.delegations import find
from . import peers, signing

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

    from ..workplane import Workplane

TIMEOUT = 60.0
MAX_ANSWER = 256 * 1024
_ERRORS = {int(cls.code): cls for cls in (UsageError, NotFound, Ambiguous, Invalid, Illegal, Stale, Corrupt, Held,
                                          Forbidden)}


def _pending_path(repo: Any, request_id: str) -> str:
    folder = os.path.join(repo.gitwork_dir(), "delegations")
    os.makedirs(folder, exist_ok=True)
    return os.path.join(folder, f"{protocol.check_request_id(request_id)}.json")


def _signed(wp: Workplane, config: peers.Config, peer: peers.Peer, op: str, item: str | None, args: dict[str, Any],
            request_id: str | None) -> tuple[str, str, str]:
    """``(request id, text, signature)``: the stored bytes of a pending request, else a new request."""
    request_id = request_id or protocol.new_request_id()
    path = _pending_path(wp.repo, request_id)
    if os.path.exists(path):
        try:
            with open(path, encoding="utf-8") as handle:
                kept = json.load(handle)
            if not isinstance(kept, dict) or not isinstance(kept.get("signature"), str):
                raise ValueError("not a kept request")
            req = protocol.parse_request(kept.get("request"))
        except (OSError, ValueError, RecursionError, Invalid):
            raise Corrupt(f"the kept request {path} is unreadable; remove it and send a new request",
                          delegation=request_id) from None
        if kept.get("peer") != peer.name or req["op"] != op or (item and req.get("item") != item):
            raise Invalid(f"request {request_id} was a {req['op']} of {req.get('item')} to {kept.get('peer')}; "
                          "use a new id", delegation=request_id)
        return request_id, kept["request"], kept["signature"]
    if find(wp.context().snapshot, "sent", request_id) is not None:
        raise Invalid(f"request {request_id} was answered already (gw delegations); use a new id", delegation=request_id)
    text = protocol.request(request_id, op, item, args, clock.format_instant(wp.now()), __version__,
                            protocol.destination(peer.key or ""))
    signature = signing.sign(text.encode(), config.signing_key, peers.NAMESPACE)
    from ..fsutil import write_atomic

    # kept before it is sent: a retry re-sends exactly these bytes
    write_atomic(path, json.dumps({"peer": peer.name, "request": text, "signature": signature}), fsync=True)
    return request_id, text, signature


class _NoAnswer(Exception):
    """No answer that could be a receipt came back: why, in a few words."""


def _post(url: str, body: dict[str, Any]) -> tuple[int, Any]:
    import http.client
    import urllib.error
    import urllib.request

    data = json.dumps(body).encode()
    request = urllib.request.Request(url, data=data, method="POST", headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=TIMEOUT) as response:  # noqa: S310 (http(s) only: peers.py)
            status, raw = response.status, response.read(MAX_ANSWER + 1)
    except urllib.error.HTTPError as error:
        try:
            status, raw = error.code, error.read(MAX_ANSWER + 1)
        except (OSError, ValueError) as cut:  # the body was cut short
            raise _NoAnswer(f"answered {error.code}, then {getattr(cut, 'reason', cut)}") from None
    except (OSError, ValueError, http.client.HTTPException) as error:  # refused, reset, timed out: what the peer did is unknown
        raise _NoAnswer(f"did not answer ({getattr(error, 'reason', error)})") from None
    try:
        return status, json.loads(raw[:MAX_ANSWER])
    except (ValueError, RecursionError):  # RecursionError: nested deeper than the parser goes
        raise _NoAnswer(f"answered {status} without a JSON body") from None


def _unknown(peer: peers.Peer, request_id: str, why: str) -> RemoteError:
    """No signed receipt came back: the peer may or may not have acted. The request stays kept (``gw
    delegations`` lists it as sent and unanswered); sending the same id again re-sends the same bytes."""
    from ..sync import _clean

    return RemoteError(f"peer {peer.name} {_clean(why)[:200]}; the outcome is unknown: the request is kept, send it "
                       f"again with --id {request_id}", peer=peer.name, delegation=request_id)


def exchange(wp: Workplane, peer_name: str, op: str, item: str | None = None, args: dict[str, Any] | None = None,
             request_id: str | None = None) -> dict[str, Any]:
    """Send one signed request to a configured peer; the verified receipt (a dict), recorded here.

    Only a receipt signed by the peer's key counts as an answer. Anything else (no answer, a reset
    connection, no JSON, a proxy's 504, an unsigned refusal: whoever sits on the way can say those) is
    "outcome unknown" (exit 12) and leaves the signed request kept for a retry under the same id."""
    config = peers.load(wp.repo)
    peer = config.peer(peer_name)  # not configured: refused, nothing sent
    if op not in peer.allow:
        raise Forbidden(f"peer {peer.name} is not to be asked for {op} (git config gitwork.peer.{peer.name}.allow: "
                        f"{', '.join(sorted(peer.allow)) or 'nothing'})", reason="not-allowed")
    if not peer.url or not peer.key:
        raise Invalid(f"peer {peer.name} needs both gitwork.peer.{peer.name}.url and .key to be sent anything")
    config.keys(wp.now())  # a rotated key is noted before anything is signed or verified with the new one
    request_id, text, signature = _signed(wp, config, peer, op, item, args or {}, request_id)
    try:
        status, body = _post(f"{peer.url.rstrip('/')}/delegation/{op}", {"request": text, "signature": signature})
    except _NoAnswer as error:
        raise _unknown(peer, request_id, str(error)) from None
    if not isinstance(body, dict) or not isinstance(body.get("receipt"), str) \
            or not isinstance(body.get("signature"), str):
        said = body.get("message") or body.get("detail") or body.get("error") if isinstance(body, dict) else None
        raise _unknown(peer, request_id, f"answered {status} without a signed receipt"
                       + (f" ({str(said)[:120]})" if said else ""))
    receipt = verify_receipt(text, body["receipt"], body["signature"], peer)  # 77; the request stays kept
    if receipt["outcome"] != "done":
        _drop(wp, request_id)  # answered: its nonce is spent, a new attempt needs a new request
        raise _error(receipt.get("error") or {}, f"peer {peer.name} refused: ")
    applied = wp.record("delegation-sent", peer=peer.name, request=text, request_signature=signature,
                        receipt=body["receipt"], receipt_signature=body["signature"])
    _drop(wp, request_id)  # only once recorded: until then a retry re-sends the same bytes
    return {"delegation": request_id, "peer": peer.name, "op": op, "item": receipt.get("item"),
            "duplicate": bool(body.get("duplicate")), "commit": applied.commit, "receipt": receipt}


def pending(wp: Workplane) -> list[dict[str, Any]]:
    """The requests kept here without an answer (sent, outcome unknown), as ``gw delegations`` rows."""
    folder = os.path.join(wp.repo.gitwork_dir(), "delegations")
    rows = []
    for name in sorted(os.listdir(folder)) if os.path.isdir(folder) else ():
        if not name.endswith(".json") or not protocol.REQUEST_ID.match(name[:-5]):
            continue
        try:
            with open(os.path.join(folder, name), encoding="utf-8") as handle:
                kept = json.load(handle)
            req = protocol.parse_request(kept.get("request"))
        except (OSError, ValueError, RecursionError, AttributeError, Invalid):
            req, kept = {"id": name[:-5], "op": None, "at": None}, {}
        rows.append({"request_id": req["id"], "side": "sent", "peer": kept.get("peer"), "op": req.get("op"),
                     "item": req.get("item"), "outcome": "unanswered", "at": req.get("at"), "execution": None,
                     "epoch": None, "fence": None})
    return rows


def verify_receipt(request_text: str, receipt_text: Any, signature: Any, peer: peers.Peer) -> dict[str, Any]:
    """The receipt, once its signature is the peer's and it answers exactly this request; else 77."""
    if not isinstance(receipt_text, str) or not isinstance(signature, str):
        raise Forbidden(f"peer {peer.name} answered without a signed receipt", reason="bad-receipt")
    try:
        signing.verify(receipt_text.encode(), signature, [(peer.name, peer.key or "")], peers.NAMESPACE)
    except Forbidden as error:
        raise Forbidden(f"the receipt from {peer.name} does not verify: {error.message}", reason="bad-receipt") from None
    try:
        receipt = protocol.parse_receipt(receipt_text)
    except Invalid as error:
        raise Forbidden(f"the receipt from {peer.name} is malformed: {error.message}", reason="bad-receipt") from None
    if not protocol.chained(request_text, receipt):
        raise Forbidden(f"the receipt from {peer.name} answers another request (id or request digest differ)",
                        reason="bad-receipt")
    return receipt


def _drop(wp: Workplane, request_id: str) -> None:
    try:
        os.unlink(_pending_path(wp.repo, request_id))
    except FileNotFoundError:
        pass


def _error(doc: dict[str, Any], prefix: str) -> GwError:
    """The peer's refusal as this side's error. Its message was written on another machine: cleaned
    (no escape sequences, controls or bidi marks) and cut, as a remote's hook output is."""
    from ..sync import _clean

    code = doc.get("code")
    cls = _ERRORS.get(code if isinstance(code, int) else -1, Forbidden)
    message = _clean(str(doc.get("message") or doc.get("detail") or doc.get("error") or "no reason given"))
    details = doc.get("details")
    if not isinstance(details, dict):
        details = {}
    return cls(prefix + message, **{k: v for k, v in details.items() if isinstance(k, str)})


def started(wp: Workplane, delegation: str) -> dict[str, Any]:
    """The sent start ``delegation`` (for observe and cancel): ``{request_id, peer, item}`` from its
    signed request, the peer being one whose key (now or before) the request was meant for."""
    from . import keyring

    record = find(wp.context().snapshot, "sent", protocol.check_request_id(delegation))
    missing = NotFound(f"no delegated start {delegation} was sent from here (gw delegations)", delegation=delegation)
    if record is None:
        raise missing
    try:
        request = protocol.parse_request(record.get("request"))
    except Invalid:
        raise missing from None
    peer = str(record.get("peer"))
    history = peers.load(wp.repo).keys(wp.now())
    if request["id"] != delegation or request["op"] != "start" or request["to"] not in keyring.ever(
            history, f"peer:{peer}"):
        raise missing
    return {"request_id": request["id"], "peer": peer, "item": request.get("item")}


def delegate(wp: Workplane, item: str, peer_name: str, op: str = "start", ttl: str | None = None,
             request_id: str | None = None) -> dict[str, Any]:
    args = {"ttl": ttl} if ttl else {}
    return exchange(wp, peer_name, op, wp.resolve(item), args, request_id)


def follow_up(wp: Workplane, op: str, delegation: str, reason: str | None = None,
              request_id: str | None = None) -> dict[str, Any]:
    record = started(wp, delegation)
    args: dict[str, Any] = {"delegation": record["request_id"]}
    if reason:
        args["reason"] = reason
    return exchange(wp, record["peer"], op, record.get("item"), args, request_id)


