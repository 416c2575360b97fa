"""``gw run``: reserve an execution, take the lease, record, launch (docs/launch.md).

Every step is one record on the state ref, and each can be the last one a killed ``gw run`` made, so
a later ``gw run`` (same id, or same item) first *settles* what it finds before it starts anything:

- ``reserved`` or ``launching`` by a launcher that still runs: its launch is in progress (75);
- ``launching`` or ``running`` whose process the backend still has: it runs (exit 0, ``existing``);
- a process that ended: its exit is recorded; none at all: ``lost``, and the next launch needs a
  new lease epoch (``exec-state`` enforces it), so a lost process that is somehow still alive holds
  a dead fence.

The backend's ``start`` is an atomic create-if-absent on the execution id, so two launchers of one
execution never start two processes; the reservation keeps two executions of one item apart.
"""

from __future__ import annotations

import os

from ..errors import GwError, Held, Illegal, Invalid, NotFound
from ..records.executions import (
    LIVE,
    TERMINAL,
    check_env_names,
    check_execution_id,
    item_executions,
    lane,
    load_execution,
    never_ran,
    same_lane,
)
from ..store import crash_point
from . import backend as backends
from .build import current as current_build
from .build import require_same
from .paths import clone_id, executions_dir
from .process import alive, start_time

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, Sequence

    from ..workplane import Workplane


def host() -> str:
    # The node name (what gethostname returns on POSIX), without importing socket on every launch verb's start.
    return os.uname().nodename.split(".")[0] or "host"


def host_name() -> str:
    """This host as a state-ref name (the coordinator lease's): letters, digits, ``_`` and ``-``."""
    import re

    return re.sub(r"[^A-Za-z0-9_-]", "-", host())[:64].lstrip("-_") or "host"


def ours(wp: Workplane, record: dict[str, Any]) -> bool:
    """Is this execution this host's and this clone's to judge? One recorded before clones were told
    apart (no ``clone``) is its host's, as it always was."""
    return record.get("host") == host() and record.get("clone") in (None, clone_id(wp.repo))


def elsewhere(wp: Workplane, record: dict[str, Any]) -> str:
    """Where an execution that is not ours runs, for an error message."""
    if record.get("host") != host():
        return str(record.get("host"))
    return f"another clone on this host ({record.get('clone')})"


def coordinator_holder(wp: Workplane) -> dict[str, Any] | None:
    """This host's and clone's coordinator lease while it binds and its process lives, else None."""
    from ..records.executions import coordinator_live, load_coordinator

    record = load_coordinator(wp.context(), host_name(), clone_id(wp.repo))
    if not coordinator_live(record, wp.now()):
        return None
    return record if launcher_alive({"launcher": (record or {}).get("holder")}) else None


def mint() -> str:
    return "x-" + os.urandom(8).hex()


def me() -> dict[str, str]:
    pid = os.getpid()
    return {"host": host(), "pid": str(pid), "start": start_time(pid) or "0"}


def launcher_alive(record: dict[str, Any]) -> bool:
    """Is the ``gw run`` that wrote this record still running? (Another host's: assume it is.)"""
    launcher = record.get("launcher") or {}
    if launcher.get("host") != host():
        return True
    try:
        return alive(int(launcher.get("pid", 0)), launcher.get("start"))
    except ValueError:
        return False


def find(wp: Workplane, execution_id: str) -> dict[str, Any] | None:
    return load_execution(wp.context(), execution_id)


def result(record: dict[str, Any], existing: bool) -> dict[str, Any]:
    shown = {k: v for k, v in record.items() if k not in ("id", "launcher")}
    return {"execution": record["id"], **shown, "existing": existing}


