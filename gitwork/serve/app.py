"""The ASGI application of ``gw serve``: the REST API (``/v1``), its OpenAPI document and the board.

Writes: ``POST /v1/commands`` takes the document ``gw apply`` takes and answers what ``gw --json``
prints, through the same library path (``Workplane.submit``). Reads call the same library functions
the CLI's verbs call and answer the same JSON. The acting identity is the bearer token's; its role
replaces the settings' role for that identity (``_plane``), and the engine's own role rules do the
rest. Exit-code kinds map to HTTP statuses by :data:`HTTP_STATUS` (the table in docs/serve.md).

Request handlers are plain ``def`` functions: FastAPI runs them in its thread pool, each with a
Workplane of its own (opened and closed per request), so a slow git call never blocks the event loop
that carries the event streams.
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import json
import os
from typing import Any, AsyncIterator, Callable, Optional, Sequence

from fastapi import APIRouter, Depends, FastAPI, Query, Request
from fastapi.exceptions import RequestValidationError
from fastapi.openapi.utils import get_openapi
from fastapi.responses import JSONResponse, StreamingResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from .. import __version__, clock, engine
from ..errors import ExitCode, Forbidden, GwError, UsageError
from ..model import STATUSES
from . import schema
from .guard import Guard
from .server import Principal, Server, TooLarge, Unauthorized, listing, principal, read_thread
from .streams import follow_ref, follow_thread, last_event_id, stream
from .webhooks import Webhooks

# The one table from an exit code to an HTTP status (docs/serve.md shows it; a test keeps them in step).
HTTP_STATUS: dict[ExitCode, int] = {
    ExitCode.INTERNAL: 500,
    ExitCode.USAGE: 400,  # malformed: not JSON, not a mapping, a query parameter of the wrong type
    ExitCode.NOT_FOUND: 404,
    ExitCode.AMBIGUOUS: 409,  # the prefix matches several items now: send more of the id
    ExitCode.INVALID: 422,  # well formed but not acceptable (the engine's validator, or a rule on the input)
    ExitCode.ILLEGAL: 409,
    ExitCode.STALE: 409,  # kind "stale": the lease you act under is gone; do not retry
    ExitCode.CORRUPT: 500,
    ExitCode.NEWER_FORMAT: 500,
    ExitCode.NOT_A_REPO: 500,
    ExitCode.LOCKED: 503,  # with Retry-After
    ExitCode.REMOTE: 504,  # the arbiter stopped answering: outcome unknown (gw retry ID)
    ExitCode.NON_FAST_FORWARD: 409,
    ExitCode.REMOTE_REFUSED: 502,
    ExitCode.SYNC_REFUSED: 409,  # kind "sync-refused": some of this clone's queued commands did not land
    ExitCode.HELD: 409,  # kind "held": held by someone else or lost the race; with Retry-After
    ExitCode.FORBIDDEN: 403,
}
RETRY_AFTER = {ExitCode.HELD: "1", ExitCode.LOCKED: "1"}
MAX_BODY = 256 * 1024  # a command document is at most a 64 KiB text and a few fields
MAX_LIMIT = 2**31  # a page size SQLite takes as an integer (a larger LIMIT is a float to it: "datatype mismatch")
SortName = enum.Enum("SortName", {name: name for name in ("rank", "created", "id", "title")}, type=str)  # type: ignore[misc]
# An item status, or "expired" (a lease past its expiry), as `gw list --status` takes them.
StatusName = enum.Enum("StatusName", {name: name for name in (*STATUSES, "expired")}, type=str)  # type: ignore[misc]


def error_response(error: GwError) -> JSONResponse:
    """What ``gw --json`` prints for ``error``, with its HTTP status (and a retry hint for a lost race)."""
    status = 401 if isinstance(error, Unauthorized) else 413 if isinstance(error, TooLarge) else HTTP_STATUS.get(
        error.code, 500)
    headers = {"Retry-After": RETRY_AFTER[error.code]} if error.code in RETRY_AFTER else {}
    if status == 401:
        headers["WWW-Authenticate"] = "Bearer"
    return JSONResponse({"ok": False, **error.to_json()}, status_code=status, headers=headers)


# --- the application --------------------------------------------------------------------------------

_OBJECT = {"type": "object", "additionalProperties": True}
RESULT = {"type": "object", "required": ["ok"], "properties": {"ok": {"const": True}}, "additionalProperties": True}
ERROR = {"type": "object", "required": ["ok", "error", "code", "message"], "additionalProperties": False,
         "properties": {"ok": {"const": False}, "error": {"type": "string"}, "code": {"type": "integer"},
                        "message": {"type": "string"}, "details": _OBJECT}}
ROW = {"type": "object", "required": ["item", "title", "status", "priority", "labels", "holder", "expires_at"],
       "properties": {"item": {"type": "string"}, "title": {"type": "string"}, "status": {"type": "string"},
                      "priority": {"type": "integer"}, "labels": {"type": "array", "items": {"type": "string"}},
                      "holder": {"type": ["string", "null"]}, "expires_at": {"type": ["string", "null"]},
                      "expired": {"type": "boolean"}}}
ERROR_STATUSES = ("400", "401", "403", "404", "409", "413", "422", "500", "502", "503", "504")


def _ok(schema_: dict[str, Any], description: str = "As `gw --json` prints it.") -> dict[Any, Any]:
    return {200: {"description": description, "content": {"application/json": {"schema": schema_}}}}


def _array(of: dict[str, Any]) -> dict[str, Any]:
    return {"type": "array", "items": of}


def create_app(repo_path: str, *, extra_routers: Sequence[APIRouter] = (), cors_origins: Sequence[str] = (),
               now: Callable[[], Any] = clock.now, poll: float = 0.1, board: bool = True) -> FastAPI:
    """The application for the repository at ``repo_path``.

    ``extra_routers`` are mounted as they are (delegation's peer endpoints, issue 15): a route
    authenticates with ``Depends(gitwork.serve.server.principal)`` and acts through
    ``request.app.state.server.plane(who)`` (a Workplane acting as the token's identity and role).
    CORS is off unless ``cors_origins`` names origins. ``now`` is the clock every command sees.
    """
    server = Server(repo_path, now=now, poll=poll)

    @contextlib.asynccontextmanager
    async def lifespan(_app: FastAPI) -> AsyncIterator[None]:
        server.warm()  # the read cache, built while nobody waits for a page yet
        hooks = await asyncio.to_thread(Webhooks.configured, server.path, now)  # git config: docs/serve.md
        if hooks is not None:
            await hooks.start(server.watcher, server.path)
        yield
        if hooks is not None:
            await hooks.stop()
        await server.watcher.stop()
        server.writer.close()

    app = FastAPI(title="gitwork", version=__version__, lifespan=lifespan,
                  description="The work plane over HTTP: the command documents of `gw apply`, the JSON of "
                              "`gw --json`. Every request carries `Authorization: Bearer TOKEN` "
                              "(`gw serve token add NAME --role agent|person|admin`). See docs/serve.md.")
    app.state.server = server

    @app.exception_handler(GwError)
    async def _gw_error(_request: Request, error: GwError) -> JSONResponse:
        return error_response(error)

    @app.exception_handler(RequestValidationError)
    async def _bad_request(_request: Request, error: RequestValidationError) -> JSONResponse:
        first = error.errors()[0] if error.errors() else {}
        where = ".".join(str(p) for p in first.get("loc", ()) if p not in ("query", "path"))
        return error_response(UsageError(f"{where or 'request'}: {first.get('msg', 'invalid')}"))

    @app.exception_handler(StarletteHTTPException)
    async def _http_error(request: Request, error: StarletteHTTPException) -> JSONResponse:
        kind = {404: "not-found", 405: "usage"}.get(error.status_code, "usage")
        code = ExitCode.NOT_FOUND if error.status_code == 404 else ExitCode.USAGE
        headers = dict(error.headers or {})
        message = str(error.detail)
        if error.status_code == 405:  # every method some route takes on this path (Starlette names only one)
            allowed = allowed_methods(app, request)
            headers["Allow"] = ", ".join(allowed)
            message = f"{request.method} is not allowed on {request.url.path}: use {' or '.join(allowed)}"
        return JSONResponse({"ok": False, "error": kind, "code": int(code), "message": message},
                            status_code=error.status_code, headers=headers)

    @app.exception_handler(Exception)
    async def _internal(_request: Request, exc: Exception) -> JSONResponse:
        message = f"{type(exc).__name__}: {exc}".splitlines()[0]
        return JSONResponse({"ok": False, "error": "internal", "code": int(ExitCode.INTERNAL), "message": message},
                            status_code=500)

    if cors_origins:
        from fastapi.middleware.cors import CORSMiddleware

        app.add_middleware(CORSMiddleware, allow_origins=list(cors_origins), allow_methods=["GET", "POST"],
                           allow_headers=["Authorization", "Content-Type"])

    app.add_middleware(Guard)  # outermost but for CORS: refusals before any route (guard.py)
    app.include_router(api_router(server))
    from .reads import reads_router  # the board's extra reads (lease timelines, a terminal's capture)

    app.include_router(reads_router(server))
    if board:
        from .board import board_router

        app.include_router(board_router(server))
    for router in extra_routers:
        app.include_router(router)
    app.openapi = lambda: _openapi(app)  # type: ignore[method-assign]
    return app


METHODS = ("GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS")


def allowed_methods(app: FastAPI, request: Request) -> list[str]:
    """The methods some route of ``app`` answers on the request's path (the ``Allow`` of a 405)."""
    from starlette.routing import Match

    found = []
    for method in METHODS:
        scope = {**request.scope, "method": method}
        if any(route.matches(scope)[0] == Match.FULL for route in app.router.routes):
            found.append(method)
    return found


def _openapi(app: FastAPI) -> dict[str, Any]:
    """FastAPI's document, with the command schemas from the op registry and one error shape everywhere."""
    if app.openapi_schema:
        return app.openapi_schema
    doc = get_openapi(title=app.title, version=app.version, description=app.description, routes=app.routes)
    components = doc.setdefault("components", {})
    components.setdefault("schemas", {}).update({**schema.command_schemas(), "Error": ERROR})
    components["securitySchemes"] = {"bearer": {"type": "http", "scheme": "bearer"}}
    components["schemas"].pop("HTTPValidationError", None)
    components["schemas"].pop("ValidationError", None)
    from ..launch.run import LIVE
    from ..records.executions import TERMINAL

    # The parameters the engine validates, described as it validates them (the engine stays the validator,
    # answering 422 as for a document): an item id's shape, an execution state's names.
    described: dict[str, dict[str, Any]] = {"item": {"type": "string", "pattern": schema.ITEM_PATTERN},
                 "state": {"type": "string", "enum": [*LIVE, *TERMINAL]}}
    for path, methods in doc.get("paths", {}).items():
        for operation in methods.values():
            for parameter in operation.get("parameters", ()):
                if parameter.get("name") in described and (path.startswith("/v1/items/") or path == "/v1/executions"):
                    parameter["schema"] = {**described[parameter["name"]], "title": parameter["name"].title()}
                # A query string has no null: an optional parameter is absent, never null (FastAPI says
                # "anyOf [X, null]" for Optional; the parameter's schema is X).
                alternatives = parameter.get("schema", {}).get("anyOf")
                if parameter.get("in") == "query" and isinstance(alternatives, list) and {"type": "null"} in alternatives:
                    rest = [alt for alt in alternatives if alt != {"type": "null"}]
                    if len(rest) == 1:
                        parameter["schema"] = {**rest[0], "title": parameter["schema"].get("title", parameter["name"])}
            responses = operation.setdefault("responses", {})
            responses.pop("422", None)
            for status in ERROR_STATUSES:
                responses.setdefault(status, {"description": "An error, as `gw --json` prints it (docs/serve.md).",
                                              "content": {"application/json": {
                                                  "schema": {"$ref": "#/components/schemas/Error"}}}})
            if not path.startswith("/v1/"):
                continue
            operation["security"] = [{"bearer": []}]
    app.openapi_schema = doc
    return doc


def api_router(server: Server) -> APIRouter:
    router = APIRouter(prefix="/v1", tags=["v1"])
    Who = Depends(principal)

    @router.post("/commands", responses=_ok(RESULT, "The command landed (or was answered): as `gw --json`."),
                 openapi_extra={"requestBody": schema.command_body()})
    async def command(request: Request, who: Principal = Who) -> JSONResponse:
        """Submit one command document, as `gw apply` does. `as`, when given, must be the token's identity."""
        document = await read_document(request)
        applied = await asyncio.to_thread(submit, server, who, document)
        return JSONResponse(applied)

    @router.get("/items", responses=_ok(_array(ROW), "As `gw list --json`."))
    def items(status: Optional[list[StatusName]] = Query(None), label: Optional[list[str]] = Query(None),  # type: ignore[valid-type]
              label_any: Optional[list[str]] = Query(None), all: bool = False, holder: Optional[str] = None, owner: Optional[str] = None,
              priority: Optional[int] = Query(None, ge=0, le=4), sort: SortName = SortName.rank,  # type: ignore[valid-type,attr-defined]
              limit: Optional[int] = Query(None, ge=0, le=MAX_LIMIT), who: Principal = Who) -> JSONResponse:
        """Items, best first (open and active ones unless `all` or `status`): `gw list`."""
        return JSONResponse(listing(server, who, statuses=[s.value for s in status or ()] or None, closed=all,
                                    labels=label, labels_any=label_any, holder=holder, owner=owner, priority=priority,
                                    sort=sort.value, limit=limit))

    @router.get("/ready", responses=_ok(_array(ROW), "As `gw ready --json`."))
    def ready(label: Optional[list[str]] = Query(None), label_any: Optional[list[str]] = Query(None),
              owner: Optional[str] = None,
              priority: Optional[int] = Query(None, ge=0, le=4), sort: SortName = SortName.rank,  # type: ignore[valid-type,attr-defined]
              limit: Optional[int] = Query(None, ge=0, le=MAX_LIMIT), who: Principal = Who) -> JSONResponse:
        """Open, unleased items whose dependencies are done, best first: `gw ready`."""
        return JSONResponse(listing(server, who, ready=True, labels=label, labels_any=label_any, owner=owner,
                                    priority=priority, sort=sort.value, limit=limit))

    @router.get("/items/{item}", responses=_ok(RESULT, "As `gw show --json`."))
    def show(item: str, who: Principal = Who) -> JSONResponse:
        """One item: fields, criteria, decisions and its lease (`gw show`)."""
        from ..reports import show_json

        with server.plane(who) as wp:
            return JSONResponse(show_json(wp.show(item)))

    @router.get("/items/{item}/history", responses=_ok(_array(_OBJECT), "As `gw history --json`."))
    def history(item: str, who: Principal = Who) -> JSONResponse:
        """An item's own event history (`gw history`)."""
        with server.plane(who) as wp:
            return JSONResponse(wp.history(item))

    @router.get("/items/{item}/thread", responses=_ok(_array(_OBJECT), "As `gw thread --json`."))
    def thread(item: str, since: int = Query(0, ge=0), who: Principal = Who) -> JSONResponse:
        """An item's thread after message `since` (`gw thread --since`)."""
        with server.plane(who) as wp:
            return JSONResponse(wp.thread(item, since)[1])

    @router.get("/items/{item}/thread/events", responses={200: {
        "description": "Server-Sent Events: `event: message`, one per message after `since`, as they land.",
        "content": {"text/event-stream": {"schema": {"type": "string"}}}}})
    async def thread_events(request: Request, item: str, since: int = Query(0, ge=0),
                            who: Principal = Who) -> StreamingResponse:
        """Follow a thread (`gw thread --follow`): every message after `since` (after `Last-Event-ID`, when a
        reconnecting EventSource sends it), then each new one."""
        start = last_event_id(request.headers.get("last-event-id"), since)
        item_id, _first = await asyncio.to_thread(read_thread, server, who, item, 0)  # 404 before streaming
        return stream(follow_thread(server, who, item_id, start))

    @router.get("/inbox", responses=_ok(RESULT, "As `gw inbox --json`."))
    def inbox(who: Principal = Who) -> JSONResponse:
        """The token identity's inbox: unread, then read but unanswered (`gw inbox`)."""
        from ..reports import drop_answered

        with server.plane(who) as wp:
            return JSONResponse({"ok": True, **drop_answered(wp, wp.inbox())})

    @router.get("/executions", responses=_ok(_array(_OBJECT), "As `gw runs --json`."))
    def executions(item: Optional[str] = None, state: Optional[str] = None, who: Principal = Who) -> JSONResponse:
        """Executions recorded on the state ref (`gw runs`)."""
        from ..launch.run import runs

        with server.plane(who) as wp:
            return JSONResponse(runs(wp, item, state))

    @router.get("/sessions", responses=_ok(_array(_OBJECT), "As `gw session list --json`."))
    def sessions(who: Principal = Who) -> JSONResponse:
        """Session branches of this repository (`gw session list`)."""
        from ..sessions import list_sessions

        with server.plane(who) as wp:
            return JSONResponse(list_sessions(wp))

    @router.post("/queue", responses=_ok(RESULT, "The session was queued: as `POST /v1/commands` answers."),
                 openapi_extra={"requestBody": {
                     "required": True, "description": "The `queue-add` document; `op` may be left out.",
                     "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Command_queue_add"}}}}})
    async def enqueue(request: Request, who: Principal = Who) -> JSONResponse:
        """Queue a committed session for the publisher (`queue-add`: only its holder). The session branch
        must be on the code remote already (`gw publish --queue` pushes it), else the publisher sends it back."""
        document = await read_document(request)
        applied = await asyncio.to_thread(submit, server, who, {**document, "op": "queue-add"})
        return JSONResponse(applied)

    @router.get("/queue", responses=_ok(_array(_OBJECT), "As `gw queue --json`."))
    def queue(who: Principal = Who) -> JSONResponse:
        """The publish queue, head first (`gw queue`); queue a session with the `queue-add` command."""
        from ..pubqueue import listing as queued

        with server.plane(who) as wp:
            return JSONResponse(queued(wp))

    @router.get("/log", responses=_ok(_array(_OBJECT), "As `gw log --json`."))
    def log(limit: Optional[int] = Query(None, ge=0, le=MAX_LIMIT), who: Principal = Who) -> JSONResponse:
        """The state ref's history, newest first: one commit per command (`gw log`)."""
        with server.plane(who) as wp:
            return JSONResponse(list(wp.log(limit or None)))

    @router.get("/events", responses={200: {
        "description": "Server-Sent Events: `event: state` with `{commit, previous, range, moves}` each time the "
                   "state ref moves (`range` is `previous..commit`: every move it covers).",
        "content": {"text/event-stream": {"schema": {"type": "string"}}}}})
    async def events(who: Principal = Who) -> StreamingResponse:
        """Every move of the state ref, by anyone (this server, `gw`, `gw sync`)."""
        return stream(follow_ref(server, who))

    @router.get("/whoami", responses=_ok(RESULT, "The token's identity and role."))
    def whoami(who: Principal = Who) -> JSONResponse:
        """Who this token acts as."""
        return JSONResponse({"ok": True, "who": who.name, "role": who.role, "token": who.token_id})

    return router


