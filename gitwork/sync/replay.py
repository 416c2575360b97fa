"""Several machines, the replay: a git remote as the single arbiter of leases, offline work replayed on sync.

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

No local command is ever dropped: every adoption of a tip onto the local ref is a compare-and-swap
against the exact local tip that was replayed onto it (:meth:`Replay.adopt`), retried with the
commands that landed meanwhile replayed on top.

This module is the replay (``rebuild``, ``adopt``, ``catch_up``, ``sync``, ``status``); talking to the
remote is :mod:`.transport`, and a command the arbiter decides goes through :mod:`.cas`.
"""

from __future__ import annotations

import json
import os
import random
import time

from .. import clock, engine, gitcmd, layout
from ..errors import Corrupt, GwError, RemoteError, RemoteRefused, Stale
from ..lazyre import Lazy
from ..store import Snapshot
from .transport import Remote

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

    from ..engine import Applied

# Rounds a sync or an arbiter command goes through (each lost race one) before it gives up (exit 75).
MAX_ROUNDS = 200
# Fields the engine fills in while applying (the fencing rule); a replay may legitimately change
# them, so two documents under one id are the same command when everything else is equal.
FILLED_IN = ("fence", "lease")
# The arbiter's own verdict on a command of a pushed chain: its hook re-applied the command with the
# ARBITER's roles and refused it (derive.check_commit), one line per commit. Only a refusal by roles: one
# "on replay" may be a build the arbiter has not caught up with (a field it does not know yet), which is
# not a verdict on the command (the push fails, as before, until the arbiter is upgraded).
VERDICT = Lazy(r"gitwork: ([0-9a-f]{12}): (\S+) by (\S+) refused by the arbiter's (roles|clock): (.*)")
# The arbiter's clock refuses a commit dated past it (derive.time_refusal). A command made while this machine's
# clock ran far ahead (a VM restored with a bad clock, local time taken for UTC) would be refused on every push
# until the arbiter's clock reached its date, and every lease command of the clone carries it: more than
# FAR_AHEAD seconds ahead, while this machine's clock agrees with the arbiter's now (``_far_ahead``), that
# refusal is the command's verdict, as the roles' is. Less, it is a skew that
# heals by itself within minutes, and the command is not given up for it (the push fails, as before).
CLOCK = Lazy(r"commit time (\S+) is later than the arbiter's clock \((\S+)\)")
FAR_AHEAD = 600
# Where those verdicts are kept, by command id: a later replay refuses the command as the arbiter did.
VERDICTS = "arbiter-refused.jsonl"


