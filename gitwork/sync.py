"""Several machines: a git remote as the single arbiter of leases, offline work replayed on sync.

The remote's state ref is the truth. A lease command (claim, renew, release, takeover, revoke,
handoff, and every command that ends a lease: done, cancel, publish) succeeds only once its commit
is on the remote's state ref: it is applied on top of the
last known remote tip and pushed with ``--force-with-lease=<ref>:<that tip>``, a compare-and-swap on
the remote. A rejected push means another machine moved first: fetch, apply the same document
again on the new tip (re-validating it: the item may now be held, the fence stale) and push again.

Everything else can be done offline. ``sync`` replays the local commands the remote has not seen on
top of the remote tip, in order, each re-validated by the engine at its original time; a command
that no longer applies is refused and reported by command id (and kept in ``refused.jsonl``), the
others still land. The remote's history is never rewritten; local history becomes the remote's plus
the replayed commands. Commands already on the remote (a push whose reply was lost) are recognised
by their ``Command-Id`` and not applied twice; a local command whose id the remote holds for a
*different* document is refused as a conflict, never dropped silently.

A replayed command made under a lease is pinned to that lease's grant (the command id recorded as
``lease``), not to its fence number: when the grant itself was replayed and drew a new fence, the
work done under it follows it to the new fence.

Pushes and fetches use the git binary: pygit2's push to a local path is not a compare-and-swap and
runs no server hooks.
"""

from __future__ import annotations

import json
import os
import random
import re
import subprocess
import time

from . import clock, engine, gitcmd, layout
from .errors import (Corrupt, GitFailed, GwError, Held, Locked, NotFound, RemoteError, RemoteRefused, Stale, UsageError,
                     verdict_from_json)
from .pushturn import BACKOFF_CAP, BACKOFF_UNIT, TURN_FILE, Carried, Carry, PushTurn
from .store import Snapshot, crash_point

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

    from .engine import Applied
    from .workplane import Workplane

# Which ops the arbiter decides is said where each op is declared: ``@op(..., arbiter=True)`` (every
# grant, renewal and end of a lease: done and cancel release the holder's lease, publish records a
# release too), so no machine can close a lease the arbiter still shows as live, nor take one over
# that another machine already ended.
MAX_ROUNDS = 200
# Seconds one git fetch/push/ls-remote may wait for the remote before it counts as unreachable.
REMOTE_TIMEOUT = 120.0
# How the state ref is fetched. Protocol v0: the server advertises its refs as soon as we connect,
# where v2 first asks for them (ls-refs), a request/response turn more per fetch, and a fetch after a
# lost race is on the herd's critical path (measured through git daemon: 110-120 ms against 70 ms).
# v0 advertises every ref of the remote, as every push (receive-pack) already does anyway. The
# skipping negotiator offers our history sparsely: the remote knows nearly all of it, one round is
# enough where the default offers 16 commits a round and waited for a second.
_FETCH_CONFIG = ("-c", "protocol.version=0", "-c", "fetch.negotiationAlgorithm=skipping")
# Bytes of git's output kept from each end when it talks to the remote (what a server prints is not ours to bound).
OUTPUT_KEPT = 64 * 1024
# Fields the engine fills in while applying (the fencing rule); a replay may legitimately change
# them, so two documents under one id are the same command when everything else is equal.
FILLED_IN = ("fence", "lease")
# A push the remote turned down because another push moved the ref first: fetch and try again.
# Anything else it turns down ("[remote rejected] (pre-receive hook declined)"...) is its answer.
_RACE = re.compile(r"stale info|fetch first|non-fast-forward|already exists|cannot lock ref|failed to lock|"
                   r"failed to update ref|but expected|incorrect old value")
# What a remote (a hook's stderr) may print that must not reach a terminal as is: terminal escape
# sequences (dropped whole: CSI, OSC such as a window title or a hyperlink), then every remaining C0/C1
# control, the Unicode line and paragraph separators, and the bidi and zero-width marks that make a
# line read differently than it is ("Trojan Source").
_ESCAPE = re.compile(r"\x1b(?:\[[0-?]*[ -/]*[@-~]|\][^\x07\x1b]*(?:\x07|\x1b\\)?|[@-_]?)")
# The server answered, and the answer is "not you": authentication or authorisation, per transport.
_DENIED = re.compile(r"returned error: 40[13]\b|Authentication failed|could not read (?:Username|Password)|"
                     r"Permission denied \(|access denied|service not enabled|HTTP Basic: Access denied")
_LOCK_FILE = re.compile(r"Unable to create '([^']+\.lock)': File exists")
_LINES = re.compile(r"\r\n|\r|\n")
_UNPRINTABLE = re.compile("[\x00-\x1f\x7f-\x9f\u061c\u200b-\u200f\u2028-\u202e\u2060-\u2069\ufeff]")


class Rider:
    """A ref pushed together with the state ref (``git push --atomic``): moved from ``expected`` to ``new``."""

    __slots__ = ("ref", "expected", "new")

    def __init__(self, ref: str, expected: str | None, new: str) -> None:
        self.ref, self.expected, self.new = ref, expected, new


class RiderMoved(Exception):
    """A rider's ref was no longer at its expected value on the remote: nothing landed, decide again."""

    def __init__(self, ref: str) -> None:
        super().__init__(ref)
        self.ref = ref


def tracking_ref(remote: str, ref: str) -> str:
    return f"refs/remotes/{remote}/{ref.removeprefix('refs/')}"


def configure_remote(wp: Workplane, name: str) -> dict[str, Any]:
    """Record ``name`` as the arbiter and add a fetch refspec for the state ref (branches untouched)."""
    repo = wp.repo
    known = gitcmd.run(["--git-dir", repo.git_dir, "remote"], check=True).out.split()
    if name not in known:
        raise UsageError(f"no git remote named {name!r} (add it with: git remote add {name} URL)")
    spec = f"+{wp.store.ref}:{tracking_ref(name, wp.store.ref)}"
    existing = gitcmd.run(["--git-dir", repo.git_dir, "config", "--get-all", f"remote.{name}.fetch"],
                          check=False).out.split()
    if spec not in existing:
        gitcmd.run(["--git-dir", repo.git_dir, "config", "--add", f"remote.{name}.fetch", spec])
    gitcmd.run(["--git-dir", repo.git_dir, "config", "gitwork.remote", name])
    wp.settings.remote = name
    return {"remote": name, "fetch": spec, "tracking": tracking_ref(name, wp.store.ref)}


