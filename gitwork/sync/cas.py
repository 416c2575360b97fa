"""The arbiter's compare-and-swap: a command the arbiter decides, driven round by round by :func:`engine.run`.

A lease command (claim, renew, release, takeover, revoke, handoff, and every command that ends a
lease: done, cancel, publish) succeeds only once its commit is on the remote's state ref: each round
applies it on top of the last known remote tip (plus the local commands the remote has not seen,
:meth:`Replay.rebuild`) and pushes with ``--force-with-lease=<ref>:<that tip>``. A lost race fetches
the new tip and the next round decides the same document again (re-validating it: the item may now
be held, the fence stale). :class:`ArbiterRef` is that CAS; :func:`engine.run` counts the rounds and
passes each its number; what one round knows is one :class:`Round`.

Between rounds the back-off policy (:func:`backoff`, :func:`after_a_win`) spreads the clones'
pushers, and the processes of one clone take turns (:mod:`pushturn`). A command whose outcome is
unknown (the remote stopped answering mid-push) is kept for ``gw retry`` (:func:`remember_unknown`).
"""

from __future__ import annotations

import json
import os
import random
import time

from .. import clock, engine, layout
from ..errors import (
    GwError,
    NotFound,
    RemoteError,
    RemoteRefused,
    UsageError,
    verdict_from_json,
)
from ..pushturn import BACKOFF_CAP, BACKOFF_UNIT, TURN_FILE, Carried, Carry, PushTurn
from ..store import Snapshot
from . import batch, replay
from .replay import Replay, unique
from .transport import Rider

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

    from ..engine import Applied
    from ..workplane import Workplane


class Arbiter(Replay):
    """The arbiter remote of one work plane: what :class:`Replay` does, and the commands it decides."""

    def submit(self, cmd: dict[str, Any], riders: tuple[Rider, ...] = ()) -> Applied:
        """Apply a command the arbiter decides so that it lands on the remote, or refuse it as the
        remote sees it: :func:`engine.run`, the one write loop, with :class:`ArbiterRef` as its CAS.

        ``riders`` (other refs, such as the branch a publish moves) are pushed in the same atomic push:
        the command lands with them or not at all (:meth:`push`).

        If the remote stops answering, the outcome is unknown (it may have landed): the document is
        kept so that ``gw retry ID`` can send it again under the same id, and the error names the id.
        """
        settings = self.wp.settings
        if settings.arbiter == "batch" and not riders and not settings.signing and batch.fits(cmd) \
                and not self._unsynced():
            # The batch arbiter (sync/batch.py): a request in the arbiter's inbox, no race for the ref.
            try:
                return batch.submit(self, cmd, _carry_key(settings))
            except RemoteError as error:
                remember_unknown(self.wp, cmd)
                raise RemoteError(
                    f"{error.message}; outcome unknown: command {cmd['id']} ({cmd['op']}) may have landed on "
                    f"{self.remote} or not; send it again with: gw retry {cmd['id']}",
                    **{**error.details, "command_id": cmd["id"], "outcome": "unknown"},
                ) from error
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

    def _unsynced(self) -> bool:
        """This clone has commands the arbiter has not seen (its local tip is not on the last known remote
        tip). The inbox carries one document, decided on the arbiter's state alone; a command that needs
        them (the claim of an item made here, ``queue-add`` of a session started here) would be refused
        there. So such a command takes the compare-and-swap path, whose chain carries them (``rebuild``)."""
        local = self.store.tip()
        if local is None:
            return False
        remote = self.known_remote_tip()
        return remote is None or (local != remote and not self._reaches(remote, local, limit=64))


class Round:
    """What one round of :class:`ArbiterRef` (one attempt of :func:`engine.run`) knows: made when the
    round begins, dropped when the next one does, so nothing of a lost round leaks into the next."""

    __slots__ = ("attempt", "carried", "declined", "fresh_base", "local", "refused", "top", "turn_began")

    def __init__(self, attempt: int) -> None:
        self.attempt = attempt
        self.turn_began = False  # the turn was taken (or waiting for it given up) as the round began
        self.local: str | None = None  # the exact local tip this round's chain was built on
        self.refused: list[dict[str, Any]] = []  # what the replay under the chain refused
        self.fresh_base: Snapshot | None = None  # the base, when built on a view fetched for this round
        self.carried: list[tuple[Carried, Applied]] = []  # what this round's chain carries
        self.declined: list[tuple[Carried, GwError]] = []  # what it refused: answered if the chain lands
        self.top: str | None = None  # the top of the chain this round pushed


