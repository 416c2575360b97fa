"""The request schema of ``POST /v1/commands``, derived from the op registry's own declarations.

Each op declares its fields once (``@op(..., item="item!", ttl="duration")`` in ``gitwork/ops``); the
kinds a field may have are ``commands.KINDS``. This module maps each kind to a JSON Schema (one
entry per kind; ``tests/test_serve.py`` fails when a kind has none) and builds one schema per public
op from its declaration. The schema describes; the engine (``engine.validate_command``) stays the
only validator: the server hands it the raw document.

How the schema is settled against the validator (the known mismatches):

- ``null`` is absent: the validator skips a field whose value is null, so every optional field also
  admits ``null``; a required one does not.
- Bytes vs characters: the validator bounds text in UTF-8 bytes, JSON Schema counts characters. The
  schema's ``maxLength`` is the byte bound, a necessary condition (more characters are always more
  bytes); text within it may still be refused (422) when multi-byte characters make it longer.
- Cross-field rules (``ack`` with ``responded`` needs ``reply``, ``done --force`` needs ``reason``) and
  rules on the state (the item exists, a prefix is unique) are the engine's: refused with 422 or a
  state status (docs/serve.md), never by the schema.
- Loose kinds stay loose: a whole number may come as digits in a string, a list of one as the bare
  value, as ``gw apply`` accepts them.
"""

from __future__ import annotations

from .. import commands, engine, ids

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

_INT: dict[str, Any] = {"anyOf": [{"type": "integer", "minimum": -commands.MAX_INT, "maximum": commands.MAX_INT},
                                   {"type": "string", "pattern": r"^\s*-?[0-9]{1,16}\s*$"}]}
_IDENTITY = {"type": "string", "pattern": f"^[A-Za-z0-9_][{ids.IDENTITY_CHARS}]{{0,{ids.IDENTITY_MAX - 1}}}$",
             "not": {"pattern": "\n"}, "description": "An identity: letters, digits and ._@/+-"}
# What ids.normalise_prefix takes: w- (optional) and 1-16 hex digits, any case, around whitespace.
ITEM_PATTERN = r"^\s*(?:[wW]-)?[0-9a-fA-F]{1,16}\s*$"
_ITEM = {"type": "string", "pattern": ITEM_PATTERN, "description": "An item id or unique prefix (w-3fa9)."}
# commands.check_text: no control characters (tab and, in multi-line text, newlines are fine); one line
# with something in it besides whitespace.
_CONTROLS = "\\x00-\\x08\\x0b\\x0c\\x0e-\\x1f\\x7f\\ufffe\\uffff"
# Said as "no forbidden character anywhere" (a negated search) rather than a pattern over the whole
# string: a generator (hypothesis) draws text and drops the few that fail, instead of building the
# complement of the forbidden set over all of Unicode for every field (ten times slower). "\S": a
# one-line text has something besides whitespace (Python's strip and regex agree on what is space).
_MULTI_LINE = {"not": {"pattern": f"[{_CONTROLS}]"}}
_ONE_LINE = {"pattern": "\\S", "not": {"pattern": f"[{_CONTROLS}\\n\\r]"}}
_SHORT = {"type": "string", "minLength": 1, "maxLength": commands.MAX_SHORT, **_ONE_LINE}
# A pattern's "$" also matches before a final newline (Python's re, as ECMA's does not); the validator's
# rules end at the end (\Z, fullmatch), so the names and labels whose characters exclude a newline say so.
_NO_NEWLINE = {"not": {"pattern": "\n"}}
_LABEL = {"type": "string", "pattern": r"^[A-Za-z0-9][A-Za-z0-9_.:/+-]{0,63}$", **_NO_NEWLINE}


def _one_or_many(each: dict[str, Any]) -> dict[str, Any]:
    return {"anyOf": [each, {"type": "array", "items": each}]}