# --- writes -----------------------------------------------------------------------------------------


async def read_document(request: Request) -> Any:
    """The body as one JSON value; bounded (413 past :data:`MAX_BODY`), malformed JSON is a usage error."""
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > MAX_BODY:
        raise TooLarge(f"the body is {declared} bytes; at most {MAX_BODY}")
    body = bytearray()
    async for chunk in request.stream():
        body += chunk
        if len(body) > MAX_BODY:
            raise TooLarge(f"the body is more than {MAX_BODY} bytes")
    # The content type, UTF-8 and lone surrogates were checked by guard.Guard before this route ran.
    from ..codec import check_depth

    try:
        document = json.loads(bytes(body).decode("utf-8"), parse_float=_json_number, parse_constant=_not_json)
        check_depth(document)
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:
        raise UsageError(f"the body is not a JSON command document: {str(exc).splitlines()[0][:200]}") from exc
    if not isinstance(document, dict):
        raise UsageError("a command document is a JSON object with an 'op'")
    return document


def _json_number(text: str) -> int | float:
    """A JSON number with a fraction: the integer it equals when it has none (``3.0``, ``1e2``), as JSON
    Schema counts it an integer, so the OpenAPI document's integers are exactly the server's."""
    value = float(text)
    return int(value) if value.is_integer() and abs(value) <= MAX_INT_EXACT else value


