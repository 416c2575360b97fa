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

import marshal
import os
import sqlite3
import sys

from . import layout
from .errors import Corrupt

TYPE_CHECKING = False  # typing costs ~15 ms to import; annotations are strings anyway
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any

    from .store import Snapshot

# One schema version for the whole file; marshal's format may change between Python versions, so it
# is part of the version too.
SCHEMA = 8  # 2: item_rank, so a listing cut by --limit walks the order and stops; 3: item.shown, sealed_ids;
# 4: dep and label keyed by (item, value) without a rowid (one B-tree each fewer for a rebuild to fill);
# 5: item.waiting and dep_on, so `ready` reads no dependency per row; 6: item.gate (model.gate_of);
# 7: item.updated (the date filters) and alias (an imported item's id in its source: `gw show bd-a2`
# looks it up, rows.aliases);
# 8: item.labels_shown, so a piped listing formats each line in SQL (queries.LINE)
VERSION = SCHEMA * 1000 + sys.version_info[0] * 100 + sys.version_info[1]
NAME = "cache.sqlite"
BUSY_TIMEOUT = 30.0  # seconds a reader waits for another process's update (a cold rebuild) to end

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
CREATE INDEX IF NOT EXISTS label_label ON label (label, item);
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
        if path != ":memory:":
            db.execute("PRAGMA journal_mode=WAL")
        # Derived data: no fsync (a process crash cannot tear a WAL commit; after a power loss a damaged
        # file is rebuilt, and at worst an old commit is found and brought forward like any other).
        db.execute("PRAGMA synchronous=OFF")
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
    try:
        _update(db, snapshot, summarise, thread_entry)
    finally:
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
    # A rebuild (or a pull that moved many shards) reads its folders in bulk, a chunk of shards at a
    # time, through one pipelined `git cat-file --batch`; a command touches one shard, read as it is.
    many = len(work) >= _BULK_SHARDS
    chunk = _BULK_SHARDS if many else max(1, len(work))
    forget = getattr(snapshot.store, "forget", None) if many else None
    for start in range(0, len(work), chunk):
        _chunk(db, snapshot, work[start:start + chunk], (touched, changed, pending), summarise, thread_entry, rebuild)
        if forget is not None:
            # Each folder and file is read once: the store's memo would otherwise keep every item of
            # the repository in memory (max RSS of a 100,000-item rebuild: 240 MB with it, 86 without)
            # for the collector to walk over and over.
            forget()
    _reshorten(db, touched)
    _rewait(db, changed, pending, rebuild)
    for sql in indexes:
        db.execute(sql)
    db.execute("INSERT OR REPLACE INTO meta (key, value) VALUES ('commit', ?)", (snapshot.commit or "",))


def _chunk(db: sqlite3.Connection, snapshot: Snapshot, part: list[tuple[str, Any]], touched: tuple[set[str], set[str], set[str]],
           summarise: Any, thread_entry: Any, rebuild: bool = False) -> None:
    """Bring the shards in ``part`` (``(name, tree entry)``) to their trees; packed folders in bulk.
    (``rebuild``: the tables started empty, so no shard has rows yet.)"""
    members = {name: snapshot.store.read_tree(entry.oid) for name, entry in part}
    before: dict[str, dict[str, str]] = {name: {} if rebuild else dict(
        db.execute("SELECT id, folder FROM item WHERE shard=?", (name,))) for name, _e in part}
    folders = [folder.oid for name, _e in part for item_id, folder in members[name].items()
               if before[name].get(item_id) != folder.oid]
    bulk = len(folders) >= _BULK_FOLDERS and not _loose(snapshot.store, folders)
    view = _Prefetched(snapshot, folders) if bulk else snapshot
    for name, entry in part:
        _shard(db, view, name, entry.oid, members[name], before[name], touched, summarise, thread_entry)


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


