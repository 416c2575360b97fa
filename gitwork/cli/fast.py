"""A fast path for the verbs shell loops and agents call most, parsed without typer.

typer (with its bundled click and ``inspect``) costs ~70-100 ms per process on a small machine, more
than everything else a claim does. These verbs are parsed here with a small table that mirrors their
typer definitions (``app.py``, ``cmd_messages.py``) and call the same action functions; anything
unusual (``--help``, an unknown option, a malformed value) falls through to typer, which owns the
error messages. ``tests/test_fast_path.py`` checks that both paths build the same call.
"""

from __future__ import annotations

import os

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

# option -> (keyword, kind); kinds: flag, value, int, float, multi (repeatable value)
_COMMON = {"--json": ("as_json", "flag"), "--as": ("agent", "value"), "-C": ("path", "value")}
_FENCE = {"--fence": ("fence", "int")}
_EPOCH = {"--epoch": ("epoch", "int")}
_OFFLINE = {"--offline": ("offline", "flag")}
_TTL = {"--ttl": ("ttl", "value")}


class Verb:
    __slots__ = ("positionals", "required", "options", "defaults", "module", "action", "fixed")

    def __init__(self, positionals: tuple[str, ...], required: int, options: dict[str, tuple[str, str]],
                 module: str, action: str, fixed: dict[str, Any] | None = None,
                 defaults: dict[str, Any] | None = None) -> None:
        self.positionals, self.required, self.options = positionals, required, {**_COMMON, **options}
        self.module, self.action, self.fixed = module, action, fixed or {}
        self.defaults = {keyword: False if kind == "flag" else None for keyword, kind in self.options.values()}
        self.defaults.update(defaults or {})


VERBS: dict[str, Verb] = {
    "claim": Verb(("item",), 0, {**_TTL, **_OFFLINE, "--next": ("next", "flag")}, "actions", "claim"),
    "renew": Verb(("item",), 1, {**_TTL, **_FENCE, **_OFFLINE}, "actions", "lease_op", {"op": "renew"}),
    "release": Verb(("item",), 1, {**_FENCE, **_OFFLINE}, "actions", "lease_op", {"op": "release"}),
    "msg": Verb(("item", "text"), 2, {
        "--kind": ("kind", "value"), "-k": ("kind", "value"), "--reply-to": ("reply_to", "value"),
        "--to": ("to", "value"), "--id": ("msg_id", "value"), **_EPOCH, **_FENCE,
    }, "actions_messages", "do_msg"),
    "ack": Verb(("item", "seq"), 2, {
        "--read": ("read", "flag"), "--responded": ("responded", "flag"), "--by": ("reply", "value"),
        **_EPOCH, **_FENCE,
    }, "actions_messages", "do_ack"),
    "thread": Verb(("item",), 1, {
        "--since": ("since", "int"), "--follow": ("follow", "flag"), "-f": ("follow", "flag"),
        "--timeout": ("timeout", "float"), "--poll": ("poll", "float"),
    }, "actions_messages", "do_thread", defaults={"since": 0, "poll": 0.2}),
    "inbox": Verb((), 0, {}, "actions_messages", "do_inbox"),
    "ready": Verb((), 0, {"--limit": ("limit", "int"), "-n": ("limit", "int")}, "actions", "ready"),
    "list": Verb((), 0, {
        "--status": ("status", "multi"), "-s": ("status", "multi"), "--label": ("label", "multi"),
        "-l": ("label", "multi"), "--all": ("show_all", "flag"), "-a": ("show_all", "flag"),
        "--holder": ("holder", "value"),
    }, "actions", "list_items"),
}
_CONVERT = {"int": int, "float": float}


def parse(argv: list[str]) -> tuple[str, dict[str, Any]] | None:
    """Return ``(module:function, keyword arguments)`` or ``None`` to let typer handle it."""
    verb = VERBS.get(argv[0]) if argv else None
    if verb is None:
        return None
    kwargs: dict[str, Any] = {**verb.defaults, **verb.fixed}
    given: list[str] = []
    args = argv[1:]
    index = 0
    while index < len(args):
        arg = args[index]
        if arg == "--":
            given.extend(args[index + 1 :])
            break
        if arg.startswith("-") and arg != "-":
            name, eq, inline = arg.partition("=")
            spec = verb.options.get(name)
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
    if not verb.required <= len(given) <= len(verb.positionals):
        return None
    for name, value in zip(verb.positionals, given):
        kwargs[name] = value
    for name in verb.positionals[len(given) :]:
        kwargs[name] = None
    for env, keyword, convert in (("GW_FENCE", "fence", int), ("GW_AGENT", "agent", str)):
        if keyword in kwargs and kwargs[keyword] is None and os.environ.get(env):
            try:
                kwargs[keyword] = convert(os.environ[env])
            except ValueError:
                return None
    return f"{verb.module}:{verb.action}", kwargs


def run(argv: list[str]) -> int | None:
    parsed = parse(argv)
    if parsed is None:
        return None
    target, kwargs = parsed
    module_name, _, function = target.partition(":")
    import importlib

    from .actions import invoke

    module = importlib.import_module(f"{__package__}.{module_name}")
    as_json = bool(kwargs.pop("as_json"))
    path = kwargs.pop("path")
    agent = kwargs.pop("agent")
    return invoke(getattr(module, function), as_json=as_json, path=path, agent=agent, **kwargs)
