"""Read-only reports for everyday use: ``blocked``, ``dep tree``, ``stale``, ``summary``, ``prime``.

Built only on the work plane's read methods (:meth:`Workplane.rows`, :meth:`Workplane.ready`,
``ctx.item``/``ctx.lease``/``ctx.records``), so they keep working when the read cache changes
underneath. The summary rows are read through :func:`_row` alone: the one place that knows their
field positions.
"""

from __future__ import annotations

import datetime as _dt

from .clock import format_instant, parse_instant
from .codec import parse_duration

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

    from .workplane import Workplane

OPEN_STATUSES = ("open", "in_progress", "blocked")
DEFAULT_LONG_HELD = "1h"


def _row(row: tuple[Any, ...]) -> dict[str, Any]:
    """A summary row as named fields (the one place that knows the row's layout)."""
    from .index import DEPS, EXPIRES, GATE, HOLDER, ID, LEASE_STATE, PRIORITY, STATUS, TITLE

    active = row[LEASE_STATE] == "active"
    return {"item": row[ID], "title": row[TITLE], "status": row[STATUS], "priority": row[PRIORITY],
            "deps": tuple(row[DEPS]), "holder": row[HOLDER] if active else None,
            "expires_at": row[EXPIRES] if active else None, "gate": row[GATE]}


def lease_view(row: tuple[Any, ...], now: Any) -> tuple[str | None, bool]:
    """``(holder, expired)`` of a row's lease: a lease past its expiry is shown as expired, not as held."""
    from .index import EXPIRES, HOLDER, LEASE_STATE

    if row[LEASE_STATE] != "active":
        return None, False
    return row[HOLDER], bool(row[EXPIRES]) and now >= parse_instant(row[EXPIRES])


def listing_json(rows: list[tuple[Any, ...]], now: Any,
                 matches: dict[str, list[dict[str, str]]] | None = None,
                 waiting: frozenset[str] | None = None) -> list[dict[str, Any]]:
    """``gw list --json`` / ``gw ready --json`` (and the REST listings): one object per summary row;
    ``blocked`` (with ``waiting``, the ids waiting on a dependency): status blocked, or waiting on one."""
    from .index import EXPIRES, ID, LABELS, LEASE_STATE, PRIORITY, STATUS, TITLE

    out = []
    for r in rows:
        holder, expired = lease_view(r, now)
        out.append({"item": r[ID], "title": r[TITLE], "status": r[STATUS], "priority": r[PRIORITY],
                    "labels": list(r[LABELS]), "holder": holder,
                    "expires_at": r[EXPIRES] if r[LEASE_STATE] == "active" else None, "expired": expired,
                    **({"blocked": r[STATUS] == "blocked" or r[ID] in waiting} if waiting is not None else {}),
                    **({"matches": matches[r[ID]]} if matches is not None else {})})
    return out


def show_json(view: dict[str, Any]) -> dict[str, Any]:
    """``show --json`` (and ``GET /v1/items/ID``): the item's fields at the top level, its id under ``item``
    as in every other command's output (never ``id``), and its lease (an object, or null)."""
    fields = dict(view["item"])
    return {"ok": True, "item": fields.pop("id"), **fields, "lease": view["lease"]}


def _rows(wp: Workplane) -> tuple[Any, dict[str, dict[str, Any]], list[str]]:
    """``(context, id -> named row, ids best first)``."""
    from .queries import order_key

    ctx, raw = wp.rows()
    order = [r[0] for r in sorted(raw.values(), key=order_key)]
    return ctx, {item_id: _row(row) for item_id, row in raw.items()}, order


# --- blocked -------------------------------------------------------------------------------------


