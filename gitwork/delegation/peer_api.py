"""The peer's REST endpoints: ``POST /delegation/{plan,test,start,observe,cancel}``.

A thin face over ``service.answer``: each endpoint takes ``{"request": TEXT, "signature": SIG}``
and answers ``service.answer``'s status and body (a signed receipt, or an unsigned refusal when the
signer is not known). ``maybe_router`` gives no router at all for a repository with no peer
configured: the endpoints then do not exist (404), and are absent from the OpenAPI document.
"""

from __future__ import annotations

from typing import Any

from . import peers
from .protocol import OPS


def build_router(repo_path: str) -> Any:
    """The delegation endpoints for the repository at ``repo_path`` (a ``fastapi.APIRouter``)."""
    from fastapi import APIRouter, Body
    from fastapi.concurrency import run_in_threadpool
    from fastapi.responses import JSONResponse

    from .service import answer

    router = APIRouter(prefix="/delegation", tags=["delegation"])

    def endpoint(op: str) -> Any:
        async def handle(body: Any = Body(...)):  # type: ignore[no-untyped-def]  # noqa: B008
            status, doc = await run_in_threadpool(answer, repo_path, op, body)
            return JSONResponse(doc, status_code=status)

        handle.__name__ = f"delegation_{op}"
        handle.__doc__ = (f"Ask this peer to {op} (a signed request; the answer is a signed receipt). Present only "
                          "when a peer is configured (git config gitwork.peer.<name>.*; docs/security.md).")
        return handle

    for op in OPS:
        router.add_api_route(f"/{op}", endpoint(op), methods=["POST"], name=f"delegation-{op}", response_model=None)
    return router


def maybe_router(repo_path: str) -> Any | None:
    """:func:`build_router` when a peer is configured here; ``None`` (no endpoints at all) otherwise."""
    return build_router(repo_path) if peers.configured_at(repo_path) else None
