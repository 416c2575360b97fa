"""Filling the read cache (``cache.py``) from many item folders: what each folder's rows are, the
folders read in bulk, and, for a large rebuild, a helper process that summarises shards from the far
end of the list while this process summarises from the near end and writes every row to SQLite.

Read side, beside ``cache.py``: it reads the store and imports neither the engine nor a face. The
summary functions are the caller's (``index.py`` hands ``rows.item_summary``/``rows.thread_entry``
to the cache); the helper imports the same functions by name, so both processes compute the same rows.

The helper (``python -m gitwork.cachefill``, or its ``main()`` run by ``-c``) is an optimisation only: whatever it did not deliver (it
could not start, died, or was told to stop) this process computes itself, and any error is raised
from here, as a rebuild without it would raise it. Its protocol, on its stdin and stdout: one job
(length-prefixed marshal: where the repository's objects are, the commit, the functions' names and
the chunks of shards, in the order to take them); then frames, each length-prefixed marshal,
``("chunk", index)`` before it starts a chunk and ``("shard", name, tree, rows, deps, labels,
aliases)`` per shard; stdin reaching its end between chunks means stop, and 8 bytes on it (a chunk
index, big-endian) mean: start no chunk below that one.
"""

from __future__ import annotations

import json
import marshal
import os
import sys

from . import layout
from .errors import Corrupt

TYPE_CHECKING = False  # typing costs ~15 ms to import; annotations are strings anyway
if TYPE_CHECKING:
    import sqlite3
    import subprocess
    from collections.abc import Callable
    from typing import Any

    # A shard's rows as ``shard_rows`` computes them: item rows (lists, in ``ITEM_COLUMNS`` order),
    # the values of the dep and label tables by item (``{item: [value, ...]}``, each item's list as
    # its file has it), and the (name, item) pairs of the alias table.
    Filled = tuple[list[list[Any]], dict[str, list[str]], dict[str, list[str]], list[tuple[str, str]]]

# An item row's columns, in the order ``shard_rows`` lists them and cache.py inserts them. The ones
# after ``QUIET`` hold, for most items of a rebuild (no lease, no owner, no gate, no thread, sound),
# the values ``QUIET_VALUES``: such a row is inserted by a statement that binds only the columns
# before them and writes those as constants (binding is what an insert from Python costs: 11 fewer
# parameters of 24 took 0.3 s CPU off 100,000 rows). Such a "quiet" row is listed ``QUIET`` long,
# without them: none to build, send from the helper, test and cut off again.
ITEM_COLUMNS = ("id", "title", "status", "priority", "labels", "deps", "created", "folder", "shard", "shown",
                "waiting", "updated", "labels_shown",
                "owner", "holder", "lease_state", "expires", "epoch", "fence", "problem", "thread", "thread_problem",
                "has_thread", "gate")
QUIET = 13
QUIET_VALUES = [None, None, None, None, 0, None, None, None, None, 0, None]
R_ID, R_STATUS, R_DEPS, R_SHOWN, R_WAITING, R_EPOCH, R_PROBLEM = 0, 2, 5, 9, 10, 17, 19

BULK_SHARDS = 16  # shards read per bulk chunk (at 100,000 items: ~6,000 folders, a few MB in memory)
BULK_FOLDERS = 256  # fewer changed folders than this are read one by one (no process to start)
HELPER_FOLDERS = 20_000  # a rebuild of fewer folders is not worth a second interpreter (~0.1 s)
HELPER_CHUNKS = 64  # chunks the work is cut into when a helper shares it (at most one is done twice, where they meet)

# ``GW_CACHE_TRACE=FILE``: each process of a rebuild appends ``<monotonic s> <process CPU s> <pid> <event>`` lines to FILE
# (the rebuild's timeline: benchmarks/bench_cache.py --timeline reads it). Unset: one test of a constant.
_TRACE = os.environ.get("GW_CACHE_TRACE") or None


def trace(event: str) -> None:
    if _TRACE is None:
        return
    import time

    line = f"{time.monotonic():.4f} {time.process_time():.4f} {os.getpid()} {event}\n".encode()
    fd = os.open(_TRACE, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, line)
    finally:
        os.close(fd)