def blocked(wp: Workplane) -> list[dict[str, Any]]:
    """Every open item that cannot be started, best first, each with why.

    ``blocked_by`` lists the reasons: ``dependency`` (an item it depends on that is not done, named
    with its status), ``decision`` (a decision request waiting for a person), ``manual`` (set to
    blocked by hand with ``gw edit --status blocked``, with the recorded reason; ``wait-failed``: a
    wait that failed or timed out blocked it) and ``wait`` (a timer not yet passed, a ref or a command:
    ops/waits.py).
    """
    ctx, rows, order = _rows(wp)
    at = format_instant(ctx.now)
    out = []
    for item_id in order:
        row = rows[item_id]
        if row["status"] not in OPEN_STATUSES:
            continue
        reasons: list[dict[str, Any]] = []
        for dep in row["deps"]:
            other = rows.get(dep)
            if other is None or other["status"] != "done":
                reasons.append({"kind": "dependency", "item": dep,
                                "title": other["title"] if other else None,
                                "status": other["status"] if other else "unknown"})
        if row["status"] == "blocked":
            reasons.extend(_blocked_reasons(ctx, item_id))
        if row["gate"] is not None and row["gate"] > at:  # only items that wait (the cache's gate) are read
            reasons.extend(wait_reasons(ctx.item(item_id).waits, ctx.now))
        if reasons:
            out.append({"item": item_id, "title": row["title"], "status": row["status"],
                        "priority": row["priority"], "holder": row["holder"], "blocked_by": reasons})
    return out


def _blocked_reasons(ctx: Any, item_id: str) -> list[dict[str, Any]]:
    item = ctx.item(item_id)
    waiting = item.waiting
    if waiting:
        return [{"kind": "decision", "seq": waiting.get("seq"), "question": waiting.get("question"),
                 "options": waiting.get("options") or [], "by": waiting.get("by"), "at": waiting.get("at")}]
    # Blocked by hand: the newest edit that set the status says who, when and why (or the wait whose
    # failure or timeout blocked it).
    for record in reversed(ctx.records(item_id)):
        changes = record.get("changes") or {}
        if record.get("type") == "edited" and changes.get("status") == "blocked":
            return [{"kind": "manual", "reason": record.get("reason"), "by": record.get("by"),
                     "at": record.get("at")}]
        if record.get("type") == "wait-ended" and record.get("blocked"):
            return [{"kind": "wait-failed", "wait": record.get("wait"), "what": record.get("what"),
                     "outcome": record.get("outcome"), "code": record.get("code"), "by": record.get("by"),
                     "at": record.get("at")}]
    return [{"kind": "manual", "reason": None, "by": None, "at": None}]


def wait_reasons(waits: Any, now: Any) -> list[dict[str, Any]]:
    """``gw blocked``'s reasons of kind ``wait``: each wait still open at ``now`` (model.open_waits)."""
    from .model import describe_wait, open_waits

    return [{"kind": "wait", "wait": w["id"], "wait_kind": w["kind"], "what": describe_wait(w),
             **{k: w[k] for k in ("until", "ref", "target", "remote", "command") if k in w}, "by": w.get("by"),
             "at": w.get("at")} for w in open_waits(waits, now)]


def describe_reason(reason: dict[str, Any], short: dict[str, str]) -> str:
    """One reason in words, for the text output."""
    kind = reason["kind"]
    if kind == "wait":
        return f"waiting on: {reason['what']} (wait {reason['wait']}, by {reason['by']})"
    if kind == "wait-failed":
        code = f", exit {reason['code']}" if reason.get("code") is not None else ""
        return f"blocked: wait {reason['wait']} ({reason['what']}) ended {reason['outcome']}{code}"
    if kind == "dependency":
        name = short.get(reason["item"], reason["item"])
        return f"waits on {name} ({reason['status']}{': ' + reason['title'] if reason['title'] else ''})"
    if kind == "decision":
        options = f" [{' / '.join(reason['options'])}]" if reason["options"] else ""
        return f"waits for a decision on #{reason['seq']}: {reason['question']}{options} (asked by {reason['by']})"
    if kind == "held":
        return f"held by {reason['holder']} until {reason['expires_at']}"
    if kind == "other":
        return str(reason["reason"])
    why = reason.get("reason") or "no reason given"
    return f"blocked by hand{' by ' + reason['by'] if reason.get('by') else ''}: {why}"


