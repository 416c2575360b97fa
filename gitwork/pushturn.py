"""One clone's turn to push to the arbiter, and the commands its waiting processes leave for it.

Every command the arbiter decides is a compare-and-swap of the remote's one state ref, so one push
lands per round whatever the others asked for. When many processes of one clone claim at once (a
shell loop per agent, a herd), the clone gains nothing from pushing once per process: they take
turns (:class:`PushTurn`, a ``flock`` the kernel drops with the process), and a process that finds
the turn taken leaves its command document in the clone's queue (:class:`Carry`) before it waits.
The process holding the turn lays the queued commands on top of its own, one commit each, in the
same chain, and pushes the chain once: a round of the herd grants one command per *waiting process
of the clone*, not one per clone. It then writes each carried command's answer beside it; the
waiting process prints it as its own.

Nothing here is needed for safety. The remote's CAS decides every round, every command keeps its
own id and its own commit (``git log`` shows one commit per command, by the identity that asked),
and a command id that already landed is answered from its record and never applied twice. So a
holder killed after its push, a waiter killed while queued, or a holder paused past ``TURN_WAIT``
costs time, not correctness: whoever takes the turn next finds what landed (or not) on the remote.

Files, all in ``<git common dir>/gitwork/``: ``arbiter-turn.lock`` (the turn; its content is the
clone's last winning tip, that push's round trip and how contended the clone is) and
``arbiter-queue/<command id>.json`` / ``<command id>.answer`` (a waiting command and its answer).
"""

from __future__ import annotations

import json
import os
import re
import time

from .fsutil import write_atomic
from .stalelocks import pid_exists

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

TURN_FILE = "arbiter-turn.lock"
QUEUE_DIR = "arbiter-queue"
# A turn is an optimisation, never needed for safety (the remote's CAS decides): a process that
# cannot get it within this many seconds (a sibling stopped with SIGSTOP mid-push) pushes anyway.
TURN_WAIT = 5.0
# Bounds on what a holder carries: how many commands in one chain, and how large a document may be
# to be left in the queue at all (bigger ones, an import batch say, push on their own).
CARRY_MOST = 16
CARRY_BYTES = 256 * 1024
# Seconds between a waiting process's looks at its answer (and at the turn), growing to ANSWER_POLL_MOST
# as the wait grows: forty waiters of a herd looking every 10 ms for 20 s cost more CPU than their grants.
ANSWER_POLL = 0.01
ANSWER_POLL_MOST = 0.05
# An answer nobody collected (its process died while waiting) is removed after this many seconds.
ANSWER_KEPT = 600.0
# A command id as the engine accepts it (commands._cmd_id): it names the queue's files, so nothing else does.
_COMMAND_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.:-]{3,63}")
BACKOFF_UNIT = 0.05
BACKOFF_CAP = 1.0


