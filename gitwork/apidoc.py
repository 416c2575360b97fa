"""Generate docs/api.md and docs/openapi.json from the code: the library, the ops, the REST API, MCP.

``python -m gitwork.apidoc [--check] [API_MD]`` writes docs/api.md (or ``API_MD``) and, next to it,
openapi.json; ``--check`` only compares and exits 1 when either file is stale (tests/test_api_docs.py
does the same in-process). What each part is made from:

- the Python library: the public methods of :class:`gitwork.workplane.Workplane` (its conversation
  verbs come from :class:`gitwork.workplane_messages.Conversations`), each with its signature and the
  first paragraph of its docstring, in the order they are defined;
- the command documents: every op of the registry (``@op`` in ``gitwork/ops``), its summary, its fields
  with their kinds (``commands.KINDS``) and its flags; who may submit each public op is :data:`WHO`,
  written here (the op declarations do not say it) and checked against the registry by the tests;
- the REST API: the OpenAPI document of ``gitwork.serve.app.create_app``, built for a throwaway
  repository (the document does not depend on the repository's contents), and its paths;
- the MCP tools: ``gitwork.mcp.tools.listing()``.

This is a documentation tool above every face: nothing in gitwork imports it.
"""

from __future__ import annotations

import inspect
import json
import re
import sys
from pathlib import Path

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_PATH = ROOT / "docs" / "api.md"
OPENAPI_NAME = "openapi.json"

# Who may submit each public op. The rules live in the ops (gitwork/roles.py, the fencing rule in
# engine.Context.require_holder); docs/leases.md explains them. A test fails when an op is missing here.
_ACT_ON = ("the holder, under its fence; while nobody holds a live lease, any person or admin. An agent only "
           "while it holds the lease.")
_HOLDER = "only the holder of the item's live lease (any role), under its fence."
WHO: dict[str, str] = {
    "init": "anyone.",
    "new": "anyone.",
    "edit": _ACT_ON,
    "check": _ACT_ON,
    "decision": _ACT_ON,
    "done": _ACT_ON,
    "cancel": _ACT_ON,
    "reopen": _ACT_ON,
    "claim": "anyone; refused (held) while someone else holds a live lease on the item.",
    "takeover": "anyone, once the lease has expired or was handed off.",
    "renew": _HOLDER,
    "release": _HOLDER,
    "handoff": _HOLDER,
    "revoke": "admins (setting `admins`); with no admins configured, any person. Agents never.",
    "msg": ("its holder, its owner (its creator while it names none), admins (setting `admins`), persons listed in `people`, and "
            "anyone a message of its thread is addressed to; others are forbidden. Someone who does not hold "
            "the item gives the lease epoch it read (`epoch`); `kind: decision-request` is an `ask`: the "
            "holder only."),
    "ack": "anyone; it moves the acting identity's own cursors.",
    "ask": "only the holder, under its live fence (any role): asking makes the item wait.",
    "decide": ("admins, and the person the decision request was addressed to (`to`); with no admins "
               "configured, any person. Agents never."),
    "batch": "anyone; each member is judged by its own op's rules, in order.",
    "import": "people and admins; agents never.",
    "shadow-report": "anyone.",
}

# What each field kind (commands.KINDS) accepts. A test fails when a kind is missing here.
def _kinds() -> dict[str, str]:
    from . import commands as c

    return {
        "title": f"one line of text, not blank, at most {c.MAX_TITLE} UTF-8 bytes; surrounding spaces are dropped",
        "text": f"text (newlines allowed, no control characters), at most {c.MAX_TEXT} UTF-8 bytes",
        "short": f"one line of text, not blank, at most {c.MAX_SHORT} UTF-8 bytes",
        "name": "an identity: 1-64 of `A-Za-z0-9._@/+-`",
        "int": "a whole number (or its digits as text), at most 2^53 in size",
        "fence": "a fencing token: a whole number from 1",
        "epoch": "a lease epoch (a whole number), or `current`: the epoch on the tip the command lands on",
        "priority": "0 (highest) to 4 (lowest)",
        "bool": "`true` or `false`",
        "duration": "seconds as a number, or text such as `90s`, `15m`, `1h`",
        "item": "an item id (`w-` and 16 hex digits) or a unique prefix of one",
        "items": "a list of item ids or prefixes (one may be given bare)",
        "labels": "a list of labels (one may be given bare): 1-64 of `A-Za-z0-9_.:/+-`, starting with a letter or digit",
        "texts": f"a list of one-line texts (one may be given bare), each at most {c.MAX_SHORT} UTF-8 bytes",
        "ints": "a list of whole numbers (one may be given bare)",
        "mapping": f"a mapping of one-line texts to one-line texts or null, each at most {c.MAX_SHORT} UTF-8 bytes",
        "cmd_id": "a command id: 4-64 of `A-Za-z0-9_.:-`, starting with a letter or digit",
        "msgref": "a message: its number (`3`, `#3`), its id, or `ITEM:N` / `ITEM:ID` of the command's own item",
        "docs": f"a non-empty list of at most {c.MAX_BATCH} command documents",
        "data": f"plain JSON data (mappings, lists, text, numbers) the op checks itself, at most {c.MAX_DATA} bytes as JSON",
    }