# --- dep tree ------------------------------------------------------------------------------------


def dep_tree(wp: Workplane, text: str) -> dict[str, Any]:
    """An item's dependencies (what it waits on, recursively) and dependents (what waits on it)."""
    ctx, rows, _order = _rows(wp)
    root = ctx.resolve(text)
    needed_by: dict[str, list[str]] = {}
    for item_id, row in rows.items():
        for dep in row["deps"]:
            needed_by.setdefault(dep, []).append(item_id)

    def node(item_id: str, key: str, seen: frozenset[str]) -> dict[str, Any]:
        row = rows.get(item_id)
        entry: dict[str, Any] = {"item": item_id, "title": row["title"] if row else None,
                                 "status": row["status"] if row else "unknown"}
        following = (row["deps"] if row else ()) if key == "depends_on" else sorted(needed_by.get(item_id, ()))
        if item_id in seen:  # a cycle (edit refuses them, but a merged state may hold one): stop here
            entry["cycle"] = True
            entry[key] = []
            return entry
        entry[key] = [node(other, key, seen | {item_id}) for other in following]
        return entry

    up = node(root, "depends_on", frozenset())
    down = node(root, "dependents", frozenset())
    return {"item": root, "title": up["title"], "status": up["status"], "depends_on": up["depends_on"],
            "dependents": down["dependents"]}


def tree_lines(nodes: list[dict[str, Any]], key: str, short: dict[str, str], depth: int = 1) -> list[str]:
    lines = []
    for entry in nodes:
        mark = " (cycle)" if entry.get("cycle") else ""
        lines.append(f"{'  ' * depth}{short.get(entry['item'], entry['item'])} [{entry['status']}] "
                     f"{entry['title'] or ''}{mark}".rstrip())
        lines.extend(tree_lines(entry[key], key, short, depth + 1))
    return lines


# --- stale ---------------------------------------------------------------------------------------


def stale(wp: Workplane, held_for: str | None = None) -> list[dict[str, Any]]:
    """Active leases past their expiry, or held longer than ``held_for`` (default 1h), best first.

    ``expired``: the expiry has passed (the holder can no longer act); ``takeable``: the clock margin
    has passed too, so anyone may ``gw takeover``.
    """
    limit = parse_duration(held_for or DEFAULT_LONG_HELD)
    ctx, rows, order = _rows(wp)
    now: _dt.datetime = ctx.now
    margin = wp.settings.clock_margin
    out = []
    for item_id in order:
        row = rows[item_id]
        if row["holder"] is None:
            continue
        lease = ctx.lease(item_id)
        if lease is None or not lease.is_active():
            continue
        expires = lease.expires()
        held = int((now - parse_instant(lease.granted_at)).total_seconds())
        expired = now >= expires
        if not expired and held < limit:
            continue
        out.append({"item": item_id, "title": row["title"], "status": row["status"], "holder": lease.holder,
                    "fence": lease.fence, "granted_at": lease.granted_at, "expires_at": lease.expires_at,
                    "held_seconds": held, "expired": expired, "takeable": lease.takeable(now, margin)})
    return out


def age(seconds: int) -> str:
    """``3h05m``, ``12m``, ``40s``: a held time for people."""
    if seconds >= 3600:
        return f"{seconds // 3600}h{seconds % 3600 // 60:02d}m"
    if seconds >= 60:
        return f"{seconds // 60}m"
    return f"{max(seconds, 0)}s"


# --- summary -------------------------------------------------------------------------------------


def summary(wp: Workplane) -> dict[str, Any]:
    """Counts: by status, ready, blocked (any reason), leases expired, items waiting on a decision."""
    from .model import STATUSES

    ctx, rows, _order = _rows(wp)
    by_status = {status: 0 for status in STATUSES}
    for row in rows.values():
        by_status[row["status"]] = by_status.get(row["status"], 0) + 1
    now: _dt.datetime = ctx.now
    expired = sum(1 for row in rows.values()
                  if row["holder"] is not None and row["expires_at"] and now >= parse_instant(row["expires_at"]))
    stuck = blocked(wp)
    return {
        "ok": True,
        "item": None,
        "total": len(rows),
        "by_status": by_status,
        "ready": len(wp.ready()),
        "blocked": len(stuck),
        "expired": expired,
        "open_questions": sum(1 for entry in stuck for r in entry["blocked_by"] if r["kind"] == "decision"),
        "at": format_instant(now),
    }


