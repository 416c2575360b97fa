"""The publish queue (docs/sessions.md, "The publish queue"): ``gw publish --queue``, ``gw queue``,
``gw queue work``, ``gw queue remove``.

The queue is state on the arbiter (``records/queue.py``, ops in ``ops/queue.py``); this module is the
git side. ``enqueue`` pushes the session branch to the code remote (one new commit, which the server
hook allows) and records ``queue-add``. The publisher (:class:`Publisher`, ``gw queue work``) holds the
publisher lease (``queue-lease``: one at a time across clones, an expired one is taken over, a stale
epoch refused), takes the head entry and:

1. fetches the code remote's target branch (its tip ``T``) and the session branch (it must still be at
   the commit the state recorded);
2. if the session commit ``C`` is already on ``T`` (a publisher died after its push, with a code remote
   that is not the arbiter), records the landing (mode ``found``) and moves nothing: nothing lands twice;
3. otherwise combines: ``C`` itself when ``T`` is its ancestor (fast-forward), else a merge commit of
   ``T`` and ``C`` made by ``git merge-tree --write-tree`` (no worktree touched; a conflict sends the
   session back, naming the paths);
4. runs every gate (``gates`` setting) on the combined commit in a scratch worktree, a fast-forward too:
   main is never moved to a tree the gates did not see. A failing gate sends the session back with the
   gate's output (bounded);
5. lands it by a CAS push of the target (``--force-with-lease=<ref>:T``). When the code remote is the
   arbiter, the branch and the ``queue-land`` record go in one atomic push: both or neither, so a
   publisher killed mid-push leaves either the landing with its record or nothing. If the target moved,
   the decision is made again on the new tip.

A code remote apart from the arbiter cannot check the publisher lease's epoch, so it carries a fence of
its own (``FENCE_REF``, a chain of empty commits each saying ``Epoch: N``): a publisher moves it to its
epoch before it decides anything (``_fence``: a compare-and-swap, never backwards while the arbiter says
its lease holds), and every landing moves the target and the fence in one atomic push whose lease is the
fence this publisher set. A publisher paused anywhere, resumed after another took over, finds the fence
moved: its landing is refused whole and it stops (exit 7), having moved nothing.

Sending back is ``queue-return``: the entry leaves the queue and the holder gets a message in the item's
thread; the item and its lease stay the holder's.
"""

from __future__ import annotations

import datetime as _dt
import functools
import os
import shutil
import socket
import subprocess
import time

from .clock import parse_instant
from .errors import GwError, Held, Invalid, NonFastForward, NotFound, RemoteError, RemoteRefused, Stale
from .publish import code_remote_is_arbiter  # the one rule: same remote, or the same push URL
from .records.queue import bounded, entries
from .sessions import ensure_ignored, find, git, identity_env, main_worktree, resolve_commit

TYPE_CHECKING = False  # typing costs ~15 ms to import; annotations are strings anyway
if TYPE_CHECKING:
    from typing import Any

    from .engine import View
    from .workplane import Workplane

MAX_ROUNDS = 5  # the target moved under the publisher this many times in a row: try again on the next pass
# On a code remote apart from the arbiter: the publisher lease's fence there (not under refs/gitwork/, which
# a code remote's server hook keeps for state; not a branch, which people and listings would see).
FENCE_REF = "refs/gitwork-queue/fence"
FENCE_SEEN = "refs/gitwork-queue/seen"  # this clone's fetch of it (outside refs/gitwork/: no state ref)
FENCE_MOST = 64 << 10  # a fence commit larger than this (a message of a gigabyte, pushed by hand) is not read
DEFAULT_TTL = 120  # seconds of the publisher lease; renewed before each entry and each landing


def code_remote(wp: Workplane, remote: str | None) -> str:
    """The code remote: the one named, else the arbiter, else ``origin``."""
    name = remote or wp.settings.remote or "origin"
    top = main_worktree(wp.repo)
    if git("remote", "get-url", "--", name, cwd=top, check=False).returncode != 0:
        raise Invalid(f"no git remote named {name!r} (git remote add {name} URL)")
    return name


def view(wp: Workplane) -> View:
    """The state the queue is decided on: the arbiter's (fetched now, with this clone's unseen commands
    replayed on it), else the local one. Read-only."""
    from . import engine
    from .store import Snapshot

    if not wp.settings.remote:
        return wp.context()
    from .sync import Arbiter

    arbiter = Arbiter(wp)
    base, _replayed, _refused = arbiter.rebuild(wp.store.tip(), arbiter.fetch())
    snapshot = wp.store.snapshot(base) if base else Snapshot(wp.store, None, None)
    snapshot.check_format()
    return engine.View(snapshot, wp.now(), wp.settings)


