"""``gw coordinate``: keep this host's executions and their leases in step (docs/launch.md).

Each tick, for every live execution recorded on this host:

- it is brought up to date with its backend (``run.probe``): an exit is recorded, a process that is
  gone is ``lost``;
- a running one whose lease ended (taken over, revoked, released, handed off, expired, or a newer
  epoch) is killed and recorded ``stopped``: the fence rule applied to processes;
- a running one someone asked to stop (op ``exec-stop``, e.g. from the board) is killed and recorded
  ``stopped`` with that request's reason;
- a running one whose lease is live is renewed, as its holder and under its fence, once less than
  half of the lease's ttl is left (so an interval well under half the ttl never lets it lapse);
- an execution that cannot be reconciled (its backend errs) ``failures`` passes in a row has its
  item handed off, fenced on its lease, with reason ``reconcile-failure``;
- an execution another gitwork build launched is left alone (``refused``, ``build-mismatch``);
- each pass also reconciles the item (a closed one stops its execution) and the session branches of
  the execution's lease (an open session whose branch is gone is a reconcile failure);
- an execution of a multi-step session's branch whose session ended (stopped, done) is stopped;
- then it drives this repository's multi-step sessions (docs/sessions.md), as their holder while the
  holder's lease is live: a branch whose operator ended without a response is blocked with the
  reason (one that left a response has it submitted), what is due is recorded, and each open agent
  branch is launched (``gw step next --launch``: every branch in its own lane, so parallel branches
  run at once under the session's one lease, and each once);
- and it checks what items wait on (gitwork/gates.py): a ref reachable from another, a command's exit
  (only the commands this repository's ``.workplane`` allows), recording each outcome as a command.

The coordinator itself is single per host: it holds the lease ``coordinators/<host>.yaml`` (op
``coord-lease``), checked before every execution it acts on and renewed once half of its ttl is
gone. A second coordinator is refused (75) while that lease binds; a dead one's (its process gone on
this host) is taken over at once, a paused one's once it expires, and the paused one, resumed, finds
its lease taken over (7) and stops before it acts.
"""

from __future__ import annotations

import contextlib
import os
import time

from ..errors import GwError, Invalid, Stale
from ..records.executions import LIVE, coordinator_live, load_coordinator
from . import backend as backends
from .build import BuildMismatch
from .build import current as current_build
from .paths import clone_id, executions_dir
from .run import _handle_of, _kill_survivors, _mark, find, host, host_name, launcher_alive, me, ours, probe, runs

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

    from ..workplane import Workplane


def _lease_ended(wp: Workplane, record: dict[str, Any]) -> str | None:
    """Why the execution's lease is over, or None while it is live for its holder."""
    return _ended(wp.lease(record["item"]), record, wp)


def _ended(lease: Any, record: dict[str, Any], wp: Workplane) -> str | None:
    if lease is None or lease.fence != record.get("fence"):
        return f"its lease (fence {record.get('fence')}) was replaced" + (f" by {lease.holder}'s (fence {lease.fence})"
                                                                         if lease else "")
    if not lease.is_active():
        return f"its lease was {lease.state}"
    if not lease.live_for_holder(wp.now(), wp.settings.clock_margin):
        return "its lease expired"
    return None


def _stop_asked(record: dict[str, Any]) -> str | None:
    """Why an execution must stop because someone asked (op ``exec-stop``: the board's Stop)."""
    asked = record.get("stop_requested")
    return f"stop asked by {asked.get('by')}: {asked.get('reason')}" if isinstance(asked, dict) else None


