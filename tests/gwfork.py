"""A fork server for the tests' ``gw`` child processes (issue 26: the suite near 3 minutes on 2 cores).

``run_gw`` starts ``python -m gitwork`` about 1,300 times a run; each start pays the interpreter and the
imports every command makes (30-50 ms of CPU) before gw does anything. The server below is one
``python`` per test worker that imports those modules once and then, for each request, forks: the
child is a real, separate process (its own pid, working directory, environment, stdin, stdout and
stderr, real git underneath) that runs ``gitwork``'s ``__main__`` exactly as ``python -m gitwork``
does, and exits with its exit status. Nothing is mocked: only the start-up is shared.

What a forked child does not reproduce, and when ``run_gw`` therefore starts a real interpreter:
an environment whose interpreter settings differ from the server's (``PYTHON*``, the locale), read by
Python only at start. The start-up itself (the fast path's imports, ``python -m gitwork`` as installed)
is tested by the tests that spawn ``python -m gitwork`` themselves (test_fast_path, test_habits, ...).

The child is a grandchild of the server: a first fork per request waits for the second (the one that
runs gw) and sends its exit status back, so the server never blocks and serves requests concurrently.
"""

from __future__ import annotations

import atexit
import json
import locale
import os
import shutil
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

# The modules the everyday commands (init, new, list, claim, sync) import, imported once by the server. None
# of the heavy ones the fast path must not import (typer, rich, ruamel): a command that needs them imports
# them in its child, as it would; the tests of the fast path's imports start their own interpreters.
PRELOAD = ("gitwork.cli.main", "gitwork.cli.fast", "gitwork.cli.actions", "gitwork.cli.listing", "gitwork.workplane",
           "gitwork.engine", "gitwork.ops.table", "gitwork.queries", "gitwork.cache", "gitwork.sync",
           "gitwork.workplane_messages", "gitwork.conflicts", "gitwork.pathleases", "gitwork.pushturn",
           "gitwork.hookcheck")  # the server hook's module: conftest.run_module forks `python -m gitwork.statecheck`

# Read by the interpreter at start only: a request whose values differ gets a real `python -m gitwork`.
START_KEYS = ("LANG", "LC_ALL", "LC_CTYPE")

SERVER = r"""
import json, os, runpy, socket, sys
import importlib
for name in sys.argv[2].split(","):
    importlib.import_module(name)
sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
sock.bind(sys.argv[1] + ".tmp")
sock.listen(64)
os.rename(sys.argv[1] + ".tmp", sys.argv[1])  # the path appears once the server accepts
sock.settimeout(1.0)
parent = os.getppid()


def reap():  # the per-request forks that ended (waited for, so their CPU counts as the tests' own)
    try:
        while os.waitpid(-1, os.WNOHANG)[0]:
            pass
    except ChildProcessError:
        pass


while True:
    reap()
    try:
        conn, _ = sock.accept()
    except socket.timeout:
        if os.getppid() != parent:  # the test worker is gone: so is its server
            os._exit(0)
        continue
    if os.fork():
        conn.close()
        continue
    # the per-request fork: receives the request and its three descriptors, forks gw, reports its status
    sock.close()
    conn.settimeout(None)
    data, fds, _, _ = socket.recv_fds(conn, 1 << 16, 3)  # the descriptors come with the first bytes
    while len(data) < 8:
        data += conn.recv(8)
    size = int.from_bytes(data[:8], "big")
    while len(data) < 8 + size:  # a stream: a long request (a 64 KiB argument) comes in pieces
        data += conn.recv(1 << 20)
    request = json.loads(data[8:])
    pid = os.fork()
    if pid == 0:
        conn.close()
        for target, fd in enumerate(fds):
            os.dup2(fd, target)
        os.closerange(3, 65536)  # as subprocess does (close_fds): gw inherits nothing but 0, 1 and 2
        os.chdir(request["cwd"])
        os.environ.clear()
        os.environ.update(request["env"])
        sys.path[0] = os.getcwd()  # what `python -m` puts first
        sys.argv = ["-m", *request["args"]]
        runpy.run_module(request.get("module", "gitwork"), run_name="__main__", alter_sys=True)
        sys.exit(0)
    for fd in fds:
        os.close(fd)
    try:
        conn.sendall(b"%d\n" % pid)
    except OSError:  # the caller is gone: gw runs on, as a child of a killed test would
        pass
    _, status, usage = os.wait4(pid, 0)
    try:  # the exit status, and gw's CPU (with its reaped children's) for the tests' per-test CPU record
        conn.sendall(b"%d %.6f\n" % (os.waitstatus_to_exitcode(status), usage.ru_utime + usage.ru_stime))
    except OSError:  # the caller gave up (its timeout) and killed gw
        pass
    os._exit(0)
"""


