"""``gw show ID`` for a person: the item as a page, not as its stored YAML (``--json`` is unchanged).

Title, status, priority, labels, owner; the holder and how long the lease has left; the description;
numbered criteria with their ticks (the numbers ``gw check`` takes); dependencies and dependents,
each with its title and status; why it is blocked; decisions; the last messages of its thread.
Built only on the work plane's read methods and standard library: it stays on the fast path (no rich,
no typer, no YAML emitter).
"""

from __future__ import annotations

import datetime as _dt
import os
import sys

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

    from ..workplane import Workplane

THREAD_TAIL = 5  # the last messages shown; `gw thread ID` has them all
SERVE_FILE = "serve.json"  # written by a running `gw serve` (commands/serve.py) beside the read cache


def countdown(seconds: float) -> str:
    """``14m05s``, ``2h03m``, ``45s``: how long until (or since) an instant, for people."""
    seconds = int(abs(seconds))
    hours, rest = divmod(seconds, 3600)
    minutes, secs = divmod(rest, 60)
    if hours:
        return f"{hours}h{minutes:02d}m"
    if minutes:
        return f"{minutes}m{secs:02d}s"
    return f"{secs}s"


def _holder_line(lease: dict[str, Any] | None, now: _dt.datetime) -> str:
    from ..clock import parse_instant

    if not lease or lease.get("state") != "active":
        last = f" (last: {lease['holder']}, {lease.get('state')})" if lease else ""
        return f"holder:    none{last}"
    left = (parse_instant(lease["expires_at"]) - now).total_seconds()
    where = f"{lease['holder']} (fence {lease['fence']}, epoch {lease['epoch']})"
    if left > 0:
        return f"holder:    {where}, expires in {countdown(left)} ({lease['expires_at']})"
    takeable = "" if lease.get("live") else "; gw takeover may take it"
    return f"holder:    {where}, expired {countdown(left)} ago ({lease['expires_at']}){takeable}"


def _neighbours(wp: Workplane, item_id: str, deps: list[str]) -> tuple[list[tuple[str, str, str]], list[tuple[str, str, str]]]:
    """``(dependencies, dependents)`` as ``(id, status, title)``, from the summary rows."""
    from ..index import DEPS, ID, STATUS, TITLE

    _ctx, rows = wp.rows()
    before = [(dep, rows[dep][STATUS], rows[dep][TITLE]) if dep in rows else (dep, "unknown", "") for dep in deps]
    after = sorted((row[ID], row[STATUS], row[TITLE]) for row in rows.values() if item_id in row[DEPS])
    return before, after


def render(wp: Workplane, view: dict[str, Any], now: _dt.datetime) -> str:
    item, lease = view["item"], view["lease"]
    item_id = item["id"]
    out = [f"{item_id}  {item['title']}",
           f"status:    {item['status']}    priority: {item['priority']}"
           + (f"    owner: {item['owner']}" if item.get("owner") else ""),
           f"labels:    {', '.join(item.get('labels') or []) or '-'}",
           _holder_line(lease, now)]
    from ..ledger import cost_line, item_cost

    spent = cost_line(item_cost(wp.context(), item_id))
    if spent:
        out.append(f"cost:      {spent}")
    if item["status"] == "blocked":
        from ..reports import _blocked_reasons

        for reason in _blocked_reasons(wp.context(), item_id):
            if reason["kind"] == "decision":
                out.append(f"blocked:   waits for a decision on #{reason['seq']}: {reason['question']} "
                           f"(asked by {reason['by']})")
            elif reason["kind"] == "wait-failed":
                from ..reports import describe_reason

                out.append(f"blocked:   {describe_reason(reason, {}).removeprefix('blocked: ')}")
            else:
                out.append(f"blocked:   {reason.get('reason') or '(no reason given)'}"
                           + (f" (by {reason['by']}, {reason['at']})" if reason.get("by") else ""))
    if item.get("waits"):
        from ..model import describe_wait, open_waits

        still = {w["id"] for w in open_waits(item["waits"], now)}
        for wait in item["waits"]:  # a timer that passed holds nothing: shown as passed until undeferred
            out.append(f"waiting:   {wait['id']}. {describe_wait(wait)}" + ("" if wait["id"] in still else " (passed)")
                       + f" (by {wait.get('by')}, {wait.get('at')})")
    description = (item.get("description") or "").rstrip()
    if description:
        out += ["", *("  " + line if line else "" for line in description.splitlines())]
    criteria = item.get("criteria") or []
    if criteria:
        out += ["", "criteria (gw check ID N):"]
        for number, criterion in enumerate(criteria, 1):
            tick = "x" if criterion.get("checked") else " "
            who = f"  ({criterion['by']}, {criterion['at']})" if criterion.get("checked") and criterion.get("by") else ""
            out.append(f"  [{tick}] {number}. {criterion['text']}{who}")
    deps, dependents = _neighbours(wp, item_id, list(item.get("depends_on") or []))
    for heading, entries in (("depends on:", deps), ("blocks:", dependents)):
        if entries:
            out += ["", heading, *(f"  {other}  {status:<11} {title}" for other, status, title in entries)]
    decisions = item.get("decisions") or []
    if decisions:
        out += ["", "decisions:"]
        for number, decision in enumerate(decisions, 1):
            why = f" (why: {decision['rationale']})" if decision.get("rationale") else ""
            out.append(f"  {decision.get('number', number)}. {decision['text']}{why} ({decision.get('by')}, "
                       f"{decision.get('at')})")
    _full, messages = wp.thread(item_id)
    if messages:
        shown = messages[-THREAD_TAIL:]
        more = f", last {len(shown)}; gw thread {item_id[:8]} has all" if len(shown) < len(messages) else ""
        out += ["", f"thread ({len(messages)} message{'s' if len(messages) != 1 else ''}{more}):"]
        for message in shown:
            to = f" -> {message['to']}" if message.get("to") else ""
            text = " ".join(str(message.get("text") or "").split())
            at = message.get("written_at") or message.get("at")  # an imported comment: its own date
            out.append(f"  #{message['seq']} {at} {message.get('by')} {message.get('kind')}{to}: {text}")
    return "\n".join(out) + "\n"


def web(wp: Workplane, as_json: bool, item_id: str) -> None:
    """``gw show --web``: the item's page on the board of the ``gw serve`` running for this repository;
    opened in a browser when there is one to open, the URL printed either way."""
    import json

    from ..errors import UsageError
    from . import output

    url = None
    try:
        with open(os.path.join(wp.repo.gitwork_dir(), SERVE_FILE), encoding="utf-8") as handle:
            record = json.load(handle)
        os.kill(int(record["pid"]), 0)  # still running?
        url = f"{record['url']}/items/{item_id}"
    except (OSError, ValueError, KeyError, TypeError):
        pass
    if url is None:
        raise UsageError("no gw serve is running for this repository: start one (gw serve), then gw show --web ID")
    opened = False
    if os.environ.get("BROWSER") or os.environ.get("DISPLAY") or os.environ.get("WAYLAND_DISPLAY") \
            or sys.platform == "darwin":
        import webbrowser

        try:
            opened = webbrowser.open(url)
        except webbrowser.Error:
            opened = False
    if as_json:
        output.emit_json({"ok": True, "item": item_id, "url": url, "opened": opened})
        return
    output.line(url)
    if not opened:
        output.info("gw show --web: no browser to open here; the page is at the URL above")
