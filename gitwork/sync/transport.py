"""Talking to the arbiter remote: fetch its state ref, push to it by compare-and-swap, read what it said.

Pushes and fetches use the git binary, through :func:`gitcmd.run` (the one runner), bounded in time
(``REMOTE_TIMEOUT``) and in the output kept (``OUTPUT_KEPT``: what a server prints is not ours to
bound): pygit2's push to a local path is not a compare-and-swap and runs no server hooks. Nothing
here replays or decides a command (that is :mod:`.replay` and :mod:`.cas`).
"""

from __future__ import annotations

import random
import re
import time

from .. import gitcmd
from ..errors import Locked, RemoteError, RemoteRefused, UsageError
from ..store import crash_point

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

    from ..workplane import Workplane

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
    from ..settings_edit import write_git_config  # (a config.lock a killed git config left: removed when stale)

    if spec not in existing:
        write_git_config(repo.git_dir, repo.common_dir, repo.toplevel, "--add", f"remote.{name}.fetch", spec)
    write_git_config(repo.git_dir, repo.common_dir, repo.toplevel, "gitwork.remote", name)
    wp.settings.remote = name
    return {"remote": name, "fetch": spec, "tracking": tracking_ref(name, wp.store.ref)}


class Remote:
    """The arbiter remote of one work plane, as git talks to it: fetch its state ref, push to it by
    compare-and-swap, and know the tip it was last seen at (the tracking ref)."""

    def __init__(self, wp: Workplane, remote: str | None = None) -> None:
        self.wp = wp
        self.store = wp.store
        self.remote = remote or wp.settings.remote
        if not self.remote:
            raise UsageError("no arbiter remote configured (gw remote set NAME)")
        self.tracking = tracking_ref(self.remote, self.store.ref)
        self.git_dir = wp.repo.git_dir
        self._locked_since: float | None = None  # since when every push found the remote's ref locked
        # How long a silent remote is waited for (``_git``); shorter for a caller that must not stall on it:
        # the coordinator's pass, which would otherwise outwait its own lease and its agents' renewals.
        self.timeout: float = REMOTE_TIMEOUT

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
            # stays is a crashed fetch's (kill -9): removed by the arbiter's own rule when it is old and
            # no git of this clone could hold it (stalelocks.py); else a local problem, not the
            # remote's (exit 11).
            now = time.monotonic()
            locked_since = now if locked_since is None else locked_since
            if self._swept():
                continue
            if now - locked_since > self.wp.settings.lock_timeout:
                path = lock.group(1) if lock else f"{self.tracking}.lock"
                raise Locked(f"{self.tracking} has been locked for over {self.wp.settings.lock_timeout:g}s: a "
                             f"crashed fetch may have left {path}; if no git process is running, remove it",
                             lock=path, remote=self.remote)
            time.sleep(random.uniform(0.01, 0.1))
        raise RemoteError(f"cannot fetch from {self.remote}: {git_reason(done.err)}", remote=self.remote)

    def _swept(self) -> bool:
        """Whether a stale lock of the tracking ref was removed here (one ``lstat`` while it is young)."""
        from ..stalelocks import sweep_and_say

        repo = self.wp.repo
        return sweep_and_say(repo.common_dir, [self.tracking], under="refs/remotes/", work_tree=repo.toplevel)

    def _git(self, verb: str, *args: str, config: tuple[str, ...] = ()) -> gitcmd.Completed:
        """Run a git command that talks to the remote, bounded in time and memory.

        A server that stops answering (paused, a half-open connection) leaves git waiting: after
        ``REMOTE_TIMEOUT`` that is an unreachable remote, whose outcome is unknown (exit 12), not an
        internal error. What the server prints (a hook's stderr, relayed by git) is kept only up to
        ``OUTPUT_KEPT`` bytes from each end: a hook printing without end must not fill our memory.
        """
        bound = min(self.timeout, REMOTE_TIMEOUT)
        try:
            return gitcmd.run([*config, "--git-dir", self.git_dir, verb, *args], check=False, timeout=bound,
                              keep=OUTPUT_KEPT)
        except gitcmd.TimedOut as error:
            raise RemoteError(f"{self.remote} did not answer within {bound:g}s (git {verb})",
                              remote=self.remote) from error

    def known_remote_tip(self) -> str | None:
        from ..gitdir import read_ref

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



# --- reading what git and the remote said ------------------------------------------------------------


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
