"""Entry point of ``gw``."""

from __future__ import annotations

import sys


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    from .app import run_app

    return run_app(args)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
