"""Where launch data lives on this machine (below the backends, which import nothing else here)."""

from __future__ import annotations

import os

TYPE_CHECKING = False
if TYPE_CHECKING:
    from ..store import Repository


def executions_dir(repo: Repository) -> str:
    """Each execution's folder: ``<git common dir>/gitwork/executions/<id>/`` (logs, exit code, stdin)."""
    return os.path.join(repo.common_dir, "gitwork", "executions")