def _not_json(text: str) -> Any:
    raise ValueError(f"{text} is not JSON")  # Python's json reads NaN and Infinity; JSON has neither


MAX_INT_EXACT = 2**53


def _as_token(document: dict[str, Any], who: Principal, where: str = "the document") -> dict[str, Any]:
    """``document`` acting as the token's identity: its ``as`` absent or the token's own (403 otherwise),
    and so for every member of a batch (each member names its own ``as``)."""
    claimed = document.get("as")
    if claimed is not None and claimed != who.name:
        raise Forbidden(f"this token acts as {who.name}, not {claimed!r} ({where}): leave 'as' out",
                        who=who.name)
    document = {**document, "as": who.name}
    members = document.get("ops") if document.get("op") == "batch" else None
    if isinstance(members, list):
        document["ops"] = [_as_token(m, who, f"batch member #{n}") if isinstance(m, dict) else m
                           for n, m in enumerate(members, 1)]
    return document


def submit(server: Server, who: Principal, document: Any) -> dict[str, Any]:
    """One command through the library's write path, as the token's identity."""
    if isinstance(document, dict):
        document = _as_token(document, who)
    engine.validate_command(document, internal=False)  # refused here: nothing opened, nothing written
    return server.write(who, document).to_json()  # type: ignore[no-any-return]


