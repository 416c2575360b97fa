"""The resident launcher, ``gw launcher`` (issue 27: ``gw run`` to the agent's first line within 5x a bare
``tmux new-session``; docs/launch.md, "The resident launcher").

One process per clone listens on a Unix socket in the clone's git dir (``client.socket_path``: mode
0600 in a 0700 folder, so only the clone's owner reaches it; the peer's uid is checked besides). A
``gw run`` that finds it alive hands it the request (``client.py``) and prints its answer; the
launcher runs that very ``gw run`` in its own, warm process (imports done, the build known), as the
caller: the caller's working folder, its environment (so ``GW_AGENT``, ``--as``, the default identity
of the caller's terminal session, ``GW_TMUX_SOCKET``...) and its words, through the same ``main()``
an ordinary ``gw run`` goes through. Nothing of the launch differs: the same one state commit, the
same backend start, the same wrapper. The execution's ``launcher`` is this process (so a ``gw run``
that meets its ``launching`` record while it lives waits, 75, and settles it once it is dead).

Requests are served one at a time. Before each one the launcher checks that the caller's gw is this
very installation and that none of its files changed since it started (another build records another
``build``: then the caller launches itself, and this launcher exits, to be started again). A launch
that ends without ``running`` or ``failed`` recorded (an error between the reservation and the start)
is settled at once, as a retry would settle a dead ``gw run``'s, since this process lives on.

kill -9 of the launcher at any point of a launch leaves what a killed ``gw run`` leaves (the same
code, the same records): the caller sees no answer and runs the launch itself, as a retry, which
adopts a started agent or settles the reservation (tests/test_launcher.py).
"""

from __future__ import annotations

import io
import os
import sys

from .client import FALLBACK, MAGIC, common_dir, package, socket_path

TYPE_CHECKING = False
if TYPE_CHECKING:
    import socket
    from typing import Any


def _fingerprint() -> list[tuple[str, int, int]]:
    """What this process's code is: every module file of the package (and, for a checkout, git's HEAD
    and the ref it names, which the recorded build's commit comes from), with its mtime and size."""
    root = package()
    files = [os.path.join(folder, name) for folder, _dirs, names in os.walk(root) for name in names
             if name.endswith(".py")]
    checkout = os.path.join(os.path.dirname(root), ".git")
    if os.path.isdir(checkout):
        files += [os.path.join(checkout, "HEAD"), os.path.join(checkout, "packed-refs")]
        try:
            with open(os.path.join(checkout, "HEAD")) as read:
                head = read.read().strip()
            if head.startswith("ref: "):
                files.append(os.path.join(checkout, head[5:]))
        except OSError:
            pass
    out = []
    for path in sorted(files):
        try:
            stat = os.stat(path)
            out.append((path, stat.st_mtime_ns, stat.st_size))
        except OSError:
            out.append((path, 0, -1))
    return out


class _Output(io.StringIO):
    """A command's stdout or stderr, sent back whole to the caller (never a terminal: no pager, no colour)."""

    def isatty(self) -> bool:
        return False


