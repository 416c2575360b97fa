"""A pager for long output on a terminal, by git's rules.

Only when stdout is a terminal (never when piped or redirected: scripts and agents read plain
output), only for the verbs that print listings (:data:`PAGED`), and never with ``gw --no-pager``.
The command is git's choice, with ``GW_PAGER`` first for gw alone: ``GW_PAGER``, ``GIT_PAGER``,
``core.pager`` (read with ``git config`` in the repository of ``-C``), ``PAGER``, else ``less``; an
empty one or ``cat`` means no pager. As git does, ``LESS=FRX`` (quit when it fits on one screen,
keep colours, leave the screen as it was) and ``LV=-c`` are set unless already set, and the command
runs through ``sh -c``, so ``PAGER="less -S"`` works. stdout, and stderr when it is the terminal too,
go into the pager; gw waits for it to exit before exiting itself.

Nothing here is imported unless stdout is a terminal (``main.py`` checks ``isatty`` first).
"""

from __future__ import annotations

import os
import subprocess
import sys

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Optional

# Verbs whose output can run past a screen. Mutations print one line; --follow streams (not paged).
PAGED = frozenset(("list", "ready", "search", "blocked", "stale", "summary", "show", "history", "log", "thread",
                   "inbox", "prime", "dep", "runs"))


def wanted(args: list[str]) -> bool:
    """Whether this command line's output should go through a pager (stdout is known to be a terminal)."""
    if not args or args[0] not in PAGED or os.environ.get("TERM") == "dumb":
        return False
    if args[0] == "thread" and ("--follow" in args or "-f" in args):
        return False
    return not any(arg in ("-h", "--help") for arg in args)


def command(directory: Optional[str]) -> Optional[str]:
    """git's choice of pager (``GW_PAGER`` first); ``None`` for none."""
    for name in ("GW_PAGER", "GIT_PAGER"):
        if name in os.environ:
            return _usable(os.environ[name])
    from .. import gitcmd
    from ..errors import GitFailed

    try:
        config = gitcmd.run(["config", "--get", "core.pager"], cwd=directory or None, timeout=10, check=False)
    except (OSError, GitFailed):
        config = None
    if config is not None and config.returncode == 0:
        return _usable(config.out.rstrip("\n"))
    if "PAGER" in os.environ:
        return _usable(os.environ["PAGER"])
    return "less"


_SHELL = frozenset("|&;<>()$`\\\"'*?[#~=%")


def _usable(pager: str) -> Optional[str]:
    """``None`` for no pager: empty, ``cat``, or a plain command whose program is not on PATH (git
    would print an error and lose the output; printing it unpaged is kinder). Shell syntax is trusted."""
    words = pager.split()
    if not words or words == ["cat"]:
        return None
    if not _SHELL.intersection(pager):
        import shutil

        if shutil.which(words[0]) is None:
            return None
    return pager


class Pager:
    """A running pager whose stdin is this process's stdout (and stderr, when that is a terminal)."""

    def __init__(self, process: subprocess.Popen[bytes], width: int) -> None:
        self.process = process
        self.width = width  # the terminal's, measured before stdout went into the pager

    def finish(self) -> None:
        """Flush what is left into the pager, let it see end of input, and wait until the person quits it.

        Afterwards fd 1 (and 2 if it was taken) point at /dev/null: anything printed later, such as
        the interpreter's flush at exit, has nowhere to go rather than breaking on a closed pipe.
        """
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except (BrokenPipeError, ValueError):  # the person quit the pager before the end
                pass
        null = os.open(os.devnull, os.O_WRONLY)
        os.dup2(null, 1)
        if self.took_stderr:
            os.dup2(null, 2)
        os.close(null)
        while True:
            try:
                self.process.wait()
                return
            except KeyboardInterrupt:  # Ctrl-C in less goes to both: the pager decides when to end
                continue

    took_stderr = False


def start(args: list[str], directory: Optional[str]) -> Optional[Pager]:
    """Start the pager for ``args`` if git's rules call for one; ``None`` if not (or it cannot start)."""
    if not wanted(args):
        return None
    pager = command(directory)
    if pager is None:
        return None
    env = dict(os.environ)
    env.setdefault("LESS", "FRX")
    env.setdefault("LV", "-c")
    try:
        process = subprocess.Popen(["sh", "-c", pager], stdin=subprocess.PIPE, env=env)
    except OSError:
        return None  # no shell: print as if there were no pager
    assert process.stdin is not None
    import shutil

    width = shutil.get_terminal_size().columns  # COLUMNS, the terminal's, or 80 when it says 0
    sys.stdout.flush()
    os.dup2(process.stdin.fileno(), 1)
    started = Pager(process, width)
    if sys.stderr.isatty():
        sys.stderr.flush()
        os.dup2(process.stdin.fileno(), 2)
        started.took_stderr = True
    process.stdin.close()  # fd 1 (and 2) now hold the pipe's only write ends
    return started
