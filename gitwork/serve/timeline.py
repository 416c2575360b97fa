"""Lease timelines: who held what, and when.

Per item, from the item's own event log (``Workplane.history``: every claim, takeover, renewal and end
of a lease, complete). Per agent (or for everyone), from the state ref's history: the last ``limit``
commits from a tip or from a given commit (``before``), paged, each commit one command; the lease
commands among them (their ``Work-Item`` and ``Lease-Epoch`` trailers) are grouped into one span per
lease epoch. A span whose start is older than the page names its holder from the item's log.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any, Iterator

from ..errors import GwError, NotFound, UsageError

if TYPE_CHECKING:
    from ..workplane import Workplane

WINDOW = 500  # commits a page of the state ref's history reads
MAX_WINDOW = 5000
STARTS = {"claim", "takeover", "claimed", "takeover-granted", "lease"}
ENDS = {"released": "released", "revoked": "revoked", "handoff": "handed off", "release": "released",
        "revoke": "revoked", "done": "done", "publish": "published", "cancel": "cancelled"}
HEX40 = re.compile(r"[0-9a-f]{40}\Z")


def item_spans(records: list[dict[str, Any]], lease: Any, now: Any) -> list[dict[str, Any]]:
    """One span per lease epoch of the item, oldest first: holder, start, end (``None`` while live),
    how it ended, by whom, why. (Renewals are recorded by their commits only, not in the item's log:
    :func:`history_spans` counts them.)"""
    spans: dict[int, dict[str, Any]] = {}
    for event in records:
        epoch = event.get("epoch")
        kind = event.get("type")
        if epoch is None or kind == "execution":
            continue
        if kind in ("claim", "takeover"):
            spans[epoch] = {"epoch": epoch, "holder": event.get("by"), "from": event.get("at"), "to": None,
                            "end": None, "expires_at": event.get("expires_at"), "how": kind}
        elif epoch in spans and kind in ENDS and spans[epoch]["to"] is None:
            spans[epoch].update(to=event.get("at"), end=ENDS[kind], by=event.get("by"), reason=event.get("reason"))
    out = sorted(spans.values(), key=lambda s: s["epoch"])
    for span in out:
        _settle(span, lease, now)
    return out


def _settle(span: dict[str, Any], lease: Any, now: Any) -> None:
    """A span with no recorded end is live, or ended by expiry (its lease's expiry has passed)."""
    from ..clock import format_instant

    if span["to"] is not None:
        return
    expires = span.get("expires_at")
    if lease is not None and lease.epoch == span["epoch"]:
        expires = lease.expires_at
        if lease.state != "active":
            span.update(to=lease.ended_at, end=lease.state, by=lease.ended_by, reason=lease.reason)
            return
    if expires and str(expires) <= format_instant(now):
        span.update(to=expires, end="expired")


def commits(wp: Workplane, before: str | None, limit: int) -> Iterator[tuple[str, Any]]:
    """``(commit, parsed state commit)`` for ``limit`` commits of the state ref's first-parent history,
    from the tip or from ``before`` (which must be one of them: a page's link carries it)."""
    from ..statecommit import read

    commit = wp.store.tip()
    if before is not None:
        if not HEX40.match(before):
            raise UsageError("'before' is a state commit's full id (40 hex digits), as a page's link gives it")
        commit = before
    for _ in range(limit):
        if not commit:
            return
        try:
            state = read(wp.store, commit)
        except GwError as exc:  # not a commit of this repository
            raise NotFound(f"{commit[:12]} is not a commit of the state ref") from exc
        yield commit, state
        commit = state.parent


def history_spans(wp: Workplane, holder: str | None, before: str | None, limit: int = WINDOW) -> dict[str, Any]:
    """Lease spans found in one page of the state ref's history, newest first, for ``holder`` (or all),
    with the commit the next (older) page starts from."""
    if not 1 <= limit <= MAX_WINDOW:
        raise UsageError(f"a page reads 1 to {MAX_WINDOW} commits")
    ctx = wp.context()
    groups: dict[tuple[str, int], dict[str, Any]] = {}
    last = None
    read = 0
    oldest_at = newest_at = None
    for commit, state in commits(wp, before, limit):
        read += 1
        last = state.parent
        at = _at(state)
        newest_at = newest_at or at
        oldest_at = at
        item, epoch = state.trailers.get("Work-Item"), state.trailers.get("Lease-Epoch")
        op = (state.command or {}).get("op")
        if not item or not epoch or not str(epoch).isdigit() or op is None:
            continue
        key = (item, int(epoch))
        span = groups.setdefault(key, {"item": item, "epoch": int(epoch), "holder": None, "from": None, "to": None,
                                       "end": None, "renewals": 0, "commit": commit})
        who = (state.command or {}).get("as")
        if op in ("claim", "takeover", "exec-reserve"):  # gw run's one commit carries Lease-Epoch when it claims
            span.update(holder=who, **{"from": at})
        elif op == "renew":
            span["renewals"] += 1
        elif op in ENDS and span["to"] is None:
            span.update(to=at, end=ENDS[op], by=who, reason=(state.command or {}).get("reason"))
    spans = []
    leases: dict[str, Any] = {}
    for span in groups.values():
        if span["holder"] is None:  # claimed before this page: the item's log says by whom
            span["holder"] = _holder(ctx, span["item"], span["epoch"])
        if holder is not None and span["holder"] != holder:
            continue
        if span["item"] not in leases:
            try:
                leases[span["item"]] = ctx.lease(span["item"])
            except GwError:  # an item the tip no longer reads: shown as the history has it
                leases[span["item"]] = None
        _settle(span, leases[span["item"]], ctx.now)
        spans.append(span)
    spans.sort(key=lambda s: (s["from"] or "", s["epoch"]), reverse=True)
    return {"spans": spans, "read": read, "next": last if read == limit else None,
            "newest": newest_at, "oldest": oldest_at}


def _at(state: Any) -> str | None:
    from ..clock import format_instant

    return format_instant(state.at) if state.at is not None else None


def _holder(ctx: Any, item: str, epoch: int) -> str | None:
    try:
        for event in ctx.records(item):
            if event.get("epoch") == epoch and event.get("type") in ("claim", "takeover"):
                return event.get("by")  # type: ignore[no-any-return]
    except GwError:  # a damaged or deleted item: its spans keep an unknown holder
        return None
    return None
