"""A cold rebuild of the read cache shared with a helper process (``gitwork/cachefill.py``).

- the rebuild with the helper (it takes chunks of shards from the far end, this process from the
  near end and writes both) fills every table exactly as the rebuild alone does;
- whatever the helper does not deliver (it cannot start, or dies mid-frame) this process computes:
  the tables are the same again;
- a kill -9 of the rebuilding process, helper running, leaves no half cache: the next read answers
  exactly what the tree says.
"""

from __future__ import annotations

import marshal
import os
import random
import signal
import sqlite3
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from conftest import Clock, git
from gitwork import cache, cachefill
from gitwork.index import load_index, rebuild
from gitwork.workplane import Workplane

TABLES = (("item", "id"), ("dep", "item, on_id"), ("label", "item, label"), ("alias", "name, item"),
          ("shard", "name"), ("meta", "key"))


def tables(repo: Path) -> dict[str, list[tuple[object, ...]]]:
    """Every row of the cache's tables, packed values unpacked (their bytes depend on how the
    process that packed them shared its strings, not on what they say)."""
    db = sqlite3.connect(repo / ".git" / "gitwork" / cache.NAME)
    try:
        return {t: [tuple(marshal.loads(v) if isinstance(v, bytes) else v for v in r)
                    for r in db.execute(f"SELECT * FROM {t} ORDER BY {key}")] for t, key in TABLES}
    finally:
        db.close()


def _state(repo: Path, count: int = 60) -> None:
    """Items over many shards: done ones, dependencies on items of other shards (done or not),
    labels, a lease, a thread with a message."""
    pick = random.Random(7)
    with Workplane(str(repo), now=Clock(), agent="alice") as wp:
        wp.do("init")
        made: list[str] = []
        for n in range(count):
            deps = sorted({pick.choice(made) for _ in range(2)}) if made and n % 3 else []
            made.append(wp.do("new", title=f"item {n} ünï", priority=n % 4, depends_on=deps or None,
                              labels=[f"l{n % 5}", "all"] if n % 2 else None).result["item"])
        for item in made[::4]:
            wp.do("done", item=item, force=True)
        wp.do("claim", item=made[1], ttl=600)
        wp.do("msg", item=made[1], text="hello", to="bob", epoch=1)


def _rebuilt(repo: Path) -> dict[str, list[tuple[object, ...]]]:
    with Workplane(str(repo), agent="alice") as wp:
        snapshot = wp.context().snapshot
        cache.drop(cache.path_for(snapshot))
        rebuild(snapshot)
    cache._forget(str(repo / ".git" / "gitwork" / cache.NAME))
    return tables(repo)


@pytest.fixture
def shared(monkeypatch: pytest.MonkeyPatch) -> dict[str, list[object]]:
    """Every rebuild shares its work with the helper, one shard a chunk; the helper is caught as it
    starts and this process's first read waits until it has announced a chunk (or ended), so both
    processes take part. Returns the helper(s) and the frames each delivered."""
    seen: dict[str, list[object]] = {"helpers": [], "frames": []}
    monkeypatch.setattr(cachefill, "HELPER_FOLDERS", 1)
    monkeypatch.setattr(cachefill, "HELPER_CHUNKS", 10_000)
    real_start, real_ready, real_finish = cachefill.Helper.start, cachefill.Helper.ready, cachefill.Helper.finish

    def start(*args: object) -> cachefill.Helper | None:
        helper = real_start(*args)  # type: ignore[arg-type]
        seen["helpers"].append(helper)
        return helper

    def ready(self: cachefill.Helper) -> list[tuple[object, ...]]:
        got = real_ready(self)
        seen["frames"].extend(got)
        return got

    def finish(self: cachefill.Helper) -> list[tuple[object, ...]]:
        got = real_finish(self)
        seen["frames"].extend(got)
        return got

    real_part = cache.read_part
    waited = threading.Event()

    def read_part(*args: object) -> object:
        helper = seen["helpers"][-1] if seen["helpers"] else None
        if helper is not None and not waited.is_set():
            waited.set()
            reader = helper._reader  # type: ignore[attr-defined]
            while not helper.started and reader.is_alive():
                reader.join(0.01)
        return real_part(*args)  # type: ignore[arg-type]

    monkeypatch.setattr(cachefill.Helper, "start", classmethod(lambda cls, *a: start(*a)))
    monkeypatch.setattr(cachefill.Helper, "ready", ready)
    monkeypatch.setattr(cachefill.Helper, "finish", finish)
    monkeypatch.setattr(cache, "read_part", read_part)
    return seen


