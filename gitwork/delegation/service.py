"""The peer's side of delegation, independent of the web framework: one request in, one answer out.

In this order, so that nothing is written and nothing is started unless every check passed:

1. the request parses (bounded; else 400, unsigned) and its signature verifies against the keys of
   the configured peers (``unknown-key``, ``bad-signature``, ``wrong-namespace``: 401);
2. the op is the endpoint's, the signer's ``allow`` list names it, and the request is meant for this
   peer (its ``to`` is this peer's public key: ``wrong-peer``) (403);
3. the request id: answered before with the very same bytes -> the original receipt, nothing new
   (a retry after a lost answer); the same id with other bytes -> refused (409);
4. freshness and the nonce (``signing.Nonces``): a stale or replayed request is refused (403), except
   the very same bytes whose first arrival was never answered (the peer stopped while acting): a retry;
5. the op itself (``plan``, ``test``, ``start``, ``observe``, ``cancel``);

every refusal from step 1 on is answered with a receipt signed here (``outcome: refused``), not
recorded;
6. the receipt of what was done is signed, recorded on this state ref (``delegation-received``),
   then answered.

``start`` runs ``gitwork.launch.run.run`` (reserve -> lease -> launch) under an execution id made
from the request id, so even a start whose receipt was never recorded cannot start twice.
"""

from __future__ import annotations

import os

from .. import __version__, clock
from ..errors import Forbidden, GwError, Invalid, NotFound
from ..records import protocol
from ..records.delegations import find
from ..store import crash_point
from . import peers, signing

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, Callable

    from ..workplane import Workplane

UNVERIFIED = ("unknown-key", "bad-signature", "wrong-namespace", "wrong-key")
_STATUS = {2: 400, 3: 404, 4: 400, 5: 400, 6: 409, 7: 409, 75: 409, 77: 403}
CAPTURE_LIMIT = 8 * 1024
THREAD_LIMIT = 20


def status_of(error: GwError) -> int:
    return _STATUS.get(int(error.code), 500)


def answer(repo_path: str, route_op: str, body: Any) -> tuple[int, dict[str, Any]]:
    """``(HTTP status, JSON body)`` for one request to ``/delegation/<route_op>``."""
    from ..workplane import Workplane

    try:
        with Workplane(repo_path) as wp:
            return _answer(wp, route_op, body)
    except GwError as error:  # not even a request: an unsigned refusal
        return status_of(error), {"ok": False, **error.to_json()}


def _answer(wp: Workplane, route_op: str, body: Any) -> tuple[int, dict[str, Any]]:
    if not isinstance(body, dict) or not isinstance(body.get("request"), str) \
            or not isinstance(body.get("signature"), str):
        raise Invalid("a delegation request is {\"request\": TEXT, \"signature\": SSH SIGNATURE}")
    text, signature = body["request"], body["signature"]
    if len(text) > protocol.MAX_DOCUMENT:
        raise Invalid(f"a delegation request is at most {protocol.MAX_DOCUMENT} bytes")
    config = peers.load(wp.repo)
    if not config.signing_key or not os.path.isfile(config.signing_key):
        # Checked before anything is done: a peer that cannot sign its receipt must not act.
        raise Invalid("this peer has no signing key to sign receipts with (git config gitwork.signingKey)")
    req = protocol.parse_request(text)  # bounded; what does not parse as a request gets no receipt
    config.keys(wp.now())  # a rotated key (its own or a peer's) is noted before it signs or verifies anything
    try:
        signer = signing.verify(text.encode("utf-8", "surrogatepass"), signature, config.by_key(), peers.NAMESPACE)
        result = _decide(wp, config, signer, route_op, req, text)
    except GwError as error:
        if isinstance(error, _Answered):
            return 200, error.details["answer"]
        # Every refusal of a request is a receipt too (signed, not recorded): the sender can show what was refused.
        receipt = protocol.receipt(req, text, "refused", clock.format_instant(wp.now()), error=error.to_json())
        status = 401 if error.details.get("reason") in UNVERIFIED else status_of(error)
        return status, {"ok": False, **error.to_json(), "receipt": receipt,
                        "signature": signing.sign(receipt.encode(), config.signing_key, peers.NAMESPACE)}
    receipt = protocol.receipt(req, text, "done", clock.format_instant(wp.now()), result=result)
    receipt_signature = signing.sign(receipt.encode(), config.signing_key, peers.NAMESPACE)
    wp.record("delegation-received", peer=signer, request=text, request_signature=signature, receipt=receipt,
              receipt_signature=receipt_signature)
    crash_point("delegation-before-answer")  # the peer stops after it acted and recorded, before it answers
    return 200, {"ok": True, "receipt": receipt, "signature": receipt_signature}


