"""The ``tmux`` backend: one tmux session per execution, named after its id, on gitwork's own server.

The server has its own socket (``GW_TMUX_SOCKET``, else ``<git common dir>/gitwork/tmux/sock``, or a
short path under ``/tmp`` when that one is too long for a Unix socket), so agents never mix with a
person's own tmux sessions. The server is started with a configuration of its own that sets
``remain-on-exit``, before any pane exists: a pane that exits keeps its exit status
(``#{pane_dead_status}``) however quickly its command ends; the code is also written to the
execution's folder by a one-line shell wrapper (``WRAPPER``). ``new-session -d -s NAME`` is tmux's
atomic create-if-absent: a second one for the same name fails with "duplicate session".
Every tmux call goes through ``gitcmd.run_tool``.
"""

from __future__ import annotations

import os
import time

from ..errors import Invalid
from ..gitcmd import Completed, one_line, run_tool
from .client import SOCKET_MAX  # sun_path's bound: one for the launcher's socket and tmux's
from .paths import executions_dir
from .wrapper import outcome, wait_started

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Iterable, Sequence

    from ..store import Repository

# The pane runs the agent under the subprocess backend's wrapper (``wrapper.py``): it says when the
# command started (or could not: then the execution is ``failed``, never ``running``) and writes its
# exit code (128+N for a signal) to the execution's folder, whole and renamed; tmux can show a pane
# dead for a while before it has reaped the process and knows its status. A pane killed with its
# server (SIGHUP) writes nothing, and is lost; so is one whose wrapper ran and died without a code
# (status(): its agent may run on, and is killed first).
CONFIG = "set-option -g remain-on-exit on\nset-option -g history-limit 10000\nset-option -g exit-empty off\n"


# The pane without a Python start before the agent (the resident launcher's, issue 27): ``/bin/sh -c
# PANE WRAPPER.py DIR ENVFILE ENV MV -- CMD...`` (ENV and MV: the absolute paths of ``env`` and ``mv``,
# found by the launcher, since the agent's own PATH need not have them). In order, as the wrapper does:
# ``handle`` first (the shell's pid and start time: the pane's process group); the environment from
# ENVFILE (``export NAME='VALUE'`` lines, 0600), emptied at once with a builtin (no value outlives the
# read); then the agent, started as the shell's child (no ``exec``: tmux 3.3a sometimes never reports
# the exit status of a pane whose process exits quickly, so the shell waits and writes the code
# itself), through ``env --default-signal`` because a shell without job control starts a background
# command with SIGINT and SIGQUIT ignored (POSIX), and the agent must hear the terminal's Ctrl-C. Its
# stdin is the pane's terminal (fd 3: the background command's own stdin would be /dev/null). ``child``
# (its pid), then ``code`` (128+N for a signal, as the wrapper writes it) are written whole and renamed.
# The shell ignores INT and QUIT (the terminal sends them to its whole foreground process group, the
# agent included: forwarding them would deliver them twice) and forwards TERM and HUP (tmux's
# kill-session hangs up the pane's process alone), waiting again until the agent has really ended
# (``t``: a trap ran, so ``wait`` may have returned for it; dash keeps a finished job's status for the
# last ``wait``). Whatever makes the shell exit before the agent started (a missing ENVFILE, say) runs
# its EXIT trap, which writes ``failed``; a command that cannot be executed is seen by the launcher
# before it starts the pane (``_executable``), else ends with env's 126 or 127. WRAPPER.py is there
# for ``survivors`` (wrapper.py), as with the wrapper.
PANE = ("d=$1 e=$2 v=$3 m=$4 c=$6; shift 5; set -f; "
        "h() { shift 21; printf '%s@%s\\n' \"$$\" \"$1\" > \"$d/handle\"; }; read -r s < /proc/$$/stat; h $s; "
        "w() { printf '%s\\n' \"$2\" > \"$d/$1.t\" && \"$m\" -f -- \"$d/$1.t\" \"$d/$1\"; }; "
        "trap 'r=$?; w failed \"cannot start $c: it could not be executed (sh status $r)\"' EXIT; "
        ". \"$e\"; : > \"$e\"; exec 3<&0; trap '' INT QUIT; "
        "\"$v\" --default-signal -- \"$@\" <&3 3<&- & p=$!; "
        "trap 't=1; kill -s TERM $p 2>/dev/null' TERM; trap 't=1; kill -s HUP $p 2>/dev/null' HUP; trap - EXIT; "
        "w child $p; t=1; while [ \"$t\" ]; do t=; wait $p; done; wait $p; w code $?")