def pack(value: Any) -> bytes | None:
    # Empty stays NULL: most items have no labels or dependencies, and a listing then unpacks nothing.
    return marshal.dumps(tuple(value)) if value else None


def shard_rows(snapshot: Any, name: str, members: dict[str, Any], before: dict[str, str], summarise: Any,
               thread_entry: Any, previous: Callable[[str], Any] | None = None) -> Filled:
    """The rows of the folders of one shard (``members``: id → tree entry) whose tree id is not the
    one ``before`` holds; ``previous(id)``: the thread summary the cache holds for a re-read item."""
    rows: list[list[Any]] = []  # lists: the shortest form is set in place once the shard is read
    deps: dict[str, list[str]] = {}
    labels: dict[str, list[str]] = {}
    aliases: list[tuple[str, str]] = []
    dumps = marshal.dumps
    for item_id, folder in members.items():
        if before.get(item_id) == folder.oid:
            continue
        if "/" in item_id:  # a folder outside its id's shard (read_part): named, never read
            rows.append([item_id, None, None, None, None, None, None, folder.oid, name, None, 0, None, None,
                         None, None, None, None, None, None, misplaced(item_id), None, None, 0, None])
            continue
        row, problem = summarise(snapshot, item_id, folder.oid)
        prior = previous(item_id) if previous is not None and item_id in before else None
        try:
            thread = thread_entry(snapshot, item_id, folder.oid, prior)
            thread_problem = None
        except Corrupt as error:
            thread, thread_problem = None, error.message
        has_thread = 1 if thread is not None and (thread[-1] or thread[-2]) else 0
        # A folder with neither a thread nor cursors (most items) keeps no thread summary: reading it
        # again starts from none, which is all that summary would say (fields: threads_index.Entry).
        kept = thread is not None and (thread[1] is not None or thread[2] is not None)
        # ``waiting``: how many dependencies are not done (or missing, or unreadable); NULL until
        # counted once every shard is in, 0 at once for an item with none.
        if row is not None:
            listed, on, epoch = row[4], row[5], row[11]  # (tuples: packed as they are, the bytes pack() makes)
            head = [row[0], row[1], row[2], row[3], dumps(listed) if listed else None, dumps(on) if on else None,
                    row[6], row[13], name, None, None if on else 0, row[15], ",".join(listed) if listed else None]
            if not (row[7] is None and row[8] is None and row[9] is None and row[10] is None and epoch == 0
                    and type(epoch) is int and row[12] is None and not kept and thread_problem is None
                    and not has_thread and row[14] is None):  # (else a quiet row: QUIET_VALUES from QUIET on)
                head += [row[7], row[8], row[9], row[10], epoch, row[12], None, dumps(thread) if kept else None,
                         thread_problem, has_thread, row[14]]
            rows.append(head)
            if on:
                deps[item_id] = on  # (a tuple: JSON and marshal write it as the list it was)
            if listed:
                labels[item_id] = listed
            if row[16]:
                aliases.extend([(a, item_id) for a in row[16]])
        else:  # left out as unreadable: its id, folder and why
            rows.append([item_id, None, None, None, None, None, None, folder.oid, name, None, 0, None, None,
                         None, None, None, None, None, None, problem,
                         marshal.dumps(thread) if kept else None, thread_problem, has_thread, None])
    if not before:
        # A shard read whole: its ids' shortest forms are known now (ids of other shards differ in
        # their first two digits, fewer than are always shown), so none is left to fix.
        from .ids import shown_lengths

        sound = sorted(r[R_ID] for r in rows if len(r) == QUIET or r[R_PROBLEM] is None)
        shown = dict(zip(sound, shown_lengths(sound), strict=False))
        for r in rows:
            r[R_SHOWN] = shown.get(r[R_ID])
    return rows, deps, labels, aliases


