"""Entry point of ``gw``: the fast path for hot verbs, typer for everything else."""

from __future__ import annotations

import os
import sys

TYPE_CHECKING = False  # typing costs ~15 ms to import; annotations are strings anyway
if TYPE_CHECKING:
    from typing import Any

# Sub-command groups: their verb is two words (`gw session start`), so options moved from before the
# verb go after both words.
GROUPS = frozenset(("session", "remote", "hooks", "dep", "delegation", "receipts", "cache"))
NO_PAGER = frozenset(("--no-pager", "-P"))  # git's spellings


def hoist(args: list[str]) -> list[str]:
    """git's habit: options before the verb, ``gw -C DIR --json --as NAME VERB ...``, are moved after the
    verb, where every command declares them (``-C``, ``--json``, ``--as``). Several ``-C`` combine as in git
    (``-C a -C b`` is ``a/b``). The verb's own ``-C`` after it, if any, still wins (the last one).
    ``--no-pager``/``-P`` (git's global option, only before the verb) is taken out: see :func:`no_pager`."""
    directory: str | None = None
    flags: list[str] = []
    index = 0
    while index < len(args):
        arg = args[index]
        if arg in NO_PAGER:
            index += 1
        elif arg == "-C" and index + 1 < len(args):
            directory = os.path.join(directory, args[index + 1]) if directory else args[index + 1]
            index += 2
        elif arg.startswith("-C") and len(arg) > 2:
            directory = os.path.join(directory, arg[2:]) if directory else arg[2:]
            index += 1
        elif arg == "--json":
            flags.append(arg)
            index += 1
        elif arg == "--as" and index + 1 < len(args):
            flags += args[index:index + 2]
            index += 2
        elif arg.startswith("--as="):
            flags.append(arg)
            index += 1
        else:
            break
    rest = args[index:]
    if index == 0 or not rest or rest[0].startswith("-"):
        # nothing before the verb, or no verb: the parser reports it as usual
        return [arg for arg in args[:index] if arg not in NO_PAGER] + rest
    moved = flags + (["-C", directory] if directory is not None else [])
    at = 2 if rest[0] in GROUPS and len(rest) > 1 and not rest[1].startswith("-") else 1
    return rest[:at] + moved + rest[at:]


def no_pager(args: list[str]) -> bool:
    """``gw --no-pager VERB`` (or ``-P``): git's global option, before the verb (among the other global
    options)."""
    for arg in args:
        if arg in NO_PAGER:
            return True
        if not arg.startswith("-") or arg == "--":
            return False
    return False


def directory(args: list[str]) -> str | None:
    """The last ``-C DIR`` of a hoisted command line (where ``core.pager`` is read)."""
    found = None
    for index, arg in enumerate(args[:-1]):
        if arg == "-C":
            found = args[index + 1]
    return found


def json_fields(args: list[str]) -> list[str] | None:
    """gh's field selection, ``--json=item,title,status``: a plain ``--json`` for the parser, and the
    names for the printer (``output.FIELDS``). Only with ``=``: ``--json`` alone is a flag, so that
    ``gw show --json ID`` keeps meaning what it means. ``None`` if a name is empty."""
    from . import output

    out: list[str] = []
    for index, arg in enumerate(args):
        if arg == "--":
            return out + args[index:]
        if arg.startswith("--json="):
            names = [name.strip() for name in arg[len("--json="):].split(",")]
            if not all(names):
                return None
            output.FIELDS = names
            arg = "--json"
        out.append(arg)
    return out


def jq_option(args: list[str]) -> tuple[list[str], str | None]:
    """gh's ``--jq EXPR`` (or ``--jq=EXPR``): the command line with ``--json`` in its place, and EXPR.
    ``None`` for EXPR when there is no ``--jq``; a ``--jq`` without EXPR is left for the parser."""
    for index, arg in enumerate(args):
        if arg == "--":
            break
        if arg == "--jq" and index + 1 < len(args):
            return args[:index] + ["--json"] + args[index + 2:], args[index + 1]
        if arg.startswith("--jq="):
            return args[:index] + ["--json"] + args[index + 1:], arg[len("--jq="):]
    return args, None


# bd's and gh's verbs, for the same gitwork verb (docs/everyday.md, "Coming from bd or gh").
ALIASES = {"close": "done", "create": "new", "update": "edit", "view": "show", "comment": "msg"}
# Words that are not verbs, and the verb that does what they mean (not the nearest spelling).
MEANINGS = {"assign": "claim ID (or edit ID --owner NAME)", "take": "claim ID", "start": "claim ID",
            "grab": "claim --next", "next": "claim --next", "finish": "done ID", "resolve": "done ID",
            "complete": "done ID", "delete": "cancel ID", "rm": "cancel ID", "remove": "cancel ID",
            "ls": "list", "todo": "ready", "info": "show ID", "get": "show ID", "comments": "thread ID",
            "reply": "msg ID TEXT --reply-to N", "unclaim": "release ID", "drop": "release ID",
            "deps": "dep tree ID", "dep-tree": "dep tree ID", "stats": "summary",
            "mine": "list --mine", "label": "edit ID --add-label L", "assignee": "list --holder NAME"}


def _FIELDS(word: str) -> bool:
    """``item,title,status``: names separated by commas (so a message text after --json is not one)."""
    names = word.split(",")
    return len(names) > 1 and all(name.replace("_", "").isalpha() for name in names)


