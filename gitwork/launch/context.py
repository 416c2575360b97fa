"""The launch context: what an agent is told when it starts, and what ``gw context ITEM`` prints.

One renderer (:func:`render`) for both, from one document (:func:`build`): the item with its
criteria and decisions, the thread's unread tail (for the lease's holder), the lease (epoch, fence,
expiry), the exact gw version and the commit it was built from, and how to renew, report, ask,
hand off and finish. At every launch ``gw run`` writes it as ``launch.md`` and ``launch.json`` into
the execution's folder (``<git common dir>/gitwork/executions/<id>/``), never into a worktree (a
session commit would refuse an undeclared file there); the agent finds the path in ``GW_CONTEXT``.
"""

from __future__ import annotations

import json
import os

from ..fsutil import write_atomic
from .build import current, gw_commit  # noqa: F401  (gw_commit was here first; kept importable from here)

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

    from ..workplane import Workplane

TAIL = 20  # unread messages shown at most; the rest are one `gw thread` away


def _gw_build() -> dict[str, Any]:
    mine = current()  # asked once per process: gw run also records it in the execution
    return {"version": mine["version"], "commit": None if mine["commit"] == "release" else mine["commit"]}


def build(wp: Workplane, item: str, execution: str | None = None) -> dict[str, Any]:
    from ..conversations import messages
    from ..thread import cursors

    ctx = wp.context()
    item_id = ctx.resolve(item)
    it = ctx.item(item_id).to_doc()
    lease = ctx.lease(item_id)
    who = lease.holder if lease is not None and lease.is_active() else wp.settings.identity()
    read = int((cursors(ctx.snapshot, item_id).get(who) or {}).get("read") or 0)
    unread = messages(ctx.snapshot, item_id, read)
    return {
        "item": item_id, "title": it.get("title"), "status": it.get("status"), "description": it.get("description"),
        "criteria": it.get("criteria") or [], "decisions": it.get("decisions") or [],
        "lease": None if lease is None else {"holder": lease.holder, "epoch": lease.epoch, "fence": lease.fence,
                                             "state": lease.state, "expires_at": lease.expires_at},
        "for": who, "unread": len(unread), "unread_tail": unread[-TAIL:],
        "execution": execution, "state_commit": ctx.snapshot.commit,
        "gw": _gw_build(),
    }


def render(doc: dict[str, Any]) -> str:
    item, lease = doc["item"], doc["lease"]
    out = [f"# {item}: {doc['title']}", "", f"Status: {doc['status']}."]
    if doc.get("execution"):
        out.append(f"Execution: {doc['execution']} (GW_EXECUTION).")
    if doc.get("description"):
        out += ["", doc["description"]]
    out += ["", "## Acceptance criteria", ""]
    out += [f"{n}. [{'x' if c.get('checked') else ' '}] {c.get('text')}" for n, c in enumerate(doc["criteria"], 1)] \
        or ["(none)"]
    out += ["", "## Decisions", ""]
    out += [f"{d.get('number')}. {d.get('text')} (why: {d.get('rationale')}; {d.get('by')})" for d in doc["decisions"]] \
        or ["(none)"]
    out += ["", "## Lease", ""]
    if lease is None:
        out.append("Nobody holds this item.")
    else:
        out.append(f"{lease['holder']}, epoch {lease['epoch']}, fence {lease['fence']}, {lease['state']}, "
                   f"expires {lease['expires_at']}.")
    shown = doc["unread_tail"]
    out += ["", f"## Unread messages for {doc['for']} ({doc['unread']}"
            + (f", last {len(shown)} shown" if len(shown) < doc["unread"] else "") + ")", ""]
    out += [f"#{m.get('seq')} {m.get('kind')} by {m.get('by')} at {m.get('at')}: {m.get('text')}" for m in shown] \
        or ["(none)"]
    fence = lease["fence"] if lease else "FENCE"
    out += ["", "## How to", "",
            "Every gw command below is fenced by GW_FENCE in your environment: once your lease ends, each is refused "
            "(exit 7), and you stop.", "",
            f"- renew your lease: `gw renew {item}`",
            f"- check a criterion: `gw check {item} N`",
            f"- report progress: `gw msg {item} \"TEXT\"`",
            "- report what you used: `gw report --tokens-in N --tokens-out N --cost USD --model NAME` (or write "
            "{\"tokens_in\": N, \"tokens_out\": N, \"cost\": USD} to $GW_REPORT before you exit)",
            f"- ask a person to decide: `gw ask {item} \"QUESTION\" -o A -o B`",
            f"- read the thread: `gw thread {item}`; mark it read: `gw ack {item} SEQ`",
            f"- hand off: `gw handoff {item} --reason blocked -m \"WHY\"`",
            f"- finish: `gw done {item}` (publishes your session first)", "",
            f"gw {doc['gw']['version']}" + (f" (commit {doc['gw']['commit']})" if doc["gw"]["commit"] else "")
            + f"; state {str(doc.get('state_commit'))[:12]}; fence {fence}."]
    return "\n".join(out) + "\n"


def write(folder: str, doc: dict[str, Any], twin: bool = True) -> str:
    """``launch.md`` and ``launch.json`` into ``folder`` (each written whole, then renamed); the .md path.
    ``twin=False``: ``launch.md`` alone (``write_twin`` later: gw run writes the JSON twin once its agent
    started, off the way to the agent's first line; both are there before ``running`` is recorded)."""
    os.makedirs(folder, exist_ok=True)
    write_atomic(os.path.join(folder, "launch.md"), render(doc), fsync=False)
    if twin:
        write_twin(folder, doc)
    return os.path.join(folder, "launch.md")


def write_twin(folder: str, doc: dict[str, Any]) -> None:
    write_atomic(os.path.join(folder, "launch.json"), json.dumps(doc, ensure_ascii=False, indent=2) + "\n", fsync=False)
