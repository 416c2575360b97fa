"""The read side's one SQLite cache (``gitwork/cache.py``): never authoritative, never wrong.

- after any sequence of commands (new, dependency changes, claim, release, expiry by the clock, done,
  msg, ack, a state forced in from another clone), every cached answer (``rows``, ``ready``, ``inbox``)
  equals the same answer computed from the tree at the tip, item file by item file;
- deleting, truncating or writing garbage into the cache file between commands changes no answer;
- a cache of another schema version is rebuilt; one built on an unrelated history is brought to the tip;
- 8 processes writing and reading at once: no error, and the file passes ``PRAGMA integrity_check``.
"""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule, run_state_machine_as_test

from conftest import Clock, examples, git, gw_here, make_repo, run_gw, tip
from gitwork import cache, cachefill, queries
from gitwork.errors import GwError
from gitwork.ids import shortest_unique
from gitwork.index import load_index
from gitwork.queries import select
from gitwork.workplane import Workplane

AGENTS = ("alice", "bob")
REF = "refs/gitwork/state"


def cache_file(repo: Path) -> Path:
    return repo / ".git" / "gitwork" / cache.NAME


def from_tree(wp: Workplane) -> dict[str, tuple[object, ...]]:
    """Every item's summary fields read from its own files at the tip (no cache, no index)."""
    ctx = wp.context()
    out: dict[str, tuple[object, ...]] = {}
    for entry in ctx.snapshot.tree("items").values():
        for item_id in ctx.snapshot.store.read_tree(entry.oid):
            item, lease = ctx.item(item_id), ctx.lease(item_id)
            out[item_id] = (item.status, item.priority, tuple(item.labels), tuple(item.depends_on), item.owner,
                            lease.holder if lease else None, lease.state if lease else None,
                            lease.expires_at if lease else None, lease.epoch if lease else 0)
    return out


def from_cache(wp: Workplane) -> dict[str, tuple[object, ...]]:
    _ctx, rows = wp.rows()
    return {i: (r[2], r[3], r[4], r[5], r[7], r[8], r[9], r[10], r[11]) for i, r in rows.items()}


def answers(wp: Workplane) -> tuple[object, ...]:
    return (from_cache(wp), [r[0] for r in wp.ready()], {a: wp.inbox(a) for a in AGENTS})


def ready_from_tree(wp: Workplane) -> list[str]:
    """``ready`` by its documented rule, straight from the item and lease files."""
    ctx = wp.context()
    rows = from_tree(wp)
    items = {i: ctx.item(i) for i in rows}
    out = []
    for item_id, item in items.items():
        lease = ctx.lease(item_id)
        if item.status not in ("open", "in_progress"):
            continue
        if lease is not None and lease.is_active() and not lease.takeable(ctx.now, wp.settings.clock_margin):
            continue
        if item.status == "in_progress" and (lease is None or not lease.is_active()):
            continue
        if all(d in items and items[d].status == "done" for d in item.depends_on):
            out.append((item.priority, item.created_at, item_id))
    return [i for *_k, i in sorted(out)]


def waiting_from_tree(wp: Workplane) -> dict[str, int]:
    """Per sound item, how many of its (distinct) dependencies are not done or do not exist."""
    tree = from_tree(wp)
    return {i: sum(1 for d in set(v[3]) if d not in tree or tree[d][0] != "done") for i, v in tree.items()}


def waiting_in_cache(wp: Workplane, repo: Path) -> dict[str, int]:
    wp.rows()  # brings the cache to the tip
    db = sqlite3.connect(cache_file(repo))
    try:
        return dict(db.execute("SELECT id, waiting FROM item WHERE problem IS NULL"))
    finally:
        db.close()


