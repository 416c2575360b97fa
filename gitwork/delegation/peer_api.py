"""The peer's REST endpoints: ``POST /delegation/{plan,test,start,observe,cancel}``.

A thin face over ``service.answer``: each endpoint takes ``{"request": TEXT, "signature": SIG}``
and answers ``service.answer``'s status and body (a signed receipt, or an unsigned refusal when the
signer is not known). ``maybe_router`` gives no router at all for a repository with no peer
configured: the endpoints then do not exist (404), and are absent from the OpenAPI document.
"""


# No ``from __future__ import annotations`` here: FastAPI reads the endpoints' annotations at run time,
# and ``Request`` is imported inside build_router (fastapi is needed only where a peer serves).
from typing import Any

from ..records.protocol import OPS
from . import peers


def build_router(repo_path: str) -> Any:
    """The delegation endpoints for the repository at ``repo_path`` (a ``fastapi.APIRouter``)."""
    from fastapi import APIRouter, Request
    from fastapi.concurrency import run_in_threadpool
    from fastapi.responses import JSONResponse

    from .service import answer

    router = APIRouter(prefix="/delegation", tags=["delegation"])

    def endpoint(op: str) -> Any:
        async def handle(request: Request):  # type: ignore[no-untyped-def]
            body = await _bounded_json(request)
            if isinstance(body, JSONResponse):
                return body
            status, doc = await run_in_threadpool(answer, repo_path, op, body)
            return JSONResponse(doc, status_code=status)

        handle.__name__ = f"delegation_{op}"
        handle.__doc__ = (f"Ask this peer to {op} (a signed request; the answer is a signed receipt). Present only "
                          "when a peer is configured (git config gitwork.peer.<name>.*; docs/security.md).")
        return handle

    for op in OPS:
        router.add_api_route(f"/{op}", endpoint(op), methods=["POST"], name=f"delegation-{op}", response_model=None,
                             openapi_extra={"requestBody": {"required": True, "content": {"application/json": {
                                 "schema": SIGNED_REQUEST}}}})
    return router


MAX_BODY = 64 * 1024  # a request and its signature; anything larger is refused unread
SIGNED_REQUEST = {"type": "object", "required": ["request", "signature"], "properties": {
    "request": {"type": "string", "description": "the request: canonical JSON (docs/security.md)"},
    "signature": {"type": "string", "description": "ssh-keygen -Y sign -n gitwork-delegation of request"}}}


async def _bounded_json(request: Any) -> Any:
    """The request's JSON body, read at most :data:`MAX_BODY` bytes far; a 413/400 answer otherwise."""
    import json

    from fastapi.responses import JSONResponse

    def refuse(status: int, message: str) -> Any:
        return JSONResponse({"ok": False, "error": "invalid", "code": 5, "message": message}, status_code=status)

    chunks: list[bytes] = []
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > MAX_BODY:
            return refuse(413, f"a delegation request is at most {MAX_BODY} bytes")
        chunks.append(chunk)
    try:
        return json.loads(b"".join(chunks))
    except (ValueError, RecursionError):
        return refuse(400, "a delegation request is a JSON object {\"request\": ..., \"signature\": ...}")


def maybe_router(repo_path: str) -> Any | None:
    """:func:`build_router` when a peer is configured here; ``None`` (no endpoints at all) otherwise."""
    return build_router(repo_path) if peers.configured_at(repo_path) else None
