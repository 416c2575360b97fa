"""Read-side questions over the summary index: which items are ready, in which order."""

from __future__ import annotations

import datetime as _dt
import marshal

from .clock import format_instant, parse_instant
from .index import CREATED, DEPS, EXPIRES, GATE, ID, LEASE_STATE, PRIORITY, STATUS, Index
from .model import held_for_others

TYPE_CHECKING = False  # typing costs ~15 ms to import; annotations are strings anyway
if TYPE_CHECKING:
    from typing import Any


def lease_is_live(row: tuple[Any, ...], now: _dt.datetime, margin: int) -> bool:
    """Whether someone else still holds the item, by a taker's clock (expiry plus margin)."""
    expires = parse_instant(row[EXPIRES]) if row[LEASE_STATE] == "active" and row[EXPIRES] else None
    return held_for_others(row[LEASE_STATE], expires, now, margin)


def order_key(row: tuple[Any, ...]) -> tuple[Any, ...]:
    """Best first: priority (0 is highest), then oldest, then id for a stable order."""
    return (row[PRIORITY], row[CREATED], row[ID])


def ready(index: Index, now: _dt.datetime, margin: int) -> list[tuple[Any, ...]]:
    """Open items with no live lease whose dependencies are all done, best first.

    An item left in progress by a holder whose lease expired (plus the margin) is ready again:
    a crashed worker must not strand its item until someone notices.
    """
    rows = index.items()
    out = []
    at = format_instant(now)
    for row in rows.values():
        if row[GATE] is not None and row[GATE] > at:
            continue
        if row[STATUS] not in ("open", "in_progress") or lease_is_live(row, now, margin):
            continue
        if row[STATUS] == "in_progress" and row[LEASE_STATE] != "active":
            continue
        if all(rows.get(dep, (None,) * 15)[STATUS] == "done" for dep in row[DEPS]):
            out.append(row)
    out.sort(key=order_key)
    return out


# --- the same questions as SQL over the cache (gitwork/cache.py) ------------------------------------

SORTS = {
    "rank": "i.priority, i.created, i.id",  # the documented order of `ready`: best first
    "created": "i.created, i.id",
    "updated": "i.updated DESC, i.priority, i.created, i.id",  # last changed first, as gh lists (cache.py: item.updated)
    "id": "i.id",
    "title": "i.title, i.id",
}


# An item waiting on a dependency that is not done (or is missing, or does not parse): gw blocked's rule.
# ``item.waiting`` counts them, kept by the cache when rows change (cache._rewait).
WAITING = "i.waiting > 0"
# An item waiting on a timer not yet passed, a ref or a command (ops/waits.py; ``item.gate``, model.gate_of):
# its one argument is the reader's now, so a timer passes at read time with no commit.
GATED = "coalesce(i.gate > ?, 0)"


class Selection:
    """The rows one query picked (summary tuples, ``index.py`` layout), whether a limit cut them, and
    each picked id's shortest unique form among all sound items."""

    def __init__(self, rows: list[tuple[Any, ...]], cut: bool, short: dict[str, str], commit: str | None,
                 waiting: frozenset[str] = frozenset(), lines: list[str] | None = None) -> None:
        self.rows = rows
        self.cut = cut
        self.short = short
        self.commit = commit
        self.waiting = waiting  # ids with a dependency not done (empty for ready: none of its rows waits)
        self.lines = lines  # with ``lines=True``: each row as the piped listing prints it (``rows`` is empty)

    @property
    def count(self) -> int:
        return len(self.lines) if self.lines is not None else len(self.rows)


# The rule of ``ready`` in SQL (the same rule as :func:`ready`; ``gw_live`` is registered by the reader).
READY_WHERE = ("i.status IN ('open', 'in_progress')",
               "NOT (i.lease_state = 'active' AND gw_live(i.expires))",
               "NOT (i.status = 'in_progress' AND coalesce(i.lease_state, '') != 'active')",
               # every dependency done: counted in the cache when rows change (cache._rewait), so
               # a listing reads no dependency row (at 100,000 items with 1-3 each: 5x the SQL time)
               "i.waiting = 0",
               # nothing else waited on: a timer's instant passed, no ref or command wait open (``GATED``)
               f"NOT {GATED}")


