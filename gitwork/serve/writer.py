"""The one work plane every REST write of ``gw serve`` goes through, in turns, a chain per turn.

Why one, kept open, in turns (issue 27: the command service at the arbiter, docs/deploy.md):

- **Opening a Workplane per request costs more than the write.** On a bare repository (the arbiter's)
  discovery asks git (``rev-parse`` and ``config``: two processes) and the tip is read through a
  ``cat-file --batch`` process started for the request; with the trees read by earlier commands
  thrown away each time, that was over a third of a claim's 24 ms. Here the plane, its git processes
  and the trees and blobs it read (immutable, named by their ids) stay between requests.
- **Threads of one server must not race each other's compare-and-swap.** Every request handler runs in
  the thread pool; two writes decided on the same tip lose a round to each other and pay it again
  (measured: 8 keep-alive clients doubled the server's CPU per grant). Writes take turns instead.
- **One ref move per turn, not per write.** The request holding the turn decides every request that
  queued meanwhile (at most :data:`MOST`, in arrival order) as one chain, each one commit by the one
  engine on the commit before it (``workplane.Chain``), and moves the ref once: a herd no longer
  holds the turn across one ``git update-ref`` process per write. Nothing is answered before that
  move, so acknowledged still means landed. A writer outside the process (a push through git, the
  batch arbiter's applier, a ``gw`` process) can still move the ref first: then nothing of the chain
  landed and every request of it is decided again on the new tip, as ``engine.run`` always did: the
  turns are an optimisation, the ref's CAS stays the rule.
- **Settings are the repository's, re-read when they may have changed**: the files git and gitwork
  read them from are checked (size, time, inode) at every turn, and read again at least every
  :data:`REFRESH` seconds whatever the files say (an ``[include]``d file). The token's role replaces
  the settings' role for its identity, as for every request (:func:`with_role`).

With an arbiter remote configured (``gw serve`` on a clone) a write pushes, and the clone's own turn
(``pushturn``) already folds concurrent writers into one push: there every request opens a plane of
its own and takes no turn here (:meth:`Writer.submit` answers ``None``).
"""

from __future__ import annotations

import os
import threading
import time
from typing import Any, Callable

from .. import engine
from ..config import Settings
from ..engine import Applied
from ..errors import GwError, Locked
from ..fsutil import stamp
from ..gitdir import config_paths
from ..store import Repository, jitter
from ..workplane import Chain, Workplane

REFRESH = 5.0  # seconds: settings are read again at least this often (a change in an included file)
MOST = 64  # requests decided in one chain (one ref move); the rest wait for the next
ROUNDS = 200  # chains lost to outside writers before the requests are answered "gave up" (75)
KEEP_TREES = 20_000  # trees kept between requests; past it the store forgets what it read (memory)


def with_role(settings: Settings, name: str, role: str) -> Settings:
    """``settings`` acting as ``name``, whose role is ``role`` (a token's) whatever the settings list."""
    admins = tuple(n for n in settings.admins if n != name) + ((name,) if role == "admin" else ())
    agents = tuple(n for n in settings.agents if n != name) + ((name,) if role == "agent" else ())
    return settings.replace(agent=name, admins=admins, agents=agents)


def _config_files(repo: Repository) -> list[str]:
    """The files a change of the repository's settings is made in: the config files git reads
    (``gitdir.config_paths``, the very list discovery reads, ``config.worktree`` whether or not it is
    read yet: a change to it costs one re-read at most) and ``.workplane``."""
    files = [path for path, _scope in config_paths(repo.git_dir, repo.common_dir) or [] if path]
    if repo.toplevel:
        files.append(os.path.join(repo.toplevel, ".workplane"))
    return files


def _stamp(files: list[str]) -> tuple[Any, ...]:
    return tuple(stamp(path) for path in files)


class _Waiting:
    """One request waiting for its turn, then its answer."""

    __slots__ = ("name", "role", "document", "applied", "error", "done", "elsewhere")

    def __init__(self, name: str, role: str, document: dict[str, Any]) -> None:
        self.name, self.role, self.document = name, role, document
        self.applied: Applied | None = None
        self.error: BaseException | None = None
        self.done = False
        self.elsewhere = False  # to be decided by the caller's own plane (writes here push)


