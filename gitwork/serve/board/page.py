"""The frame every board page shares: the header and navigation, the session's CSRF token, the headers
that keep the page out of frames and off other origins' scripts, and the static assets (``static/``,
shipped in the package and read once)."""

from __future__ import annotations

import html
from functools import lru_cache
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

from fastapi.responses import HTMLResponse

from ..guard import CSRF_FIELD
from ..server import Principal

STATIC = Path(__file__).with_name("static")
ASSETS = {"board.js": "text/javascript", "board.css": "text/css"}


def esc(value: Any) -> str:
    return html.escape("" if value is None else str(value), quote=True)


def query(**params: Any) -> str:
    """``?a=1&b=2`` of the parameters that are set (a link keeps the page's search and filters)."""
    kept = [(k, v) for k, v in params.items() if v not in (None, "", [], 1 if k == "page" else None)]
    flat = [(k, item) for k, v in kept for item in (v if isinstance(v, (list, tuple)) else [v])]
    return "?" + urlencode(flat) if flat else ""


@lru_cache(maxsize=None)
def asset(name: str) -> bytes:
    return (STATIC / name).read_bytes()


def page(title: str, body: str, *, who: Principal | None, status: int = 200, commit: str | None = None) -> HTMLResponse:
    """A whole page. ``commit``: the state ref's commit read before ``body`` was rendered (``gw-commit``):
    ``board.js`` re-renders when its event stream says the ref is elsewhere, at its first message too."""
    nav = meta = ""
    if who is not None:
        csrf = esc(who.csrf or "")
        meta = (f'<meta name="gw-csrf" content="{csrf}"><meta name="gw-role" content="{esc(who.role)}">'
                f'<meta name="gw-commit" content="{esc(commit or "")}">')
        nav = (f'<nav><a href="/">Board</a> <a href="/graph">Graph</a> <a href="/executions">Executions</a> '
               f'<a href="/leases">Leases</a> <span class="who">{esc(who.name)} ({esc(who.role)})</span>'
               f'<form method="post" action="/logout" class="inline"><input type="hidden" name="{CSRF_FIELD}" '
               f'value="{csrf}"><button>Sign out</button></form></nav>')
    return HTMLResponse(f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width">
{meta}<title>{esc(title)} · gitwork</title><link rel="stylesheet" href="/board.css"></head>
<body><header><h1><a href="/">gitwork</a></h1>{nav}</header>
<div id="flash" role="status"></div>
{body}
<script src="/board.js"></script></body></html>""", status_code=status,
                        headers={"Cache-Control": "no-store", "X-Frame-Options": "DENY",
                                 "Content-Security-Policy": "default-src 'self'; style-src 'self' 'unsafe-inline'"})


def empty(text: str, hint: str = "") -> str:
    """An empty state: what is missing, and what to do about it."""
    return f'<div class="empty"><p>{text}</p>{f"<p>{hint}</p>" if hint else ""}</div>'
