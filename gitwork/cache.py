"""The read side's one derived cache: a SQLite database of what ``list``, ``ready``, ``claim --next``
and ``inbox`` need, brought from the commit it reflects to the one asked for incrementally.

``<git common dir>/gitwork/cache.sqlite`` (WAL) holds, per item, the summary ``index.py`` defines and
the thread summary ``threads_index.py`` defines, both functions of the item's folder tree alone, and
per shard its tree id. Moving from commit A to commit B compares the two ``items/`` trees shard by
shard and re-reads only the item folders whose tree id changed, in one transaction, so a reader sees
the cache at A or at B, never between. Because the comparison is by tree ids, not by history, a
cache built on another (even unrelated) history is brought to the tip correctly; a cache whose
schema version is not this one, or that SQLite finds damaged, is deleted and rebuilt from scratch.

The cache is never authoritative: writers decide on the tree at the tip (``engine.apply``), the
cache only answers reads, and deleting it changes no answer, only the time. When the file cannot be
used at all (unwritable directory, damage that survives a rebuild), the same code runs against an
in-memory database.
"""

from __future__ import annotations

import gc
import marshal
import os
import sqlite3
import sys
from operator import itemgetter

from . import cachefill, layout
from .cachefill import QUIET, R_ID, R_PROBLEM, R_STATUS, R_WAITING, Helper, _insert, _set_waiting, read_part, shard_rows

TYPE_CHECKING = False  # typing costs ~15 ms to import; annotations are strings anyway
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any

    from .store import Snapshot

# One schema version for the whole file; marshal's format may change between Python versions, so it
# is part of the version too.
SCHEMA = 9  # 2: item_rank, so a listing cut by --limit walks the order and stops; 3: item.shown, sealed_ids;
# 4: dep and label keyed by (item, value) without a rowid (one B-tree each fewer for a rebuild to fill);
# 5: item.waiting and dep_on, so `ready` reads no dependency per row; 6: item.gate (model.gate_of);
# 7: item.updated (the date filters) and alias (an imported item's id in its source: `gw show bd-a2`
# looks it up, rows.aliases);
# 8: item.labels_shown, so a piped listing formats each line in SQL (queries.LINE);
# 9: no label_label index (no query's plan used it: a label filter searches label's primary key per
# item, queries.py; building it was 0.15-0.2 s of a 100,000-item rebuild's serial tail)
VERSION = SCHEMA * 1000 + sys.version_info[0] * 100 + sys.version_info[1]
NAME = "cache.sqlite"
BUSY_TIMEOUT = 30.0  # seconds a reader waits for another process's update (a cold rebuild) to end
PAGE_SIZE = 16384  # a new file's (SQLite's default: 4096); a file made with other pages keeps them

