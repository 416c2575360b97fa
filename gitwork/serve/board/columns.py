"""``/``: the items in columns by status, searched, filtered and paged on the server.

One SQL selection over the read cache gives every item's summary tuple (cheap); search and filters
run over those tuples, and only the cards a page shows are turned into rows and HTML, so the first
render of a 10,000-item board costs one selection, not 10,000 cards (docs/serve.md, "The board").
"""

from __future__ import annotations

from typing import Any

from ...errors import UsageError
from ...model import STATUSES
from ..server import Principal, Server
from .page import empty, esc, query

PAGE = 200  # cards per column page
SHOWN = {"done": 50, "cancelled": 50}  # closed columns show fewer on the whole board; their own page pages by PAGE
MAX_QUERY = 200


class Filters:
    """The board's search and filters, from the query string: ``q`` (an id, or text found in a title or a
    label, any case), ``label`` (every one given), ``status`` (one column, paged by ``page``)."""

    def __init__(self, q: str = "", labels: list[str] | None = None, status: str | None = None,
                 page: int = 1) -> None:
        if len(q) > MAX_QUERY:
            raise UsageError(f"a search is at most {MAX_QUERY} characters")
        if status is not None and status not in STATUSES:
            raise UsageError(f"unknown status {status[:40]!r}; known: {', '.join(STATUSES)}")
        if page < 1:
            raise UsageError("page numbers start at 1")
        self.q, self.labels, self.status, self.page = q.strip(), list(labels or ()), status, page

    def link(self, **changes: Any) -> str:
        fields = {"q": self.q, "label": self.labels, "status": self.status, "page": self.page, **changes}
        return "/" + query(**fields)


def _card(row: dict[str, Any], rank: int | None) -> str:
    lease = ""
    if row["holder"]:
        lease = (f'<div class="lease">held by <a class="holder" href="/leases{esc(query(holder=row["holder"]))}">'
                 f'{esc(row["holder"])}</a> <span class="countdown" data-expires="{esc(row["expires_at"])}">until '
                 f'{esc(row["expires_at"])}</span></div>')
    badge = f'<span class="rank" title="ready order">#{rank}</span>' if rank else ""
    labels = "".join(f'<a class="label" href="/{esc(query(label=label))}">{esc(label)}</a>' for label in row["labels"])
    return (f'<li class="card" data-item="{esc(row["item"])}">{badge}<a href="/items/{esc(row["item"])}">'
            f'{esc(row["title"])}</a><div class="meta"><code>{esc(row["item"][:8])}</code> p{esc(row["priority"])} '
            f'{labels}</div>{lease}</li>')


def _search_form(filters: Filters, total: int, found: int) -> str:
    labels = "".join(f'<input type="hidden" name="label" value="{esc(label)}">' for label in filters.labels)
    status = f'<input type="hidden" name="status" value="{esc(filters.status)}">' if filters.status else ""
    chips = "".join(f'<a class="chip" href="{esc(filters.link(label=[x for x in filters.labels if x != label], page=1))}"'
                    f' title="remove this filter">label: {esc(label)} ✕</a>' for label in filters.labels)
    if filters.status:
        chips += f'<a class="chip" href="{esc(filters.link(status=None, page=1))}">status: {esc(filters.status)} ✕</a>'
    shown = f'{found} of {total} items' if found != total else f'{total} items'
    return (f'<form class="search" method="get" action="/" role="search">{labels}{status}'
            f'<input type="search" name="q" value="{esc(filters.q)}" placeholder="search by id, title or label" '
            f'maxlength="{MAX_QUERY}" size="36"> <button type="submit">Search</button> {chips}'
            f' <span class="found">{shown}</span></form>')