class ForkServer:
    """One per test process, started at the first request, gone with the process."""

    def __init__(self) -> None:
        self.proc: subprocess.Popen[bytes] | None = None
        self.path = ""
        self.start_env: dict[str, str] = {}
        self.lock = threading.Lock()
        self.last_pid = 0  # the last gw child's (for tests/test_gwfork.py)
        # CPU seconds (user + system) of every gw child that ended, its own reaped children included: they
        # are the server's grandchildren, so this process's RUSAGE_CHILDREN counts them only when the server
        # ends; conftest's GW_TEST_CPU record adds this to see them per test.
        self.child_cpu = 0.0

    def start(self) -> None:
        import tempfile

        folder = tempfile.mkdtemp(prefix="gwfork-")
        self.path = os.path.join(folder, "s")
        self.start_env = dict(os.environ)
        self.proc = subprocess.Popen([sys.executable, "-c", SERVER, self.path, ",".join(PRELOAD)],
                                     stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, cwd=folder)
        deadline = time.monotonic() + 30
        while not os.path.exists(self.path):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"the gw fork server did not start (exit {self.proc.poll()})")
            time.sleep(0.005)

    def serves(self, env: Mapping[str, str]) -> bool:
        """Whether a forked child would see what a fresh interpreter with ``env`` sees at start."""
        keys = {key for key in (*env, *self.start_env) if key.startswith("PYTHON") or key in START_KEYS}
        return all(env.get(key) == self.start_env.get(key) for key in keys)

    def run(self, args: Sequence[str], cwd: Path | str, env: Mapping[str, str], input: str | None,
            timeout: float, module: str = "gitwork") -> subprocess.CompletedProcess[str] | None:
        """``python -m MODULE *args`` (``gitwork`` unless told, or one of its modules such as
        ``gitwork.statecheck``) as ``subprocess.run(..., capture_output=True, text=True)`` runs it, or None
        when a forked child would differ (then the caller starts a real interpreter)."""
        with self.lock:
            if self.proc is None or self.proc.poll() is not None:
                self.start()
        if not self.serves(env):
            return None
        encoding = locale.getpreferredencoding(False)
        out_r, out_w = os.pipe()
        err_r, err_w = os.pipe()
        in_r, in_w = os.pipe() if input is not None else (os.dup(0), -1)
        conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            conn.connect(self.path)
            request = {"module": module, "args": list(args), "cwd": os.path.abspath(cwd), "env": dict(env)}
            data = json.dumps(request).encode()
            socket.send_fds(conn, [len(data).to_bytes(8, "big")], [in_r, out_w, err_w])
            conn.sendall(data)
        finally:
            for fd in (in_r, out_w, err_w):
                os.close(fd)
        chunks: dict[int, list[bytes]] = {out_r: [], err_r: []}

        def drain(fd: int) -> None:
            with open(fd, "rb", buffering=0, closefd=True) as stream:
                while block := stream.read(65536):
                    chunks[fd].append(block)

        readers = [threading.Thread(target=drain, args=(fd,), daemon=True) for fd in (out_r, err_r)]
        for reader in readers:
            reader.start()
        if in_w >= 0:
            def feed() -> None:
                with open(in_w, "wb", closefd=True) as stream:
                    try:
                        stream.write((input or "").encode(encoding))
                    except BrokenPipeError:  # gw exited without reading it all, as subprocess allows
                        pass

            threading.Thread(target=feed, daemon=True).start()
        replies = conn.makefile("rb")
        deadline = time.monotonic() + timeout
        try:
            pid = self.last_pid = int(replies.readline())
            conn.settimeout(max(0.001, deadline - time.monotonic()))
            code_text, cpu_text = replies.readline().split()
            code = int(code_text)
            with self.lock:  # tests call run_gw from several threads
                self.child_cpu += float(cpu_text)
        except (socket.timeout, TimeoutError):
            os.kill(pid, 9)  # what subprocess.run does on a timeout: kill the child, then raise
            raise subprocess.TimeoutExpired([sys.executable, "-m", module, *args], timeout) from None
        finally:
            replies.close()
            conn.close()
        for reader in readers:  # as subprocess.run, until the pipes close (a child gw started may hold them)
            reader.join(max(0.0, deadline - time.monotonic()))
        if any(reader.is_alive() for reader in readers):
            raise subprocess.TimeoutExpired([sys.executable, "-m", module, *args], timeout)

        def text(fd: int) -> str:
            data = b"".join(chunks[fd]).decode(encoding)
            return data.replace("\r\n", "\n").replace("\r", "\n")  # text=True's universal newlines

        return subprocess.CompletedProcess([sys.executable, "-m", module, *args], code, text(out_r), text(err_r))


    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        if self.path:
            shutil.rmtree(os.path.dirname(self.path), ignore_errors=True)


SERVER_OF_THIS_PROCESS = ForkServer()
atexit.register(SERVER_OF_THIS_PROCESS.stop)
