"""What ``gw serve`` refuses before any route runs, and the board's cross-origin rules.

:class:`Guard` is an ASGI middleware in front of every route (the API, the board, mounted routers such
as delegation's peer endpoints):

- a path or query string whose percent-decoded bytes are not UTF-8 is 422 ``invalid``;
- a request to a route that takes a JSON body (its OpenAPI ``requestBody`` is ``application/json``)
  must say ``Content-Type: application/json`` (a ``charset`` other than UTF-8 is refused too): 415
  ``usage`` otherwise. A cross-site form can only send ``text/plain``, urlencoded or multipart, and a
  ``fetch`` without CORS no ``application/json``, so this also closes the simple-request hole;
- that body, read here (at most ``MAX_BODY`` bytes: 413 past it), must be UTF-8 and, once parsed, hold
  no lone surrogate (``"\\ud800"``) in any string or key: 422 ``invalid``. Malformed JSON passes on to
  the route, which answers it as it always did (400). The body read is handed on to the route as it is.

The answer is always a complete response and the body is always read to its end first, so the
connection stays usable (keep-alive) after a refusal.

The board's cookie (:func:`check_cookie_request`): a request authenticated by the cookie rather than an
``Authorization`` header must come from the server's own origin. Another port of 127.0.0.1 is another
origin but the *same site*, so ``SameSite=Strict`` does not stop its pages from sending the cookie: the
origin check does, and each state-changing request also carries the session's CSRF token
(:func:`csrf_token`, in the page's ``<meta name="gw-csrf">``, sent as ``X-CSRF-Token``).
"""

from __future__ import annotations

import hashlib
import hmac
import json
import re
from typing import Any, Awaitable, Callable, MutableMapping
from urllib.parse import unquote_to_bytes

from ..errors import ExitCode, Forbidden

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]

MAX_BODY = 256 * 1024  # the largest body any route takes (a command document); the routes bound their own
SAFE_METHODS = ("GET", "HEAD", "OPTIONS")
CSRF_HEADER = "x-csrf-token"
CSRF_FIELD = "csrf"


class CrossOrigin(Forbidden):
    """A request carrying the board's cookie from another origin, or without the session's CSRF token."""


# --- the middleware ---------------------------------------------------------------------------------


def _json_error(status: int, kind: str, code: ExitCode, message: str) -> tuple[int, bytes]:
    return status, json.dumps({"ok": False, "error": kind, "code": int(code), "message": message}).encode()


def is_utf8(data: bytes) -> bool:
    try:
        data.decode("utf-8")  # strict: refuses encoded surrogates (ED A0 80) and overlong forms too
    except UnicodeDecodeError:
        return False
    return True


def has_lone_surrogate(value: Any) -> bool:
    """Whether any string (or key) in a parsed JSON value holds a surrogate code point."""
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            try:
                item.encode("utf-8")
            except UnicodeEncodeError:
                return True
        elif isinstance(item, dict):
            stack.extend(item.keys())
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
    return False


def json_content_type(header: str | None) -> bool:
    """``application/json``, with no parameter or a UTF-8 ``charset`` (case-insensitive)."""
    if not header:
        return False
    kind, *params = [part.strip().lower() for part in header.split(";")]
    if kind != "application/json":
        return False
    for param in params:
        name, _, value = param.partition("=")
        if name.strip() == "charset" and value.strip().strip('"') not in ("utf-8", "utf8"):
            return False
    return True


