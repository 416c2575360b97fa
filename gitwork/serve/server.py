"""What ``gw serve`` keeps between requests, below both the API (``app.py``) and the board (``board.py``):
the repository, the token file, who a request acts as, and the watcher of the state ref.
"""

from __future__ import annotations

import asyncio
import contextlib
import secrets
import threading
from typing import Any, Callable, Iterator

from fastapi import Request

from ..engine import Applied
from ..errors import ExitCode, GwError
from ..fsutil import stamp
from ..store import Repository
from ..workplane import Workplane
from .guard import check_cookie_request, csrf_token
from .tokens import Tokens
from .writer import Writer, with_role

COOKIE = "gw_token"  # the board's session cookie: the token, HttpOnly, SameSite=Strict


class Unauthorized(GwError):
    """No bearer token, or one that is unknown or revoked (HTTP 401; no exit code of its own)."""

    code, kind = ExitCode.FORBIDDEN, "unauthorized"


class TooLarge(GwError):
    code, kind = ExitCode.INVALID, "too-large"


class Principal:
    """Who a request acts as: the token's identity and role."""

    __slots__ = ("name", "role", "token_id", "csrf")

    def __init__(self, name: str, role: str, token_id: str, csrf: str | None = None) -> None:
        self.name, self.role, self.token_id = name, role, token_id
        self.csrf = csrf  # the session's CSRF token when the board's cookie authenticated the request


class Server:
    """What the application keeps between requests: the repository, the token file, the ref watcher."""

    def __init__(self, repo_path: str, *, now: Callable[[], Any], poll: float) -> None:
        repo = self.repo = Repository.discover(repo_path)
        self.path = repo.toplevel or repo.git_dir
        self.tokens = Tokens(repo.gitwork_dir())
        self.now = now
        self.secret = secrets.token_bytes(32)  # the key of the board's CSRF tokens, new at each start
        self.watcher = RefWatcher(self.path, poll, self.tokens.path)
        self.writer = Writer(self.path, now)

    def authenticate(self, request: Request, form_csrf: str | None = None) -> Principal:
        """Who the request acts as. A token from the board's cookie (not from an ``Authorization`` header)
        also needs the request to come from this origin, with the session's CSRF token when it changes
        anything (``guard.check_cookie_request``; ``form_csrf``: the token a plain HTML form posted)."""
        header = request.headers.get("authorization", "")
        scheme, _, token = header.partition(" ")
        by_cookie = not header
        if by_cookie:
            token = request.cookies.get(COOKIE, "")  # the board's pages and their event streams
        elif scheme.lower() != "bearer":
            raise Unauthorized("use an 'Authorization: Bearer TOKEN' header (gw serve token add NAME)")
        if not token:
            raise Unauthorized("no bearer token: send 'Authorization: Bearer TOKEN' (gw serve token add NAME)")
        token = token.strip()
        entry = self.tokens.lookup(token)
        if entry is None:
            raise Unauthorized("unknown or revoked token")
        csrf = None
        if by_cookie:
            csrf = csrf_token(self.secret, token)
            check_cookie_request(request.method, request.headers, csrf, form_csrf)
        return Principal(entry["name"], entry["role"], entry["id"], csrf)

    def tip(self) -> str | None:
        """The state ref's commit now, as the watcher reads it (a file read unless git must be asked). A
        board page carries the one read before it was rendered, so the page can tell whether a move
        happened before its event stream opened (``board.js``)."""
        from .. import gitdir

        found = gitdir.read_ref(self.repo.common_dir, self.repo.settings.ref) if self.repo.fast_refs else False
        return found if isinstance(found, str) or found is None else self.watcher._read()

    def warm(self) -> threading.Thread:
        """Bring the read cache to the tip in a thread of its own, started with the server: the first page
        or listing then reads a built cache instead of building it (10,000 items: most of a cold board's
        first render; ``index.rebuild``). A request arriving meanwhile waits for the same build (the
        cache's write lock) rather than doing it twice. A daemon: a server stopped meanwhile does not wait
        for it, and SQLite rolls back what it had not committed."""

        def build() -> None:
            from ..index import rebuild

            try:
                with Workplane(self.path) as wp:
                    rebuild(wp.context().snapshot)
            except Exception:  # noqa: BLE001 - nothing to report to: the first request builds and says why
                pass

        thread = threading.Thread(target=build, name="gw-serve-warm", daemon=True)
        thread.start()
        return thread

    def live(self, who: Principal) -> bool:
        """Whether the token ``who`` acts under is still live (an open stream asks after each change of
        the token file)."""
        return self.tokens.live(who.token_id)

    @contextlib.contextmanager
    def plane(self, who: Principal) -> Iterator[Workplane]:
        """A work plane acting as the token's identity, its role the token's (whatever the settings say)."""
        wp = Workplane(self.path, agent=who.name, now=self.now)
        try:
            wp.settings = wp.repo.settings = with_role(wp.settings, who.name, who.role)
            yield wp
        finally:
            wp.close()

    def write(self, who: Principal, document: dict[str, Any]) -> Applied:
        """``document`` through the library's write path as the token's identity and role: decided in the
        server's turn with the other waiting writes, on its one kept-open plane (writer.py says why); on a
        clone whose writes push, through a plane of its own (its turn, ``pushturn``, folds them)."""
        applied = self.writer.submit(who.name, who.role, document)
        if applied is not None:
            return applied
        with self.plane(who) as wp:
            return wp.submit(document)