def listing(wp: Workplane) -> list[dict[str, Any]]:
    """The queue, head first, each entry with its position (1 = next to land)."""
    return [{"position": n, **entry} for n, entry in enumerate(entries(view(wp)), 1)]


def enqueue(wp: Workplane, session: str | None, into: str | None = None, remote: str | None = None) -> dict[str, Any]:
    """``gw publish --queue``: push the session branch to the code remote, record ``queue-add``.

    The record is tried first on the state it would extend (nothing pushed if it would be refused);
    the session branch is pushed as is (the server hook allows a session branch created with its one
    commit); then the record, decided by the arbiter."""
    from .publish import _precheck

    record = find(wp, session)
    actor = wp.settings.identity()
    if record.get("holder") != actor:
        raise Stale(f"session {record.id} is {record.get('holder')}'s, and you are {actor}: only its holder queues it",
                    holder=record.get("holder"))
    if record.get("state") != "committed" or not record.get("commit"):
        raise Invalid(f"session {record.id} has no commit yet: gw session commit --file PATH... -m MSG first")
    name = code_remote(wp, remote)
    if resolve_commit(record.ref, record.top) != record["commit"]:
        raise Invalid(f"{record.branch} no longer points at the session commit {record['commit'][:12]}")
    document = {"op": "queue-add", "item": record["item"], "session": record.id, "into": into or record.get("into")}
    _precheck(wp, document)
    done = git("push", "--porcelain", name, f"{record['commit']}:{record.ref}", cwd=record.top, check=False)
    if done.returncode != 0:
        # git pads each sideband line with spaces to erase the progress it overwrites: not part of the message
        said = "\n".join(x.rstrip() for x in done.err.splitlines() if x.startswith("remote:")) or done.err.strip()
        raise NonFastForward(f"{name} refused the session branch {record.branch}: {said}", remote=name)
    applied = wp.submit({k: v for k, v in document.items() if v is not None})
    return {**applied.to_json(), "state_commit": applied.commit, "remote": name, "branch": record.branch}


# --- the publisher -------------------------------------------------------------------------------------


