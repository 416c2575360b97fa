"""Entry point of ``gw``: the fast path for hot verbs, typer for everything else."""

from __future__ import annotations

import sys


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if args == ["--version"]:
        from .. import __version__

        sys.stdout.write(f"gw {__version__}\n")
        return 0
    from .fast import run

    code = run(args)
    if code is not None:
        return code
    from .app import run_app

    return run_app(args)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
