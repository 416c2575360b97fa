"""``/executions``: every execution with its state, and the live terminal of each one running on this
host: the page shows the last lines as rendered, and ``board.js`` refreshes them every two seconds from
``GET /v1/executions/ID/capture`` (the capture path ``gw capture`` uses), while state changes re-render
the page from ``/v1/events``. An admin may stop a live one (op ``exec-stop``, one command document)."""

from __future__ import annotations

from typing import Any

from ...errors import GwError
from ..server import Principal, Server
from .page import empty, esc

LINES = 20


def render_executions(server: Server, who: Principal) -> str:
    from ...launch.run import LIVE, capture, ours, runs
    from ...ledger import totals

    with server.plane(who) as wp:
        rows = runs(wp)
        spent = totals(rows, wp.now())["total"]  # the execution ledger (docs/launch.md), as gw cost totals it
        screens: dict[str, tuple[str, bool]] = {}
        for row in rows:
            if row.get("state") in LIVE:
                if not ours(wp, {"host": row.get("host"), "clone": row.get("clone")}):
                    screens[row["execution"]] = (f"(runs on {row.get('host')}: its terminal is there)", False)
                    continue
                try:
                    screens[row["execution"]] = (capture(wp, row["execution"], LINES), True)
                except GwError as error:
                    screens[row["execution"]] = (f"(no capture yet: {error.message})", True)
    if not rows:
        return ('<main id="live" data-live="/v1/events"><h2>Executions <span class="count">0</span></h2>'
                + empty("No executions yet.", "Start an agent on an item from a terminal: <code>gw run ITEM -- "
                        "claude -p 'do the item'</code> (it claims the item, starts the command in tmux and records "
                        "it here); <code>gw coordinate</code> keeps its lease renewed while it runs.") + "</main>")
    live = sum(1 for r in rows if r.get("state") in LIVE)
    body = "".join(_row(r, screens.get(r["execution"]), who) for r in reversed(rows))
    return (f'<main id="live" data-live="/v1/events"><h2>Executions <span class="count">{len(rows)}</span> '
            f'<small>{live} live; <span class="cost">{esc(spent["cost"])} USD, {esc(spent["tokens_in"])} tokens in, '
            f'{esc(spent["tokens_out"])} out</span></small></h2>'
            f'<table class="executions"><tr><th>execution</th><th>item</th><th>state</th><th>by</th><th>backend</th>'
            f'<th>host</th><th>command</th><th>cost</th><th></th></tr>{body}</table></main>')



def _row(r: dict[str, Any], screen: tuple[str, bool] | None, who: Principal) -> str:
    state = f'{esc(r["state"])}{"" if r.get("code") is None else " " + esc(r["code"])}'
    why = f'<div class="why">{esc(r.get("reason"))}</div>' if r.get("reason") else ""
    if r.get("stop_requested"):
        ask = r["stop_requested"]
        why += f'<div class="why">stop asked by {esc(ask.get("by"))}: {esc(ask.get("reason"))}</div>'
    stop = ""
    if screen is not None and who.role != "agent" and not r.get("stop_requested"):
        stop = (f'<form data-op="exec-stop" class="inline steer-stop"><input type="hidden" name="execution" '
                f'value="{esc(r["execution"])}"><input name="reason" placeholder="why" required maxlength="200" '
                f'size="10"> <button type="submit">Stop</button></form>')
    line = (f'<tr class="execution" data-execution="{esc(r["execution"])}" data-state="{esc(r["state"])}">'
            f'<td><code>{esc(r["execution"])}</code></td><td><a href="/items/{esc(r["item"])}">{esc(r["item"][:10])}</a>'
            f'</td><td class="state">{state}{why}</td><td>{esc(r.get("by"))}</td><td>{esc(r.get("backend"))}</td>'
            f'<td>{esc(r.get("host"))}</td><td><code>{esc(" ".join(r.get("command") or []))}</code></td>'
            f'<td class="cost">{_cost(r)}</td><td>{stop}</td></tr>')
    if screen is not None:
        text, here = screen
        poll = f' data-capture="/v1/executions/{esc(r["execution"])}/capture?lines={LINES}"' if here else ""
        line += f'<tr><td colspan="9"><pre class="capture"{poll}>{esc(text)}</pre></td></tr>'
    return line


def _cost(r: dict[str, Any]) -> str:
    """What its agent reported (``gw report``, report.json): cost and tokens, or nothing."""
    used = r.get("usage") or {}
    if not used:
        return f'<small class="why">{esc(r.get("report_error"))}</small>' if r.get("report_error") else ""
    return (f'{esc(used.get("cost"))} USD <small>{esc(used.get("tokens_in"))}/{esc(used.get("tokens_out"))} '
            f'tokens</small>')