class Publisher:
    """One ``gw queue work``: the publisher lease, and landing or sending back the head entry."""

    def __init__(self, wp: Workplane, remote: str | None = None, ttl: int = DEFAULT_TTL) -> None:
        self.wp = wp
        self.top = main_worktree(wp.repo)
        self.named = remote
        self.ttl = ttl
        self.epoch: int | None = None
        self.until: _dt.datetime | None = None
        self.fence: str | None = None  # the fence commit this publisher set on a code remote apart (FENCE_REF)
        self.fenced: int | None = None  # the epoch it was set for

    @functools.cached_property
    def remote(self) -> str:
        """The code remote, looked up at the first entry: an empty queue needs none."""
        return code_remote(self.wp, self.named)

    @functools.cached_property
    def with_record(self) -> bool:
        """Whether the code remote is the arbiter: then a landing and its record are one atomic push."""
        return code_remote_is_arbiter(self.top, self.remote, self.wp.settings.remote)

    def _lease(self, action: str) -> dict[str, Any]:
        holder = {"host": socket.gethostname()[:64] or "host", "pid": os.getpid()}
        applied = self.wp.record("queue-lease", action=action, holder=holder, ttl=f"{self.ttl}s", epoch=self.epoch)
        self.epoch = int(applied.result["epoch"])
        self.until = parse_instant(str(applied.result["expires_at"]))
        return applied.result

    def take(self) -> dict[str, Any]:
        return self._lease("take")

    def renew(self) -> None:
        """Renew once half the lease is gone (each renewal is a push to the arbiter). A publisher paused
        past its lease is not saved by this: the arbiter refuses its records under the old epoch."""
        if self.until is None or self.wp.now() >= self.until - _dt.timedelta(seconds=self.ttl / 2):
            self._lease("renew")

    def release(self) -> None:
        if self.epoch is not None:
            try:
                self._lease("release")
            except GwError:
                pass  # taken over meanwhile: nothing of ours to release
            self.epoch = None

    def pass_once(self) -> list[dict[str, Any]]:
        """Land or send back every entry queued now, head first; what happened to each."""
        done: list[dict[str, Any]] = []
        while True:
            queued = entries(view(self.wp))
            if not queued:
                return done
            self.renew()
            done.append(self.handle(queued[0]))

    def handle(self, entry: dict[str, Any]) -> dict[str, Any]:
        """Land the head entry, or send it back to its holder; an entry taken out of the queue meanwhile
        (``gw queue remove`` while its gates ran) is skipped: its record is refused, and when the code
        remote is the arbiter the branch move with it."""
        try:
            return self._handle(entry)
        except Invalid:
            if any(e.get("session") == entry["session"] for e in entries(view(self.wp))):
                raise
            return {"session": entry["session"], "item": entry["item"], "outcome": "removed",
                    "reason": "taken out of the queue while the publisher worked on it"}

    def _handle(self, entry: dict[str, Any]) -> dict[str, Any]:
        session, into = str(entry["session"]), str(entry["into"])
        ref = f"refs/heads/{into}"
        self._fence()  # (once an epoch: before anything of the queue is decided on the code remote)
        for _round in range(MAX_ROUNDS):
            target = self._fetch(into)
            if target is None:
                return self._return(entry, f"{self.remote} has no branch {into}")
            source = self._fetch_session(session)
            if source is None or source != entry["commit"]:
                why = "is not on" if source is None else f"is at {source[:12]}, not the queued commit, on"
                return self._return(entry, f"the session branch session/{session} {why} {self.remote}: "
                                           "gw publish --queue pushes it")
            gates: list[str] = []
            if _is_ancestor(source, target, self.top):  # landed already, by a publisher that died before its record
                new, mode, moving = target, "found", None
            else:
                if _is_ancestor(target, source, self.top):
                    new, mode = source, "fast-forward"
                else:
                    merged = self._merge(entry, target, source)
                    if isinstance(merged, list):
                        return self._return(entry, f"{into} has moved and merging session {session} into it conflicts "
                                                   f"in: {', '.join(merged) or '(see git merge-tree)'}")
                    new, mode = merged, "merge"
                failed, gates = self._gates(entry, new)
                if failed is not None:
                    gate, code, output = failed
                    return self._return(entry, f"gate `{gate}` failed (exit {code}) on the {mode} of session "
                                               f"{session} onto {into} at {target[:12]}", output=output, gate=gate)
                moving = ref
            self.renew()
            try:
                landed = self._land(entry, new, target, mode, gates, moving)
            except (RemoteRefused, NonFastForward) as error:  # the code remote's hook said no (paths, fences)
                return self._return(entry, f"{self.remote} refused {into}: {error.message}")
            except Stale as error:
                if "session" not in error.details:  # this publisher's own lease was taken over: stop
                    raise
                return self._return(entry, error.message)
            if landed is not None:
                return landed
        raise NonFastForward(f"{into} kept moving while landing session {session}; the next pass tries again")

    # --- the code remote's fence ---------------------------------------------------------------------

    def _fence(self) -> None:
        """On a code remote apart from the arbiter, move its fence (``FENCE_REF``) to this publisher's epoch
        before anything of the queue is decided there; once an epoch. A fence at a later epoch means this
        publisher was taken over, unless the arbiter still renews its lease (then the fence was moved by
        hand and is overwritten): the arbiter decides, never the code remote."""
        if self.with_record or self.epoch is None or self.fenced == self.epoch:
            return
        for _round in range(MAX_ROUNDS):
            current, readable = self._read_fence()
            held = _fence_epoch(self.top, current) if readable else -1
            if held == self.epoch and current is not None:
                self.fence, self.fenced = current, self.epoch  # (set by this epoch before: a retried pass)
                return
            if held > self.epoch:
                self._lease("renew")  # Stale (exit 7) when taken over: the later fence is the successor's
            # (a fence ref put by hand on a blob, a tag or a huge commit is leased over, not built on)
            new = self._fence_commit(current if readable else None, f"publisher lease epoch {self.epoch}")
            # (--atomic for one ref: a code remote that does not take atomic pushes, which the landing needs,
            # refuses here, before anything of it moved)
            done = git("push", "--atomic", "--porcelain", f"--force-with-lease={FENCE_REF}:{current or ''}",
                       self.remote, f"{new}:{FENCE_REF}", cwd=self.top, check=False)
            if done.returncode == 0 or self._read_fence()[0] == new:
                self.fence, self.fenced = new, self.epoch  # (or its answer was lost: the fence is ours there)
                return
            _no_atomic(self.remote, done.err)
            if not _moved(done.out):
                raise RemoteError(f"{self.remote} refused the publisher fence {FENCE_REF}: {_said(done.err)}",
                                  remote=self.remote)
        raise NonFastForward(f"the publisher fence {FENCE_REF} on {self.remote} kept moving; the next pass tries again")

    def _read_fence(self) -> tuple[str | None, bool]:
        """Fetch the code remote's fence: the object its ref names (a push over it leases exactly that;
        None: no fence there), and whether it is a commit of at most ``FENCE_MOST`` bytes, whose epoch may
        be read and which the next fence is built on. Anyone who can push there can point the ref at a
        blob, an annotated tag or a commit of a gigabyte's message: such a fence says no epoch and is only
        leased over (before, a blob or a tag there stopped every pass of every publisher for good)."""
        try:
            if self._fetch_into(FENCE_REF, FENCE_SEEN, "the publisher fence") is None:
                return None, False
        except NotFound:
            pass  # (fetched, but not a commit)
        from .gitcmd import read_sizes

        oid = git("rev-parse", "--verify", "-q", FENCE_SEEN, cwd=self.top, check=False).out.strip()
        said = read_sizes(self.wp.repo.git_dir, [oid]).get(oid) if oid else None
        if said is None:
            return None, False
        return oid, said[0] == "commit" and said[1] <= FENCE_MOST

    @functools.cached_property
    def _empty_tree(self) -> str:
        """The empty tree, written once a publisher (every fence commit is made of it)."""
        return git("hash-object", "-t", "tree", "-w", "--stdin", cwd=self.top, input=b"").out.strip()

    def _fence_commit(self, parent: str | None, why: str) -> str:
        """A fence commit: the empty tree, ``Epoch: N``, on top of ``parent`` (a fast-forward, for a code
        remote that refuses any other)."""
        message = f"gitwork publish queue fence: {why}\n\nEpoch: {self.epoch}\n"
        env = identity_env(self.top, self.wp.settings.identity())
        return git("commit-tree", self._empty_tree, *(("-p", parent) if parent else ()), "-F", "-", cwd=self.top,
                   input=message.encode(), env=env).out.strip()

    def _fenced_push(self, ref: str, new: str, target: str) -> bool:
        """The landing on a code remote apart from the arbiter: the target and the fence in one atomic
        push, each under its lease; ``False`` when the target (or the fence, again and again) moved. A
        fence moved since this publisher set it refuses the whole push, and the arbiter decides what that
        was: a takeover (Stale, exit 7, nothing moved), or, while it still renews this publisher's lease,
        a move by hand (the fence is set again and the landing tried again: a push to the fence while the
        gates ran no longer stops the queue, nor sends the entry back)."""
        for _round in range(MAX_ROUNDS):
            fence = self._fence_commit(self.fence, f"landing {new}")
            done = git("push", "--atomic", "--porcelain", f"--force-with-lease={ref}:{target}",
                       f"--force-with-lease={FENCE_REF}:{self.fence or ''}", self.remote, f"{new}:{ref}",
                       f"{fence}:{FENCE_REF}", cwd=self.top, check=False)
            if done.returncode == 0:
                self.fence = fence
                return True
            now, readable = self._read_fence()
            if now == fence:  # the push landed, and only its answer was lost (both refs moved: it was atomic)
                self.fence = fence
                return True
            if now != self.fence:
                try:
                    self._lease("renew")
                except Stale:
                    raise Stale(f"the publisher lease was taken over: {self.remote}'s {FENCE_REF} is at epoch "
                                f"{_fence_epoch(self.top, now) if readable else -1}, not this publisher's "
                                f"{self.epoch}; nothing was landed", epoch=self.epoch) from None
                self.fenced = None  # still ours: moved by hand, set again
                try:
                    self._fence()
                except NonFastForward:
                    return False  # (the round is tried again: never a refusal that sends the entry back)
                continue
            if _moved(done.out):
                return False
            _no_atomic(self.remote, done.err)
            raise NonFastForward(f"{self.remote} refused {ref}: {_said(done.err)}", remote=self.remote)
        return False  # the fence kept moving: the round is tried again, then the next pass

    # --- git -----------------------------------------------------------------------------------------

    def _fetch(self, into: str) -> str | None:
        return self._fetch_into(f"refs/heads/{into}", f"refs/remotes/{self.remote}/{into}", into)

    def _fetch_session(self, session: str) -> str | None:
        # (into a ref that is not a branch: the local hooks and branch listings ignore it)
        return self._fetch_into(f"refs/heads/session/{session}", f"refs/gitwork/queue/{session}",
                                f"the session branch session/{session}")

    def _fetch_into(self, ref: str, tracking: str, what: str) -> str | None:
        from .publish import fetch_into

        return fetch_into(self.wp.repo.common_dir, self.top, self.remote, ref, tracking, what)

    def _merge(self, entry: dict[str, Any], target: str, source: str) -> str | list[str]:
        """The merge commit of ``source`` into ``target`` (no worktree touched), or the conflicting paths."""
        done = git("merge-tree", "--write-tree", "--name-only", "-z", "--no-messages", target, source, cwd=self.top,
                   check=False)
        parts = done.out.split("\0")
        if done.returncode == 1:
            return sorted({p.strip() for p in parts[1:] if p.strip()})
        if done.returncode != 0:
            raise RemoteError(f"git merge-tree failed: {done.err}")
        trailers = f"Work-Item: {entry['item']}\nFence: {entry['fence']}\nSession: {entry['session']}\n"
        message = f"Merge session {entry['session']} into {entry['into']} (publish queue)\n\n{trailers}"
        env = identity_env(self.top, self.wp.settings.identity())
        return git("commit-tree", parts[0].strip(), "-p", target, "-p", source, "-F", "-", cwd=self.top,
                   input=message.encode(), env=env).out.strip()

    def _gates(self, entry: dict[str, Any], commit: str) -> tuple[tuple[str, int, str] | None, list[str]]:
        """Run every gate on ``commit`` in a scratch worktree: (the first failure, the gates that ran)."""
        gates = tuple(self.wp.settings.gates)
        if not gates:
            return None, []
        ensure_ignored(self.top)
        # One scratch worktree per entry and publisher lease epoch: a publisher paused in its gates, resumed
        # after another (a later epoch) took over on this clone, removes only its own, never the one the
        # other's gates run in. Before adding its own, a publisher removes what earlier epochs left (killed,
        # or taken over): one lease at a time, so none of them is live.
        queue = os.path.join(self.top, ".worktrees", "queue")
        scratch = os.path.join(queue, f"{int(entry['seq']):08d}-e{self.epoch}")
        for name in _listdir(queue):
            if _scratch_epoch(name) < (self.epoch or 0):
                _remove_worktree(self.top, os.path.join(queue, name))
        _remove_worktree(self.top, scratch)
        git("worktree", "add", "-q", "--detach", scratch, commit, cwd=self.top)
        ran = []
        try:
            env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
            env.update(GW_SESSION=str(entry["session"]), GW_MERGE=commit)
            for gate in gates:
                proc = subprocess.run(["/bin/sh", "-c", gate], cwd=scratch, env=env, stdout=subprocess.PIPE,
                                      stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
                ran.append(gate)
                if proc.returncode != 0:
                    return (gate, proc.returncode, bounded(proc.stdout.decode("utf-8", "replace"))), ran
        finally:
            _remove_worktree(self.top, scratch)
        return None, ran

    # --- the records ---------------------------------------------------------------------------------

    def _land(self, entry: dict[str, Any], new: str, target: str, mode: str, gates: list[str],
              ref: str | None) -> dict[str, Any] | None:
        """Move the target (unless ``found``) and record ``queue-land``; ``None`` when the target moved."""
        from . import engine

        document = {"op": "queue-land", "epoch": self.epoch, "session": entry["session"], "commit": new,
                    "previous": target, "remote": self.remote, "mode": mode, "gates": gates or None}
        cmd = engine.validate_command({k: v for k, v in document.items() if v is not None}, internal=True)
        cmd.setdefault("as", self.wp.settings.identity())
        if ref is not None and self.with_record:
            from .sync import Arbiter, Rider, RiderMoved

            try:
                applied = Arbiter(self.wp).submit(cmd, (Rider(ref, target, new),))
            except RiderMoved:
                return None
        else:
            if ref is not None and not self._fenced_push(ref, new, target):
                return None
            applied = self.wp.submit_record(cmd)
        self._forget(entry, new)
        return {"session": entry["session"], "item": entry["item"], "outcome": "landed", "mode": mode,
                "commit": new, "previous": target, "gates": gates, "state_commit": applied.commit}

    def _return(self, entry: dict[str, Any], reason: str, output: str | None = None,
                gate: str | None = None) -> dict[str, Any]:
        applied = self.wp.record("queue-return", epoch=self.epoch, session=entry["session"], reason=reason[:1000],
                                 output=output or None, gate=gate)
        return {"session": entry["session"], "item": entry["item"], "outcome": "returned", "reason": reason,
                "gate": gate, "output": output, "message": applied.result.get("message"),
                "state_commit": applied.commit}

    def _forget(self, entry: dict[str, Any], new: str) -> None:
        """After a landing: the session branch on the code remote is published history now; delete it
        (the server hook allows it: its commit is on a branch) and the local fetch of it. Best effort."""
        session = entry["session"]
        git("push", "-q", self.remote, f":refs/heads/session/{session}", cwd=self.top, check=False)
        git("update-ref", "-d", f"refs/gitwork/queue/{session}", cwd=self.top, check=False)
        git("update-ref", f"refs/remotes/{self.remote}/{entry['into']}", new, cwd=self.top, check=False)


def work(wp: Workplane, remote: str | None = None, *, once: bool = False, ttl: int = DEFAULT_TTL,
         poll: float = 2.0) -> dict[str, Any]:
    """``gw queue work``: take the publisher lease and land the queue. ``once``: one pass, then release
    (exit 75 if another publisher holds the lease). Otherwise wait for the lease (taking over an
    expired one) and keep going until interrupted."""
    publisher = Publisher(wp, remote, ttl)
    handled: list[dict[str, Any]] = []
    while publisher.epoch is None:
        try:
            publisher.take()
        except Held:
            if once:
                raise
            time.sleep(poll)
    try:
        while True:
            try:
                handled.extend(publisher.pass_once())
            except NonFastForward:
                if once:
                    raise
                # (the target or the fence kept moving under this pass: "the next pass tries again", and a
                # running publisher does; it once ended gw queue work, and the queue stood still)
            if once:
                break
            time.sleep(poll)
            publisher.renew()
    finally:
        publisher.release()
    return {"ok": True, "handled": handled, "landed": sum(1 for h in handled if h["outcome"] == "landed"),
            "returned": sum(1 for h in handled if h["outcome"] == "returned")}


def _is_ancestor(older: str, newer: str, cwd: str) -> bool:
    return git("merge-base", "--is-ancestor", older, newer, cwd=cwd, check=False).returncode == 0


def _moved(out: str) -> bool:
    """Whether ``git push --porcelain`` says a lease lost its race (the ref was no longer where expected)."""
    return any(reason in out for reason in ("(stale info)", "(fetch first)", "(non-fast-forward)"))


def _said(err: str) -> str:
    """What the remote said of a refused push (its ``remote:`` lines), else git's own words."""
    return "\n".join(x for x in err.splitlines() if x.startswith("remote:")) or err.strip()


def _no_atomic(remote: str, err: str) -> None:
    if "does not support --atomic" in err:
        raise Invalid(f"the code remote {remote} does not take atomic pushes, which the publish queue needs on a code "
                      "remote apart from the arbiter (git config receive.advertiseAtomic true there)", remote=remote)


def _fence_epoch(top: str, fence: str | None) -> int:
    """The epoch a fence commit says (its ``Epoch:`` line); -1 for none, or for one that says no epoch."""
    if fence is None:
        return -1
    text = git("cat-file", "commit", fence, cwd=top, check=False).out
    for line in reversed(text.splitlines()):
        if line.startswith("Epoch: ") and line[7:].isascii() and line[7:].isdigit() and len(line) < 40:
            return int(line[7:])
    return -1


def _listdir(path: str) -> list[str]:
    try:
        return os.listdir(path)
    except OSError:
        return []


def _scratch_epoch(name: str) -> int:
    """The publisher lease epoch of a scratch worktree's folder name (``<seq>-e<epoch>``); -1 for any other
    (the ``<seq>`` of a publisher from before epochs were in the name)."""
    _seq, _sep, epoch = name.partition("-e")
    return int(epoch) if epoch.isdigit() else -1


def _remove_worktree(top: str, path: str) -> None:
    """Remove a scratch worktree, even one git still marks "initializing" (locked): a publisher killed
    inside its ``git worktree add`` left that, and one ``--force`` and ``prune`` leave it, so every later
    ``git worktree add`` there failed ("a missing but locked worktree") until a person unlocked it."""
    git("worktree", "remove", "--force", "--force", path, cwd=top, check=False)
    shutil.rmtree(path, ignore_errors=True)
    git("worktree", "prune", cwd=top, check=False)