def _set_waiting(db: sqlite3.Connection, counts: dict[str, int]) -> None:
    """``item.waiting`` of each id in ``counts`` set to its count: in id order, in one statement from
    one JSON text (~50,000 rows at the end of a 100,000-item rebuild: 0.16 against 0.41 s CPU for an
    UPDATE a row bound from Python in the order they came)."""
    if not counts:
        return
    ordered = {item_id: counts[item_id] for item_id in sorted(counts)}
    text = json.dumps(ordered, ensure_ascii=False, check_circular=False)
    if "\\u0000" in text:  # (SQLite's JSON ends a text at an escaped NUL: see _INSERT_PAIRS)
        db.executemany("UPDATE item SET waiting=? WHERE id=?", [(n, i) for i, n in ordered.items()])
    else:
        db.execute("UPDATE item SET waiting = j.value FROM json_each(?) j WHERE item.id = j.key", (text,))


# The item INSERT of a rebuild and an update (``{verb}``: an update replaces re-read rows; a rebuild
# inserts into empty tables: a folder outside its id's shard has its own key, cachefill._placed), and its twin for a row whose columns from ``QUIET`` on
# hold ``QUIET_VALUES``.
_INSERT_ITEM = f"{{verb}} INTO item ({', '.join(ITEM_COLUMNS)}) VALUES ({', '.join('?' * len(ITEM_COLUMNS))})"
_INSERT_QUIET = (f"{{verb}} INTO item ({', '.join(ITEM_COLUMNS)}) VALUES ({', '.join('?' * QUIET)}, "
                 f"{', '.join('NULL' if v is None else str(int(v)) for v in QUIET_VALUES)})")
# The dep and label rows of a shard in one statement each, from ``{item: [value, ...]}`` as one JSON text:
# binding two values a row from Python cost more than SQLite reading them out of the text (0.25 against
# 0.16 s for 200,000 rows). INSERT OR IGNORE: a value listed twice in one item is one row (the queries
# only ask whether one exists).
_INSERT_PAIRS = "INSERT OR IGNORE INTO {table} SELECT a.key, b.value FROM json_each(?) a, json_each(a.value) b"


def _insert(db: sqlite3.Connection, verb: str, rows: list[list[Any]], deps: dict[str, list[str]],
            labels: dict[str, list[str]], aliases: list[tuple[str, str]]) -> None:
    """Insert (``verb``: INSERT or INSERT OR REPLACE) one shard's item rows, and add its dep, label and
    alias rows."""
    quiet = [r for r in rows if len(r) == QUIET]  # (cachefill.shard_rows: QUIET_VALUES from QUIET on)
    if quiet:
        db.executemany(_INSERT_QUIET.format(verb=verb), quiet)
    if len(quiet) < len(rows):
        db.executemany(_INSERT_ITEM.format(verb=verb), rows if not quiet else [r for r in rows if len(r) != QUIET])
    for table, values in (("dep", deps), ("label", labels)):
        if not values:
            continue
        text = json.dumps(values, ensure_ascii=False, check_circular=False)
        if "\\u0000" in text:  # SQLite's JSON ends a string at an escaped NUL: bind such values one by one
            db.executemany(f"INSERT OR IGNORE INTO {table} VALUES (?, ?)",
                           [(item, value) for item, listed in values.items() for value in listed])
        else:
            db.execute(_INSERT_PAIRS.format(table=table), (text,))
    if aliases:
        db.executemany("INSERT OR IGNORE INTO alias (name, item) VALUES (?, ?)", aliases)


def read_part(snapshot: Any, part: list[tuple[str, Any]], before: dict[str, dict[str, str]]) -> tuple[
        dict[str, dict[str, Any]], Any]:
    """The member folders of each shard in ``part`` (``(name, tree entry)``), and a view of the
    snapshot that answers the changed folders and their item and lease files: read in bulk when
    they are many and packed (inside :func:`bulk_reads`, through its one git; else one ``git
    cat-file`` each), else the snapshot itself (its store reads loose objects directly)."""
    trace(f"part-trees {part[0][0]}")
    members = {name: _placed(name, snapshot.store.read_tree(entry.oid)) for name, entry in part}
    folders = [folder.oid for name, _e in part for item_id, folder in members[name].items()
               if before.get(name, {}).get(item_id) != folder.oid]
    bulk = len(folders) >= BULK_FOLDERS and not _loose(snapshot.store, folders)
    return members, (_Prefetched(snapshot, folders) if bulk else snapshot)


