"""``/items/ID``: an item's criteria (tick them), decisions and open decision requests (decide them),
thread (post, ack), the picture of its dependency neighbourhood, its lease timeline and history, and
for admins the steering forms: revoke the lease, hand it off to a named identity, stop an execution.
Every form is one command document posted to ``/v1/commands`` by ``board.js``; the server's roles
decide (a person who is not an admin is refused with 77, and the page shows the refusal)."""

from __future__ import annotations

from typing import Any

from ...model import HANDOFF_REASONS
from ..server import Principal, Server
from .page import esc


def render_item(server: Server, who: Principal, text: str) -> str:
    from ...launch.run import LIVE, runs
    from ...ledger import cost_line, item_cost
    from ...reports import show_json
    from ..timeline import item_spans
    from . import graph
    from .leases import bars, table
    from .query import neighbourhood

    with server.plane(who) as wp:
        view = show_json(wp.show(text))
        item_id = view["item"]
        records = wp.history(item_id)
        messages = wp.thread(item_id, 0)[1]
        ctx = wp.context()
        spans = item_spans(records, ctx.lease(item_id), ctx.now)
        live_runs = [r for r in runs(wp, item_id) if r.get("state") in LIVE]
        near, rows = neighbourhood(ctx.snapshot, item_id, graph.NEIGHBOURS, graph.MAX_NODES)
        picture = graph.svg(near, rows, centre=item_id) if len(near) > 1 else ""
        now = ctx.now
        spent = cost_line(item_cost(ctx, item_id))  # the execution ledger and budget (docs/launch.md)
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
{f'<p class="ledger">cost: {esc(spent)}</p>' if spent else ""}
<section><h3>Criteria</h3><ol class="criteria">{criteria}</ol></section>
<section><h3>Decisions</h3><ol class="decisions">{decisions}</ol>{asks}</section>
<section><h3>Thread</h3><ol class="thread" data-last="{last}">{thread}</ol></section>
<section class="neighbourhood"><h3>Dependencies</h3>{picture or '<p class="none">No dependencies either way. Add one with <code>gw edit ITEM --add-dep OTHER</code>.</p>'}</section>
<section class="item-leases"><h3>Lease timeline</h3>{bars(spans, now, label="holder") + table(spans, item_column=False) if spans else '<p class="none">Never leased. An agent takes it with <code>gw claim ITEM</code>.</p>'}</section>
<section><h3>History</h3><table class="history"><tr><th>#</th><th>at</th><th>by</th><th>event</th></tr>{history}</table></section>
</main>
<section class="post"><h3>Post</h3><form data-op="msg"><input type="hidden" name="item" value="{esc(item_id)}">
<input type="hidden" name="epoch" value="current"><textarea name="text" rows="2" cols="60" required></textarea>
<button type="submit">Post</button></form></section>
{steer(who, item_id, view.get("lease") or {}, live_runs)}"""


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




def steer(who: Principal, item_id: str, lease: dict[str, Any], live_runs: list[dict[str, Any]]) -> str:
    """The admin's forms. Shown to every person (an agent steers nothing): the server decides, and a
    refusal (77) is shown on the page like any other."""
    if who.role == "agent":
        return ""
    note = ("" if who.role == "admin" else
            '<p class="note">Steering needs the admin role: the server refuses these for you (77).</p>')
    item = f'<input type="hidden" name="item" value="{esc(item_id)}">'
    held = lease.get("state") == "active"
    holder = esc(lease.get("holder")) if held else "nobody"
    reasons = "".join(f'<option{" selected" if r == "reassign" else ""}>{esc(r)}</option>' for r in HANDOFF_REASONS)
    stops = "".join(f'<option value="{esc(r["execution"])}">{esc(r["execution"])} ({esc(r["state"])} on '
                    f'{esc(r.get("host"))})</option>' for r in live_runs)
    stop = (f'<form data-op="exec-stop" class="steer-stop"><label>Stop <select name="execution">{stops}</select>'
            '</label> <input name="reason" placeholder="why" required maxlength="200"> '
            '<button type="submit">Stop</button></form>' if live_runs else
            '<p class="none">No live execution to stop. One starts with <code>gw run ITEM -- COMMAND</code>.</p>')
    return f"""<section class="steer"><h3>Steer</h3>{note}<p>Lease: held by <b>{holder}</b>.</p>
<form data-op="revoke" class="steer-revoke">{item}<label>Revoke the lease</label>
<input name="reason" placeholder="why" required maxlength="200"> <button type="submit">Revoke</button></form>
<form data-op="handoff" class="steer-handoff">{item}<label>Hand off to <input name="to" placeholder="identity" required
maxlength="64" size="12"></label> <select name="reason">{reasons}</select>
<input name="message" placeholder="why" required> <button type="submit">Hand off</button></form>
{stop}</section>"""