# One JSON Schema per kind of commands.KINDS (the bounds are the validator's; see the module's docstring).
KIND_SCHEMAS: dict[str, dict[str, Any]] = {
    "title": {"type": "string", "minLength": 1, "maxLength": commands.MAX_TITLE, **_ONE_LINE,
              "description": f"One line, at most {commands.MAX_TITLE} UTF-8 bytes."},
    "text": {"type": "string", "maxLength": commands.MAX_TEXT, **_MULTI_LINE,
             "description": f"Text, at most {commands.MAX_TEXT} UTF-8 bytes."},
    "short": {**_SHORT, "description": f"One line, at most {commands.MAX_SHORT} UTF-8 bytes."},
    "session": {"type": "string", "pattern": r"^[0-9]{8}-[0-9]{6}-[a-z0-9][a-z0-9-]{0,120}$", **_NO_NEWLINE,
                "description": "A session's id, as `gw session list` shows it."},
    "name": _IDENTITY,
    "int": _INT,
    "fence": {"anyOf": [{"type": "integer", "minimum": 1, "maximum": commands.MAX_INT},
                        {"type": "string", "pattern": r"^\s*[0-9]{1,16}\s*$"}],
              "description": "The fencing token of the lease you act under."},
    "epoch": {"anyOf": [_INT, {"type": "string", "enum": ["current"]}]},
    "priority": {"anyOf": [{"type": "integer", "minimum": 0, "maximum": 4},
                           {"type": "string", "pattern": r"^\s*[0-4]\s*$"}],
                 "description": "0 (highest) to 4 (lowest)."},
    "bool": {"type": "boolean"},
    "duration": {"anyOf": [{"type": "string", "minLength": 1, "maxLength": 64}, {"type": "integer"}],
                 "description": "A duration: seconds, or 90s, 15m, 1h."},
    "item": _ITEM,
    "items": _one_or_many(_ITEM),
    "labels": _one_or_many(_LABEL),
    "globs": _one_or_many({"type": "string", "minLength": 1, "maxLength": 200,
                           "description": "A path glob relative to the repository root (gitwork/paths.py)."}),
    "texts": _one_or_many(_SHORT),
    "ints": _one_or_many(_INT),
    "mapping": {"type": "object", "propertyNames": _SHORT, "additionalProperties": {"anyOf": [_SHORT, {"type": "null"}]}},
    "cmd_id": {"type": "string", "pattern": r"^[A-Za-z0-9][A-Za-z0-9_.:-]{3,63}$", **_NO_NEWLINE,
               "description": "A client-chosen command id: a retry with the same id lands once."},
    # A number from 1 (3, "#3") or a message id; "ITEM:N" and "ITEM:ID" are ids of this shape too.
    "msgref": {"anyOf": [{"type": "integer", "minimum": 1, "maximum": commands.MAX_INT},
                         {"type": "string", "pattern": r"^\s*(?!#?0+\s*$)(#?[0-9]{1,16}|[A-Za-z0-9_.:-]{4,64})\s*$"}],
               "description": "A message: its number (3 or #3) or its id."},
    # A batch's members: each is a command document, validated by the engine as the batch runs it.
    "docs": {"type": "array", "minItems": 1, "maxItems": commands.MAX_BATCH,
             "items": {"type": "object", "required": ["op"], "properties": {"op": {"type": "string"}}},
             "description": f"At most {commands.MAX_BATCH} command documents, applied in order as one commit."},
    "data": {"description": f"Plain JSON data the op checks itself, at most {commands.MAX_DATA} bytes as JSON."},
    "usd": {"anyOf": [{"type": "number", "minimum": 0, "maximum": 1000000},
                      {"type": "string", "pattern": r"^\s*[0-9]{1,7}(\.[0-9]{1,20})?\s*$"}],
            "description": "An amount in USD from 0 to 1,000,000, e.g. 0.25 (kept to the micro-dollar)."},
}


def _members() -> dict[str, Any]:
    """A batch's members: each one public op's document, any but ``batch`` (a batch holds no batch)."""
    return {**KIND_SCHEMAS["docs"], "items": {"oneOf": [
        {"$ref": f"#/components/schemas/Command_{spec.name.replace('-', '_')}"}
        for spec in public_ops() if spec.name != "batch"]}}


def field_schema(field: commands.Field) -> dict[str, Any]:
    schema = _members() if field.kind == "docs" else dict(KIND_SCHEMAS[field.kind])
    if field.choices:
        schema = {"type": "string", "enum": list(field.choices)}
    if not field.required:  # null is absent (the validator skips it)
        schema = {"anyOf": [schema, {"type": "null"}]}
    return schema


def public_ops() -> list[engine.OpSpec]:
    """Every op a face may submit (not ``internal=True``), by name."""
    internal = engine.declared("internal")
    return [engine.OPS[name] for name in sorted(engine.OPS) if name not in internal]


def op_schema(spec: engine.OpSpec) -> dict[str, Any]:
    """The JSON Schema of one op's command document, from its declaration (``as`` is the token's)."""
    fields = {**{k: v for k, v in commands.COMMON.items() if k not in ("op", "as", "lease")}, **spec.fields}
    properties: dict[str, Any] = {"op": {"type": "string", "enum": [spec.name]}}
    properties.update({name: field_schema(field) for name, field in fields.items()})
    properties["as"] = {"anyOf": [_IDENTITY, {"type": "null"}],
                        "description": "The acting identity is the token's: absent, or the token's own name."}
    required = ["op", *sorted(name for name, field in spec.fields.items() if field.required)]
    return {"title": f"{spec.name} command", "description": spec.summary, "type": "object",
            "properties": properties, "required": required, "additionalProperties": False}


def command_schemas() -> dict[str, dict[str, Any]]:
    """``{"Command_claim": schema, ...}`` for ``components.schemas``."""
    return {f"Command_{spec.name.replace('-', '_')}": op_schema(spec) for spec in public_ops()}


def command_body() -> dict[str, Any]:
    """The ``requestBody`` of ``POST /v1/commands``: one of the public ops' documents, chosen by ``op``."""
    names = {spec.name: f"#/components/schemas/Command_{spec.name.replace('-', '_')}" for spec in public_ops()}
    return {
        "required": True,
        "description": "One command document, exactly what `gw apply` takes (JSON).",
        "content": {"application/json": {"schema": {
            "oneOf": [{"$ref": ref} for ref in names.values()],
            "discriminator": {"propertyName": "op", "mapping": names},
        }}},
    }