def _placed(name: str, folders: dict[str, Any]) -> dict[str, Any]:
    """A shard's folders by the key of their cache row: the id, or ``shard/id`` for a folder that is
    not in its id's shard (``items/zz/w-0d..``: only a forged tree has one).

    The engine reads an item at ``layout.item_dir(id)`` alone, so such a folder is not that item; its
    own key keeps its problem row from colliding with the item's row when the id is also in its
    own shard (both folders' rows were one ``item.id``: the rebuild died of an IntegrityError)."""
    from itertools import repeat

    from .ids import PREFIX, shard

    # (startswith mapped in C: 4 against 13 ms CPU for 100,000 folders; the same test for a 2-letter name)
    if len(name) == 2 and all(map(str.startswith, folders, repeat(PREFIX + name))):
        return folders
    return {item_id if shard(item_id) == name else f"{name}/{item_id}": folder for item_id, folder in folders.items()}


def misplaced(key: str) -> str:
    """The problem of the folder whose cache row has the key ``shard/id`` (see :func:`_placed`)."""
    from .model import shard_problem

    name, item_id = key.split("/", 1)
    return shard_problem(name, item_id) or key


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
    from one ``git cat-file --batch`` each; anything else from the snapshot's own store."""

    def __init__(self, snapshot: Any, folders: list[str]) -> None:
        from .objects import parse_tree

        self._snapshot = snapshot
        self._real = snapshot.store
        hexlen = 64 if self._real.repo.algorithm == "sha256" else 40
        trace("batch-trees")
        self._trees = {oid: parse_tree(data, hexlen) for oid, (kind, data) in
                       _read_batch(self._real.repo.git_dir, folders).items() if kind == "tree"}
        files = [e.oid for tree in self._trees.values() for n, e in tree.items()
                 if n in (layout.ITEM_FILE, layout.LEASE_FILE)]
        trace("batch-blobs")
        self._blobs = {oid: data for oid, (kind, data) in _read_batch(self._real.repo.git_dir, files).items()
                       if kind == "blob"}
        trace("batch-end")

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


# Seconds :meth:`Batch.read` waits after a short read while answers are due. git writes its buffered
# answers 4 KiB at a time; read as they come, a chunk of 1,500 item files woke this process ~100
# times (0.6 s of CPU more than reading one output whole, at 100,000 items): after this pause a read
# takes a few hundred KiB (meanwhile git has the core). 0: read as they come.
_PAUSE = 0.0005