class _Answered(GwError):
    """Not an error: the request was answered before; carries that answer."""


def _decide(wp: Workplane, config: peers.Config, signer: str, route_op: str, req: dict[str, Any],
            text: str) -> dict[str, Any]:
    op = req["op"]
    earlier = find(wp.context().snapshot, "received", req["id"])
    if earlier is not None and earlier.get("request") == text and earlier.get("peer") == signer:
        raise _Answered("answered before", answer={"ok": True, "duplicate": True, "receipt": earlier["receipt"],
                                                   "signature": earlier["receipt_signature"]})
    nonces = signing.Nonces(wp.repo.gitwork_dir())
    now = wp.now().timestamp()
    try:
        made: float | None = clock.parse_instant(req["at"]).timestamp()
    except ValueError:
        made = None
    # The nonce is spent first, before any other check: whatever refuses this request from here on, the
    # same bytes again are a replay, even once the reason is gone (the allow list grew, the clock caught up).
    nonces.remember(req["nonce"], now, protocol.digest(text), until=made)
    try:
        if earlier is not None:
            raise Invalid(f"request id {req['id']} was used for another request; use a new id", reason="reused")
        if op != route_op:
            raise Invalid(f"a {op} request sent to /delegation/{route_op}")
        if op not in config.peers[signer].allow:
            raise Forbidden(f"peer {signer} may not ask for {op} here (git config gitwork.peer.{signer}.allow)",
                            reason="not-allowed")
        if req["to"] != protocol.destination(signing.public_key(config.signing_key)):
            raise Forbidden("this request is meant for another peer (its to is not this peer's key): "
                            f"check gitwork.peer.<name>.key at {signer}", reason="wrong-peer")
        if made is None:
            raise Invalid("a delegation request's at must be an ISO-8601 instant")
        nonces.check_fresh(made, now)
        return ACTIONS[op](wp, config, signer, req)
    except GwError:
        nonces.settle(req["nonce"], now)  # answered with a refusal: the same bytes again are a replay
        raise


def _item(wp: Workplane, req: dict[str, Any]) -> str:
    if not req.get("item"):
        raise Invalid("this delegation op needs an item")
    return wp.resolve(req["item"])


def plan(wp: Workplane, config: peers.Config, signer: str, req: dict[str, Any]) -> dict[str, Any]:
    """What a start would do here, doing nothing: the item as this peer sees it, the command, the lease."""
    shown = wp.show(_item(wp, req))
    item, lease = shown["item"], shown["lease"]
    held = bool(lease and lease.get("live") and lease.get("holder") != wp.settings.identity())
    return {"item": item["id"], "title": item["title"], "status": item["status"], "would_run": config.command,
            "backend": config.backend, "as": wp.settings.identity(), "lease": lease,
            "startable": bool(config.command) and item["status"] in ("open", "active") and not held}


def test(wp: Workplane, config: peers.Config, signer: str, req: dict[str, Any]) -> dict[str, Any]:
    """Can this peer do it: the backend answers, the repository and item are readable, same build."""
    from ..launch import backend as backends

    checks: dict[str, Any] = {}
    try:
        backends.get(config.backend, wp.repo).check()
        checks["backend"] = "ok"
    except GwError as error:
        checks["backend"] = error.message
    try:
        checks["repository"] = "ok" if wp.store.tip() else "no state ref"
        if req.get("item"):
            wp.resolve(req["item"])
            checks["item"] = "ok"
    except GwError as error:
        checks["repository" if "repository" not in checks else "item"] = error.message
    checks["command"] = "ok" if config.command else "no gitwork.delegation.command configured"
    build = req.get("build")
    return {"ok": all(v == "ok" for v in checks.values()) and build == __version__, "checks": checks,
            "build": __version__, "same_build": build == __version__}


