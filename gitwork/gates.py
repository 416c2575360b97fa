"""Checking what items wait on (docs/everyday.md, "Waiting on events"): a procedure run by the coordinator
each pass (``launch/coordinate.py``) and by ``gw waits check``.

For each open wait of kind ``ref`` or ``command`` (ops/waits.py) it asks git or runs the command, and
records an outcome as a command, op ``wait-end``, under this process's identity (the op decides whether
that identity may: roles.require_gatekeeper; the arbiter re-applies it). A timer needs nothing here: it
passes at read time.

- **ref**: ``git merge-base --is-ancestor REF TARGET`` in this repository (after ``git fetch`` of both
  from ``--remote`` into refs private to this run, deleted afterwards). Satisfied: recorded with the
  commit; a ref not found or not yet reachable: left waiting (reported ``pending``) and checked again
  after ``REF_EVERY`` seconds, doubling up to ``BACKOFF`` times that: a coordinator passes every 5 s,
  and each check is a git process (and a fetch with ``--remote``).
- **command**: run only if this repository's ``.workplane`` lists it under ``wait_commands`` (argument
  patterns, ``fnmatch`` per argument, same number of arguments): it is declared by a command on the
  state ref, which anyone with push access could forge, and it runs on this host. It runs without a
  shell (``shlex`` split: ``;`` or ``$(...)`` are plain arguments), in the top level, stdin closed, each
  run bounded in time; its output is kept bounded (the last ``TAIL`` bytes). Exit 0: ``satisfied``; 126
  or 127 (not executable, not found): ``failed``; any other exit or a run past its bound: polled again
  after ``every`` seconds, doubling after each try up to ``BACKOFF`` times ``every``; once ``timeout``
  seconds have passed since the wait was declared: ``timeout``. The poll state (next try, tries, last
  exit and output) is local, ``<git common dir>/gitwork/waits/``: only outcomes are commands.
"""

from __future__ import annotations

import datetime as _dt
import json
import os
import re

from . import gitcmd
from .clock import format_instant, parse_instant
from .errors import GwError

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

    from .workplane import Workplane

TAIL = 2000  # bytes of a command's output kept (the end: where a failure says why)
BACKOFF = 8  # the longest pause between two polls, in multiples of ``every``
RUN_LIMIT = 300  # seconds one run of a command may take, at most (``every``, at least 10 s, below that)
REF_EVERY = 30  # seconds between two checks of one ref wait, at first
FAILED_EXITS = (126, 127)  # the shell's "not executable" and "not found": polling again cannot help


def allowed(wp: Workplane, command: str) -> bool:
    """Whether this repository's ``.workplane`` (setting ``wait_commands``, read from that file only: git
    config and the environment cannot set it) lets a coordinator here run ``command``."""
    import shlex
    from fnmatch import fnmatchcase

    patterns = wp.settings.extra.get("wait_commands") or []
    if not isinstance(patterns, list):
        return False
    try:
        argv = shlex.split(command)
    except ValueError:
        return False
    for pattern in patterns:
        try:
            words = shlex.split(str(pattern))
        except ValueError:
            continue
        if words and len(words) == len(argv) and all(fnmatchcase(a, p) for a, p in zip(argv, words, strict=True)):
            return True
    return False


def check(wp: Workplane, keep: Any = None, now: bool = False) -> list[dict[str, Any]]:
    """One pass over every open ref and command wait; what was done to each (``action``: satisfied, failed,
    timeout, pending, refused, error). ``keep()`` (the coordinator's lease check) runs before each.
    ``now``: try each at once, whatever its back-off says (``gw waits check``: a person asking now)."""
    from .model import CLOSED
    from .queries import gated

    done: list[dict[str, Any]] = []
    ctx = wp.context()
    kept: set[str] = set()  # the poll-state files of the waits still open
    for item_id in gated(ctx.snapshot):
        try:
            item = ctx.item(item_id)
        except GwError as error:
            done.append({"item": item_id, "action": "error", "error": error.kind, "message": error.message})
            continue
        if item.status in CLOSED:
            continue
        for wait in item.waits or ():
            if wait.get("kind") == "timer":
                continue
            if keep is not None:
                keep()
            entry = {"item": item_id, "wait": wait["id"], "kind": wait["kind"]}
            kept.add(os.path.basename(_state_path(wp, item_id, wait["id"])))
            try:
                found = (_ref(wp, item_id, wait, now) if wait["kind"] == "ref" else
                         _command(wp, item_id, wait, now))
                if found.get("outcome"):
                    outcome = found.pop("outcome")
                    wp.do("wait-end", item=item_id, wait=wait["id"], outcome=outcome, **found)
                    _forget(wp, item_id, wait["id"])
                    found = {"action": outcome, **found}
                done.append({**entry, **found})
            except GwError as error:
                done.append({**entry, "action": "error", "error": error.kind, "message": error.message})
    _sweep(wp, kept)
    return done


