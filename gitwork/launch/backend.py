"""The backend seam: where an execution's process lives on this machine (docs/launch.md).

A backend knows nothing about items or leases: it starts one named process (``start`` is an atomic
create-if-absent on the name, so two launchers of one execution never start two processes), and
answers for it by its handle. gitwork's launcher (``run.py``) records what it says.
"""

from __future__ import annotations

from ..errors import Invalid

TYPE_CHECKING = False  # typing costs ~15 ms to import; annotations are strings anyway
if TYPE_CHECKING:
    from typing import Protocol, Sequence

    from ..config import Settings
    from ..store import Repository

    class Backend(Protocol):
        """One kind of terminal or process host. ``status`` answers ``("running", None)``,
        ``("exited", code)``, ``("failed", reason)`` or ``("gone", None)`` (no such process: lost)."""

        kind: str

        def check(self) -> None: ...  # raise Invalid unless the backend itself answers

        def start(self, name: str, argv: Sequence[str], env: dict[str, str], cwd: str) -> tuple[str, bool]: ...
        # (handle, created): created is False when a process of that name existed already

        def send_text(self, name: str, handle: str, text: str) -> None: ...

        def send_keys(self, name: str, handle: str, keys: Sequence[str]) -> None: ...

        def capture(self, name: str, handle: str, lines: int | None = None) -> str: ...

        def status(self, name: str, handle: str) -> tuple[str, object]: ...

        def kill(self, name: str, handle: str) -> None: ...

        def attach_argv(self, name: str, handle: str) -> list[str]: ...

        def prompt(self, name: str, handle: str, text: str, timeout: float) -> None: ...
        # send a line, then wait until the agent is back at its prompt (launch/prompt.py says what that
        # is for each backend); Held on timeout, Illegal when the agent ended

        def release(self, name: str, handle: str) -> None: ...
        # detach without killing: the process runs on, gitwork stops answering for it

KINDS = ("tmux", "subprocess")  # a third (a JSON-RPC terminal server) is one more module and one more branch below


def get(kind: str, repo: Repository, settings: Settings | None = None) -> Backend:
    """The backend ``kind`` for ``repo``; ``settings`` gives the tmux socket (setting ``tmux_socket``)."""
    if kind == "tmux":
        from .tmux import Tmux

        return Tmux(repo, getattr(settings, "tmux_socket", None))
    if kind == "subprocess":
        from .process import Subprocess

        return Subprocess(repo)
    raise Invalid(f"unknown backend {kind[:40]!r}; known: {', '.join(KINDS)}")
