"""The library face: open a repository's work plane, submit command documents, read state.

:meth:`Workplane.submit` is the one write path. It validates the document and hands it to
:func:`engine.run` with a CAS: :class:`LocalRef` (``git update-ref`` here), or, for the ops the arbiter
decides, ``sync.ArbiterRef`` (a push to the remote). The loop reads the tip, asks the engine for the
changes, lands them as one commit and swaps the ref; when another writer moved the ref first it
re-reads and re-applies, so every refusal (held, stale fence) reflects the state it would really
have extended. The CLI, the Python API and later faces all end here.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterator

from . import clock, codec, engine, ids, layout
from .engine import Applied
from .errors import Corrupt, GwError, Invalid
from .model import Item, Lease
from .store import Repository, Snapshot, Store, crash_point, jitter
from .workplane_messages import Conversations

TYPE_CHECKING = False  # typing costs ~15 ms to import; annotations are strings anyway
if TYPE_CHECKING:
    from typing import Any

MAX_ATTEMPTS = 10_000


class LocalRef(engine.CAS):
    """The local CAS for :func:`engine.run`: ``git update-ref REF NEW OLD`` on this clone's state ref."""

    def __init__(self, store: Store) -> None:
        self.store = store

    @property
    def limit(self) -> int:  # type: ignore[override]
        return MAX_ATTEMPTS  # read when the loop starts (a test may lower it)

    def base(self) -> Snapshot:
        return self.store.snapshot()

    def swap(self, old: str | None, new: str) -> bool:
        crash_point("before-cas")
        if not self.store.set_if_equals(old, new):
            return False
        crash_point("after-cas")
        return True

    def lost(self, attempt: int) -> None:
        # Someone else moved the ref: back off a little so a crowd of writers spreads out.
        time.sleep(jitter(0, min(0.002 * attempt, 0.05)))

    def landed(self, applied: Applied, moved: bool) -> Applied:
        if moved:
            maybe_auto_gc(self.store.repo.git_dir)
        return applied


class Chain(engine.CAS):
    """Commands laid one on another in memory, then moved onto the state ref by ONE compare-and-swap
    (:meth:`land`): each is still one commit, decided by :func:`engine.run` on the commit before it.

    A server deciding several waiting commands at once (``serve/writer.py``) holds the ref's lock once
    instead of once per command. Nothing is acknowledged before :meth:`land` moved the ref; when it
    loses (another writer moved the ref), every command of the chain is decided again on the new tip:
    ``reset`` and submit them again. Lost rounds cannot happen inside a chain (it has one writer).
    """

    limit = 1

    def __init__(self, store: Store) -> None:
        """A chain standing on the state ref's tip, read now: the first round needs no :meth:`reset`."""
        self.store = store
        self.reset()

    def reset(self) -> None:
        """Start again from the state ref's tip (after a :meth:`land` that lost to another writer)."""
        self.top: Snapshot = self.store.snapshot()
        self.start: str | None = self.top.commit

    def base(self) -> Snapshot:
        return self.top

    def swap(self, old: str | None, new: str) -> bool:
        assert old == self.top.commit, "a chain has one writer"
        self.top = self.store.snapshot(new)
        return True

    def land(self) -> bool:
        """Move the ref from the tip the chain started on to its top (``False``: another writer moved it)."""
        if self.top.commit == self.start:
            return True
        assert self.top.commit is not None
        ref = LocalRef(self.store)  # the same swap, crash points and housekeeping as one command's
        if not ref.swap(self.start, self.top.commit):
            return False
        maybe_auto_gc(self.store.repo.git_dir)
        return True


