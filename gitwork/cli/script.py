#!/usr/bin/env python3
# The `gw` command as pip installs it (pyproject.toml, shared-scripts): the installer writes its own
# interpreter into the first line. Not pip's console-script wrapper, which imports `re` (with enum,
# functools and collections) to tidy argv[0] for Windows: ~7 ms of every gw call, more than gw's own
# start-up beyond the interpreter (docs/performance.md). A script is compiled at each start, so this
# one stays three statements; everything else lives in gitwork.cli.main, whose bytecode is cached.
import sys

from gitwork.cli.main import main

if __name__ == "__main__":
    sys.exit(main())
