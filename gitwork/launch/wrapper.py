"""The tiny wrapper both backends run: ``python .../gitwork/launch/wrapper.py DIR [--env FILE] -- CMD ARGS...``.

It is started by its path, not as a module, and imports nothing but the standard library: a tmux pane
runs it with the tmux server's environment, which need not find gitwork.

In order, so that a ``kill -9`` of the launcher at any point leaves something the next pass finds:

1. it writes ``DIR/handle`` (``PID@START``, its own process group: it is a session leader under both
   backends) before it starts anything, so an agent never runs without a handle on disk, whether or
   not the launcher lived to write it (the launcher writes the same);
2. it reads the agent's environment from ``FILE`` (``DIR/env.PID``, written 0600 by the launcher:
   ``NAME=VALUE`` entries, each ended by a NUL byte, which no name or value holds) and removes the
   file at once: secrets and large environments never travel on a command line (a tmux client's is
   world-readable in /proc, and limited to about 16 KiB);
3. it runs the command (stdin from ``DIR/stdin``, a FIFO ``gw send`` writes to, when the subprocess
   backend made one; else its own, a tmux pane's terminal), writes ``DIR/child`` once it has started,
   and its exit code to ``DIR/code`` (128+N for a signal), or ``DIR/failed`` when the command cannot
   start, each written to a temporary file and renamed, so a reader sees the whole file or none.

Nothing on the way to the agent imports more than ``os``, ``sys``, ``time`` and ``gitwork.fsutil`` (issue
27: the wrapper's start is on the critical path of ``gw run``): ``json`` alone pulls in ``re`` and
``enum``, and loading fsutil by its path ``importlib.util``; JSON is read only once the agent has exited.

A wrapper killed with the process group writes nothing: the execution is then stopped (if gw stopped
it) or lost. The agent's environment carries ``GW_CONTEXT`` (a path inside ``DIR``), by which
``survivors`` finds what may still run of an execution whose wrapper is gone.
"""

from __future__ import annotations

import os
import sys
import time

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, Sequence

STARTED = ("child", "failed", "code")  # one of these exists once the command started, or could not
ENV_FILE = "env"  # DIR/env.<launcher pid>


# How both backends start the wrapper: ``python -S -c BOOT WRAPPER.py DIR --env FILE -- CMD...``. BOOT imports it
# as a module from its own folder, so its compiled bytecode (``__pycache__``) is used; a script given by
# its path is compiled from source at every start. Its path stays on the command line, where
# ``survivors`` looks for it.
BOOT = ("import sys;w=sys.argv[1];sys.path[0]=w[:w.rindex('/')];import wrapper;"
        "sys.exit(wrapper.main(sys.argv[2:]))")


def argv(folder: str, env_file: str, command: Sequence[str]) -> list[str]:
    """The command line that runs ``command`` under the wrapper, for execution folder ``folder``."""
    return [sys.executable, "-S", "-c", BOOT, os.path.abspath(__file__), folder, "--env", env_file, "--", *command]


def outcome(folder: str) -> tuple[str, object] | None:
    """What the wrapper in ``folder`` wrote at the end: ``("exited", code)``, ``("failed", reason)``, or None."""
    for file, state in (("code", "exited"), ("failed", "failed")):
        try:
            with open(os.path.join(folder, file)) as read:
                text = read.read().strip()
            return state, int(text) if state == "exited" else text
        except (FileNotFoundError, ValueError):
            pass
    return None


def wait_started(folder: str, gone: object = None, limit: float = 10.0) -> None:
    """Wait (bounded) until the wrapper in ``folder`` has started its command or found it cannot, so the
    launcher records ``running`` only for a command that really started. ``gone()``, asked now and
    then, ends the wait early when the wrapper itself is no more."""
    deadline = time.monotonic() + limit
    rounds = 0
    while not any(os.path.exists(os.path.join(folder, name)) for name in STARTED):
        rounds += 1
        if time.monotonic() > deadline or (gone is not None and rounds % 20 == 0 and gone()):  # type: ignore[operator]
            return
        time.sleep(0.005)


def write_env(folder: str, env: dict[str, str]) -> str:
    """The agent's whole environment into a file of this launcher's own in ``DIR`` (``env.PID``):
    created 0600 (never readable by others, not even for a moment), written, renamed into place; its
    path goes to the wrapper (``--env PATH``), which removes it once read."""
    os.makedirs(folder, exist_ok=True)
    path = os.path.join(folder, f"{ENV_FILE}.{os.getpid()}")
    data = b"".join(os.fsencode(name) + b"=" + os.fsencode(value) + b"\0" for name, value in env.items())
    _write_file(path, data, 0o600)
    return path