class Writer:
    """The server's write plane (see the module's docstring). :meth:`submit` decides a request in its
    turn; :meth:`close` ends its git processes (the application's shutdown)."""

    def __init__(self, path: str, now: Callable[[], Any]) -> None:
        self.path, self.now = path, now
        self.lock = threading.Lock()  # the turn: held by the request deciding a chain
        self._queue_lock = threading.Lock()
        self._queue: list[_Waiting] = []
        self._wp: Workplane | None = None
        self._base: Settings | None = None
        self._files: list[str] = []
        self._stamp: tuple[Any, ...] = ()
        self._read_at = 0.0

    def _plane(self) -> tuple[Workplane, Settings]:
        """The open plane and the repository's own settings, opened again when they may have changed."""
        wp, base = self._wp, self._base
        if wp is not None and base is not None:
            if time.monotonic() - self._read_at < REFRESH and _stamp(self._files) == self._stamp:
                if len(wp.store._trees) > KEEP_TREES:  # noqa: SLF001 - the size only; forget() clears it
                    wp.store.forget()
                return wp, base
            self.close()
        # Stamped before the read: a change made while it reads differs from the stamp at the next
        # request's check, so it is read then, never lost. Which files to stamp is learnt from the
        # repository found, at each open (the environment names them, and a moved GIT_CONFIG_GLOBAL is
        # a new list): when the list differs, its stamp is taken after the read, and a change made
        # during that one read waits at most REFRESH.
        read_at, stamp = time.monotonic(), _stamp(self._files)
        wp = Workplane(self.path, now=self.now)
        files = _config_files(wp.repo)
        if files != self._files:
            self._files, stamp = files, _stamp(files)
        self._stamp, self._read_at = stamp, read_at
        self._wp, self._base = wp, wp.settings
        return wp, wp.settings

    def submit(self, name: str, role: str, document: dict[str, Any]) -> Applied | None:
        """``document`` applied as ``name`` with ``role``: its answer once it landed (or its refusal,
        raised). ``None`` when writes here push to an arbiter remote: the caller opens its own plane.

        The request waits for its turn; whoever has the turn decides every request waiting by then
        (at most :data:`MOST`), in arrival order, as one chain on the tip, and moves the ref once
        (``workplane.Chain``). A request that arrived while a chain was being decided is in the next."""
        if self._base is not None and self._base.remote:
            return None  # (read without the turn: a stale answer is only a slower path, both are right)
        me = _Waiting(name, role, document)
        with self._queue_lock:
            self._queue.append(me)
        while not me.done:
            with self.lock:
                if not me.done:
                    self._decide()
        if me.error is not None:
            raise me.error
        if me.applied is None and not me.elsewhere:  # the turn's holder was interrupted before deciding it
            raise Locked("the server stopped deciding this request; send it again with the same id")
        return me.applied

    def _decide(self) -> None:
        with self._queue_lock:
            batch, self._queue = self._queue[:MOST], self._queue[MOST:]
        wp: Workplane | None = None
        try:
            try:
                wp, base = self._plane()
            except Exception as error:  # noqa: BLE001 - e.g. the repository is gone: every one of them is told
                for waiting in batch:
                    waiting.error = error
                return
            if base.remote:
                for waiting in batch:
                    waiting.elsewhere = True  # each asks its own plane (None)
                return
            # A ref lock left by a git killed while it moved the ref (this server's own update-ref, when
            # a kill -9 hit the server mid-write) would refuse every write here (exit 11) until a push's
            # hook swept it: swept here too, by the hook's own rule (stalelocks.py; one lstat).
            from ..stalelocks import sweep

            sweep(wp.repo.common_dir, [base.ref])
            chain = Chain(wp.store)  # on the tip
            for _round in range(ROUNDS):
                for waiting in batch:
                    wp.settings = wp.repo.settings = with_role(base, waiting.name, waiting.role)
                    try:
                        waiting.applied, waiting.error = wp.submit(waiting.document, chain=chain), None
                    except Exception as error:  # noqa: BLE001 - its own answer (a refusal; a bug: 500), not its neighbours'
                        waiting.applied, waiting.error = None, error
                wp.settings = wp.repo.settings = base
                try:
                    if chain.land():
                        return
                except GwError as error:  # the ref could not be moved at all (a lock that stays: 11)
                    for waiting in batch:
                        waiting.applied, waiting.error = None, error
                    return
                # Another writer (a push, the batch applier, a gw process) moved the ref: nothing of
                # this chain landed; every request of it is decided again on the new tip.
                time.sleep(jitter(0, 0.005))
                chain.reset()
            for waiting in batch:
                waiting.applied, waiting.error = None, engine.gave_up(ROUNDS)
        except Exception as error:  # noqa: BLE001 - the tip unreadable, a bug: every one of them is told
            for waiting in batch:
                waiting.applied, waiting.error = None, error
        finally:
            if wp is not None:
                wp.settings = wp.repo.settings = self._base or wp.settings
            for waiting in batch:
                waiting.done = True

    def close(self) -> None:
        wp, self._wp, self._base = self._wp, None, None
        if wp is not None:
            wp.close()