# Names the pane's shell would take for its own (or refuse): an environment holding one, or a name that
# is no shell name at all (bash's exported functions, BASH_FUNC_f%%), is started under the Python wrapper.
# The gated pane (the resident launcher's, issue 27: the pane starts while the launch's commit is written).
# ``/bin/sh -c GATED WRAPPER.py DIR ENVFILE ENV MV FLOCK TMUX SOCKET NONCE -- CMD...``: the shell first
# waits for a shared ``flock`` on ``DIR/gate.NONCE``, which the launcher holds (exclusive) from before
# it starts the pane until the commit landed; the kernel releases it when the launcher dies. Then it
# goes on only if ``DIR/go.NONCE`` exists, which the launcher writes before it unlocks, and only once
# the commit landed; without it (a refused commit, a launcher that died) the pane kills itself (its
# session, ``pending~NONCE``, goes with it) having started nothing and written nothing. The nonce is
# the launch's own: a pane of an earlier attempt at the same execution id never sees a later go. From
# ``handle`` on it is ``PANE``, the very text.
GATE = ('{ "$5" -s 4; } 4< "$1/gate.$8" 2>/dev/null; '
        '[ -f "$1/go.$8" ] || exec "$6" -S "$7" kill-pane -t "$TMUX_PANE"; '
        'a=$1 b=$2 g=$3 i=$4; shift 9; set -- "$a" "$b" "$g" "$i" -- "$@"; ')
GATED = GATE + PANE
PENDING = "pending~"  # a session's name until its go: "~" is in no execution id (ids.py), so none answers for one
SHELL_OWN = frozenset(("IFS", "PS1", "PS2", "PS4", "OPTIND", "OPTARG", "PPID", "ENV", "LINENO", "d", "e", "c", "s",
                       "r", "v", "m", "p", "t"))
USE_GATE = False  # set by the resident launcher: its shell panes start gated, ahead of the commit (GATED)
USE_SHELL_PANE = False  # set by the resident launcher (resident.py); gw run alone keeps the Python wrapper
# (the shell pane needs env and mv found, and probed once: a cost a process that launches once would pay each time)


def shell_env(env: dict[str, str]) -> bytes | None:
    """``env`` as the pane's shell reads it (``export NAME='VALUE'`` lines), or None when a name is not
    a plain shell name the shell leaves alone."""
    if not shell_names(env):
        return None
    lines = []
    for name, value in env.items():
        lines.append(f"export {name}='" + value.replace("'", "'\\''") + "'\n")
    return "".join(lines).encode("utf-8", "surrogateescape")


# The resident launcher checks tmux once a socket, not once a launch (issue 27: a tmux client fewer on
# the way to the agent): afterwards ``new-session`` is the check, whose refusal (no tmux any more, a
# server that does not answer) is recorded ``failed`` and answered with exit 5, the launch's commit
# made; a plain ``gw run`` checks before it records anything, as it always did.
CHECK_ONCE = False
_ANSWERED: set[str] = set()
_TOOLS: list[tuple[str, str] | None] = []


def _which(program: str) -> str | None:
    """``program`` on this process's PATH (an empty entry as ``.``), for the pane's own tools."""
    return next((p for p in (os.path.join(d or ".", program) for d in os.get_exec_path())
                 if os.access(p, os.X_OK) and not os.path.isdir(p)), None)


