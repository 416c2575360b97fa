"""The tools of ``gw mcp``: what each one runs, its input schema, and the one call path.

A tool is a ``gw`` verb. A call runs the verb's own plain function (``cli/commands/<topic>.py``) as
``gw VERB --json`` does: the function builds the command document and submits it through
``Workplane.submit`` (or reads), and the JSON it prints is the tool's result, so an agent gets exactly
what the CLI prints. A :class:`GwError` becomes a tool error carrying the CLI's JSON error object
(``error`` kind, ``code``) plus the exit code's name (``exit``: ``HELD``, ``STALE`` ...).

The input schemas are derived from the op declarations (``@op`` fields and kinds, ``engine.spec``);
only the read tools, which have no op, declare their few fields here, in the same kind language
(``commands.parse_fields``). Every argument is checked first against the tool's own input schema (its
JSON type: no coercion, so ``ttl: 5`` or ``labels: "x"`` is ``invalid``), then by its kind's validator,
before the verb runs.

This module does not import the MCP SDK: ``server.py`` wires it into the protocol.
"""

from __future__ import annotations

import contextlib
import importlib
import io
import json
import sys

from ..errors import ExitCode, GwError, Invalid, Stale, UsageError

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

    from ..commands import Field
    from ..workplane import Workplane

# What a kind (commands.KINDS) looks like to an MCP client: JSON Schema, as small as it can be.
_STRING: dict[str, Any] = {"type": "string"}
_STRINGS: dict[str, Any] = {"type": "array", "items": _STRING}
_INTEGER: dict[str, Any] = {"type": "integer"}
KIND_SCHEMAS: dict[str, dict[str, Any]] = {
    **dict.fromkeys(("title", "text", "short", "session", "name", "item", "cmd_id"), _STRING),
    "duration": {"type": "string", "description": "e.g. 30m"},
    **dict.fromkeys(("int", "fence", "priority", "epoch"), _INTEGER),
    "bool": {"type": "boolean"},
    **dict.fromkeys(("labels", "texts", "items", "globs"), _STRINGS),
    "msgref": {"type": ["integer", "string"], "description": "message number"},
    "usd": {"type": ["integer", "number", "string"], "description": "USD, e.g. 0.25"},
}

# Names an agent might try to act as someone else with. The identity is fixed when the server starts.
IDENTITY_KEYS = frozenset(("as", "agent", "identity", "who", "actor"))


class Tool:
    """One tool: the verb it runs, the op its input schema comes from, and how arguments map.

    ``fields``: the op fields it takes (``fence`` is the common field every op accepts); ``local``:
    the fields of a read tool, in the kind language; ``rename``: tool argument -> the verb's
    parameter name; ``defaults``: values for arguments not given; ``lease``: ``"grant"`` (remember the
    lease in the result), ``"end"`` (forget it). An argument the verb takes as a list (``gw done A B``)
    is wrapped by :func:`run_verb`, read from the verb's own signature.
    """

    __slots__ = ("name", "verb", "op", "names", "local", "rename", "defaults", "lease", "summary",
                 "_fields")

    def __init__(self, name: str, verb: str, summary: str | None = None, *, op: str | None = None,
                 fields: tuple[str, ...] = (), local: dict[str, str] | None = None,
                 rename: dict[str, str] | None = None, defaults: dict[str, Any] | None = None,
                 lease: str | None = None) -> None:
        self.name, self.verb, self.op, self.names, self.summary = name, verb, op, fields, summary
        self.local, self.rename, self.defaults = local or {}, rename or {}, defaults or {}
        self.lease = lease
        self._fields: dict[str, Field] | None = None

    @property
    def fields(self) -> dict[str, Field]:
        """Argument name -> its field (kind, required, choices), from the op declaration or ``local``."""
        if self._fields is None:
            from ..commands import COMMON, parse_fields

            fields = parse_fields(self.local)
            if self.op is not None:
                declared = _spec(self.op).fields
                fields.update({name: declared.get(name) or COMMON[name] for name in self.names})
            self._fields = fields
        return self._fields

    @property
    def description(self) -> str:
        return self.summary or _spec(self.op or "").summary

    def input_schema(self) -> dict[str, Any]:
        properties = {name: {"enum": list(f.choices)} if f.choices else KIND_SCHEMAS[f.kind]
                      for name, f in self.fields.items()}
        schema: dict[str, Any] = {"type": "object", "properties": properties}
        required = [name for name, f in self.fields.items() if f.required]
        if required:
            schema["required"] = required
        schema["additionalProperties"] = False
        return schema

    def listing(self) -> dict[str, Any]:
        """The tool as ``tools/list`` describes it (MCP's field names). A read tool says so: a client
        may then run it without asking the person first."""
        doc = {"name": self.name, "description": self.description, "inputSchema": self.input_schema()}
        if self.op is None:
            doc["annotations"] = {"readOnlyHint": True}
        return doc