_EXAMPLE = '''\
from gitwork.workplane import Workplane

with Workplane("path/to/repo", agent="worker-1") as wp:
    wp.submit({"op": "init"})
    applied = wp.submit({"op": "new", "title": "Ship it", "criteria": ["tests pass"], "priority": 1})
    item = applied.result["item"]                  # the full id, w- and 16 hex digits
    print(applied.to_json())                       # what `gw new --json` prints
    for row in wp.ready():                         # open, unleased, dependencies done; best first
        print(row[0], row[1])                      # item id, title
    lease = wp.do("claim", item=item, ttl="15m").result
    wp.do("check", item=item, criterion=1, fence=lease["fence"])
    wp.do("done", item=item, fence=lease["fence"])
'''

_HEADER = """\
# gitwork API reference

Generated by `python -m gitwork.apidoc` from the code; do not edit by hand
(`python -m gitwork.apidoc --check` fails when this file or [openapi.json](openapi.json) is stale).
The command-line reference is [cli.md](cli.md); exit codes and the JSON error shape are in
[exit-codes.md](exit-codes.md).

gitwork is a library first. Every change to the work plane is one command document, a mapping with
an `op` and that op's fields, applied by one engine as one commit on `refs/gitwork/state`. The CLI
(`gw apply`, and every verb), the Python API (`Workplane.submit`), the REST API (`POST /v1/commands`)
and the MCP tools all build the same documents and end in the same call.

- [A worked example](#a-worked-example)
- [The Python library](#the-python-library)
- [Command documents](#command-documents)
- [The REST API](#the-rest-api)
- [The MCP tools](#the-mcp-tools)

## A worked example

Open the work plane of a repository, submit command documents, read what is ready:

```python
{example}```

`submit` and `do` return an `Applied` (below); a refusal raises a `gitwork.errors.GwError` subclass
whose `code` is the exit code `gw` would exit with and whose `to_json()` is the error object
`gw --json` prints.
"""


# --- the Python library -----------------------------------------------------------------------------


def _first_paragraph(obj: Any) -> str:
    """The first paragraph of ``obj``'s own docstring (never one inherited), in Markdown."""
    doc = inspect.cleandoc(obj.__doc__ or "")
    text = " ".join(doc.split("\n\n", 1)[0].split())
    return _ROLE.sub(r"`\1`", text).replace("``", "`")


_ROLE = re.compile(r":[a-z]+:`~?([^`]+)`")  # reST roles (:meth:`submit`) become code spans


def _default(value: Any) -> str:
    # A callable default renders as its dotted name: its repr has a memory address.
    if callable(value) and hasattr(value, "__qualname__"):
        module = getattr(value, "__module__", "") or ""
        return f"{module.removeprefix('gitwork.')}.{value.__qualname__}" if module else value.__qualname__
    return repr(value)


def signature(func: Any, name: str) -> str:
    """``name(params) -> result``, annotations as written in the source, without ``self``."""
    sig = inspect.signature(func)
    parts: list[str] = []
    star = False
    for param in list(sig.parameters.values())[1:]:
        if param.kind is param.KEYWORD_ONLY and not star:
            parts.append("*")
            star = True
        stars = "*" if param.kind is param.VAR_POSITIONAL else "**" if param.kind is param.VAR_KEYWORD else ""
        text = stars + param.name
        if param.kind is param.VAR_POSITIONAL:
            star = True
        if param.annotation is not param.empty:
            text += f": {param.annotation}"
        if param.default is not param.empty:
            text += f" = {_default(param.default)}"
        parts.append(text)
    result = f" -> {sig.return_annotation}" if sig.return_annotation is not sig.empty else ""
    return f"{name}({', '.join(parts)}){result}"


def public_methods(cls: type) -> list[str]:
    """The public methods ``cls`` itself defines, in source order."""
    return [name for name, value in vars(cls).items()
            if not name.startswith("_") and inspect.isfunction(value)]


def _method_block(cls: type, name: str, shown: str | None = None) -> list[str]:
    func = vars(cls)[name]
    return [f"#### `{shown or name}`", "", "```python", signature(func, shown or name), "```", "",
            _first_paragraph(func), ""]


