"""Listings: ``list``, ``ready``, ``search`` (and ``list --text``) pick their rows here, as SQL over
the read cache (``queries.select``), and print them; shared by ``commands/items.py`` and
``commands/reports.py``."""

from __future__ import annotations

from ..errors import Invalid
from . import output

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

    from ..workplane import Workplane


class Picked:
    """What a listing picked: summary rows (``index.py`` layout), short ids, the read time, whether
    ``--limit`` cut it, and with ``--text`` where each row matched."""

    def __init__(self, rows: list[tuple[Any, ...]], short: dict[str, str], now: Any, cut: bool, limit: int | None,
                 matches: dict[str, list[dict[str, str]]] | None, waiting: frozenset[str] = frozenset(),
                 lines: list[str] | None = None) -> None:
        self.rows, self.short, self.now, self.cut, self.limit, self.matches = rows, short, now, cut, limit, matches
        self.waiting = waiting  # ids waiting on a dependency not done: shown as blocked
        self.lines = lines  # the piped lines, formatted by SQL (``queries.LINE``), instead of ``rows``

    @property
    def count(self) -> int:
        return len(self.lines) if self.lines is not None else len(self.rows)


def words(values: list[str] | None) -> list[str] | None:
    """``-l a,b -l c`` is ``-l a -l b -l c`` (bd's and gh's comma lists), for labels and statuses."""
    if values is None:
        return None
    # An empty word is kept ("" or "a,,b"): the check after this refuses it, so a typo is never an empty filter.
    # Only spaces are trimmed ("a, b"): a newline or tab stays, and the label check refuses it.
    return [word.strip(" ") for value in values for word in value.split(",")]


def statuses(status: list[str] | None) -> list[str] | None:
    """``--status`` values checked: an item status, or ``expired`` (a lease past its expiry)."""
    from ..model import STATUSES

    known = (*STATUSES, "expired")
    unknown = [s for s in status or () if s not in known]
    if unknown:  # a typo must not look like an empty list
        raise Invalid(f"unknown status {unknown[0]!r}: use {', '.join(known)}")
    return status


def pick(wp: Workplane, *, ready: bool = False, status: list[str] | None = None, label: list[str] | None = None,
         all: bool = False, holder: str | None = None, owner: str | None = None, priority: int | None = None,
         sort: str | None = None, limit: int | None = None, text: str | None = None,
         label_any: list[str] | None = None, mine: bool = False, exclude_label: list[str] | None = None,
         reverse: bool = False, types: list[str] | None = None, parent: str | None = None,
         created_after: str | None = None, created_before: str | None = None, updated_after: str | None = None,
         updated_before: str | None = None,
         lines: bool = False) -> Picked:
    """One listing as SQL over the read cache (``queries.select``), then, with ``text``, only the items
    whose text holds it (``reports.search``: reads each candidate, so the limit applies after); with
    ``types`` or ``parent``, only the items of those types or with that parent (read from each
    candidate's file: the cache has no column for them yet, so the limit applies after, too).
    ``--reverse`` orders the rows here, and the limit applies after it (``--sort updated`` is SQL: the
    cache's ``item.updated``).

    ``lines`` (the caller prints tab-separated lines: piped, not ``--json``): when nothing is left to do
    after the SQL, the rows come back as those lines, formatted by SQL (``Picked.lines``), and no
    row tuple is built."""
    from ..queries import SORTS, select

    check_limit(limit)
    if sort is not None and sort not in SORTS:
        raise Invalid(f"unknown --sort {sort!r}: use {', '.join(SORTS)}")
    status, label, label_any, exclude_label = words(status), words(label), words(label_any), words(exclude_label)
    here = text is None and not reverse and not types and parent is None  # the limit can go to SQL
    if priority is not None and priority < 0:
        raise Invalid(f"--priority must be 0 or more, not {priority}")
    if text is not None and not text.strip():
        raise Invalid("search for what? the text is empty")
    from ..model import DEFAULT_TYPE, ITEM_TYPES

    unknown_types = [t for t in types or () if t not in ITEM_TYPES]
    if unknown_types:
        raise Invalid(f"unknown type {unknown_types[0]!r}: use {', '.join(ITEM_TYPES)}")
    if label or label_any or exclude_label:  # the rule claim --next applies: a typo must not look like an empty list
        from ..commands import parse_fields, validate

        validate({"label": [*(label or ()), *(label_any or ()), *(exclude_label or ())]},
                 parse_fields({"label": "labels"}))
    if mine or holder == "@me":  # gh's @me: the acting identity
        if mine and holder not in (None, "@me"):
            raise Invalid(f"--mine is --holder @me: not with --holder {holder}")
        holder = wp.settings.identity()
    ctx = wp.context()
    parent_id = ctx.resolve(parent) if parent is not None else None  # NotFound (3) for no such item
    picked = select(ctx.snapshot, ctx.now, wp.settings.clock_margin, sort=sort or "rank",
                    limit=limit if here else None, priority=priority, ready=ready,
                    statuses=statuses(status), closed=all, labels=label, labels_any=label_any, holder=holder,
                    owner=owner, exclude_labels=exclude_label, dates=when_filters(ctx.now, dict(
                        created_after=created_after, created_before=created_before, updated_after=updated_after,
                        updated_before=updated_before)), lines=lines and here)
    if picked.lines is not None:
        return Picked([], {}, ctx.now, picked.cut, limit, None, lines=picked.lines)
    from ..index import ID

    rows, cut, matches = picked.rows, picked.cut, None
    if types or parent_id is not None:

        def keep(row: Any) -> bool:
            item = ctx.item(row[ID])
            return (not types or (item.type or DEFAULT_TYPE) in types) and \
                (parent_id is None or item.parent == parent_id)

        rows = [r for r in rows if keep(r)]
    if text is not None:
        from ..reports import search

        matches = search(wp, ctx, text, [r[ID] for r in rows])
        rows = [r for r in rows if r[ID] in matches]
    if reverse:
        rows = rows[::-1]
    if not here:
        cut = bool(limit) and len(rows) > limit  # type: ignore[operator]
        rows = rows[:limit or None]
    return Picked(rows, picked.short, ctx.now, cut, limit, matches, picked.waiting)


