"""Op implementations. Each module registers its ops with the engine when imported.

A command needs only its own op's module: ``load(name)`` imports just that one (start-up time is
most of what a ``gw claim`` costs), ``load()`` imports them all. ``OP_MODULES`` must name every op;
a test keeps it in step with what the modules register.
"""

from __future__ import annotations

import importlib

MODULES = ("items", "leases", "messages", "sessions", "executions", "delegations", "batch", "imports")
OP_MODULES = {
    **dict.fromkeys(("init", "new", "edit", "check", "decision", "done", "cancel", "reopen"), "items"),
    **dict.fromkeys(("claim", "takeover", "renew", "release", "revoke", "handoff"), "leases"),
    **dict.fromkeys(("msg", "ack", "ask", "decide"), "messages"),
    **dict.fromkeys(("session-start", "session-commit", "publish", "session-drop", "session-create",
                      "session-branch", "session-submit", "session-resume", "session-end"), "sessions"),
    **dict.fromkeys(("exec-reserve", "exec-state", "exec-stop", "coord-lease"), "executions"),
    **dict.fromkeys(("delegation-sent", "delegation-received"), "delegations"),
    "batch": "batch",
    **dict.fromkeys(("import", "shadow-report"), "imports"),
}


def load(name: str | None = None) -> None:
    module = OP_MODULES.get(name) if name else None
    for each in (module,) if module else MODULES:
        importlib.import_module(f"{__name__}.{each}")