def _sweep(wp: Workplane, kept: set[str]) -> None:
    """Delete the poll state of waits no longer open (ended by hand, by another clone, their item closed)."""
    folder = os.path.dirname(_state_path(wp, "x", "x"))
    try:
        names = os.listdir(folder)
    except FileNotFoundError:
        return
    from .fsutil import is_temp

    for name in names:
        if name not in kept and not is_temp(name):  # a temporary file: another checker is writing
            try:
                os.unlink(os.path.join(folder, name))
            except OSError:
                pass  # another checker's sweep got there first


# --- ref waits ---------------------------------------------------------------------------------------


def _git(wp: Workplane, *args: str, timeout: float = 60) -> gitcmd.Completed:
    return gitcmd.run(["-C", wp.repo.common_dir, *args], check=False, timeout=timeout, keep=4096)


def _commit(wp: Workplane, name: str) -> str | None:
    found = _git(wp, "rev-parse", "--verify", "--quiet", "--end-of-options", f"{name}^{{commit}}")
    return found.out.strip() if found.returncode == 0 and found.out.strip() else None


def _ref(wp: Workplane, item_id: str, wait: dict[str, Any], now: bool) -> dict[str, Any]:
    ref, target, remote = wait["ref"], wait["target"], wait.get("remote")
    path = _state_path(wp, item_id, wait["id"])
    state = _load(path)
    if not now and state.get("next") and wp.now() < parse_instant(str(state["next"])):
        return {"action": "pending", "reason": f"next check at {state['next']}"}
    found = _fetched(wp, ref, target, remote) if remote else _reachable(wp, ref, target)
    if not found.get("outcome"):
        _later(wp, path, state, REF_EVERY, found)
    return found


def _later(wp: Workplane, path: str, state: dict[str, Any], every: int, found: dict[str, Any]) -> str:
    """Record the next try after ``every`` doubled per try so far (at most ``BACKOFF`` times); return it."""
    from .fsutil import write_atomic

    tries = int(state.get("tries", 0)) + 1
    later = format_instant(wp.now() + _dt.timedelta(seconds=min(every * 2 ** (tries - 1), every * BACKOFF)))
    os.makedirs(os.path.dirname(path), exist_ok=True)
    write_atomic(path, json.dumps({"next": later, "tries": tries, "code": found.get("code"),
                                   "tail": found.pop("tail", None)}), fsync=False)
    return later


def _fetched(wp: Workplane, ref: str, target: str, remote: str) -> dict[str, Any]:
    # Fetched into refs of this run alone (two checkers never share them), deleted afterwards; those of
    # a checker killed before it could delete them go here.
    _sweep_dead_checkers(wp)
    base = f"refs/gitwork-waits/{os.getpid()}"
    specs = [f"+{target}:{base}/target"]
    if not _is_hex(ref):
        specs.append(f"+{ref}:{base}/ref")
    try:
        fetched = _git(wp, "fetch", "--quiet", "--no-tags", "--no-write-fetch-head", "--end-of-options", remote, *specs,
                       timeout=120)
        if fetched.returncode != 0:
            from .sync.transport import git_reason

            return {"action": "pending", "reason": f"git fetch {remote} failed: {git_reason(fetched.err)}"[:300]}
        return _reachable(wp, ref if _is_hex(ref) else f"{base}/ref", f"{base}/target",
                          (ref, f"{remote}'s {target}"))
    finally:
        for name in ("ref", "target"):
            _git(wp, "update-ref", "-d", f"{base}/{name}")


def _sweep_dead_checkers(wp: Workplane) -> None:
    from .stalelocks import pid_exists

    listed = _git(wp, "for-each-ref", "--format=%(refname)", "refs/gitwork-waits/")
    dead = [name for name in listed.out.split()
            if not (name.split("/")[2].isdigit() and pid_exists(int(name.split("/")[2])))]
    if dead:
        gitcmd.run(["-C", wp.repo.common_dir, "update-ref", "--stdin"], check=False, timeout=60,
                   input="".join(f"delete {name}\n" for name in dead).encode())


def _is_hex(text: str) -> bool:
    return 7 <= len(text) <= 64 and all(c in "0123456789abcdef" for c in text)