def test_a_rebuild_shared_with_the_helper_fills_the_tables_as_one_process_alone(
        repo: Path, shared: dict[str, list[object]], monkeypatch: pytest.MonkeyPatch) -> None:
    _state(repo)
    with_helper = _rebuilt(repo)
    assert shared["helpers"] and shared["helpers"][0] is not None
    assert shared["frames"], "the helper delivered no shard"
    monkeypatch.setattr(cachefill, "HELPER_FOLDERS", 10**9)
    alone = _rebuilt(repo)
    assert with_helper == alone
    assert len(alone["item"]) == 60 and len(alone["shard"]) > 20 and alone["dep"]
    assert {r[20] for r in alone["item"]} > {0}  # some items wait on a dependency: the counts were compared


def test_packed_objects_read_in_bulk_with_the_helper_give_the_same_tables(
        repo: Path, shared: dict[str, list[object]], monkeypatch: pytest.MonkeyPatch) -> None:
    _state(repo)
    git(repo, "gc", "-q")
    monkeypatch.setattr(cachefill, "BULK_FOLDERS", 1)  # (this process's chunks through one cat-file --batch)
    with_helper = _rebuilt(repo)
    assert shared["frames"]
    monkeypatch.setattr(cachefill, "HELPER_FOLDERS", 10**9)
    assert with_helper == _rebuilt(repo)


def _indexes(repo: Path) -> list[tuple[str, str]]:
    db = sqlite3.connect(repo / ".git" / "gitwork" / cache.NAME)
    try:
        return db.execute("SELECT name, sql FROM sqlite_master WHERE type = 'index' ORDER BY name").fetchall()
    finally:
        db.close()


def test_the_tail_done_while_the_helper_works_gives_the_same_tables(
        repo: Path, shared: dict[str, list[object]], monkeypatch: pytest.MonkeyPatch) -> None:
    """When the helper's chunks left take about as long as the serial tail, this process counts the
    rows whose dependencies are all in and builds the indexes before the helper is done; the rows that
    come after go into the built indexes and are counted at the end. Forced here as soon as one shard
    is in: the tables and indexes are the rebuild's alone."""
    _state(repo)
    monkeypatch.setattr(cachefill, "HELPER_FOLDERS", 10**9)
    alone, alone_indexes = _rebuilt(repo), _indexes(repo)
    monkeypatch.setattr(cachefill, "HELPER_FOLDERS", 1)
    monkeypatch.setattr(cache, "_early", lambda helper, index, rows, chunks: rows > 0)
    real_ready = cachefill.Helper.ready  # (the fixture's)

    def ready(self: cachefill.Helper) -> list[tuple[object, ...]]:
        # The first call waits for the helper's first shard: the tail is then done at this process's
        # first chunk, before it or the helper can have reached the other's chunks.
        got = real_ready(self)
        while not got and self._reader.is_alive():  # type: ignore[attr-defined]
            self._reader.join(0.001)  # type: ignore[attr-defined]
            got = real_ready(self)
        monkeypatch.setattr(cachefill.Helper, "ready", real_ready)
        return got

    monkeypatch.setattr(cachefill.Helper, "ready", ready)
    events: list[str] = []
    real_build, real_insert, real_finish = cache._build, cache._insert, cachefill.Helper.finish

    def build(db: sqlite3.Connection, indexes: list[str]) -> None:
        events.append(f"build {len(indexes)}")
        real_build(db, indexes)

    def insert(*args: object) -> None:
        events.append("insert")
        real_insert(*args)  # type: ignore[arg-type]

    def finish(self: cachefill.Helper) -> list[tuple[object, ...]]:
        events.append("finish")
        return real_finish(self)

    monkeypatch.setattr(cache, "_build", build)
    monkeypatch.setattr(cache, "_insert", insert)
    monkeypatch.setattr(cachefill.Helper, "finish", finish)
    assert _rebuilt(repo) == alone
    assert _indexes(repo) == alone_indexes and len(alone_indexes) >= 5
    assert events.index("build 5") < events.index("finish"), events  # built while the helper worked
    assert "insert" in events[events.index("build 5"):], events  # rows written into the built indexes
    assert [e for e in events if e.startswith("build")] == ["build 5"]  # (none left for the end)
    assert shared["frames"]


