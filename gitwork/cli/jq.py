"""``--jq EXPR`` (gh's convention): the command's JSON output filtered by a jq expression.

The command runs as with ``--json`` (``main.jq_option`` puts it in place of ``--jq EXPR``); its one
JSON value is then handed to jq (the ``jq`` package, libjq's own bindings: the ``jq`` extra) and each
result printed on its own line as it is made (streamed, as jq does), a string raw and anything else
as compact JSON (``jq -r``'s output).
The expression is compiled before the command runs, so a malformed one changes nothing (exit 2).
Only a successful command's output is filtered: an error object is printed as it is, with the
command's exit code. ``--follow`` streams JSON lines as they land and is not filtered (exit 2).
"""

from __future__ import annotations

import contextlib
import io
import json
import sys

from ..errors import Invalid, UsageError

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, Callable


def compile_expression(expression: str) -> Any:
    try:
        import jq
    except ImportError as exc:
        raise UsageError("--jq needs the jq package: pip install 'gitwork[jq]' (or pipe --json to jq)") from exc
    try:
        return jq.compile(expression)
    except ValueError as exc:
        raise UsageError(f"--jq: {' '.join(str(exc).split())}") from exc


def run_filtered(expression: str, args: list[str], run: Callable[[list[str]], int]) -> int:
    from . import output

    as_json = True
    try:
        if "--follow" in args or "-f" in args:
            raise UsageError("--jq does not filter --follow (a stream of JSON lines): pipe --json to jq instead")
        program = compile_expression(expression)
    except UsageError as error:
        return output.fail(error, as_json)
    captured = io.StringIO()
    with contextlib.redirect_stdout(captured):
        code = run(args)
    text = captured.getvalue()
    if code != 0:
        sys.stdout.write(text)
        return code
    # Each result is printed as jq makes it, never all collected first: an expression with endless
    # output (``repeat(.)``) streams into ``| head`` as jq's does, in bounded memory.
    try:
        for result in program.input_text(text):
            sys.stdout.write((result if isinstance(result, str) else json.dumps(result, ensure_ascii=False)) + "\n")
        sys.stdout.flush()
    except ValueError as exc:  # the expression failed on this value (e.g. .title of an array)
        return output.fail(Invalid(f"--jq: {' '.join(str(exc).split())}"), False)
    except BrokenPipeError:  # the reader had enough (| head): not an error, and nothing more to print
        _discard_stdout()
    return 0


def _discard_stdout() -> None:
    """Point fd 1 at the null device: the interpreter's flush at exit then has nowhere to fail."""
    import os

    null = os.open(os.devnull, os.O_WRONLY)
    os.dup2(null, 1)
    os.close(null)
