"""Item templates: ``templates:`` in the tracked ``.workplane``, expanded by ``gw new --template NAME``.

A template is a mapping of ``title`` (a prefix put before the title given), ``labels``, ``priority``,
``type``, ``criteria`` and ``description`` (a skeleton). It is expanded into the fields of the ``new``
command document before the document is built, so the document (and the state commit recording it)
holds the result: nothing downstream, the arbiter's replay included, needs the template. The command
line's scalars override the template's; its lists are added to the template's. A template is checked
when used (an unknown key or a bad value: exit 5 naming it), with the ``new`` op's own field rules.

Standard library only (the templates come from ``Settings.extra``, already parsed): the fast path.
"""

from __future__ import annotations

from .errors import Invalid

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

    from .config import Settings

KEYS = ("title", "labels", "priority", "type", "criteria", "description")
# Template key -> the ``new`` op's field (checked by its declared kind, commands.py).
_FIELDS = {"labels": "labels", "priority": "priority", "type": "type", "criteria": "criteria",
           "description": "description"}


def names(settings: Settings) -> list[str]:
    found = settings.extra.get("templates")
    return sorted(str(n) for n in found) if isinstance(found, dict) else []


def template(settings: Settings, name: str) -> dict[str, Any]:
    """The template ``name``, checked; an unknown one is exit 5 naming the known ones."""
    found = settings.extra.get("templates")
    if found is not None and not isinstance(found, dict):
        raise Invalid("bad templates in .workplane: a mapping of template names to mappings")
    if not found or name not in found:
        known = ", ".join(names(settings)) or "none (add templates: to .workplane)"
        raise Invalid(f"unknown template {name[:40]!r}: known: {known}")
    body = found[name]
    if body is None:
        return {}
    if not isinstance(body, dict):
        raise Invalid(f"bad template {name!r} in .workplane: a mapping of {', '.join(KEYS)}")
    unknown = [str(k) for k in body if k not in KEYS]
    if unknown:
        raise Invalid(f"bad template {name!r} in .workplane: unknown key {unknown[0][:40]!r} "
                      f"(known: {', '.join(KEYS)})")
    if "title" in body and not isinstance(body["title"], str):
        raise Invalid(f"bad template {name!r} in .workplane: title is a text (the prefix of the title)")
    from .engine import validate_command

    fields = {_FIELDS[k]: v for k, v in body.items() if k in _FIELDS and v is not None}
    try:  # the new op's own rules for each field (a label's form, priority 0-4, the types, text bounds)
        clean = validate_command({"op": "new", "title": "template", **fields})
    except Invalid as error:
        raise Invalid(f"bad template {name!r} in .workplane: {error.message}") from error
    # Its values as the rules read them (``labels: bug`` is the list [bug], ``priority: '0'`` is 0), not
    # as written: expand() spreads the lists, and a bare text spread is its letters.
    return {**body, **{key: clean[field] for key, field in _FIELDS.items() if field in fields}}


def expand(settings: Settings, name: str, given: dict[str, Any]) -> dict[str, Any]:
    """The ``new`` document's fields from template ``name`` and the command line's ``given`` (``None``:
    not given): scalars given win, lists given are added after the template's."""
    body = template(settings, name)
    out = dict(given)
    if out.get("title") is not None:
        out["title"] = prefixed(settings, name, out["title"])
    for key in ("priority", "type", "description"):
        if out.get(key) is None and body.get(key) is not None:
            out[key] = body[key]
    for key in ("labels", "criteria"):
        if body.get(key):
            out[key] = [*body[key], *(v for v in out.get(key) or () if v not in body[key])]
    return out


def prefixed(settings: Settings, name: str, title: str) -> str:
    """``title`` behind template ``name``'s title prefix (unless it already starts with it: an editor form
    shows the title as it will be)."""
    prefix = template(settings, name).get("title") or ""
    return title if title.startswith(prefix) else prefix + title