class Batch:
    """``gitcmd.read_batch`` for many calls through one long-lived ``git cat-file --batch-command
    --buffer`` (``gitcmd.start_batch``): each call writes its names, then ``flush``, and reads the
    answers from a pipe as git writes them, cut by gitcmd's one parser (``cut_answers``). A rebuild
    reads 128 batches: a git each cost ~3 ms to start (in git and here) and lost git's cache of delta
    bases every time. A git that fails or dies part way raises ``GitFailed`` (never a torn object) and
    is started again by the next call."""

    def __init__(self, git_dir: str) -> None:
        self._git_dir = git_dir
        self._proc: subprocess.Popen[bytes] | None = None
        self._err: int | None = None
        self.answered = False  # a call was answered (by this git or an earlier one)
        self.failed = False  # a call failed (_read_batch stops asking one that never answered)

    def _start(self) -> subprocess.Popen[bytes]:
        import fcntl

        from .gitcmd import _memory_file, start_batch

        if self._proc is not None and self._proc.poll() is None:
            return self._proc
        self.close()
        self._err = _memory_file()
        proc = start_batch(self._git_dir, self._err)
        assert proc.stdin is not None and proc.stdout is not None
        for stream in (proc.stdin, proc.stdout):
            try:  # a chunk's answers (~1 MB) in few reads, its names written without waiting
                fcntl.fcntl(stream.fileno(), 1031, 1 << 20)  # F_SETPIPE_SZ
            except OSError:
                pass  # (a smaller pipe: more reads, the same answers)
        os.set_blocking(proc.stdin.fileno(), False)
        self._proc = proc
        return proc

    def read(self, names: list[str]) -> dict[str, tuple[str, str, bytes]]:
        """``{name: (oid, type, content)}`` of the ``names`` that exist, as ``gitcmd.read_batch``."""
        import select

        from .errors import GitFailed
        from .gitcmd import _died, _write_all, cut_answers

        names = [name for name in names if "\n" not in name]
        if not names:
            return {}
        proc = self._start()
        assert proc.stdin is not None and proc.stdout is not None
        infd, outfd = proc.stdin.fileno(), proc.stdout.fileno()
        request = memoryview("".join([f"contents {name}\n" for name in names]).encode() + b"flush\n")
        poller = select.poll()
        poller.register(outfd, select.POLLIN)
        poller.register(infd, select.POLLOUT)
        buf = bytearray()
        spans: list[tuple[str, str, str, int, int]] = []
        at = count = 0
        try:
            while count < len(names):
                for fd, _event in poller.poll():
                    if fd == infd:
                        try:
                            request = request[os.write(infd, request):]
                        except BlockingIOError:
                            continue
                        except BrokenPipeError:
                            request = request[:0]  # git is gone: its output ends, and says why
                        if not request:
                            poller.unregister(infd)
                        continue
                    data = os.read(outfd, 1 << 20)
                    if not data:
                        raise _died(names[count], self._said())
                    buf += data
                    at, count = cut_answers(buf, names, at, count, spans)
                    if count < len(names) and len(data) < 1 << 18 and _PAUSE:
                        import time

                        time.sleep(_PAUSE)  # git writes 4 KiB at a time: let a few hundred KiB gather
            if at != len(buf):
                raise GitFailed("git cat-file --batch-command answered more than was asked")
            if request:  # (the last answers came out with a full buffer, before git read ``flush``)
                os.set_blocking(infd, True)
                _write_all(infd, request.tobytes())
                os.set_blocking(infd, False)
        except BaseException:
            self.close()  # out of step with git now: the next call starts another
            raise
        self.answered = True
        out = bytes(buf)
        return {name: (oid, kind, out[start:end]) for name, oid, kind, start, end in spans}

    def _said(self) -> bytes:
        from .gitcmd import _read_all

        if self._proc is not None:
            self._proc.kill()
            self._proc.wait()
        return _read_all(self._err) if self._err is not None else b""

    def close(self) -> None:
        proc, self._proc = self._proc, None
        if proc is not None:
            from .gitcmd import close_pipes

            close_pipes(proc)
            if proc.poll() is None:
                try:
                    proc.wait(5)
                except Exception:  # (subprocess.TimeoutExpired: subprocess not imported here)
                    proc.kill()
                    proc.wait()
        if self._err is not None:
            os.close(self._err)
            self._err = None


# The git each thread's rebuild reads its bulk chunks through, by git dir (see bulk_reads).
_BATCHES: dict[tuple[int, str], Batch] = {}


class bulk_reads:  # noqa: N801  (a context manager, named as one; contextlib is not on the fast path)
    """``with bulk_reads(git_dir):`` meanwhile, this thread's bulk reads of ``git_dir`` (:func:`read_part`)
    go through one long-lived ``git cat-file --batch-command`` (:class:`Batch`), not one git for each
    chunk's folders and one for its files: a rebuild reads 128 such batches, and starting a git for
    each cost ~0.5 s of CPU at 100,000 packed items (its start, and its cache of delta bases lost
    every time). Its git starts at the first bulk read (none when every object is loose)."""

    def __init__(self, git_dir: str) -> None:
        import threading

        self._key = (threading.get_ident(), git_dir)
        self._batch = Batch(git_dir)

    def __enter__(self) -> None:
        _BATCHES[self._key] = self._batch

    def __exit__(self, *_exc: object) -> None:
        del _BATCHES[self._key]
        self._batch.close()