def _mark(wp: Workplane, record: dict[str, Any], to: str, **args: Any) -> dict[str, Any]:
    if to in TERMINAL:  # the end carries what the agent's report.json said (docs/launch.md, "The execution ledger")
        from .ledger import exit_report

        args.update(exit_report(os.path.join(executions_dir(wp.repo), record["id"])))
    try:
        applied = wp.record("exec-state", execution=record["id"], to=to, **args)
    except Illegal:
        # Two processes settling one execution (the launcher recording `running`, a concurrent `gw run`
        # of the same item probing it): the one that lost the race finds it already where it was taking
        # it, which is its answer too; any other refusal stands.
        current = load_execution(wp.context(), record["id"])
        if current is None or current.get("state") != to:
            raise
        return {"id": record["id"], **{k: v for k, v in current.items() if k != "id"}}
    return {"id": record["id"], **{k: v for k, v in applied.result.items() if k not in ("execution", "duplicate")}}


def probe(wp: Workplane, record: dict[str, Any], backend: Any = None, orphaned: bool = False) -> dict[str, Any]:
    """Bring a live record up to date with its backend (when its launcher is gone); the new record.
    ``backend``: the record's backend, when the caller has one at hand (the coordinator's pass).
    ``orphaned``: its launcher is this process, which gave up on it (the resident launcher, after a
    request that ended between the reservation and the start): settled as if that launcher were dead."""
    state = record["state"]
    if state not in LIVE or (state != "running" and not orphaned and launcher_alive(record)):
        return record
    if not ours(wp, record):
        return record  # another machine's or clone's process: its own gw (or coordinator) answers for it
    require_same(record.get("build"), f"execution {record['id']} was launched by a gw that", execution=record["id"])
    if state == "reserved":
        # Nothing is started before `launching` is recorded, but a `reserved` record can have lost its
        # later history: a launch whose `launching` and `running` the arbiter refused at replay (another
        # clone ended the lease there first) leaves `reserved` on this clone's ref while its agent runs
        # under the dead fence. Whatever of it runs is killed before it is said lost (issue 24, I2).
        killed = _kill_survivors(wp, record["id"])
        if killed:
            return _mark(wp, record, "lost", reason=f"its launch records never landed; killed {killed} process "
                                                    "group(s) of it that still ran")
        return _mark(wp, record, "lost", reason="launcher died before launching")
    backend = backend or backends.get(record["backend"], wp.repo, wp.settings)
    handle = record.get("handle") or _handle_of(backend, record["id"])
    status, detail = backend.status(record["id"], handle) if handle else ("gone", None)
    if status == "gone":
        # Nothing answers by its handle; something of it may still run (the agent of a wrapper killed
        # alone, a wrapper whose handle was never written): end it before the execution is said lost.
        killed = _kill_survivors(wp, record["id"])
        sweep = getattr(backend, "sweep", None)
        if sweep is not None:
            sweep(record["id"])  # a gated pane its launcher let go and died before it was renamed (tmux.GATED)
        if (state == "launching" and not record.get("handle") and _gated_without_go(wp, record["id"])
                and not _any_trace(wp, record["id"])):
            # Its launcher died with its gated pane waiting (tmux.GATED): no go was written, so no agent
            # could start (the pane, killed above or by itself, started nothing): nothing ran.
            return _mark(wp, record, "failed", reason="its launcher died before it started anything")
        if killed:
            return _mark(wp, record, "lost", reason=f"the backend has no such process; killed {killed} process "
                                                    "group(s) of it that still ran")
        if state == "launching" and not record.get("handle") and not _any_trace(wp, record["id"]):
            # Its launcher died before it started anything (no wrapper ever ran: it writes its handle
            # first): nothing ran, so nothing is lost and no new epoch is needed; a retry under this
            # id (a delegated start's) launches it again.
            return _mark(wp, record, "failed", reason="its launcher died before it started anything")
    if status == "running":
        return record if state == "running" else _mark(wp, record, "running", handle=handle)
    if status == "exited":
        return _mark(wp, record, "exited", code=int(detail), handle=handle)  # type: ignore[arg-type]
    if status == "failed":
        return _mark(wp, record, "failed", reason=str(detail)[:200], handle=handle)
    return _mark(wp, record, "lost", reason="the backend has no such process")