# --- prime and onboard ---------------------------------------------------------------------------


def holding(wp: Workplane) -> list[dict[str, Any]]:
    """The items the acting identity holds a live lease on, with what an agent needs to go on."""
    me = wp.settings.identity()
    ctx, rows, order = _rows(wp)
    out = []
    for item_id in order:
        if rows[item_id]["holder"] != me:
            continue
        lease = ctx.lease(item_id)
        item = ctx.item(item_id)
        if lease is None or not lease.is_active():
            continue
        out.append({"item": item_id, "title": item.title, "status": item.status, "fence": lease.fence,
                    "expires_at": lease.expires_at, "expired": ctx.now >= lease.expires(),
                    "description": item.description,
                    "criteria": [{"text": c.get("text"), "done": bool(c.get("checked"))}
                                 for c in item.criteria],
                    "decisions": [{"text": d.get("text"), "why": d.get("rationale")} for d in item.decisions],
                    "waiting": item.waiting})
    return out


LOOP = """\
# gitwork (gw): how to work in this repository

Re-read this after any context reset: `gw prime` prints it again, with what you hold now.

## Who you are
You are `{identity}`{identity_note}. Every command records who ran it, and a lease belongs to one
identity: a command run under another name is refused as "not the holder" (exit 7), and the refusal
says who you are now. Keep one identity for the whole task (`export GW_AGENT=NAME` or `--as NAME`).

Work items, leases (who works on what, until when) and conversations live on the git ref
refs/gitwork/state; every gw command is one commit there (`gw log` shows them). Add `--json` to any
command for one JSON value on stdout (`--json=item,title` picks fields, `--jq EXPR` filters);
diagnostics and errors go to stderr, one line each.

## The loop
1. Find work: `gw claim --next` claims the best ready item and prints its id. Narrow it with
   `--label L`, `--owner NAME`, `--priority N`. Exit 0: it is yours. Exit 3: nothing is ready (wait,
   then retry). Exit 75: someone else won the race (retry now). `gw claim --next --json` also gives
   the lease's `fence` (a fencing token) and `expires_at`. `gw ready` lists what could be claimed;
   `gw ready --explain` and `gw blocked` say why the rest cannot.
2. Read it: `gw show ID` (description, acceptance criteria, decisions, the lease) and
   `gw thread ID` (its conversation). `gw dep tree ID` shows what it waits on and what waits on it.
3. Work under the fence. Pass it with every write on the item: `--fence N`, or once
   `export GW_FENCE=N`. If your lease expired and someone took the item over, your fence is stale:
   the write is refused with exit 7 and nothing is written. Exit 7 means stop working on that item
   (do not retry, do not claim it again to push through): go back to step 1.
4. Keep the lease: leases last 15 minutes by default (`--ttl 30m` on claim or renew). Run
   `gw renew ID` well before `expires_at`, e.g. every few minutes during long steps. A lease past
   its expiry shows as `expired` in `gw list`; `gw stale` lists those and long-held ones.
5. Talk on the item's thread: `gw msg ID "text"` (`--kind question`, `--to NAME`);
   answer a message with `gw msg ID "answer" --reply-to SEQ` (it then leaves the asker's inbox).
   `gw inbox` lists what is addressed to you or on items you hold: unread, then read but unanswered.
   `gw ack ID SEQ` marks the thread read up to SEQ; `gw ack ID SEQ --responded --by REPLY_SEQ` once
   you answered. Need a person to decide? `gw ask ID "question" -o yes -o no --to NAME`: the item
   waits (status blocked) until `gw decide`; keep renewing, or hand it off.
6. Record progress: tick acceptance criteria as they pass, `gw check ID N` (N as `gw show` numbers
   them); record choices with `gw decision ID "what" --why "why"` (append-only).
7. Finish (the finish line). Do your commits in a session: `gw session start ID` makes a branch and
   worktree (it prints the path; work there), `gw session commit --file FILE... -m MSG` commits exactly
   those files. Then `gw done ID`: it publishes your open session first (fast-forward or a clean
   merge into the branch it started from), marks the item done and releases the lease, or refuses,
   naming the session, with nothing changed. Unchecked criteria refuse too (exit 6): check them, or
   `gw done ID --force --reason "why"`. Never publish and then claim the item again.
   A session you will not publish (its lease ended, or the work is thrown away):
   `gw session drop SESSION` says what it drops. `gw session list` shows sessions.
8. Cannot finish? `gw handoff ID --reason blocked -m "why" [--to NAME]` lets the next claimant take
   over at once; `gw release ID` just gives the lease up. Then go back to step 1.

## Exit codes worth branching on
| code | meaning | what to do |
|---|---|---|
| 0 | done as asked | carry on |
| 2 | the command line is malformed | fix it; retrying will not help |
| 3 | no such item; after `claim --next`: nothing ready | check the id; or wait, then claim again |
| 5 | input not acceptable (bad duration, empty title, ...) | fix the input |
| 6 | not allowed from the item's state (unchecked criteria, closed item) | change the item first |
| 7 | stale fence, not the holder, or your lease ended | stop work on that item; claim another |
| 12 | the arbiter remote did not answer: outcome unknown | `gw retry CMD_ID` (the id is in the message); never a new command |
| 13 | publishing needs a merge that cannot be made cleanly | stop; ask a person |
| 75 | held by someone else, or lost a race | retry later, or claim something else |
| 77 | not allowed for your role | ask the holder, an admin or the addressee |

## Useful views
`gw summary` counts everything; `gw list` (filters: `-s STATUS`, `-l LABEL`, `--owner`, `--holder`,
`--text TEXT`, `--sort`, `-n N`); `gw search TEXT`; `gw history ID`; `gw inbox`.
"""