class RefWatcher:
    """Watches the state ref (a file read per look, no process) and wakes every event stream on a change,
    whoever moved it: this server, a ``gw`` process, ``gw sync``. It also watches the token file, so an
    open stream learns within one poll that its token was revoked.

    ``version`` counts the changes of the ref seen, ``tokens`` those of the token file; a stream remembers
    the pair it has shown and waits for another (:meth:`changed_since`). Each change resolves the one
    pending future ``_moved`` and puts a fresh one in its place; a waiter checks the counts and takes that
    future with no await between, so no change is lost between its look and its wait.

    There is deliberately no lock (an ``asyncio.Condition`` was here): a stream is cancelled when its
    browser goes away (Starlette cancels it through an anyio scope, which repeats the cancellation), and a
    waiter cancelled while ``asyncio.wait_for`` was still cancelling the inner ``Condition.wait`` left the
    condition's lock held by a task that had already ended. The next change then blocked the watcher for
    good, and every open page stopped updating (tests/test_serve_background.py has the sequence). A future
    that a cancelled waiter merely stops watching holds nothing.
    """

    def __init__(self, path: str, poll: float, tokens_path: str | None = None) -> None:
        self.path, self.poll, self.tokens_path = path, poll, tokens_path
        self.tip: str | None = None
        self.version = 0
        self.tokens = 0
        self._tokens_seen: tuple[int, int, int] | None = None
        self._moved: asyncio.Future[None] | None = None
        self._ready: asyncio.Event | None = None
        self._task: asyncio.Task[None] | None = None

    async def start(self) -> None:
        """Start watching (once per event loop; every stream calls it) and wait for the first look. A
        watcher whose task ended (an error nothing above catches) is started again, not left dead."""
        if self._task is None or self._task.done():
            loop = asyncio.get_running_loop()
            if self._moved is None or self._moved.get_loop() is not loop:
                self._moved, self._ready = loop.create_future(), asyncio.Event()
            self._task = loop.create_task(self._run())
        assert self._ready is not None
        await self._ready.wait()

    def _read(self) -> str | None:
        with Workplane(self.path) as wp:
            return wp.store.tip()

    def _stat_tokens(self) -> tuple[int, int, int] | None:
        if self.tokens_path is None:
            return None
        return stamp(self.tokens_path)

    def publish(self, tip: str | None, tokens: tuple[int, int, int] | None) -> None:
        """What one look found: count the changes and wake every waiter (synchronous: nothing to hold)."""
        if tip == self.tip and tokens == self._tokens_seen:
            return
        if tip != self.tip:
            self.tip = tip
            self.version += 1
        if tokens != self._tokens_seen:
            self._tokens_seen = tokens
            self.tokens += 1
        moved, self._moved = self._moved, asyncio.get_running_loop().create_future()
        if moved is not None and not moved.done():
            moved.set_result(None)

    async def _run(self) -> None:
        from .. import gitdir

        assert self._ready is not None
        repo = Repository.discover(self.path)
        ref = repo.settings.ref
        tip: str | None
        try:
            tip = await asyncio.to_thread(self._read)
        except (GwError, OSError):
            tip = self.tip
        if self._ready.is_set():
            self.publish(tip, self._stat_tokens())  # started again: what moved while it was down counts
        else:
            self.tip, self._tokens_seen = tip, self._stat_tokens()
            self._ready.set()
        while True:
            await asyncio.sleep(self.poll)
            tokens = self._stat_tokens()
            try:
                found = gitdir.read_ref(repo.common_dir, ref) if repo.fast_refs else False
                tip = found if isinstance(found, str) or found is None else await asyncio.to_thread(self._read)
            except (GwError, OSError):
                tip = self.tip
            self.publish(tip, tokens)

    async def changed_since(self, version: int, timeout: float, tokens: int | None = None) -> int:
        """The watcher's version once it differs from ``version`` (or the token file's count differs from
        ``tokens``, when given), or ``version`` after ``timeout`` seconds."""
        await self.start()
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while self.version == version and (tokens is None or self.tokens == tokens):
            left = deadline - loop.time()
            if left <= 0:
                break
            moved = self._moved
            assert moved is not None
            # asyncio.wait neither cancels nor holds ``moved``: a waiter cancelled here leaves it as it was.
            await asyncio.wait((moved,), timeout=left)
        return self.version

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._task
            self._task = None


def listing(server: Server, who: Principal, *, sort: str, limit: int | None, priority: int | None,
            **filters: Any) -> list[dict[str, Any]]:
    """``gw list`` / ``gw ready``: SQL over the read cache (``queries.select``), rows as ``gw --json``."""
    from ..queries import select
    from ..reports import listing_json

    with server.plane(who) as wp:
        ctx = wp.context()
        picked = select(ctx.snapshot, ctx.now, wp.settings.clock_margin, sort=sort, limit=limit, priority=priority,
                        shorten=False, **filters)
        return listing_json(picked.rows, ctx.now, waiting=picked.waiting)


def read_thread(server: Server, who: Principal, item: str, since: int) -> tuple[str, list[dict[str, Any]]]:
    with server.plane(who) as wp:
        return wp.thread(item, since)


def principal(request: Request) -> Principal:
    """A FastAPI dependency for any route of the application (``Depends(principal)``): who the request's
    token acts as; 401 without a live token. Routers mounted with ``create_app(extra_routers=...)`` use it,
    and act through ``request.app.state.server.plane(who)``."""
    server: Server = request.app.state.server
    return server.authenticate(request)
