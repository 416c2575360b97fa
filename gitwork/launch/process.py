"""The ``subprocess`` backend: for machines without tmux, and CI.

Each execution runs ``python -m gitwork.launch.wrapper`` in its own session (so its own process
group: ``kill`` ends the agent and everything it started), output to ``DIR/output.log``, stdin from
the FIFO ``DIR/stdin``. The handle is ``PID@START`` (the kernel's start time of the wrapper, from
``/proc``), so a reused pid is never taken for the execution.
"""

from __future__ import annotations

import os
import time

from ..errors import Invalid
from . import wrapper as _wrapper
from .paths import executions_dir
from .wrapper import outcome, start_time, wait_started, write_env

__all__ = ["Subprocess", "alive", "start_time"]

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Sequence

    from ..store import Repository


def alive(pid: int, start: str | None) -> bool:
    return start is not None and start_time(pid) == start


class Subprocess:
    kind = "subprocess"

    def __init__(self, repo: Repository) -> None:
        self.repo = repo
        self.root = executions_dir(repo)

    def folder(self, name: str) -> str:
        return os.path.join(self.root, name)

    def check(self) -> None:
        if not os.path.isdir("/proc/self"):
            raise Invalid("the subprocess backend needs /proc (Linux)")

    def start(self, name: str, argv: Sequence[str], env: dict[str, str], cwd: str) -> tuple[str, bool]:
        folder = self.folder(name)
        os.makedirs(folder, exist_ok=True)
        try:
            os.mkdir(os.path.join(folder, "started"))  # the atomic create-if-absent of this backend
        except FileExistsError:
            return self._wait_handle(folder), False
        fifo = os.path.join(folder, "stdin")
        if not os.path.exists(fifo):
            os.mkfifo(fifo, 0o600)
        env_file = write_env(folder, env)  # the agent's environment: a 0600 file the wrapper reads and removes
        import subprocess  # only to start one: not on every launch verb's start

        with open(os.path.join(folder, "output.log"), "ab") as log:
            proc = subprocess.Popen(_wrapper.argv(folder, env_file, argv),
                                    stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, cwd=cwd,
                                    env={k: v for k, v in os.environ.items() if k != "GW_CRASH_AT"},
                                    start_new_session=True, close_fds=True)
        from ..store import crash_point

        crash_point("after-fork")  # the wrapper writes its own handle before it starts the agent
        handle = f"{proc.pid}@{start_time(proc.pid) or 0}"
        wait_started(folder, lambda: proc.poll() is not None)
        _wrapper.remove(env_file)  # read and removed by the wrapper, unless it never got that far
        from ..fsutil import write_atomic

        write_atomic(os.path.join(folder, "handle"), handle, fsync=False)
        return handle, True

    def _wait_handle(self, folder: str) -> str:
        """Another launcher made ``started``: its handle follows at once, unless it died in between
        (then the wrapper, if it was forked, is found by its command line)."""
        deadline = time.monotonic() + 2.0
        while True:
            try:
                with open(os.path.join(folder, "handle")) as read:
                    return read.read().strip()
            except FileNotFoundError:
                if time.monotonic() > deadline:
                    return self.find(os.path.basename(folder)) or "0@0"  # never started: status() says gone
                time.sleep(0.01)

    def find(self, name: str) -> str | None:
        """The handle of execution ``name``'s wrapper when its ``handle`` file is missing (its launcher
        was killed between the fork and the write, and the wrapper before it wrote its own): found by
        its command line in /proc; None when no such process runs."""
        for group in _wrapper.survivors(self.folder(name)):
            start = start_time(group)
            if start is not None:
                return f"{group}@{start}"
        return None

    @staticmethod
    def _split(handle: str) -> tuple[int, str]:
        pid, _, start = handle.partition("@")
        return int(pid), start

    def status(self, name: str, handle: str) -> tuple[str, object]:
        ended = outcome(self.folder(name))
        if ended is not None:
            return ended
        pid, start = self._split(handle)
        return ("running", None) if pid and alive(pid, start) else ("gone", None)

    def kill(self, name: str, handle: str) -> None:
        pid, start = self._split(handle)
        if not pid or not alive(pid, start):
            return
        import signal  # here: its enums cost every launch verb's start-up (gw run imports this module)

        for sig, wait in ((signal.SIGTERM, 2.0), (signal.SIGKILL, 2.0)):
            try:
                os.killpg(pid, sig)
                if sig == signal.SIGTERM:
                    os.killpg(pid, signal.SIGCONT)  # a paused (SIGSTOP) agent hears TERM only once continued
            except ProcessLookupError:
                return
            deadline = time.monotonic() + wait
            while alive(pid, start) and time.monotonic() < deadline:
                time.sleep(0.01)
            if not alive(pid, start):
                return

    def send_text(self, name: str, handle: str, text: str) -> None:
        fifo = os.path.join(self.folder(name), "stdin")
        try:
            fd = os.open(fifo, os.O_WRONLY | os.O_NONBLOCK)
        except OSError as exc:
            raise Invalid(f"execution {name} takes no input now ({exc.strerror})") from exc
        try:
            os.write(fd, text.encode())
        finally:
            os.close(fd)

    def send_keys(self, name: str, handle: str, keys: Sequence[str]) -> None:
        named = {"Enter": "\n", "Tab": "\t", "C-d": "\x04"}
        self.send_text(name, handle, "".join(named.get(k, k) for k in keys))

    def capture(self, name: str, handle: str, lines: int | None = None) -> str:
        try:
            with open(os.path.join(self.folder(name), "output.log"), "rb") as log:
                text = log.read().decode("utf-8", "replace")
        except FileNotFoundError:
            return ""
        rows = text.splitlines()
        return "\n".join(rows[-lines:] if lines else rows) + ("\n" if rows else "")

    def attach_argv(self, name: str, handle: str) -> list[str]:
        return ["tail", "-f", os.path.join(self.folder(name), "output.log")]

    def prompt(self, name: str, handle: str, text: str, timeout: float) -> None:
        """Write ``text`` and a newline to the agent's stdin, then wait until it has read all of it and
        is reading its stdin again (``prompt.py``)."""
        from .prompt import reading, unread, wait_until

        fifo = os.path.join(self.folder(name), "stdin")
        group, _start = self._split(handle)
        self.send_text(name, handle, text + "\n")
        wait_until(lambda: unread(fifo) == 0 and reading(group, fifo),
                   lambda: self.status(name, handle)[0] != "running", name, timeout)

    def release(self, name: str, handle: str) -> None:
        """Detach without killing: the wrapper and its agent run on in their own session; nothing here
        holds them (their output still goes to ``output.log``, their code to the folder)."""
