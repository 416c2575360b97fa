"""``python -m gitwork.statecheck``: the name the state ref's pre-receive hook used to run.

There is one server-hook entry point, ``python -m gitwork.hookcheck pre-receive`` (installed by
``gw hooks install --server``): it runs every server check, the state ref's included
(:func:`gitwork.hookcheck.check_update`: no deletion, no non-fast-forward, append-only ``.log``
files, a state that parses, every commit exactly its command's replay: ``derive.py``). This module
only forwards to it, so a hook written before (``exec python -m gitwork.statecheck``) checks exactly what the installed one does.
"""

from __future__ import annotations

from .hookcheck import check_update
from .hookcheck import main as _hook_main

__all__ = ["check_update", "main"]


def main() -> int:
    """The pre-receive hook body (stdin: ``old new ref`` lines), as ``hookcheck pre-receive``."""
    return _hook_main(["pre-receive"])


if __name__ == "__main__":
    raise SystemExit(main())
