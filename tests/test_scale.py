"""The read cache at scale (issue 11): one cache file, the old ones cleaned away; the sealed message
ids of long threads kept in it (never deciding a write); ``claim --next`` contenders spread.

Speeds are measured in benchmarks/ (docs/performance.md), never here.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from conftest import Clock, tip
from gitwork import cache, cachefill
from gitwork import thread as T
from gitwork.errors import GwError
from gitwork.workplane import Workplane


def cache_dir(repo: Path) -> Path:
    return repo / ".git" / "gitwork"


def test_the_cache_deletes_the_files_of_the_caches_it_replaced(repo: Path) -> None:
    """index.py, commitcache.py and threads_index.py kept ``<ref>.*.marshal`` files, thread.py a
    ``thread-ids-v*/`` folder: making the one cache removes them, and nothing else in the folder."""
    folder = cache_dir(repo)
    folder.mkdir(parents=True, exist_ok=True)
    old = ["refs-gitwork-state.index-v3-py311.marshal", "refs-gitwork-state.threads-v2-py311.marshal",
           "refs-gitwork-state.inbox-py311.marshal"]
    for name in old:
        (folder / name).write_bytes(b"old")
    for version in (1, 2):
        (folder / f"thread-ids-v{version}").mkdir()
        (folder / f"thread-ids-v{version}" / "w-0123456789abcdef.marshal").write_bytes(b"old")
    (folder / "refused.jsonl").write_text("{}\n")  # sync's record: not a cache
    (folder / "unknown").mkdir()
    (folder / "unknown" / "c-1.json").write_text("{}")
    with Workplane(str(repo), now=Clock(), agent="alice") as wp:
        wp.do("init")
        wp.do("new", title="one")
        assert len(wp.ready()) == 1
    left = sorted(p.name for p in folder.iterdir())
    assert left == sorted([cache.NAME, *(n for n in left if n.startswith(cache.NAME + "-")), "refused.jsonl",
                           "unknown"])
    assert (folder / "unknown" / "c-1.json").exists()


def test_sealed_message_ids_live_in_the_one_cache_and_never_decide_alone(
        repo: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(T, "SEGMENT", 3)
    monkeypatch.setattr(T, "SPAN", 3 * 2)
    monkeypatch.setattr(T, "_IDS_MEMO", {})
    with Workplane(str(repo), now=Clock(), agent="alice") as wp:
        wp.do("init")
        item = wp.do("new", title="talk").result["item"]
        for n in range(1, 11):  # three sealed segments of 3 and an open one
            wp.post(item, f"m{n}", msg_id=f"id-{n}")
        T._IDS_MEMO.clear()
        ids = T.message_ids(wp.store.snapshot(), item)
        assert ids.get("id-2") == 2 and ids.get("id-9") == 9 and ids.get("id-11") is None
        db = sqlite3.connect(cache_dir(repo) / cache.NAME)
        stored = dict(db.execute("SELECT first, ids FROM sealed_ids"))
        db.close()
        assert stored == {1: "\nid-1\nid-2\nid-3\n", 4: "\nid-4\nid-5\nid-6\n", 7: "\nid-7\nid-8\nid-9\n"}
        assert not list(cache_dir(repo).glob("thread-ids-v*"))
        # Read back from the cache (no memo), and a duplicate id is still recognised after the file goes.
        T._IDS_MEMO.clear()
        assert T.message_ids(wp.store.snapshot(), item).get("id-5") == 5
        before = tip(repo)
        cache.drop(str(cache_dir(repo) / cache.NAME))
        T._IDS_MEMO.clear()
        again = wp.post(item, "m2", msg_id="id-2").result
        assert again["duplicate"] is True and again["seq"] == 2 and tip(repo) == before
        # The same id with another text is refused (found in a sealed segment read from the tip again).
        with pytest.raises(GwError):
            wp.post(item, "not m5", msg_id="id-5")
        assert tip(repo) == before


def test_claim_next_losers_spread_by_identity_and_keep_the_order_first() -> None:
    """A first attempt takes the best item; after a lost race each claimer's pick among the best few
    is drawn from its identity, command id and attempt: reproducible, and a crowd of 12 that lost the
    same round does not land on one item."""
    from gitwork.ops.leases import SPREAD, spread_pick

    crowd = [(f"agent-{k}", f"c-{k:016x}") for k in range(12)]
    assert {spread_pick(actor, command, 1, SPREAD) for actor, command in crowd} == {0}
    second = [spread_pick(actor, command, 2, SPREAD) for actor, command in crowd]
    assert all(0 <= pick < SPREAD for pick in second) and len(set(second)) >= 4
    assert second == [spread_pick(actor, command, 2, SPREAD) for actor, command in crowd]
    assert [spread_pick(a, c, 3, SPREAD) for a, c in crowd] != second  # each attempt draws again
    assert {spread_pick(actor, command, 5, 1) for actor, command in crowd} == {0}


def test_a_bulk_rebuild_through_one_cat_file_equals_the_one_by_one_reads(
        repo: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A rebuild (or a pull moving many shards) reads folders in bulk through one pipelined
    ``git cat-file --batch``; forced here for a small state, its answers equal the tree's."""
    from gitwork.index import load_index, rebuild

    with Workplane(str(repo), now=Clock(), agent="alice") as wp:
        wp.do("init")
        made = [wp.do("new", title=f"t{n}", priority=n % 3, labels=["x"] if n % 2 else None).result["item"]
                for n in range(6)]
        wp.do("new", title="waits", depends_on=[made[0]])
        wp.do("claim", item=made[1], ttl=60)
        wp.do("msg", item=made[2], text="hello", to="bob", epoch=0)
        wp.do("done", item=made[3])
        expected = (load_index(wp.context().snapshot, use_cache=False).items(), [r[0] for r in wp.ready()],
                    wp.inbox("bob"))
        assert expected[2] and len(expected[1]) == 4  # a thread to summarise; t1 held, t3 done, "waits" blocked
        monkeypatch.setattr(cachefill, "BULK_FOLDERS", 1)
        monkeypatch.setattr(cachefill, "_loose", lambda store, oids: False)
        reads: list[int] = []
        real = cachefill._read_batch
        monkeypatch.setattr(cachefill, "_read_batch", lambda git_dir, oids: reads.append(len(oids)) or real(git_dir, oids))
        cache.drop(str(cache_dir(repo) / cache.NAME))
        assert rebuild(wp.context().snapshot)[1] == 7
        assert reads and sum(reads) >= 7  # the folders, then their item and lease files, in batches
        assert (wp.rows()[1], [r[0] for r in wp.ready()], wp.inbox("bob")) == expected


@settings(max_examples=60, deadline=None)
@given(st.sets(st.text("0f", min_size=16, max_size=16) | st.text("0123456789abcdef", min_size=16, max_size=16),
               max_size=12))
def test_shortest_forms_are_the_shortest_prefixes_no_other_id_shares(hexes: set[str]) -> None:
    """``ids.shown_lengths`` (what the cache stores per row) against the definition, by brute force."""
    from gitwork.ids import HEX_LEN, MIN_SHOWN, PREFIX, shortest_unique

    all_ids = sorted(PREFIX + h for h in hexes)
    expected = {}
    for item_id in all_ids:
        digits = next(n for n in range(MIN_SHOWN, HEX_LEN + 1)
                      if not any(o != item_id and o.startswith(item_id[:len(PREFIX) + n]) for o in all_ids))
        expected[item_id] = item_id[:len(PREFIX) + digits]
    assert shortest_unique(all_ids) == expected