class Reconcile:
    """What a pass compares besides the backend: the item's state and its session branches (read once
    per pass). A closed item ends its execution like an ended lease; an open session of the
    execution's lease whose branch is gone is a reconcile failure (it counts toward the hand-off)."""

    def __init__(self, wp: Workplane) -> None:
        self.wp = wp
        self._sessions: list[Any] | None = None
        self._branches: set[str] | None = None

    def session_ended(self, record: dict[str, Any]) -> str | None:
        """Why a session branch's execution must stop: its multi-step session ended (stopped, done)."""
        session = record.get("session")
        if not session or not record.get("branch"):
            return None
        from ..records.sessions import recorded_manifest

        manifest = recorded_manifest(self.wp.context(), session)
        if manifest is not None and manifest.get("status") in ("stopped", "done"):
            return f"its session {session} is {manifest['status']}"
        return None

    def item_closed(self, record: dict[str, Any]) -> str | None:
        from ..model import CLOSED

        status = self.wp.context().item(record["item"]).status  # a corrupt item raises: a failure
        return f"its item is {status}" if status in CLOSED else None

    def check_sessions(self, record: dict[str, Any]) -> None:
        from ..sessions import OPEN_STATES, all_sessions, main_worktree

        if self._sessions is None:
            self._sessions = all_sessions(main_worktree(self.wp.repo))
        mine = [s for s in self._sessions if s.get("item") == record["item"] and s.get("fence") == record.get("fence")
                and s.get("state") in OPEN_STATES]
        if not mine:
            return
        if self._branches is None:
            from ..gitcmd import run

            listed = run(["-C", self.wp.repo.common_dir, "for-each-ref", "--format=%(refname)", "refs/heads/session/"])
            self._branches = set(listed.out.split())
        for session in mine:
            if session.ref not in self._branches:
                raise Invalid(f"session {session.id} of {record['item']} has lost its branch {session.branch}",
                              session=session.id)


def _kill(wp: Workplane, record: dict[str, Any], why: str) -> dict[str, Any]:
    backend = backends.get(record["backend"], wp.repo, wp.settings)
    handle = record.get("handle") or _handle_of(backend, record["id"])
    if handle:
        backend.kill(record["id"], handle)
    # What the handle did not reach, by process group, as ``gw stop`` does: tmux's kill-session only hangs
    # up the pane, and an agent that ignores SIGHUP ran on under a record saying ``stopped``.
    _kill_survivors(wp, record["id"])
    return _mark(wp, record, "stopped", reason=f"coordinator: {why}"[:200])


def _streak(wp: Workplane, execution_id: str, failed: bool) -> int:
    """Consecutive reconcile failures of an execution, kept in its folder so ``--once`` runs count too."""
    path = os.path.join(executions_dir(wp.repo), execution_id, "reconcile-failures")
    if not failed:
        if os.path.exists(path):
            os.unlink(path)
        return 0
    try:
        with open(path) as read:
            count = int(read.read().strip() or 0) + 1
    except (FileNotFoundError, ValueError):
        count = 1
    os.makedirs(os.path.dirname(path), exist_ok=True)
    from ..fsutil import write_atomic

    write_atomic(path, f"{count}\n", fsync=False)
    return count


def _hand_off(wp: Workplane, record: dict[str, Any], why: str) -> dict[str, Any]:
    """A streak of failures: hand the item off, fenced on the execution's lease (a newer lease is not
    touched: the fence is stale then), so another worker may take it at once."""
    holder: Any = record.get("holder")
    wp.do("handoff", item=record["item"], reason="reconcile-failure", fence=record.get("fence"),
          message=f"coordinator on {host()}: execution {record['id']} could not be reconciled: {why}"[:500],
          **{"as": holder})
    try:  # the lease is gone now: stop the process if the backend lets us (else the next pass does)
        _kill(wp, record, "reconcile-failure handoff")
    except GwError:
        pass
    return {"action": "handed-off", "reason": why}