class Replay(Remote):
    """The arbiter remote of one work plane, and the local ref kept in step with it: the chain to
    push (:meth:`rebuild`), the adoption of what landed (:meth:`adopt`), ``gw sync`` and its status."""

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
        from ..statecommit import read

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
        lease = engine.View(chain, when, self.wp.settings, cmd.get("as")).lease(item)
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
        verdicts = self._verdicts()
        if base == remote and not (verdicts and self._holds_any(remote, local, verdicts)):
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
                    refused.append({**_conflict(cmd, seen[cmd["id"]], self.remote), "commit": commit})
                continue  # already on the remote (a push whose reply was lost, or a replayed copy)
            verdict = _verdict_on(cmd, verdicts)
            if verdict is not None:
                refused.append({**verdict, "commit": commit})  # the arbiter refused it already: never pushed again
                continue
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
                                **error.to_json(), "commit": commit})
        return chain.commit, replayed, refused

    # --- the arbiter's verdicts on replayed commands ----------------------------------------------

    def _verdicts(self) -> dict[str, dict[str, Any]]:
        """The refusals the arbiter's hook gave commands of this clone, by command id (:meth:`heard`)."""
        path = os.path.join(self.wp.repo.gitwork_dir(), VERDICTS)
        found: dict[str, dict[str, Any]] = {}
        try:
            with open(path, encoding="utf-8") as handle:
                for line in handle:
                    try:
                        entry = json.loads(line)
                    except ValueError:
                        continue
                    if isinstance(entry, dict) and isinstance(entry.get("command_id"), str):
                        found[entry["command_id"]] = entry
        except FileNotFoundError:
            pass
        return found

    def _holds_any(self, base: str, top: str, verdicts: dict[str, dict[str, Any]]) -> bool:
        """Whether a command the arbiter refused is among the commits ``base..top``."""
        for commit in self._first_parent_range(base, top):
            cmd = self._command_of(commit)[0]
            if cmd is not None and _verdict_on(cmd, verdicts) is not None:
                return True
        return False

    def heard(self, error: RemoteRefused, base: str | None, top: str, own: str | None = None) -> bool:
        """Take the arbiter's refusal of the pushed chain ``base..top`` as its verdict on the commands it
        names, when each is one of this clone's replayed commands (never the commit ``own``, the command
        being decided now: its refusal is its answer). Such a command passed the replay here, decided with this
        clone's settings, and the arbiter, deciding with its own (an admin removed there, a narrower
        role), refuses it: the same verdict a replay gives, so it is kept (``arbiter-refused.jsonl``),
        the next rebuild refuses it, and the rest of the chain lands. Without this the hook refused the
        whole chain on every push, and the clone's every sync and lease command failed for good.
        Returns whether a verdict was taken (then push again); a refusal of anything else (a forgery,
        the arbiter's clock, a signature, another build's replay) is left to the caller.
        """
        said = error.details.get("said") or []
        named = [m for m in (VERDICT.match(line) for line in said if isinstance(line, str)) if m]
        if not named:
            return False
        chain = {c[:12]: c for c in self._first_parent_range(base, top)}
        taken = []
        for match in named:
            commit = chain.get(match.group(1))
            cmd = self._command_of(commit)[0] if commit and commit != own else None
            if cmd is None or not isinstance(cmd.get("id"), str) \
                    or (cmd.get("op"), cmd.get("as")) != (match.group(2), match.group(3)):
                continue
            if match.group(4) == "roles":
                refusal = {"error": "forbidden", "code": 77, "message": f"{self.remote}'s roles refuse it: {match.group(5)}"}
            else:
                ahead = _far_ahead(match.group(5))
                if ahead is None:
                    continue  # a skew that heals, or clocks that disagree now (the arbiter's lags, or ours runs ahead)
                refusal = {"error": "invalid", "code": 5,
                           "message": f"{self.remote}'s clock refuses it: recorded {ahead // 60} minutes past the "
                                      f"arbiter's clock (made while this machine's clock ran ahead): {match.group(5)}"}
            taken.append({"command_id": cmd["id"], "op": cmd.get("op"), "item": cmd.get("item"), **refusal,
                          "by": "arbiter", "command": _digest(cmd)})
        if not taken:
            return False
        import fcntl

        with open(os.path.join(self.wp.repo.gitwork_dir(), VERDICTS), "a", encoding="utf-8") as handle:
            fcntl.flock(handle, fcntl.LOCK_EX)
            handle.write("".join(json.dumps({"at": clock.format_instant(clock.now()), **entry}) + "\n"
                                 for entry in taken))
        return True

    def adopt(self, local: str | None, new: str | None, *, built_on_local: bool = True) -> list[dict[str, Any]]:
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
        self.record_refused(self.adopt(local, new))  # (only if another command raced this one)

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
            lease = engine.View(there, self.wp.now(), self.wp.settings, dry.get("as")).lease(item)
        except GwError:
            return  # the arbiter's copy does not read: the command's own path will say so
        if lease is not None and lease.grant == grant and lease.is_active():
            return  # still the live lease there (renewed, maybe): nothing known against it
        current = f"fence {lease.fence} held by {lease.holder}, {lease.state}" if lease else "no lease"
        raise Stale(f"the lease on {item} (fence {dry.get('fence')}) has ended on {self.remote} ({current}); "
                    "stop working on it", item=item, remote=self.remote)

    def record_refused(self, refused: list[dict[str, Any]]) -> list[dict[str, Any]]:
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
                try:
                    pushed = self.push(remote, new)
                except RemoteRefused as error:
                    if not self.heard(error, remote, new):
                        raise
                    continue  # the arbiter refused a command of ours: the next chain leaves it out
                if not pushed:
                    time.sleep(random.uniform(0.005, 0.02))
                    continue
            # Only the round that landed counts: an earlier round's verdicts were made on an old tip.
            refused = unique(refused + self.adopt(local, new))
            break
        else:
            raise engine.gave_up(MAX_ROUNDS, self.remote)
        # ``refused`` lists only this run's news: a verdict already in refused.jsonl was reported by
        # the run that recorded it (gw status still shows it), and must not fail this sync again.
        refused = self.record_refused(refused)
        return {"remote": self.remote, "tip": self.store.tip(), "remote_tip": self.known_remote_tip(),
                "replayed": replayed, "refused": refused}

    def answer(self, applied: Applied, refused: list[dict[str, Any]]) -> Applied:
        """Record and report what the replay under this command refused (a ``refused`` list in the
        result: every face shows it)."""
        if refused:
            self.record_refused(refused)
            applied.result = {**applied.result, "refused": refused}
        return applied

    def status(self) -> dict[str, Any]:
        local = self.store.tip()
        remote = self.known_remote_tip()
        pending = []
        if local and local != remote:
            base = self._merge_base(local, remote) if remote else None
            from ..statecommit import read

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