def execution_for(request_id: str) -> str:
    """The execution id a delegated start runs under: one per request, so a retry settles, never starts twice."""
    return "x-" + protocol.check_request_id(request_id)[2:]


def start(wp: Workplane, config: peers.Config, signer: str, req: dict[str, Any]) -> dict[str, Any]:
    from ..launch.run import run

    if not config.command:
        raise Invalid("this peer runs nothing: git config gitwork.delegation.command is not set here")
    ttl = req["args"].get("ttl")
    if ttl is not None and not isinstance(ttl, str):
        raise Invalid("ttl must be a duration such as 15m")
    info = run(wp, _item(wp, req), config.command, config.backend, ttl=ttl, execution=execution_for(req["id"]))
    return {k: v for k, v in info.items() if k not in ("launcher", "command_id")}


def _started(wp: Workplane, config: peers.Config, signer: str, req: dict[str, Any]) -> str:
    """The execution of the start this observe or cancel is about: one this same signer asked for, and
    that was done here. Only signed fields count: the stored request (its op, and its signature by the
    signer's key of the time) and the receipt this peer signed (its outcome and execution); the
    record's plain fields could have been edited with git."""
    from . import keyring

    started = req["args"].get("delegation")
    if not isinstance(started, str):
        raise Invalid("observe and cancel name the delegated start: args.delegation")
    record = find(wp.context().snapshot, "received", protocol.check_request_id(started))
    missing = NotFound(f"no start {started} by {signer} was received here", delegation=started)
    if record is None:
        raise missing
    try:
        request = protocol.parse_request(record.get("request"))
        receipt = protocol.parse_receipt(record.get("receipt"))
    except Invalid:
        raise missing from None
    if request["id"] != started or request["op"] != "start" or not protocol.chained(record["request"], receipt):
        raise missing
    history = config.keys(wp.now())
    for text, signature, at, name in ((record["request"], record.get("request_signature"), request["at"],
                                       f"peer:{signer}"),
                                      (record["receipt"], record.get("receipt_signature"), receipt["at"], keyring.SELF)):
        keys = keyring.valid_at(history, name, at)
        try:
            if not keys:
                raise missing
            signing.verify(text.encode(), str(signature), [(name.rpartition(":")[2], k) for k in keys],
                           peers.NAMESPACE)
        except GwError:
            raise missing from None
    if receipt["outcome"] != "done" or not isinstance(receipt.get("execution"), str):
        raise NotFound(f"start {started} launched nothing", delegation=started)
    return receipt["execution"]


def observe(wp: Workplane, config: peers.Config, signer: str, req: dict[str, Any]) -> dict[str, Any]:
    from ..launch.run import capture, get_execution, probe, result

    execution = probe(wp, get_execution(wp, _started(wp, config, signer, req)))
    shown = result(execution, existing=True)
    try:
        text = capture(wp, execution["id"], 40)
    except GwError as error:
        text = f"(no capture: {error.message})"
    _item_id, messages = wp.thread(execution["item"])
    return {**{k: v for k, v in shown.items() if k != "launcher"}, "capture": text[-CAPTURE_LIMIT:],
            "thread": [{k: m.get(k) for k in ("seq", "at", "by", "kind", "text", "to")} for m in messages[-THREAD_LIMIT:]]}


def cancel(wp: Workplane, config: peers.Config, signer: str, req: dict[str, Any]) -> dict[str, Any]:
    from ..launch.run import stop

    execution = _started(wp, config, signer, req)
    reason = req["args"].get("reason")
    info = stop(wp, execution, f"cancelled by {signer}" + (f": {reason}" if isinstance(reason, str) else ""))
    return {k: v for k, v in info.items() if k != "launcher"}


ACTIONS: dict[str, Callable[..., dict[str, Any]]] = {"plan": plan, "test": test, "start": start,
                                                       "observe": observe, "cancel": cancel}