def _handle_of(backend: Any, execution_id: str) -> str | None:
    if backend.kind == "tmux":
        return execution_id
    path = os.path.join(executions_dir(backend.repo), execution_id, "handle")  # written by the wrapper, then start
    try:
        with open(path) as read:
            return read.read().strip()
    except FileNotFoundError:
        return backend.find(execution_id)  # forked, killed before either wrote it: found by its command line


def _any_trace(wp: Workplane, execution_id: str) -> bool:
    """Did a backend ever start a process for this execution here? (The subprocess backend's
    ``started``, or any file a wrapper writes.)"""
    folder = os.path.join(executions_dir(wp.repo), execution_id)
    return any(os.path.exists(os.path.join(folder, name)) for name in ("started", "handle", "child", "code", "failed"))


def _gated_without_go(wp: Workplane, execution_id: str) -> bool:
    """Did a launch of this execution start a gated pane (``gate.NONCE``) and never let it go
    (no ``go.*``)? The launcher writes go only before it unlocks, and removes the gate before the go."""
    try:
        names = os.listdir(os.path.join(executions_dir(wp.repo), execution_id))
    except FileNotFoundError:
        return False
    return any(n.startswith("gate.") for n in names) and not any(n.startswith("go.") for n in names)


def _kill_survivors(wp: Workplane, execution_id: str) -> int:
    """Kill, by process group, whatever of execution ``execution_id`` still runs on this host; how
    many groups there were."""
    from .wrapper import kill_groups, survivors

    groups = survivors(os.path.join(executions_dir(wp.repo), execution_id))
    if groups:
        kill_groups(groups)
    return len(groups)


def _settled(wp: Workplane, record: dict[str, Any]) -> dict[str, Any] | None:
    """An answer for an execution that is live, or None when it is over (a new one may start)."""
    record = probe(wp, record)
    if record["state"] in ("reserved", "launching"):
        gone = "" if ours(wp, record) else f"; its host gone for good? once its lease ended: gw stop {record['id']} --lost"
        raise Held(f"execution {record['id']} of {record['item']} is being launched by another gw run "
                   f"(pid {(record.get('launcher') or {}).get('pid')} on {record.get('host')}){gone}",
                   item=record["item"], execution=record["id"], state=record["state"])
    if record["state"] == "running":
        return result(record, existing=True)
    return None


# The executions this process reserved (the resident launcher settles one a request left short of
# `running` or `failed`, launch/resident.py; a gw run process that dies is settled by the next one).
IN_FLIGHT: set[str] = set()


def startable(argv: Sequence[str], cwd: str) -> None:
    if not argv or not argv[0]:
        raise Invalid("gw run needs a command after --, e.g. gw run ITEM -- claude")
    program = argv[0]
    found = os.path.join(cwd, program) if "/" in program else which(program)
    if not found or not os.path.isfile(found) or not os.access(found, os.X_OK):
        raise Invalid(f"cannot start {program[:80]!r}: no such executable" + ("" if "/" in program else " on PATH"))


def which(program: str) -> str | None:
    """``shutil.which(program)`` for a bare name: the first executable file of that name on PATH
    (shutil itself, with its archive modules, costs gw run milliseconds before its agent starts)."""
    for folder in os.get_exec_path():
        path = os.path.join(folder or ".", program)
        if os.access(path, os.X_OK) and not os.path.isdir(path):
            return path
    return None


MAX_ENV_BYTES = 64 * 1024


def check_env(env: dict[str, str] | None) -> dict[str, str]:
    """The extra environment of an agent: names the launcher does not set itself, text values without
    NUL, 64 KiB in all (``Invalid`` otherwise, before anything is recorded)."""
    env = dict(env or {})
    check_env_names(list(env))
    size = 0
    for name, value in env.items():
        if not isinstance(value, str) or "\0" in value:
            raise Invalid(f"environment variable {name}: its value must be text without NUL")
        size += len(name) + len(value.encode("utf-8", "surrogatepass")) + 2
    if size > MAX_ENV_BYTES:
        raise Invalid(f"the extra environment is too large ({size} bytes; at most {MAX_ENV_BYTES})")
    return env


