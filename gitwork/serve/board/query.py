"""The board's one read of the cache: counts per status, one page of each column, the ready order's
ids, all in SQL over the read cache (``cache.py``) at one snapshot, so a page reads the cards it
shows and never all 10,000 rows. Search and filters are SQL too: a part of an id, or text found in a
title or a label in any case (``gw_fold``: Python's ``casefold``, so non-ASCII text matches as well).
The ready rule is ``queries.READY_WHERE``, the one ``gw ready`` uses."""

from __future__ import annotations

import marshal
from typing import Any

from ...model import STATUSES


class BoardPage:
    def __init__(self, total: int, counts: dict[str, int], columns: dict[str, list[tuple[Any, ...]]],
                 ready: list[str], ready_titles: list[tuple[str, str]]) -> None:
        self.total, self.counts, self.columns = total, counts, columns
        self.ready, self.ready_titles = ready, ready_titles


def _like(text: str) -> str:
    return "%" + text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%"


def read_page(snapshot: Any, now: Any, margin: int, *, q: str, labels: list[str],
              sizes: dict[str, tuple[int, int]]) -> BoardPage:
    """``sizes``: per status shown, (offset, how many)."""
    from ... import cache
    from ...clock import format_instant, parse_instant
    from ...model import held_for_others
    from ...queries import READY_WHERE, SORTS
    from ...rows import item_summary, thread_entry

    where = ["i.problem IS NULL"]
    args: list[Any] = []
    for label in dict.fromkeys(labels):
        where.append("EXISTS (SELECT 1 FROM label l WHERE l.item = i.id AND l.label = ?)")
        args.append(label)
    filtered_where, filtered_args = list(where), list(args)
    if q:
        needle = q.casefold()
        # SQLite's LIKE ignores the case of ASCII letters by itself; other text is folded in Python (slower).
        fold_title, fold_label = ("i.title", "l.label") if needle.isascii() else ("gw_fold(i.title)", "gw_fold(l.label)")
        filtered_where.append(f"(i.id LIKE ? ESCAPE '\\' OR {fold_title} LIKE ? ESCAPE '\\' OR EXISTS "
                              f"(SELECT 1 FROM label l WHERE l.item = i.id AND {fold_label} LIKE ? ESCAPE '\\'))")
        filtered_args += [_like(needle), _like(needle), _like(needle)]  # an id's part, a title's, a label's
    columns = ", ".join("i." + c.strip() for c in cache.ROW_COLUMNS.split(","))

    def live(expires: str | None) -> bool:
        return expires is not None and held_for_others("active", parse_instant(expires), now, margin)

    def fold(text: str | None) -> str:
        return (text or "").casefold()

    def read(db: Any) -> BoardPage:
        db.create_function("gw_live", 1, live, deterministic=True)
        db.create_function("gw_fold", 1, fold, deterministic=True)
        total = db.execute("SELECT count(*) FROM item i WHERE i.problem IS NULL").fetchone()[0]
        sql_where = " AND ".join(filtered_where)
        counts = dict(db.execute(f"SELECT i.status, count(*) FROM item i WHERE {sql_where} GROUP BY i.status",
                                 filtered_args).fetchall())
        loads = marshal.loads
        shown: dict[str, list[tuple[Any, ...]]] = {}
        for status, (offset, size) in sizes.items():
            records = db.execute(f"SELECT {columns} FROM item i WHERE {sql_where} AND i.status = ? "
                                 f"ORDER BY {SORTS['rank']} LIMIT ? OFFSET ?",
                                 [*filtered_args, status, size, offset]).fetchall()
            shown[status] = [(r[0], r[1], r[2], r[3], loads(r[4]) if r[4] else (), loads(r[5]) if r[5] else (), *r[6:])
                             for r in records]
        ready_where = " AND ".join([*where, *READY_WHERE])
        ready_args = [*args, format_instant(now)]  # READY_WHERE's one argument: now (a timer passed)
        ready = [r[0] for r in db.execute(f"SELECT i.id FROM item i WHERE {ready_where} ORDER BY {SORTS['rank']}",
                                          ready_args).fetchall()]
        titles = db.execute(f"SELECT i.id, i.title FROM item i WHERE {ready_where} ORDER BY {SORTS['rank']} "
                            "LIMIT 20", ready_args).fetchall()
        return BoardPage(total, {s: counts.get(s, 0) for s in STATUSES}, shown, ready, titles)

    return cache.at(snapshot, read, item_summary, thread_entry)  # type: ignore[no-any-return]


def _rows(db: Any, columns: str, ids: list[str]) -> dict[str, tuple[Any, ...]]:
    loads = marshal.loads
    out: dict[str, tuple[Any, ...]] = {}
    for start in range(0, len(ids), 500):  # SQLite's bound on host parameters is far above; stay modest
        part = ids[start:start + 500]
        for r in db.execute(f"SELECT {columns} FROM item i WHERE i.problem IS NULL AND i.id IN "
                            f"({', '.join('?' * len(part))})", part).fetchall():
            out[r[0]] = (r[0], r[1], r[2], r[3], loads(r[4]) if r[4] else (), loads(r[5]) if r[5] else (), *r[6:])
    return out


def neighbourhood(snapshot: Any, centre: str, depth: int, limit: int) -> tuple[list[str], dict[str, tuple[Any, ...]]]:
    """``centre`` and the items within ``depth`` dependency steps of it, either way (at most ``limit``,
    nearest first), with their summary rows: a few queries of the ``dep`` table, not the whole index."""
    from ... import cache
    from ...rows import item_summary, thread_entry

    columns = ", ".join("i." + c.strip() for c in cache.ROW_COLUMNS.split(","))

    def read(db: Any) -> tuple[list[str], dict[str, tuple[Any, ...]]]:
        seen, frontier = [centre], [centre]
        for _ in range(depth):
            if not frontier or len(seen) >= limit:
                break
            marks = ", ".join("?" * len(frontier))
            found = db.execute(f"SELECT on_id FROM dep WHERE item IN ({marks}) UNION "
                               f"SELECT item FROM dep WHERE on_id IN ({marks})", [*frontier, *frontier]).fetchall()
            frontier = sorted({f[0] for f in found} - set(seen))[: limit - len(seen)]
            seen += frontier
        rows = _rows(db, columns, seen)
        return [i for i in seen if i in rows], rows

    return cache.at(snapshot, read, item_summary, thread_entry)  # type: ignore[no-any-return]


def rows_of(snapshot: Any, ids: list[str]) -> dict[str, tuple[Any, ...]]:
    """The summary rows of ``ids`` (those that are sound)."""
    from ... import cache
    from ...rows import item_summary, thread_entry

    columns = ", ".join("i." + c.strip() for c in cache.ROW_COLUMNS.split(","))
    return cache.at(snapshot, lambda db: _rows(db, columns, ids), item_summary, thread_entry)  # type: ignore[no-any-return]
