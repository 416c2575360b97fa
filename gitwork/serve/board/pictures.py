"""``/graph``: the whole board's dependency graph, filtered by label and status (open ones by default),
at most ``graph.MAX_NODES`` items, best first; past that the page says how to narrow it."""

from __future__ import annotations

from ...model import CLOSED, STATUSES
from ..server import Principal, Server
from . import graph
from .page import empty, esc, query


def render_graph(server: Server, who: Principal, labels: list[str], statuses: list[str]) -> str:
    with server.plane(who) as wp:
        _ctx, rows = wp.rows()
    ids = graph.whole(rows, labels, statuses)
    shown = ids[: graph.MAX_NODES]
    chosen = set(statuses) or {s for s in STATUSES if s not in CLOSED}
    boxes = "".join(f'<label><input type="checkbox" name="status" value="{s}"{" checked" if s in chosen else ""}> '
                    f'{s.replace("_", " ")}</label> ' for s in STATUSES)
    form = (f'<form class="search" method="get" action="/graph">{boxes}<input name="label" placeholder="label" '
            f'value="{esc(labels[0] if labels else "")}" size="12"> <button type="submit">Draw</button></form>')
    cut = (f'<p class="note">Showing the first {len(shown)} of {len(ids)} items, best first: narrow it with a label '
           f'or a status.</p>' if len(shown) < len(ids) else f'<p class="found">{len(ids)} items.</p>')
    if not rows:
        body = empty("No items yet.", 'Create some with <code>gw new "title" --depends-on OTHER</code>.')
    elif not ids:
        body = empty(f'No item is {" or ".join(sorted(chosen))}{" with label " + esc(", ".join(labels)) if labels else ""}.',
                     f'<a href="/graph{query(status=list(STATUSES))}">Draw every status</a>.')
    else:
        body = cut + f'<div class="graph-wrap">{graph.svg(shown, rows)}</div>'
    return f'<main id="live" data-live="/v1/events"><h2>Dependency graph</h2>{form}{body}</main>'