def render_board(server: Server, who: Principal, filters: Filters) -> str:
    from ...reports import listing_json
    from .query import read_page

    sizes = {}
    for status in [filters.status] if filters.status else STATUSES:
        size = PAGE if filters.status else SHOWN.get(status, PAGE)
        sizes[status] = ((filters.page - 1) * size if filters.status else 0, size)
    with server.plane(who) as wp:
        ctx = wp.context()
        now = ctx.now
        board = read_page(ctx.snapshot, now, wp.settings.clock_margin, q=filters.q, labels=filters.labels, sizes=sizes)
    if board.total == 0:
        return ('<main id="live" data-live="/v1/events">'
                + empty("No items yet.", 'Create one in a terminal: <code>gw new "Design the schema"</code>, or '
                        'import a tracker\'s export with <code>gw import</code>; it appears here at once.') + '</main>')
    found = sum(board.counts.values())
    rank = {item: number for number, item in enumerate(board.ready, 1)}
    columns = []
    for status, (start, size) in sizes.items():
        count = board.counts.get(status, 0)
        shown = listing_json(board.columns[status], now)
        cards = "".join(_card(row, rank.get(row["item"])) for row in shown)
        pager = ""
        if filters.status:
            pages = max(1, -(-count // size))
            prev = (f'<a class="prev" href="{esc(filters.link(page=filters.page - 1))}">← previous</a> '
                    if filters.page > 1 else "")
            nxt = (f' <a class="next" href="{esc(filters.link(page=filters.page + 1))}">next {size} →</a>'
                   if start + size < count else "")
            pager = f'<li class="pager">{prev}page {filters.page} of {pages}{nxt}</li>'
        elif len(shown) < count:
            pager = (f'<li class="more">and {count - len(shown)} more: <a class="next" '
                     f'href="{esc(filters.link(status=status, page=2 if size == PAGE else 1))}">'
                     f'{"next " + str(size) if size == PAGE else "all"} →</a></li>')
        if not count:
            cards = f'<li class="none">{_none(status, filters)}</li>'
        title = (f'<a href="{esc(filters.link(status=status, page=1))}">{status.replace("_", " ")}</a>'
                 if not filters.status else status.replace("_", " "))
        columns.append(f'<section class="column" data-status="{status}"><h2>{title} '
                       f'<span class="count">{count}</span></h2><ol>{cards}{pager}</ol></section>')
    nothing = ""
    if not found:
        nothing = empty(f'No item matches <b>{esc(filters.q or ", ".join(filters.labels))}</b>.',
                        'Search by a part of an id (<code>3fa9</code>), a word of a title or a label; '
                        '<a href="/">clear the search</a>.')
    order = "".join(f'<li><a href="/items/{esc(item)}">{esc(title)}</a></li>' for item, title in board.ready_titles)
    if not board.ready:
        order = ('<li class="none">Nothing is ready: every open item is held or waits on a dependency. '
                 'Add one with <code>gw new</code>, or look at the blocked column.</li>')
    grid = "single" if filters.status else ""
    return (f'<main id="live" data-live="/v1/events">{_decisions_for(server, who)}'
            f'{_search_form(filters, board.total, found)}{nothing}'
            f'<div class="columns {grid}">{"".join(columns)}</div>'
            f'<aside class="ready"><h2>Ready order <span class="count">{len(board.ready)}</span></h2><ol>{order}</ol>'
            f'</aside></main>')


def _none(status: str, filters: Filters) -> str:
    if filters.q or filters.labels:
        return "none match"
    return {"open": 'nothing open: <code>gw new "title"</code>',
            "in_progress": "nobody holds anything: an agent takes work with <code>gw claim --next</code>",
            "blocked": "nothing blocked", "done": "nothing done yet", "cancelled": "nothing cancelled"}.get(status, "none")


def _decisions_for(server: Server, who: Principal) -> str:
    """Decision requests in the viewer's inbox (addressed to them): each with its options."""
    if who.role == "agent":
        return ""
    with server.plane(who) as wp:
        box = wp.inbox()
    asks = [m for m in box["unread"] + box["unanswered"] if m.get("kind") == "decision-request"]
    if not asks:
        return ""
    entries = "".join(f'<li><a href="/items/{esc(m["item"])}">{esc(m["item"][:8])} #{esc(m["seq"])}</a> '
                      f'{esc(m.get("text"))} <span class="options">{esc(" | ".join(m.get("options") or []))}</span></li>'
                      for m in asks)
    return f'<section class="asks"><h2>Decisions awaiting you</h2><ul>{entries}</ul></section>'