def test_the_helper_starts_no_chunk_below_the_one_it_is_told(repo: Path) -> None:
    """``Helper.stop_below(k)``: the helper (taking chunks from the last down) delivers every shard of
    the chunks from k up and starts none below, then ends by itself (the writer did those: going on
    into them would be work done twice while the writer builds the indexes)."""
    _state(repo)
    with Workplane(str(repo), agent="alice") as wp:
        snapshot = wp.context().snapshot
        from gitwork import layout
        from gitwork.rows import item_summary, thread_entry

        shards = [(name, entry.oid) for name, entry in snapshot.tree(layout.ITEMS).items()]
        chunks = [(i, [shard]) for i, shard in enumerate(shards)]
        helper = cachefill.Helper.start(snapshot, chunks[::-1], item_summary, thread_entry)
        assert helper is not None
        floor = len(chunks) // 2
        helper.stop_below(floor)
        helper._reader.join(60)  # it ends by itself: nothing is left to it above the floor
        assert not helper._reader.is_alive()
        delivered = sorted(frame[1] for frame in helper.finish())
    assert helper.started == set(range(floor, len(chunks)))
    assert delivered == sorted(name for name, _oid in shards[floor:])


@pytest.mark.parametrize("helper", ["exit 3", "{python} \"$@\" | head -c 1500"])
def test_what_the_helper_does_not_deliver_is_computed_here(
        repo: Path, tmp_path: Path, shared: dict[str, list[object]], monkeypatch: pytest.MonkeyPatch,
        helper: str) -> None:
    """A helper that dies at once, or part way through a frame (its output cut after 1,500 bytes):
    the rebuild is the same as without one."""
    _state(repo)
    monkeypatch.setattr(cachefill, "HELPER_FOLDERS", 10**9)
    alone = _rebuilt(repo)
    script = tmp_path / "python"
    script.write_text("#!/bin/sh\n" + helper.format(python=sys.executable) + "\n")
    script.chmod(0o755)
    monkeypatch.setattr(cachefill, "HELPER_FOLDERS", 1)
    monkeypatch.setattr(sys, "executable", str(script))
    assert _rebuilt(repo) == alone
    assert shared["helpers"]


def test_a_kill_9_mid_rebuild_leaves_no_half_cache(repo: Path) -> None:
    """``gw cache rebuild``'s work (drop, then rebuild, helper running) killed after its first shard
    is written: the transaction never commits, so the file holds no item and no commit, and the next
    read rebuilds it and answers what the tree says."""
    _state(repo)
    with Workplane(str(repo), agent="alice") as wp:
        expected = (load_index(wp.context().snapshot, use_cache=False).items(), [r[0] for r in wp.ready()])
        wp.rows()
    before = tables(repo)
    code = ("import sys\nfrom gitwork import cachefill, cache\nfrom gitwork.index import rebuild\n"
            "from gitwork.workplane import Workplane\n"
            "cachefill.HELPER_FOLDERS, cachefill.HELPER_CHUNKS = 1, 10000\n"
            "with Workplane(sys.argv[1], agent='alice') as wp:\n"
            "    snapshot = wp.context().snapshot\n"
            "    cache.drop(cache.path_for(snapshot))\n"
            "    rebuild(snapshot)\n")
    env = dict(os.environ, GW_CRASH_AT="cache-fill")
    done = subprocess.run([sys.executable, "-c", code, str(repo)], env=env, capture_output=True)
    assert done.returncode == -signal.SIGKILL, done.stderr
    status = cache.status(str(repo / ".git" / "gitwork" / cache.NAME))
    assert status["ok"] and status["commit"] is None and status["items"] == 0
    with Workplane(str(repo), agent="alice") as wp:
        assert (wp.rows()[1], [r[0] for r in wp.ready()]) == expected
    assert tables(repo) == before


