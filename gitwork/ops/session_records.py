"""Which sessions of an item are open, read from its ``events.log``: what ``done`` and ``publish`` check.

A session is open from its ``session-start`` record until its ``publish`` or ``session-drop``. Kept
apart from the op modules (it imports none of them) so that ``done`` in ``ops/items.py`` can refuse
to strand a session without importing the session ops.
"""

from __future__ import annotations

from ..engine import Context
from ..errors import Illegal
from ..model import Lease

TYPE_CHECKING = False  # typing costs ~15 ms to import; annotations are strings anyway
if TYPE_CHECKING:
    from typing import Any


def open_sessions(ctx: Context, item_id: str, lease: Lease | None = None) -> list[dict[str, Any]]:
    """Sessions of ``item_id`` neither published nor dropped, oldest first: ``{session, commit, fence, by}``.

    With ``lease``, only those started under it (same fence and epoch): a session started under an
    earlier lease is dead (its fence can no longer land anywhere), and only ``session drop`` ends it.
    """
    found: dict[str, dict[str, Any]] = {}
    for event in ctx.records(item_id):
        kind = event.get("type")
        session = event.get("session")
        if kind == "session-start":
            found[session] = {"session": session, "commit": None, "fence": event.get("fence"),
                              "epoch": event.get("epoch"), "by": event.get("by")}
        elif kind == "session-commit" and session in found:
            found[session]["commit"] = event.get("commit")
            found[session]["files"] = [c.get("path") for c in event.get("files") or []]
        elif kind in ("publish", "session-drop"):
            found.pop(session, None)
    rows = list(found.values())
    if lease is not None:
        rows = [r for r in rows if r["fence"] == lease.fence and r["epoch"] == lease.epoch]
    return rows


def describe(rows: list[dict[str, Any]]) -> str:
    return ", ".join(f"{r['session']} ({'commit ' + str(r['commit'])[:12] if r['commit'] else 'no commit yet'})"
                     for r in rows)


def refuse_open_sessions(ctx: Context, item_id: str, lease: Lease | None, what: str,
                         but: str | None = None) -> None:
    """``done`` (and a closing ``publish``) must not strand the holder's open sessions: refuse, naming them."""
    if lease is None or not lease.is_active():
        return
    rows = [r for r in open_sessions(ctx, item_id, lease) if r["session"] != but]
    if rows:
        raise Illegal(f"{what} {item_id} would strand its open session(s) {describe(rows)}: publish a committed "
                      f"one (`gw done` publishes it when it is the only one), or drop it (`gw session drop ID`)",
                      item=item_id, sessions=[r["session"] for r in rows])