def _reachable(wp: Workplane, ref: str, target: str, names: tuple[str, str] | None = None) -> dict[str, Any]:
    """Whether ``ref``'s commit is an ancestor of ``target``'s; ``names``: how to name them (fetched refs)."""
    shown_ref, shown_target = names or (ref, target)
    # One git process for a wait still pending (the common case, every few passes): merge-base resolves
    # both names itself; the commit is looked up only for the record of a satisfied wait.
    found = _git(wp, "merge-base", "--is-ancestor", ref, target)
    if found.returncode == 0:
        return {"outcome": "satisfied", "commit": _commit(wp, ref)}
    if found.returncode == 1:
        return {"action": "pending", "reason": f"{shown_ref} is not reachable from {shown_target}"}
    if _commit(wp, ref) is None or _commit(wp, target) is None:
        return {"action": "pending", "reason": f"{shown_ref if _commit(wp, ref) is None else shown_target} not found"}
    return {"action": "pending", "reason": f"git merge-base failed: {gitcmd.one_line(found.err)}"[:300]}


# --- command waits -----------------------------------------------------------------------------------


def _state_path(wp: Workplane, item_id: str, wait_id: str) -> str:
    return os.path.join(wp.repo.gitwork_dir(), "waits", f"{item_id}.{wait_id}.json")


def _load(path: str) -> dict[str, Any]:
    try:
        with open(path, encoding="utf-8") as read:
            state = json.load(read)
        return state if isinstance(state, dict) else {}
    except (OSError, ValueError):
        return {}  # none yet, or damaged: polled as if new (derived, local data)


def _forget(wp: Workplane, item_id: str, wait_id: str) -> None:
    try:
        os.unlink(_state_path(wp, item_id, wait_id))
    except FileNotFoundError:
        pass


def _command(wp: Workplane, item_id: str, wait: dict[str, Any], asked_now: bool) -> dict[str, Any]:
    if not allowed(wp, wait["command"]):
        return {"action": "refused", "reason": "not allowed here: .workplane's wait_commands does not list it"}
    now = wp.now()
    path = _state_path(wp, item_id, wait["id"])
    state = _load(path)
    deadline = parse_instant(wait["at"]) + _dt.timedelta(seconds=int(wait["timeout"]))
    if now >= deadline:
        return {"outcome": "timeout", "code": state.get("code"),
                "detail": f"no success within {wait['timeout']}s ({state.get('tries', 0)} tries)"
                          + (f"; last output: {state['tail']}" if state.get("tail") else "")}
    if not asked_now and state.get("next") and now < parse_instant(str(state["next"])):
        return {"action": "pending", "reason": f"next try at {state['next']}", "code": state.get("code")}
    code, tail = run(wp, wait["command"], max(10, min(RUN_LIMIT, int(wait["every"]))))
    if code == 0:
        return {"outcome": "satisfied", "code": 0, **({"detail": tail} if tail else {})}
    if code in FAILED_EXITS:
        return {"outcome": "failed", "code": code, **({"detail": tail} if tail else {})}
    later = _later(wp, path, state, int(wait["every"]), {"code": code, "tail": tail})
    return {"action": "pending", "reason": f"exit {code}; next try at {later}", "code": code}


def run(wp: Workplane, command: str, limit: float) -> tuple[int | None, str]:
    """``(exit code, the end of its output)`` of one run of ``command`` (no shell) in the top level; code
    127 for a program not found, 126 for one not executable, ``None`` for a run past ``limit`` (killed)."""
    import shlex
    import subprocess
    import tempfile

    argv = shlex.split(command)
    with tempfile.TemporaryFile() as out:  # bounded in memory: only the tail is read back
        try:
            # Its own process group, so a run past its bound is ended whole (a child it started too).
            proc = subprocess.Popen(argv, cwd=wp.repo.toplevel or wp.repo.common_dir, stdin=subprocess.DEVNULL,
                                    stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
        except FileNotFoundError:
            return 127, f"{argv[0]}: not found"
        except PermissionError:
            return 126, f"{argv[0]}: not executable"
        code: int | None
        try:
            code = proc.wait(timeout=limit)
        except subprocess.TimeoutExpired:
            import signal

            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            proc.wait()
            code = None
        size = out.seek(0, os.SEEK_END)
        out.seek(max(0, size - TAIL))
        tail = out.read().decode("utf-8", "replace")
    # Recorded in a command's text field, which refuses control characters: a terminal's colours go.
    return code, _CONTROL.sub("", tail).strip()


_CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f\ufffe\uffff]")