class Workplane(Conversations):  # the conversation verbs: workplane_messages.py
    """The work plane of one repository: submit command documents, read items, leases and history.

    Every write is one command document through :meth:`submit` (or :meth:`do`, which builds one); every
    read looks at the state ref's current tip. A Workplane holds open git processes: close it, or use
    it as a context manager.
    """

    def __init__(self, path: str | None = None, *, now: Callable[[], Any] = clock.now, **overrides: Any) -> None:
        """Open the work plane of the repository at or above ``path`` (the current directory if ``None``).

        ``overrides`` replace settings of ``.workplane`` and git config for this object only, e.g.
        ``agent="worker-1"`` (the acting identity, checked like ``--as``) or ``remote="origin"``.
        ``now`` is the clock every command sees (tests pass a fixed one).
        """
        agent = overrides.get("agent")
        if agent is not None:
            # --as (or GW_AGENT through the CLI, or agent= here) passes the same identity rule as every
            # other source; "" is refused, not silently the default. Checked before anything is read.
            source = "GW_AGENT" if agent == os.environ.get("GW_AGENT") else "--as"
            ids.check_identity(agent, source)
        self.repo = Repository.discover(path)
        if overrides:
            self.repo.settings = self.repo.settings.replace(**{k: v for k, v in overrides.items() if v is not None})
        self.settings = self.repo.settings
        self.store = Store(self.repo)
        self.now = now

    def close(self) -> None:
        """End the git processes this object started. Leaving a ``with`` block does the same."""
        self.store.close()

    def __enter__(self) -> Workplane:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # --- writing ------------------------------------------------------------------------------

    def submit(self, document: dict[str, Any], *, offline: bool = False, chain: Chain | None = None) -> Applied:
        """Apply one command document as one commit. With an arbiter remote configured, lease
        commands land on the remote first (see ``sync.py``) unless ``offline`` makes them tentative.
        With ``chain`` (no remote), the commit goes on the chain's top, not yet on the ref: the
        command has landed only once ``chain.land()`` says so.

        Record ops (``@op(..., internal=True)``: what gitwork's own procedures did, such as a
        publish) are refused here: only :meth:`submit_record` takes them."""
        return self._submit(document, offline=offline, internal=False, chain=chain)

    def submit_record(self, document: dict[str, Any], *, offline: bool = False) -> Applied:
        """The internal entry point for gitwork's own procedures (``sessions.py``, ``publish.py``):
        like :meth:`submit`, and it also takes record ops. Not for faces: a record submitted here
        claims that gitwork did what it says (created a session branch, moved ``main``)."""
        return self._submit(document, offline=offline, internal=True)

    def record(self, op: str, *, offline: bool = False, **args: Any) -> Applied:
        """:meth:`do` for record ops; see :meth:`submit_record`."""
        return self.submit_record({"op": op, **{k: v for k, v in args.items() if v is not None}}, offline=offline)

    def _submit(self, document: dict[str, Any], *, offline: bool, internal: bool, chain: Chain | None = None) -> Applied:
        cmd = engine.validate_command(document, internal=internal)
        cmd.setdefault("as", self.settings.identity())
        if chain is not None:
            if self.settings.remote:
                raise Invalid("a chain moves this repository's own ref: not with an arbiter remote")
            return engine.run(chain, cmd, self.now, self.settings)
        if self.settings.remote:
            from .sync import Arbiter

            arbiter = Arbiter(self)
            if engine.OPS[cmd["op"]].arbiter and not offline:  # @op(..., arbiter=True)
                return arbiter.submit(cmd)  # the same loop, with the arbiter's push as the CAS
            # A local command refused as stale only because this clone has not adopted a grant the
            # arbiter already holds (its claim was cut short after the push) first catches up.
            arbiter.catch_up(cmd)
        return engine.run(LocalRef(self.store), cmd, self.now, self.settings)

    def do(self, op: str, *, offline: bool = False, **args: Any) -> Applied:
        """``wp.do("claim", item="w-3fa9", ttl="15m")``: build and submit a command document."""
        return self.submit({"op": op, **{k: v for k, v in args.items() if v is not None}}, offline=offline)

    # --- reading ------------------------------------------------------------------------------

    def context(self) -> engine.View:
        """A read-only view of the current tip (``engine.View``), after checking the state's format
        version. The other reads use it; a caller making several reads of one snapshot can use it
        directly (``item``, ``lease``, ``records``, ``index``)."""
        snapshot = self.store.snapshot()
        snapshot.check_format()
        return engine.View(snapshot, self.now(), self.settings)

    def resolve(self, text: str) -> str:
        """The full item id for ``text``, an id or a unique prefix (``w-3fa9``, ``3fa9``); ``NotFound``
        or ``Ambiguous`` otherwise."""
        return self.context().resolve(text)

    def show(self, text: str) -> dict[str, Any]:
        """``{"item": fields, "lease": lease or None}``: the item as stored and its lease, with ``live``
        on an active lease (``False`` once it expired by this clock, plus the clock margin)."""
        ctx = self.context()
        item_id = ctx.resolve(text)
        item = ctx.item(item_id)
        lease = ctx.lease(item_id)
        return {"item": item.to_doc(), "lease": self._lease_view(lease, ctx)}

    def _lease_view(self, lease: Lease | None, ctx: engine.View) -> dict[str, Any] | None:
        if lease is None:
            return None
        view = lease.to_doc()
        if lease.is_active():
            view["live"] = not lease.takeable(ctx.now, self.settings.clock_margin)
        return view

    def item(self, text: str) -> Item:
        """The item ``text`` names (an id or unique prefix), as a ``gitwork.model.Item``."""
        ctx = self.context()
        return ctx.item(ctx.resolve(text))

    def lease(self, text: str) -> Lease | None:
        """The item's lease record (``gitwork.model.Lease``, in any state), or ``None`` if it was never leased."""
        ctx = self.context()
        return ctx.lease(ctx.resolve(text))

    def history(self, text: str) -> list[dict[str, Any]]:
        """The item's event log, oldest first: one mapping per event (``seq``, ``at``, ``by``, ``type``, ``cmd``, ...)."""
        ctx = self.context()
        return ctx.records(ctx.resolve(text))

    def rows(self) -> tuple[engine.View, dict[str, tuple[Any, ...]]]:
        """``(context, {item id: summary row})`` for every item at the current tip; the row's fields are
        at the positions ``gitwork.index`` names (``ID``, ``TITLE``, ``STATUS``, ...)."""
        ctx = self.context()
        return ctx, ctx.index().items()

    def ready(self) -> list[tuple[Any, ...]]:
        """The ready items, best first: open (or left in progress under an expired lease), no live lease,
        every dependency done. Summary rows as :meth:`rows` gives them: ``row[0]`` is the id, ``row[1]``
        the title."""
        from .queries import ready

        ctx = self.context()
        return ready(ctx.index(), ctx.now, self.settings.clock_margin)

    def log(self, limit: int | None = None) -> Iterator[dict[str, Any]]:
        """The state ref's history, newest first (first parent only)."""
        from .statecommit import read

        commit = self.store.tip()
        count = 0
        while commit and (limit is None or count < limit):
            state = read(self.store, commit)
            yield {
                "commit": commit,
                "summary": state.summary,
                "author": state.author,
                "at": clock.format_instant(state.at) if state.at is not None else None,
                "trailers": state.trailers,
                "command": state.command,
            }
            commit = state.parent
            count += 1


AUTO_GC_ONE_IN = 64


def maybe_auto_gc(git_dir: str) -> None:
    """Now and then, let git pack loose objects, as ``git commit`` does after its own writes.

    Every command writes about nine small loose objects and ``update-ref`` never triggers git's
    automatic housekeeping, so without this a busy work plane grows by thousands of files a day
    (measured: 1,000 renewals take 40 MB of disk loose, under 1 MB packed). ``git gc --auto`` does
    nothing until git's own threshold (``gc.auto``, 6,700 loose objects; 0 turns it off) is passed;
    it is started detached so the command never waits for it.
    """
    # os.urandom, not random: importing random costs every command a few ms for this one draw
    if int.from_bytes(os.urandom(4), "big") % AUTO_GC_ONE_IN or os.environ.get("GW_NO_AUTO_GC"):
        return
    from . import gitcmd

    gitcmd.start(["--git-dir", git_dir, "gc", "--auto", "--quiet"])


def load_document(text: str) -> dict[str, Any]:
    doc = codec.load_input_document(text)
    if not isinstance(doc, dict):
        raise Invalid("a command document must be a mapping with an 'op'")
    return doc


__all__ = ["Workplane", "Applied", "load_document", "GwError", "Corrupt", "layout"]