def my_sessions(wp: Workplane, me: str) -> list[dict[str, Any]]:
    """The identity's sessions not yet published or dropped (``live``: its lease is still held)."""
    from .sessions import list_sessions

    return [s for s in list_sessions(wp) if s.get("holder") == me and s.get("state") not in ("published", "dropped")]


def prime(wp: Workplane) -> dict[str, Any]:
    """What an agent needs in its context after a reset: who it is, the loop, what it holds now."""
    me = wp.settings.identity()
    held = holding(wp)
    sessions = my_sessions(wp, me)
    note = (" (the default: user@host/session, so a new terminal or agent process is a new identity)"
            if wp.settings.agent is None else "")
    text = LOOP.format(identity=me, identity_note=note) + "\n## What you hold now\n"
    if not held:
        text += "Nothing: start with `gw claim --next`.\n"
    for entry in held:
        text += _held_lines(entry)
    box = drop_answered(wp, wp.inbox())
    if box["unread"] or box["unanswered"]:
        text += (f"- inbox: {len(box['unread'])} unread, {len(box['unanswered'])} read but unanswered "
                 "(`gw inbox`; answer with `gw msg ID TEXT --reply-to SEQ`)\n")
    for session in sessions:
        commit = f"commit {str(session['commit'])[:12]}" if session.get("commit") else "no commit yet"
        if session.get("live"):
            text += (f"- session {session['session']} of {session['item']} ({commit}): work in "
                     f"{session.get('worktree') or 'its worktree'}; `gw done {session['item']}` publishes it\n")
        else:
            text += (f"- dead session {session['session']} of {session['item']} ({commit}; its lease ended): "
                     f"`gw session drop {session['session']}`\n")
    return {"ok": True, "item": held[0]["item"] if held else None, "identity": me, "holding": held,
            "sessions": sessions, "inbox": {"unread": len(box["unread"]), "unanswered": len(box["unanswered"])},
            "text": text}