class CacheEquivalence(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.tmp = Path(tempfile.mkdtemp(prefix="gw-cache-"))
        self.repo = make_repo(self.tmp / "a")
        self.other = make_repo(self.tmp / "b")
        self.clock = Clock()
        self.wp = {n: Workplane(str(self.repo), now=self.clock, agent=n) for n in (*AGENTS, "admin")}
        self.wp["admin"].do("init")
        self.items: list[str] = []
        with Workplane(str(self.other), now=self.clock, agent="admin") as other:
            other.do("init")
            for n in range(3):
                other.do("new", title=f"elsewhere {n}", priority=n % 4)

    def teardown(self) -> None:
        for plane in self.wp.values():
            plane.close()
        shutil.rmtree(self.tmp, ignore_errors=True)

    def _attempt(self, who: str, op: str, **args: object) -> None:
        try:
            self.wp[who].do(op, **args)
        except GwError:
            pass  # a refusal is an answer too: the state did not change

    def _pick(self, n: int) -> str | None:
        return self.items[n % len(self.items)] if self.items else None

    @rule(priority=st.integers(0, 3), dep=st.integers(0, 20), labels=st.lists(st.sampled_from("xyz"), max_size=2),
          near=st.one_of(st.none(), st.text("0f", min_size=12, max_size=12)))
    def new(self, priority: int, dep: int, labels: list[str], near: str | None) -> None:
        deps = [self._pick(dep)] if self.items and dep % 2 else None
        # ``near``: an id sharing a long prefix with others, so shortest forms need more than 6 digits
        # and change when a neighbour comes or goes (the cache keeps them per row: item.shown).
        chosen = f"w-abcd{near}" if near is not None and f"w-abcd{near}" not in self.items else None
        made = self.wp["admin"].do("new", title=f"t{len(self.items)}", priority=priority, item=chosen,
                                    labels=sorted(set(labels)) or None, depends_on=deps)
        self.items.append(made.result["item"])

    @rule(n=st.integers(0, 20), dep=st.integers(0, 20), add=st.booleans())
    def deps(self, n: int, dep: int, add: bool) -> None:
        item, other = self._pick(n), self._pick(dep)
        if item and other and item != other:
            self._attempt("admin", "edit", item=item, **({"add_deps": [other]} if add else {"remove_deps": [other]}))

    @rule(who=st.sampled_from(AGENTS), n=st.integers(0, 20), nxt=st.booleans())
    def claim(self, who: str, n: int, nxt: bool) -> None:
        if nxt:
            self._attempt(who, "claim", next=True, ttl=60)
        elif self.items:
            self._attempt(who, "claim", item=self._pick(n), ttl=60)

    @rule(who=st.sampled_from(AGENTS), n=st.integers(0, 20), finish=st.booleans())
    def end(self, who: str, n: int, finish: bool) -> None:
        if self.items:
            self._attempt(who, "done" if finish else "release", item=self._pick(n))

    @rule(seconds=st.sampled_from((10, 61, 200)))
    def time_passes(self, seconds: int) -> None:
        self.clock.advance(seconds)

    @rule(who=st.sampled_from(AGENTS), to=st.sampled_from((None, *AGENTS)), n=st.integers(0, 20))
    def msg(self, who: str, to: str | None, n: int) -> None:
        if self.items:
            self._attempt(who, "msg", item=self._pick(n), text="hello", to=to, kind="question")

    @rule(who=st.sampled_from(AGENTS), n=st.integers(0, 20), responded=st.booleans())
    def ack(self, who: str, n: int, responded: bool) -> None:
        if self.items:
            self._attempt(who, "ack", item=self._pick(n), upto=1, read=not responded or None,
                          responded=responded or None)

    @rule(how=st.sampled_from(("delete", "truncate", "garbage", "foreign")))
    def damage(self, how: str) -> None:
        path = cache_file(self.repo)
        if not path.exists():
            return
        if how == "delete":
            cache.drop(str(path))
        elif how == "truncate":
            size = path.stat().st_size
            with open(path, "r+b") as handle:
                handle.truncate(size // 2)
        elif how == "garbage":
            path.write_bytes(os.urandom(4096))
        else:
            db = sqlite3.connect(path)
            db.execute("PRAGMA user_version=1")
            db.close()

    @rule()
    def forced_from_another_clone(self) -> None:
        """Another clone's unrelated state fetched and forced locally: the cache must follow."""
        git(self.repo, "fetch", "-q", str(self.other), f"+{REF}:{REF}")
        self.items = []
        ctx = self.wp["admin"].context()
        for entry in ctx.snapshot.tree("items").values():
            self.items.extend(ctx.snapshot.store.read_tree(entry.oid))

    @invariant()
    def cached_answers_equal_the_tree(self) -> None:
        wp = self.wp["admin"]
        assert from_cache(wp) == from_tree(wp)
        assert [r[0] for r in wp.ready()] == ready_from_tree(wp)
        ctx = wp.context()
        margin = wp.settings.clock_margin
        assert [r[0] for r in select(ctx.snapshot, ctx.now, margin, ready=True).rows] == ready_from_tree(wp)
        tree = from_tree(wp)
        for label in "xy":
            picked = select(ctx.snapshot, ctx.now, margin, closed=True, labels=[label], sort="id").rows
            assert [r[0] for r in picked] == sorted(i for i, v in tree.items() if label in v[2])
        held = select(ctx.snapshot, ctx.now, margin, closed=True, holder="alice", sort="id").rows
        assert [r[0] for r in held] == sorted(i for i, v in tree.items() if v[6] == "active" and v[5] == "alice")
        everything = select(ctx.snapshot, ctx.now, margin, closed=True, sort="id")
        assert everything.short == shortest_unique(tree)
        fresh = load_index(wp.context().snapshot, use_cache=False).items()
        assert wp.rows()[1] == fresh
        assert waiting_in_cache(wp, self.repo) == waiting_from_tree(wp)
        cached_inbox = {a: wp.inbox(a) for a in AGENTS}
        cache.drop(str(cache_file(self.repo)))
        assert {a: wp.inbox(a) for a in AGENTS} == cached_inbox


def test_every_cached_answer_equals_the_tree_at_the_tip() -> None:
    run_state_machine_as_test(
        CacheEquivalence,
        settings=settings(max_examples=examples(quick=5, thorough=12), stateful_step_count=14, deadline=None,
                          suppress_health_check=list(HealthCheck)),
    )


def _populated(repo: Path) -> Workplane:
    wp = Workplane(str(repo), now=Clock(), agent="alice")
    wp.do("init")
    first = wp.do("new", title="first").result["item"]
    wp.do("new", title="second", depends_on=[first], priority=1)
    wp.do("new", title="third", labels=["x"])
    wp.do("claim", item=first, ttl=60)
    wp.do("msg", item=first, text="hi", to="bob")
    return wp


def test_damage_to_the_cache_file_changes_no_answer(repo: Path) -> None:
    with _populated(repo) as wp:
        expected = answers(wp)
        path = cache_file(repo)
        assert path.exists()
        for damage in (lambda: path.write_bytes(b"not a database" * 100),
                       lambda: path.write_bytes(b""),
                       lambda: cache.drop(str(path)),
                       lambda: os.truncate(path, path.stat().st_size // 3)):
            damage()
            assert answers(wp) == expected
        wp.do("new", title="fourth")
        path.write_bytes(os.urandom(8192))
        now = answers(wp)
        assert now != expected and len(now[0]) == 4  # type: ignore[arg-type]
        assert cache.status(str(path))["ok"] is True


def test_a_cache_of_another_version_is_rebuilt(repo: Path) -> None:
    with _populated(repo) as wp:
        expected = answers(wp)
        db = sqlite3.connect(cache_file(repo))
        db.execute("UPDATE item SET title='stale'")
        db.execute(f"PRAGMA user_version={cache.VERSION + 1}")
        db.commit()
        db.close()
        assert answers(wp) == expected
        assert all(r[1] != "stale" for r in wp.rows()[1].values())
        assert cache.status(str(cache_file(repo)))["schema"] == cache.VERSION


def test_a_cache_built_on_an_unrelated_history_follows_the_forced_tip(tmp_path: Path) -> None:
    a, b = make_repo(tmp_path / "a"), make_repo(tmp_path / "b")
    with _populated(a) as wp_a, Workplane(str(b), now=Clock(), agent="bob") as wp_b:
        wp_b.do("init")
        only = wp_b.do("new", title="only in b", priority=0).result["item"]
        before = set(wp_a.rows()[1])
        git(a, "fetch", "-q", str(b), f"+{REF}:{REF}")
        assert set(wp_a.rows()[1]) == {only} != before
        assert [r[0] for r in wp_a.ready()] == [only]
        assert cache.status(str(cache_file(a)))["commit"] == tip(a)


def test_an_unwritable_cache_directory_still_answers(repo: Path) -> None:
    with _populated(repo) as wp:
        expected = answers(wp)
        folder = cache_file(repo).parent
        shutil.rmtree(folder)
        folder.write_text("a file where the folder should be")
        try:
            assert answers(wp) == expected
        finally:
            folder.unlink()


WORKER = r"""
import json, sys
from gitwork.workplane import Workplane
from gitwork.errors import GwError
from gitwork.ids import shortest_unique
from gitwork.queries import ready, select
repo, me, rounds = sys.argv[1], sys.argv[2], int(sys.argv[3])
with Workplane(repo, agent=me) as wp:
    for n in range(rounds):
        wp.do("new", title=f"{me}-{n}", priority=n % 3)
        try:
            wp.do("claim", next=True, ttl=600)
        except GwError:
            pass
        ctx, rows = wp.rows()
        assert ctx.index().commit == ctx.snapshot.commit  # the answer is of the tip this process read
        assert all(r[0] in rows for r in ready(ctx.index(), ctx.now, 30))
        picked = select(ctx.snapshot, ctx.now, 30, closed=True)  # shortest forms kept per row, at this tip
        assert picked.commit == ctx.snapshot.commit and picked.short == shortest_unique(rows)
        wp.inbox(me)
print(json.dumps({"ok": True}))
"""


def test_eight_processes_reading_and_writing_at_once(repo: Path) -> None:
    with Workplane(str(repo)) as wp:
        wp.do("init")
    procs = [subprocess.Popen([sys.executable, "-c", WORKER, str(repo), f"agent{n}", "4"], cwd=repo,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for n in range(8)]
    for proc in procs:
        out, err = proc.communicate(timeout=120)
        assert proc.returncode == 0, err
        assert json.loads(out)["ok"] is True
    db = sqlite3.connect(cache_file(repo))
    assert db.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    db.close()
    listed = json.loads(run_gw(repo, "list", "--all", "--json").stdout)
    assert len(listed) == 32
    with Workplane(str(repo)) as wp:
        assert from_cache(wp) == from_tree(wp)


def _ids(done: subprocess.CompletedProcess[str]) -> list[str]:
    assert done.returncode == 0, done.stderr
    return [row["item"] for row in json.loads(done.stdout)]


def test_listing_filters_sort_and_limit_as_sql(repo: Path) -> None:
    clock = Clock()
    with Workplane(str(repo), agent="alice", now=clock) as wp:
        wp.do("init")
        made = []
        for n in range(9):
            clock.advance(5)  # distinct creation times: --sort created is the order they were made in
            made.append(wp.do("new", title=f"t{n}", priority=n % 3, labels=["x", "y"][: n % 3] or None,
                              owner="carol" if n % 2 else None).result["item"])
        wp.do("claim", item=made[4], ttl=600)
        ctx = wp.context()
        ready = [r[0] for r in select(ctx.snapshot, ctx.now, 30, ready=True).rows]
    # The filters through the CLI's entry point in this process (gw_here: the same parsing, query and output as
    # a `gw` process, without 15 interpreter starts).
    assert _ids(gw_here(repo, "ready", "--json")) == ready and made[4] not in ready
    cut = gw_here(repo, "ready", "--limit", "3", "--json")
    assert _ids(cut) == ready[:3]
    assert "more match" in cut.stderr
    whole = gw_here(repo, "ready", "--limit", str(len(ready)), "--json")
    assert _ids(whole) == ready and "more match" not in whole.stderr
    assert _ids(gw_here(repo, "ready", "--label", "x", "--label", "y", "--json")) == [made[n] for n in (2, 5, 8)]
    assert set(_ids(gw_here(repo, "ready", "-l", "x", "--json"))) == {made[n] for n in (1, 2, 5, 7, 8)}
    assert set(_ids(gw_here(repo, "ready", "--owner", "carol", "--json"))) == {made[n] for n in (1, 3, 5, 7)}
    assert set(_ids(gw_here(repo, "ready", "--priority", "0", "--json"))) == {made[n] for n in (0, 3, 6)}
    assert _ids(gw_here(repo, "ready", "--sort", "created", "--json")) == [m for m in made if m != made[4]]
    assert _ids(gw_here(repo, "list", "--sort", "id", "--json")) == sorted(made)
    assert _ids(gw_here(repo, "list", "--holder", "alice", "--json")) == [made[4]]
    assert len(_ids(gw_here(repo, "list", "--limit", "2", "--owner", "carol", "--json"))) == 2
    for bad in (("ready", "--sort", "best"), ("list", "--status", "opne"), ("ready", "--priority", "-1"),
                ("list", "--limit", "-2")):
        before = tip(repo)
        done = gw_here(repo, *bad)
        assert done.returncode == 5, (bad, done.stderr)
        assert len(done.stderr.strip().splitlines()) == 1 and tip(repo) == before


def test_cache_status_rebuild_and_drop(repo: Path) -> None:
    with _populated(repo) as wp:
        expected = answers(wp)
        tip_now = tip(repo)
        status = json.loads(run_gw(repo, "cache", "status", "--json").stdout)
        assert status["exists"] and status["current"] and status["healthy"] and status["items"] == 3
        assert status["commit"] == tip_now == status["tip"]
        dropped = json.loads(run_gw(repo, "cache", "drop", "--json").stdout)
        assert dropped["dropped"] is True and not cache_file(repo).exists()
        assert json.loads(run_gw(repo, "cache", "status", "--json").stdout)["exists"] is False
        assert json.loads(run_gw(repo, "cache", "drop", "--json").stdout)["dropped"] is False
        cache_file(repo).parent.mkdir(exist_ok=True)
        cache_file(repo).write_bytes(b"garbage" * 1000)
        assert json.loads(run_gw(repo, "cache", "status", "--json").stdout)["healthy"] is False
        rebuilt = json.loads(run_gw(repo, "cache", "rebuild", "--json").stdout)
        assert rebuilt["items"] == 3 and rebuilt["commit"] == tip_now and rebuilt["bytes"] > 0
        assert json.loads(run_gw(repo, "cache", "status", "--json").stdout)["healthy"] is True
        assert answers(wp) == expected and tip(repo) == tip_now


def test_cache_verbs_take_the_options_given_before_the_group(repo: Path, tmp_path: Path,
                                                            capsys: pytest.CaptureFixture[str],
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    """git's habit, ``gw -C DIR --json cache status``: the options go after both words of the verb."""
    from gitwork.cli.main import main

    with _populated(repo):
        monkeypatch.chdir(tmp_path)  # not a repository: only -C can find it
        assert main(["-C", str(repo), "--json", "cache", "rebuild"]) == 0
        assert json.loads(capsys.readouterr().out)["items"] == 3
        assert main(["-C", str(repo), "cache", "status", "--json"]) == 0
        assert json.loads(capsys.readouterr().out)["current"] is True


def test_claim_next_filters_choose_among_ready_items_and_are_not_recorded(repo: Path) -> None:
    clock = Clock()
    with Workplane(str(repo), agent="alice", now=clock) as wp:
        wp.do("init")
        made = []
        for n in range(6):  # priority n % 2; label x on 3, 4, 5; owner carol on 4 and 5
            clock.advance(5)
            made.append(wp.do("new", title=f"t{n}", priority=n % 2, labels=["x"] if n >= 3 else None,
                              owner="carol" if n >= 4 else None).result["item"])
    claimed = run_gw(repo, "claim", "--next", "--label", "x", "--as", "bob")
    assert claimed.returncode == 0, claimed.stderr
    assert claimed.stdout.strip() == made[4]  # best of 3, 4, 5: priority 0 first
    recorded = git(repo, "log", "-1", "--format=%B", REF)
    assert f'"item": "{made[4]}"' in recorded and '"labels"' not in recorded and '"next"' not in recorded
    assert run_gw(repo, "claim", "--next", "--owner", "carol", "--as", "bob").stdout.strip() == made[5]
    assert run_gw(repo, "claim", "--next", "--priority", "1", "--as", "bob").stdout.strip() == made[1]
    before = tip(repo)
    none = run_gw(repo, "claim", "--next", "--owner", "carol", "--as", "bob")
    assert none.returncode == 3 and tip(repo) == before
    wrong = run_gw(repo, "claim", made[0], "--label", "x", "--as", "bob")
    assert wrong.returncode == 5 and len(wrong.stderr.strip().splitlines()) == 1 and tip(repo) == before


def test_claim_next_spreads_over_the_best_few_after_a_lost_race(repo: Path) -> None:
    from gitwork import engine
    from gitwork.ops import leases

    with Workplane(str(repo), agent="alice") as wp:
        wp.do("init")
        for n in range(12):
            wp.do("new", title=f"t{n}")
        ctx = wp.context()
        best = [r[0] for r in select(ctx.snapshot, ctx.now, 30, ready=True).rows]
        cmd = engine.validate_command({"op": "claim", "next": True, "ttl": 60, "as": "alice"})
        first = engine.apply(ctx.snapshot, dict(cmd), ctx.now, wp.settings)
        assert first.result["item"] == best[0]  # a first attempt keeps the documented order
        retries = {engine.apply(ctx.snapshot, dict(cmd), ctx.now, wp.settings, attempt=n).result["item"]
                   for n in range(2, 42)}
        assert retries <= set(best[: leases.SPREAD]) and len(retries) > 1


def test_a_reader_that_cannot_get_the_write_lock_answers_alone_and_keeps_the_file(
        repo: Path, monkeypatch: object) -> None:
    import pytest

    assert isinstance(monkeypatch, pytest.MonkeyPatch)
    with _populated(repo) as wp:
        monkeypatch.setattr(cache, "BUSY_TIMEOUT", 0.2)
        cache.drop(str(cache_file(repo)))
        answers(wp)  # a fresh file, opened with the short timeout
        inode = cache_file(repo).stat().st_ino
        wp.do("new", title="while locked")
        blocker = sqlite3.connect(cache_file(repo), isolation_level=None)
        blocker.execute("BEGIN IMMEDIATE")  # another process in the middle of a long update
        try:
            rows = wp.rows()[1]
            assert "while locked" in {r[1] for r in rows.values()} and len(rows) == 4
        finally:
            blocker.execute("ROLLBACK")
            blocker.close()
        assert cache_file(repo).stat().st_ino == inode  # not deleted as if it were damaged
        assert len(wp.rows()[1]) == 4


def test_a_plain_claim_does_not_import_the_cache(repo: Path) -> None:
    with Workplane(str(repo)) as wp:
        wp.do("init")
        item = wp.do("new", title="one").result["item"]
    done = subprocess.run([sys.executable, "-X", "importtime", "-m", "gitwork", "claim", item, "--as", "bob"],
                          cwd=repo, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    imported = {line.split("|")[-1].strip() for line in done.stderr.splitlines() if line.startswith("import time:")}
    assert "gitwork.workplane" in imported  # the listing is real
    assert not imported & {"sqlite3", "_sqlite3", "gitwork.cache", "gitwork.queries", "gitwork.rows"}
    ready = subprocess.run([sys.executable, "-X", "importtime", "-m", "gitwork", "ready"], cwd=repo,
                           capture_output=True, text=True)
    assert "sqlite3" in ready.stderr  # ...while a listing does read through it


def test_threads_of_one_process_read_through_the_cache_at_once(repo: Path) -> None:
    import threading

    with _populated(repo) as wp:
        expected = from_tree(wp)
        assert from_cache(wp) == expected
        inode = cache_file(repo).stat().st_ino
        failures: list[BaseException] = []

        def reader(n: int) -> None:
            try:
                with Workplane(str(repo), agent=f"reader{n}") as mine:
                    for _ in range(10):
                        assert from_cache(mine) == expected
            except BaseException as error:  # noqa: BLE001  (reported below)
                failures.append(error)

        threads = [threading.Thread(target=reader, args=(n,)) for n in range(4)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert failures == [] and cache_file(repo).stat().st_ino == inode


def test_a_bulk_read_cuts_every_object_out_of_the_batch_output_and_skips_missing_ones(repo: Path) -> None:
    """``cachefill._read_batch`` reads one ``git cat-file --batch`` output whole and cuts it by the headers: each
    object exactly (newlines and empty contents included), a missing one left out for the store to name."""
    contents = [b"", b"\n", b"two\nlines\n", os.urandom(70_000), b"last"]
    oids = [git(repo, "hash-object", "-w", "--stdin", input=c) for c in contents]
    absent = "0" * 40
    asked = [absent, *oids[:2], absent, *oids[2:], absent]
    got = cachefill._read_batch(str(repo / ".git"), asked)
    assert got == {oid: ("blob", content) for oid, content in zip(oids, contents, strict=True)}
    assert cachefill._read_batch(str(repo / ".git"), []) == {}


def test_a_bulk_rebuild_keeps_no_folder_in_the_stores_memory(repo: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A rebuild reads every item folder once: the store does not keep them afterwards (at 100,000 items
    that was most of a rebuild's 240 MB), and the answers are those of the tree."""
    from gitwork.index import rebuild

    monkeypatch.setattr(cachefill, "BULK_SHARDS", 1)  # a bulk rebuild of these few shards
    with _populated(repo) as wp:
        expected = answers(wp)
        snapshot = wp.context().snapshot
        folders = {f.oid for e in snapshot.tree("items").values() for f in snapshot.store.read_tree(e.oid).values()}
        cache.drop(str(cache_file(repo)))
        assert rebuild(snapshot)[1] == 3
        assert not folders & set(snapshot.store._trees)
        assert answers(wp) == expected


def test_ready_reads_no_dependency_row_per_item(repo: Path) -> None:
    """``ready``'s SQL scans the items once: dependencies are counted when rows change (item.waiting),
    not by a subquery per item (at 100,000 items with 1-3 dependencies each that was 5x the SQL)."""
    wp = _populated(repo)
    wp.rows()
    ctx = wp.context()
    sql, args = queries.statement(ctx.now, ready=True)
    db = sqlite3.connect(cache_file(repo))
    try:
        db.create_function("gw_live", 1, lambda expires: False)
        plan = " | ".join(str(step[-1]) for step in db.execute("EXPLAIN QUERY PLAN " + sql, args))
    finally:
        db.close()
    assert "CORRELATED" not in plan and " d " not in f" {plan} ", plan
    assert [r[0] for r in select(ctx.snapshot, ctx.now, 60, ready=True).rows] == ready_from_tree(wp)


def test_one_long_lived_git_answers_every_bulk_read_exactly(repo: Path) -> None:
    """``cachefill.Batch`` (one ``git cat-file --batch-command`` for every chunk of a rebuild) answers as
    ``read_batch`` does, call after call on the same git: empty contents, newlines, bytes that look like
    a header, an object larger than any pipe, missing ones left out. A git that dies mid-object is a
    ``GitFailed``, never a torn object, and the next call starts another git that answers."""
    from gitwork import gitcmd
    from gitwork.errors import GitFailed

    contents = [b"", b"\n", b"0123456789012345678901234567890123456789 blob 5\nabc\n", os.urandom(3 * 1024 * 1024 + 17),
                b"last"]
    oids = [git(repo, "hash-object", "-w", "--stdin", input=c) for c in contents]
    git_dir = str(repo / ".git")
    asked = ["0" * 40, *oids, "HEAD:no such file", *oids[:2]]
    batch = cachefill.Batch(git_dir)
    try:
        first = batch.read(asked)
        pid = batch._proc.pid  # type: ignore[union-attr]
        assert first == gitcmd.read_batch(git_dir, asked)
        assert {oid: data for oid, (_, _, data) in first.items()} == dict(zip(oids, contents, strict=True))
        for _ in range(3):
            assert batch.read(list(reversed(asked))) == first
        assert batch._proc.pid == pid  # type: ignore[union-attr]  # the same git, call after call
        assert batch.read([]) == {} and batch.read(["HEAD\nHEAD"]) == {}
        big = oids[3]
        path = repo / ".git" / "objects" / big[:2] / big[2:]
        os.chmod(path, 0o644)
        with open(path, "r+b") as handle:
            handle.truncate(path.stat().st_size // 2)
        with pytest.raises(GitFailed, match="unable to stream"):
            batch.read([oids[0], big, oids[4]])
        assert batch.read([oids[4]]) == {oids[4]: (oids[4], "blob", b"last")}  # another git answers
        assert batch._proc.pid != pid  # type: ignore[union-attr]
    finally:
        batch.close()


def test_a_bulk_rebuild_reads_every_chunk_through_one_git(repo: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A packed rebuild of many chunks starts one ``git cat-file`` for all its bulk reads (one each
    chunk cost ~3 ms to start and lost git's cache of delta bases: ~0.5 s CPU at 100,000 items), and
    the tables hold what a rebuild reading object by object holds."""
    from gitwork import gitcmd
    from gitwork.index import rebuild

    with _populated(repo) as wp:
        git(repo, "gc", "-q")
        snapshot = wp.context().snapshot
        cache.drop(str(cache_file(repo)))
        monkeypatch.setattr(cachefill, "BULK_FOLDERS", 10**9)  # every object read by the store
        rebuild(snapshot)
        expected = answers(wp)
        monkeypatch.setattr(cachefill, "BULK_FOLDERS", 1)
        monkeypatch.setattr(cachefill, "BULK_SHARDS", 1)  # a chunk a shard
        monkeypatch.setattr(cachefill, "HELPER_FOLDERS", 10**9)
        started: list[int] = []
        real_start = cachefill.Batch._start

        def start(self: cachefill.Batch) -> object:
            proc = real_start(self)
            if proc.pid not in started:
                started.append(proc.pid)
            return proc

        monkeypatch.setattr(cachefill.Batch, "_start", start)
        monkeypatch.setattr(gitcmd, "read_batch", lambda *a: pytest.fail("a git started for one chunk"))
        cache.drop(str(cache_file(repo)))
        assert rebuild(snapshot)[1] == 3
        assert len(started) == 1
        assert len({e.oid for e in snapshot.tree("items").values()}) > 1  # (several chunks read)
        assert answers(wp) == expected