class Arbiter:
    def __init__(self, wp: Workplane, remote: str | None = None) -> None:
        self.wp = wp
        self.store = wp.store
        self.remote = remote or wp.settings.remote
        if not self.remote:
            raise UsageError("no arbiter remote configured (gw remote set NAME)")
        self.tracking = tracking_ref(self.remote, self.store.ref)
        self.git_dir = wp.repo.git_dir
        self._locked_since: float | None = None  # since when every push found the remote's ref locked

    # --- talking to the remote ------------------------------------------------------------------

    def fetch(self) -> str | None:
        """Fetch the remote's state ref; return its tip (``None`` if the remote has none yet)."""
        locked_since: float | None = None
        while True:
            done = self._git("fetch", "--quiet", "--no-tags", "--no-write-fetch-head", self.remote,
                             f"+{self.store.ref}:{self.tracking}", config=_FETCH_CONFIG)
            if done.returncode == 0:
                return self.known_remote_tip()
            if "couldn't find remote ref" in done.err:
                return None
            lock = _LOCK_FILE.search(done.err)
            if lock is None and "cannot lock ref" not in done.err:
                self._unless_denied("fetch from", done.err)
                break
            # Another gw process in this clone fetched at the same moment and holds (or just moved)
            # the tracking ref: the remote answered, so fetch again rather than fail. A lock that
            # stays is a crashed fetch's (kill -9): a local problem, not the remote's (exit 11).
            now = time.monotonic()
            locked_since = now if locked_since is None else locked_since
            if now - locked_since > self.wp.settings.lock_timeout:
                path = lock.group(1) if lock else f"{self.tracking}.lock"
                raise Locked(f"{self.tracking} has been locked for over {self.wp.settings.lock_timeout:g}s: a "
                             f"crashed fetch may have left {path}; if no git process is running, remove it",
                             lock=path, remote=self.remote)
            time.sleep(random.uniform(0.01, 0.1))
        raise RemoteError(f"cannot fetch from {self.remote}: {git_reason(done.err)}", remote=self.remote)

    def _git(self, verb: str, *args: str, config: tuple[str, ...] = ()) -> gitcmd.Completed:
        """Run a git command that talks to the remote, bounded in time and memory.

        A server that stops answering (paused, a half-open connection) leaves git waiting: after
        ``REMOTE_TIMEOUT`` that is an unreachable remote, whose outcome is unknown (exit 12), not an
        internal error. What the server prints (a hook's stderr, relayed by git) is kept only up to
        ``OUTPUT_KEPT`` bytes from each end: a hook printing without end must not fill our memory.
        """
        try:
            return _bounded_run(["git", *config, "--git-dir", self.git_dir, verb, *args], REMOTE_TIMEOUT)
        except subprocess.TimeoutExpired as error:
            raise RemoteError(f"{self.remote} did not answer within {REMOTE_TIMEOUT:g}s (git {verb})",
                              remote=self.remote) from error

    def known_remote_tip(self) -> str | None:
        from .gitdir import read_ref

        fast = read_ref(self.wp.repo.common_dir, self.tracking) if self.wp.repo.fast_refs else False
        if fast is not False:
            return fast  # type: ignore[return-value]
        got = self.store.cat.get(self.tracking)
        return got[0] if got else None

    def push(self, expected: str | None, new: str, riders: tuple[Rider, ...] = ()) -> bool:
        """CAS on the remote: move its state ref from ``expected`` to ``new``; False if it moved first.

        ``riders`` are other refs (a published branch) moved in the same push, each CAS'd on its own
        expected value, with ``git push --atomic``: all land or none does. A rider the remote no longer
        holds at its expected value raises :class:`RiderMoved` (the caller decides again).

        Raises :class:`RemoteRefused` when the remote answered and turned the push down for a reason
        of its own (a hook, permissions): retrying would only ask the same question again.
        """
        leases = [f"--force-with-lease={self.store.ref}:{expected or ''}"]
        leases += [f"--force-with-lease={r.ref}:{r.expected or ''}" for r in riders]
        specs = [f"{new}:{self.store.ref}", *(f"{r.new}:{r.ref}" for r in riders)]
        crash_point("before-push")
        done = self._git("push", "--porcelain", *(["--atomic"] if riders else []), *leases, self.remote, *specs)
        said: dict[str, tuple[str, str]] = {}
        for line in done.out.splitlines():
            fields = line.split("\t")
            if len(fields) >= 2 and ":" in fields[1]:
                said[fields[1].rsplit(":", 1)[1]] = (fields[0], fields[2] if len(fields) > 2 else "")
        for rider in riders:
            flag, why = said.get(rider.ref, (None, ""))
            if flag == "!" and _RACE.search(why):
                raise RiderMoved(rider.ref)
        status, summary = said.get(self.store.ref, (None, ""))
        if status == "!" and riders and "atomic" in summary:
            # The state ref itself was fine: a rider was turned down for a reason of its own (a hook).
            summary = next((why for flag, why in said.values() if flag == "!" and "atomic" not in why), summary)
            race = _RACE.search(done.err)
            if "atomic" in summary and race and f"'{self.store.ref}'" in done.err:
                # Every ref says "atomic transaction failed" and the server says why: another push moved
                # the state ref between its check and its lock ("cannot lock ref ... but expected").
                summary = race.group(0)
        if status == "!":
            if _RACE.search(summary):
                self._unless_locked_for_good(done.err)
                return False  # rejected: another push moved the ref first
            raise self._refused(summary, done.err)
        if done.returncode != 0 or status is None:
            if "stale info" in done.err or "[rejected]" in done.err:
                return False
            if done.returncode == 0 or "remote end hung up" in done.err or "unexpected disconnect" in done.err:
                # No word about our ref (the server went away mid-push): ask what it holds now.
                landed = self._remote_has(new)
                if landed is not None:
                    return landed and self._pushed(new)
            self._unless_denied("push to", done.err)
            raise RemoteError(f"cannot push to {self.remote}: {git_reason(done.err)}", remote=self.remote)
        return self._pushed(new)

    def _refused(self, summary: str, err: str) -> RemoteRefused:
        said = remote_said(err)
        reason = _clean(summary) or "rejected"  # the server's own words (a proc-receive hook writes them)
        text = "; ".join(said) if said else reason
        return RemoteRefused(
            f"{self.remote} refused the push of {self.store.ref}: {text}" + (f" ({reason})" if said else ""),
            remote=self.remote, reason=reason, said=said,
        )

    def _unless_locked_for_good(self, err: str) -> None:
        """Raise :class:`Locked` when the remote has failed to lock its ref for over ``lock_timeout``.

        A push that finds the ref locked on the remote lost a race to another push, for a moment. A
        lock that stays was left by a push that died inside the server (a receive-pack killed with its
        client over file://, a crashed server): retrying would lose every round (exit 75, and a shell
        loop retrying forever); it is the same crashed-writer case as a local lock (exit 11).
        """
        lock = _LOCK_FILE.search(err)
        if lock is None:
            self._locked_since = None
            return
        now = time.monotonic()
        if self._locked_since is None:
            self._locked_since = now
        elif now - self._locked_since > self.wp.settings.lock_timeout:
            raise Locked(f"{self.store.ref} on {self.remote} has been locked for over "
                         f"{self.wp.settings.lock_timeout:g}s: a crashed push may have left {lock.group(1)} there; "
                         "if no git process is running on the remote, remove it", lock=lock.group(1),
                         remote=self.remote)

    def _unless_denied(self, what: str, err: str) -> None:
        """Raise :class:`RemoteRefused` when the server answered "you may not" (HTTP 401/403, failed
        authentication, access denied): nothing landed, and retrying unchanged gets the same answer,
        so it is not "unreachable, outcome unknown" (exit 12) but a refusal (exit 14)."""
        if _DENIED.search(err):
            reason = git_reason(err)
            raise RemoteRefused(f"{self.remote} refused to let us {what.split()[0]}: {reason}", remote=self.remote,
                                reason=reason, said=remote_said(err))

    def _remote_has(self, new: str) -> bool | None:
        """Whether the remote's state ref is at ``new`` (``None``: the remote cannot be asked)."""
        try:
            done = self._git("ls-remote", self.remote, self.store.ref)
        except RemoteError:
            return None
        if done.returncode != 0:
            return None
        return done.out.split("\t", 1)[0].strip() == new

    def _pushed(self, new: str) -> bool:
        crash_point("after-push")
        # git moves the tracking ref itself when a fetch refspec maps the state ref (gw remote set
        # adds one); only without it does that take a process of our own.
        if self.known_remote_tip() != new:
            gitcmd.run(["--git-dir", self.git_dir, "update-ref", self.tracking, new], check=False)
        return True

    # --- history questions ------------------------------------------------------------------------

    def _reaches(self, start: str, target: str, limit: int = 256) -> bool:
        """Whether ``target`` is within ``limit`` first parents of ``start`` (state history is linear)."""
        commit: str | None = start
        for _ in range(limit):
            if commit == target:
                return True
            if commit is None:
                return False
            info = self.store.snapshot(commit).info
            commit = info.parents[0] if info and info.parents else None
        return False

    def _merge_base(self, a: str, b: str) -> str | None:
        # The usual cases (one side a few commits ahead) are answered from the objects, no process.
        if self._reaches(a, b):
            return b
        if self._reaches(b, a):
            return a
        done = gitcmd.run(["--git-dir", self.git_dir, "merge-base", a, b], check=False)
        return done.out.strip() or None

    def _first_parent_range(self, exclude: str | None, include: str) -> list[str]:
        args = ["--git-dir", self.git_dir, "rev-list", "--first-parent", "--reverse", include]
        if exclude:
            args.append(f"^{exclude}")
        return gitcmd.run(args).out.split()

    def _command_of(self, commit: str) -> tuple[dict[str, Any] | None, int]:
        """The command document of a state commit and its author time (no time: no command to replay)."""
        from .statecommit import read

        state = read(self.store, commit)
        return (state.command, state.time) if state.time is not None else (None, 0)

    # --- building the chain to push -----------------------------------------------------------

    def _apply(self, base: Snapshot, cmd: dict[str, Any], when: Any) -> tuple[Snapshot, dict[str, Any], Any]:
        """Replay one command on ``base`` as one commit (``engine.land``, as every write); no ref moves."""
        snapshot_cmd = dict(cmd)
        outcome = engine.apply(base, snapshot_cmd, when, self.wp.settings)
        commit = engine.land(self.store, base, snapshot_cmd, outcome, when)
        return (self.store.snapshot(commit) if commit else base), snapshot_cmd, outcome

    def _follow_grant(self, chain: Snapshot, cmd: dict[str, Any], when: Any) -> dict[str, Any]:
        """``cmd`` with its fence moved to the one its grant holds on ``chain`` now.

        A command made under a lease records the grant's command id as ``lease`` (see
        ``Context.require_holder``). Fence numbers drawn offline can repeat on the arbiter, so a grant
        replayed there may draw a new one; the grant id is what pins the command (docs/leases.md).
        When the lease on ``chain`` carries that very grant, the command acts under the fence the
        grant holds now; otherwise it is left alone and the engine refuses it as stale.
        """
        pinned, fence, item = cmd.get("lease"), cmd.get("fence"), cmd.get("item")
        if not pinned or fence is None or not isinstance(item, str):
            return cmd
        reader = engine.Context(chain, {"op": "read", "id": "read", "as": cmd.get("as")}, when, self.wp.settings)
        lease = reader.lease(item)
        if lease is None or lease.grant != pinned or lease.fence == fence:
            return cmd
        return {**cmd, "fence": lease.fence}

    def rebuild(self, local: str | None, remote: str | None) -> tuple[str | None, list[dict[str, Any]], list[dict[str, Any]]]:
        """The chain to publish: ``remote`` plus local commands it has not seen, re-validated.

        Returns (new tip, replayed, refused). When one side simply contains the other no command is
        re-applied and no commit is rewritten.
        """
        if local is None or local == remote:
            return remote, [], []
        if remote is None:
            return local, [], []
        base = self._merge_base(local, remote)
        if base == local:
            return remote, [], []
        if base == remote:
            return local, [], []
        seen: dict[str, dict[str, Any] | None] = {}
        for commit in self._first_parent_range(local, remote):
            cmd, _ = self._command_of(commit)
            if cmd and "id" in cmd:
                seen[cmd["id"]] = cmd
        chain = self.store.snapshot(remote)
        try:
            chain.check_format()
        except Corrupt as error:
            # A state the arbiter holds that gitwork did not write (a force-push of something else):
            # replaying onto it would refuse every local command and adopt it, dropping them all.
            raise Corrupt(f"{self.remote}'s {self.store.ref} is not a sound gitwork state ({error.message}); "
                          "nothing was replayed onto it or adopted", remote=self.remote, tip=remote) from error
        replayed: list[dict[str, Any]] = []
        refused: list[dict[str, Any]] = []
        for commit in self._first_parent_range(remote, local):
            cmd, when = self._command_of(commit)
            if cmd is None:
                refused.append({"commit": commit, "error": "corrupt", "message": "commit carries no command document"})
                continue
            if cmd.get("id") in seen:
                if not same_command(cmd, seen[cmd["id"]]):
                    refused.append(_conflict(cmd, seen[cmd["id"]], self.remote))
                continue  # already on the remote (a push whose reply was lost, or a replayed copy)
            try:
                chain.check_format()
                before = chain.commit
                at = clock.parse_instant_epoch(when)
                cmd = self._follow_grant(chain, engine.validate_command(cmd), at)
                chain, applied_cmd, _ = self._apply(chain, cmd, at)
                if chain.commit != before:  # a no-op (e.g. init on existing state) is not news
                    replayed.append({"command_id": cmd["id"], "op": cmd.get("op"), "item": applied_cmd.get("item")})
            except GwError as error:
                refused.append({"command_id": cmd.get("id"), "op": cmd.get("op"), "item": cmd.get("item"),
                                **error.to_json()})
        return chain.commit, replayed, refused

    def _adopt(self, local: str | None, new: str | None, *, built_on_local: bool = True) -> list[dict[str, Any]]:
        """Make the local ref hold ``new`` (a chain the arbiter accepted, or will be offered), never
        dropping a local command: nothing moves the local ref backwards over an acknowledged commit.

        ``built_on_local``: ``new`` was built by :meth:`rebuild` from exactly ``local`` (it holds
        every command of ``local``), so the local ref may swap from ``local`` to it. Otherwise ``new``
        is only the arbiter's tip (what a carried waiter, or anyone reading the tracking ref, knows):
        ``local``'s commands it has not seen are replayed on it first. Either way the swap is a
        compare-and-swap against the exact local tip that was replayed: if another command in this
        clone moved the local ref meanwhile, its commands are replayed on top of ``new`` and the CAS
        is tried again. A grant the arbiter accepted is always adopted (otherwise the holder's next
        fenced command would be told its live lease was never granted). Returns the local commands
        that replay refused (reported and kept in ``refused.jsonl``, never dropped silently).
        """
        refused: list[dict[str, Any]] = []
        target = new
        if not built_on_local and new is not None:
            target, _replayed, refused = self.rebuild(local, new)
        for _ in range(MAX_ROUNDS):
            if target is None or local == target or self.store.set_if_equals(local, target):
                return refused
            local = self.store.tip()
            target, _replayed, refused = self.rebuild(local, new)  # only the adopted round's verdicts count
        return refused  # the ref never stood still: the tracking ref still has the grant (catch_up)

    def catch_up(self, cmd: dict[str, Any]) -> None:
        """Adopt what the tracking ref knows before a local command is refused as stale.

        A grant can be on the arbiter (and the tracking ref) but not yet in the local ref, when the
        command that won it was killed between its push and its adoption. A fenced command under that
        grant would then be refused locally ("never leased"); before that, bring the local ref up to
        what the arbiter is known to hold. Costs one dry run of the command, and only when the two
        refs differ and the command names an item.
        """
        remote = self.known_remote_tip()
        local = self.store.tip()
        if remote is None or local is None or remote == local or "item" not in cmd:
            return
        snapshot = self.store.snapshot(local)
        dry = dict(cmd)
        try:
            snapshot.check_format()
            engine.apply(snapshot, dry, self.wp.now(), self.wp.settings)
        except Stale:
            pass
        except GwError:
            return  # some other refusal: the command's own path reports it
        else:
            # Not stale here; but the arbiter may already be known to have ended the lease it acts under.
            self._refuse_superseded(dry, remote)
            return
        if self._reaches(local, remote):
            return  # the local ref already holds everything the arbiter is known to hold
        new, _replayed, refused = self.rebuild(local, remote)
        if refused:
            return  # adopting would drop local commands unannounced: gw sync reports them instead
        self._record_refused(self._adopt(local, new))  # (only if another command raced this one)

    def _refuse_superseded(self, dry: dict[str, Any], remote: str) -> None:
        """Refuse (exit 7) a command acting under a grant the arbiter decided and has since ended.

        A holder paused past its lease (SIGSTOP, a suspended laptop) resumes with a local ref that
        still shows its lease. Once a fetch told this clone that the arbiter moved on (another clone
        took over, an admin revoked), work under that grant can never land (``gw sync`` would refuse
        it at replay): saying so now keeps the holder from working on. Only a grant the arbiter
        itself recorded counts: a tentative (``--offline``) grant is decided at sync, not here.
        """
        grant, item = dry.get("lease"), dry.get("item")
        if not isinstance(grant, str) or not isinstance(item, str):
            return  # not acting under a lease
        there = self.store.snapshot(remote)
        if there.blob(layout.command_path(grant)) is None:
            return  # the arbiter has not seen this grant: it is tentative, sync decides it
        try:
            lease = engine.Context(there, {"op": "read", "id": "read", "as": dry.get("as")}, self.wp.now(),
                                   self.wp.settings).lease(item)
        except GwError:
            return  # the arbiter's copy does not read: the command's own path will say so
        if lease is not None and lease.grant == grant and lease.is_active():
            return  # still the live lease there (renewed, maybe): nothing known against it
        current = f"fence {lease.fence} held by {lease.holder}, {lease.state}" if lease else "no lease"
        raise Stale(f"the lease on {item} (fence {dry.get('fence')}) has ended on {self.remote} ({current}); "
                    "stop working on it", item=item, remote=self.remote)

    def _record_refused(self, refused: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """Keep each refused command once in ``refused.jsonl`` (by command id, or commit).

        Returns the entries that were not there before: the refusals this run is the first to report
        (``gw sync`` fails on those only, so a refusal already reported does not fail a later sync).
        """
        if not refused:
            return []
        import fcntl

        path = os.path.join(self.wp.repo.gitwork_dir(), "refused.jsonl")
        with open(path, "a+", encoding="utf-8") as handle:
            fcntl.flock(handle, fcntl.LOCK_EX)  # two gw processes must not both add the same one
            handle.seek(0)
            known = set()
            for line in handle:
                try:
                    entry = json.loads(line)
                except ValueError:
                    continue
                if isinstance(entry, dict):
                    known.add(_refusal_key(entry))
            handle.seek(0, os.SEEK_END)
            fresh = []
            for entry in refused:
                key = _refusal_key(entry)
                if key in known:
                    continue
                known.add(key)
                fresh.append(entry)
                handle.write(json.dumps({"at": clock.format_instant(clock.now()), **entry}) + "\n")
        return fresh

    # --- the entry points -----------------------------------------------------------------------

    def sync(self, *, push: bool = True) -> dict[str, Any]:
        """Fetch, replay what the remote has not seen, and (with ``push``) publish it."""
        try:
            return self._sync(push)
        except RemoteError as error:
            if not push:
                raise
            raise RemoteError(f"{error.message}; if a push was cut short its outcome is unknown: run gw sync again "
                              "(nothing lands twice)", **error.details) from error

    def _sync(self, push: bool) -> dict[str, Any]:
        replayed: list[dict[str, Any]] = []
        refused: list[dict[str, Any]] = []
        for _round in range(MAX_ROUNDS):
            remote = self.fetch()
            local = self.store.tip()
            new, replayed, refused = self.rebuild(local, remote)
            if new is None:
                break
            if push and new != remote:
                if not self.push(remote, new):
                    time.sleep(random.uniform(0.005, 0.02))
                    continue
            # Only the round that landed counts: an earlier round's verdicts were made on an old tip.
            refused = _unique(refused + self._adopt(local, new))
            break
        else:
            raise Held(f"gave up after {MAX_ROUNDS} lost races on {self.remote}", remote=self.remote)
        # ``refused`` lists only this run's news: a verdict already in refused.jsonl was reported by
        # the run that recorded it (gw status still shows it), and must not fail this sync again.
        refused = self._record_refused(refused)
        return {"remote": self.remote, "tip": self.store.tip(), "remote_tip": self.known_remote_tip(),
                "replayed": replayed, "refused": refused}

    def submit(self, cmd: dict[str, Any], riders: tuple[Rider, ...] = ()) -> Applied:
        """Apply a command the arbiter decides so that it lands on the remote, or refuse it as the
        remote sees it: :func:`engine.run`, the one write loop, with :class:`ArbiterRef` as its CAS.

        ``riders`` (other refs, such as the branch a publish moves) are pushed in the same atomic push:
        the command lands with them or not at all (:meth:`push`).

        If the remote stops answering, the outcome is unknown (it may have landed): the document is
        kept so that ``gw retry ID`` can send it again under the same id, and the error names the id.
        """
        cas = ArbiterRef(self, riders, seed=str(cmd.get("id", "")))
        try:
            return cas.submit(cmd)
        except RemoteError as error:
            if riders:  # a record pushed together with a branch is sent again by its own procedure
                raise RemoteError(f"{error.message}; outcome unknown: command {cmd['id']} ({cmd['op']}) and the "
                                  f"refs pushed with it landed on {self.remote} together or not at all",
                                  **{**error.details, "command_id": cmd["id"], "outcome": "unknown"}) from error
            remember_unknown(self.wp, cmd)
            raise RemoteError(
                f"{error.message}; outcome unknown: command {cmd['id']} ({cmd['op']}) may have landed on "
                f"{self.remote} or not; send it again with: gw retry {cmd['id']}",
                **{**error.details, "command_id": cmd["id"], "outcome": "unknown"},
            ) from error
        finally:
            cas.turn.give()  # a refusal or an error ends the attempt too

    def _answer(self, applied: Applied, refused: list[dict[str, Any]]) -> Applied:
        """Record and report what the replay under this command refused (a ``refused`` list in the
        result: every face shows it)."""
        if refused:
            self._record_refused(refused)
            applied.result = {**applied.result, "refused": refused}
        return applied

    def status(self) -> dict[str, Any]:
        local = self.store.tip()
        remote = self.known_remote_tip()
        pending = []
        if local and local != remote:
            base = self._merge_base(local, remote) if remote else None
            from .statecommit import read

            for commit in self._first_parent_range(base, local):
                state = read(self.store, commit)
                cmd = state.command or {}
                pending.append({"commit": commit, "summary": state.summary, "command_id": cmd.get("id"),
                                "op": cmd.get("op")})
        path = os.path.join(self.wp.repo.gitwork_dir(), "refused.jsonl")
        refused = []
        if os.path.exists(path):
            with open(path, encoding="utf-8") as handle:
                refused = [json.loads(line) for line in handle if line.strip()]
        return {"remote": self.remote, "tip": local, "remote_tip": remote, "pending": pending, "refused": refused}


# --- running git against the remote ----------------------------------------------------------------


class _Kept:
    """The first and the last ``OUTPUT_KEPT`` bytes of a stream, with a mark where the middle went."""

    def __init__(self) -> None:
        self.head = bytearray()
        self.tail = bytearray()
        self.dropped = 0

    def add(self, chunk: bytes) -> None:
        room = OUTPUT_KEPT - len(self.head)
        if room > 0:
            self.head += chunk[:room]
            chunk = chunk[room:]
        self.tail += chunk
        if len(self.tail) > OUTPUT_KEPT:
            self.dropped += len(self.tail) - OUTPUT_KEPT
            del self.tail[: len(self.tail) - OUTPUT_KEPT]

    def value(self) -> bytes:
        middle = b"\n[... %d bytes left out ...]\n" % self.dropped if self.dropped else b""
        return bytes(self.head) + middle + bytes(self.tail)


def _bounded_run(cmd: list[str], timeout: float) -> gitcmd.Completed:
    """``gitcmd.run(cmd[1:], check=False, timeout=timeout)`` keeping only the ends of each stream.

    Raises :class:`subprocess.TimeoutExpired` (after killing git) when it runs past ``timeout``.
    """
    import selectors

    try:
        proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                env=gitcmd.git_env())
    except FileNotFoundError as exc:
        raise GitFailed("git is not installed or not on PATH") from exc
    assert proc.stdout is not None and proc.stderr is not None
    out, err = _Kept(), _Kept()
    kept = {proc.stdout.fileno(): out, proc.stderr.fileno(): err}
    deadline = time.monotonic() + timeout
    with proc, selectors.DefaultSelector() as selector:
        for stream in (proc.stdout, proc.stderr):
            selector.register(stream, selectors.EVENT_READ)
        while selector.get_map():
            left = deadline - time.monotonic()
            if left <= 0:
                proc.kill()
                proc.wait()
                raise subprocess.TimeoutExpired(cmd, timeout)
            for key, _events in selector.select(left):
                chunk = os.read(key.fd, 65536)
                if chunk:
                    kept[key.fd].add(chunk)
                else:
                    selector.unregister(key.fileobj)
        try:
            proc.wait(timeout=max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
            raise
    return gitcmd.Completed(tuple(cmd), proc.returncode, out.value(), err.value())


class ArbiterRef(engine.CAS):
    """The arbiter's CAS for :func:`engine.run`: ``git push --force-with-lease=REF:<old>`` to the remote.

    Each attempt builds on the last known remote tip plus the local commands it has not seen
    (``rebuild``); a lost race, or a refusal made on a view that may be old, fetches the remote's tip
    and tries again. Once the push lands (or the answer is already there), the local ref adopts it.

    A herd (many processes claiming at once) costs every loser a push and a fetch per round, and
    only one push lands per round whatever the others asked for. So the processes of one clone take
    turns (:mod:`pushturn`): each attempt (decide, push, and on a loss the fetch) runs while the
    clone's turn file is held, and a process whose turn comes after a sibling's push or fetch builds
    on the tip that sibling just learned. A process that finds the turn taken leaves its command in
    the clone's queue instead, and the holder carries it: its push is a chain of its own commit and
    one commit per waiting command, so one winning round grants every waiting process of the clone.
    Between attempts a loser fetches and waits a random time (:func:`backoff`, shorter for a longer
    loser) still holding the turn: its siblings' commands ride on its next chain, and the other
    clones' pushers go first. A clone that just won waits longer (:func:`after_a_win`).
    """

    def __init__(self, arbiter: Arbiter, riders: tuple[Rider, ...] = (), seed: str = "") -> None:
        self.arbiter = arbiter
        self.riders = riders
        self.remote = arbiter.known_remote_tip()  # no fetch until something says our view is old
        self.fetched = False
        self.local: str | None = None
        self.refused: list[dict[str, Any]] = []
        gitwork_dir = arbiter.wp.repo.gitwork_dir()
        self.turn = PushTurn(os.path.join(gitwork_dir, TURN_FILE))
        self.fresh_turn = False  # the turn was taken before the first attempt (while handing over)
        # Commands pushed together with a branch (publish) go alone: the chain is theirs. Signed state
        # commits go alone too: each process signs its own commits with its own key.
        settings = arbiter.wp.settings
        self.carry = None if riders or settings.signing else Carry(gitwork_dir, _carry_key(settings))
        self.carried: list[tuple[Carried, Applied]] = []  # what this attempt's chain carries
        self.declined: list[tuple[Carried, GwError]] = []  # what it refused: answered if the chain lands
        self.fresh_view = False  # the remote tip was fetched for this attempt: its refusals are final
        self.fresh_base: Snapshot | None = None
        self.top: str | None = None  # the top of the chain this attempt pushed
        # The waits are drawn from a sequence seeded by the command id (random per command, so
        # processes differ; a test that fixes the id gets the same waits every run).
        self.draw = random.Random(seed)
        self.round_trip = BACKOFF_UNIT
        self.rounds = 0  # rounds lost so far (a lost race, or a refusal on an old view asked again)
        self.alone = False  # waiting for the turn is over (a holder stuck): this round goes without it

    # engine.run makes one attempt per call (``limit``): between rounds :meth:`Arbiter.submit` hands
    # the command to the clone's turn holder when there is one (``hand_over``), so a process that
    # lost a round waits in the queue, carried by whoever pushes next, not for a turn of its own.
    @property
    def limit(self) -> int:  # type: ignore[override]
        return 1 if self.rounds < MAX_ROUNDS else 0

    def submit(self, cmd: dict[str, Any]) -> Applied:
        """Rounds until ``cmd`` is answered: each is ours to push, or carried by the sibling whose
        turn it is (the turn is left to the caller to give back on an error)."""
        while True:
            answered = self.hand_over(cmd)
            if answered is not None:
                return answered
            try:
                return engine.run(self, cmd, self.arbiter.wp.now, self.arbiter.wp.settings)
            except _LostRound:
                continue

    # --- a waiting process: hand the command to the turn holder -----------------------------------

    def hand_over(self, cmd: dict[str, Any]) -> Applied | None:
        """When another process of this clone holds the turn, leave ``cmd`` for it to carry and wait
        for its answer. None: go on alone (the turn is free and now ours, the holder did not carry
        it, or waiting is over), with nothing of ``cmd`` left in the queue."""
        self.alone = False
        if self.carry is None or self.turn.handle is not None:
            return None  # ours alone (a publish, signed commits), or still our turn (a refusal asked again)
        got = self.turn.try_take()
        if got is not False:
            self.fresh_turn = got is True
            return None
        if not self.carry.leave(cmd, self._pinned_time()):
            return None
        try:
            answer = self.carry.wait(self.turn, cmd["id"])
        finally:
            self.carry.withdraw(cmd["id"])
        self.fresh_turn = self.turn.handle is not None
        # No answer and no turn: the holder did not move for TURN_WAIT (stopped, paused): go alone.
        self.alone = answer is None and not self.fresh_turn
        if answer is None or answer.get("own"):
            return None
        if "error" in answer:
            refusal = verdict_from_json(answer["error"])
            if refusal is None:
                return None  # not a verdict we can take over: ask the arbiter ourselves
            self.turn.give()
            raise refusal  # the arbiter's verdict, reached on the chain that landed (or a view just fetched)
        command, commit, result, summary = (answer.get("command"), answer.get("commit"), answer.get("result"),
                                            answer.get("summary"))
        if not (isinstance(command, dict) and command.get("id") == cmd["id"] and isinstance(commit, str)
                and isinstance(result, dict) and isinstance(summary, str) and self._holds(commit, cmd["id"])):
            return None  # not an answer we can trust: ask the arbiter ourselves (the id is answered once)
        self.turn.give()
        # The holder adopted the chain before answering; a local command may have landed since (a
        # ``gw msg`` in this clone): the arbiter's tip is replayed onto, never swapped over, the local ref.
        refused = _unique(self.arbiter._adopt(self.arbiter.store.tip(), self.arbiter.known_remote_tip(),
                                              built_on_local=False))
        return self.arbiter._answer(engine.Applied(command, commit, result, summary, 1), refused)

    def _holds(self, commit: str, command_id: str) -> bool:
        """Whether ``commit`` (an answer's) is a state that records ``command_id``: an answer is
        believed only when the objects say the command landed there."""
        try:
            snapshot = self.arbiter.store.snapshot(commit)
            return snapshot.blob(layout.command_path(command_id)) is not None
        except (GwError, ValueError):
            return False

    def _pinned_time(self) -> str | None:
        """Our clock's reading when it is not the real clock (``GW_NOW``, an injected clock): the
        holder then decides our command at our time, not its own."""
        wp = self.arbiter.wp
        if wp.now is clock.now and "GW_NOW" not in os.environ:
            return None
        return clock.format_instant(wp.now())

    # --- the attempts -----------------------------------------------------------------------------

    def base(self) -> Snapshot:
        store = self.arbiter.store
        newly = self.fresh_turn or self.alone or self.turn.take()
        self.fresh_turn = self.alone = False
        if newly:
            # Our turn began: a sibling may have pushed or fetched meanwhile, and the tracking ref then
            # holds a newer tip than the one this command last saw (a lost round fetched it in its turn).
            known = self.arbiter.known_remote_tip()
            if known is not None:
                self.remote = known
            won = self.turn.won_by_sibling(known)
            if won is not None:
                # This clone won the last round and knows the new tip at once, where the other clones'
                # losers still fetch it: going first every time would starve them (measured: one clone
                # took every grant). Give them the time to hear of their loss and fetch.
                self.round_trip = won[0]
                time.sleep(after_a_win(*won, self.draw))
        self.local = store.tip()
        base, _replayed, self.refused = self.arbiter.rebuild(self.local, self.remote)
        snapshot = store.snapshot(base) if base else Snapshot(store, None, None)
        self.fresh_base, self.fresh_view = (snapshot if self.fresh_view else None), False
        return snapshot

    def expected(self, base: Snapshot) -> str | None:
        return self.remote

    def again(self, error: GwError) -> bool:
        if self.fetched:
            if self.fresh_base is not None:
                self._decide_queue(self.fresh_base)
            return False
        self.rounds += 1
        # Our view of the remote may be old: refuse only on what the remote says now.
        self.remote, self.fetched, self.fresh_view = self.arbiter.fetch(), True, True
        return True

    def _decide_queue(self, base: Snapshot) -> None:
        """Our own command is refused on a view just fetched: answer the waiting commands that view
        refuses too (at the end of a herd every waiter's ``claim --next`` finds nothing ready, and
        each would otherwise take the turn in its own turn to fetch and hear the same). A waiting
        command the view accepts stays queued for the next holder."""
        if self.carry is None or self.turn.handle is None or base.commit is None:
            return
        for entry in self.carry.pending():
            decided = self._decide(entry, base)
            if isinstance(decided, GwError):
                self.carry.answer(entry, {"error": decided.to_json()})

    def _decide(self, entry: Carried, base: Snapshot) -> tuple[dict[str, Any], Any, Any] | GwError | None:
        """Decide a waiting command on ``base`` exactly as its own process would: ``(document, time,
        outcome)``, or the engine's verdict refusing it, or None when it is not ours to decide (left
        queued: it runs on the real clock and ours is pinned; or handed back to its own process)."""
        assert self.carry is not None
        wp = self.arbiter.wp
        if entry.at is None and self._pinned_time() is not None:
            return None
        try:
            cmd = engine.validate_command(entry.cmd)
            at = clock.parse_instant(entry.at) if entry.at else wp.now()
            return cmd, at, engine.apply(base, cmd, at, wp.settings)
        except GwError as refusal:
            if verdict_from_json(refusal.to_json()) is not None:
                return refusal
        except Exception:  # noqa: BLE001 - whatever befalls another process's command is its own to meet
            pass
        self.carry.answer(entry, {"own": True})
        return None

    def swap(self, old: str | None, new: str) -> bool:
        # (An answer found among local commands the remote has not seen is pushed like a new commit:
        # a command the arbiter decides is done only once it is on the arbiter.)
        started = time.monotonic()
        top = self._carry_on(new)
        try:
            try:
                won = self.arbiter.push(old, top, self.riders)
            except RemoteRefused:
                if top == new:
                    raise
                # The remote turned the chain down, perhaps for a carried command: each carried
                # command asks for itself, and ours goes alone.
                self._hand_back()
                top = new
                won = self.arbiter.push(old, top, self.riders)
            except RemoteError:
                self._hand_back()  # outcome unknown for the chain: each asks (and finds out) itself
                raise
        finally:
            self.round_trip = time.monotonic() - started
        self.top = top if won else None
        if not won:
            self.carried, self.declined = [], []  # still queued: the next holder (maybe us) decides again
        return won

    def _carry_on(self, new: str) -> str:
        """Lay the commands waiting in the clone's queue on top of ``new``, one commit each; the top.

        Each is decided as its own process would decide it on the chain (:meth:`_decide`); a refusal
        is its answer only once the chain has landed (``declined``, answered by :meth:`landed`).
        """
        self.carried, self.declined, self.top = [], [], None
        if self.carry is None or self.turn.handle is None:
            return new  # without the turn another process may be carrying them
        entries = self.carry.pending()
        if not entries:
            return new
        store = self.arbiter.store
        top = store.snapshot(new)
        for entry in entries:
            decided = self._decide(entry, top)
            if decided is None:
                continue
            if isinstance(decided, GwError):
                self.declined.append((entry, decided))  # the arbiter's verdict once the chain lands
                continue
            cmd, at, outcome = decided
            commit = engine.land(store, top, cmd, outcome, at)
            if commit:
                top = store.snapshot(commit)
            self.carried.append((entry, engine.Applied(cmd, top.commit, outcome.result, outcome.summary, 1)))
        assert top.commit is not None
        return top.commit

    def _hand_back(self) -> None:
        assert self.carry is not None or not (self.carried or self.declined)
        for entry in [entry for entry, _ in self.carried] + [entry for entry, _ in self.declined]:
            self.carry.answer(entry, {"own": True})  # type: ignore[union-attr]
        self.carried, self.declined = [], []

    def lost(self, attempt: int) -> None:
        # The push was made on a tip that is gone: fetch the new one and, after a random while (the
        # other clones' pushers go first), push again, keeping the turn: the clone's waiting commands
        # stay queued and ride on our next chain, so handing the turn to a sibling would only add the
        # time it takes to pick it up.
        self.rounds += 1
        self.turn.mark_lost()
        self.remote, self.fetched, self.fresh_view = self.arbiter.fetch(), True, True
        time.sleep(backoff(self.rounds, self.round_trip, self.draw))

    def landed(self, applied: Applied, moved: bool) -> Applied:
        # Pushed, or nothing to push (done before: the same id answered with its first result, from
        # what the remote holds): either way it becomes local, as after a pull.
        top = (self.top or applied.commit) if moved else applied.commit
        if moved:
            assert top is not None
            self.turn.mark_won(top, self.round_trip, len(self.carried))
        # Adopted before the carried commands are answered: a waiter that reads its answer finds its
        # command in the local ref already (and has nothing to adopt itself).
        refused = _unique(self.refused + self.arbiter._adopt(self.local, top))
        for entry, done in self.carried if moved else ():
            assert self.carry is not None
            self.carry.answer(entry, {"command": done.command, "commit": done.commit, "result": done.result,
                                      "summary": done.summary})
        for entry, refusal in self.declined if moved else ():
            assert self.carry is not None
            self.carry.answer(entry, {"error": refusal.to_json()})  # decided on what the arbiter now holds
        self.carried, self.declined = [], []
        self.turn.give()
        applied.attempts = self.rounds + 1
        return self.arbiter._answer(applied, refused)

    def gave_up(self) -> GwError:
        if self.rounds < MAX_ROUNDS:
            return _LostRound("lost a round")
        return Held(f"gave up after {MAX_ROUNDS} lost races on {self.arbiter.remote}", remote=self.arbiter.remote)


class _LostRound(GwError):
    """One round of :meth:`Arbiter.submit` ended without an answer (a lost race, a refusal on a view
    that was old): the next round goes on. Never leaves :mod:`sync`."""


def backoff(lost: int, round_trip: float, draw: random.Random) -> float:
    """Seconds a loser waits after the ``lost``-th lost round in a row (full jitter, from ``draw``).

    With one pusher per clone (the turn) the herd is the clones' pushers, and what matters is who
    goes next: the cap is half the last round trip (at least BACKOFF_UNIT, at most BACKOFF_CAP) and
    halves with each further lost round, so the pusher that kept losing is back first (measured with
    a cap that grew instead: one clone lost round after round while its four processes waited).
    """
    unit = min(max(round_trip, BACKOFF_UNIT), BACKOFF_CAP)
    return draw.uniform(0.0, unit / 2 ** min(max(lost, 1), 8))


def after_a_win(round_trip: float, herd: bool, draw: random.Random) -> float:
    """Seconds a clone whose last push won waits before its next one while other clones contend.

    A herd (the winning push carried other processes' commands): two round trips of that push (the
    other clones' losers hear of their loss about one round trip late, then fetch) and a random part
    of a third. Otherwise (the clone only lost rounds lately: one process looping, say) one round
    trip and a random quarter of another, which costs a lone looper little after a lost round.
    """
    unit = min(max(round_trip, BACKOFF_UNIT), BACKOFF_CAP)
    if herd:
        return 2 * unit + draw.uniform(0.0, unit / 2)
    return unit + draw.uniform(0.0, unit / 4)


def _carry_key(settings: Any) -> str:
    """What a carried command's outcome depends on besides its document and the state: the settings
    the engine reads (``GW_*`` variables may differ between two processes of one clone)."""
    import hashlib

    names = ("ref", "default_ttl", "clock_margin", "admins", "agents", "remote", "signing", "sessions")
    text = json.dumps([getattr(settings, name) for name in names] + [settings.extra], sort_keys=True, default=repr)
    return hashlib.sha256(text.encode()).hexdigest()[:32]


# --- commands whose outcome is unknown ------------------------------------------------------------


def _unknown_path(wp: Workplane, command_id: str) -> str:
    from .commands import _cmd_id

    _cmd_id(command_id, "command id")  # names a file: only the characters a command id may have
    return os.path.join(wp.repo.gitwork_dir(), "unknown", f"{command_id}.json")


def remember_unknown(wp: Workplane, cmd: dict[str, Any]) -> None:
    """Keep the document of a command whose outcome is unknown, for ``gw retry``."""
    path = _unknown_path(wp, cmd["id"])
    os.makedirs(os.path.dirname(path), exist_ok=True)
    temporary = f"{path}.{os.getpid()}.tmp"
    with open(temporary, "w", encoding="utf-8") as handle:
        json.dump(cmd, handle, ensure_ascii=False, sort_keys=True)
    os.replace(temporary, path)


def retry(wp: Workplane, command_id: str) -> Applied:
    """Send the kept document of an outcome-unknown command again, under its own id.

    If it had landed, the engine answers with the first result (``duplicate: true``); if not, it is
    applied now. Either way the outcome is known afterwards and the kept document is dropped; only
    another "remote unreachable" keeps it for the next try.
    """
    path = _unknown_path(wp, command_id)
    try:
        with open(path, encoding="utf-8") as handle:
            doc = json.load(handle)
    except FileNotFoundError:
        raise NotFound(f"no command {command_id} awaits a retry (gw retry takes the id an exit 12 named)",
                       id=command_id) from None
    except ValueError as exc:
        raise UsageError(f"cannot read the kept document of {command_id}: {exc}") from exc
    try:
        applied = wp.submit(doc)
    except RemoteError:
        raise
    except GwError:
        os.remove(path)  # refused: the outcome is known now
        raise
    os.remove(path)
    return applied


# --- reading what git and the remote said ------------------------------------------------------------


def same_command(a: dict[str, Any], b: dict[str, Any] | None) -> bool:
    """Whether two command documents under one id are the same command (canonical JSON, less the
    fields the fencing rule fills in, which a replay may change)."""
    if b is None:
        return False

    def canonical(doc: dict[str, Any]) -> str:
        return json.dumps({k: v for k, v in doc.items() if k not in FILLED_IN}, sort_keys=True, ensure_ascii=False,
                          separators=(",", ":"))

    return canonical(a) == canonical(b)


def _conflict(local: dict[str, Any], theirs: dict[str, Any] | None, remote: str) -> dict[str, Any]:
    differ = sorted(k for k in {*local, *(theirs or {})} - set(FILLED_IN)
                    if local.get(k) != (theirs or {}).get(k))
    return {"command_id": local.get("id"), "op": local.get("op"), "item": local.get("item"), "error": "conflict",
            "code": 5, "message": f"command id {local.get('id')} is already used on {remote} by a different "
                                  f"document (differs in: {', '.join(differ) or 'its content'}); not replayed",
            "details": {"remote_op": (theirs or {}).get("op"), "differs": differ}}


def _refusal_key(entry: dict[str, Any]) -> str:
    return str(entry.get("command_id") or entry.get("commit"))


def _unique(refused: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Each refused command once (the first verdict on it), in order."""
    seen: set[str] = set()
    return [entry for entry in refused if not (_refusal_key(entry) in seen or seen.add(_refusal_key(entry)))]


def _clean(line: str, limit: int = 300) -> str:
    text = _UNPRINTABLE.sub(" ", _ESCAPE.sub("", line[: limit * 4])).strip()
    return text if len(text) <= limit else text[: limit - 3] + "..."


def remote_said(err: str, most: int = 5) -> list[str]:
    """The ``remote:`` lines of git's stderr (what the server's hooks printed), cleaned, at most ``most``."""
    # Split where git does (it starts a new "remote:" line after a carriage return too), not with
    # str.splitlines(), which also splits on \x85 and U+2028 and would drop what follows them.
    said = [_clean(line[len("remote:"):]) for line in _LINES.split(err) if line.startswith("remote:")]
    return [line for line in said if line][:most]


def git_reason(err: str) -> str:
    """The line of git's stderr that says why: a ``fatal:``/``error:`` line that is not the generic
    "failed to push some refs", else what the remote said, else the last line."""
    lines = [_clean(line) for line in _LINES.split(err) if line.strip()]
    generic = ("failed to push some refs", "could not read from remote repository")
    for prefix in ("fatal:", "error:"):
        for line in lines:
            if line.lower().startswith(prefix) and not any(g in line.lower() for g in generic):
                return line
    said = remote_said(err)
    if said:
        return "remote said: " + "; ".join(said)
    return lines[-1] if lines else "no output"
