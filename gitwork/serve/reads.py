"""Reads the board needs beyond the CLI's listings, as REST endpoints any client may use: an
execution's terminal (``gw capture``), and lease timelines (who held what, when) per item and from
the state ref's history, paged."""

from __future__ import annotations

from typing import Any, Optional

from fastapi import APIRouter, Depends, Path, Query
from fastapi.responses import JSONResponse

from .server import Principal, Server, principal
from .timeline import MAX_WINDOW, WINDOW, history_spans, item_spans

_OBJECT = {"type": "object", "additionalProperties": True}
EXECUTION_PATTERN = "^[A-Za-z0-9][A-Za-z0-9_-]{3,63}$"  # ops.executions.EXECUTION_ID, as a schema says it


def _ok(description: str) -> dict[int | str, dict[str, Any]]:
    return {200: {"description": description, "content": {"application/json": {"schema": _OBJECT}}}}


def reads_router(server: Server) -> APIRouter:
    router = APIRouter(prefix="/v1", tags=["v1"])
    Who = Depends(principal)

    @router.get("/executions/{execution}/capture", responses=_ok("`{ok, execution, text}`: as `gw capture`."))
    def capture(execution: str = Path(pattern=EXECUTION_PATTERN), lines: int = Query(40, ge=1, le=2000), who: Principal = Who) -> JSONResponse:
        """The last `lines` lines of a live execution's terminal on this host (`gw capture`)."""
        from ..launch.run import capture as read_screen
        from ..records.executions import check_execution_id

        with server.plane(who) as wp:
            text = read_screen(wp, check_execution_id(execution), lines)
        return JSONResponse({"ok": True, "execution": execution, "text": text})

    @router.get("/items/{item}/leases", responses=_ok("`{ok, item, spans}`: one span per lease epoch, oldest first."))
    def item_leases(item: str, who: Principal = Who) -> JSONResponse:
        """Who held the item and when: one span per lease epoch, from the item's own event log."""
        with server.plane(who) as wp:
            ctx = wp.context()
            item_id = ctx.resolve(item)
            spans = item_spans(ctx.records(item_id), ctx.lease(item_id), ctx.now)
        return JSONResponse({"ok": True, "item": item_id, "spans": spans})

    @router.get("/leases", responses=_ok("`{ok, spans, read, next, newest, oldest}`: a page of lease spans."))
    def leases(holder: Optional[str] = Query(None, max_length=200), before: Optional[str] = Query(None, pattern="^[0-9a-f]{40}$"),
               limit: int = Query(WINDOW, ge=1, le=MAX_WINDOW), who: Principal = Who) -> JSONResponse:
        """Lease spans (of `holder`, or everyone's) found in `limit` commits of the state ref's history,
        newest first, from the tip or from `before`; `next` is the commit the next page starts from."""
        with server.plane(who) as wp:
            return JSONResponse({"ok": True, **history_spans(wp, holder, before, limit)})

    return router