def run(wp: Workplane, item: str, command: Sequence[str], backend_kind: str = "tmux", ttl: str | None = None,
        execution: str | None = None, env: dict[str, str] | None = None, session: str | None = None,
        branch: str | None = None) -> dict[str, Any]:
    """Start ``command`` for ``item`` under a lease, at most once; the execution's record (a dict).

    ``env``: extra environment variables for the agent (their names are recorded, never their values;
    ``GW_AGENT``, ``GW_ITEM``, ``GW_FENCE``, ``GW_EXECUTION`` and ``GW_CONTEXT`` are gw run's own).
    ``session`` and ``branch``: the multi-step session branch the execution runs (its *lane*): branches
    of one session run at once under its one lease, each at most once. An execution of a branch is
    given by id, and a retry of it answers its record whatever became of it (a lost one is not started
    again: the branch is settled by its session), except one that never launched."""
    command = list(command)
    cwd = wp.repo.toplevel or os.getcwd()
    if ttl is not None:  # a bad --ttl is refused before anything is recorded (the claim would fail too late)
        from ..codec import parse_duration

        parse_duration(ttl)
    backend = backends.get(backend_kind, wp.repo, wp.settings)  # unknown backend: Invalid, nothing recorded
    startable(command, cwd)
    extra = check_env(env)
    if ttl is not None:  # refused before anything is recorded: the claim would refuse it (ops/leases.py)
        from ..codec import parse_duration
        from ..model import usable_ttl

        usable_ttl(parse_duration(ttl), wp.settings.clock_margin)
    mine = (session, branch) if session and branch else None
    if (session or branch) and (mine is None or execution is None):
        raise Invalid("an execution of a session branch needs its session, its branch and an execution id")
    backend.check()
    # A launch by item mints its execution's id now, and the resident launcher's tmux pane starts at
    # once, gated (tmux.GATED), while the state is read and the commit written; the agent starts only
    # once the commit landed (its go), never for a refused one. (A launch by id starts its pane once
    # that id's earlier execution is settled: settling kills what runs in its folder.)
    early_id = mint() if execution is None else None
    early = [_pend(backend, early_id, command, cwd, extra)] if early_id is not None else []
    try:
        return _run(wp, backend, item, command, cwd, extra, ttl, execution, session, branch, mine, early_id, early)
    finally:
        for gate in early:  # not taken by the launch's commit (an answer or a refusal before it)
            _abort(backend, gate)


