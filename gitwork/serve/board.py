"""The board: server-rendered pages over the same reads as the API, a little JavaScript, no build step.

``/`` shows the items in columns by status, each card with its lease holder and a live countdown to
expiry, and the ready order; ``/items/ID`` an item's criteria (tick them), decisions, open decision
requests (decide them), thread (post, ack) and history; ``/executions`` the executions, with their
terminal. Every action is a command document posted to ``/v1/commands`` (the page's JavaScript builds
it from the form), so the board has no write path of its own. The page listens to ``/v1/events`` and
re-renders its live part when the state ref moves, whoever moved it.

The browser authenticates with the token once (``/login``): the token is kept in an HttpOnly,
SameSite=Strict cookie, which the API accepts in place of the ``Authorization`` header. SameSite does
not separate two ports of one host, so a request the cookie authenticates must also come from this
origin, and one that changes anything must carry the session's CSRF token, which each page holds in
``<meta name="gw-csrf">`` (``guard.check_cookie_request``); sign-in and sign-out check the origin too.
"""

from __future__ import annotations

import html
from typing import Any, Callable
from urllib.parse import parse_qs, quote

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response

from ..errors import ExitCode, GwError
from ..model import STATUSES
from .guard import CSRF_FIELD, CrossOrigin, same_origin
from .server import COOKIE, Principal, Server, Unauthorized, listing, principal

# Cards per column, best first (the count is of all): 7,000 cards took 2.7 s to render at 10,000 items.
SHOWN = {"done": 50, "cancelled": 50}
SHOWN_DEFAULT = 200


def esc(value: Any) -> str:
    return html.escape("" if value is None else str(value), quote=True)


def board_router(server: Server) -> APIRouter:
    router = APIRouter(include_in_schema=False)

    def signed_in(request: Request, title: str, render: Callable[[Principal], str]) -> Response:
        """The page ``render(who)`` makes, or the sign-in form for a browser without a live token."""
        try:
            who = principal(request)
        except Unauthorized:
            return RedirectResponse(f"/login?next={quote(request.url.path)}", status_code=303)
        try:
            return page(title, render(who), who=who)
        except GwError as error:
            return page(error.kind, f'<p class="error">{esc(error.message)}</p>', who=who,
                        status=404 if error.code == ExitCode.NOT_FOUND else 409)

    @router.get("/login")
    def login_form(next: str = "/") -> HTMLResponse:  # noqa: A002 - the query parameter's name
        return page("Sign in", f"""
<form method="post" action="/login" class="login">
  <p>Paste a token from <code>gw serve token add NAME --role person</code>.</p>
  <input type="hidden" name="next" value="{esc(next)}">
  <input type="password" name="token" placeholder="gwt_..." autocomplete="off" size="50" autofocus>
  <button type="submit">Sign in</button>
</form>""", who=None)

    def from_here(request: Request) -> None:
        """A sign-in or sign-out posted by a page of another origin is refused (login CSRF)."""
        if same_origin(request.headers) is False:
            raise CrossOrigin("sign in and out from this server's own pages")

    @router.post("/login")
    async def login(request: Request) -> Response:
        from_here(request)
        body = (await request.body())[:4096].decode("utf-8", "replace")
        form = {key: values[0] for key, values in parse_qs(body).items()}
        token = form.get("token", "").strip()
        target = form.get("next", "/")
        if not target.startswith("/") or target.startswith("//"):
            target = "/"  # never redirect off this server
        if not token or server.tokens.lookup(token) is None:
            return page("Sign in", '<p class="error">Unknown or revoked token.</p><p><a href="/login">Again</a></p>',
                        who=None, status=401)
        response = RedirectResponse(target, status_code=303)
        response.set_cookie(COOKIE, token, httponly=True, samesite="strict", path="/")
        return response

    @router.post("/logout")
    async def logout(request: Request) -> Response:
        from_here(request)
        body = (await request.body())[:4096].decode("utf-8", "replace")
        form = {key: values[0] for key, values in parse_qs(body).items()}
        try:
            server.authenticate(request, form_csrf=form.get(CSRF_FIELD))  # the session's own sign-out form only
        except Unauthorized:
            pass  # no live token: clearing the cookie is all there is to do
        response = RedirectResponse("/login", status_code=303)
        response.delete_cookie(COOKIE, path="/")
        return response

    @router.get("/")
    def board(request: Request) -> Response:
        return signed_in(request, "Board", lambda who: render_board(server, who))

    @router.get("/items/{item}")
    def item_page(item: str, request: Request) -> Response:
        return signed_in(request, item, lambda who: render_item(server, who, item))

    @router.get("/executions")
    def executions_page(request: Request) -> Response:
        return signed_in(request, "Executions", lambda who: render_executions(server, who))

    @router.get("/board.js")
    def script() -> Response:
        return Response(SCRIPT, media_type="text/javascript", headers={"Cache-Control": "no-cache"})

    return router