def shell_tools() -> tuple[str, str] | None:
    """The absolute paths of ``env`` (one that knows ``--default-signal``: GNU coreutils 8.31 or later)
    and ``mv`` the shell pane runs, or None (then the Python wrapper): found once a process."""
    if not _TOOLS:
        found = None
        env, mv = _which("env"), _which("mv")
        if env and mv:
            import subprocess  # once a launcher's life, never on gw run's own way

            try:
                probe = subprocess.run([env, "--default-signal", "--", "true"], capture_output=True, timeout=10)
                found = (env, mv) if probe.returncode == 0 else None
            except (OSError, subprocess.TimeoutExpired):
                found = None
        _TOOLS.append(found)
    return _TOOLS[0]


_GATE_TOOL: list[str | None] = []


def gate_tool() -> str | None:
    """The absolute path of util-linux ``flock``, the gated pane's wait (``GATED``), or None (then the
    pane starts after the commit, as before): found once a process."""
    if not _GATE_TOOL:
        _GATE_TOOL.append(_which("flock"))
    return _GATE_TOOL[0]


def shell_names(names: Iterable[str]) -> bool:
    """Can the pane's shell hold an environment of these names exactly (``shell_env``)?"""
    # (an ASCII identifier is exactly [A-Za-z_][A-Za-z0-9_]*, checked in C: a launch's environment holds
    # dozens of names, and a character-by-character check cost milliseconds of the launcher's path)
    return all(name.isascii() and name.isidentifier() and name not in SHELL_OWN for name in names)


class Gate:
    """A pane started ahead of its launch's commit, waiting on its gate (``Tmux.pend``)."""

    def __init__(self, name: str, nonce: str, folder: str, argv: Sequence[str], lock: int, client: int,
                 output: int, env_file: str) -> None:
        self.name, self.nonce, self.folder, self.argv = name, nonce, folder, list(argv)
        self.session = PENDING + nonce
        self.lock, self.client, self.output, self.env_file = lock, client, output, env_file
        self.gate = os.path.join(folder, f"gate.{nonce}")
        self.go = os.path.join(folder, f"go.{nonce}")
        self.done: tuple[int, str] | None = None

    def wait_client(self, timeout: float = 30.0) -> tuple[int, str]:
        """The ``tmux new-session`` client's exit code and output (the pane's pid, or tmux's error); a
        client that has not ended in ``timeout`` seconds (a server that does not answer) is killed, and
        answers as a failure, as ``run_tool``'s tmux calls do."""
        if self.done is None:
            import select

            chunks = []
            poller = select.poll()
            poller.register(self.output, select.POLLIN)
            deadline = time.monotonic() + timeout
            try:
                while True:
                    if not poller.poll(max(0, int((deadline - time.monotonic()) * 1000))):
                        os.kill(self.client, 9)  # SIGKILL
                        chunks.append(b"tmux did not answer in %d s" % timeout)
                        break
                    chunk = os.read(self.output, 65536)
                    if not chunk:
                        break
                    chunks.append(chunk)
            finally:
                os.close(self.output)
                status = os.waitpid(self.client, 0)[1]
            self.done = (os.waitstatus_to_exitcode(status), b"".join(chunks).decode("utf-8", "replace"))
        return self.done

    def unlock(self) -> None:
        if self.lock >= 0:
            os.close(self.lock)  # the flock goes with the descriptor (the tmux client never had it)
            self.lock = -1


def _executable(program: str, path: str | None, cwd: str) -> bool:
    """Can the kernel start ``program`` (found on ``path``, the agent's PATH, as ``env`` finds it): an
    executable file, and a ``#!`` interpreter that is one too. The shell pane could only report such a
    failure as env's exit code 126 or 127; the Python wrapper reports it as ``failed``, so a command
    that fails this goes to the wrapper."""
    if "/" in program:
        found = os.path.join(cwd, program)
    else:
        found = next((p for p in (os.path.join(d or ".", program) for d in (path if path is not None else os.defpath)
                                  .split(os.pathsep)) if os.access(p, os.X_OK) and os.path.isfile(p)), "")
    if not found or not os.path.isfile(found) or not os.access(found, os.X_OK):
        return False
    try:
        with open(found, "rb") as read:
            head = read.read(256)
    except OSError:
        return False
    if not head.startswith(b"#!"):
        return True
    words = head[2:].split(b"\n", 1)[0].split()
    return bool(words) and os.path.isfile(words[0]) and os.access(words[0], os.X_OK)


