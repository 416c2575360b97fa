"""A fast path for the verbs shell loops and agents call most, parsed without typer.

typer (with its bundled click and ``inspect``) costs ~70-100 ms per process on a small machine, more
than everything else a claim does. The verbs in ``fast_table.py`` are parsed here instead; that
table is generated from their typer declarations in ``app.py`` (``python -m gitwork.cli.fastgen``),
so no option is spelled twice, and each verb calls the same plain function in
``commands/<topic>.py`` that typer calls. Anything unusual (``--help``, an unknown option, a
malformed value, a bundled short option) falls through to typer, which owns the error messages.
``tests/test_fast_path.py`` checks the table is current and that both parsers build the same call
for every option of every fast verb.
"""

from __future__ import annotations

import os

from .fast_table import GROUPS, VERBS

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

_CONVERT = {"int": int, "float": float}


def parse(argv: list[str]) -> tuple[str, dict[str, Any]] | None:
    """Return ``(topic:function, keyword arguments)`` or ``None`` to let typer handle it."""
    verb = VERBS.get(argv[0]) if argv else None
    words = 1
    if verb is None and len(argv) > 1 and argv[0] in GROUPS:  # a group's verb: two words, `cache rebuild`
        verb, words = GROUPS[argv[0]].get(argv[1]), 2
    if verb is None:
        return None
    target, positionals, options, defaults, envvars = verb
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
            if kind == "flag":
                if eq:
                    return None
                kwargs[keyword] = True
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
                try:
                    kwargs[keyword] = _CONVERT[kind](value) if kind in _CONVERT else value
                except ValueError:
                    return None
        else:
            given.append(arg)
        index += 1
    if not _place(positionals, given, kwargs):
        return None
    for keyword, env in envvars.items():
        if kwargs[keyword] is None and os.environ.get(env):
            kind = next(k for word, k in options.values() if word == keyword)
            try:
                kwargs[keyword] = _CONVERT[kind](os.environ[env]) if kind in _CONVERT else os.environ[env]
            except ValueError:
                return None
    return target, kwargs


def _place(positionals: tuple[tuple[str, bool, bool], ...], given: list[str], kwargs: dict[str, Any]) -> bool:
    """Hand the words to the positionals as click does; ``False`` when their number does not fit.

    A ``many`` positional (the last, ``nargs=-1``) takes every remaining word as a list; absent, it is
    None (typer's value for an empty variadic argument), and required, it needs one word at least.
    """
    required = sum(1 for _name, needed, _many in positionals if needed)
    many = bool(positionals) and positionals[-1][2]
    if len(given) < required or (len(given) > len(positionals) and not many):
        return False
    for index, (name, _needed, variadic) in enumerate(positionals):
        if variadic:
            kwargs[name] = given[index:] or None
        else:
            kwargs[name] = given[index] if index < len(given) else None
    return True


def run(argv: list[str]) -> int | None:
    parsed = parse(argv)
    if parsed is None:
        return None
    target, kwargs = parsed
    topic, _, function = target.partition(":")
    import importlib

    from .actions import invoke

    module = importlib.import_module(f"{__package__}.commands.{topic}")
    as_json = bool(kwargs.pop("json"))
    path = kwargs.pop("path")
    agent = kwargs.pop("agent")
    return invoke(getattr(module, function), as_json=as_json, path=path, agent=agent, **kwargs)