# One row of a piped listing, as ``cli/listing.rows_view`` prints it from the row tuples, formatted by
# SQL: the shortest id, the status shown (``expired`` for an active lease past its expiry, ``blocked``
# for an open item waiting on a dependency), priority, holder of an active lease, labels as written
# (``item.labels_shown``), title; tab-separated, an absent value empty. tests/test_listing_lines.py
# holds it to the row path byte for byte.
LINE = ("substr(i.id, 1, coalesce(i.shown, length(i.id))) || char(9) || CASE"
        " WHEN i.lease_state = 'active' AND coalesce(i.expires, '') != '' AND gw_expired(i.expires) THEN 'expired'"
        f" WHEN i.status = 'open' AND ({WAITING} OR coalesce(i.gate > gw_now(), 0)) THEN 'blocked'"
        " ELSE coalesce(i.status, '') END"
        " || char(9) || coalesce(i.priority, '') || char(9) ||"
        " CASE WHEN i.lease_state = 'active' THEN coalesce(i.holder, '') ELSE '' END"
        " || char(9) || coalesce(i.labels_shown, '') || char(9) || coalesce(i.title, '')")


def select(snapshot: Any, now: _dt.datetime, margin: int, *, ready: bool = False, statuses: Any = None,
           closed: bool = False, labels: Any = (), labels_any: Any = (), owner: str | None = None,
           priority: int | None = None,
           holder: str | None = None, sort: str = "rank", limit: int | None = None,
           shorten: bool = True, use_cache: bool = True, exclude_labels: Any = (), dates: Any = (),
           lines: bool = False) -> Selection:
    """Items by the rule of ``ready`` (``ready=True``) or of ``list`` (``statuses``, or every status but
    the closed ones unless ``closed``), filtered, sorted and limited in SQL on the cache at ``snapshot``.

    ``lines``: each row formatted by SQL as the piped listing prints it (:data:`LINE`), in
    ``Selection.lines``, and no row tuples: a full listing at 100,000 items is 75,000 rows, and
    building a tuple per row cost more than the query."""
    from . import cache
    from .rows import item_summary as summary
    from .rows import thread_entry as entry

    sql, args = statement(now, ready=ready, statuses=statuses, closed=closed, labels=labels, labels_any=labels_any,
                          owner=owner, priority=priority, holder=holder, sort=sort, limit=limit,
                          exclude_labels=exclude_labels, dates=dates, lines=lines)

    def live(expires: str | None) -> bool:
        return expires is not None and held_for_others("active", parse_instant(expires), now, margin)

    def expired(expires: str) -> bool:  # reports.lease_view's rule: past its expiry (no margin), shown expired
        return now >= parse_instant(expires)

    at = format_instant(now)

    def read(db: Any) -> Selection:
        db.create_function("gw_live", 1, live, deterministic=True)
        db.create_function("gw_expired", 1, expired, deterministic=True)
        db.create_function("gw_now", 0, lambda: at, deterministic=True)  # LINE's timers (GATED without its ?)
        loads = marshal.loads
        # One pass over the cursor, no call per row: a full listing at 100,000 items is 75,000 rows.
        records = db.execute(sql, args).fetchall()
        cut = bool(limit) and len(records) > limit  # type: ignore[operator]
        if cut:
            del records[limit:]
        commit = db.execute("SELECT value FROM meta WHERE key='commit'").fetchone()[0] or None
        noted(db)
        if lines:
            return Selection([], cut, {}, commit, lines=[r for (r,) in records])
        rows = [(r[0], r[1], r[2], r[3], loads(r[4]) if r[4] else (), loads(r[5]) if r[5] else (), r[6], r[7], r[8],
                 r[9], r[10], r[11], r[12], r[13], r[14]) for r in records]
        short = {r[0]: r[0][: r[15]] for r in records} if shorten else {}
        # Which items wait on a dependency (shown "blocked"); ready's rows never do, so it skips the scan.
        waiting = frozenset() if ready else frozenset(row[0] for row in db.execute(
            "SELECT id FROM item WHERE waiting > 0 OR gate > ?", (at,)))
        return Selection(rows, cut, short, commit, waiting)

    def noted(db: Any) -> None:
        bad = dict(db.execute("SELECT id, problem FROM item WHERE problem IS NOT NULL"))
        if bad:
            from .index import note_problems

            note_problems(bad)  # named on stderr by the CLI: a listing leaves them out

    return cache.at(snapshot, read, summary, entry, use_cache=use_cache)  # type: ignore[no-any-return]


