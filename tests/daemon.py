"""A real ``git daemon`` on 127.0.0.1 serving bare repositories, for the several-machines tests.

The daemon runs in its own process group so that stopping it also stops the per-connection
``upload-pack``/``receive-pack`` children it forks (a push in flight dies with it, which is what the
"daemon stopped mid-sync" tests need). It can be restarted on the same port so that a remote URL
recorded in a clone stays valid across the outage.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


_HELD: list[socket.socket] = []


def closed_port() -> int:
    """A port nobody listens on: bound and kept bound (never listening) until the process ends, so no
    other test's server can take it between this call and the connection that must be refused."""
    holder = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    holder.bind(("127.0.0.1", 0))
    _HELD.append(holder)
    return int(holder.getsockname()[1])


def accepts(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.5):
            return True
    except OSError:
        return False


def in_group(group: int) -> list[tuple[int, int]]:
    """The live processes of process group ``group``, as (pid, parent pid) (Linux: read from /proc)."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as stat:
                fields = stat.read().rpartition(b")")[2].split()
        except OSError:
            continue  # ended while we looked
        if int(fields[2]) == group and fields[0] != b"Z":  # after "pid (comm)": state, ppid, pgrp; not a zombie
            found.append((int(entry), int(fields[1])))
    return found


def commands(pids: list[int]) -> list[str]:
    """Each process's command line, for a message."""
    shown = []
    for pid in pids:
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as cmdline:
                shown.append(cmdline.read().replace(b"\0", b" ").decode(errors="replace").strip())
        except OSError:
            pass
    return shown


class GitDaemon:
    """``git daemon --enable=receive-pack --export-all`` over ``base``; ``url(name)`` for ``base/name.git``."""

    def __init__(self, base: Path, port: int | None = None) -> None:
        self.base = Path(base)
        self.port = port or free_port()
        self.proc: subprocess.Popen[bytes] | None = None
        self.log = self.base / f"daemon-{self.port}.log"

    def url(self, name: str) -> str:
        return f"git://127.0.0.1:{self.port}/{name}.git"

    def start(self, timeout: float = 20.0) -> None:
        assert self.proc is None, "daemon already running"
        deadline = time.monotonic() + timeout
        while True:
            with open(self.log, "ab") as log:
                self.proc = subprocess.Popen(
                    ["git", "daemon", "--enable=receive-pack", "--export-all", "--reuseaddr", "--informative-errors",
                     "--listen=127.0.0.1", f"--port={self.port}", f"--base-path={self.base}", str(self.base)],
                    stdout=log, stderr=log, stdin=subprocess.DEVNULL, start_new_session=True,
                )
            while time.monotonic() < deadline:
                if self.proc.poll() is not None:
                    break  # could not bind (port taken between probe and start, or TIME_WAIT): retry
                if accepts(self.port):
                    return
                time.sleep(0.05)
            else:
                self.stop()
                raise RuntimeError(f"git daemon did not accept connections on {self.port}: {self.log.read_text()}")
            self.proc = None
            if time.monotonic() >= deadline:
                raise RuntimeError(f"git daemon could not start on {self.port}: {self.log.read_text()}")
            time.sleep(0.2)

    def stop(self) -> None:
        """Stop the daemon and every connection it is serving (its whole process group)."""
        proc, self.proc = self.proc, None
        if proc is None:
            return
        for sig, wait in ((signal.SIGTERM, 3.0), (signal.SIGKILL, 10.0)):
            try:
                os.killpg(proc.pid, sig)  # the group we created with start_new_session, nothing else
            except ProcessLookupError:
                break
            try:
                proc.wait(timeout=wait)
                if sig is signal.SIGTERM:
                    # The listener is gone; make sure no forked child of ours is still serving.
                    try:
                        os.killpg(proc.pid, signal.SIGKILL)
                    except ProcessLookupError:
                        pass
                break
            except subprocess.TimeoutExpired:
                continue
        # Wait until the port really refuses, so "stopped" means stopped.
        deadline = time.monotonic() + 5
        while accepts(self.port) and time.monotonic() < deadline:
            time.sleep(0.05)

    def restart(self) -> None:
        self.stop()
        self.start()

    def settle(self, timeout: float = 60.0) -> None:
        """Wait (bounded) until the daemon serves no connection: no process of its group but the listener.

        A client killed mid-push leaves its server side (``receive-pack``, the hook) running until it
        notices; while it moves the pushed objects out of quarantine, ``git fsck`` can see a commit
        whose tree has not been moved yet. What a test checks on the repository is the state after."""
        assert self.proc is not None, "daemon not running"
        group = self.proc.pid
        deadline = time.monotonic() + timeout
        # `git daemon` (the group's leader) runs the listener `git-daemon` as its child; a connection is
        # served by a fork of the listener and what that starts.
        while serving := [pid for pid, parent in in_group(group) if pid != group and parent != group]:
            assert time.monotonic() < deadline, f"git daemon still serving after {timeout} s: {commands(serving)}"
            time.sleep(0.02)

    def __enter__(self) -> GitDaemon:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def bare_repo(base: Path, name: str) -> Path:
    path = Path(base) / f"{name}.git"
    path.mkdir(parents=True, exist_ok=True)
    subprocess.run(["git", "init", "-q", "--bare", str(path)], check=True)
    return path


@pytest.fixture
def git_daemon(tmp_path: Path) -> Iterator[GitDaemon]:
    """A running daemon over ``tmp_path/served`` (put bare repos there with :func:`bare_repo`)."""
    base = tmp_path / "served"
    base.mkdir()
    daemon = GitDaemon(base)
    daemon.start()
    try:
        yield daemon
    finally:
        daemon.stop()
