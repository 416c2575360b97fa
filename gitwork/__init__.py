"""gitwork: a work plane for humans and coding agents, kept on a git ref."""

from __future__ import annotations

__version__ = "0.1.0"
FORMAT_VERSION = 1