def _talks(tool: Tool) -> bool:
    """A message tool: its op writes under a lease epoch (``epoch`` field), not a fence."""
    return tool.op is not None and "epoch" in _spec(tool.op).fields


def _spec(op: str) -> Any:
    from .. import engine

    spec = engine.spec(op)
    if spec is None:  # a tool names an op that is not declared: a bug here, caught by the tests
        raise KeyError(f"no op {op!r}")
    return spec


# The read tools, which have no op: chosen for an agent's loop (find work, read its context). A tool that
# writes is declared on its op (``@op(..., mcp=...)``) and listed after these, in the registry's order.
READ_TOOLS: tuple[Tool, ...] = (
    Tool("ready", "items:ready", "ready items (open, unleased, dependencies done), best first; 20 unless limit "
         "(0: all)", local={"limit": "int", "labels": "labels", "owner": "name"}, rename={"labels": "label"},
         defaults={"limit": 20}),
    Tool("show", "items:show", "an item (criteria, decisions) and its lease", local={"item": "item!"}),
    Tool("context", "launch:context", "an item's launch context: item, lease, your unread messages",
         local={"item": "item!"}),
    Tool("thread", "messages:thread", "an item's messages after number since",
         local={"item": "item!", "since": "int"}, defaults={"since": 0}),
    Tool("inbox", "messages:inbox", "messages to you or on items you hold or own: unread, then unanswered"),
    Tool("queue", "queue:queue_list", "the publish queue, head first: the sessions waiting to be landed"),
)


def declared_tools() -> tuple[Tool, ...]:
    """A tool for every op declared with ``mcp=`` (``engine.op``): it runs the declared verb and takes the
    declared fields (by default every field of the op, under the verb's parameter names unless ``rename``)."""
    from .. import engine, ops

    engine.declared("internal")  # loads every op module: the registry is filled as they are imported
    tools = []
    for name in ops.OP_MODULES:  # the generated table's order, not the order the modules happened to load
        spec = engine.OPS[name]
        if spec.mcp is None:
            continue
        exposure = spec.mcp
        fields = exposure.get("fields") or tuple(spec.fields)
        tools.append(Tool(name, exposure["verb"], exposure.get("summary"), op=name, fields=tuple(fields),
                          rename=exposure.get("rename"), defaults=exposure.get("defaults"),
                          lease=exposure.get("lease")))
    return tuple(tools)


TOOLS: tuple[Tool, ...] = (*READ_TOOLS, *declared_tools())
BY_NAME = {tool.name: tool for tool in TOOLS}


def listing() -> list[dict[str, Any]]:
    return [tool.listing() for tool in TOOLS]


def listing_json() -> str:
    """The ``tools/list`` result as compact JSON: what a client puts in the agent's context."""
    return json.dumps({"tools": listing()}, ensure_ascii=False, separators=(",", ":"))