def _run(wp: Workplane, backend: Any, item: str, command: list[str], cwd: str, extra: dict[str, str],
         ttl: str | None, execution: str | None, session: str | None, branch: str | None,
         mine: tuple[str, str] | None, early_id: str | None, early: list[Any]) -> dict[str, Any]:
    """``run`` once its arguments are checked; ``early``: the first round's gated pane, taken (popped) by
    the round that uses it (whoever takes it lets it go or starts it)."""
    coordinator = coordinator_holder(wp)
    if coordinator is not None:  # both must report the same build before work starts
        require_same(coordinator.get("build"), f"this host's coordinator (pid {coordinator['holder'].get('pid')})")
    item_id = wp.resolve(item)
    if execution is not None:
        check_execution_id(execution)
        earlier = find(wp, execution)
        if earlier is not None:
            if earlier["item"] != item_id:
                raise Invalid(f"execution {execution} runs {earlier['item']}, not {item_id}", execution=execution)
            if lane(earlier) != mine:
                raise Invalid(f"execution {execution} is not of this session branch", execution=execution)
            answer = _settled(wp, earlier)
            if answer is not None:
                return answer
            settled = find(wp, execution) or earlier
            if never_ran(settled):
                pass  # nothing ran under it (its gw run died first): reserved again under its own id
            elif settled["state"] != "lost" or mine is not None:
                return result(settled, existing=True)  # it ran and ended: that is the answer
            else:
                execution = None  # lost: a new execution (under a new epoch) takes its place
    caught_up = not wp.settings.remote
    refused: list[dict[str, Any]] = []  # local commands the catch-up or the launch refused: said in the answer
    for _attempt in range(3):
        ctx = wp.context()
        live = [other for other, event in item_executions(ctx, item_id).items()
                if event["state"] in LIVE and same_lane(mine, lane(event))]
        if live and not caught_up and not all(ours(wp, load_execution(ctx, other) or {}) for other in live):
            # Another clone's execution, live as this clone last heard: its end (a stop after a revoke
            # from the board, an exit) reaches the arbiter with that clone's push, not this clone's ref.
            # Ask the arbiter before answering "it runs there" (else refused until this clone fetched).
            caught_up = _catch_up(wp, refused)
            if caught_up:
                continue
        for other in live:
            answer = _settled(wp, load_execution(ctx, other) or {})
            if answer is not None:
                return answer
        if early_id is not None:  # the first round's id and pane, made when the launch began
            new_id, gate, early_id = early_id, early.pop(), None
        else:
            new_id = execution or mint()
            # The resident launcher's tmux pane starts now, gated, while the commit is written; the agent
            # starts only once the commit landed (its go), never for a refused one (tmux.GATED).
            gate = _pend(backend, new_id, command, cwd, extra)
        try:
            # One state commit before the agent starts (issue 27): the reservation, the lease (kept or
            # claimed) and `launching` under it, all or nothing (ops/executions.py, `launch`).
            launched = wp.record("exec-reserve", item=item_id, execution=new_id, command=command, backend=backend.kind,
                                 host=host(), clone=clone_id(wp.repo), launcher=me(), build=current_build(),
                                 session=session, branch=branch, env=sorted(extra) or None, launch=True, ttl=ttl)
        except BaseException as error:
            _abort(backend, gate)
            if isinstance(error, Held) and error.details.get("state"):
                continue  # another gw run reserved first: settle that one on the next round
            raise
        IN_FLIGHT.add(new_id)
        # The crash points of the three commits this one replaced: a launcher killed here left one
        # `launching` record and nothing started (settled as `failed`, launched again by a retry).
        crash_point("after-reserve")
        crash_point("after-claim")
        crash_point("after-launching")
        refused += launched.result.get("refused") or []
        answer = _launch(wp, backend, new_id, item_id, command, cwd, launched.result, extra, gate)
        # A local command the launch carried and the arbiter refused was recorded as reported (the next gw
        # sync exits 0 about it): like a claim, gw run lists it, or no command ever said so.
        return {**answer, "refused": refused} if refused else answer
    raise Held(f"{item_id}: executions kept changing under this gw run; try again", item=item_id)


def _catch_up(wp: Workplane, refused: list[dict[str, Any]] | None = None) -> bool:
    """This clone's ref brought up to the arbiter's state (``gw pull``); whether it could be. What the pull
    refused of this clone's local commands is added to ``refused`` (the caller's answer says it)."""
    from ..sync import Arbiter

    try:
        report = Arbiter(wp).sync(push=False)
    except GwError:
        return False  # unreachable: the launch's own commit will say so
    if refused is not None:
        refused += report.get("refused") or []
    return True


# The variables gw run sets for its agent (docs/launch.md), beside the caller's environment and its extra.
OWN_ENV = ("GW_AGENT", "GW_ITEM", "GW_FENCE", "GW_EXECUTION", "GW_CONTEXT", "GW_REPORT")


def _pend(backend: Any, execution_id: str, command: list[str], cwd: str, extra: dict[str, str]) -> Any:
    """The backend's pane started ahead of the commit (``Tmux.pend``), or None (started after it)."""
    pend = getattr(backend, "pend", None)
    if pend is None:
        return None
    names = {*os.environ, *extra, *OWN_ENV}
    names.discard("GW_CRASH_AT")
    return pend(execution_id, command, names, extra.get("PATH", os.environ.get("PATH")), cwd)