def _rewait(db: sqlite3.Connection, changed: set[str], pending: set[str], rebuild: bool) -> None:
    """Keep ``item.waiting`` (the number of an item's dependencies that are not done, missing or
    unreadable; ``ready`` wants 0) true after the ids in ``changed`` were added, removed or re-read.

    An item's count depends on its own dependencies and their rows alone: it is counted again when
    the item was re-read (``pending``) or when one of its dependencies changed (found through
    ``dep_on``). A rebuild counts every item with dependencies in one statement.
    """
    if rebuild:  # every row is new: the items with dependencies were inserted uncounted (NULL)
        db.execute(f"UPDATE item SET waiting = ({_WAITING.format(item='item.id')}) WHERE waiting IS NULL")
        return
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
    rows: list[list[Any]] = []  # lists: the shortest form is set in place once the shard is read
    deps: list[tuple[str, str]] = []
    labels: list[tuple[str, str]] = []
    aliases: list[tuple[str, str]] = []
    for item_id, folder in members.items():
        if before.get(item_id) == folder.oid:
            continue
        row, problem = summarise(snapshot, item_id, folder.oid)
        touched.add(item_id)
        changed.add(item_id)
        previous = None
        if item_id in before:
            blob = db.execute("SELECT thread FROM item WHERE id=?", (item_id,)).fetchone()[0]
            previous = marshal.loads(blob) if blob else None
        try:
            thread = thread_entry(snapshot, item_id, folder.oid, previous)
            thread_problem = None
        except Corrupt as error:
            thread, thread_problem = None, error.message
        has_thread = 1 if thread is not None and (thread[-1] or thread[-2]) else 0
        # A folder with neither a thread nor cursors (most items) keeps no thread summary: reading it
        # again starts from none, which is all that summary would say (fields: threads_index.Entry).
        kept = thread is not None and (thread[1] is not None or thread[2] is not None)
        values = (row or (item_id,) + (None,) * 12 + (folder.oid, None))
        # ``waiting``: how many dependencies are not done (or missing, or unreadable); NULL until
        # counted by _rewait once every shard is in, 0 at once for an item with none.
        rows.append([values[0], values[1], values[2], values[3], _pack(values[4]), _pack(values[5]), *values[6:14],
                     name, problem, marshal.dumps(thread) if kept else None, thread_problem, has_thread, None,
                     None if row is not None and row[5] else 0, values[14], row[15] if row is not None else None,
                     ",".join(values[4]) if values[4] else None])
        if row is not None:
            if row[5]:
                deps.extend([(item_id, d) for d in row[5]])
                pending.add(item_id)
            if row[4]:
                labels.extend([(item_id, x) for x in row[4]])
            if row[16]:
                aliases.extend([(a, item_id) for a in row[16]])
    if not before:
        # A shard read whole (a rebuild): its ids' shortest forms are known now (ids of other shards
        # differ in their first two digits, fewer than are always shown), so none is left to fix.
        from .ids import shown_lengths

        sound = sorted(r[0] for r in rows if r[15] is None)
        touched.difference_update(r[0] for r in rows)
        shown = dict(zip(sound, shown_lengths(sound), strict=False))
        for r in rows:
            r[19] = shown.get(r[0])
    # (otherwise the shortest forms are set by _reshorten once every shard is in)
    # One statement per table and shard (a rebuild writes 100,000 rows): the re-read items' old
    # dependency and label rows go first, then every new row.
    again = [(r[0],) for r in rows if r[0] in before]
    if again:
        db.executemany("DELETE FROM dep WHERE item=?", again)
        db.executemany("DELETE FROM label WHERE item=?", again)
        db.executemany("DELETE FROM alias WHERE item=?", again)
    db.executemany(
        "INSERT OR REPLACE INTO item (id, title, status, priority, labels, deps, created, owner, holder,"
        " lease_state, expires, epoch, fence, folder, shard, problem, thread, thread_problem, has_thread, shown,"
        " waiting, gate, updated, labels_shown) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)", rows)
    # (A value listed twice in one item is one row: the queries only ask whether one exists.)
    db.executemany("INSERT OR IGNORE INTO dep (item, on_id) VALUES (?, ?)", deps)
    db.executemany("INSERT OR IGNORE INTO label (item, label) VALUES (?, ?)", labels)
    db.executemany("INSERT OR IGNORE INTO alias (name, item) VALUES (?, ?)", aliases)
    db.execute("INSERT OR REPLACE INTO shard (name, tree) VALUES (?, ?)", (name, tree))