def _library() -> list[str]:
    from .engine import Applied
    from .workplane import Workplane
    from .workplane_messages import Conversations

    out = ["## The Python library", "", "### `gitwork.workplane.Workplane`", "", _first_paragraph(Workplane), ""]
    out += _method_block(Workplane, "__init__", "Workplane")
    out += ["It is a context manager: `with Workplane(...) as wp:` closes it on leaving the block.", ""]
    for name in public_methods(Workplane):
        out += _method_block(Workplane, name)
    out += ["### Conversation verbs", "", f"Defined in `gitwork/workplane_messages.py`. {_first_paragraph(Conversations)}",
            ""]
    for name in public_methods(Conversations):
        out += _method_block(Conversations, name)
    out += ["### `gitwork.engine.Applied`", "", _first_paragraph(Applied), "",
            "- `command`: the command document as it was recorded (full ids, the minted command id `id`, `as`).",
            "- `commit`: the state commit it made, or `None` when it changed nothing.",
            "- `result`: the op's result, the fields `gw --json` prints after `ok`, `op`, `command_id`, `commit`.",
            "- `summary`: the one-line summary, the commit's subject.",
            "- `attempts`: how many compare-and-swap attempts it took.",
            "- `to_json()`: what `gw --json` prints for it: `ok`, `op`, `command_id`, `commit` and the result.",
            ""]
    return out


# --- command documents ------------------------------------------------------------------------------


def _field_rows(spec: Any) -> list[str]:
    """One row per field: its kind (the table above says what each accepts), or its choices."""
    rows = ["| field | kind | required |", "|---|---|---|"]
    for name, field in spec.fields.items():
        kind = "one of " + ", ".join(f"`{c}`" for c in field.choices) if field.choices else field.kind
        rows.append(f"| `{name}` | {kind} | {'yes' if field.required else 'no'} |")
    return rows if spec.fields else ["No fields besides the common ones."]


def _commands() -> list[str]:
    from . import engine
    from .errors import ExitCode

    engine.declared("internal")  # loads every op module
    kinds = _kinds()
    public = sorted(n for n, s in engine.OPS.items() if not s.internal)
    internal = sorted(n for n, s in engine.OPS.items() if s.internal)
    out = ["## Command documents", "",
           "A command document is a mapping (JSON, or YAML for `gw apply`) with an `op` and that op's fields, "
           "for example `{\"op\": \"claim\", \"item\": \"w-3fa9\", \"ttl\": \"15m\"}`. A field given as `null` is "
           "absent. An unknown op, an unknown field, a field of the wrong kind or a missing required field is "
           f"refused (`invalid`, exit {int(ExitCode.INVALID)}) before anything is read or written. "
           "Rules across fields or on the state are the op's own and are not in the tables below: `claim` "
           "needs `item` or `next: true`; `done` with `force` needs a `reason`; `ack` with `responded` needs "
           "`reply`; an item must exist and a prefix must be unique.", "",
           "Fields every op accepts:", "",
           "| field | kind | meaning |", "|---|---|---|",
           "| `op` | short | the op's name (required) |",
           "| `id` | cmd_id | the command id; minted when absent. A retry with the same id lands at most once |",
           "| `as` | name | the acting identity; the library fills in its own when absent |",
           "| `fence` | fence | the fencing token of the lease the author acts under (docs/leases.md) |",
           "| `lease` | cmd_id | filled in by the engine: the grant command id of the lease a fenced command acted under |",
           ""]
    out += ["Field kinds (`gitwork/commands.py`, `KINDS`):", "", "| kind | accepts |", "|---|---|"]
    out += [f"| {kind} | {kinds[kind]} |" for kind in kinds]  # tests/test_api_docs.py: every kind of commands.py
    out += ["",
            "Flags of an op: *decided by the arbiter* means that with an arbiter remote configured "
            f"(`gw init --remote`), the command succeeds only once its commit is on the remote's state ref "
            f"(exit {int(ExitCode.REMOTE)} when the outcome is unknown; docs/leases.md). *Roles re-checked by the arbiter* means "
            "its rules depend on who acts, and the arbiter's pre-receive hook applies it again with the "
            "arbiter's own settings (docs/security.md).", ""]
    out += ["### Public ops", "", "Submitted by any face: `gw apply`, `Workplane.submit`/`do`, `POST /v1/commands`.", ""]
    out += [f"- [`{name}`](#op-{name}): {engine.OPS[name].summary}" for name in public]
    out.append("")
    for name in public:
        spec = engine.OPS[name]
        flags = []
        if spec.arbiter:
            flags.append("decided by the arbiter")
        if spec.roles:
            flags.append("roles re-checked by the arbiter")
        out += [f"<a id=\"op-{name}\"></a>", f"#### `{name}`", "", f"{spec.summary[:1].upper()}{spec.summary[1:]}.", "",
                f"Who may submit it: {WHO[name]}", ""]
        if flags:
            out += [f"Flags: {', '.join(flags)}.", ""]
        out += _field_rows(spec)
        out.append("")
    out += ["### Recorded only by gitwork", "",
            "Record ops say what gitwork itself did on the git side (a session branch made, a publish, an "
            f"execution started). No face can submit them: `gw apply`, `Workplane.submit`, `Workplane.do` and "
            f"`POST /v1/commands` refuse them (`invalid`, exit {int(ExitCode.INVALID)}); gitwork's own procedures write them through "
            "`Workplane.submit_record`. They are listed because they appear in the state ref's history.", "",
            "| op | summary | arbiter | fields (`!`: required) |", "|---|---|---|---|"]
    for name in internal:
        spec = engine.OPS[name]
        fields = ", ".join(f"`{f}{'!' if field.required else ''}`" for f, field in spec.fields.items())
        out.append(f"| `{name}` | {spec.summary} | {'yes' if spec.arbiter else 'no'} | {fields} |")
    out.append("")
    return out


