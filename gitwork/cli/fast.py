"""The fast path: every verb parsed without typer (issue 25; issue 10 began it with 13 hot verbs).

typer (with its bundled click and ``inspect``) costs ~70-100 ms per process on a small machine, more
than everything else a claim does. The verbs in ``fast_table.py`` are parsed here instead; that
table is generated from their typer declarations in ``app.py`` (``python -m gitwork.cli.fastgen``),
so no option is spelled twice, and each verb calls the same plain function in
``commands/<topic>.py`` that typer calls. ``--help`` is printed from ``fast_help.py``, generated
with it. Anything unusual (an unknown option, a malformed value, a bundled short option, a missing
required option) falls through to typer, which owns the error messages. ``tests/test_fast_path.py``
checks the tables are current, that every command has its row (or says why it is typer's), and that
both parsers build the same call for every option of every verb.
"""

from __future__ import annotations

import os

from .fast_table import GROUPS, VERBS

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

def parse(argv: list[str]) -> tuple[str, dict[str, Any]] | None:
    """Return ``(topic:function, keyword arguments)`` or ``None`` to let typer handle it."""
    verb, words = _find(argv)
    if verb is None:
        return None
    target, positionals, options, defaults, envvars, required = verb
    kwargs: dict[str, Any] = dict(defaults)
    given: list[str] = []
    args = argv[words:]
    index = 0
    while index < len(args):
        arg = args[index]
        if arg == "--":
            given.extend(args[index + 1 :])
            break
        if arg.startswith("-") and arg != "-":
            # click reads `--opt=value`; for a short option `-n=5` it would read the value "=5".
            name, eq, inline = arg.partition("=") if arg.startswith("--") else (arg, "", "")
            spec = options.get(name)
            if spec is None:
                return None
            keyword, kind = spec
            if kind in ("flag", "off"):
                if eq:
                    return None
                kwargs[keyword] = kind == "flag"
            else:
                if eq:
                    value = inline
                elif index + 1 < len(args) and not args[index + 1].startswith("--"):
                    index += 1
                    value = args[index]
                else:
                    return None
                if kind == "multi":  # repeatable: typer gives None, or the list in order
                    kwargs[keyword] = [*(kwargs[keyword] or []), value]
                    index += 1
                    continue
                converted = _convert(kind, value)
                if converted is None:
                    return None
                kwargs[keyword] = converted
        else:
            given.append(arg)
        index += 1
    if not _place(positionals, given, kwargs):
        return None
    for keyword, env in envvars.items():
        if kwargs[keyword] is None and os.environ.get(env):
            kind = next(k for word, k in options.values() if word == keyword)
            converted = _convert(kind, os.environ[env])
            if converted is None:
                return None
            kwargs[keyword] = converted
    if any(kwargs[keyword] is None for keyword in required):  # typer says which is missing
        return None
    return target, kwargs


def _find(argv: list[str]) -> tuple[tuple[Any, ...] | None, int]:
    """The row of the longest verb ``argv`` starts with (``serve token add``, ``cache rebuild``, ``claim``)
    and how many words it took."""
    for words in (3, 2):
        if len(argv) > words - 1:
            group: Any = GROUPS.get(" ".join(argv[:words - 1]))  # a generated table: {verb: row}
            if group is not None and argv[words - 1] in group:
                return group[argv[words - 1]], words
    return (VERBS.get(argv[0]) if argv else None), 1


def _convert(kind: str, value: str) -> Any:
    """A value of ``kind`` (fast_table.py's kinds); ``None`` when it is not one (typer then says why)."""
    if not kind.startswith(("int", "float")):
        return value
    low, _, high = kind[3:].partition("<=") if kind.startswith("int") else ("", "", "")
    try:
        number = float(value) if kind == "float" else int(value)
    except ValueError:
        return None
    if (low and number < int(low[2:])) or (high and number > int(high)):
        return None
    return number


def _place(positionals: tuple[tuple[str, bool, bool, str], ...], given: list[str], kwargs: dict[str, Any]) -> bool:
    """Hand the words to the positionals as click does; ``False`` when their number does not fit.

    A ``many`` positional (the last, ``nargs=-1``) takes every remaining word as a list; absent, it is
    None (typer's value for an empty variadic argument), and required, it needs one word at least.
    """
    required = sum(1 for _name, needed, _many, _kind in positionals if needed)
    many = bool(positionals) and positionals[-1][2]
    if len(given) < required or (len(given) > len(positionals) and not many):
        return False
    for index, (name, _needed, variadic, kind) in enumerate(positionals):
        if variadic:
            kwargs[name] = given[index:] or None
        elif index < len(given):
            kwargs[name] = _convert(kind, given[index])
            if kwargs[name] is None:
                return False
        else:
            kwargs[name] = None
    return True


def help_text(argv: list[str]) -> str | None:
    """``gw [WORDS...] --help`` (or ``-h``) of a command the app has: its stored help (fast_help.py)."""
    if not argv or argv[-1] not in ("--help", "-h"):
        return None
    from .fast_help import HELP

    return HELP.get(" ".join(argv[:-1]))


def run(argv: list[str]) -> int | None:
    text = help_text(argv)
    if text is not None:
        import sys

        sys.stdout.write(text)
        return 0
    parsed = parse(argv)
    if parsed is None:
        return None
    target, kwargs = parsed
    import importlib

    if target.startswith("plain:"):  # opens no work plane: called as it is, returns the exit code
        topic, _, function = target[len("plain:"):].partition(":")
        return int(getattr(importlib.import_module(f"{__package__}.commands.{topic}"), function)(**kwargs))
    topic, _, function = target.partition(":")
    from .actions import invoke

    module = importlib.import_module(f"{__package__}.commands.{topic}")
    as_json = bool(kwargs.pop("json"))
    path = kwargs.pop("path")
    agent = kwargs.pop("agent")
    return invoke(getattr(module, function), as_json=as_json, path=path, agent=agent, **kwargs)
