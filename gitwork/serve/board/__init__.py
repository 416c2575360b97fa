"""The board: server-rendered pages over the same reads as the API, a little JavaScript, no build step.

``/`` shows the items in columns by status (searched, filtered and paged on the server: ``columns.py``),
each card with its lease holder and a live countdown to expiry, and the ready order; ``/items/ID`` an
item (``item.py``: criteria, decisions, thread, its dependency picture, its lease timeline, and the
admin's steering: revoke, hand off, stop); ``/graph`` the whole board's dependency graph
(``pictures.py``, laid out by ``graph.py``); ``/leases`` who held what and when (``leases.py``);
``/executions`` the executions with their live terminals (``runs.py``). Every action is a command document posted to ``/v1/commands`` (the page's JavaScript builds
it from the form), so the board has no write path of its own. The page listens to ``/v1/events`` and
re-renders its live part when the state ref moves, whoever moved it.

The browser authenticates with the token once (``/login``): the token is kept in an HttpOnly,
SameSite=Strict cookie, which the API accepts in place of the ``Authorization`` header. SameSite does
not separate two ports of one host, so a request the cookie authenticates must also come from this
origin, and one that changes anything must carry the session's CSRF token, which each page holds in
``<meta name="gw-csrf">`` (``guard.check_cookie_request``); sign-in and sign-out check the origin too.
"""

from __future__ import annotations

from typing import Callable
from urllib.parse import parse_qs, quote

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response

from ...errors import ExitCode, GwError, UsageError
from ..guard import CSRF_FIELD, CrossOrigin, same_origin
from ..server import COOKIE, Principal, Server, Unauthorized, principal
from .columns import Filters, render_board
from .item import render_item
from .leases import render_leases
from .page import ASSETS, asset, esc, page
from .pictures import render_graph
from .runs import render_executions

__all__ = ["board_router", "page", "esc"]
# A page's refusal: the API's status for its kind (app.HTTP_STATUS), a page's 409 otherwise.
PAGE_STATUS = {ExitCode.NOT_FOUND: 404, ExitCode.USAGE: 400, ExitCode.INVALID: 422, ExitCode.FORBIDDEN: 403}


def _int(request: Request, name: str, default: int) -> int:
    text = request.query_params.get(name)
    if text is None or text == "":
        return default
    if not text.isdigit() or len(text) > 9:
        raise UsageError(f"{name} is a whole number, not {text[:20]!r}")
    return int(text)


def board_router(server: Server) -> APIRouter:
    router = APIRouter(include_in_schema=False)

    def signed_in(request: Request, title: str, render: Callable[[Principal], str]) -> Response:
        """The page ``render(who)`` makes, or the sign-in form for a browser without a live token."""
        try:
            who = principal(request)
        except Unauthorized:
            return RedirectResponse(f"/login?next={quote(request.url.path)}", status_code=303)
        try:
            commit = server.tip()  # before the render: a move after it is one the page has not shown
            return page(title, render(who), who=who, commit=commit)
        except GwError as error:
            return page(error.kind, f'<p class="error">{esc(error.message)} <small>(exit {int(error.code)})</small>'
                        f'</p><p><a href="/">Back to the board</a></p>', who=who,
                        status=PAGE_STATUS.get(error.code, 409))

    @router.get("/login")
    def login_form(next: str = "/") -> HTMLResponse:  # noqa: A002 - the query parameter's name
        return page("Sign in", f"""
<form method="post" action="/login" class="login">
  <p>Paste a token from <code>gw serve token add NAME --role person</code>.</p>
  <input type="hidden" name="next" value="{esc(next)}">
  <input type="password" name="token" placeholder="gwt_..." autocomplete="off" size="50" autofocus>
  <button type="submit">Sign in</button>
</form>""", who=None)

    def from_here(request: Request) -> None:
        """A sign-in or sign-out posted by a page of another origin is refused (login CSRF)."""
        if same_origin(request.headers) is False:
            raise CrossOrigin("sign in and out from this server's own pages")

    @router.post("/login")
    async def login(request: Request) -> Response:
        from_here(request)
        body = (await request.body())[:4096].decode("utf-8", "replace")
        form = {key: values[0] for key, values in parse_qs(body).items()}
        token = form.get("token", "").strip()
        target = form.get("next", "/")
        if not target.startswith("/") or target.startswith("//"):
            target = "/"  # never redirect off this server
        if not token or server.tokens.lookup(token) is None:
            return page("Sign in", '<p class="error">Unknown or revoked token.</p><p><a href="/login">Again</a></p>',
                        who=None, status=401)
        response = RedirectResponse(target, status_code=303)
        response.set_cookie(COOKIE, token, httponly=True, samesite="strict", path="/")
        return response

    @router.post("/logout")
    async def logout(request: Request) -> Response:
        from_here(request)
        body = (await request.body())[:4096].decode("utf-8", "replace")
        form = {key: values[0] for key, values in parse_qs(body).items()}
        try:
            server.authenticate(request, form_csrf=form.get(CSRF_FIELD))  # the session's own sign-out form only
        except Unauthorized:
            pass  # no live token: clearing the cookie is all there is to do
        response = RedirectResponse("/login", status_code=303)
        response.delete_cookie(COOKIE, path="/")
        return response

    @router.get("/")
    def board(request: Request) -> Response:
        def render(who: Principal) -> str:
            params = request.query_params
            filters = Filters(params.get("q", ""), params.getlist("label"), params.get("status") or None,
                              _int(request, "page", 1))
            return render_board(server, who, filters)

        return signed_in(request, "Board", render)

    @router.get("/graph")
    def graph_page(request: Request) -> Response:
        params = request.query_params
        return signed_in(request, "Graph", lambda who: render_graph(server, who, params.getlist("label"),
                                                                    params.getlist("status")))

    @router.get("/leases")
    def leases_page(request: Request) -> Response:
        from ..timeline import WINDOW

        params = request.query_params
        return signed_in(request, "Leases", lambda who: render_leases(
            server, who, params.get("holder") or None, params.get("before") or None, _int(request, "limit", WINDOW)))

    @router.get("/items/{item}")
    def item_page(item: str, request: Request) -> Response:
        return signed_in(request, item, lambda who: render_item(server, who, item))

    @router.get("/executions")
    def executions_page(request: Request) -> Response:
        return signed_in(request, "Executions", lambda who: render_executions(server, who))

    @router.get("/board.js")
    def script() -> Response:
        return Response(asset("board.js"), media_type=ASSETS["board.js"], headers={"Cache-Control": "no-cache"})

    @router.get("/board.css")
    def style() -> Response:
        return Response(asset("board.css"), media_type=ASSETS["board.css"], headers={"Cache-Control": "no-cache"})

    return router
