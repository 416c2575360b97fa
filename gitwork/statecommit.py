"""Reading a state commit: the one parser of what ``engine.commit_message`` and ``engine.land`` wrote.

A commit on the state ref has a fixed shape (format.md): line 1 the summary, line 3
``Command: {json}`` (the command document, read only from that place by
``engine.parse_command_from_message``, beside its writer), then one trailer per line; its author is
the acting identity and its author time the instant the command was decided at. ``gw log``, ``sync``
(replay, status), the arbiter's role check and the hooks read state commits only through
:func:`parse` / :func:`read`.
"""

from __future__ import annotations

from .engine import COMMAND_PREFIX, parse_command_from_message

TYPE_CHECKING = False  # typing costs ~15 ms to import; annotations are strings anyway
if TYPE_CHECKING:
    from typing import Any

    from .objects import Commit
    from .store import Store


class StateCommit:
    """One state commit, parsed: what a reader of the audit trail needs."""

    __slots__ = ("commit", "summary", "command", "trailers", "author", "time", "parents")

    def __init__(self, commit: str, summary: str, command: dict[str, Any] | None, trailers: dict[str, str],
                 author: str, time: int | None, parents: list[str]) -> None:
        self.commit, self.summary, self.command, self.trailers = commit, summary, command, trailers
        self.author, self.time, self.parents = author, time, parents

    @property
    def at(self) -> Any:
        """The author time as a UTC datetime (``None`` when the author line carries none)."""
        if self.time is None:
            return None
        from .clock import parse_instant_epoch

        return parse_instant_epoch(self.time)

    @property
    def parent(self) -> str | None:
        """The first parent (the state history is linear)."""
        return self.parents[0] if self.parents else None

    def __repr__(self) -> str:
        return f"StateCommit({self.commit[:12]}, {self.summary!r})"


def trailers_of(message: str) -> dict[str, str]:
    """The trailers of a state commit message: ``Key: value`` lines of its last paragraph."""
    trailers: dict[str, str] = {}
    _, _, rest = message.partition("\n")
    for line in rest.strip().split("\n\n")[-1].split("\n"):
        key, sep, value = line.partition(": ")
        if sep and key and " " not in key and not line.startswith(COMMAND_PREFIX):
            trailers[key] = value
    return trailers


def split_author(author: str) -> tuple[str, int | None]:
    """``Name <email> 1700000000 +0000`` -> (``Name <email>``, 1700000000); time ``None`` if absent."""
    parts = author.rsplit(" ", 2)
    if len(parts) == 3 and parts[1].lstrip("-").isdigit():
        return parts[0], int(parts[1])
    return author, None


def parse(commit: str, info: Commit) -> StateCommit:
    """Parse the commit ``commit`` whose decoded header and message are ``info``."""
    who, when = split_author(info.author)
    return StateCommit(commit, info.message.partition("\n")[0], parse_command_from_message(info.message),
                       trailers_of(info.message), who, when, list(info.parents))


def read(store: Store, commit: str) -> StateCommit:
    """Read and parse ``commit`` of ``store`` (parents end at git's shallow boundary, as ``git log``'s)."""
    info = store.snapshot(commit).info
    if info is None:
        from .errors import Corrupt

        raise Corrupt(f"{commit} is not a commit")
    return parse(commit, info)
