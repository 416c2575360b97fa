"""The tiny wrapper the subprocess backend runs: ``python -m gitwork.launch.wrapper DIR -- CMD ARGS...``.

It runs the command (stdin from ``DIR/stdin``, a FIFO ``gw send`` writes to) and writes its exit code
to ``DIR/code`` (128+N for a signal), or ``DIR/failed`` when the command cannot start, each written
to a temporary file and renamed, so a reader sees the whole file or none. A wrapper killed with the
process group writes nothing: the execution is then stopped (if gw stopped it) or lost.
"""

from __future__ import annotations

import os
import subprocess
import sys


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
    stdin = os.open(fifo, os.O_RDWR) if os.path.exists(fifo) else subprocess.DEVNULL
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