_BULK_SHARDS = 16  # shards read per bulk chunk (at 100,000 items: ~6,000 folders, a few MB in memory)
_BULK_FOLDERS = 256  # fewer changed folders than this are read one by one (no process to start)


def _loose(store: Any, oids: list[str]) -> bool:
    """Whether these objects are mostly loose (judged on a sample): the store then reads each file
    directly, which costs less than a ``git cat-file`` process doing the same; packed ones it would
    fetch one round trip at a time, where one pipelined batch is several times cheaper."""
    sample = oids[:: max(1, len(oids) // 8)][:8]
    objects_dir = store.repo.objects_dir
    found = sum(os.path.exists(os.path.join(objects_dir, oid[:2], oid[2:])) for oid in sample)
    return found * 2 > len(sample)


class _Prefetched:
    """A snapshot whose store answers the given item folders, and the item and lease files in them,
    from one pipelined ``git cat-file --batch`` read; anything else from the snapshot's own store."""

    def __init__(self, snapshot: Any, folders: list[str]) -> None:
        from .objects import parse_tree

        self._snapshot = snapshot
        self._real = snapshot.store
        hexlen = 64 if self._real.repo.algorithm == "sha256" else 40
        self._trees = {oid: parse_tree(data, hexlen) for oid, (kind, data) in
                       _read_batch(self._real.repo.git_dir, folders).items() if kind == "tree"}
        files = [e.oid for tree in self._trees.values() for n, e in tree.items()
                 if n in (layout.ITEM_FILE, layout.LEASE_FILE)]
        self._blobs = {oid: data for oid, (kind, data) in _read_batch(self._real.repo.git_dir, files).items()
                       if kind == "blob"}

    @property
    def store(self) -> _Prefetched:
        # Itself, as a property, not an attribute: no reference cycle, so a chunk's trees and files are
        # freed as soon as it ends, not at the collector's next full pass.
        return self

    def __getattr__(self, name: str) -> Any:  # the snapshot's (commit, tree(), ...), then the store's (repo, ...)
        try:
            return getattr(self._snapshot, name)
        except AttributeError:
            return getattr(self._real, name)

    def read_tree(self, oid: str) -> Any:
        found = self._trees.get(oid)
        return found if found is not None else self._real.read_tree(oid)

    def read_blob(self, oid: str) -> bytes:
        found = self._blobs.get(oid)
        return found if found is not None else self._real.read_blob(oid)


def _read_batch(git_dir: str, oids: list[str]) -> dict[str, tuple[str, bytes]]:
    """``{oid: (type, content)}`` of ``oids`` through one ``git cat-file --batch``, fed while the answers
    are read (pipelined: no round trip per object) and cut out of its whole output (a chunk's folders
    or files: a few MB), not read object by object. A missing object is left out: the store's own read
    then names it."""
    from .errors import GitFailed
    from .gitcmd import read_batch

    try:
        return {oid: (kind, data) for oid, (_, kind, data) in read_batch(git_dir, oids).items()}
    except GitFailed:
        return {}  # git went away: the store reads each object itself


def _pack(value: Any) -> bytes | None:
    # Empty stays NULL: most items have no labels or dependencies, and a listing then unpacks nothing.
    return marshal.dumps(tuple(value)) if value else None


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
    try:
        db.execute("BEGIN")
        try:
            if db.execute("PRAGMA user_version").fetchone()[0] != VERSION:
                raise _Foreign()  # another gitwork replaced the schema since this connection opened
            if _commit_of(db) == want:
                return read(db)
        finally:
            db.execute("COMMIT")
        db.execute("BEGIN IMMEDIATE")
        try:
            if _commit_of(db) != want:
                update(db, snapshot, summarise, thread_entry)
            out = read(db)
        except BaseException:
            db.execute("ROLLBACK")
            raise
        db.execute("COMMIT")
        return out
    finally:
        if db.in_transaction:
            db.execute("ROLLBACK")


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
    try:
        db = sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=30.0)
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