def _abort(backend: Any, gate: Any) -> None:
    """Let a pending pane go without its go (its launch refused or failed before the start)."""
    if gate is not None:
        backend.abort(gate)


def _launch(wp: Workplane, backend: Any, execution_id: str, item_id: str, command: list[str], cwd: str,
            record: dict[str, Any], extra: dict[str, str], gate: Any = None) -> dict[str, Any]:
    from .context import build, write, write_twin

    try:
        doc = build(wp, item_id, execution_id)
        launch_md = write(os.path.join(executions_dir(wp.repo), execution_id), doc, twin=False)
    except BaseException:
        _abort(backend, gate)
        raise
    env = dict(os.environ)
    env.update(extra)  # the caller's (checked: none of the names below), never recorded with their values
    env.update(GW_AGENT=record["holder"], GW_ITEM=item_id, GW_FENCE=str(record["fence"]), GW_EXECUTION=execution_id,
               GW_CONTEXT=launch_md, GW_REPORT=os.path.join(os.path.dirname(launch_md), "report.json"))
    env.pop("GW_CRASH_AT", None)
    try:
        if gate is not None:
            handle, _created = backend.go(gate, env)
        else:
            handle, _created = backend.start(execution_id, command, env, cwd)
    except GwError as error:
        wp.record("exec-state", execution=execution_id, to="failed", reason=error.message[:200])
        raise
    crash_point("after-start")
    write_twin(os.path.dirname(launch_md), doc)  # (launch.md was the agent's to read: launch.json now, off its way)
    status, detail = backend.status(execution_id, handle)
    if status == "failed":  # it could not even start (a bad interpreter line, say): never `running`
        wp.record("exec-state", execution=execution_id, to="failed", reason=str(detail)[:200], handle=handle)
        raise Invalid(f"{detail}", execution=execution_id)
    record = _mark(wp, {"id": execution_id}, "running", handle=handle)
    IN_FLIGHT.discard(execution_id)  # settled: running (a refusal above leaves it `failed`, also settled)
    return result(record, existing=False)


def get_execution(wp: Workplane, execution_id: str) -> dict[str, Any]:
    check_execution_id(execution_id)
    record = find(wp, execution_id)
    if record is None:
        raise NotFound(f"no execution {execution_id}", execution=execution_id)
    return record


def runs(wp: Workplane, item: str | None = None, state: str | None = None) -> list[dict[str, Any]]:
    from ..codec import load_yaml
    from ..records.executions import EXECUTIONS, checked

    if state is not None and state not in (*LIVE, *TERMINAL):
        raise Invalid(f"unknown execution state {state[:40]!r}; known: {', '.join((*LIVE, *TERMINAL))}")
    snapshot = wp.context().snapshot
    item_id = wp.resolve(item) if item else None
    rows = []
    for shard, entry in snapshot.tree(EXECUTIONS).items():
        for name, blob in snapshot.store.read_tree(entry.oid).items():
            path = f"{EXECUTIONS}/{shard}/{name}"
            record = checked(load_yaml(snapshot.store.read_blob(blob.oid), what=path), path)
            if (item_id is None or record.get("item") == item_id) and (state is None or record.get("state") == state):
                rows.append(record)
    rows.sort(key=lambda r: (str(r.get("created_at")), r["id"]))
    return [result(r, existing=True) for r in rows]


def _live_handle(wp: Workplane, execution_id: str) -> tuple[dict[str, Any], Any, str]:
    record = get_execution(wp, execution_id)
    if not ours(wp, record):
        raise Invalid(f"execution {execution_id} runs on {elsewhere(wp, record)}, not here", execution=execution_id)
    backend = backends.get(record["backend"], wp.repo, wp.settings)
    handle = record.get("handle") or _handle_of(backend, execution_id)
    if not handle:
        raise Invalid(f"execution {execution_id} was never started ({record['state']})", execution=execution_id)
    return record, backend, handle


def capture(wp: Workplane, execution_id: str, lines: int | None = None) -> str:
    _record, backend, handle = _live_handle(wp, execution_id)
    return backend.capture(execution_id, handle, lines)