class CoordinatorLease:
    """This process's lease on ``coordinators/<host>``: the one coordinator of this host."""

    def __init__(self, wp: Workplane, ttl: int) -> None:
        self.wp, self.ttl, self.host, self.clone = wp, ttl, host_name(), clone_id(wp.repo)
        self.holder = me()
        self.epoch: int | None = None

    def _record(self, action: str, **extra: Any) -> dict[str, Any]:
        return self.wp.record("coord-lease", host=self.host, clone=self.clone, action=action, holder=self.holder,
                              ttl=self.ttl, build=current_build(), **extra).result

    def take(self) -> None:
        """Take it, or raise Held (75) naming the coordinator that runs. A holder whose process is gone
        from this host is taken over at once; any other only once its lease has expired."""
        record = load_coordinator(self.wp.context(), self.host, self.clone)
        over = None
        if record is not None and coordinator_live(record, self.wp.now()) and not launcher_alive({"launcher": record.get("holder")}):
            over = record.get("epoch")  # killed (kill -9, a crash): its lease would only delay the next one
        self.epoch = self._record("take", over=over)["epoch"]

    def keep(self) -> None:
        """Before acting: raise Stale (7) if another coordinator took the lease over; renew it when half
        of its ttl is gone. A paused coordinator, resumed, learns here that it must stop."""
        record = load_coordinator(self.wp.context(), self.host, self.clone)
        if record is None or record.get("epoch") != self.epoch or record.get("holder") != self.holder \
                or record.get("state") == "released":
            held = (record or {}).get("holder") or {}
            raise Stale(f"this coordinator's lease on {self.host} (epoch {self.epoch}) was taken over"
                        + (f" by pid {held.get('pid')} (epoch {record.get('epoch')})" if record else "")
                        + "; stopping", host=self.host)
        from ..clock import parse_instant

        left = (parse_instant(str(record["expires_at"])) - self.wp.now()).total_seconds()
        if left < self.ttl / 2:
            self._record("renew", epoch=self.epoch)

    def release(self) -> None:
        if self.epoch is not None:
            try:
                self._record("release", epoch=self.epoch)
            except GwError:
                pass  # taken over meanwhile: nothing of ours to release
            self.epoch = None