# --- comparing command documents ------------------------------------------------------------------


def _canonical(doc: dict[str, Any]) -> str:
    return json.dumps({k: v for k, v in doc.items() if k not in FILLED_IN}, sort_keys=True, ensure_ascii=False,
                      separators=(",", ":"))


def same_command(a: dict[str, Any], b: dict[str, Any] | None) -> bool:
    """Whether two command documents under one id are the same command (canonical JSON, less the
    fields the fencing rule fills in, which a replay may change)."""
    if b is None:
        return False
    return _canonical(a) == _canonical(b)


def _far_ahead(said: str) -> int | None:
    """How many seconds past the arbiter's clock a commit was dated, from the clock refusal's words, when
    that refusal is a verdict on its command: more than ``FAR_AHEAD``, while this machine's clock is at
    most ``FAR_AHEAD`` past the arbiter's. Only then was the command made while this clock ran ahead. An
    arbiter whose clock lags (stopped, a restored VM) refuses every command of every clone as far ahead:
    taken as verdicts, every clone gave up every local command it had; and while this clock still runs
    ahead, every new command is as far ahead (giving up the old ones saves nothing). One-sided: a clock
    behind the arbiter's dates its new commands in the past, which the arbiter takes. None otherwise."""
    found = CLOCK.search(said)
    if found is None:
        return None
    try:
        there = clock.parse_instant(found.group(2))
        ahead = int((clock.parse_instant(found.group(1)) - there).total_seconds())
        lag = (clock.now() - there).total_seconds()
    except (ValueError, GwError):
        return None
    return ahead if ahead > FAR_AHEAD and lag <= FAR_AHEAD else None


def _digest(cmd: dict[str, Any]) -> str:
    """The command document a verdict was given on (:func:`_canonical`, hashed)."""
    from ..hashing import sha256_hex

    return sha256_hex(_canonical(cmd).encode())[:32]


def _verdict_on(cmd: dict[str, Any], verdicts: dict[str, dict[str, Any]]) -> dict[str, Any] | None:
    """The arbiter's verdict on this very command, as a refusal; None for any other (a verdict kept by an
    earlier build, without the document's digest, is on the id). Once refused, a command's id is free
    again in the clone's state (and was never recorded on the arbiter): a client choosing its ids may
    use it for another command, which the verdict must not refuse (it did, and, the id already reported,
    silently: sync said 0 and the command was gone)."""
    command_id = cmd.get("id")
    verdict = verdicts.get(command_id) if isinstance(command_id, str) else None
    if verdict is None or verdict.get("command") not in (None, _digest(cmd)):
        return None
    return {k: v for k, v in verdict.items() if k != "command"}


def _conflict(local: dict[str, Any], theirs: dict[str, Any] | None, remote: str) -> dict[str, Any]:
    differ = sorted(k for k in {*local, *(theirs or {})} - set(FILLED_IN)
                    if local.get(k) != (theirs or {}).get(k))
    return {"command_id": local.get("id"), "op": local.get("op"), "item": local.get("item"), "error": "conflict",
            "code": 5, "message": f"command id {local.get('id')} is already used on {remote} by a different "
                                  f"document (differs in: {', '.join(differ) or 'its content'}); not replayed",
            "details": {"remote_op": (theirs or {}).get("op"), "differs": differ}}


def _refusal_key(entry: dict[str, Any]) -> str:
    """A refusal is reported once per refused local commit: the same command id may be sent again once
    refused (its id is free again in the clone), and that command's refusal must be reported too (by id
    alone it was not: sync said 0 and the acknowledged command was gone). An entry of an earlier build,
    without its commit, is keyed by its id."""
    if entry.get("command_id") and entry.get("commit"):
        return f"{entry['command_id']}@{entry['commit']}"
    return str(entry.get("command_id") or entry.get("commit"))


def unique(refused: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Each refused command once (the first verdict on it), in order."""
    seen: set[str] = set()
    out = []
    for entry in refused:
        key = _refusal_key(entry)
        if key not in seen:
            seen.add(key)
            out.append(entry)
    return out