# --- pages --------------------------------------------------------------------------------------------


def page(title: str, body: str, *, who: Principal | None, status: int = 200) -> HTMLResponse:
    nav = meta = ""
    if who is not None:
        csrf = esc(who.csrf or "")
        meta = f'<meta name="gw-csrf" content="{csrf}">'
        nav = (f'<nav><a href="/">Board</a> <a href="/executions">Executions</a> '
               f'<span class="who">{esc(who.name)} ({esc(who.role)})</span>'
               f'<form method="post" action="/logout" class="inline"><input type="hidden" name="{CSRF_FIELD}" '
               f'value="{csrf}"><button>Sign out</button></form></nav>')
    return HTMLResponse(f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width">
{meta}<title>{esc(title)} · gitwork</title><style>{STYLE}</style></head>
<body><header><h1><a href="/">gitwork</a></h1>{nav}</header>
<div id="flash" role="status"></div>
{body}
<script src="/board.js"></script></body></html>""", status_code=status,
                        headers={"Cache-Control": "no-store", "X-Frame-Options": "DENY",
                                 "Content-Security-Policy": "default-src 'self'; style-src 'self' 'unsafe-inline'"})


def _card(row: dict[str, Any], rank: int | None) -> str:
    lease = ""
    if row["holder"]:
        lease = (f'<div class="lease">held by <b class="holder">{esc(row["holder"])}</b> '
                 f'<span class="countdown" data-expires="{esc(row["expires_at"])}">until {esc(row["expires_at"])}</span></div>')
    badge = f'<span class="rank" title="ready order">#{rank}</span>' if rank else ""
    labels = "".join(f'<span class="label">{esc(label)}</span>' for label in row["labels"])
    return (f'<li class="card" data-item="{esc(row["item"])}">{badge}<a href="/items/{esc(row["item"])}">'
            f'{esc(row["title"])}</a><div class="meta"><code>{esc(row["item"][:8])}</code> p{esc(row["priority"])} '
            f'{labels}</div>{lease}</li>')


def render_board(server: Server, who: Principal) -> str:
    rows = listing(server, who, sort="rank", limit=None, priority=None, closed=True)
    ready = listing(server, who, ready=True, sort="rank", limit=None, priority=None)
    rank = {row["item"]: number for number, row in enumerate(ready, 1)}
    columns = []
    for status in STATUSES:
        mine = [row for row in rows if row["status"] == status]
        shown = mine[:SHOWN.get(status, SHOWN_DEFAULT)]
        cards = "".join(_card(row, rank.get(row["item"])) for row in shown)
        more = f'<li class="more">and {len(mine) - len(shown)} more</li>' if len(shown) < len(mine) else ""
        columns.append(f'<section class="column" data-status="{status}"><h2>{status.replace("_", " ")} '
                       f'<span class="count">{len(mine)}</span></h2><ol>{cards}{more}</ol></section>')
    order = "".join(f'<li><a href="/items/{esc(r["item"])}">{esc(r["title"])}</a></li>' for r in ready[:20])
    return (f'<main id="live" data-live="/v1/events">{_decisions_for(server, who)}'
            f'<div class="columns">{"".join(columns)}</div>'
            f'<aside class="ready"><h2>Ready order <span class="count">{len(ready)}</span></h2><ol>{order}</ol></aside>'
            '</main>')


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


def render_item(server: Server, who: Principal, text: str) -> str:
    from ..reports import show_json

    with server.plane(who) as wp:
        view = show_json(wp.show(text))
        item_id = view["item"]
        records = wp.history(item_id)
        messages = wp.thread(item_id, 0)[1]
    lease = view.get("lease") or {}
    lease_html = "<p>No lease.</p>"
    if lease.get("state") == "active":
        lease_html = (f'<p class="lease">held by <b class="holder">{esc(lease.get("holder"))}</b> (epoch '
                      f'{esc(lease.get("epoch"))}, fence {esc(lease.get("fence"))}) <span class="countdown" '
                      f'data-expires="{esc(lease.get("expires_at"))}">until {esc(lease.get("expires_at"))}</span></p>')
    criteria = "".join(
        f'<li><form data-op="check" class="inline"><input type="hidden" name="item" value="{esc(item_id)}">'
        f'<input type="hidden" name="criterion" value="{number}" data-int>'
        + ('<input type="hidden" name="uncheck" value="true" data-bool>' if c.get("checked") else "")
        + f'<button class="tick" aria-pressed="{"true" if c.get("checked") else "false"}">'
          f'{"☑" if c.get("checked") else "☐"}</button></form> <span class="criterion">{esc(c.get("text"))}</span>'
        + (f' <small>by {esc(c.get("checked_by") or c.get("by"))}</small>' if c.get("checked") else "") + "</li>"
        for number, c in enumerate(view.get("criteria") or [], 1))
    decisions = "".join(f'<li><b>{esc(d.get("text"))}</b>: {esc(d.get("why"))} <small>{esc(d.get("by"))}, '
                        f'{esc(d.get("at"))}</small></li>' for d in view.get("decisions") or [])
    decided = {d.get("question") for d in view.get("decisions") or []}
    asks = "".join(_ask(item_id, m) for m in messages if m.get("kind") == "decision-request" and m["seq"] not in decided)
    thread = "".join(_message(item_id, m) for m in messages)
    history = "".join(f'<tr><td>{esc(r.get("seq"))}</td><td>{esc(r.get("at"))}</td><td>{esc(r.get("by"))}</td>'
                      f'<td>{esc(r.get("type"))}</td></tr>' for r in records)
    last = messages[-1]["seq"] if messages else 0
    return f"""<main id="live" data-live="/v1/events" data-item="{esc(item_id)}">
<h2 class="title">{esc(view.get("title"))} <span class="status">{esc(view.get("status"))}</span></h2>
<p><code>{esc(item_id)}</code> priority {esc(view.get("priority"))}</p>
<p class="description">{esc(view.get("description"))}</p>
{lease_html}
<section><h3>Criteria</h3><ol class="criteria">{criteria}</ol></section>
<section><h3>Decisions</h3><ol class="decisions">{decisions}</ol>{asks}</section>
<section><h3>Thread</h3><ol class="thread" data-last="{last}">{thread}</ol></section>
<section><h3>History</h3><table class="history"><tr><th>#</th><th>at</th><th>by</th><th>event</th></tr>{history}</table></section>
</main>
<section class="post"><h3>Post</h3><form data-op="msg"><input type="hidden" name="item" value="{esc(item_id)}">
<input type="hidden" name="epoch" value="current"><textarea name="text" rows="2" cols="60" required></textarea>
<button type="submit">Post</button></form></section>"""


def _ask(item_id: str, message: dict[str, Any]) -> str:
    options = message.get("options") or []
    choose = ("".join(f'<label><input type="radio" name="choose" value="{esc(o)}" required> {esc(o)}</label> '
                      for o in options) if options else '<input name="choose" placeholder="your decision" required>')
    return (f'<form data-op="decide" class="ask" data-seq="{esc(message["seq"])}"><p>#{esc(message["seq"])} '
            f'{esc(message.get("by"))} asks: <b>{esc(message.get("text"))}</b></p>'
            f'<input type="hidden" name="item" value="{esc(item_id)}">'
            f'<input type="hidden" name="question" value="{esc(message["seq"])}" data-int>'
            f'<input type="hidden" name="epoch" value="current">{choose}'
            '<input name="why" placeholder="why" required> <button type="submit">Decide</button></form>')


def _message(item_id: str, message: dict[str, Any]) -> str:
    extra = f' to {esc(message["to"])}' if message.get("to") else ""
    choice = f' chose <b>{esc(message["choice"])}</b>' if message.get("choice") else ""
    return (f'<li class="message" data-seq="{esc(message["seq"])}"><small>#{esc(message["seq"])} {esc(message.get("at"))} '
            f'{esc(message.get("by"))} {esc(message.get("kind"))}{extra}{choice}</small> '
            f'<form data-op="ack" class="inline"><input type="hidden" name="item" value="{esc(item_id)}">'
            f'<input type="hidden" name="upto" value="{esc(message["seq"])}" data-int>'
            f'<input type="hidden" name="read" value="true" data-bool><input type="hidden" name="epoch" value="current">'
            f'<button class="ack">ack</button></form>'
            f'<div class="text">{esc(message.get("text"))}</div></li>')


def render_executions(server: Server, who: Principal) -> str:
    from ..launch.run import capture, runs

    with server.plane(who) as wp:
        rows = runs(wp)
        screens = {}
        for row in rows:
            if row.get("state") in ("running", "launching"):
                try:
                    screens[row["execution"]] = capture(wp, row["execution"], 20)
                except GwError as error:
                    screens[row["execution"]] = f"(no capture: {error.message})"
    body = "".join(
        f'<tr><td><code>{esc(r["execution"])}</code></td><td><a href="/items/{esc(r["item"])}">{esc(r["item"][:8])}</a>'
        f'</td><td class="state">{esc(r["state"])}{"" if r.get("code") is None else " " + esc(r["code"])}</td>'
        f'<td>{esc(r.get("backend"))}</td><td>{esc(r.get("host"))}</td><td>{esc(" ".join(r.get("command") or []))}</td>'
        f'</tr>' + (f'<tr><td colspan="6"><pre class="capture">{esc(screens[r["execution"]])}</pre></td></tr>'
                    if r["execution"] in screens else "")
        for r in rows)
    return (f'<main id="live" data-live="/v1/events"><h2>Executions <span class="count">{len(rows)}</span></h2>'
            f'<table class="executions"><tr><th>execution</th><th>item</th><th>state</th><th>backend</th><th>host</th>'
            f'<th>command</th></tr>{body}</table></main>')


STYLE = """
body{font:14px/1.4 system-ui,sans-serif;margin:0;background:#f6f7f9;color:#1d232b}
header{display:flex;align-items:center;gap:1em;background:#1d232b;color:#fff;padding:.4em 1em}
header a{color:#fff;text-decoration:none}header h1{font-size:1.1em;margin:0}
nav{display:flex;gap:1em;align-items:center;flex:1}.who{margin-left:auto;opacity:.8}
main{padding:1em}.columns{display:grid;grid-template-columns:repeat(5,minmax(12em,1fr));gap:.8em}
.column{background:#e9ecf1;border-radius:6px;padding:.4em}.column h2{font-size:.95em;margin:.2em .3em;text-transform:capitalize}
.column ol{list-style:none;margin:0;padding:0;max-height:75vh;overflow:auto}
.card{background:#fff;border-radius:5px;margin:.3em;padding:.45em;box-shadow:0 1px 2px #0002;position:relative}
.card a{color:#1d232b;text-decoration:none;font-weight:600}.meta{color:#667;font-size:.85em}
.label{background:#dfe7f5;border-radius:3px;padding:0 .3em;margin-left:.2em}
.lease{font-size:.85em;color:#7a4b00}.countdown{font-variant-numeric:tabular-nums}.countdown.expired{color:#b00}
.rank{float:right;background:#2d7a3a;color:#fff;border-radius:3px;padding:0 .3em;font-size:.8em}
.count{background:#fff;border-radius:8px;padding:0 .45em;font-size:.85em}
.ready{margin-top:1em}.asks{background:#fff4d6;border-radius:6px;padding:.4em 1em;margin-bottom:1em}
.status{font-size:.7em;background:#e9ecf1;border-radius:4px;padding:.1em .4em}
.inline{display:inline}.tick{border:0;background:none;font-size:1.2em;cursor:pointer}
.thread{list-style:none;padding:0}.message{background:#fff;border-radius:5px;margin:.3em 0;padding:.4em}
.message .text{white-space:pre-wrap}.ack{font-size:.75em}.ask{background:#fff4d6;padding:.5em;border-radius:5px}
table{border-collapse:collapse}td,th{padding:.2em .6em;border-bottom:1px solid #dde;text-align:left}
.capture{background:#111;color:#ddd;padding:.5em;max-height:15em;overflow:auto}
#flash{padding:0 1em}#flash.error{background:#fdd;padding:.5em 1em}.error{color:#b00}
.post{padding:0 1em 1em}.login{padding:2em}
"""

# Countdowns tick every second from each card's expiry; a state event re-renders #live (forms outside it
# keep what is being typed); every form with data-op posts its fields as one command document.
SCRIPT = r"""
(function () {
  function tick() {
    var now = Date.now();
    document.querySelectorAll('[data-expires]').forEach(function (el) {
      var left = Math.round((Date.parse(el.dataset.expires) - now) / 1000);
      if (isNaN(left)) return;
      if (left <= 0) { el.textContent = 'expired'; el.classList.add('expired'); return; }
      var h = Math.floor(left / 3600), m = Math.floor(left % 3600 / 60), s = left % 60;
      el.textContent = (h ? h + 'h ' : '') + (h || m ? m + 'm ' : '') + s + 's left';
    });
  }
  function flash(text, bad) {
    var el = document.getElementById('flash');
    el.textContent = text || ''; el.className = bad ? 'error' : '';
  }
  var busy = false, again = false;
  function refresh() {
    if (busy) { again = true; return; }
    busy = true;
    fetch(location.href, {credentials: 'same-origin'}).then(function (r) { return r.text(); }).then(function (text) {
      var fresh = new DOMParser().parseFromString(text, 'text/html').getElementById('live');
      var live = document.getElementById('live');
      if (fresh && live) { live.replaceWith(fresh); tick(); }
    }).finally(function () { busy = false; if (again) { again = false; refresh(); } });
  }
  function value(input) {
    if (input.hasAttribute('data-int')) return parseInt(input.value, 10);
    if (input.hasAttribute('data-bool')) return input.value === 'true';
    return input.value;
  }
  document.addEventListener('submit', function (event) {
    var form = event.target;
    if (!form.dataset || !form.dataset.op) return;
    event.preventDefault();
    var doc = {op: form.dataset.op};
    form.querySelectorAll('input,textarea,select').forEach(function (input) {
      if (!input.name || ((input.type === 'radio' || input.type === 'checkbox') && !input.checked)) return;
      doc[input.name] = value(input);
    });
    var csrf = document.querySelector('meta[name=gw-csrf]');
    fetch('/v1/commands', {method: 'POST', credentials: 'same-origin',
                           headers: {'Content-Type': 'application/json', 'X-CSRF-Token': csrf ? csrf.content : ''},
                           body: JSON.stringify(doc)})
      .then(function (r) { return r.json().then(function (body) { return [r.status, body]; }); })
      .then(function (answer) {
        var body = answer[1];
        if (body.ok) { flash(doc.op + ' done'); if (form.querySelector('textarea')) form.reset(); refresh(); }
        else flash(body.error + ': ' + body.message, true);
      });
  });
  var live = document.getElementById('live');
  if (live && window.EventSource) {
    var source = new EventSource(live.dataset.live);
    source.addEventListener('state', refresh);
    document.documentElement.dataset.stream = 'connecting';
    source.addEventListener('hello', function () { document.documentElement.dataset.stream = 'open'; });
  }
  tick();
  setInterval(tick, 1000);
})();
"""