class ArbiterRef(engine.CAS):
    """The arbiter's CAS for :func:`engine.run`: ``git push --force-with-lease=REF:<old>`` to the remote.

    Each round builds on the last known remote tip plus the local commands it has not seen
    (``rebuild``); a lost race, or a refusal made on a view that may be old, fetches the remote's tip
    and the loop goes to its next round. Once the push lands (or the answer is already there), the
    local ref adopts it, by a CAS against the local tip the chain was built on.

    A herd (many processes claiming at once) costs every loser a push and a fetch per round, and
    only one push lands per round whatever the others asked for. So the processes of one clone take
    turns (:mod:`pushturn`): each round (decide, push, and on a loss the fetch) runs while the
    clone's turn file is held, and a process whose turn comes after a sibling's push or fetch builds
    on the tip that sibling just learned. A process that finds the turn taken as a round begins
    (:meth:`begin`) leaves its command in the clone's queue instead, and the holder carries it: its
    push is a chain of its own commit and one commit per waiting command, so one winning round grants
    every waiting process of the clone. Between rounds a loser fetches and waits a random time
    (:func:`backoff`, shorter for a longer loser) still holding the turn: its siblings' commands ride
    on its next chain, and the other clones' pushers go first. A clone that just won waits longer
    (:func:`after_a_win`).
    """

    def __init__(self, arbiter: Replay, riders: tuple[Rider, ...] = (), seed: str = "") -> None:
        self.arbiter = arbiter
        self.riders = riders
        self.remote = arbiter.known_remote_tip()  # no fetch until something says our view is old
        self.fetched_after: int | None = None  # the round after which the remote's tip was last fetched
        gitwork_dir = arbiter.wp.repo.gitwork_dir()
        self.turn = PushTurn(os.path.join(gitwork_dir, TURN_FILE))
        # Commands pushed together with a branch (publish) go alone: the chain is theirs. Signed state
        # commits go alone too: each process signs its own commits with its own key.
        settings = arbiter.wp.settings
        self.carry = None if riders or settings.signing else Carry(gitwork_dir, _carry_key(settings))
        # The waits are drawn from a sequence seeded by the command id (random per command, so
        # processes differ; a test that fixes the id gets the same waits every run).
        self.draw = random.Random(seed)
        self.round_trip = BACKOFF_UNIT  # what our last push took
        self.round = Round(0)

    @property
    def limit(self) -> int:  # type: ignore[override]
        return replay.MAX_ROUNDS  # read when the loop starts (a test may lower it)

    def submit(self, cmd: dict[str, Any]) -> Applied:
        """Rounds until ``cmd`` is answered (the turn is left to the caller to give back on an error)."""
        return engine.run(self, cmd, self.arbiter.wp.now, self.arbiter.wp.settings)

    # --- a round begins: ours to push, or carried by the sibling whose turn it is ----------------

    def begin(self, cmd: dict[str, Any], attempt: int) -> Applied | None:
        self.round = Round(attempt)
        return self.hand_over(cmd)

    def hand_over(self, cmd: dict[str, Any]) -> Applied | None:
        """When another process of this clone holds the turn, leave ``cmd`` for it to carry and wait
        for its answer. None: go on alone (the turn is free and now ours, the holder did not carry
        it, or waiting is over), with nothing of ``cmd`` left in the queue."""
        if self.carry is None or self.turn.handle is not None:
            return None  # ours alone (a publish, signed commits), or still our turn (a round lost)
        got = self.turn.try_take()
        if got is not False:
            self.round.turn_began = got is True
            return None
        if not self.carry.leave(cmd, self._pinned_time()):
            return None
        try:
            answer = self.carry.wait(self.turn, cmd["id"])
        finally:
            self.carry.withdraw(cmd["id"])
        # No answer: the turn is ours now, or the holder did not move for TURN_WAIT (stopped, paused)
        # and this round goes alone; either way at once, without waiting for the turn again.
        self.round.turn_began = answer is None
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
        refused = unique(self.arbiter.adopt(self.arbiter.store.tip(), self.arbiter.known_remote_tip(),
                                            built_on_local=False))
        return self.arbiter.answer(engine.Applied(command, commit, result, summary, self.round.attempt), refused)

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

    # --- the round: its base, the push, and what follows a win or a loss -------------------------

    def base(self) -> Snapshot:
        r = self.round
        store = self.arbiter.store
        if r.turn_began or self.turn.take():
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
        r.local = store.tip()
        base, _replayed, r.refused = self.arbiter.rebuild(r.local, self.remote)
        snapshot = store.snapshot(base) if base else Snapshot(store, None, None)
        if self.fetched_after is not None and self.fetched_after == r.attempt - 1:
            r.fresh_base = snapshot  # built on the view the last round fetched: its refusals are final
        return snapshot

    def expected(self, base: Snapshot) -> str | None:
        return self.remote

    def again(self, error: GwError) -> bool:
        if self.fetched_after is not None:
            if self.round.fresh_base is not None:
                self._decide_queue(self.round.fresh_base)
            return False
        # Our view of the remote may be old: refuse only on what the remote says now (the next round).
        self.remote, self.fetched_after = self.arbiter.fetch(), self.round.attempt
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
        except Exception:
            pass
        self.carry.answer(entry, {"own": True})
        return None

    def swap(self, old: str | None, new: str) -> bool:
        # (An answer found among local commands the remote has not seen is pushed like a new commit:
        # a command the arbiter decides is done only once it is on the arbiter.)
        r = self.round
        started = time.monotonic()
        top = self._carry_on(new)
        try:
            try:
                won = self.arbiter.push(old, top, self.riders)
            except RemoteRefused as error:
                if top == new:
                    return self._heard(error, old, new)
                # The remote turned the chain down, perhaps for a carried command: each carried
                # command asks for itself, and ours goes alone.
                self._hand_back()
                top = new
                try:
                    won = self.arbiter.push(old, top, self.riders)
                except RemoteRefused as alone:
                    return self._heard(alone, old, new)
            except RemoteError:
                self._hand_back()  # outcome unknown for the chain: each asks (and finds out) itself
                raise
        finally:
            self.round_trip = time.monotonic() - started
        r.top = top if won else None
        if not won:
            r.carried, r.declined = [], []  # still queued: the next holder (maybe us) decides again
        return won

    def _heard(self, error: RemoteRefused, old: str | None, new: str) -> bool:
        """The arbiter refused our chain: for a local command under ours (one the arbiter's own settings
        refuse), its verdict is kept and the round is lost (the next chain leaves that command out,
        :meth:`Replay.heard`); for our own command, the refusal is its answer."""
        if self.arbiter.heard(error, old, new, own=new):
            self.round.top = None
            return False
        raise error

    def _carry_on(self, new: str) -> str:
        """Lay the commands waiting in the clone's queue on top of ``new``, one commit each; the top.

        Each is decided as its own process would decide it on the chain (:meth:`_decide`); a refusal
        is its answer only once the chain has landed (``declined``, answered by :meth:`landed`).
        """
        r = self.round
        r.carried, r.declined, r.top = [], [], None
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
                r.declined.append((entry, decided))  # the arbiter's verdict once the chain lands
                continue
            cmd, at, outcome = decided
            commit = engine.land(store, top, cmd, outcome, at)
            if commit:
                top = store.snapshot(commit)
            r.carried.append((entry, engine.Applied(cmd, top.commit, outcome.result, outcome.summary, 1)))
        assert top.commit is not None
        return top.commit

    def _hand_back(self) -> None:
        r = self.round
        assert self.carry is not None or not (r.carried or r.declined)
        for entry in [entry for entry, _ in r.carried] + [entry for entry, _ in r.declined]:
            self.carry.answer(entry, {"own": True})  # type: ignore[union-attr]
        r.carried, r.declined = [], []

    def lost(self, attempt: int) -> None:
        # The push was made on a tip that is gone: fetch the new one and, after a random while (the
        # other clones' pushers go first), the next round pushes again, keeping the turn: the clone's
        # waiting commands stay queued and ride on our next chain, so handing the turn to a sibling
        # would only add the time it takes to pick it up.
        self.turn.mark_lost()
        self.remote, self.fetched_after = self.arbiter.fetch(), attempt
        time.sleep(backoff(attempt, self.round_trip, self.draw))

    def landed(self, applied: Applied, moved: bool) -> Applied:
        # Pushed, or nothing to push (done before: the same id answered with its first result, from
        # what the remote holds): either way it becomes local, as after a pull.
        r = self.round
        top = (r.top or applied.commit) if moved else applied.commit
        if moved:
            assert top is not None
            self.turn.mark_won(top, self.round_trip, len(r.carried))
        # Adopted before the carried commands are answered: a waiter that reads its answer finds its
        # command in the local ref already (and has nothing to adopt itself). ``top`` was built on
        # exactly ``r.local``: the adoption is a CAS from that tip, replaying whatever landed since.
        refused = unique(r.refused + self.arbiter.adopt(r.local, top))
        for entry, done in r.carried if moved else ():
            assert self.carry is not None
            self.carry.answer(entry, {"command": done.command, "commit": done.commit, "result": done.result,
                                      "summary": done.summary})
        for entry, refusal in r.declined if moved else ():
            assert self.carry is not None
            self.carry.answer(entry, {"error": refusal.to_json()})  # decided on what the arbiter now holds
        r.carried, r.declined = [], []
        self.turn.give()
        return self.arbiter.answer(applied, refused)

    def gave_up(self) -> GwError:
        return engine.gave_up(replay.MAX_ROUNDS, self.arbiter.remote)


# --- the back-off policy ------------------------------------------------------------------------------


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
    from ..commands import _cmd_id

    _cmd_id(command_id, "command id")  # names a file: only the characters a command id may have
    return os.path.join(wp.repo.gitwork_dir(), "unknown", f"{command_id}.json")


def remember_unknown(wp: Workplane, cmd: dict[str, Any]) -> None:
    """Keep the document of a command whose outcome is unknown, for ``gw retry``."""
    path = _unknown_path(wp, cmd["id"])
    os.makedirs(os.path.dirname(path), exist_ok=True)
    from ..fsutil import write_atomic

    write_atomic(path, json.dumps(cmd, ensure_ascii=False, sort_keys=True), fsync=False)


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