def when_filters(now: Any, dates: dict[str, str | None]) -> tuple[tuple[str, str, str], ...]:
    """``--created-after`` and kin (``gitwork/when.py``) as the SQL filters of ``queries.statement``."""
    if not any(v is not None for v in dates.values()):
        return ()
    from ..when import filters

    return filters(now, **dates)


def plain_lines(as_json: bool) -> bool:
    """Whether a listing prints tab-separated lines (piped, not JSON): ``pick(lines=...)``."""
    return not as_json and not output.FIELDS and not output.tty()


def said_cut(picked: Picked, title: str) -> None:
    """Beads' silent truncation drew complaints: a cut listing says so on stderr."""
    if picked.cut:
        output.info(f"showing the first {picked.limit} {title}; more match (raise --limit, or 0 for all)")


def rows_view(picked: Picked, as_json: bool, title: str) -> None:
    from ..index import ID, LABELS, LEASE_STATE, PRIORITY, TITLE
    from ..reports import lease_view, listing_json  # the JSON is the REST listings' too (gw serve)

    rows, short = picked.rows, picked.short
    if picked.lines is not None:  # asked for by a caller that prints plain lines (see :func:`plain_lines`)
        output.lines(picked.lines)
    elif as_json:
        output.emit_json(listing_json(rows, picked.now, picked.matches, picked.waiting))
    else:
        # Most rows hold no lease: no call for those (a full listing at 100,000 items is 75,000 rows).
        unheld = (None, False)
        leases = [lease_view(r, picked.now) if r[LEASE_STATE] == "active" else unheld for r in rows]
        output.table(
            ("id", "status", "pri", "holder", "labels", "title"),
            [(short[r[ID]], shown_status(r, expired, picked.waiting), r[PRIORITY], holder or "",
              ",".join(r[LABELS]), r[TITLE])
             for r, (holder, expired) in zip(rows, leases, strict=True)],
            title=title, colours={1: STATUS_COLOURS, 2: PRIORITY_COLOURS},
        )
    said_cut(picked, title)


# Semantic colour on a terminal (output.table: none when piped or with NO_COLOR).
STATUS_COLOURS = {"open": "green", "in_progress": "cyan", "blocked": "yellow", "expired": "red",
                  "done": "dim", "cancelled": "dim"}
PRIORITY_COLOURS = {"0": "bold red", "1": "red", "4": "dim"}


def shown_status(row: tuple[Any, ...], expired: bool, waiting: frozenset[str]) -> str:
    """The status a person reads: ``expired`` for a lease past its expiry, ``blocked`` for an open item waiting
    on a dependency (as ``gw blocked`` says), else the stored status."""
    from ..index import ID, STATUS

    if expired:
        return "expired"
    return "blocked" if row[STATUS] == "open" and row[ID] in waiting else str(row[STATUS])


def no_state_hint(wp: Workplane, picked: Picked, title: str = "items", as_json: bool = False) -> None:
    """An empty listing in a repository with no state ref says how to get one (on stderr: the listing
    itself, and its exit code, stay what they are): ``gw init``, or, with a remote, ``gw init --remote``,
    which adopts the state that remote has."""
    if picked.count:
        return
    if wp.store.tip() is not None:
        if not output.FIELDS and not as_json:  # one style for every empty listing: stderr, stdout stays empty
            output.info(f"gw: no {title} match")
        return
    from .. import gitcmd

    where = wp.repo.toplevel or wp.repo.git_dir
    remotes = gitcmd.run(["-C", where, "remote"], check=False).out.split()
    if remotes:
        output.info(f"gw: no gitwork state in this repository ({wp.store.ref}): if {remotes[0]} has one, "
                    f"gw init --remote {remotes[0]} fetches it and makes {remotes[0]} the arbiter; "
                    "otherwise gw init starts one")
    else:
        output.info(f"gw: no gitwork state in this repository ({wp.store.ref}): gw init starts one")


def check_limit(limit: int | None) -> None:
    if limit is not None and limit < 0:
        raise Invalid(f"--limit must be 0 (no limit) or more, not {limit}")
