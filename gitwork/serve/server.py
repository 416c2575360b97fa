"""What ``gw serve`` keeps between requests, below both the API (``app.py``) and the board (``board.py``):
the repository, the token file, who a request acts as, and the watcher of the state ref.
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any, Callable, Iterator

from fastapi import Request

from ..errors import ExitCode, GwError
from ..store import Repository
from ..workplane import Workplane
from .tokens import Tokens

COOKIE = "gw_token"  # the board's session cookie: the token, HttpOnly, SameSite=Strict


class Unauthorized(GwError):
    """No bearer token, or one that is unknown or revoked (HTTP 401; no exit code of its own)."""

    code, kind = ExitCode.FORBIDDEN, "unauthorized"


class TooLarge(GwError):
    code, kind = ExitCode.INVALID, "too-large"


class Principal:
    """Who a request acts as: the token's identity and role."""

    __slots__ = ("name", "role", "token_id")

    def __init__(self, name: str, role: str, token_id: str) -> None:
        self.name, self.role, self.token_id = name, role, token_id


class Server:
    """What the application keeps between requests: the repository, the token file, the ref watcher."""

    def __init__(self, repo_path: str, *, now: Callable[[], Any], poll: float) -> None:
        repo = Repository.discover(repo_path)
        self.path = repo.toplevel or repo.git_dir
        self.tokens = Tokens(repo.gitwork_dir())
        self.now = now
        self.watcher = RefWatcher(self.path, poll)

    def authenticate(self, request: Request) -> Principal:
        header = request.headers.get("authorization", "")
        scheme, _, token = header.partition(" ")
        if not header:
            token = request.cookies.get(COOKIE, "")  # the board's pages and their event streams
        elif scheme.lower() != "bearer":
            raise Unauthorized("use an 'Authorization: Bearer TOKEN' header (gw serve token add NAME)")
        if not token:
            raise Unauthorized("no bearer token: send 'Authorization: Bearer TOKEN' (gw serve token add NAME)")
        entry = self.tokens.lookup(token.strip())
        if entry is None:
            raise Unauthorized("unknown or revoked token")
        return Principal(entry["name"], entry["role"], entry["id"])

    @contextlib.contextmanager
    def plane(self, who: Principal) -> Iterator[Workplane]:
        """A work plane acting as the token's identity, its role the token's (whatever the settings say)."""
        wp = Workplane(self.path, agent=who.name, now=self.now)
        try:
            settings = wp.settings
            admins = tuple(n for n in settings.admins if n != who.name) + ((who.name,) if who.role == "admin" else ())
            agents = tuple(n for n in settings.agents if n != who.name) + ((who.name,) if who.role == "agent" else ())
            wp.settings = wp.repo.settings = settings.replace(admins=admins, agents=agents)
            yield wp
        finally:
            wp.close()


class RefWatcher:
    """Watches the state ref (a file read per look, no process) and wakes every event stream on a change,
    whoever moved it: this server, a ``gw`` process, ``gw sync``.

    ``version`` counts the changes seen; a stream remembers the version it has shown and waits for
    another (:meth:`changed_since`), checked under the condition's lock, so no change is lost between
    a stream's look and its wait.
    """

    def __init__(self, path: str, poll: float) -> None:
        self.path, self.poll = path, poll
        self.tip: str | None = None
        self.version = 0
        self._changed: asyncio.Condition | None = None
        self._ready: asyncio.Event | None = None
        self._task: asyncio.Task[None] | None = None

    async def start(self) -> None:
        """Start watching (once per event loop; every stream calls it) and wait for the first look."""
        if self._task is None:
            self._changed, self._ready = asyncio.Condition(), asyncio.Event()
            self._task = asyncio.get_running_loop().create_task(self._run())
        assert self._ready is not None
        await self._ready.wait()

    def _read(self) -> str | None:
        with Workplane(self.path) as wp:
            return wp.store.tip()

    async def _run(self) -> None:
        from .. import gitdir

        assert self._changed is not None and self._ready is not None
        repo = Repository.discover(self.path)
        ref = repo.settings.ref
        self.tip = await asyncio.to_thread(self._read)
        self._ready.set()
        while True:
            await asyncio.sleep(self.poll)
            try:
                found = gitdir.read_ref(repo.common_dir, ref) if repo.fast_refs else False
                tip = found if found is not False else await asyncio.to_thread(self._read)
            except (GwError, OSError):
                continue
            if tip != self.tip:
                async with self._changed:
                    self.tip = tip
                    self.version += 1
                    self._changed.notify_all()

    async def changed_since(self, version: int, timeout: float) -> int:
        """The watcher's version once it differs from ``version``, or ``version`` after ``timeout`` seconds."""
        await self.start()
        assert self._changed is not None
        async with self._changed:
            try:
                await asyncio.wait_for(self._changed.wait_for(lambda: self.version != version), timeout)
            except asyncio.TimeoutError:
                pass
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
        return listing_json(picked.rows, ctx.now)


def read_thread(server: Server, who: Principal, item: str, since: int) -> tuple[str, list[dict[str, Any]]]:
    with server.plane(who) as wp:
        return wp.thread(item, since)


def principal(request: Request) -> Principal:
    """A FastAPI dependency for any route of the application (``Depends(principal)``): who the request's
    token acts as; 401 without a live token. Routers mounted with ``create_app(extra_routers=...)`` use it,
    and act through ``request.app.state.server.plane(who)``."""
    server: Server = request.app.state.server
    return server.authenticate(request)