def tick(wp: Workplane, failures: int = 3, coordinator: CoordinatorLease | None = None) -> list[dict[str, Any]]:
    """One pass over this host's live executions; what was done to each (``action``: exited, lost,
    failed, stopped, renewed, running, waiting, error, handed-off, refused). ``failures`` consecutive
    errors reconciling one execution hand its item off with reason ``reconcile-failure``. With
    ``coordinator``, its lease is checked (and renewed) before each execution: Stale once another
    coordinator has it."""
    # The pass's own read and push of the arbiter wait a quarter of the coordinator's ttl at most, not the
    # 120 s a command waits: a silent arbiter (paused, a half-open connection) stalled each pass twice that
    # long before it checked its lease, long enough to lose it and its agents' leases (attack12). The pass
    # then goes on with the local view (``fetch-error``) and pushes its ends on a later pass.
    bound = max(1.0, coordinator.ttl / 4) if coordinator is not None else None
    arbiter = ArbiterView(wp, bound)
    done: list[dict[str, Any]] = [arbiter.problem] if arbiter.problem else []
    if coordinator is not None:
        coordinator.keep()
    kinds: dict[str, Any] = {}
    checks = Reconcile(wp)

    def backend_for(kind: str) -> Any:
        """One backend of each kind per pass, asked once up front where it can be (tmux: one call
        for every pane instead of one per execution)."""
        if kind not in kinds:
            backend = backends.get(kind, wp.repo, wp.settings)
            if hasattr(backend, "prefetch"):
                backend.prefetch()
            kinds[kind] = backend
        return kinds[kind]

    owed = os.path.join(wp.repo.gitwork_dir(), UNPUSHED) if wp.settings.remote else None
    owing = owed is not None and os.path.exists(owed)  # an end an earlier pass (maybe killed) did not push
    armed = False
    for row in runs(wp):
        if row["state"] not in LIVE or not ours(wp, row):
            continue  # another host's or another clone's: judged only by the gw that started it
        if owed is not None and not owing and not armed:
            # This pass may record an end: the marker says so before it does, so a pass killed before its
            # push (kill -9, a reboot) leaves it for the next pass, which then pushes (publish_ends).
            from ..fsutil import write_atomic

            write_atomic(owed, b"", fsync=False)
            armed = True
        record = find(wp, row["execution"]) or {}  # whole (a listed row lacks the launcher probe needs)
        entry = {"execution": record["id"], "item": record["item"]}
        if coordinator is not None:
            coordinator.keep()
        try:
            record = probe(wp, record, backend_for(record["backend"]))
            if record["state"] != "running":
                done.append({**entry, "action": record["state"] if record["state"] not in LIVE else "waiting",
                             "code": record.get("code")})
                continue
            why = (_stop_asked(record) or _lease_ended(wp, record) or arbiter.why(wp, record)
                   or checks.item_closed(record) or checks.session_ended(record))
            if why:
                _kill(wp, record, why)
                done.append({**entry, "action": "stopped", "reason": why})
                continue
            checks.check_sessions(record)
            lease = wp.lease(record["item"])
            assert lease is not None  # _lease_ended above: the lease is there and live
            left = (lease.expires() - wp.now()).total_seconds()
            if left < lease.ttl / 2:
                renewal = wp.do("renew", item=record["item"], fence=record["fence"], **{"as": record["holder"]})
                done.append({**entry, "action": "renewed"})
                # The renewal carried this clone's local commands; what the arbiter refused of them is recorded
                # as reported (the next gw sync exits 0 about it): the pass says it, as for its push of ends.
                done += _said((renewal.result or {}).get("refused") or [])
            else:
                done.append({**entry, "action": "running"})
        except BuildMismatch as error:  # not ours to judge: the build that launched it must
            done.append({**entry, "action": "refused", "error": error.kind, "message": error.message})
            continue
        except GwError as error:
            if error.code == 7 and record.get("state") == "running":  # the renewal found the lease gone
                _kill(wp, record, error.message)
                done.append({**entry, "action": "stopped", "reason": error.message})
                continue
            streak = _streak(wp, record["id"], True)
            if streak >= failures and record.get("fence") is not None:
                try:
                    done.append({**entry, **_hand_off(wp, record, error.message), "streak": streak})
                    continue
                except GwError as refused:  # the lease ended meanwhile: nothing to hand off
                    error = refused
            done.append({**entry, "action": "error", "error": error.kind, "message": error.message, "streak": streak})
            continue
        _streak(wp, record["id"], False)
    done += publish_ends(wp, done, owing, bound)
    done += drive_sessions(wp, coordinator, arbiter)
    done += check_waits(wp, coordinator)
    return done


