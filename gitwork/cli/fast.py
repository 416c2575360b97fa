"""A fast path for the verbs shell loops call most (``claim``, ``renew``, ``release``, ``--version``).

typer (with its bundled click and ``inspect``) costs ~70-100 ms per process on a small machine, more
than everything else a claim does. These verbs are parsed here with a tiny table that mirrors their
typer definitions in ``app.py`` and call the same ``actions``; anything unusual (``--help``, an
unknown option, a malformed value) falls through to typer, which owns the error messages. A test
checks that both paths build the same call for the same arguments.
"""

from __future__ import annotations

import os

# verb -> (positional item: "required" | "optional", {option: (keyword, kind)}, action, fixed kwargs)
_COMMON = {"--json": ("as_json", "flag"), "--as": ("agent", "value"), "-C": ("path", "value")}
_FENCE = {"--fence": ("fence", "int")}
_TTL = {"--ttl": ("ttl", "value"), "--offline": ("offline", "flag")}
VERBS: dict[str, tuple[str, dict[str, tuple[str, str]], str, dict[str, object]]] = {
    "claim": ("optional", {**_COMMON, **_TTL, "--next": ("next", "flag")}, "claim", {}),
    "renew": ("required", {**_COMMON, **_TTL, **_FENCE}, "lease_op", {"op": "renew"}),
    "release": ("required", {**_COMMON, **_FENCE, "--offline": ("offline", "flag")}, "lease_op", {"op": "release"}),
}


def parse(argv: list[str]) -> tuple[str, dict[str, object]] | None:
    """Return ``(action name, keyword arguments)`` or ``None`` to let typer handle it."""
    if not argv or argv[0] not in VERBS:
        return None
    positional, options, action, fixed = VERBS[argv[0]]
    kwargs: dict[str, object] = {"as_json": False, "agent": None, "path": None, **fixed}
    for keyword, kind in options.values():
        if kind != "flag" or keyword in ("next", "offline"):
            kwargs.setdefault(keyword, False if kind == "flag" else None)
    items: list[str] = []
    args = argv[1:]
    index = 0
    while index < len(args):
        arg = args[index]
        if arg == "--":
            items.extend(args[index + 1 :])
            break
        if arg.startswith("-") and arg != "-":
            name, eq, inline = arg.partition("=")
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
                if kind == "int":
                    try:
                        kwargs[keyword] = int(value)
                    except ValueError:
                        return None
                else:
                    kwargs[keyword] = value
        else:
            items.append(arg)
        index += 1
    if len(items) > 1 or (positional == "required" and not items):
        return None
    kwargs["item"] = items[0] if items else None
    if "fence" in kwargs and kwargs["fence"] is None and os.environ.get("GW_FENCE"):
        try:
            kwargs["fence"] = int(os.environ["GW_FENCE"])
        except ValueError:
            return None
    if kwargs["agent"] is None and os.environ.get("GW_AGENT"):
        kwargs["agent"] = os.environ["GW_AGENT"]
    return action, kwargs


def run(argv: list[str]) -> int | None:
    parsed = parse(argv)
    if parsed is None:
        return None
    action, kwargs = parsed
    from . import actions

    as_json = bool(kwargs.pop("as_json"))
    path = kwargs.pop("path")
    agent = kwargs.pop("agent")
    return actions.invoke(getattr(actions, action), as_json=as_json, path=path, agent=agent, **kwargs)  # type: ignore[arg-type]
