"""``prompt(text, timeout)``: type a line into an agent, then wait until it is back at its prompt.

"Back at its prompt" is each backend's own observation (docs/launch.md, "Prompting an agent"):

- **tmux**: the pane's text has changed since the line was sent, has then stayed the same for
  ``QUIET`` seconds, and its last non-empty row ends with a prompt marker (``MARKER``: ``$ # > % ❯``,
  or the ``GW_PROMPT_MARKER`` regular expression of the agent's own prompt).
- **subprocess**: everything sent is read (the FIFO holds no unread byte) and a process of the
  execution, whose stdin is that FIFO, is asleep reading it again (``/proc/PID/wchan`` in a pipe read),
  on two looks in a row.

Neither is a promise about the agent's intent: an agent that prints a prompt-like row and keeps working,
or that reads its input with ``poll`` rather than ``read``, is judged by what is observable. A timeout is
``Held`` (exit 75: not back yet, try again or look at it); an agent that ended is ``Illegal`` (exit 6).
"""

from __future__ import annotations

import os
import re
import time

from ..errors import Held, Illegal

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Callable

QUIET = 0.5  # seconds a pane must stay unchanged
POLL = 0.05
MARKER = r"[$#>%❯]\s*$"


def marker() -> re.Pattern[str]:
    return re.compile(os.environ.get("GW_PROMPT_MARKER") or MARKER)


def wait_until(back: Callable[[], bool], ended: Callable[[], bool], name: str, timeout: float) -> None:
    """Poll ``back()`` until it says yes (twice in a row, ``POLL`` apart), or raise."""
    deadline = time.monotonic() + max(0.0, timeout)
    streak = 0
    while True:
        if ended():
            raise Illegal(f"execution {name} ended before it came back to its prompt", execution=name)
        streak = streak + 1 if back() else 0
        if streak >= 2:
            return
        if time.monotonic() >= deadline:
            raise Held(f"execution {name} was not back at its prompt after {timeout:g}s", execution=name)
        time.sleep(POLL)


class PaneWatch:
    """tmux's rule: changed since the send, then quiet for ``QUIET`` seconds, ending in a prompt marker."""

    def __init__(self, capture: Callable[[], str], before: str) -> None:
        self.capture, self.before = capture, before
        self.last, self.since, self.changed = before, time.monotonic(), False
        self.marker = marker()

    def __call__(self) -> bool:
        now = self.capture()
        if now != self.last:
            self.last, self.since = now, time.monotonic()
        self.changed = self.changed or now != self.before
        rows = [row for row in now.splitlines() if row.strip()]
        return (self.changed and time.monotonic() - self.since >= QUIET and bool(rows)
                and bool(self.marker.search(rows[-1])))


def unread(fifo: str) -> int:
    """Bytes written to ``fifo`` that nobody has read yet (FIONREAD on a descriptor of our own)."""
    import array
    import fcntl
    import termios

    fd = os.open(fifo, os.O_RDWR | os.O_NONBLOCK)
    try:
        count = array.array("i", [0])
        fcntl.ioctl(fd, termios.FIONREAD, count)
        return int(count[0])
    finally:
        os.close(fd)


def reading(group: int, fifo: str) -> bool:
    """Is a process of process group ``group`` with ``fifo`` as its stdin asleep in a pipe read?"""
    target = os.path.realpath(fifo)
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            if os.getpgid(int(name)) != group:
                continue
            if os.path.realpath(os.readlink(f"/proc/{name}/fd/0")) != target:
                continue
            with open(f"/proc/{name}/wchan") as read:
                wchan = read.read()
        except (OSError, ValueError):
            continue
        if "pipe_read" in wchan or "pipe_wait" in wchan:
            return True
    return False
