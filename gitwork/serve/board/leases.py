"""Drawing lease timelines: a bar per lease on a shared time axis, and the same facts as a table."""

from __future__ import annotations

from typing import Any

from ...clock import format_instant, parse_instant
from ..server import Principal, Server
from ..timeline import WINDOW, history_spans
from .page import empty, esc, query

END_CLASS = {"released": "ok", "done": "ok", "published": "ok", "revoked": "bad", "expired": "bad",
             "handed off": "warn", "handed-off": "warn", "cancelled": "warn"}


def bars(spans: list[dict[str, Any]], now: Any, *, label: str) -> str:
    """Spans as bars on one axis from the earliest start to now; ``label`` names each row's key."""
    dated = [s for s in spans if s.get("from")]
    if not dated:
        return ""
    start = min(parse_instant(s["from"]) for s in dated)
    end = max([now, *(parse_instant(s["to"]) for s in dated if s.get("to"))])
    total = max((end - start).total_seconds(), 1.0)
    rows = []
    for span in dated:
        left = (parse_instant(span["from"]) - start).total_seconds() / total * 100
        stop = parse_instant(span["to"]) if span.get("to") else now
        width = max((stop - parse_instant(span["from"])).total_seconds() / total * 100, 0.6)
        key = span.get(label) or "?"
        link = esc(f"/items/{key}" if label == "item" else f"/leases{query(holder=key)}")
        state = span.get("end") or "held"
        rows.append(f'<div class="span" data-epoch="{esc(span["epoch"])}" data-holder="{esc(span.get("holder"))}">'
                    f'<a class="key" href="{link}">{esc(key if label != "item" else key[:10])}</a>'
                    f'<div class="track"><div class="bar {END_CLASS.get(state, "live")}" '
                    f'style="left:{left:.2f}%;width:{min(width, 100 - left):.2f}%" '
                    f'title="{esc(span.get("holder"))}, epoch {esc(span["epoch"])}: {esc(span["from"])} → '
                    f'{esc(span.get("to") or "now")} ({esc(state)})"></div></div></div>')
    axis = (f'<div class="axis"><span>{esc(format_instant(start))}</span>'
            f'<span>{esc(format_instant(end))}</span></div>')
    return f'<div class="timeline">{"".join(rows)}{axis}</div>'


def table(spans: list[dict[str, Any]], *, item_column: bool) -> str:
    head = "<th>item</th>" if item_column else ""
    body = "".join(
        "<tr>" + (f'<td><a href="/items/{esc(s["item"])}">{esc(s["item"][:10])}</a></td>' if item_column else "")
        + f'<td class="holder">{esc(s.get("holder") or "?")}</td><td>{esc(s["epoch"])}</td><td>{esc(s.get("from"))}</td>'
          f'<td>{esc(s.get("to") or "held now")}</td><td class="end">{esc(s.get("end") or "")}'
          f'{" by " + esc(s["by"]) if s.get("by") and s.get("end") in ("revoked", "handed off") else ""}'
          f'{": " + esc(s["reason"]) if s.get("reason") else ""}</td><td class="renewals">{esc(s.get("renewals", "—"))}</td></tr>'
        for s in spans)
    return (f'<table class="leases"><tr>{head}<th>holder</th><th>epoch</th><th>from</th><th>to</th><th>ended</th>'
            f'<th>renewals</th></tr>{body}</table>')


def render_leases(server: Server, who: Principal, holder: str | None, before: str | None, limit: int) -> str:
    with server.plane(who) as wp:
        found = history_spans(wp, holder or None, before, limit)
        now = wp.now()
    spans = found["spans"]
    whose = f" held by <b>{esc(holder)}</b>" if holder else ""
    form = (f'<form class="search" method="get" action="/leases"><input name="holder" value="{esc(holder or "")}" '
            f'placeholder="an agent or person"> <button type="submit">Show</button></form>')
    window = (f'<p class="window">{found["read"]} commits of the state ref read'
              + (f', {esc(found["oldest"])} to {esc(found["newest"])}' if found["newest"] else "") + ".</p>")
    older = (f'<p><a class="older" href="/leases{esc(query(holder=holder, before=found["next"], limit=limit if limit != WINDOW else None))}">'
             f'older commits →</a></p>' if found["next"] else "")
    if not spans:
        body = empty(f"No lease{whose} in these commits.",
                     "Leases start with <code>gw claim ITEM</code> (or <code>gw claim --next</code>); "
                     + ("follow the link to older commits." if found["next"] else "the history holds none yet."))
    else:
        body = bars(spans, now, label="item" if holder else "holder") + table(spans, item_column=True)
    return (f'<main id="live" data-live="/v1/events"><h2>Lease timeline{whose}</h2>{form}{window}{body}{older}'
            '</main>')
