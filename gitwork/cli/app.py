"""The typer application: every verb, its options and help, declared once (in ``verbs/<topic>.py``, on the
app and with the helpers of ``declare.py``); this module gathers them and runs the app.

The fast path's table (``fast_table.py``) and help (``fast_help.py``) are generated from these declarations
(``python -m gitwork.cli.fastgen``), so an option is never spelled a second time.
"""

import functools
import os
import sys
from typing import Any

from .declare import app
from .verbs import items, launch, leases, ledger, messages, queue, serve, sessions, transfer  # noqa: F401  (registers the verbs)
from .verbs.peers import PEER_VERBS, _peer_target, peer_app  # noqa: F401  (docgen, fastgen)

__all__ = ["app", "peer_app", "run_app", "PEER_VERBS"]


@functools.lru_cache(maxsize=2)
def _command(peers: bool) -> Any:
    """The click command typer builds from the declarations (``peer_app()``'s or ``app``'s), once per process.
    Building it reads the signature and type hints of every verb (~0.13 s of CPU for ~80 commands); calling the
    ``typer.Typer`` itself rebuilds it on every call, which a process running several commands through
    ``main`` in turn (an embedding program, the tests' in-process ``gw``) paid each time. A click command
    keeps no state between invocations (each gets a new ``Context``)."""
    import typer

    return typer.main.get_command(peer_app() if peers else app)


def run_app(argv: list[str]) -> int:
    """Run the typer app. A usage error is reported like every other error (docs/exit-codes.md): one
    line on stderr and, with --json, one JSON error object on stdout; exit 2."""
    if os.environ.get("_GW_COMPLETE"):  # a shell asking for completions (gw completion SHELL)
        from typer._completion_classes import completion_init

        completion_init()
    try:
        result = _command(_peer_target(argv))(args=argv, prog_name="gw", standalone_mode=False)
    except SystemExit as exit_:
        code = exit_.code
        return code if isinstance(code, int) else (0 if code is None else 1)
    except Exception as exc:
        # click's ClickException family (UsageError, BadParameter, NoSuchOption...), vendored or not.
        if not (hasattr(exc, "exit_code") and hasattr(exc, "show")):
            raise
        if type(exc).__name__ == "NoArgsIsHelpError":  # `gw` or `gw session` alone: the help is the answer
            exc.show()
            return int(exc.exit_code)
        from ..errors import UsageError
        from .output import fail

        ctx = getattr(exc, "ctx", None)
        hint = f" (see '{ctx.command_path} -h')" if ctx is not None else ""
        message = exc.format_message()  # type: ignore[attr-defined]  # click's, by the hasattr test above
        return fail(UsageError(" ".join(str(message).split()) + hint), "--json" in argv)
    except KeyboardInterrupt:
        return 130
    return result if isinstance(result, int) else 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(run_app(sys.argv[1:]))