class ArbiterView:
    """What the arbiter holds, fetched once per pass (with an arbiter remote): a revoke, a hand-off or an
    ``exec-stop`` made elsewhere (the board, another clone) is on the arbiter, and a pass that read only
    the local ref let the agent run on until something else made this clone fetch (a renewal, due only
    once half the ttl is gone, and which succeeds after an ``exec-stop``). Read beside the local ref, never
    adopted into it: a pass replays nothing (an idle coordinator's own records accumulate unpushed)."""

    def __init__(self, wp: Workplane, timeout: float | None = None) -> None:
        self.view: Any = None
        self.problem: dict[str, Any] | None = None
        if not wp.settings.remote:
            return
        from .. import engine
        from ..sync import Arbiter

        try:
            tip = _bounded(Arbiter(wp), timeout).fetch()
            if tip is not None:
                snapshot = wp.store.snapshot(tip)
                snapshot.check_format()
                self.view = engine.View(snapshot, wp.now(), wp.settings)
        except GwError as error:  # unreachable, a lock held for good, a state that does not read
            self.problem = {"action": "fetch-error", "error": error.kind, "message": error.message}

    def why(self, wp: Workplane, record: dict[str, Any]) -> str | None:
        """Why the arbiter says the execution must stop (its stop asked there, or its lease ended there)."""
        if self.view is None:
            return None
        from ..records.executions import load_execution

        try:
            there = load_execution(self.view, record["id"])
            lease = self.view.lease(record["item"])
        except GwError:
            return None  # the arbiter's copy does not read: the local view decides
        if there is None:
            # Not on the arbiter as fetched: launched after this pass's fetch (its exec-reserve is decided
            # there), so that state is older than the launch and its lease says nothing of it (it read
            # "replaced", and the pass killed the agent it had just seen launched).
            return None
        return _stop_asked(there) or self._judged(lease, record.get("fence"), record, wp)

    @staticmethod
    def _judged(lease: Any, fence: Any, record: dict[str, Any], wp: Workplane) -> str | None:
        """:func:`_ended` by the arbiter's lease, unless the fetched state is older than the local lease
        (no lease there yet, or an earlier fence): then the local view decides."""
        if lease is None or (isinstance(fence, int) and isinstance(lease.fence, int) and lease.fence < fence):
            return None
        return _ended(lease, record, wp)

    def lease_ended(self, wp: Workplane, item: str, fence: int) -> str | None:
        """Why the arbiter no longer holds the lease under ``fence`` on ``item`` live (a revoke there)."""
        if self.view is None:
            return None
        try:
            lease = self.view.lease(item)
        except GwError:
            return None
        return self._judged(lease, fence, {"fence": fence}, wp)


ENDS = ("stopped", "exited", "failed", "lost")
UNPUSHED = "coordinator-ends-unpushed"


def _bounded(arbiter: Any, timeout: float | None) -> Any:
    """``arbiter`` waiting ``timeout`` seconds at most for a silent remote (None: a command's wait)."""
    if timeout is not None:
        arbiter.timeout = timeout
    return arbiter


def publish_ends(wp: Workplane, done: list[dict[str, Any]], owing: bool | None = None,
                 timeout: float | None = None) -> list[dict[str, Any]]:
    """With an arbiter remote, push the ends this pass recorded (``gw sync``). An execution's end is a
    local record, and the arbiter decides the next launch of the item on any clone (``exec-reserve``):
    while it still saw the execution live, every ``gw run`` of the item elsewhere was refused (75), after
    a revoke from the board too, for as long as nothing in this clone pushed. (Every command the arbiter
    decides pushes this clone's local commands as well: the coordinator's renewals already did.)"""
    if not wp.settings.remote:
        return []
    owed = os.path.join(wp.repo.gitwork_dir(), UNPUSHED)  # an end an earlier pass could not push
    if owing is None:
        owing = os.path.exists(owed)
    if not any(entry.get("action") in ENDS for entry in done) and not owing:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(owed)  # set by this pass before it looked at its executions: no end recorded
        return []
    from ..fsutil import write_atomic
    from ..sync import Arbiter

    try:
        report = _bounded(Arbiter(wp), timeout).sync()
    except GwError as error:
        write_atomic(owed, b"", fsync=False)  # the next pass pushes again, even with no end of its own
        return [{"action": "sync-error", "error": error.kind, "message": error.message}]
    if os.path.exists(owed):
        os.unlink(owed)
    return _said(report["refused"])


