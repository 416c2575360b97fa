"""``gw dep graph``: the dependency graph as text for Mermaid or Graphviz dot (issue 25, point 8).

Read-only, built on :meth:`Workplane.rows` (the read cache) like the other reports. An edge
``dependency -> dependent`` reads "do this first": the arrow follows the order of work. Around an
item, the graph holds everything it depends on and everything that depends on it, transitively
(what ``gw dep tree`` shows, as one graph); the whole graph holds every item with an edge.

Ids and titles come from people and imports, so every label is escaped for its format: a title
must never end a label early, add a node or an edge, or inject a directive.
"""

from __future__ import annotations

import re

from .errors import UsageError

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

    from .workplane import Workplane

FORMATS = ("mermaid", "dot")
_CONTROL = re.compile(r"[\x00-\x1f\x7f\u2028\u2029]")


def graph(wp: Workplane, text: str | None = None) -> dict[str, Any]:
    """``{"nodes": [{item, title, status}], "edges": [{"from": dependency, "to": dependent}]}``, sorted."""
    from .reports import _row

    ctx, raw = wp.rows()
    rows = {item_id: _row(row) for item_id, row in raw.items()}
    edges = sorted({(dep, item_id) for item_id, row in rows.items() for dep in row["deps"]})
    if text is None:
        keep = {end for edge in edges for end in edge}
    else:
        root = ctx.resolve(text)
        keep = _around(root, edges)
        edges = [edge for edge in edges if edge[0] in keep and edge[1] in keep]
    nodes = [{"item": item_id, "title": rows[item_id]["title"] if item_id in rows else None,
              "status": rows[item_id]["status"] if item_id in rows else "unknown"} for item_id in sorted(keep)]
    return {"nodes": nodes, "edges": [{"from": a, "to": b} for a, b in edges]}


def _around(root: str, edges: list[tuple[str, str]]) -> set[str]:
    """The root, what it depends on and what depends on it, transitively (not siblings' other deps)."""
    keep = {root}
    for forward in (True, False):
        step: dict[str, list[str]] = {}
        for a, b in edges:
            step.setdefault(b if forward else a, []).append(a if forward else b)
        todo, seen = [root], {root}
        while todo:
            for other in step.get(todo.pop(), ()):
                if other not in seen:
                    seen.add(other)
                    todo.append(other)
        keep |= seen
    return keep


def render(doc: dict[str, Any], fmt: str) -> str:
    """The graph as Mermaid (``flowchart``) or dot source; ``UsageError`` for another format."""
    if fmt not in FORMATS:
        raise UsageError(f"unknown graph format {fmt!r} (mermaid or dot)")
    labels = {n["item"]: _label(n) for n in doc["nodes"]}
    if fmt == "mermaid":
        lines = ["flowchart TD"]
        lines += [f'  {_mermaid_id(i)}["{_mermaid_text(label)}"]' for i, label in labels.items()]
        lines += [f"  {_mermaid_id(e['from'])} --> {_mermaid_id(e['to'])}" for e in doc["edges"]]
    else:
        lines = ["digraph deps {", "  rankdir=TB;"]
        lines += [f'  "{_dot_text(i)}" [label="{_dot_text(label)}"];' for i, label in labels.items()]
        lines += [f'  "{_dot_text(e["from"])}" -> "{_dot_text(e["to"])}";' for e in doc["edges"]]
        lines.append("}")
    return "\n".join(lines) + "\n"


def _label(node: dict[str, Any]) -> str:
    return _CONTROL.sub(" ", f"{node['item']} [{node['status']}] {node['title'] or ''}".rstrip())


def _mermaid_id(item_id: str) -> str:
    # A node id is a bare word: anything else (a hyphen reads as an edge) becomes _xx, one-to-one.
    return "n_" + "".join(c if c.isascii() and c.isalnum() else f"_{ord(c):x}_" for c in item_id)


def _mermaid_text(text: str) -> str:
    # Inside ["..."] Mermaid reads #name; entities: escape # first, then what ends or marks up a label.
    for char, entity in (("#", "#35;"), ('"', "#quot;"), ("<", "#lt;"), (">", "#gt;"), ("`", "#96;")):
        text = text.replace(char, entity)
    return text


def _dot_text(text: str) -> str:
    # In a quoted dot string only \ and " are special; doubling \ also disarms \n, \l, \N in labels.
    return _CONTROL.sub(" ", text).replace("\\", "\\\\").replace('"', '\\"')