def habits(args: list[str]) -> list[str] | str:
    """bd/gh habits: an alias becomes its verb; ``--json a,b`` and ``--assignee`` and a word that is not a
    verb get a one-line hint instead (returned as a string: exit 2)."""
    words = args[:next((n for n, arg in enumerate(args) if arg == "--"), len(args))]
    for index, arg in enumerate(words):
        if arg == "--json" and index + 1 < len(words) and _FIELDS(words[index + 1]):
            return f"--json takes fields only with '=': --json={words[index + 1]} (gh's --json {words[index + 1]})"
        if arg == "--assignee" or arg.startswith("--assignee="):
            return "no option --assignee: gitwork calls the assignee the holder: --holder NAME (or --mine)"
    if args and args[0] in MEANINGS:
        return f"no command {args[0]!r}: did you mean gw {MEANINGS[args[0]]}?"
    if args and args[0] in ALIASES:
        return [ALIASES[args[0]], *args[1:]]
    return args


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if args == ["--version"]:
        from .. import __version__

        sys.stdout.write(f"gw {__version__}\n")
        return 0
    printer: Any = sys.modules.get("gitwork.cli.output")
    if printer is not None:  # called again in one process (tests): no field selection left over
        printer.FIELDS = None
        printer.PAGED = 0
    fields = any(arg.startswith("--json=") for arg in args)
    if fields:
        selected = json_fields(args)
        if selected is None:
            from ..errors import UsageError
            from .output import fail

            return fail(UsageError("--json=FIELDS takes names separated by commas, e.g. --json=item,title,status"),
                        True)
        args = selected
    args, expression = jq_option(args)
    paging = not no_pager(args) and sys.stdout.isatty()
    args = hoist(args)
    habit = habits(args)
    if isinstance(habit, str):
        from ..errors import UsageError
        from .output import fail

        return fail(UsageError(habit), "--json" in args)
    args = habit
    if args[:1] == ["run"] and argv is None and expression is None and not fields:
        # This clone's resident launcher (gw launcher), when one listens, runs this very command line
        # (taken apart as above: no field selection, no jq) in its warm process; nothing more of gw is
        # imported here (launch/client.py). Without one, gw run launches itself.
        from ..launch.client import handoff

        code = handoff(args)
        if code is not None:
            return code
    pager = None
    if paging:  # a terminal: git's pager rules (cli/pager.py), imported only here
        from . import output
        from . import pager as pagers

        pager = pagers.start(args, directory(args))
        if pager is not None:
            output.PAGED = pager.width
    try:
        if expression is not None:
            from .jq import run_filtered

            return run_filtered(expression, args, _run)
        return _run(args)
    finally:
        if pager is not None:
            pager.finish()


def hoist_completion() -> None:
    """A shell completing ``gw -C DIR show w-<TAB>``: the words it hands typer (bash: ``COMP_WORDS``;
    zsh, fish: ``_TYPER_COMPLETE_ARGS``) get the same hoisting as a command line, so the item ids come
    from DIR. Only when the word being completed is not the verb itself (the count of words, and so
    ``COMP_CWORD``, is unchanged by the reordering)."""
    import shlex

    for name in ("COMP_WORDS", "_TYPER_COMPLETE_ARGS"):
        value = os.environ.get(name) or ""
        try:
            words = shlex.split(value) if value else []
        except ValueError:
            continue
        moved = hoist(words[1:])
        if len(words) > 1 and moved != words[1:] and (value.endswith(" ") or moved[-1] == words[-1]):
            os.environ[name] = shlex.join([words[0], *moved]) + (" " if value.endswith(" ") else "")


def complete_items() -> bool:
    """bash asking for an item id (``gw claim w-<TAB>``): answered from the work plane without typer, one
    id per line as typer prints them; ``False`` for anything else (typer answers)."""
    import shlex

    from .fast import _find

    try:
        words = shlex.split(os.environ.get("COMP_WORDS", ""))[1:]
        at = int(os.environ.get("COMP_CWORD", "")) - 1
    except ValueError:
        return False
    row, taken = _find(words)
    if row is None or at < taken or (at < len(words) and words[at].startswith("-")):
        return False
    positionals, options = row[1], row[2]
    index, count, path = taken, 0, None
    while index < at:
        word = words[index]
        spec = options.get(word)
        if spec is not None and spec[1] not in ("flag", "off"):
            path = words[index + 1] if spec[0] == "path" and index + 1 < len(words) else path
            index += 2
            continue
        count += 0 if word.startswith("-") else 1
        index += 1
    if count < len(positionals):
        name = positionals[count][0]
    elif positionals and positionals[-1][2]:
        name = positionals[-1][0]
    else:
        return False
    if name != "item":
        return False
    incomplete = words[at] if at < len(words) else ""
    try:
        from ..reports import item_ids
        from ..workplane import Workplane

        with Workplane(path) as plane:
            found = item_ids(plane, incomplete)
    except Exception:  # completion must never print a traceback into the user's shell
        found = []
    sys.stdout.write("".join(f"{item}\n" for item in found))
    return True


def _run(args: list[str]) -> int:
    if "_GW_COMPLETE" in os.environ:
        hoist_completion()
        if os.environ["_GW_COMPLETE"] == "complete_bash" and complete_items():
            return 0
    if "_GW_COMPLETE" not in os.environ:  # a shell asking for completions goes to typer
        from .fast import run

        code = run(args)
        if code is not None:
            return code
    from .app import run_app

    return run_app(args)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