def _read_batch(git_dir: str, oids: list[str]) -> dict[str, tuple[str, bytes]]:
    """``{oid: (type, content)}`` of ``oids`` (a chunk's folders or files: a few MB) through the git
    of :func:`bulk_reads`, or one ``git cat-file --batch``. A missing object is left out: the store's
    own read then names it."""
    import threading

    from .errors import GitFailed
    from .gitcmd import read_batch

    batch = _BATCHES.get((threading.get_ident(), git_dir)) if _BATCHES else None
    if batch is not None and (batch.answered or not batch.failed):
        try:
            return {oid: (kind, data) for oid, (_, kind, data) in batch.read(oids).items()}
        except GitFailed:
            batch.failed = True  # (a git without --batch-command never answers: not tried again)
    try:
        return {oid: (kind, data) for oid, (_, kind, data) in read_batch(git_dir, oids).items()}
    except GitFailed:
        return {}  # git went away: the store reads each object itself


# --- the helper process ---------------------------------------------------------------------------

def _named(function: Any) -> tuple[str, str] | None:
    """``(module, name)`` by which another process imports ``function``, if it is a gitwork module's own."""
    module, name = getattr(function, "__module__", ""), getattr(function, "__qualname__", "")
    if not module.startswith("gitwork.") or not name.isidentifier():
        return None
    return (module, name) if getattr(sys.modules.get(module), name, None) is function else None


class Helper:
    """The helper process, seen from the process that writes the cache: it takes ``chunks`` (each
    ``(index, [(shard name, shard tree id), ...])``) in the order given, announcing each index before
    it starts that chunk."""

    def __init__(self, proc: subprocess.Popen[bytes]) -> None:
        import queue
        import threading

        self._proc = proc
        self.started: set[int] = set()  # chunks the helper announced (it is doing or did them)
        self._times: list[float] = []  # when it announced each (this process's monotonic clock)
        self._frames: queue.SimpleQueue[Any] = queue.SimpleQueue()
        # A thread reads its frames as they come: the helper never waits on a full pipe while this
        # process is busy inserting, and announcements are seen between two chunks here.
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    @classmethod
    def start(cls, snapshot: Any, chunks: list[tuple[int, list[tuple[str, str]]]], summarise: Any,
              thread_entry: Any) -> Helper | None:
        import subprocess

        functions = (_named(summarise), _named(thread_entry))
        if None in functions or snapshot.commit is None:
            return None
        repo = snapshot.store.repo
        job = marshal.dumps((repo.git_dir, repo.common_dir, repo.objects_dir, repo.algorithm, dict(repo.core),
                             snapshot.commit, functions, chunks))
        # This very gitwork, wherever it was imported from: its folder goes first on the helper's path
        # unless already there (an installed gitwork's site-packages must not come before the stdlib).
        here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
        code = (f"import sys\nif {here!r} not in sys.path: sys.path.insert(0, {here!r})\n"
                "from gitwork.cachefill import main\nmain()\n")
        trace("helper-spawn")
        try:
            proc = subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                    stderr=subprocess.DEVNULL)
        except OSError:
            return None
        assert proc.stdin is not None
        try:
            proc.stdin.write(len(job).to_bytes(8, "big") + job)
            proc.stdin.flush()
        except OSError:
            proc.kill()
            proc.wait()
            return None
        return cls(proc)

    def left(self, index: int) -> int:
        """How many chunks from ``index`` (this process's next) on the helper has not yet started."""
        return min(self.started, default=1 << 30) - index

    def pace(self) -> float:
        """The helper's seconds per chunk so far (infinite until it has started two)."""
        times = self._times
        return (times[-1] - times[0]) / (len(times) - 1) if len(times) > 1 else float("inf")

    def _read(self) -> None:
        import time

        out = self._proc.stdout
        assert out is not None
        try:
            while True:
                head = out.read(4)
                if len(head) < 4:
                    break
                body = out.read(int.from_bytes(head, "big"))
                frame = marshal.loads(body)
                trace(f"frame-in {frame[0]} {frame[1]}")
                if frame[0] == "chunk":
                    self._times.append(time.monotonic())
                    self.started.add(frame[1])
                else:
                    self._frames.put(frame)
        except (OSError, ValueError, EOFError, TypeError):
            pass  # a torn frame: whatever was not delivered is computed by the caller
        finally:
            self._frames.put(None)

    def ready(self) -> list[tuple[Any, ...]]:
        """The shards delivered since the last call (without waiting)."""
        import queue

        out: list[tuple[Any, ...]] = []
        while True:
            try:
                frame = self._frames.get_nowait()
            except queue.Empty:
                return out
            if frame is None:
                self._frames.put(None)  # stays the last word for finish()
                return out
            out.append(frame)

    def stop_below(self, index: int) -> None:
        """Tell the helper to start no chunk below ``index`` (this process has done those)."""
        assert self._proc.stdin is not None
        try:
            self._proc.stdin.write(index.to_bytes(8, "big"))
            self._proc.stdin.flush()
        except OSError:
            pass  # (it has ended: finish() collects what it delivered)

    def finish(self) -> list[tuple[Any, ...]]:
        """Tell the helper to stop after its current chunk and return every shard not yet taken."""
        assert self._proc.stdin is not None
        try:
            self._proc.stdin.close()
        except OSError:
            pass
        out: list[tuple[Any, ...]] = []
        while (frame := self._frames.get()) is not None:
            out.append(frame)
        self._reader.join()
        self._proc.wait()
        return out