def estimate_tokens(text: str) -> int:
    """A conservative token count for English text and JSON: one token per 3.5 characters, rounded up.

    Tokenizers average about 4 characters a token on English prose and fewer on JSON punctuation;
    3.5 overstates the count for this listing, so a budget checked with it holds for real tokenizers.
    """
    return -(-len(text) * 2 // 7)


def error_doc(error: GwError) -> dict[str, Any]:
    """The CLI's ``--json`` error object, plus the exit code's name."""
    return {"ok": False, **error.to_json(), "exit": ExitCode(error.code).name}


class Session:
    """One connection: the work plane opened as the server's identity, and the leases granted to it.

    The identity is the work plane's (``--as``, ``GW_AGENT`` or the default, checked when the server
    started); no argument can change it. The leases granted here (item -> epoch, fence) fence the
    later calls on the same item unless the call passes its own ``fence``.
    """

    def __init__(self, wp: Workplane) -> None:
        self.wp = wp
        self.leases: dict[str, tuple[int, int]] = {}
        self.lost: set[str] = set()  # remembered leases a message was refused under (see _fence)

    @property
    def identity(self) -> str:
        return str(self.wp.settings.identity())

    def call(self, name: str, arguments: Any) -> tuple[bool, Any]:
        """``(is_error, JSON value)``: the verb's ``--json`` output, or the error object. Never raises."""
        try:
            tool = BY_NAME.get(name) if isinstance(name, str) else None
            if tool is None:
                raise UsageError(f"no tool {str(name)[:40]!r}; tools: {', '.join(BY_NAME)}")
            return False, self.run(tool, arguments)
        except GwError as error:
            return True, error_doc(error)
        except Exception as exc:  # a bug: reported like the CLI reports one, and the server keeps serving
            message = f"{type(exc).__name__}: {exc}".splitlines()[0] if str(exc) else type(exc).__name__
            return True, {"ok": False, "error": "internal", "code": int(ExitCode.INTERNAL), "message": message,
                          "exit": ExitCode.INTERNAL.name}

    def run(self, tool: Tool, arguments: Any) -> Any:
        """Check the arguments, fill in the connection's lease, run the verb, remember what it granted.

        Each call starts as a fresh ``gw`` process would, with nothing read yet held in memory."""
        self.wp.store.forget()
        given = check_arguments(tool, arguments)
        given = {**tool.defaults, **given}
        item = self._fence(tool, given)
        try:
            result = run_verb(self.wp, tool.verb, {tool.rename.get(k, k): v
                                                   for k, v in given.items()})
        except Stale:
            if item is not None and _talks(tool):
                self.lost.add(item)  # said once: later messages on it are written at the current epoch
            raise
        self._remember(tool, result)
        return result

    def _fence(self, tool: Tool, given: dict[str, Any]) -> str | None:
        """Calls on an item this connection was granted act under that lease, so that once it is gone
        (taken over, revoked, re-granted elsewhere) they are refused as stale instead of let through:
        a work call carries its fence, a message its fence too where its op takes one (``msg``, ``ask``),
        else its epoch (``ack``, ``decide``).

        After a message was refused as stale, later messages on the item carry no epoch (the op reads the
        current one): the agent can still say that it stopped and mark what it read; work calls stay
        fenced, and refused, until a new grant. Returns the item's full id when a lease is remembered."""
        if not self.leases or "item" not in given or tool.op == "claim":
            return None
        try:
            item = self.wp.resolve(given["item"])
        except GwError:
            return None  # the verb reports the same error
        lease = self.leases.get(item)
        if lease is None:
            return None
        epoch, fence = lease
        if _talks(tool):
            if item not in self.lost and "fence" not in given and "epoch" not in given:
                # A message said under this connection's own lease is the holder speaking: fenced where
                # the op takes a fence (msg: a non-holder's message is not refused for its epoch, so an
                # epoch alone would let it through once the lease is gone), else under its epoch.
                if "fence" in tool.fields:
                    given["fence"] = fence
                else:
                    given["epoch"] = epoch
        elif "fence" in tool.fields:
            given.setdefault("fence", fence)
        return item

    def _remember(self, tool: Tool, result: Any) -> None:
        if not isinstance(result, dict) or not isinstance(result.get("item"), str):
            return
        if tool.lease == "grant" and result.get("holder") == self.identity:
            self.leases[result["item"]] = (int(result["epoch"]), int(result["fence"]))
            self.lost.discard(result["item"])
        elif tool.lease == "end":
            self.leases.pop(result["item"], None)
            self.lost.discard(result["item"])

    def read(self, uri: str) -> Any:
        """A resource: ``gitwork://ready``, ``gitwork://item/<id>``, ``gitwork://item/<id>/thread``."""
        rest = uri[len(SCHEME):] if isinstance(uri, str) and uri.startswith(SCHEME) else ""
        if rest == "ready":
            return self.run(BY_NAME["ready"], {"limit": 0})
        parts = rest.split("/")
        if len(parts) in (2, 3) and parts[0] == "item" and parts[1] and parts[2:] in ([], ["thread"]):
            return self.run(BY_NAME["thread" if parts[2:] else "show"], {"item": parts[1]})
        raise UsageError(f"no resource {str(uri)[:80]!r}: gitwork://ready, gitwork://item/ID, "
                         "gitwork://item/ID/thread")


SCHEME = "gitwork://"
RESOURCES = (("ready", "gitwork://ready", "Ready items, best first (all of them)."),)
TEMPLATES = (("item", "gitwork://item/{id}", "An item and its lease (as the show tool)."),
             ("thread", "gitwork://item/{id}/thread", "An item's whole thread (as the thread tool)."))


def check_arguments(tool: Tool, arguments: Any) -> dict[str, Any]:
    """The arguments given (nulls dropped), each checked by its kind; unknown or missing ones refused.

    The checks are the engine's own (``commands.validate``). An op's field is then passed on as given:
    the command document is validated again, and normalised, by ``engine.validate_command``, the same
    as for ``gw apply``; a read tool's value goes straight to the verb, so it is passed as checked."""
    from ..commands import validate

    if arguments is None:
        arguments = {}
    if not isinstance(arguments, dict):
        raise UsageError(f"{tool.name}: arguments must be an object")
    fields = tool.fields
    for key in arguments:
        if key not in fields:
            shown = repr(str(key)[:40])
            takes = ", ".join(fields) or "nothing"
            if key in IDENTITY_KEYS:
                raise UsageError(f"{tool.name} takes no {shown}: this server acts as one identity, fixed when it "
                                 f"started (gw mcp --as NAME); it takes: {takes}")
            raise UsageError(f"{tool.name} takes no argument {shown}; it takes: {takes}")
    given = {key: value for key, value in arguments.items() if value is not None}
    missing = [name for name, field in fields.items() if field.required and name not in given]
    if missing:
        raise UsageError(f"{tool.name} needs {missing[0]!r}")
    check_schema(tool, given)
    checked = validate(given, fields)
    return {**given, **{name: checked[name] for name in tool.local if name in checked}}


def _matches(value: Any, schema: dict[str, Any]) -> bool:
    """Does ``value`` have the JSON type ``schema`` (one of :data:`KIND_SCHEMAS`, or an ``enum``) declares?"""
    if "enum" in schema:
        return isinstance(value, str)  # which choice is the kind's own check (its message lists them)
    declared = schema["type"]
    for kind in declared if isinstance(declared, list) else [declared]:
        if kind == "string" and isinstance(value, str):
            return True
        if kind == "integer" and type(value) is int:  # not a bool, not 5.0
            return True
        if kind == "number" and type(value) in (int, float):  # not a bool; NaN and 1e400 are the kind's to refuse
            return True
        if kind == "boolean" and isinstance(value, bool):
            return True
        if kind == "array" and isinstance(value, list) and all(_matches(v, schema["items"]) for v in value):
            return True
    return False


_JSON_NAMES = ((bool, "a boolean"), (int, "an integer"), (float, "a number"), (str, "a string"),
               (list, "an array"), (dict, "an object"))


def _described(schema: dict[str, Any]) -> str:
    if "enum" in schema:
        return "one of " + ", ".join(schema["enum"])
    declared = schema["type"]
    names = {"string": "a string", "integer": "an integer", "number": "a number", "boolean": "true or false",
             "array": f"an array of {schema.get('items', {}).get('type', 'values')}s"}
    return " or ".join(names[kind] for kind in (declared if isinstance(declared, list) else [declared]))


def check_schema(tool: Tool, given: dict[str, Any]) -> None:
    """Refuse (``invalid``) an argument whose JSON type is not the one the tool's input schema declares:
    the schema an MCP client is given is the one the call is held to, with no coercion."""
    properties = tool.input_schema()["properties"]
    for key, value in given.items():
        schema = properties[key]
        if not _matches(value, schema):
            got = next((name for cls, name in _JSON_NAMES if isinstance(value, cls)), type(value).__name__)
            raise Invalid(f"{tool.name}: {key} must be {_described(schema)} (its input schema), got {got}")


def run_verb(wp: Workplane, verb: str, kwargs: dict[str, Any]) -> Any:
    """Run a verb's plain function as ``gw VERB --json`` does and return the JSON value it printed.

    Every parameter the function has and the call does not give is passed as ``None`` (the value
    typer passes for an option left out). Its stdout is captured here; its diagnostics still go to
    stderr, which an MCP client shows as the server's log.
    """
    import inspect

    module, _, name = verb.partition(":")
    func = getattr(importlib.import_module(f"gitwork.cli.commands.{module}"), name)
    for parameter in list(inspect.signature(func).parameters.values())[2:]:
        if str(parameter.annotation).startswith("list[") and isinstance(kwargs.get(parameter.name), str):
            kwargs[parameter.name] = [kwargs[parameter.name]]  # one id where the verb takes several
        if parameter.kind is parameter.POSITIONAL_OR_KEYWORD and parameter.default is parameter.empty:
            kwargs.setdefault(parameter.name, None)
    printed = io.StringIO()
    stdin, sys.stdin = sys.stdin, io.StringIO()  # a text of "-" must never read the protocol's stream
    try:
        with contextlib.redirect_stdout(printed):
            func(wp, True, **kwargs)
    finally:
        sys.stdin = stdin
    return json.loads(printed.getvalue())