def test_a_rebuild_writes_through_a_rollback_journal_and_a_reader_meanwhile_waits_for_it(
        repo: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """An empty cache is filled in rollback mode (each page written once, not to the WAL and again at
    its checkpoint): a reader that opens the file meanwhile (its switch to WAL refused) waits for the
    rebuild and answers from it, not from a rebuild of its own in memory; after the commit the file
    is in WAL mode again, with no journal left."""
    _state(repo)
    path = repo / ".git" / "gitwork" / cache.NAME
    with Workplane(str(repo), agent="alice") as wp:
        expected = load_index(wp.context().snapshot, use_cache=False).items()
    filling, go = threading.Event(), threading.Event()
    real_insert, real_open = cache._insert, cache._open
    opened: list[str] = []

    def insert(*args: object) -> None:
        real_insert(*args)  # type: ignore[arg-type]
        if not filling.is_set():
            filling.set()
            assert go.wait(60)

    def open_(where: str) -> sqlite3.Connection:
        opened.append(where)
        return real_open(where)

    monkeypatch.setattr(cache, "_insert", insert)
    monkeypatch.setattr(cache, "_open", open_)
    answers: dict[str, object] = {}

    def rebuilding() -> None:
        with Workplane(str(repo), agent="alice") as mine:
            snapshot = mine.context().snapshot
            cache.drop(cache.path_for(snapshot))
            answers["rebuild"] = rebuild(snapshot)

    def reading() -> None:
        with Workplane(str(repo), agent="bob") as mine:
            answers["read"] = load_index(mine.context().snapshot).items()

    writer = threading.Thread(target=rebuilding)
    writer.start()
    assert filling.wait(60)
    assert (repo / ".git" / "gitwork" / (cache.NAME + "-journal")).exists()  # (no WAL for this fill)
    reader = threading.Thread(target=reading)
    reader.start()
    reader.join(0.5)  # (it waits for the rebuild's lock)
    go.set()
    writer.join(60)
    reader.join(60)
    assert answers["read"] == expected and answers["rebuild"][1] == len(expected)  # type: ignore[index]
    assert ":memory:" not in opened
    db = sqlite3.connect(path)
    try:
        assert db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    finally:
        db.close()
    assert not (repo / ".git" / "gitwork" / (cache.NAME + "-journal")).exists()
    assert tables(repo) == _rebuilt(repo)


# Hostile item files beside sound ones: (folder id, file name, content). Every label below is a
# string YAML can carry: quotes, backslashes, every control character, a NUL (SQLite's JSON would end
# the string there: such a shard's values are bound one by one), a comma, non-ASCII, 100 kB.
_WHEN = "2026-12-02T10:00:00Z"
_LABELS = ["q\"uote", "back\\slash", "tab\tnl\n", "".join(map(chr, range(1, 32))) + "\x7f", "é🚀日本", "a,b",
           " sp ", "y" * 100_000]


def _doc(item_id: str, **fields: object) -> dict[str, object]:
    return {"id": item_id, "title": "t", "status": "open", "priority": 1, "created_at": _WHEN,
            "updated_at": _WHEN, "provenance": {"by": "x", "at": _WHEN}, **fields}


def _hostile(repo: Path) -> None:
    from gitwork import codec, layout
    from gitwork.store import Repository, Store, identity_signature

    def lease(item_id: str, epoch: str) -> bytes:
        return (f"item: {item_id}\nholder: eve\nepoch: {epoch}\nfence: 3\nstate: active\ngranted_at: {_WHEN}\n"
                f"expires_at: {_WHEN}\nttl: 60\n").encode()

    files = {
        ("w-00000000000000a1", "item.yaml"): b"id: [unclosed\n  :: bad",
        ("w-00000000000000a2", "item.yaml"): b"\xff\xfe not utf-8 \x80",
        ("w-00000000000000a3", "item.yaml"): codec.dump_yaml(_doc("w-00000000000000a3", title="x" * 1_000_000,
                                                                   labels=_LABELS)),
        ("w-00000000000000a4", "item.yaml"): codec.dump_yaml(_doc("w-00000000000000a4", labels=["a\x00b", "c"],
                                                                   depends_on=["w-00000000000000a3", "x\x00y"])),
        ("w-00000000000000a5", "item.yaml"): codec.dump_yaml(_doc("w-00000000000000a5", labels="not a list")),
        ("w-00000000000000a6", "item.yaml"): codec.dump_yaml(_doc("w-00000000000000a9")),  # another id
        ("w-00000000000000a7", "notes.txt"): b"no item.yaml here\n",
        ("w-00000000000000a8", "item.yaml"): codec.dump_yaml(_doc("w-00000000000000a8", owner="bob", labels=["x"],
                                                                   depends_on=["w-00000000000000a3"] * 2)),
        ("w-00000000000000b1", "item.yaml"): codec.dump_yaml(_doc("w-00000000000000b1", priority=True)),
        ("w-00000000000000b2", "item.yaml"): codec.dump_yaml(_doc("w-00000000000000b2")),
        ("w-00000000000000b2", "lease.yaml"): lease("w-00000000000000b2", "0"),  # epoch 0 beside a holder
        ("w-00000000000000b3", "item.yaml"): codec.dump_yaml(_doc("w-00000000000000b3")),
        ("w-00000000000000b3", "lease.yaml"): lease("w-00000000000000b3", "0.0"),
        ("w-00000000000000b4", "item.yaml"): codec.dump_yaml(_doc("w-00000000000000b4")),
        ("w-00000000000000b4", "lease.yaml"): lease("w-00000000000000b4", "true"),
    }
    store = Store(Repository.discover(str(repo)))
    try:
        base = store.snapshot()
        commit = store.write_commit(base, {layout.item_path(i, name): data for (i, name), data in files.items()},
                                    "hostile\n", identity_signature("x"), 1_700_000_000)
        assert store.set_if_equals(base.commit, commit)
    finally:
        store.close()


def _from_files(repo: Path) -> dict[str, object]:
    """What the item, dep and label tables must hold, read from each folder's own files by the
    engine's readers (model.load_item/load_lease), each value typed as SQLite stores it bound alone."""
    from gitwork import layout, model
    from gitwork.errors import Corrupt

    typed = sqlite3.connect(":memory:")
    items, deps, labels = [], set(), set()
    with Workplane(str(repo), agent="alice") as wp:
        snapshot = wp.context().snapshot
        for shard in snapshot.tree(layout.ITEMS).values():
            for item_id, folder in snapshot.store.read_tree(shard.oid).items():
                files = snapshot.store.read_tree(folder.oid)
                try:
                    if layout.ITEM_FILE not in files:
                        raise Corrupt("no item.yaml")
                    item = model.load_item(snapshot.store.read_blob(files[layout.ITEM_FILE].oid), item_id)
                    lease = (model.load_lease(snapshot.store.read_blob(files[layout.LEASE_FILE].oid), item_id)
                             if layout.LEASE_FILE in files else None)
                except Corrupt:
                    items.append((item_id, True) + (None,) * 8)
                    continue
                values = (item.title, item.status, item.priority, item.owner, lease and lease.holder,
                          lease and lease.state, lease.epoch if lease else 0, lease and lease.fence)
                items.append((item_id, False, *typed.execute(f"SELECT {', '.join('?' * 8)}", values).fetchone()))
                deps.update((item_id, d) for d in item.depends_on)
                labels.update((item_id, x) for x in item.labels)
    typed.close()
    return {"item": sorted(items), "dep": sorted(deps), "label": sorted(labels)}


def _cached(repo: Path) -> dict[str, object]:
    db = sqlite3.connect(repo / ".git" / "gitwork" / cache.NAME)
    try:
        return {"item": db.execute("SELECT id, problem IS NOT NULL, title, status, priority, owner, holder, lease_state,"
                                   " epoch, fence FROM item ORDER BY id").fetchall(),
                "dep": db.execute("SELECT item, on_id FROM dep ORDER BY item, on_id").fetchall(),
                "label": db.execute("SELECT item, label FROM label ORDER BY item, label").fetchall()}
    finally:
        db.close()


def test_a_hostile_tree_is_cached_value_for_value_as_its_files_say(
        repo: Path, shared: dict[str, list[object]], monkeypatch: pytest.MonkeyPatch) -> None:
    """Sound items beside hostile folders (bad YAML, not UTF-8, a 1 MB title, labels with every
    control character and a NUL, a value of the wrong type, another item's id, no item.yaml, leases
    whose epoch is 0, 0.0 or true): a rebuild, alone or shared with the helper, holds for every
    folder exactly what the engine's own readers make of its files (or marks it unreadable), and
    an update from an older cache holds the same."""
    _state(repo, count=20)
    with Workplane(str(repo), agent="alice") as wp:
        wp.rows()  # a cache at the sound state, brought forward below by an update
    _hostile(repo)
    expected = _from_files(repo)
    assert len(expected["item"]) == 32 and {r[0][-2:]: r[1] for r in expected["item"] if r[0].startswith("w-00000000")} == {
        "a1": True, "a2": True, "a3": False, "a4": False, "a5": True, "a6": True, "a7": True, "a8": False,
        "b1": True, "b2": False, "b3": False, "b4": True}
    assert ("w-00000000000000a4", "a\x00b") in expected["label"] and ("w-00000000000000a4", "x\x00y") in expected["dep"]
    with Workplane(str(repo), agent="alice") as wp:
        wp.rows()
    cache._forget(str(repo / ".git" / "gitwork" / cache.NAME))
    assert _cached(repo) == expected  # (the update path)
    _rebuilt(repo)
    assert _cached(repo) == expected  # (with the helper)
    assert shared["frames"]
    monkeypatch.setattr(cachefill, "HELPER_FOLDERS", 10**9)
    _rebuilt(repo)
    assert _cached(repo) == expected


@pytest.mark.parametrize("with_helper", [False, True])
def test_every_waiting_count_is_the_count_of_its_dependencies_not_done(
        repo: Path, shared: dict[str, list[object]], monkeypatch: pytest.MonkeyPatch, with_helper: bool) -> None:
    """A rebuild counts each row's ``waiting`` as it writes it and again, for the rows whose
    dependencies were not all in, once they are (early or at the end): every count equals what SQL
    counts from the written tables (``cache._WAITING``, the incremental update's own count), items
    depending on done, open, unreadable and missing ones among them."""
    _state(repo)
    _hostile(repo)
    if not with_helper:
        monkeypatch.setattr(cachefill, "HELPER_FOLDERS", 10**9)
    _rebuilt(repo)
    db = sqlite3.connect(repo / ".git" / "gitwork" / cache.NAME)
    try:
        counts = db.execute(f"SELECT id, waiting, ({cache._WAITING.format(item='item.id')}) FROM item"
                            " WHERE problem IS NULL").fetchall()
    finally:
        db.close()
    assert [(i, w) for i, w, _n in counts] == [(i, n) for i, _w, n in counts]
    assert {n for _i, _w, n in counts} >= {0, 1, 2}
    assert ("w-00000000000000a4", 2) in {(i, n) for i, _w, n in counts}  # (one missing, one unreadable)
    assert bool(shared["frames"]) == with_helper


def test_a_new_cache_file_is_made_of_large_pages_and_a_rebuild_gives_the_same_tables(repo: Path) -> None:
    """16 KiB pages (SQLite's default is 4 KiB): a cold rebuild's commit writes a quarter as many
    pages and its B-trees are shallower (docs/performance.md, session 11, rebuild12). Set before the
    file has any content; the rows are the same as in a file of small pages."""
    _state(repo, count=12)
    big = _rebuilt(repo)
    path = repo / ".git" / "gitwork" / cache.NAME
    db = sqlite3.connect(path)
    try:
        assert db.execute("PRAGMA page_size").fetchone()[0] == cache.PAGE_SIZE == 16384
        assert db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    finally:
        db.close()
    # A file of small pages (one made before this change) is read and updated as it is.
    cache.drop(str(path))
    small = sqlite3.connect(path)
    small.execute("PRAGMA page_size=4096")
    small.execute("CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)")  # (_DDL's: the file has content)
    small.close()
    assert _rebuilt_in_place(repo) == big
    db = sqlite3.connect(path)
    try:
        assert db.execute("PRAGMA page_size").fetchone()[0] == 4096
    finally:
        db.close()


def _rebuilt_in_place(repo: Path) -> dict[str, list[tuple[object, ...]]]:
    """The cache brought to the tip in the file as it is (not dropped first)."""
    with Workplane(str(repo), agent="alice") as wp:
        rebuild(wp.context().snapshot)
    cache._forget(str(repo / ".git" / "gitwork" / cache.NAME))
    return tables(repo)


def test_the_wal_of_a_file_of_large_pages_is_checkpointed_at_the_same_size_as_before(repo: Path) -> None:
    """SQLite checkpoints the WAL every 1,000 pages: 4 MiB of 4 KiB pages, 16 MiB of 16 KiB ones. The
    cache keeps the old bound (the WAL is reused from its start after a checkpoint, never shrunk)."""
    _state(repo, count=12)
    _rebuilt(repo)
    path = str(repo / ".git" / "gitwork" / cache.NAME)
    db = cache._open(path)
    try:
        ids = [r[0] for r in db.execute("SELECT id FROM item")]
        for n in range(400):  # each commit writes the row's page and its indexes' (~5 pages of 16 KiB)
            db.execute("BEGIN IMMEDIATE")
            db.execute("UPDATE item SET priority = ?, status = ? WHERE id = ?", (n % 4, f"s{n}", ids[n % len(ids)]))
            db.execute("COMMIT")
        assert os.path.getsize(path + "-wal") <= (4 << 20) + 16 * cache.PAGE_SIZE
    finally:
        db.close()
