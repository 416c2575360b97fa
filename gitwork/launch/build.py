"""Which gitwork build is running, and the rule that an execution is acted on only by the build that
launched it (docs/launch.md, "One build").

A build is gw's version and the commit it was built from (``gw_commit``: stamped into the package at
build time by ``hatch_build.py``; for an editable install, the checkout's commit, asked of git; "release"
only for a package built without the stamp, docs/operations.md). ``gw run`` records it in the execution, and the coordinator in its lease: a
``gw run`` refuses to launch beside a live coordinator of another build, and neither a coordinator nor
a retry of ``gw run`` acts on an execution another build recorded. Exit 9, error kind ``build-mismatch``.
"""

from __future__ import annotations

import os

from .. import __version__
from ..errors import ExitCode, GwError

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any


def stamped() -> str | None:
    """The commit stamped into an installed package at build time (``hatch_build.py``), or None."""
    try:
        from .. import _build  # type: ignore[attr-defined]
    except ImportError:
        return None
    commit = getattr(_build, "COMMIT", None)
    return commit if isinstance(commit, str) and commit else None


def gw_commit() -> str | None:
    """The commit of gitwork's own source: stamped at build time into a wheel, else asked of git when it
    runs from a git checkout (an editable install, or the source tree itself)."""
    commit = stamped()
    if commit is not None:
        return commit
    here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    # gitwork's own checkout has its .git beside the package: an installed package without a stamp has
    # none, and asks no git process (one less process between `gw run` and the agent's first line).
    if not os.path.exists(os.path.join(os.path.dirname(here), ".git")):
        return None
    from ..gitcmd import run

    done = run(["-C", here, "rev-parse", "--show-toplevel", "HEAD"], check=False)
    lines = done.out.split("\n") if done.returncode == 0 else []
    # Only gitwork's own checkout: not some project repository a virtualenv happens to live in.
    if len(lines) >= 2 and os.path.realpath(os.path.join(lines[0], "gitwork")) == os.path.realpath(here):
        return lines[1].strip()
    return None


class BuildMismatch(GwError):
    code, kind = ExitCode.NEWER_FORMAT, "build-mismatch"


_CURRENT: dict[str, str] = {}


def current() -> dict[str, str]:
    """This process's build (computed once: it asks git for the checkout's commit)."""
    if not _CURRENT:
        _CURRENT.update(version=__version__, commit=gw_commit() or "release")
    return dict(_CURRENT)


def describe(build: Any) -> str:
    if not isinstance(build, dict):
        return "an unknown build"
    return f"gw {build.get('version')} (commit {str(build.get('commit'))[:12]})"


def same(build: Any) -> bool:
    mine = current()
    return isinstance(build, dict) and all(str(build.get(k)) == mine[k] for k in mine)


def require_same(build: Any, whose: str, **details: Any) -> None:
    """Raise :class:`BuildMismatch` unless ``build`` is this process's build."""
    if not same(build):
        raise BuildMismatch(f"{whose} is {describe(build)}, this gw is {describe(current())}: "
                            "run both from the same build", recorded=build, running=current(), **details)