def remove(path: str) -> None:
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass


def _read_env(path: str) -> dict[bytes, bytes]:
    """The environment ``write_env`` wrote (bytes, as ``os.environb`` holds it), the file removed."""
    try:
        with open(path, "rb") as read:
            data = read.read()
    except FileNotFoundError:
        return {}
    finally:
        try:
            os.unlink(path)
        except FileNotFoundError:
            pass
    env = {}
    for entry in data.split(b"\0"):
        name, eq, value = entry.partition(b"=")
        if name and eq:
            env[name] = value
    return env


def start_time(pid: int) -> str | None:
    """The process's start time in clock ticks since boot (``/proc/PID/stat`` field 22), or None."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as stat:
            data = stat.read()
    except OSError:
        return None
    fields = data[data.rindex(b")") + 2:].split()
    if fields[0] == b"Z":  # a zombie has finished
        return None
    return fields[19].decode()


def survivors(folder: str) -> list[int]:
    """The process groups on this host that belong to the execution of ``folder``: its wrapper (by
    its command line) and whatever runs with its ``GW_CONTEXT`` (the agent and its children, even
    once the wrapper is gone). Processes of other users cannot be read, and are not ours."""
    wrapper = os.path.abspath(__file__).encode()
    mark = f"GW_CONTEXT={os.path.join(folder, 'launch.md')}".encode()
    groups: set[int] = set()
    uid = os.getuid()
    for name in os.listdir("/proc"):
        if not name.isdigit() or int(name) == os.getpid():
            continue
        try:
            if os.stat(f"/proc/{name}").st_uid != uid:
                continue  # another user's: not ours, and its environment is not readable anyway
            with open(f"/proc/{name}/cmdline", "rb") as read:
                argv = read.read().split(b"\0")
            ours = wrapper in argv and folder.encode() in argv
            if ours:
                # tmux's server keeps the command line of the client that started it (the pane command of
                # the launch that did): it is every execution's, never this one's to kill.
                with open(f"/proc/{name}/comm", "rb") as read:
                    ours = not read.read().startswith(b"tmux")
            if not ours:
                with open(f"/proc/{name}/environ", "rb") as read:
                    ours = mark in read.read().split(b"\0")
            if ours and start_time(int(name)) is not None:
                groups.add(os.getpgid(int(name)))
        except (OSError, ValueError):
            continue
    return sorted(groups)


def kill_groups(groups: list[int], wait: float = 2.0) -> None:
    """TERM (and CONT, for a paused one), then KILL, each process group."""
    import signal  # (here, not at the top: the wrapper's own start-up is on the way to the agent)

    for sig in (signal.SIGTERM, signal.SIGKILL):
        for group in groups:
            try:
                os.killpg(group, sig)
                if sig == signal.SIGTERM:
                    os.killpg(group, signal.SIGCONT)
            except (ProcessLookupError, PermissionError):
                pass
        deadline = time.monotonic() + wait
        while time.monotonic() < deadline and any(_group_alive(g) for g in groups):
            time.sleep(0.01)
        if not any(_group_alive(g) for g in groups):
            return


def _group_alive(group: int) -> bool:
    try:
        os.killpg(group, 0)
    except (ProcessLookupError, PermissionError):
        return False
    return True


def _write(folder: str, name: str, text: str) -> None:
    _fsutil().write_atomic(os.path.join(folder, name), text + "\n", fsync=False)


def _write_file(path: str, data: bytes, mode: int) -> None:
    _fsutil().write_atomic(path, data, fsync=False, mode=mode)


_loaded: list[Any] = []


def _fsutil() -> Any:
    """``gitwork.fsutil`` (the one way gitwork writes a file whole): imported by the launcher; in the
    wrapper, which runs without gitwork on its path, imported as the top-level module ``fsutil`` from
    the package's folder, put last on the path (fsutil needs nothing but ``os``; not ``importlib.util``,
    which loading it by its path would cost on the way to the agent)."""
    if not _loaded:
        if __package__:
            from .. import fsutil
        else:
            sys.path.append(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
            import fsutil  # type: ignore[import-not-found,no-redef]
        _loaded.append(fsutil)
    return _loaded[0]


def main(argv: list[str]) -> int:
    folder, argv = argv[0], argv[1:]
    env_file = None
    if argv[:1] == ["--env"]:
        env_file, argv = argv[1], argv[2:]
    sep, command = argv[0], argv[1:]
    assert sep == "--" and command
    pid = os.getpid()
    if os.getpgrp() == pid:  # first: an agent never runs without a handle on disk
        _write(folder, "handle", f"{pid}@{start_time(pid) or 0}")
    env = {**os.environb, **(_read_env(env_file) if env_file else {})}
    fifo = os.path.join(folder, "stdin")
    # Read-write, so the agent never sees end-of-file between two `gw send`s, and opening never blocks.
    stdin = os.open(fifo, os.O_RDWR) if os.path.exists(fifo) else None
    try:
        child = _spawn(command, stdin, env)
    except OSError as exc:
        _write(folder, "failed", f"cannot start {command[0]}: {exc.strerror or exc}")
        return 127
    _write(folder, "child", str(child))  # started: what the launcher waits for before it says "running"
    code = os.waitstatus_to_exitcode(os.waitpid(child, 0)[1])
    _take_report(folder)  # before the code: whoever records the end finds the report beside it
    _write(folder, "code", str(128 - code if code < 0 else code))
    return 0


def _take_report(folder: str) -> None:
    """Read the agent's ``report.json`` (``$GW_REPORT``, the execution ledger) as it exits: ``report``
    (the object it holds, as JSON) or ``report.error`` (why not) beside it. gw checks the numbers when
    it records the end (gitwork/launch/ledger.py); nothing here can fail the wrapper."""
    try:
        with open(os.path.join(folder, "report.json"), "rb") as read:
            data = read.read(64 * 1024 + 1)
    except FileNotFoundError:
        return
    except OSError as exc:
        _write(folder, "report.error", f"report.json cannot be read: {exc.strerror or exc}")
        return
    import json  # only now, and only for a report: nothing waits on the wrapper's start-up any more

    try:
        if len(data) > 64 * 1024:
            raise ValueError("larger than 65536 bytes")
        doc = json.loads(data.decode("utf-8"))
        if not isinstance(doc, dict):
            raise ValueError("not a JSON object")
        text = json.dumps(doc)
    except (ValueError, RecursionError) as exc:
        _write(folder, "report.error", " ".join(f"report.json is not a JSON object: {exc}".split())[:200])
        return
    _write(folder, "report", text)


def _spawn(command: list[str], stdin: int | None, env: dict[bytes, bytes]) -> int:
    """Start ``command`` as ``subprocess.Popen(command, stdin=stdin, env=env)`` would (found on the PATH
    of ``env``, descriptors other than 0-2 closed, SIGPIPE and SIGXFSZ back to their defaults), with
    ``os.posix_spawn``: importing subprocess (threading, locale, selectors, signal's enums) would put
    milliseconds between ``gw run`` and the agent's first line. Its pid; ``OSError`` when it cannot start."""
    try:
        import _signal as signals  # type: ignore[import-not-found]  # the C module: no enums built
    except ImportError:
        import signal as signals  # type: ignore[no-redef]

    program = command[0]
    if os.sep not in program:
        path = env.get(b"PATH")  # the agent's PATH, as subprocess would search it (os.defpath without one)
        found = [p for p in (os.path.join(d, program) for d in os.get_exec_path({} if path is None else
                                                                              {"PATH": os.fsdecode(path)}))
                 if os.access(p, os.X_OK) and not os.path.isdir(p)]
        if not found:
            raise FileNotFoundError(2, "No such file or directory", program)
        program = found[0]
    actions: list[tuple[int, ...]] = [(os.POSIX_SPAWN_DUP2, stdin, 0)] if stdin is not None else []
    try:
        inherited = [int(n) for n in os.listdir("/proc/self/fd")]
    except OSError:
        inherited = list(range(3, 256))
    for fd in inherited:
        if fd > 2 and fd != stdin:
            try:
                if os.get_inheritable(fd):
                    actions.append((os.POSIX_SPAWN_CLOSE, fd))
            except OSError:
                pass  # not open (any more)
    return os.posix_spawn(program, command, env, file_actions=actions,
                          setsigdef=(signals.SIGPIPE, signals.SIGXFSZ))


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