# --- running ----------------------------------------------------------------------------------------


def serving_app(repo_path: str, *, cors_origins: Sequence[str] = ()) -> FastAPI:
    """The application ``gw serve`` runs: :func:`create_app` with delegation's peer endpoints mounted when a
    peer is configured here (``gitwork.peer.<name>.*``; docs/security.md), none otherwise."""
    from ..delegation.peer_api import maybe_router

    peer = maybe_router(repo_path)
    return create_app(repo_path, cors_origins=cors_origins, extra_routers=[peer] if peer is not None else [])


def serve(repo_path: str, host: str, port: int, *, cors_origins: Sequence[str] = (),
          ready: Callable[[str, int], None] | None = None) -> None:
    """Run the server until interrupted (``gw serve``); ``ready(host, port)`` once it listens."""
    import uvicorn

    from .threaded import bound_socket

    app = serving_app(repo_path, cors_origins=cors_origins)
    sock = bound_socket(host, port)  # bound here, so port 0 picks a free port and we can say which
    bound = sock.getsockname()[1]
    config = uvicorn.Config(app, log_level=os.environ.get("GW_SERVE_LOG", "warning"), access_log=False,
                            timeout_graceful_shutdown=2)
    server = uvicorn.Server(config)
    if ready is not None:
        ready(host, bound)
    server.run(sockets=[sock])


__all__ = ["create_app", "serve", "HTTP_STATUS", "Principal", "Server"]