class PushTurn:
    """The clone's turn to push to the arbiter, taken by at most one process of the clone at a time.

    ``take`` is idempotent within a process (True only when the turn was not held), ``give`` lets
    the next process go. Waiting is bounded by ``TURN_WAIT``; a process that gives up waiting goes
    on without the turn (and says so by returning True: it builds on a fresh view all the same).
    """

    def __init__(self, path: str) -> None:
        self.path = path
        self.handle: int | None = None
        self.waited = 0.0  # seconds this command has waited for turns so far

    def try_take(self) -> bool | None:
        """Take the turn if it is free now: True when taken, False when another process holds it,
        None when there is no turn to take (no place for the file: a read-only repository)."""
        import fcntl

        if self.handle is not None:
            return True
        try:
            handle = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o666)
        except OSError:
            return None
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(handle)
            return False
        self.handle = handle
        return True

    def take(self) -> bool:
        if self.handle is not None:
            return False
        started = time.monotonic()
        while True:
            got = self.try_take()
            if got is not False:
                self.waited += time.monotonic() - started
                return True
            now = time.monotonic()
            if now - started > TURN_WAIT:
                self.waited += now - started
                return True
            time.sleep(self.poll(now - started))

    def poll(self, waiting: float) -> float:
        # flock(2) is not first come, first served: whoever asks first after the release gets it. A
        # command that has waited long in all asks more often (measured: with a fixed pause one
        # process of a clone went 26 s without a turn while fresh ones got it).
        return max(0.001, 0.02 / (1 + (self.waited + waiting) / 0.25))

    # The turn file holds "<tip> <round trip> <losses> <herd>": the remote tip this clone's last winning
    # push made, what that push took, how contended the clone is against other clones (each lost round
    # adds 2, each win takes 1 off, at most 8), and how many commands that push carried (its own herd).
    # Read and written only by the process holding the turn.

    def _read(self) -> tuple[str, float, int, int]:
        assert self.handle is not None
        fields = os.pread(self.handle, 100, 0).decode("ascii", "replace").split()
        try:
            return (fields[0], min(max(float(fields[1]), BACKOFF_UNIT), BACKOFF_CAP), min(max(int(fields[2]), 0), 8),
                    min(max(int(fields[3]), 0), CARRY_MOST))
        except (IndexError, ValueError):
            return "-", BACKOFF_UNIT, 0, 0

    def _write(self, tip: str, round_trip: float, losses: int, herd: int) -> None:
        assert self.handle is not None
        os.ftruncate(self.handle, 0)
        os.pwrite(self.handle, f"{tip} {round_trip:.3f} {losses} {herd}".encode("ascii"), 0)

    def mark_lost(self) -> None:
        if self.handle is not None:
            tip, round_trip, losses, herd = self._read()
            self._write(tip, round_trip, min(losses + 2, 8), herd)

    def mark_won(self, tip: str, round_trip: float, carried: int) -> None:
        """Note that this clone's push made ``tip`` (and took ``round_trip``, carrying ``carried``)."""
        if self.handle is not None:
            self._write(tip, round_trip, max(self._read()[2] - 1, 0), carried)

    def won_by_sibling(self, tip: str | None) -> tuple[float, bool] | None:
        """``(round trip, herd)`` of this clone's push that made ``tip`` (the remote tip we know), when
        others may be waiting for their turn on the remote: this clone lost rounds lately, or is itself
        a herd (``herd``: that push carried waiting commands, so other clones' herds are likely too).
        ``None`` otherwise (one process claiming alone): no reason to wait."""
        if self.handle is None or tip is None:
            return None
        last, round_trip, losses, herd = self._read()
        return (round_trip, herd > 0) if last == tip and (losses > 0 or herd > 0) else None

    def idle(self) -> float:
        """Seconds since a holder last wrote the turn file (a round lost or won)."""
        try:
            return time.time() - os.stat(self.path).st_mtime
        except OSError:
            return float("inf")

    def give(self) -> None:
        if self.handle is not None:
            os.close(self.handle)  # closing the only descriptor releases the flock
            self.handle = None


class Carried:
    """A command another process of the clone left in the queue for the turn holder to carry."""

    def __init__(self, path: str, cmd: dict[str, Any], at: str | None) -> None:
        self.path = path
        self.cmd = cmd
        self.at = at  # the waiter's pinned clock (GW_NOW, an injected clock), or None: the holder's time


