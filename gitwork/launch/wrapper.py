"""The tiny wrapper both backends run: ``python -m gitwork.launch.wrapper DIR -- CMD ARGS...``.

It runs the command (stdin from ``DIR/stdin``, a FIFO ``gw send`` writes to, when the subprocess
backend made one; else its own, a tmux pane's terminal), writes ``DIR/child`` once it has started,
and writes its exit code
to ``DIR/code`` (128+N for a signal), or ``DIR/failed`` when the command cannot start, each written
to a temporary file and renamed, so a reader sees the whole file or none. A wrapper killed with the
process group writes nothing: the execution is then stopped (if gw stopped it) or lost.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time

STARTED = ("child", "failed", "code")  # one of these exists once the command started, or could not


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


def _write(folder: str, name: str, text: str) -> None:
    tmp = os.path.join(folder, f".{name}.tmp")
    with open(tmp, "w") as out:
        out.write(text + "\n")
    os.replace(tmp, os.path.join(folder, name))


def main(argv: list[str]) -> int:
    folder, sep, command = argv[0], argv[1], argv[2:]
    assert sep == "--" and command
    fifo = os.path.join(folder, "stdin")
    # Read-write, so the agent never sees end-of-file between two `gw send`s, and opening never blocks.
    stdin = os.open(fifo, os.O_RDWR) if os.path.exists(fifo) else None
    try:
        child = subprocess.Popen(command, stdin=stdin)
    except OSError as exc:
        _write(folder, "failed", f"cannot start {command[0]}: {exc.strerror or exc}")
        return 127
    _write(folder, "child", str(child.pid))  # started: what the launcher waits for before it says "running"
    code = child.wait()
    _write(folder, "code", str(128 - code if code < 0 else code))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
