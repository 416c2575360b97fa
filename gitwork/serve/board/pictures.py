"""``/graph``: the whole board's dependency graph, filtered by label and status (open ones by default),
at most ``graph.MAX_NODES`` items, best first; past that the page says how to narrow it."""

from __future__ import annotations

from ...model import CLOSED, STATUSES
from ..server import Principal, Server
from . import graph
from .page import empty, esc, query


def render_graph(server: Server, who: Principal, labels: list[str], statuses: list[str]) -> str:
    from ...errors import UsageError
    from ...queries import select

    unknown = sorted(set(statuses) - set(STATUSES))
    if unknown:
        raise UsageError(f"unknown status {unknown[0][:40]!r}; known: {', '.join(STATUSES)}")
    chosen = set(statuses) or {s for s in STATUSES if s not in CLOSED}
    with server.plane(who) as wp:
        ctx = wp.context()
        picked = select(ctx.snapshot, ctx.now, wp.settings.clock_margin, statuses=sorted(chosen), labels=labels,
                        sort="rank", limit=graph.MAX_NODES, shorten=False)
        anything = bool(picked.rows) or bool(select(ctx.snapshot, ctx.now, wp.settings.clock_margin, closed=True,
                                                    sort="rank", limit=1, shorten=False).rows)
    rows = {row[0]: row for row in picked.rows}
    ids = list(rows)
    boxes = "".join(f'<label><input type="checkbox" name="status" value="{s}"{" checked" if s in chosen else ""}> '
                    f'{s.replace("_", " ")}</label> ' for s in STATUSES)
    form = (f'<form class="search" method="get" action="/graph">{boxes}<input name="label" placeholder="label" '
            f'value="{esc(labels[0] if labels else "")}" size="12"> <button type="submit">Draw</button></form>')
    cut = (f'<p class="note">Showing the first {len(ids)} items, best first; more match: narrow it with a label '
           f'or a status.</p>' if picked.cut else f'<p class="found">{len(ids)} items.</p>')
    if not anything:
        body = empty("No items yet.", 'Create some with <code>gw new "title" --dep OTHER</code>.')
    elif not ids:
        body = empty(f'No item is {" or ".join(sorted(chosen))}{" with label " + esc(", ".join(labels)) if labels else ""}.',
                     f'<a href="/graph{query(status=list(STATUSES))}">Draw every status</a>.')
    else:
        body = cut + f'<div class="graph-wrap">{graph.svg(ids, rows)}</div>'
    return f'<main id="live" data-live="/v1/events"><h2>Dependency graph</h2>{form}{body}</main>'
