"""Pictures of the dependency graph, laid out on the server and drawn as SVG (no script, no CDN).

The layout is igraph's Sugiyama layout (``Graph.layout_sugiyama``: crossings reduced by the
barycenter heuristic) over layers computed here (longest path), each long edge split into one dummy
vertex per layer it crosses. igraph is maintained, ships binary wheels on PyPI for Linux, macOS and Windows (``pip
install 'gitwork[serve]'``), needs nothing from the network at run time, and its C core is fast
enough to lay out a picture per request (docs/serve.md says why it was chosen). A dependency is drawn above the items
that wait on it: an arrow points from what must be done first to what it unblocks.
"""

from __future__ import annotations

from typing import Any

from .page import esc

MAX_NODES = 300  # the whole board's picture; past it, the page says how to narrow it (a label, a status)
NEIGHBOURS = 2  # an item's picture: its dependencies and dependants this many steps away
NODE_W, NODE_H, GAP_X, GAP_Y, PAD = 170, 38, 24, 56, 12
COLOURS = {"open": "#ffffff", "in_progress": "#fff1c9", "blocked": "#fbd5d5", "done": "#d7f0db",
           "cancelled": "#e4e4e4"}


def layers(ids: list[str], rows: dict[str, tuple[Any, ...]]) -> list[int]:
    """Each item's layer: 0 without a dependency among ``ids``, else one below its deepest dependency
    (longest-path layering; the engine refuses dependency cycles, and a cycle in damaged data is cut)."""
    from ...index import DEPS

    where = {item: n for n, item in enumerate(ids)}
    deps = [[where[d] for d in rows[item][DEPS] if d in where] for item in ids]
    layer: list[int | None] = [None] * len(ids)
    for start in range(len(ids)):
        stack, on_path = [start], set()
        while stack:  # iterative depth-first: a long chain must not hit Python's recursion limit
            node = stack[-1]
            if layer[node] is not None:
                stack.pop()
                continue
            on_path.add(node)
            waiting = [d for d in deps[node] if layer[d] is None and d not in on_path]
            if waiting:
                stack.extend(waiting)
                continue
            known = [value for value in (layer[d] for d in deps[node]) if value is not None]
            layer[node] = 1 + max(known, default=-1)
            on_path.discard(node)
            stack.pop()
    return [value or 0 for value in layer]


def layout(ids: list[str], rows: dict[str, tuple[Any, ...]]) -> tuple[list[tuple[float, float]], list[Any]]:
    """Node positions (x, layer) and, per edge (dependency, dependant), the points of its route: one
    per layer it crosses. The long edges are split here through dummy vertices, one per crossed layer,
    so igraph orders them with the nodes (igraph's own routing output came back attached to the wrong
    edge in igraph 1.0; tests/test_board_pages.py keeps this honest)."""
    import igraph

    from ...index import DEPS

    where = {item: n for n, item in enumerate(ids)}
    level = layers(ids, rows)
    count, vertex_layers = len(ids), list(level)
    graph_edges: list[tuple[int, int]] = []
    routes: list[tuple[int, int, list[int]]] = []
    for b, item in enumerate(ids):
        for dep in rows[item][DEPS]:
            a = where.get(dep)
            if a is None or level[a] >= level[b]:
                continue  # not shown, or a cut cycle
            chain, previous = [], a
            for crossed in range(level[a] + 1, level[b]):
                chain.append(count)
                vertex_layers.append(crossed)
                graph_edges.append((previous, count))
                previous, count = count, count + 1
            graph_edges.append((previous, b))
            routes.append((a, b, chain))
    graph = igraph.Graph(n=count, edges=graph_edges, directed=True)
    placed = graph.layout_sugiyama(layers=vertex_layers)
    coords = [(float(x), float(y)) for x, y in placed.coords[:count]]
    return coords[: len(ids)], [(a, b, [coords[v] for v in chain]) for a, b, chain in routes]


def svg(ids: list[str], rows: dict[str, tuple[Any, ...]], centre: str | None = None) -> str:
    """The picture of ``ids`` and the dependencies among them, each node a link to its item's page."""
    from ...index import STATUS, TITLE

    if not ids:
        return ""
    coords, edges = layout(ids, rows)
    xs = [x for x, _ in coords] + [x for _a, _b, route in edges for x, _ in route]

    def at(x: float, y: float) -> tuple[float, float]:
        return (PAD + (x - min(xs)) * (NODE_W + GAP_X), PAD + y * (NODE_H + GAP_Y))

    width = PAD * 2 + (max(xs) - min(xs)) * (NODE_W + GAP_X) + NODE_W
    height = PAD * 2 + max(y for _, y in coords) * (NODE_H + GAP_Y) + NODE_H
    lines = []
    for a, b, route in edges:
        ax, ay = at(*coords[a])
        bx, by = at(*coords[b])
        points = [(ax + NODE_W / 2, ay + NODE_H)]
        points += [(px + NODE_W / 2, py + NODE_H / 2) for px, py in (at(x, y) for x, y in route)]
        points.append((bx + NODE_W / 2, by))
        path = " ".join(f"{x:.0f},{y:.0f}" for x, y in points)
        lines.append(f'<polyline class="edge" data-from="{esc(ids[a])}" data-to="{esc(ids[b])}" points="{path}" '
                     f'marker-end="url(#arrow)"/>')
    nodes = []
    for n, item in enumerate(ids):
        x, y = at(*coords[n])
        row = rows[item]
        title = row[TITLE] if len(row[TITLE]) <= 24 else row[TITLE][:23] + "…"
        mark = " centre" if item == centre else ""
        nodes.append(f'<a href="/items/{esc(item)}" class="node{mark}" data-item="{esc(item)}" '
                     f'data-status="{esc(row[STATUS])}"><title>{esc(row[TITLE])} ({esc(row[STATUS])})</title>'
                     f'<rect x="{x:.0f}" y="{y:.0f}" width="{NODE_W}" height="{NODE_H}" rx="5" '
                     f'fill="{COLOURS.get(row[STATUS], "#fff")}"/>'
                     f'<text x="{x + 8:.0f}" y="{y + 15:.0f}">{esc(title)}</text>'
                     f'<text x="{x + 8:.0f}" y="{y + 30:.0f}" class="sub">{esc(item[:8])} · '
                     f'{esc(row[STATUS].replace("_", " "))}</text></a>')
    return (f'<svg class="graph" xmlns="http://www.w3.org/2000/svg" width="{width:.0f}" height="{height:.0f}" '
            f'viewBox="0 0 {width:.0f} {height:.0f}" role="img" aria-label="dependency graph">'
            '<defs><marker id="arrow" viewBox="0 0 10 10" refX="10" refY="5" markerWidth="7" markerHeight="7" '
            'orient="auto-start-reverse"><path d="M 0 0 L 10 5 L 0 10 z" fill="#667"/></marker></defs>'
            f'{"".join(lines)}{"".join(nodes)}</svg>')