_DDL = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS shard (name TEXT PRIMARY KEY, tree TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS item (
    id TEXT PRIMARY KEY, shard TEXT NOT NULL, folder TEXT NOT NULL,
    title TEXT, status TEXT, priority INTEGER, labels BLOB, deps BLOB, created TEXT, owner TEXT,
    holder TEXT, lease_state TEXT, expires TEXT, epoch INTEGER, fence INTEGER,
    problem TEXT,
    thread BLOB, thread_problem TEXT, has_thread INTEGER NOT NULL DEFAULT 0,
    shown INTEGER, waiting INTEGER, gate TEXT, updated TEXT, labels_shown TEXT
);
CREATE TABLE IF NOT EXISTS alias (name TEXT NOT NULL, item TEXT NOT NULL, PRIMARY KEY (name, item)) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS sealed_ids (oid TEXT PRIMARY KEY, first INTEGER NOT NULL, ids TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS dep (item TEXT NOT NULL, on_id TEXT NOT NULL, PRIMARY KEY (item, on_id)) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS label (item TEXT NOT NULL, label TEXT NOT NULL, PRIMARY KEY (item, label)) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS dep_on ON dep (on_id);
CREATE INDEX IF NOT EXISTS item_shard ON item (shard);
CREATE INDEX IF NOT EXISTS item_problem ON item (id) WHERE problem IS NOT NULL;
CREATE INDEX IF NOT EXISTS item_ready ON item (status, priority, created, id);
CREATE INDEX IF NOT EXISTS item_rank ON item (priority, created, id);
"""

ROW_COLUMNS = ("id, title, status, priority, labels, deps, created, owner, holder, lease_state, expires, "
               "epoch, fence, folder, gate")
# Files and folders of the read caches this file replaced (index.py, commitcache.py, threads_index.py:
# ``<ref>.*.marshal``; thread.py's message ids: ``thread-ids-v*/``), deleted when the schema is created.
_OLD_FILES = (".marshal",)
_OLD_DIRS = ("thread-ids-v",)


def path_for(snapshot: Snapshot) -> str:
    return os.path.join(snapshot.store.repo.gitwork_dir(), NAME)


def drop(path: str) -> bool:
    """Delete the cache file and its WAL companions; whether there was one."""
    _forget(path)
    found = False
    for suffix in ("", "-wal", "-shm", "-journal"):
        try:
            os.unlink(path + suffix)
            found = True
        except FileNotFoundError:
            pass
        except OSError:
            pass
    return found


def _open(path: str) -> sqlite3.Connection:
    db = sqlite3.connect(path, timeout=BUSY_TIMEOUT, isolation_level=None, check_same_thread=False)
    try:
        # Pages of 16 KiB in a new file (set before it has content; no effect on an existing one): a
        # cold rebuild at 100,000 items writes ~4,300 pages, not ~17,000, at its commit (0.03 against
        # 0.065 s CPU, on the serial tail) and inserts into shallower B-trees (docs/performance.md).
        db.execute(f"PRAGMA page_size={PAGE_SIZE}")
        if path != ":memory:":
            # (Refused while another process fills the file in rollback mode, _at: it turns WAL back
            # on when done, and meanwhile this connection waits for its locks like any reader.)
            _journal(db, "wal")
        # Derived data: no fsync (a process crash cannot tear a WAL commit; after a power loss a damaged
        # file is rebuilt, and at worst an old commit is found and brought forward like any other).
        db.execute("PRAGMA synchronous=OFF")
        # The WAL checkpointed at 4 MiB, as with 4 KiB pages (SQLite's rule is 1,000 pages: 16 MiB of 16 KiB).
        db.execute(f"PRAGMA wal_autocheckpoint={(4 << 20) // db.execute('PRAGMA page_size').fetchone()[0]}")
        version = db.execute("PRAGMA user_version").fetchone()[0]
        if version != VERSION:
            if version != 0:
                raise _Foreign()
            db.execute("BEGIN IMMEDIATE")
            try:
                if db.execute("PRAGMA user_version").fetchone()[0] == 0:
                    for statement in _DDL.split(";"):
                        if statement.strip():
                            db.execute(statement)
                    db.execute(f"PRAGMA user_version={VERSION}")
                db.execute("COMMIT")
            except BaseException:
                if db.in_transaction:
                    db.execute("ROLLBACK")
                raise
            if db.execute("PRAGMA user_version").fetchone()[0] != VERSION:
                raise _Foreign()
            if path != ":memory:":
                remove_old_caches(os.path.dirname(path))
    except BaseException:
        db.close()
        raise
    return db


def remove_old_caches(folder: str) -> list[str]:
    """Delete the files of the caches this one replaced (made by older gitwork versions); their names."""
    import shutil

    removed: list[str] = []
    try:
        names = os.listdir(folder)
    except OSError:
        return removed
    for name in names:
        path = os.path.join(folder, name)
        try:
            if name.startswith(_OLD_DIRS) and os.path.isdir(path):
                shutil.rmtree(path, ignore_errors=True)
            elif name.endswith(_OLD_FILES) and os.path.isfile(path):
                os.unlink(path)
            else:
                continue
        except OSError:
            continue  # another process removed it first, or it is not ours to remove
        removed.append(name)
    return removed


class _Foreign(Exception):
    """The file is another schema version's (or another Python's): rebuild it."""


def _commit_of(db: sqlite3.Connection) -> str | None:
    found = db.execute("SELECT value FROM meta WHERE key='commit'").fetchone()
    return found[0] if found else None


def update(db: sqlite3.Connection, snapshot: Snapshot, summarise: Any, thread_entry: Any) -> None:
    """Bring the open transaction's cache to ``snapshot``: only changed shards and item folders are read."""
    # 64 MiB of page cache while updating (the default is 2 MiB): a rebuild inserts 100,000 rows into
    # several indexes, and with the default the pages of a 60 MB file are evicted and read back all
    # along (2x the CPU at 100,000 items). Readers keep the default: a listing scans the table once.
    db.execute("PRAGMA cache_size=-65536")
    # No cyclic garbage collection meanwhile: a rebuild allocates millions of tuples, lists and dicts
    # that live until their shard is written, and the collector's passes over them cost 0.8 s of ~6 s
    # CPU at 100,000 items while finding nothing (the rows hold no cycles: the peak memory was the
    # same without it, 180 MB). Plain reference counting still frees each chunk as it ends.
    collecting = gc.isenabled()
    gc.disable()
    cachefill.trace("update-start")
    try:
        _update(db, snapshot, summarise, thread_entry)
    finally:
        if collecting:
            gc.enable()
        db.execute("PRAGMA cache_size=-2000")


def _update(db: sqlite3.Connection, snapshot: Snapshot, summarise: Any, thread_entry: Any) -> None:
    tip = snapshot.tree(layout.ITEMS) if snapshot.commit is not None else {}
    known = dict(db.execute("SELECT name, tree FROM shard"))
    touched: set[str] = set()  # ids added, removed or re-read: their neighbours' shortest forms may change
    changed: set[str] = set()  # the same ids, kept whole: their dependents' ``waiting`` may change
    pending: set[str] = set()  # re-read items with dependencies: their own ``waiting`` is to count
    rebuild = not known
    indexes: list[str] = []
    if rebuild:
        # Every row is new: fill the tables without their secondary indexes and build each once at
        # the end, in one sorted pass, instead of updating six B-trees row by row (a quarter of the
        # SQL time at 100,000 items). Nothing reads them meanwhile: this transaction holds the write
        # lock, and readers see the commit before it. (No shard row means no item row; cleared to be sure.)
        for table in ("dep", "label", "item"):
            db.execute(f"DELETE FROM {table}")
        indexes = [sql for name, sql in db.execute(
            "SELECT name, sql FROM sqlite_master WHERE type = 'index' AND sql IS NOT NULL")]
        for name in [name for name, _sql in db.execute(
                "SELECT name, sql FROM sqlite_master WHERE type = 'index' AND sql IS NOT NULL")]:
            db.execute(f"DROP INDEX {name}")
    for name in known.keys() - tip.keys():  # (no shortest form outside a shard depends on its ids)
        for table in ("dep", "label", "alias"):
            db.execute(f"DELETE FROM {table} WHERE item IN (SELECT id FROM item WHERE shard=?)", (name,))
        db.execute("DELETE FROM item WHERE shard=?", (name,))
        db.execute("DELETE FROM shard WHERE name=?", (name,))
    work = [(name, entry) for name, entry in tip.items() if known.get(name) != entry.oid]
    if rebuild:
        _fill(db, snapshot, work, summarise, thread_entry, indexes)
    else:
        # A pull that moved many shards reads its folders in bulk, a chunk of shards at a time, through
        # one `git cat-file --batch`; a command touches one shard, read as it is.
        many = len(work) >= cachefill.BULK_SHARDS
        chunk = cachefill.BULK_SHARDS if many else max(1, len(work))
        forget = getattr(snapshot.store, "forget", None) if many else None
        for start in range(0, len(work), chunk):
            _chunk(db, snapshot, work[start:start + chunk], (touched, changed, pending), summarise, thread_entry)
            if forget is not None:
                forget()  # (each folder is read once: see _fill)
    _reshorten(db, touched)
    _rewait(db, changed, pending)
    cachefill.trace("indexes")
    if indexes:
        # The sorts of the index builds may use a second thread: by now the helper has ended, so on two
        # cores one is idle (CPU the same; wall 0.63 -> 0.53 s for the five at 100,000 items, load 16).
        db.execute("PRAGMA threads=2")
        try:
            _build(db, indexes)
        finally:
            db.execute("PRAGMA threads=0")
    db.execute("INSERT OR REPLACE INTO meta (key, value) VALUES ('commit', ?)", (snapshot.commit or "",))


def _chunk(db: sqlite3.Connection, snapshot: Snapshot, part: list[tuple[str, Any]], touched: tuple[set[str], set[str], set[str]],
           summarise: Any, thread_entry: Any) -> None:
    """Bring the shards in ``part`` (``(name, tree entry)``) to their trees; packed folders in bulk."""
    before: dict[str, dict[str, str]] = {name: dict(
        db.execute("SELECT id, folder FROM item WHERE shard=?", (name,))) for name, _e in part}
    members, view = read_part(snapshot, part, before)
    for name, entry in part:
        _shard(db, view, name, entry.oid, members[name], before[name], touched, summarise, thread_entry)


def _build(db: sqlite3.Connection, indexes: list[str]) -> None:
    """Build the dropped ``indexes`` (their CREATE statements), each taken off the list once built."""
    while indexes:
        db.execute(indexes[0])
        del indexes[0]
        cachefill.trace("index")


def _fill(db: sqlite3.Connection, snapshot: Snapshot, work: list[tuple[str, Any]], summarise: Any,
          thread_entry: Any, indexes: list[str]) -> None:
    """Fill the empty tables with every shard in ``work`` (a rebuild).

    The folders are read in bulk, a chunk of shards at a time. With many of them, a helper process
    (``cachefill``) summarises chunks from the end of the list while this process summarises from
    the start and writes what both produce; they stop where they meet (on two cores the rebuild then
    takes about the time of the larger half; the CPU is the same plus the helper's start). Each
    row's ``waiting`` is counted in Python as it is inserted, from the done items read so far; the
    ones whose dependencies were not all read yet are counted again once they are (the early tail,
    below) or at the end, and updated if a dependency turned out done (counting every row in SQL
    after the fact cost 0.4-0.5 s at 100,000 items, a fifth of the inserts; updating each as its last
    dependency comes in, branch rebuild8, and holding rows back until then, rebuild11, cost more:
    see docs/performance.md)."""
    # How many folders, judged by the first shard (ids are spread evenly over the shards).
    folders = len(snapshot.store.read_tree(work[0][1].oid)) * len(work) if work else 0
    shared = folders >= cachefill.HELPER_FOLDERS
    chunk = max(1, len(work) // cachefill.HELPER_CHUNKS) if shared else cachefill.BULK_SHARDS
    parts = [work[start:start + chunk] for start in range(0, len(work), chunk)]
    helper = None
    if shared and len(parts) > 1:
        helper = Helper.start(snapshot, [(i, [(n, e.oid) for n, e in parts[i]]) for i in reversed(range(len(parts)))],
                              summarise, thread_entry)
    from .store import crash_point

    forget = getattr(snapshot.store, "forget", None)
    taken: set[str] = set()  # shards in
    seen: set[str] = set()  # ids in
    done: set[str] = set()  # sound items whose status is done: every other dependency counts as waiting
    unsure: list[tuple[str, int, set[str]]] = []  # (id, count, dependencies) of rows counted before all were in
    tally = [0, 0]  # dependencies already read when a row came in: how many, how many done

    def take(name: str, tree: str, rows: list[list[Any]], deps: dict[str, list[str]], labels: dict[str, list[str]],
             aliases: list[tuple[str, str]]) -> None:
        if name in taken:
            return  # both processes did this shard (they met in it): the first is kept
        cachefill.trace(f"take {name}")
        taken.add(name)
        seen.update(map(_ID, rows))
        done.update([r[R_ID] for r in rows if r[R_STATUS] == "done" and (len(r) == QUIET or r[R_PROBLEM] is None)])
        for r in rows:
            if r[R_WAITING] is None:  # an item with dependencies: each distinct one not done counts
                on = set(deps[r[R_ID]])
                known = on & seen  # (set operations in C: a rebuild counts 75,000 of them)
                count = len(known - done)
                tally[0] += len(known)
                tally[1] += len(known) - count
                if len(known) < len(on):  # a dependency not read yet: counted again once it is
                    # Meanwhile counted as done or not, as most dependencies read so far were: fewer change
                    # (issue 27's shape, 100,000 items: ~18,000 of ~64,000, not ~50,000; older items are done).
                    count += 0 if tally[1] * 2 > tally[0] else len(on) - len(known)
                    unsure.append((r[R_ID], count, on))
                r[R_WAITING] = count
        _insert(db, "INSERT", rows, deps, labels, aliases)
        db.execute("INSERT INTO shard (name, tree) VALUES (?, ?)", (name, tree))
        cachefill.trace(f"taken {name}")
        crash_point("cache-fill")  # (tests: a kill -9 mid-rebuild leaves the cache as it was)

    def settle(every: bool) -> None:
        """Count again the unsure rows whose dependencies are all in now (``every``: all of them) and
        update the rows whose count changed; the rest stay unsure."""
        fixed: dict[str, int] = {}
        left = []
        for entry in unsure:
            item_id, count, on = entry
            if every or seen.issuperset(on):
                if len(on - done) != count:
                    fixed[item_id] = len(on - done)
            else:
                left.append(entry)
        unsure[:] = left
        _set_waiting(db, fixed)
        cachefill.trace(f"fixed {len(fixed)}")

    def compute(part: list[tuple[str, Any]]) -> None:
        members, view = read_part(snapshot, part, {})
        for name, entry in part:
            cachefill.trace(f"rows {name}")
            take(name, entry.oid, *shard_rows(view, name, members[name], {}, summarise, thread_entry))
        del view
        if forget is not None:
            # Each folder and file is read once: the store's memo would otherwise keep every item of
            # the repository in memory for the collector to walk over and over.
            forget()

    with cachefill.bulk_reads(snapshot.store.repo.git_dir):  # one git for every chunk's bulk reads
        try:
            for index, part in enumerate(parts):
                if helper is not None:
                    for frame in helper.ready():
                        take(*frame[1:])
                    if index in helper.started:
                        break  # the helper reached this chunk from the other end: the rest is its
                    if indexes and _early(helper, index, len(seen), len(taken) / len(parts[0])):
                        # The helper has about as much left to do as the tail has here: do the tail's
                        # counts and index builds now, on the rows in so far, while it does the rest
                        # (on two cores, one would otherwise idle through them); the rows that come
                        # after are written into the built indexes. Then on as before.
                        cachefill.trace("early")
                        helper.stop_below(index)  # (else it goes on into the chunks done here)
                        settle(False)
                        _build(db, indexes)
                        for frame in helper.ready():
                            take(*frame[1:])
                        if index in helper.started:
                            break
                compute(part)
        finally:
            cachefill.trace("finish")
            if helper is not None:
                for frame in helper.finish():
                    take(*frame[1:])
        cachefill.trace("finished")
        for part in parts:  # whatever the helper did not deliver (it died, or never started)
            missing = [(name, entry) for name, entry in part if name not in taken]
            if missing:
                compute(missing)
    settle(True)


# The tail's work per row in (unsure rows' counts, five index builds: ~0.45 s at 100,000 items), and the
# time to write a row into built indexes (~25 us; ~13 before): _early's estimates.
_EARLY, _LATE = 5e-6, 2.5e-5


def _early(helper: Helper, index: int, rows: int, chunks: float) -> bool:
    """Whether to do the tail now (see _fill): when what the helper has left to do (its chunks left
    times its time per chunk) is no more than the tail here plus writing those chunks' rows."""
    left, pace = helper.left(index), helper.pace()
    per_chunk = _LATE * rows / chunks if chunks else 0.0  # (writing one chunk's rows, indexes built)
    return pace > per_chunk and left * (pace - per_chunk) <= _EARLY * rows


_ID = itemgetter(R_ID)
_PREV = "SELECT id FROM item WHERE id < ? AND problem IS NULL ORDER BY id DESC LIMIT 1"
_NEXT = "SELECT id FROM item WHERE id > ? AND problem IS NULL ORDER BY id LIMIT 1"


def _reshorten(db: sqlite3.Connection, touched: set[str]) -> None:
    """Keep ``item.shown`` (how many characters of each sound item's id are its shortest unique form,
    ``ids.shortest_unique``'s rule) true after the ids in ``touched`` were added, removed or re-read.

    An id's form depends only on its two neighbours in id order, so a command that touches a handful
    of items recomputes a handful of rows; a rebuild recomputes all in one ordered scan. A listing
    then reads the form with its row instead of sorting 100,000 ids per process.
    """
    from .ids import shown_length, shown_lengths

    if not touched:
        return
    if len(touched) > 256:
        ordered = [r[0] for r in db.execute("SELECT id FROM item WHERE problem IS NULL ORDER BY id")]
        db.executemany("UPDATE item SET shown=? WHERE id=?", zip(shown_lengths(ordered), ordered, strict=False))
        return
    def neighbour(query: str, item_id: str) -> str | None:
        found = db.execute(query, (item_id,)).fetchone()
        return found[0] if found else None

    again: set[str] = set()
    for item_id in touched:
        if db.execute("SELECT 1 FROM item WHERE id=? AND problem IS NULL", (item_id,)).fetchone():
            again.add(item_id)
        for query in (_PREV, _NEXT):
            found = neighbour(query, item_id)
            if found is not None:
                again.add(found)
    db.executemany("UPDATE item SET shown=? WHERE id=?", [
        (shown_length(item_id, neighbour(_PREV, item_id), neighbour(_NEXT, item_id)), item_id)
        for item_id in again])


_WAITING = ("SELECT count(*) FROM dep d LEFT JOIN item j ON j.id = d.on_id"
            " WHERE d.item = {item} AND (j.status IS NULL OR j.status != 'done' OR j.problem IS NOT NULL)")


def _rewait(db: sqlite3.Connection, changed: set[str], pending: set[str]) -> None:
    """Keep ``item.waiting`` (the number of an item's dependencies that are not done, missing or
    unreadable; ``ready`` wants 0) true after the ids in ``changed`` were added, removed or re-read.

    An item's count depends on its own dependencies and their rows alone: it is counted again when
    the item was re-read (``pending``) or when one of its dependencies changed (found through
    ``dep_on``). A rebuild counts them as it inserts the rows (``_fill``).
    """
    again = set(pending)
    for item_id in changed:
        again.update(r[0] for r in db.execute("SELECT item FROM dep WHERE on_id=?", (item_id,)))
    db.executemany(f"UPDATE item SET waiting = ({_WAITING.format(item='?1')}) WHERE id=?1", [(i,) for i in again])


def _shard(db: sqlite3.Connection, snapshot: Any, name: str, tree: str, members: dict[str, Any],
           before: dict[str, str], sets: tuple[set[str], set[str], set[str]], summarise: Any, thread_entry: Any) -> None:
    """Bring one shard's rows to its tree ``tree`` (``members``): only folders whose tree id changed.

    ``sets``: the ids this pass touched, for _reshorten, for _rewait's dependents and own counts."""
    touched, changed, pending = sets
    gone = before.keys() - members.keys()
    touched.update(gone)
    changed.update(gone)
    if gone:
        for table, key in (("dep", "item"), ("label", "item"), ("alias", "item"), ("item", "id")):
            db.executemany(f"DELETE FROM {table} WHERE {key}=?", [(i,) for i in gone])

    def previous(item_id: str) -> Any:
        blob = db.execute("SELECT thread FROM item WHERE id=?", (item_id,)).fetchone()[0]
        return marshal.loads(blob) if blob else None

    rows, deps, labels, aliases = shard_rows(snapshot, name, members, before, summarise, thread_entry, previous)
    changed.update(r[R_ID] for r in rows)
    pending.update(deps)
    if before:
        touched.update(r[R_ID] for r in rows)  # (their shortest forms are set by _reshorten once every shard is in)
    # One statement per table and shard: the re-read items' old dependency and label rows go first,
    # then every new row.
    again = [(r[R_ID],) for r in rows if r[R_ID] in before]
    if again:
        db.executemany("DELETE FROM dep WHERE item=?", again)
        db.executemany("DELETE FROM label WHERE item=?", again)
        db.executemany("DELETE FROM alias WHERE item=?", again)
    _insert(db, "INSERT OR REPLACE", rows, deps, labels, aliases)
    db.execute("INSERT OR REPLACE INTO shard (name, tree) VALUES (?, ?)", (name, tree))


def unpack_row(record: tuple[Any, ...]) -> tuple[Any, ...]:
    """A SELECT of ``ROW_COLUMNS`` as the summary tuple ``index.py`` defines."""
    labels, deps = record[4], record[5]
    return (*record[:4], marshal.loads(labels) if labels else (), marshal.loads(deps) if deps else (),
            *record[6:])


def at(snapshot: Snapshot, read: Callable[[sqlite3.Connection], Any], summarise: Any, thread_entry: Any,
       *, use_cache: bool = True) -> Any:
    """``read(db)`` on the cache brought to ``snapshot``, in one consistent transaction.

    A reader first looks in a read transaction; only when the cache reflects another commit does it
    take the write lock, bring the cache over and read in that same transaction. Damage or a foreign
    version is repaired by deleting the file and building again; if that fails too, an in-memory
    database answers (slower, never wrong).
    """
    if use_cache:
        path = path_for(snapshot)
        for attempt in (0, 1):
            try:
                return _at(_connection(path), snapshot, read, summarise, thread_entry)
            except sqlite3.OperationalError as error:
                _forget(path)
                if "locked" in str(error) or "busy" in str(error):
                    break  # another process held the write lock too long (a cold rebuild): answer alone
                if attempt == 0:
                    drop(path)
            except (sqlite3.DatabaseError, _Foreign):
                _forget(path)
                if attempt == 0:
                    drop(path)
            except OSError:
                _forget(path)
                break
    db = _open(":memory:")
    try:
        return _at(db, snapshot, read, summarise, thread_entry)
    finally:
        db.close()


# One open connection per cache file, process and thread: a long-lived process (an agent holding a
# Workplane) then pays neither the open nor the checkpoint that closing the last connection makes.
# (It is reopened when the file was deleted or replaced meanwhile: `gw cache drop` by another process.)
_CONNECTIONS: dict[str, tuple[int, int, sqlite3.Connection]] = {}


def _inode(path: str) -> int:
    try:
        return os.stat(path).st_ino
    except OSError:
        return -1


def _key(path: str) -> str:
    import threading

    return f"{threading.get_ident()}:{path}"  # one per thread: a transaction is a connection's state


def _connection(path: str) -> sqlite3.Connection:
    known = _CONNECTIONS.get(_key(path))
    if known is not None and known[0] == os.getpid() and known[1] == _inode(path) != -1:
        return known[2]
    _forget(path)
    db = _open(path)
    _CONNECTIONS[_key(path)] = (os.getpid(), _inode(path), db)
    return db


def _forget(path: str) -> None:
    known = _CONNECTIONS.pop(_key(path), None)
    if known is not None and known[0] == os.getpid():
        try:
            known[2].close()
        except sqlite3.Error:
            pass


def _at(db: sqlite3.Connection, snapshot: Snapshot, read: Any, summarise: Any, thread_entry: Any) -> Any:
    want = snapshot.commit or ""
    direct = False
    try:
        db.execute("BEGIN")
        try:
            if db.execute("PRAGMA user_version").fetchone()[0] != VERSION:
                raise _Foreign()  # another gitwork replaced the schema since this connection opened
            if _commit_of(db) == want:
                return read(db)
            empty = db.execute("SELECT 1 FROM shard LIMIT 1").fetchone() is None
        finally:
            db.execute("COMMIT")
        # An empty cache is filled whole through a rollback journal: each page written once, not to the
        # WAL and again at its checkpoint (commit at 100,000 items: 0.06 against 0.18 s, on the tail).
        # Refused with another connection open (then through the WAL as before); WAL again after the
        # commit. A kill meanwhile leaves a hot journal: the next opener rolls back to the empty cache.
        direct = empty and _journal(db, "delete")
        db.execute("BEGIN IMMEDIATE")
        try:
            if _commit_of(db) != want:
                update(db, snapshot, summarise, thread_entry)
            out = read(db)
        except BaseException:
            db.execute("ROLLBACK")
            raise
        cachefill.trace("commit")
        db.execute("COMMIT")
        cachefill.trace("committed")
        return out
    finally:
        if db.in_transaction:
            db.execute("ROLLBACK")
        if direct:
            _wal_again(db)


def _journal(db: sqlite3.Connection, mode: str) -> bool:
    """Switch the file's journal mode; whether it is ``mode`` now (a switch out of or into WAL is
    refused, at once, while another connection has the file open or in a transaction)."""
    try:
        return bool(db.execute(f"PRAGMA journal_mode={mode}").fetchone()[0] == mode)
    except sqlite3.OperationalError:
        return False


def _wal_again(db: sqlite3.Connection) -> None:
    """WAL again after a fill in rollback mode: tried for up to 1 s while a reader holds a read
    lock; after that the next connection to open the file (``_open``) turns it on."""
    import time

    for _attempt in range(100):
        if _journal(db, "wal"):
            return
        time.sleep(0.01)


def size(path: str) -> int:
    """Bytes on disk of the cache file and its WAL companions."""
    return sum(os.path.getsize(path + s) for s in ("", "-wal", "-shm") if os.path.exists(path + s))


def status(path: str) -> dict[str, Any]:
    """What the cache file holds, for ``gw cache status`` (never builds it)."""
    out: dict[str, Any] = {"path": path, "exists": os.path.exists(path), "commit": None, "items": 0,
                           "bytes": size(path),
                           "schema": None, "ok": None}
    if not out["exists"]:
        return out
    # Read-only, unless a rebuild killed part way left a journal (``_at`` fills an empty cache in
    # rollback mode): rolling it back takes write access, and gives the empty cache it started from.
    mode = "rw" if os.path.exists(path + "-journal") else "ro"
    try:
        db = sqlite3.connect(f"file:{path}?mode={mode}", uri=True, timeout=30.0)
        try:
            out["schema"] = db.execute("PRAGMA user_version").fetchone()[0]
            if out["schema"] == VERSION:
                out["commit"] = _commit_of(db) or None
                out["items"] = db.execute("SELECT count(*) FROM item").fetchone()[0]
            out["ok"] = db.execute("PRAGMA quick_check").fetchone()[0] == "ok" and out["schema"] == VERSION
        finally:
            db.close()
    except sqlite3.DatabaseError:
        out["ok"] = False
    return out


# --- message ids of sealed thread segments (``thread.message_ids``) -----------------------------------
# A full segment never changes, so the ids it holds are kept by its blob id: content-addressed, hence
# right on any history. Only a lookup aid for refusing a duplicate message id: a missing or unusable
# cache means parsing the segment again, and the check itself is always made on the tip's blobs.

_QUICK = 100  # ms a poster waits for the write lock (a cold rebuild may hold it): skipping is cheaper


def sealed_ids(folder: str, oids: list[str]) -> dict[str, tuple[int, str]]:
    """``{segment blob id: (first seq, newline-joined ids)}`` for the ``oids`` the cache knows."""
    try:
        db = _connection(os.path.join(folder, NAME))
        out: dict[str, tuple[int, str]] = {}
        for start in range(0, len(oids), 500):
            chunk = oids[start:start + 500]
            out.update((oid, (first, ids)) for oid, first, ids in db.execute(
                f"SELECT oid, first, ids FROM sealed_ids WHERE oid IN ({', '.join('?' * len(chunk))})", chunk))
        return out
    except (sqlite3.Error, _Foreign, OSError):
        _forget(os.path.join(folder, NAME))
        return {}


def remember_sealed_ids(folder: str, found: dict[str, tuple[int, str]]) -> None:
    """Keep what :func:`sealed_ids` will answer; silently skipped when the cache is busy or unusable."""
    path = os.path.join(folder, NAME)
    try:
        db = _connection(path)
        db.execute(f"PRAGMA busy_timeout={_QUICK}")
        try:
            db.execute("BEGIN IMMEDIATE")
            try:
                db.executemany("INSERT OR REPLACE INTO sealed_ids (oid, first, ids) VALUES (?, ?, ?)",
                               [(oid, first, ids) for oid, (first, ids) in found.items()])
            except BaseException:
                db.execute("ROLLBACK")
                raise
            db.execute("COMMIT")
        finally:
            db.execute(f"PRAGMA busy_timeout={int(BUSY_TIMEOUT * 1000)}")
    except (sqlite3.Error, _Foreign, OSError):
        _forget(path)