class Guard:
    """The ASGI middleware described in the module's docstring."""

    def __init__(self, app: Any) -> None:
        self.app = app
        self._json_routes: list[tuple[str, re.Pattern[str]]] | None = None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        raw_path = scope.get("raw_path") or scope.get("path", "").encode("utf-8", "surrogateescape")
        if not is_utf8(unquote_to_bytes(raw_path)) or not is_utf8(unquote_to_bytes(scope.get("query_string", b""))):
            await self._drain(receive)
            await _respond(send, *_json_error(422, "invalid", ExitCode.INVALID,
                                              "the path or query string is not UTF-8 once percent-decoded"))
            return
        if scope["method"] in SAFE_METHODS or not self._json_route(scope):
            await self.app(scope, receive, send)
            return
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope.get("headers", ())}
        if not json_content_type(headers.get("content-type")):
            await self._drain(receive)
            said = headers.get("content-type") or "none"
            await _respond(send, *_json_error(415, "usage", ExitCode.USAGE,
                                              f"send the body as application/json (UTF-8), not {said[:100]}"))
            return
        body, complete = await self._read(receive)
        if not complete:
            await _respond(send, *_json_error(413, "too-large", ExitCode.INVALID,
                                              f"the body is more than {MAX_BODY} bytes"))
            return
        refusal = None
        if not is_utf8(body):
            refusal = "the body is not UTF-8"
        else:
            try:
                parsed = json.loads(body)
            except (ValueError, RecursionError):
                parsed = None  # malformed JSON: the route answers it (400)
            if has_lone_surrogate(parsed):
                refusal = "the body holds a lone surrogate (\\ud800-\\udfff): text must be valid Unicode"
        if refusal is not None:
            await _respond(send, *_json_error(422, "invalid", ExitCode.INVALID, refusal))
            return
        await self.app(scope, _replay(body, receive), send)

    def _json_route(self, scope: Scope) -> bool:
        """Whether the request's method and path are an operation whose documented body is JSON (the
        application's own OpenAPI document: the API, and every mounted router's documented routes)."""
        if self._json_routes is None:
            app: Any = scope.get("app")
            doc = app.openapi() if app is not None and hasattr(app, "openapi") else {}
            self._json_routes = [
                (method.upper(), re.compile("^" + re.sub(r"\\\{[^}]+\\\}", "[^/]+", re.escape(path)) + "$"))
                for path, methods in doc.get("paths", {}).items() for method, operation in methods.items()
                if isinstance(operation, dict)
                and "application/json" in operation.get("requestBody", {}).get("content", {})]
        path = scope.get("path", "")
        return any(method == scope["method"] and pattern.match(path) for method, pattern in self._json_routes)

    @staticmethod
    async def _read(receive: Receive) -> tuple[bytes, bool]:
        """The whole body, or ``(what was read, False)`` once it passes :data:`MAX_BODY` (the rest is
        drained, so the connection can carry the next request)."""
        body = bytearray()
        while True:
            message = await receive()
            if message["type"] != "http.request":
                return bytes(body), True
            body += message.get("body", b"")
            if len(body) > MAX_BODY:
                if message.get("more_body", False):
                    await Guard._drain(receive)
                return bytes(body), False
            if not message.get("more_body", False):
                return bytes(body), True

    @staticmethod
    async def _drain(receive: Receive) -> None:
        while True:
            message = await receive()
            if message["type"] != "http.request" or not message.get("more_body", False):
                return


def _replay(body: bytes, receive: Receive) -> Receive:
    sent = False

    async def replay() -> Message:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()  # what follows the body: a disconnect

    return replay


async def _respond(send: Send, status: int, body: bytes) -> None:
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]})
    await send({"type": "http.response.body", "body": body})


# --- the board's cookie -----------------------------------------------------------------------------


def csrf_token(secret: bytes, token: str) -> str:
    """The CSRF token of the session that signed in with ``token``: a MAC under the server's secret (a
    new one each time the server starts), so it needs no storage and names no token."""
    return hmac.new(secret, token.encode("utf-8", "surrogatepass"), hashlib.sha256).hexdigest()


def same_origin(headers: Any) -> bool | None:
    """Whether the browser says the request comes from this server's own origin: ``True`` (an ``Origin``
    naming this host and port, or ``Sec-Fetch-Site: same-origin``), ``False`` (it names another), ``None``
    (it says nothing: not a browser, or a top-level navigation)."""
    site = (headers.get("sec-fetch-site") or "").lower()
    origin = headers.get("origin")
    if origin is not None:
        host = headers.get("host", "")
        _scheme, _, rest = origin.partition("://")
        return bool(rest) and rest.rstrip("/").lower() == host.lower()
    if site:
        return site == "same-origin" if site != "none" else None
    return None


def check_cookie_request(method: str, headers: Any, expected_csrf: str, form_csrf: str | None = None) -> None:
    """Refuse (403, :class:`CrossOrigin`) a request authenticated by the board's cookie that another origin
    sent: any request whose ``Origin``/``Sec-Fetch-Site`` names another origin; and a state-changing one
    unless the browser vouches for the origin and the session's CSRF token comes with it."""
    verdict = same_origin(headers)
    if method.upper() in SAFE_METHODS and (headers.get("sec-fetch-mode") or "").lower() == "navigate":
        return  # a link to the board followed from elsewhere: a page to look at, nothing more
    if verdict is False:
        raise CrossOrigin("a request with the board's cookie from another origin is refused "
                          "(send an Authorization header instead)")
    if method.upper() in SAFE_METHODS:
        return  # reads change nothing, and another origin cannot read the answer (no CORS with credentials)
    if verdict is not True:
        raise CrossOrigin("a state-changing request with the board's cookie needs an Origin header of this "
                          "server (browsers send one)")
    given = headers.get(CSRF_HEADER) or form_csrf or ""
    if not hmac.compare_digest(given.encode("utf-8", "surrogatepass"), expected_csrf.encode()):
        raise CrossOrigin("a state-changing request with the board's cookie needs the page's CSRF token "
                          "(X-CSRF-Token); reload the page")