def send(wp: Workplane, execution_id: str, text: str, keys: Sequence[str] = (), wait: bool = False,
         timeout: float = 60.0) -> None:
    """Type into a live execution; ``wait``: the text as one line, then until it is back at its prompt."""
    record, backend, handle = _live_handle(wp, execution_id)
    if record["state"] not in LIVE:
        raise Invalid(f"execution {execution_id} is {record['state']}", execution=execution_id)
    if wait:
        if keys:
            raise Invalid("--wait sends the text as one line (Enter included): no --key with it")
        backend.prompt(execution_id, handle, text, timeout)
        return
    if text:
        backend.send_text(execution_id, handle, text)
    if keys:
        backend.send_keys(execution_id, handle, list(keys))


def stop(wp: Workplane, execution_id: str, reason: str | None = None, lost: bool = False) -> dict[str, Any]:
    """Stop a live execution. One whose agent already ended is recorded as it ended (``exited`` with
    its code, or ``failed``), its pane and output kept for ``gw capture``; a ``lost`` one (of this
    host) has whatever of it may still run killed, by process group; any other ended one is left.
    ``lost``: another host's execution, that host gone for good, declared lost (op ``exec-lost``: only
    once its lease has ended)."""
    record = get_execution(wp, execution_id)
    if record["state"] not in LIVE:
        if record["state"] == "lost" and ours(wp, record):
            return {**result(record, existing=True), "killed": _kill_survivors(wp, execution_id)}
        return result(record, existing=True)
    if lost:
        if ours(wp, record):
            raise Invalid(f"execution {execution_id} runs here: gw stop {execution_id} (without --lost) stops it",
                          execution=execution_id)
        # Whether the lease ended is the arbiter's to say (the host's coordinator renews it there): exec-lost
        # is decided there (arbiter=True), never on this clone's own, perhaps stale, ref.
        done = wp.do("exec-lost", execution=execution_id, reason=reason or "its host is gone")
        refused = (done.result or {}).get("refused") or []
        return {**result(get_execution(wp, execution_id), existing=True), **({"refused": refused} if refused else {})}
    if not ours(wp, record):
        raise Invalid(f"execution {execution_id} runs on {elsewhere(wp, record)}, not here", execution=execution_id)
    backend = backends.get(record["backend"], wp.repo, wp.settings)
    handle = record.get("handle") or _handle_of(backend, execution_id)
    status, detail = backend.status(execution_id, handle) if handle else ("gone", None)
    if status == "exited":
        return result(_mark(wp, record, "exited", code=int(str(detail)), handle=handle), existing=True)
    if status == "failed":
        return result(_mark(wp, record, "failed", reason=str(detail)[:200], handle=handle), existing=True)
    if handle:
        backend.kill(execution_id, handle)
    _kill_survivors(wp, execution_id)  # what the handle did not reach (no handle yet, a wrapper gone)
    return result(_mark(wp, record, "stopped", reason=reason or "stopped by gw stop"), existing=True)


def release(wp: Workplane, execution_id: str, reason: str | None = None) -> dict[str, Any]:
    """Detach a running execution without killing it: recorded ``released`` (no coordinator judges it
    again, its lane is free); its process runs on. One that already ended is recorded as it ended."""
    record, backend, handle = _live_handle(wp, execution_id)
    if record["state"] != "running":
        raise Invalid(f"execution {execution_id} is {record['state']}: only a running one is released",
                      execution=execution_id)
    status, detail = backend.status(execution_id, handle)
    if status == "exited":
        return result(_mark(wp, record, "exited", code=int(str(detail)), handle=handle), existing=True)
    if status != "running":
        return stop(wp, execution_id, reason)
    backend.release(execution_id, handle)
    return result(_mark(wp, record, "released", reason=reason or "released by gw detach"), existing=True)


def attach_argv(wp: Workplane, execution_id: str) -> list[str]:
    _record, backend, handle = _live_handle(wp, execution_id)
    return backend.attach_argv(execution_id, handle)