DESCRIPTION_SHOWN = 600  # characters of a held item's description in prime (gw show ID has it whole)


def _held_lines(entry: dict[str, Any]) -> str:
    """One held item for prime: lease, description (cut), criteria, decisions, an awaited decision."""
    item = entry["item"]
    if entry["expired"]:
        state = (f"EXPIRED: fence {entry['fence']} is stale and writes are refused; `gw claim {item}` again "
                 "(a new fence) if nobody took it over, else stop")
    else:
        state = f"fence {entry['fence']}, until {entry['expires_at']}: `export GW_FENCE={entry['fence']}`"
    text = f"- {item} {entry['title']} ({state})\n"
    description = " ".join(str(entry["description"] or "").split())
    if description:
        cut = description[:DESCRIPTION_SHOWN] + (f"... (`gw show {item}`)" if len(description) > DESCRIPTION_SHOWN
                                                 else "")
        text += f"  {cut}\n"
    for number, criterion in enumerate(entry["criteria"], 1):
        text += f"  [{'x' if criterion['done'] else ' '}] {number}. {criterion['text']}\n"
    for decision in entry["decisions"]:
        text += f"  decided: {decision['text']} (why: {decision['why']})\n"
    if entry["waiting"]:
        text += f"  waits for a decision on #{entry['waiting'].get('seq')}: {entry['waiting'].get('question')}\n"
    return text


ONBOARD = """\
## Work tracking: gitwork (`gw`)

This repository tracks its work with gitwork: items, leases and conversations on the git ref
`refs/gitwork/state`. At the start of every session, and after any context reset, run `gw prime`
and follow what it prints (who you are, the claim/renew/done loop, what you hold).

- Identity: `export GW_AGENT=<a name for you>` first; without it each terminal is a new identity and
  cannot act on leases taken from another one.
- Find work: `gw claim --next` (exit 3: nothing ready; 75: lost a race, retry). Why not ready: `gw blocked`.
- Keep the lease: `gw renew ID`; pass `--fence N` (or GW_FENCE) on every write; exit 7 means stop.
- Talk: `gw inbox`, `gw msg ID "..."`, `gw ask ID "..." -o A -o B` for a person's decision.
- Finish: `gw done ID` (publishes your open session first). Never mark work done another way.
- Scripts: add `--json` to any command.
"""


def item_ids(wp: Workplane, prefix: str) -> list[str]:
    """Full ids of the items not closed that start with ``prefix``, best first (shell completion)."""
    _ctx, rows, order = _rows(wp)
    return [i for i in order if i.startswith(prefix) and rows[i]["status"] in OPEN_STATUSES]


def drop_answered(wp: Workplane, box: dict[str, Any]) -> dict[str, Any]:
    """The inbox without the messages its owner already answered with ``gw msg --reply-to SEQ``.

    A reply names the message it answers, so it counts as the answer even when the responded cursor
    was not moved (``gw ack --responded``). A decision request is not answered by a reply: only
    ``gw decide`` answers it. Reads only the threads of items in the inbox.
    """
    who = box["who"]
    entries = box["unread"] + box["unanswered"]
    first: dict[str, int] = {}
    for message in entries:
        first[message["item"]] = min(first.get(message["item"], message["seq"]), message["seq"])
    answered: set[tuple[str, int]] = set()
    for item_id, seq in first.items():
        _full, records = wp.thread(item_id, seq)
        for record in records:
            reply_to = record.get("reply_to")
            if record.get("by") == who and isinstance(reply_to, int):
                answered.add((item_id, reply_to))

    def kept(message: dict[str, Any]) -> bool:
        return message.get("kind") == "decision-request" or (message["item"], message["seq"]) not in answered

    return {**box, "unread": [m for m in box["unread"] if kept(m)],
            "unanswered": [m for m in box["unanswered"] if kept(m)]}


# --- search --------------------------------------------------------------------------------------