class Carry:
    """The clone's queue of commands waiting for the turn (``<gitwork dir>/arbiter-queue/``).

    ``key`` names what a carried command's outcome depends on besides its document and the state:
    the settings the engine reads (``GW_*`` variables may differ between processes of one clone) and
    the host (a process id means something only there). A holder carries only commands left under
    its own key, so a carried command is decided exactly as its own process would have decided it.
    """

    def __init__(self, gitwork_dir: str, key: str) -> None:
        self.dir = os.path.join(gitwork_dir, QUEUE_DIR)
        self.key = f"{os.uname().nodename} {key}"

    def _path(self, command_id: str, suffix: str) -> str:
        return os.path.join(self.dir, command_id + suffix)  # ids are checked: letters, digits, '-', '_', '.'

    # --- the waiting process ----------------------------------------------------------------------

    def leave(self, cmd: dict[str, Any], at: str | None) -> bool:
        """Put ``cmd`` in the queue (written whole, then renamed into place); False if it cannot be."""
        text = json.dumps({"key": self.key, "pid": os.getpid(), "at": at, "cmd": cmd}, ensure_ascii=False)
        if len(text) > CARRY_BYTES:
            return False
        try:
            os.makedirs(self.dir, exist_ok=True)
            write_atomic(self._path(cmd["id"], ".json"), text, fsync=False)
        except OSError:
            return False
        return True

    def collect(self, command_id: str) -> dict[str, Any] | None:
        """The answer the holder left for ``command_id`` (removed once read), or None."""
        path = self._path(command_id, ".answer")
        try:
            with open(path, encoding="utf-8") as handle:
                text = handle.read(4 * CARRY_BYTES + 1)
        except OSError:
            return None
        self._unlink(path)
        try:
            answer = json.loads(text)
        except (ValueError, RecursionError):
            return None
        return answer if isinstance(answer, dict) else None

    def withdraw(self, command_id: str) -> None:
        self._unlink(self._path(command_id, ".json"))

    def wait(self, turn: PushTurn, command_id: str) -> dict[str, Any] | None:
        """Wait until the holder answers ``command_id`` or the turn is ours (or waiting is over).

        Returns the answer, or None with the turn held (or not to be had): the caller goes on
        alone, and its entry is withdrawn first so that no later holder carries it as well.
        """
        started = time.monotonic()
        while True:
            answer = self.collect(command_id)
            if answer is not None:
                return answer
            got = turn.try_take()
            if got is not False:
                # The holder may have answered just before it let go of the turn.
                answer = self.collect(command_id)
                if answer is not None:
                    turn.give()
                    return answer
                self.withdraw(command_id)
                return None
            waited = time.monotonic() - started
            if waited > TURN_WAIT and turn.idle() > TURN_WAIT:
                # The holder has not lost or won a round for TURN_WAIT (stopped, paused): go alone. A
                # holder losing round after round to other clones still carries us: keep waiting.
                self.withdraw(command_id)
                turn.waited += waited
                return None
            # A waiter needs the answer, not the turn (the holder carries it either way): a steady
            # pace is enough, and twelve waiters asking every millisecond cost a core between them.
            time.sleep(min(ANSWER_POLL * (1 + waited), ANSWER_POLL_MOST))

    # --- the holder ---------------------------------------------------------------------------------

    def pending(self, most: int = CARRY_MOST) -> list[Carried]:
        """The commands waiting under this holder's key, oldest first (at most ``most``).

        Entries of processes that are gone are removed (their command was never answered: as a
        process killed before its push, it did not happen); so are answers nobody collected.
        """
        try:
            names = os.listdir(self.dir)
        except OSError:
            return []
        entries: list[tuple[float, Carried]] = []
        now = time.time()
        for name in names:
            path = os.path.join(self.dir, name)
            if name.endswith(".answer"):
                try:
                    if now - os.stat(path).st_mtime > ANSWER_KEPT:
                        self._unlink(path)
                except OSError:
                    pass
                continue
            if not name.endswith(".json") or name.startswith("."):
                continue
            try:
                with open(path, encoding="utf-8") as handle:
                    text = handle.read(CARRY_BYTES + 1)
                since = os.stat(path).st_mtime
            except OSError:
                continue
            try:
                entry = json.loads(text)
            except (ValueError, RecursionError):
                entry = None  # written whole and renamed into place: unreadable means not ours
            cmd = entry.get("cmd") if isinstance(entry, dict) else None
            if not isinstance(cmd, dict) or cmd.get("id") != name[:-5] or not _COMMAND_ID.fullmatch(name[:-5]):
                self._unlink(path)
                continue
            if entry.get("key") != self.key:
                continue  # another host's or another configuration's: its own kind of holder carries it
            pid = entry.get("pid")
            if not isinstance(pid, int) or not pid_exists(pid):
                self._unlink(path)
                continue
            at = entry.get("at")
            entries.append((since, Carried(path, cmd, at if isinstance(at, str) else None)))
        entries.sort(key=lambda pair: pair[0])
        return [carried for _, carried in entries[:most]]

    def answer(self, carried: Carried, answer: dict[str, Any]) -> None:
        """Leave ``answer`` for the process that queued ``carried`` (written whole, then renamed)."""
        command_id = str(carried.cmd.get("id"))
        final = self._path(command_id, ".answer")
        try:
            write_atomic(final, json.dumps(answer, ensure_ascii=False), fsync=False)
        except OSError:
            pass  # it will find nothing, take the turn and ask for itself
        self._unlink(carried.path)

    @staticmethod
    def _unlink(path: str) -> None:
        try:
            os.unlink(path)
        except OSError:
            pass