def _stopped(index: int, floor: list[int]) -> bool:
    """Whether to stop before chunk ``index``: stdin ended (the writer said stop), or the lowest chunk
    the writer left to this process (``floor``, read from stdin once sent) is above it."""
    import select

    if select.select([0], [], [], 0)[0]:  # stdin readable: its end, or a floor
        said = os.read(0, 8)
        if len(said) < 8:
            return True
        floor[0] = int.from_bytes(said, "big")
    return index < floor[0]


def main() -> None:
    """The helper process (``python -m gitwork.cachefill``): see the module's docstring."""
    import gc
    import importlib

    trace("helper-main")
    from .config import Settings

    gc.disable()  # as the rebuilding process does while it fills (cache.update): the rows hold no cycles
    from .store import Repository, Store

    # (Read from the descriptor exactly: a buffered read could take in a floor sent right after the job,
    # which _stopped then would not see.)
    size = int.from_bytes(_exactly(8), "big")
    git_dir, common_dir, objects_dir, algorithm, core, commit, functions, chunks = marshal.loads(_exactly(size))
    summarise, thread_entry = (getattr(importlib.import_module(m), n) for m, n in functions)
    repo = Repository(git_dir, common_dir, None, False, algorithm, {}, Settings(), objects_dir=objects_dir,
                      core=core)
    store = Store(repo)
    out = os.fdopen(1, "wb", closefd=False)
    try:
        snapshot = store.snapshot(commit)
        with bulk_reads(repo.git_dir):
            _help(out, store, snapshot, chunks, summarise, thread_entry)
    finally:
        out.flush()
        store.close()
        trace("helper-end")


def _exactly(size: int) -> bytes:
    """``size`` bytes from stdin's descriptor (fewer only at its end)."""
    out = b""
    while len(out) < size:
        got = os.read(0, size - len(out))
        if not got:
            break
        out += got
    return out


def _help(out: Any, store: Any, snapshot: Any, chunks: list[tuple[int, list[tuple[str, str]]]], summarise: Any,
          thread_entry: Any) -> None:
    """The helper's chunks, in their order, until stdin ends (the writer's stop)."""
    floor = [0]
    for index, part in chunks:
        if _stopped(index, floor):
            break
        trace(f"helper-chunk {index}")
        _frame(out, ("chunk", index))
        shards = [(name, _Entry(oid)) for name, oid in part]
        members, view = read_part(snapshot, shards, {})
        for name, entry in shards:
            filled = shard_rows(view, name, members[name], {}, summarise, thread_entry)
            _frame(out, ("shard", name, entry.oid, *filled))
        out.flush()
        trace(f"helper-chunk-end {index}")
        del view
        store.forget()


class _Entry:
    __slots__ = ("oid",)

    def __init__(self, oid: str) -> None:
        self.oid = oid


def _frame(out: Any, frame: tuple[Any, ...]) -> None:
    body = marshal.dumps(frame)
    out.write(len(body).to_bytes(4, "big") + body)


if __name__ == "__main__":
    main()
