"""Leases: ``claim``, ``renew``, ``release``, ``takeover``, ``revoke``, ``handoff``."""

from __future__ import annotations

from .. import output
from ..actions import done_line, each, submit

TYPE_CHECKING = False
if TYPE_CHECKING:
    from ...workplane import Workplane


def claim(wp: Workplane, as_json: bool, item: str | None, next: bool, ttl: str | None, offline: bool = False,
          label: list[str] | None = None, owner: str | None = None, priority: int | None = None,
          label_any: list[str] | None = None, force: bool = False) -> None:
    last = None
    if next:  # rank last what would conflict with a live session branch (gitwork/conflicts.py)
        from ...conflicts import rank_last

        last = rank_last(wp) or None
    applied = wp.do("claim", item=item, next=next or None, ttl=ttl, offline=offline, labels=label or None,
                    labels_any=label_any or None, owner=owner, priority=priority, last=last, force=force or None)
    r = applied.result
    done_line(applied, as_json,
              f"claimed {r['item']} (epoch {r['epoch']}, fence {r['fence']}) until {r['expires_at']}", data=r["item"])


def renew(wp: Workplane, as_json: bool, item: str, ttl: str | None, fence: int | None, offline: bool) -> None:
    submit(wp, as_json, "renew", item=item, ttl=ttl, fence=fence, offline=offline)


def release(wp: Workplane, as_json: bool, item: list[str], fence: int | None, offline: bool) -> None:
    each(wp, as_json, item, lambda one: submit(wp, as_json, "release", item=one, fence=fence, offline=offline))


def takeover(wp: Workplane, as_json: bool, item: str, ttl: str | None, offline: bool) -> None:
    submit(wp, as_json, "takeover", item=item, ttl=ttl, offline=offline)


def revoke(wp: Workplane, as_json: bool, item: str, reason: str, offline: bool) -> None:
    submit(wp, as_json, "revoke", item=item, reason=reason, offline=offline)


def handoff(wp: Workplane, as_json: bool, item: str, reason: str, message: str | None, to: str | None,
            fence: int | None, offline: bool) -> None:
    submit(wp, as_json, "handoff", item=item, reason=reason, message=message, to=to, fence=fence, offline=offline)


def conflicts(wp: Workplane, as_json: bool) -> None:
    """``gw conflicts``: live pairs that would conflict if both published now (path leases, session branches)."""
    from ...conflicts import live_pairs

    found = live_pairs(wp)
    if as_json:
        output.emit_json(found)
        return
    for pair in found["pairs"]:
        a, b = pair["a"], pair["b"]
        if pair["kind"] == "paths":
            what = ", ".join(f"{x} ~ {y}" for x, y in pair["overlap"][:3])
        else:
            what = ", ".join(pair["files"][:5])
            a, b = {**a, "item": a["branch"]}, {**b, "item": b["branch"]}
        output.line(f"{pair['kind']}\t{a['item']} ({a['holder']})\t{b['item']} ({b['holder']})\t{what}")
    if not found["pairs"]:
        output.info(f"no conflicts among {found['sessions']} live sessions and {found['path_leases']} path leases")
