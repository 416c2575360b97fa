"""The two documents of delegation: a signed request and a signed receipt, as canonical bytes.

Both are JSON objects serialised one way only (keys sorted, no spaces, ASCII), so the bytes that
were signed can be stored, sent and checked again anywhere: a digest names exactly one document.
A receipt names the request it answers by id *and* by the digest of its bytes, so the chain
request -> receipt cannot be rewired. Parsing is bounded (size, depth, fields).
"""

from __future__ import annotations

import hashlib
import json
import os
import re

from ..errors import Invalid

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

REQUEST = "gitwork-delegation-request"
RECEIPT = "gitwork-delegation-receipt"
VERSION = 1
MAX_DOCUMENT = 32 * 1024
OPS = ("plan", "test", "start", "observe", "cancel")
REQUEST_ID = re.compile(r"d-[0-9a-f]{16}\Z")
_NONCE = re.compile(r"[0-9a-f]{32}\Z")
_KEY = re.compile(r"[a-z0-9@.-]{1,64} [A-Za-z0-9+/=]{16,4096}\Z")  # "type base64" of an SSH public key


def canonical(doc: dict[str, Any]) -> str:
    return json.dumps(doc, sort_keys=True, separators=(",", ":"), ensure_ascii=True)


def digest(text: str) -> str:
    return "sha256:" + hashlib.sha256(text.encode("ascii", "replace")).hexdigest()


def new_request_id() -> str:
    return "d-" + os.urandom(8).hex()


def check_request_id(value: object) -> str:
    if not isinstance(value, str) or not REQUEST_ID.match(value):
        raise Invalid(f"bad delegation request id {str(value)[:40]!r}: d- and 16 hex digits")
    return value


def request(request_id: str, op: str, item: str | None, args: dict[str, Any], at: str, build: str, to: str) -> str:
    """The canonical text of a new request (a fresh nonce each time) for the peer whose public key is ``to``.

    ``to`` names the destination inside the signed bytes: a peer refuses a request meant for another
    peer, so a sender trusted by two peers cannot have its request to one replayed to the other."""
    return canonical({"kind": REQUEST, "v": VERSION, "id": check_request_id(request_id), "op": op, "item": item,
                      "args": args, "at": at, "nonce": os.urandom(16).hex(), "build": build, "to": to})


def destination(key: str) -> str:
    """A public key as a request's ``to`` names it: ``type base64``, without a comment."""
    return " ".join(str(key).split()[:2])


def receipt(req: dict[str, Any], text: str, outcome: str, at: str, result: dict[str, Any] | None = None,
            error: dict[str, Any] | None = None) -> str:
    doc: dict[str, Any] = {"kind": RECEIPT, "v": VERSION, "request": req["id"], "request_digest": digest(text),
                           "op": req["op"], "item": req.get("item"), "outcome": outcome, "at": at}
    if result is not None:
        doc["result"] = result
        for key in ("epoch", "fence", "execution"):  # under which lease it was done, on top
            if result.get(key) is not None:
                doc[key] = result[key]
    if error is not None:
        doc["error"] = error
    return canonical(doc)


def _load(text: Any, kind: str) -> dict[str, Any]:
    if not isinstance(text, str) or len(text) > MAX_DOCUMENT:
        raise Invalid(f"a delegation {kind.rpartition('-')[2]} must be text of at most {MAX_DOCUMENT} bytes")
    try:
        doc = json.loads(text)
    except (ValueError, RecursionError):
        raise Invalid(f"a delegation {kind.rpartition('-')[2]} is not JSON") from None
    if not isinstance(doc, dict) or doc.get("kind") != kind or doc.get("v") != VERSION:
        raise Invalid(f"not a {kind} (version {VERSION})")
    return doc


def parse_request(text: Any) -> dict[str, Any]:
    doc = _load(text, REQUEST)
    check_request_id(doc.get("id"))
    if doc.get("op") not in OPS:
        raise Invalid(f"unknown delegation op {str(doc.get('op'))[:20]!r} (known: {', '.join(OPS)})")
    if not isinstance(doc.get("args"), dict) or not isinstance(doc.get("at"), str):
        raise Invalid("a delegation request needs args (a mapping) and at (an instant)")
    if not isinstance(doc.get("nonce"), str) or not _NONCE.match(doc["nonce"]):
        raise Invalid("a delegation request needs a nonce (32 hex digits)")
    if doc.get("item") is not None and not isinstance(doc["item"], str):
        raise Invalid("a delegation request's item must be an id")
    if not isinstance(doc.get("to"), str) or not _KEY.match(doc["to"]):
        raise Invalid("a delegation request needs to: the public key of the peer it is meant for")
    return doc


def parse_receipt(text: Any) -> dict[str, Any]:
    doc = _load(text, RECEIPT)
    if doc.get("outcome") not in ("done", "refused") or not isinstance(doc.get("request_digest"), str):
        raise Invalid("a delegation receipt needs an outcome (done or refused) and a request digest")
    return doc


def chained(request_text: str, receipt_doc: dict[str, Any]) -> bool:
    """Does the receipt answer exactly this request (its id and the digest of its bytes)?"""
    try:
        req = json.loads(request_text)
    except ValueError:
        return False
    return receipt_doc.get("request") == req.get("id") and receipt_doc.get("request_digest") == digest(request_text)