class Launcher:
    """``main``: how gw runs a command line the caller's ``main()`` has already taken apart (``cli.fast.run``:
    its exit code, or None for one it leaves to typer, which the caller then runs itself), handed in by
    the CLI layer, which this one is below."""

    def __init__(self, common: str, main: Any) -> None:
        self.common = common
        self.main = main
        self.path = socket_path(common)
        self.code = _fingerprint()
        self.stopping = False
        self.busy = False
        self.served = 0

    def bind(self) -> socket.socket:
        """Take this clone's launcher lock (Held, 75, while another launcher has it) and listen."""
        import fcntl
        import socket

        from ..errors import Held

        folder = os.path.dirname(self.path)
        os.makedirs(folder, mode=0o700, exist_ok=True)
        self.lock = open(self.path + ".lock", "a")  # noqa: SIM115 - held (flock) for the process's life
        try:
            fcntl.flock(self.lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise Held(f"a launcher for this clone runs already (socket {self.path})", socket=self.path) from None
        try:
            os.unlink(self.path)  # a dead launcher's: the lock says none runs
        except FileNotFoundError:
            pass
        server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        old = os.umask(0o177)  # the socket is the owner's alone from the moment it exists
        try:
            server.bind(self.path)
        finally:
            os.umask(old)
        os.chmod(self.path, 0o600)
        server.listen(64)
        return server

    def serve(self, server: socket.socket, ready: Any = None) -> None:
        """Serve requests one at a time until SIGTERM/SIGINT (a request under way is finished first) or
        until this process's code changed."""
        import signal
        import socket

        from . import tmux

        # The shell pane (tmux.PANE: no Python start between the pane and the agent) is the default; its
        # shell waits for the agent and writes the code itself, as the Python wrapper does (tmux 3.3a
        # does not always report a quick exit's status). GW_LAUNCHER_SHELL_PANE=0 keeps the wrapper.
        # Its tools are found now, not on the first request's way.
        tmux.USE_SHELL_PANE = os.environ.get("GW_LAUNCHER_SHELL_PANE") != "0" and tmux.shell_tools() is not None
        tmux.CHECK_ONCE = True
        # Its shell panes start gated, while the launch's commit is written (GW_LAUNCHER_GATE=0: after it).
        tmux.USE_GATE = os.environ.get("GW_LAUNCHER_GATE") != "0" and tmux.gate_tool() is not None

        def stop(_signum: int, _frame: Any) -> None:
            self.stopping = True
            if not self.busy:
                raise SystemExit(0)

        try:
            signal.signal(signal.SIGTERM, stop)
            signal.signal(signal.SIGINT, stop)
            if ready is not None:
                ready()
            while not self.stopping:
                conn, _ = server.accept()
                self.busy = True
                try:
                    with conn:
                        self.handle(conn, socket)
                except OSError:
                    pass  # the caller went away: it runs the launch itself, as a retry
                finally:
                    self.busy = False
        except SystemExit:
            pass  # SIGTERM or Ctrl-C between two requests
        finally:
            self.close(server)

    def close(self, server: socket.socket) -> None:
        """Stop listening: the socket goes first (a ``gw run`` after this launches itself), then the lock."""
        try:
            os.unlink(self.path)  # ours: the lock kept every other launcher of this clone from binding it
        except FileNotFoundError:
            pass
        server.close()
        self.lock.close()

    def handle(self, conn: socket.socket, socket: Any) -> None:
        import struct

        pid, uid, _gid = struct.unpack("3i", conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, 12))
        if uid != os.getuid():
            return  # (the socket's mode keeps others out; this says so again)
        fields = _read_request(conn)
        if fields is None or fields[0] != MAGIC:
            return
        changed = _fingerprint() != self.code
        if (os.path.realpath(os.fsdecode(fields[1])) != os.path.realpath(package())
                or os.fsdecode(fields[2]) != self.common or changed):
            # Another installation, another clone, or this code changed since it was loaded: the caller
            # launches itself; a launcher whose code changed stops, to be started again from the new one.
            self.stopping = self.stopping or changed
            conn.sendall(b"%d\0" % FALLBACK + b"0\0" + b"0\0")
            return
        cwd = os.fsdecode(fields[3])
        count = int(fields[4])
        args = [os.fsdecode(word) for word in fields[5:5 + count]]
        env = {}
        for entry in fields[5 + count:]:
            name, _eq, value = entry.partition(b"=")
            env[name] = value
        code, out, err = self.run(args, cwd, env, pid)
        if code == FALLBACK:
            out = err = ""
        out_b, err_b = out.encode("utf-8", "surrogateescape"), err.encode("utf-8", "surrogateescape")
        conn.sendall(b"%d\0%d\0%d\0" % (code, len(out_b), len(err_b)) + out_b + err_b)
        self.served += 1

    def run(self, args: list[str], cwd: str, env: dict[bytes, bytes], caller: int) -> tuple[int, str, str]:
        """Run ``gw ARGS`` as the caller would have: its folder, its environment, its terminal session
        (the default identity's), output captured. ``(exit code, stdout, stderr)``."""
        from .. import config
        from . import run as launch

        saved_env, saved_cwd = dict(os.environb), os.getcwd()
        saved_out, saved_err = sys.stdout, sys.stderr
        out, err = _Output(), _Output()
        try:
            caller_sid = os.getsid(caller)
        except OSError:
            caller_sid = None
        code = 1
        try:
            os.environb.clear()
            os.environb.update(env)
            os.chdir(cwd)
            sys.stdout, sys.stderr = out, err
            config.CALLER_SESSION = caller_sid
            launch.IN_FLIGHT.clear()
            try:
                answer = self.main(args)
                code = FALLBACK if answer is None else answer
            except SystemExit as exc:
                code = exc.code if isinstance(exc.code, int) else 1
            finally:
                self.settle(launch)
        except OSError as exc:  # the caller's folder is gone, say
            err.write(f"gw: {exc}\n")
            code = 1
        finally:
            config.CALLER_SESSION = None
            sys.stdout, sys.stderr = saved_out, saved_err
            os.environb.clear()
            os.environb.update(saved_env)
            os.chdir(saved_cwd)
        return code, out.getvalue(), err.getvalue()

    def settle(self, launch: Any) -> None:
        """A reservation this request made and left ``reserved`` or ``launching`` (an error between the
        reservation and the start) is settled now, as a retry settles a dead ``gw run``'s: this process
        lives on, and would otherwise stand for a launch in progress (75) until it exits."""
        if not launch.IN_FLIGHT:
            return
        from ..workplane import Workplane

        try:
            with Workplane(None) as wp:
                for execution in sorted(launch.IN_FLIGHT):
                    record = launch.find(wp, execution)
                    if record is not None and record["state"] in ("reserved", "launching"):
                        launch.probe(wp, record, orphaned=True)
        except Exception as exc:  # a settling that fails leaves it to the next gw run (the launcher is not it)
            sys.stderr.write(f"gw launcher: could not settle {sorted(launch.IN_FLIGHT)}: {exc}\n")
        finally:
            launch.IN_FLIGHT.clear()


def _read_request(conn: socket.socket) -> list[bytes] | None:
    data = b""
    while b"\n" not in data:
        chunk = conn.recv(65536)
        if not chunk:
            return None
        data += chunk
    head, _, body = data.partition(b"\n")
    if not head.isdigit():
        return None
    size = int(head)
    while len(body) < size:
        chunk = conn.recv(max(65536, size - len(body)))
        if not chunk:
            return None
        body += chunk
    fields = body[:size].split(b"\0")
    return fields[:-1] if fields and fields[-1] == b"" else None


def listening(path: str) -> int | None:
    """The pid of the launcher listening on ``path`` (of this user), or None."""
    import socket
    import struct

    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as probe:
        try:
            probe.connect(path)
            pid, uid, _gid = struct.unpack("3i", probe.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, 12))
        except OSError:
            return None
    return pid if uid == os.getuid() else None


def launcher_common_dir(cwd: str) -> str:
    """The clone a launcher started in ``cwd`` serves (found as ``gw run``'s hand-over finds it)."""
    from ..errors import Invalid

    common = common_dir(cwd)
    if common is None:
        raise Invalid("gw launcher runs in a work tree of a git repository, without GIT_DIR and the like set")
    return common
