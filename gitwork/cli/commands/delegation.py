"""Delegation to peers: ``delegate``, ``delegations``, ``delegation observe|cancel``, ``receipts verify``.

Declared in ``app.py`` only when a peer is configured (``peer_app``); each calls one function of
``gitwork.delegation`` and prints its result.
"""

from __future__ import annotations

from .. import output

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

    from ...workplane import Workplane


def _report(info: dict[str, Any], as_json: bool) -> None:
    receipt = info["receipt"]
    if as_json:
        output.emit_json({"ok": True, **{k: v for k, v in info.items() if k != "receipt"}, "receipt": receipt})
        return
    result = receipt.get("result") or {}
    output.line(info["delegation"])
    lease = f" (epoch {receipt['epoch']}, fence {receipt['fence']})" if receipt.get("epoch") is not None else ""
    state = f": {result['state']}" if result.get("state") else ""
    again = " (answered before)" if info.get("duplicate") else ""
    output.info(f"{info['op']} {info.get('item') or ''} on {info['peer']}: {receipt['outcome']}{state}{lease}{again}")


def delegate(wp: Workplane, as_json: bool, item: str, to: str, plan: bool, test: bool, ttl: str | None,
             request_id: str | None) -> None:
    from ...delegation.client import delegate as send
    from ...errors import UsageError

    if plan and test:
        raise UsageError("--plan and --test exclude each other")
    _report(send(wp, item, to, "plan" if plan else "test" if test else "start", ttl, request_id), as_json)


def delegations(wp: Workplane, as_json: bool, item: str | None) -> None:
    from ...delegation.client import pending
    from ...records.delegations import records

    item_id = wp.resolve(item) if item else None
    answered = records(wp.context().snapshot)
    recorded = {r.get("request_id") for r in answered if r.get("side") == "sent"}
    # a request kept here without an answer (outcome unknown, exit 12): sent, "unanswered", until --id retries it
    rows = [{k: r.get(k) for k in ("request_id", "side", "peer", "op", "item", "outcome", "at", "execution", "epoch",
                                  "fence")}
            for r in [*answered, *(p for p in pending(wp) if p["request_id"] not in recorded)]
            if item_id is None or r.get("item") == item_id]
    if as_json:
        output.emit_json([{"delegation": r.pop("request_id"), **r} for r in rows])
        return
    output.table(("delegation", "side", "peer", "op", "item", "outcome", "at", "execution"),
                 [(r["request_id"], r["side"], r["peer"] or "", r["op"] or "", r["item"] or "", r["outcome"],
                   r["at"] or "", r["execution"] or "") for r in rows], title="delegations")


def observe(wp: Workplane, as_json: bool, delegation_id: str, request_id: str | None) -> None:
    from ...delegation.client import follow_up

    info = follow_up(wp, "observe", delegation_id, request_id=request_id)
    if as_json:
        _report(info, as_json)
        return
    result = info["receipt"].get("result") or {}
    _report(info, as_json)
    capture = str(result.get("capture") or "")
    if capture:
        output.line(printable(capture.rstrip("\n")))


def printable(text: str) -> str:
    """A peer's terminal capture as it may reach this terminal: written by a process on another machine,
    so without escape sequences (a window title, the clipboard: OSC 52), controls and bidi marks, as
    gw shows what a remote's hooks print (``sync.remote_said``); line breaks kept."""
    from ...sync import _ESCAPE, _UNPRINTABLE

    return "\n".join(_UNPRINTABLE.sub(" ", _ESCAPE.sub("", line)).rstrip() for line in text.split("\n"))


def cancel(wp: Workplane, as_json: bool, delegation_id: str, reason: str | None, request_id: str | None) -> None:
    from ...delegation.client import follow_up

    _report(follow_up(wp, "cancel", delegation_id, reason, request_id), as_json)


def receipts_verify(wp: Workplane, as_json: bool, item: str | None) -> None:
    from ...delegation.receipts import failed, verify

    rows = verify(wp, item)
    if as_json:
        output.emit_json(rows)
    else:
        for row in rows:
            mark = "ok" if row["ok"] else "FAILED: " + "; ".join(row["problems"])
            output.line(f"{row['delegation']}\t{row['side']}\t{row['peer']}\t{row['op']}\t{row['item'] or ''}\t{mark}")
    error = failed(rows)
    if error is not None:
        if as_json:  # the array is the answer; the exit code says it failed
            from ..actions import Failed

            output.info(f"gw: {error.kind}: {error.message}")
            raise Failed(int(error.code))
        raise error