def socket_path(repo: Repository, configured: str | None = None) -> str:
    """``GW_TMUX_SOCKET``, else the ``tmux_socket`` setting (relative: to the top level), else the default."""
    given = os.environ.get("GW_TMUX_SOCKET") or configured
    if given:
        return os.path.join(repo.toplevel or repo.common_dir, given)  # an absolute path stays as it is
    path = os.path.join(repo.common_dir, "gitwork", "tmux", "sock")
    if len(path.encode()) <= SOCKET_MAX:
        return path
    from ..hashing import sha1_hex  # not hashlib: OpenSSL's load, on gw run's way to the agent

    digest = sha1_hex(os.path.abspath(repo.common_dir).encode())[:16]
    return os.path.join("/tmp", f"gw-tmux-{os.getuid()}", digest, "sock")


class Tmux:
    kind = "tmux"

    def __init__(self, repo: Repository, socket: str | None = None) -> None:
        self.repo = repo
        self.socket = socket_path(repo, socket)
        self.config = os.path.join(os.path.dirname(self.socket), "tmux.conf")
        self._running: set[str] | None = None  # see prefetch()
        self._fresh: str | None = None  # a shell pane this object just saw start its agent (see status())

    def _tmux(self, *args: str) -> Completed:
        try:
            return run_tool(("tmux", "-S", self.socket, "-f", self.config, *args), timeout=30)
        except FileNotFoundError as exc:
            raise Invalid("the tmux backend needs tmux, and it is not installed or not on PATH "
                          "(apt-get install tmux, or --backend subprocess)") from exc
        except Exception as exc:
            import subprocess  # only now: gw run starts its agent without importing subprocess

            if isinstance(exc, subprocess.TimeoutExpired):
                raise Invalid(f"tmux on {self.socket} did not answer in 30 s") from exc
            raise

    def check(self) -> None:
        """tmux runs, and gitwork's server (when there is one) answers a command.

        One tmux process, not two, on the way to the agent's first line: a server that answers
        ``list-sessions`` says tmux runs; ``-V`` is asked only when there is no server to ask."""
        if CHECK_ONCE and self.socket in _ANSWERED:
            return
        if os.path.exists(self.socket):
            listed = self._tmux("list-sessions", "-F", "#{session_name}")
            if listed.returncode == 0:
                _ANSWERED.add(self.socket)
                return
            if not _no_server(listed.err):
                raise Invalid(f"gitwork's tmux server on {self.socket} does not answer: {one_line(listed.err)}")
        done = self._tmux("-V")
        if done.returncode != 0:
            raise Invalid(f"tmux does not run: {one_line(done.err)}")
        _ANSWERED.add(self.socket)

    def _prepare(self, name: str) -> str:
        """The server's folder and configuration, and the execution's folder (returned)."""
        os.makedirs(os.path.dirname(self.socket), mode=0o700, exist_ok=True)
        if not os.path.exists(self.config):
            from ..fsutil import write_atomic

            write_atomic(self.config, CONFIG, fsync=False)
        folder = os.path.join(executions_dir(self.repo), name)
        os.makedirs(folder, exist_ok=True)
        return folder

    def pend(self, name: str, argv: Sequence[str], names: Iterable[str], path: str | None, cwd: str) -> Gate | None:
        """Start the pane of execution ``name`` before its launch's commit, gated (``GATED``): its tmux
        client spawned, not waited for, so that tmux and the pane's shell start while the commit is
        written. None when the gated shell pane does not apply (the resident launcher's shell pane off,
        no ``flock``, an environment of ``names`` the shell cannot hold, a command the kernel cannot
        start: those start after the commit, as before). ``go`` (after the commit) or ``abort``."""
        tools = shell_tools() if USE_SHELL_PANE and USE_GATE else None
        flock = gate_tool() if tools is not None else None
        if tools is None or flock is None or not shell_names(names) or not _executable(argv[0], path, cwd):
            return None
        import fcntl

        from ..gitcmd import _close_inherited, _default_signals, _program
        from ..store import crash_point
        from . import wrapper

        try:
            program = _program("tmux", os.environ)
        except FileNotFoundError:
            return None  # (no tmux on the caller's PATH: started after the commit, which records it failed)
        crash_point("before-tmux")
        folder = self._prepare(name)
        nonce = os.urandom(8).hex()
        lock = os.open(os.path.join(folder, f"gate.{nonce}"), os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        try:
            fcntl.flock(lock, fcntl.LOCK_EX)
            env_file = os.path.join(folder, f"{wrapper.ENV_FILE}.{os.getpid()}")
            cmd = ("tmux", "-S", self.socket, "-f", self.config, "new-session", "-d", "-P", "-F", "#{pane_pid}", "-s",
                   PENDING + nonce, "-c", cwd, "-x", "200", "-y", "50", "--", "/bin/sh", "-c", GATED,
                   os.path.abspath(wrapper.__file__), folder, env_file, *tools, flock, program, self.socket, nonce,
                   "--", *argv)
            out_r, out_w = os.pipe()
            try:
                actions = [(os.POSIX_SPAWN_OPEN, 0, os.devnull, os.O_RDONLY, 0), (os.POSIX_SPAWN_DUP2, out_w, 1),
                           (os.POSIX_SPAWN_DUP2, out_w, 2), *_close_inherited((out_r, out_w))]
                client = os.posix_spawn(program, cmd, dict(os.environ), file_actions=actions,
                                        setsigdef=_default_signals())
            except BaseException:
                os.close(out_r)
                raise
            finally:
                os.close(out_w)
        except BaseException:
            os.close(lock)
            raise
        crash_point("after-new-session")
        return Gate(name, nonce, folder, argv, lock, client, out_r, env_file)

    def abort(self, gate: Gate) -> None:
        """The launch's commit was refused (or failed): the pane is let go without its ``go`` (it kills
        itself, starting nothing) and its session is killed here too, so it is gone when this returns."""
        gate.unlock()
        code, _out = gate.wait_client()
        if code == 0:
            self._tmux("kill-session", "-t", f"={gate.session}")
        from . import wrapper

        wrapper.remove(gate.env_file)
        wrapper.remove(gate.gate)

    def _ready(self, gate: Gate, env: dict[str, str]) -> tuple[int, bytes]:
        """Everything before a gated pane's go: its environment written, its shell seen running (the
        pane's pid and the marker ``survivors`` finds it by), ``go`` written (the gate still locked)."""
        from . import wrapper

        text = shell_env(env)
        if text is None:  # (names were checked by pend: only a caller that changed them gets here)
            raise Invalid(f"tmux could not start {gate.argv[0]}: its environment changed after the gate")
        wrapper._write_file(gate.env_file, text, 0o600)
        code, out = gate.wait_client()
        pid = int(out.strip()) if code == 0 and out.strip().isdigit() else 0
        marker = os.path.abspath(wrapper.__file__).encode()
        # The pane's shell must be one that ``survivors`` finds (its command line: the marker and the folder)
        # before go exists: a launcher that dies after go leaves a pane a retry kills, never one it misses.
        if not _shell_seen(pid, marker):
            raise Invalid(f"tmux could not start {gate.argv[0]}: "
                          + (one_line(out) if code != 0 else "its pane's shell did not start"))
        with open(gate.go, "x"):
            pass
        return pid, marker

    def go(self, gate: Gate, env: dict[str, str]) -> tuple[str, bool]:
        """``start`` for a pane ``pend`` started, once the launch's commit landed: its environment
        written, ``go`` written, the gate unlocked; the session renamed to the execution's id only then
        (it never answers for the id before its go). Started once the shell wrote ``child``, as
        ``_start_shell``."""
        from ..store import crash_point
        from . import wrapper

        try:
            pid, marker = self._ready(gate, env)
        except BaseException:
            self.abort(gate)  # no go written: the pane starts nothing
            raise
        gate.unlock()
        crash_point("after-go")
        deadline = time.monotonic() + 10.0
        rounds = 0
        folder = gate.folder
        delay = 0.0003
        while not any(os.path.exists(os.path.join(folder, file)) for file in wrapper.STARTED):
            rounds += 1
            if time.monotonic() > deadline or (rounds % 16 == 0 and not _runs(pid, marker)):
                started = False
                break  # the pane's shell is gone without a word (killed): status() answers from tmux
            time.sleep(delay)  # (the agent runs by now or soon: this wait is the answer's, not the agent's)
            delay = min(delay * 1.5, 0.003)
        else:
            started = True
        # Renamed once its agent started (a tmux client of its own, which would otherwise compete with the
        # agent's start for the CPU); a session that could not be renamed keeps answering by its own name.
        renamed = self._tmux("rename-session", "-t", f"={gate.session}", gate.name)
        handle = gate.name if renamed.returncode == 0 else gate.session
        if started:
            self._fresh = handle
            wrapper.remove(gate.gate)  # the gate first: a gate without its go says nothing could start
            wrapper.remove(gate.go)
        wrapper.remove(gate.env_file)
        return handle, True

    def sweep(self, name: str) -> None:
        """Kill the pending sessions of execution ``name`` (one per ``gate.NONCE`` in its folder): a gated
        pane whose launcher died after its go, before it renamed the session. Whoever settles the
        execution as gone calls this once it has killed what ran of it (``run.probe``)."""
        try:
            names = os.listdir(os.path.join(executions_dir(self.repo), name))
        except FileNotFoundError:
            return
        for file in names:
            if file.startswith("gate."):
                self._tmux("kill-session", "-t", f"={PENDING}{file[5:]}")

    def start(self, name: str, argv: Sequence[str], env: dict[str, str], cwd: str) -> tuple[str, bool]:
        folder = self._prepare(name)
        # The environment goes through a 0600 file the wrapper reads and removes: never `-e NAME=VALUE`
        # words, which a tmux client's command line (readable in /proc) would show, and which tmux
        # refuses above about 16 KiB. The wrapper is started by its path: the pane has the tmux
        # server's environment, which need not find gitwork.
        from . import wrapper

        tools = shell_tools() if USE_SHELL_PANE else None
        text = shell_env(env) if tools is not None and _executable(argv[0], env.get("PATH"), cwd) else None
        if text is not None and tools is not None:
            return self._start_shell(name, argv, text, cwd, folder, tools)
        env_file = wrapper.write_env(folder, env)
        done = self._tmux("new-session", "-d", "-s", name, "-c", cwd, "-x", "200", "-y", "50", "--",
                          *wrapper.argv(folder, env_file, argv))
        if done.returncode != 0:
            wrapper.remove(env_file)
            if "duplicate session" in done.err:
                return name, False
            raise Invalid(f"tmux could not start {argv[0]}: {one_line(done.err)}")
        wait_started(folder, lambda: self._tmux("has-session", "-t", f"={name}").returncode != 0)
        wrapper.remove(env_file)  # read and removed by the wrapper, unless it never got that far
        return name, True

    def _start_shell(self, name: str, argv: Sequence[str], text: bytes, cwd: str, folder: str,
                     tools: tuple[str, str]) -> tuple[str, bool]:
        """``start`` through the shell pane (``PANE``): started once the shell wrote ``child``, or ``failed``
        when it could not (or the pane's shell is gone before either)."""
        from . import wrapper

        env_file = os.path.join(folder, f"{wrapper.ENV_FILE}.{os.getpid()}")
        wrapper._write_file(env_file, text, 0o600)
        marker = os.path.abspath(wrapper.__file__)
        done = self._tmux("new-session", "-d", "-P", "-F", "#{pane_pid}", "-s", name, "-c", cwd, "-x", "200", "-y",
                          "50", "--", "/bin/sh", "-c", PANE, marker, folder, env_file, *tools, "--", *argv)
        if done.returncode != 0:
            wrapper.remove(env_file)
            if "duplicate session" in done.err:
                return name, False
            raise Invalid(f"tmux could not start {argv[0]}: {one_line(done.err)}")
        pid = int(done.out.strip() or 0)
        deadline = time.monotonic() + 10.0
        rounds = 0
        while not any(os.path.exists(os.path.join(folder, file)) for file in wrapper.STARTED):
            rounds += 1
            if time.monotonic() > deadline or (rounds % 64 == 0 and not _runs(pid, marker.encode())):
                break  # the pane's shell is gone without a word (killed): status() answers from tmux
            time.sleep(0.0005)
        else:
            self._fresh = name
        wrapper.remove(env_file)
        return name, True

    def prefetch(self) -> None:
        """Ask the server once for every live pane, so that ``status`` of a running session needs no
        tmux call of its own (the coordinator's pass over many executions); the rest are asked alone."""
        done = self._tmux("list-panes", "-a", "-F", "#{session_name} #{pane_dead}")
        if done.returncode == 0:
            self._running = {line[:-2] for line in done.out.splitlines() if line.endswith(" 0")}
        elif _no_server(done.err):
            self._running = set()
        else:
            raise Invalid(f"gitwork's tmux server on {self.socket} does not answer: {one_line(done.err)}")

    def status(self, name: str, handle: str) -> tuple[str, object]:
        ended = outcome(os.path.join(executions_dir(self.repo), name))
        if ended is not None:
            return ended
        if (self._running is not None and handle in self._running) or handle == self._fresh:
            # (a shell pane whose agent has started, no code written yet: running, as the pane's own
            # process still is; no tmux client between the agent's start and `running` recorded)
            return "running", None
        # tmux marks a pane dead at end-of-file on its terminal, which can come a moment before it has
        # reaped the process and knows the status: ask again, briefly, rather than record no code.
        deadline = time.monotonic() + 2.0
        while True:
            done = self._tmux("list-panes", "-t", f"={handle}:", "-F", "#{pane_dead}:#{pane_dead_status}:#{pane_dead_signal}")
            if done.returncode != 0:
                return "gone", None  # no server, or no such session: nothing of it is running
            dead, code, signal = ((done.out.splitlines() or ["0::"])[0].split(":") + ["", ""])[:3]
            if dead != "1":
                return "running", None
            folder = os.path.join(executions_dir(self.repo), name)
            ended = outcome(folder)  # (written just before the pane's process exited)
            if ended is not None:
                return ended
            if any(os.path.exists(os.path.join(folder, file)) for file in ("handle", "child")):
                # The pane's wrapper (or shell) ran and died without writing a code (killed alone, or
                # hung up): its agent may have started and run on, orphaned. Not an exit: "gone", so
                # whoever settles it kills what still runs of it before it is said lost (run.probe).
                return "gone", None
            if code.strip().lstrip("-").isdigit():
                return "exited", int(code)
            if signal.strip().isdigit():
                return "exited", 128 + int(signal)  # as a shell reports a process a signal ended
            if time.monotonic() > deadline:
                return "exited", -1  # killed by a signal tmux did not report as a status
            time.sleep(0.02)

    def kill(self, name: str, handle: str) -> None:
        self._tmux("kill-session", "-t", f"={handle}")

    def send_text(self, name: str, handle: str, text: str) -> None:
        self._check(self._tmux("send-keys", "-t", f"={handle}:", "-l", "--", text), handle)

    def send_keys(self, name: str, handle: str, keys: Sequence[str]) -> None:
        self._check(self._tmux("send-keys", "-t", f"={handle}:", "--", *keys), handle)

    def capture(self, name: str, handle: str, lines: int | None = None) -> str:
        done = self._tmux("capture-pane", "-p", "-J", "-t", f"={handle}:", "-S", "-")
        self._check(done, handle)
        rows = [row.rstrip() for row in done.out.splitlines() if not row.startswith("Pane is dead (")]  # tmux's note
        while rows and not rows[-1]:  # the empty rows below the last output
            rows.pop()
        return "".join(f"{row}\n" for row in (rows[-lines:] if lines else rows))

    def attach_argv(self, name: str, handle: str) -> list[str]:
        return ["tmux", "-S", self.socket, "attach-session", "-t", f"={handle}"]

    def prompt(self, name: str, handle: str, text: str, timeout: float) -> None:
        """Type ``text`` and Enter, then wait until the pane is back at a prompt (``prompt.py``)."""
        from .prompt import PaneWatch, wait_until

        before = self.capture(name, handle)
        self.send_text(name, handle, text)
        self.send_keys(name, handle, ["Enter"])
        wait_until(PaneWatch(lambda: self.capture(name, handle), before),
                   lambda: self.status(name, handle)[0] != "running", name, timeout)

    def release(self, name: str, handle: str) -> None:
        """Detach without killing: the session goes on running on gitwork's server (``gw attach`` still
        reaches it), but no longer stays behind once its agent exits (``remain-on-exit`` off)."""
        self._check(self._tmux("set-option", "-w", "-t", f"={handle}:", "remain-on-exit", "off"), handle)

    def _check(self, done: Completed, handle: str) -> None:
        if done.returncode != 0:
            raise Invalid(f"tmux session {handle} is not there: {one_line(done.err)}")


def _shell_seen(pid: int, marker: bytes, wait: float = 10.0) -> bool:
    """Wait (``wait`` seconds at most) until the gated pane ``pid`` is seen running its shell, or about
    to (``_runs``); False when it died first or was never seen. The answer is the last look itself:
    a second read after the loop once caught the pane inside its ``execve`` (the fork's ``tmux`` command
    line seen, then the empty one between the two programs) and failed a launch whose shell was
    starting (the fresh-clone CI, test_launcher_gate, under load)."""
    deadline = time.monotonic() + wait
    delay = 0.0002  # (it has mostly started while the commit was written: then no wait at all)
    while pid:
        if _runs(pid, marker):
            return True
        if not _alive(pid) or time.monotonic() >= deadline:
            return False
        time.sleep(delay)
        delay = min(delay * 1.5, 0.002)  # a loaded machine: fewer looks, not a busier launcher
    return False


def _runs(pid: int, marker: bytes) -> bool:
    """Does process ``pid`` still run the shell pane (its command line holds ``marker``), or is it about
    to: tmux's fork of the pane, which has not yet exec'd the shell, still carries the server's command
    line (``tmux ...``), and inside ``execve`` the command line reads empty (the new program's is not
    set up yet). Under load the first gap outlasted the launch's first look, which then took the pane
    for gone and answered before the agent started (the fresh-clone CI, test_launcher); the second
    failed a gated launch (test_launcher_gate)."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as read:
            argv = read.read().split(b"\0")
    except OSError:
        return False
    seen = _pane_stage(argv, marker)
    return seen == "shell" or (seen == "starting" and _alive(pid))


def _pane_stage(argv: list[bytes], marker: bytes) -> str:
    """What a pane's command line (``/proc/PID/cmdline`` split on NUL) says of its shell: ``shell``
    (it runs, with ``marker``), ``starting`` (tmux's fork before its ``execve``, or inside it, where
    the command line reads empty), or ``other``."""
    if marker in argv:
        return "shell"
    return "starting" if argv == [b""] or os.path.basename(argv[0]).startswith(b"tmux") else "other"


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat", "rb") as read:
            return read.read().rsplit(b")", 1)[1].split()[0] != b"Z"
    except OSError:
        return False


def _no_server(err: str) -> bool:
    # ("server exited unexpectedly": one asked while it was exiting, as right after a kill-server)
    return "no server running" in err or "error connecting" in err or "server exited unexpectedly" in err
