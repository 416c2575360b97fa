"""The publish queue: ``publish --queue`` (``enqueue``), ``queue [list]``, ``queue work``, ``queue remove``.

Each calls one function of ``gitwork.pubqueue``, which submits the command documents; ``queue remove``
builds its document here (``queue-remove``, an op any face may submit).
"""

from __future__ import annotations

from .. import output

TYPE_CHECKING = False
if TYPE_CHECKING:
    from ...workplane import Workplane


def enqueue(wp: Workplane, as_json: bool, session: str | None, into: str | None = None, remote: str | None = None,
            item: str | None = None) -> None:
    """``gw publish --queue``; also the MCP tool ``queue-add`` (``item`` is taken from the session)."""
    from ...pubqueue import enqueue as enqueue_

    info = enqueue_(wp, session, into=into, remote=remote)
    if as_json:
        output.emit_json(info)
        return
    output.line(str(info["seq"]))
    output.info(f"queued session {info['session']} of {info['item']} into {info['into']} "
                f"(#{info['seq']}, position {info['position']}); pushed {info['branch']} to {info['remote']}")


def queue_list(wp: Workplane, as_json: bool) -> None:
    from ...pubqueue import listing

    rows = listing(wp)
    if as_json:
        output.emit_json(rows)
        return
    if not rows:
        output.info("the publish queue is empty")
        return
    output.table(("#", "seq", "session", "item", "holder", "fence", "commit", "into", "enqueued"),
                 [(r["position"], r["seq"], r["session"], r["item"], r["holder"], r["fence"], str(r["commit"])[:12],
                   r["into"], r["enqueued_at"]) for r in rows], title="publish queue")


def work(wp: Workplane, as_json: bool, remote: str | None = None, once: bool = False, ttl: str | None = None) -> None:
    from ...codec import parse_duration
    from ...pubqueue import DEFAULT_TTL
    from ...pubqueue import work as work_

    seconds = parse_duration(ttl) if ttl else DEFAULT_TTL
    info = work_(wp, remote, once=once, ttl=seconds)
    if as_json:
        output.emit_json(info)
        return
    for row in info["handled"]:
        if row["outcome"] == "landed":
            output.line(f"landed {row['session']} ({row['mode']}, {str(row['commit'])[:12]})")
        else:
            output.line(f"returned {row['session']}: {row['reason']}")
    output.info(f"{info['landed']} landed, {info['returned']} sent back")


def remove(wp: Workplane, as_json: bool, session: str, reason: str | None = None) -> None:
    from ..actions import submit

    submit(wp, as_json, "queue-remove", session=session, reason=reason)