def _snippet(text: str, at: int, width: int = 60) -> str:
    start = max(at - width // 2, 0)
    piece = " ".join(text[start:start + width].split())
    return ("..." if start else "") + piece + ("..." if start + width < len(text) else "")


def search(wp: Workplane, ctx: Any, text: str, ids: list[str]) -> dict[str, list[dict[str, str]]]:
    """Of ``ids``, those whose title, description, criteria, decisions or thread contain ``text``
    (case-insensitive), each with where it matched (field and a snippet), in the order given.

    The listing filters (``gw list``'s) pick the candidates; this reads each candidate item and its
    thread, so it costs a read per item (the summary rows hold no text).
    """
    from .errors import Invalid

    needle = text.casefold()
    if not needle.strip():
        raise Invalid("search for what? the text is empty")
    out: dict[str, list[dict[str, str]]] = {}
    for item_id in ids:
        item = ctx.item(item_id)
        fields: list[tuple[str, str]] = [("title", item.title), ("description", item.description or "")]
        fields += [(f"criterion {n}", str(c.get("text", ""))) for n, c in enumerate(item.criteria, 1)]
        fields += [(f"decision {d.get('number', n)}", f"{d.get('text', '')} (why: {d.get('rationale', '')})")
                   for n, d in enumerate(item.decisions, 1)]
        fields += [(f"message #{m['seq']}", str(m.get("text", ""))) for m in wp.thread(item_id)[1]]
        matches = []
        for field, value in fields:
            at = value.casefold().find(needle)
            if at >= 0:
                matches.append({"field": field, "text": _snippet(value, at)})
        if matches:
            out[item_id] = matches
    return out


# --- ready --explain -----------------------------------------------------------------------------


def explain_ready(wp: Workplane) -> list[dict[str, Any]]:
    """Every item not closed, best first: ``ready`` or not, and why not (the same reasons as
    :func:`blocked`, plus ``held``: someone's lease is live, named with its expiry)."""
    ready_ids = {row[0] for row in wp.ready()}
    stuck = {entry["item"]: entry["blocked_by"] for entry in blocked(wp)}
    ctx, rows, order = _rows(wp)
    now: _dt.datetime = ctx.now
    margin = wp.settings.clock_margin
    out = []
    for item_id in order:
        row = rows[item_id]
        if row["status"] not in OPEN_STATUSES:
            continue
        why = list(stuck.get(item_id, []))
        if item_id not in ready_ids and row["holder"] is not None:
            lease = ctx.lease(item_id)
            if lease is not None and not lease.takeable(now, margin):
                why.insert(0, {"kind": "held", "holder": lease.holder, "expires_at": lease.expires_at})
        if item_id not in ready_ids and not why:
            why.append({"kind": "other", "reason": _no_lease(ctx, item_id, row["status"])})
        out.append({"item": item_id, "title": row["title"], "status": row["status"], "ready": item_id in ready_ids,
                    "why_not": [] if item_id in ready_ids else why})
    # Ready items that claim --next ranks last or skips: their paths overlap a live lease, or cover files a
    # live session branch changed (conflicts.py; items without declared paths cost nothing here).
    from .conflicts import predict

    predicted = predict(wp, ctx, [e["item"] for e in out if e["ready"]])
    for entry in out:
        if entry["item"] in predicted:
            entry["conflicts"] = predicted[entry["item"]]
    return out


def _no_lease(ctx: Any, item_id: str, status: str) -> str:
    """Why an item with no live lease is not ready; an imported ``in_progress`` item says where it was in
    progress and who to ask (docs/format.md, "Imported in_progress with an assignee")."""
    item = ctx.item(item_id)
    prov = item.provenance if isinstance(item.provenance, dict) else {}
    source = prov.get("source") if isinstance(prov.get("source"), dict) else None
    if status == "in_progress" and source is not None:
        owner = f" (assignee {item.owner})" if item.owner else ""
        return (f"in progress in {source.get('kind')} {source.get('ref')} when imported{owner}; nobody holds it "
                f"here: gw claim {item_id[:8]} takes it, gw edit --status open puts it back in line")
    return f"status {status} without a live lease"