def _said(refused: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One ``sync-refused`` action per local command the arbiter refused under this pass's push or renewal."""
    return [{"action": "sync-refused", "item": entry.get("item"), "error": entry.get("error"),
             "message": f"{entry.get('command_id')} ({entry.get('op')}): {entry.get('message')}"}
            for entry in refused]


def check_waits(wp: Workplane, coordinator: CoordinatorLease | None = None) -> list[dict[str, Any]]:
    """The pass over items' ref and command waits (gitwork/gates.py), each entry marked ``wait``; an error
    reading them is reported, never the end of the pass (the executions above were looked after)."""
    from ..gates import check

    try:
        return [{**entry, "action": f"wait-{entry['action']}"} for entry in
                check(wp, coordinator.keep if coordinator is not None else None)]
    except Stale:
        raise  # our own lease taken over: stop, as everywhere in the pass
    except GwError as error:
        return [{"action": "wait-error", "error": error.kind, "message": error.message}]


def drive_sessions(wp: Workplane, coordinator: CoordinatorLease | None = None,
                   arbiter: ArbiterView | None = None) -> list[dict[str, Any]]:
    """One pass over this repository's running (and blocked) multi-step sessions whose folder is here:
    as each one's holder, under the holder's live lease (a session whose lease ended is left alone:
    its executions are stopped by the lease rule above), what ``gw step next --launch`` does. What was
    done: ``launched`` (a branch's operator started), ``blocked``/``submitted`` (a branch whose
    operator ended), ``error``."""
    from ..sessions.steps import next_step, read_sessions

    done: list[dict[str, Any]] = []
    planes: dict[str, Any] = {}
    try:
        rows = read_sessions(wp)
    except GwError as error:  # an unreadable record: the executions above were still looked after
        return [{"action": "error", "error": error.kind, "message": error.message}]
    try:
        for row in rows:
            if row["status"] not in ("running", "blocked") or not row["folder"]:
                continue
            lease = wp.lease(row["item"])
            if lease is None or not lease.is_active() or lease.holder != row["holder"] \
                    or not lease.live_for_holder(wp.now(), wp.settings.clock_margin):
                continue
            entry = {"session": row["session"], "item": row["item"]}
            # Live here, but ended on the arbiter (a revoke from the board): launching would claim the item
            # again for the holder there (exec-reserve claims when the caller holds no lease), undoing it.
            ended = arbiter.lease_ended(wp, row["item"], lease.fence) if arbiter is not None else None
            if ended:
                done.append({**entry, "action": "left", "reason": f"on the arbiter, {ended}"})
                continue
            if coordinator is not None:
                coordinator.keep()
            if row["holder"] not in planes:  # the session's transitions are its holder's, fenced on its lease
                planes[row["holder"]] = type(wp)(wp.repo.toplevel, now=wp.now, agent=row["holder"])
            try:
                info = next_step(planes[row["holder"]], row["session"], launch=True, fence=lease.fence)
            except BuildMismatch as error:
                done.append({**entry, "action": "refused", "error": error.kind, "message": error.message})
                continue
            except GwError as error:
                if error.code == 7 and coordinator is not None:
                    coordinator.keep()  # our own lease taken over: stop (Stale), else the session's lease ended
                done.append({**entry, "action": "error", "error": error.kind, "message": error.message})
                continue
            done += [{**entry, **settled} for settled in info.get("settled", [])]
            done += [{**entry, "branch": b["branch"], "action": "launched", "execution": b["execution"]["execution"]}
                     for b in info["branches"] if b.get("execution") and not b["execution"].get("existing")]
    finally:
        for plane in planes.values():
            plane.close()
    return done


def default_ttl(interval: float) -> int:
    """The coordinator lease's ttl: several passes long, so one slow pass never lets it lapse."""
    return max(30, int(interval * 6))


def once(wp: Workplane, failures: int = 3, ttl: int = 30) -> list[dict[str, Any]]:
    """One pass under the coordinator lease (taken, then released): refused (75) while one runs."""
    lease = CoordinatorLease(wp, ttl)
    lease.take()
    try:
        return tick(wp, failures, lease)
    finally:
        lease.release()


def loop(wp: Workplane, interval: float, report: Any, failures: int = 3, ttl: int | None = None) -> None:
    """Tick every ``interval`` seconds until interrupted, under the coordinator lease (Held, 75, when
    another coordinator has it; Stale, 7, once another took it over); ``report(actions)`` after each."""
    lease = CoordinatorLease(wp, ttl or default_ttl(interval))
    lease.take()
    try:
        while True:
            started = time.monotonic()
            report(tick(wp, failures, lease))
            time.sleep(max(0.0, interval - (time.monotonic() - started)))
    finally:
        lease.release()
