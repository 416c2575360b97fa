"""Leases: ``claim``, ``renew``, ``release``, ``takeover``, ``revoke``, ``handoff``."""

from __future__ import annotations

from ..actions import done_line, each, submit

TYPE_CHECKING = False
if TYPE_CHECKING:
    from ...workplane import Workplane


def claim(wp: Workplane, as_json: bool, item: str | None, next: bool, ttl: str | None, offline: bool = False,
          label: list[str] | None = None, owner: str | None = None, priority: int | None = None,
          label_any: list[str] | None = None, force: bool = False) -> None:
    applied = wp.do("claim", item=item, next=next or None, ttl=ttl, offline=offline, labels=label or None,
                    labels_any=label_any or None, owner=owner, priority=priority, force=force or None)
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