def statement(now: _dt.datetime, *, ready: bool = False, statuses: Any = None, closed: bool = False,
              labels: Any = (), labels_any: Any = (), owner: str | None = None, priority: int | None = None,
              holder: str | None = None, sort: str = "rank", limit: int | None = None,
              exclude_labels: Any = (), dates: Any = (), lines: bool = False) -> tuple[str, list[Any]]:
    """The one SELECT of :func:`select` (its rows: ``cache.ROW_COLUMNS`` and ``item.shown``, or with
    ``lines`` the one column :data:`LINE`) and its arguments; ``gw_live(expires)`` and
    ``gw_expired(expires)`` are SQL functions ``select`` defines (a lease live, or past its expiry, by the clock), and ``gw_now()``
    the reader's now (:data:`LINE`'s timers)."""
    from . import cache
    from .model import CLOSED

    where = ["i.problem IS NULL"]
    args: list[Any] = []
    if ready:
        where += list(READY_WHERE)
        args.append(format_instant(now))  # GATED's one argument
    elif statuses:
        # "expired" is not an item status but a lease past its expiry (gw list -s expired): either matches.
        real = [s for s in statuses if s != "expired"]
        either = [f"i.status IN ({', '.join('?' * len(real))})"] if real else []
        args += real
        if "blocked" in statuses:  # as gw blocked says: also an item not closed waiting on a dependency
            either.append(f"(i.status IN ('open', 'in_progress') AND ({WAITING} OR {GATED}))")
            args.append(format_instant(now))
        if "expired" in statuses:
            either.append("(i.lease_state = 'active' AND i.expires <= ?)")
            args.append(format_instant(now))
        where.append(f"({' OR '.join(either)})")
    elif not closed:
        where.append(f"i.status NOT IN ({', '.join('?' * len(CLOSED))})")
        args += list(CLOSED)
    for label in dict.fromkeys(labels or ()):
        where.append("EXISTS (SELECT 1 FROM label l WHERE l.item = i.id AND l.label = ?)")
        args.append(label)
    if labels_any:  # at least one of them (--label-any), beside every one of ``labels`` (--label)
        where.append(f"EXISTS (SELECT 1 FROM label l WHERE l.item = i.id AND l.label IN "
                     f"({', '.join('?' * len(labels_any))}))")
        args += list(labels_any)
    if exclude_labels:  # none of them (--exclude-label)
        where.append(f"NOT EXISTS (SELECT 1 FROM label l WHERE l.item = i.id AND l.label IN "
                     f"({', '.join('?' * len(exclude_labels))}))")
        args += list(exclude_labels)
    if owner is not None:
        where.append("i.owner = ?")
        args.append(owner)
    if priority is not None:
        where.append("i.priority = ?")
        args.append(priority)
    if holder is not None:
        where.append("i.lease_state = 'active' AND i.holder = ?")
        args.append(holder)
    for column, op, at in dates:  # (created|updated, >=|<, canonical instant: it sorts as time does)
        if column not in ("created", "updated") or op not in (">=", "<"):
            raise ValueError(f"bad date filter {column} {op}")
        where.append(f"i.{column} {op} ?")
        args.append(at)
    columns = LINE if lines else f"{', '.join('i.' + c.strip() for c in cache.ROW_COLUMNS.split(','))}, i.shown"
    sql = (f"SELECT {columns} FROM item i"
           f" WHERE {' AND '.join(where)} ORDER BY {SORTS[sort]}")
    if limit and int(limit) < 2**62:  # SQLite's LIMIT is a 64-bit integer: a larger one is no limit at all
        sql += f" LIMIT {int(limit) + 1}"
    return sql, args


def gated(snapshot: Any) -> list[str]:
    """The ids of the items with an open ref or command wait (``item.gate`` is ``model.GATE_OPEN``), for
    the coordinator's pass over waits (gitwork/gates.py): one indexed-free scan of one column, no item read."""
    from . import cache
    from .model import CLOSED, GATE_OPEN
    from .rows import item_summary as summary
    from .rows import thread_entry as entry

    def read(db: Any) -> list[str]:
        return [r[0] for r in db.execute(
            f"SELECT id FROM item WHERE gate = ? AND problem IS NULL AND status NOT IN ({', '.join('?' * len(CLOSED))})"
            " ORDER BY id", (GATE_OPEN, *CLOSED))]

    return cache.at(snapshot, read, summary, entry)  # type: ignore[no-any-return]