# --- the REST API -----------------------------------------------------------------------------------


def openapi() -> dict[str, Any]:
    """The OpenAPI document of ``gw serve`` (without a peer's delegation endpoints), for a throwaway
    repository: the document describes routes and the op registry, never the repository's contents."""
    import subprocess
    import tempfile

    from .serve.app import create_app

    with tempfile.TemporaryDirectory(prefix="gw-apidoc-") as tmp:
        subprocess.run(["git", "init", "-q", tmp], check=True, capture_output=True)
        return create_app(tmp, board=True).openapi()


def openapi_text(doc: dict[str, Any] | None = None) -> str:
    """docs/openapi.json: sorted keys, two-space indent, one newline at the end."""
    return json.dumps(openapi() if doc is None else doc, indent=2, sort_keys=True, ensure_ascii=False) + "\n"


def _rest(doc: dict[str, Any]) -> list[str]:
    out = ["## The REST API", "",
           "`gw serve` (the `gitwork[serve]` extra) serves the same command documents and reads over HTTP; "
           "[serve.md](serve.md) describes tokens, roles, statuses and event streams. The full description is "
           "the OpenAPI document [openapi.json](openapi.json), generated with this page from "
           "`gitwork.serve.app.create_app`; a running server also answers it at `/openapi.json`. "
           "`POST /v1/commands` takes one public command document (above): its request schema is derived "
           "from the same op declarations. The delegation endpoints a configured peer adds "
           "([security.md](security.md)) are not in this document.", "",
           "| method | path | summary |", "|---|---|---|"]
    for path in sorted(doc.get("paths", {})):
        for method, operation in sorted(doc["paths"][path].items()):
            summary = _first_line(operation.get("description") or operation.get("summary") or "")
            out.append(f"| {method.upper()} | `{path}` | {summary} |")
    out.append("")
    return out


def _first_line(text: str) -> str:
    return " ".join(text.split("\n\n", 1)[0].split()).replace("|", "\\|")


# --- the MCP tools ----------------------------------------------------------------------------------


def _mcp() -> list[str]:
    from .mcp.tools import TOOLS, listing

    out = ["## The MCP tools", "",
           "`gw mcp --repo PATH --as NAME` (the `gitwork[mcp]` extra) serves these tools on stdio, acting as one "
           "identity; [mcp.md](mcp.md) describes wiring and errors. A tool with an op submits that op's "
           "command document; a read tool has none and changes nothing.", "",
           "| tool | op | arguments (`!`: required) | description |", "|---|---|---|---|"]
    ops = {tool.name: tool.op for tool in TOOLS}
    for tool in listing():
        schema = tool.get("inputSchema", {})
        required = set(schema.get("required", ()))
        args = ", ".join(f"`{name}{'!' if name in required else ''}`" for name in schema.get("properties", {}))
        op = f"`{ops[tool['name']]}`" if ops.get(tool["name"]) else "read"
        out.append(f"| `{tool['name']}` | {op} | {args} | {_first_line(tool.get('description', ''))} |")
    out.append("")
    return out


# --- the whole ----------------------------------------------------------------------------------------


def render(doc: dict[str, Any] | None = None) -> str:
    """The full text of docs/api.md (``doc``: the OpenAPI document, when already built)."""
    out = [_HEADER.format(example=_EXAMPLE)]
    out += _library()
    out += _commands()
    out += _rest(openapi() if doc is None else doc)
    out += _mcp()
    return "\n".join(out).rstrip("\n") + "\n"


def main(argv: list[str] | None = None) -> int:
    from .cli.docgen import generate

    return generate(argv, "gitwork.apidoc", "API_MD", DEFAULT_PATH, build)


def build(path: Path) -> dict[Path, str]:
    """``{path: docs/api.md, the openapi.json beside it: the OpenAPI document}``, from one build of it."""
    doc = openapi()
    return {path: render(doc), path.with_name(OPENAPI_NAME): openapi_text(doc)}


if __name__ == "__main__":
    sys.exit(main())
