"""Forged state trees that once made every reader die with "internal error", on every face that reads them.

Anyone can push a tree with plain git and a clone fetches it, so the state tree is hostile input.
Two such trees are here: a title or label holding a lone surrogate (YAML ``"\\ud800"``: no character,
UTF-8 cannot encode it, so SQLite, JSON and the terminal all failed on it), and one item id in two
shards (``items/00/w-..c3`` and ``items/ff/w-..c3``: both folders' rows were one ``item.id`` and the
cache's rebuild died of an IntegrityError). Each bad folder is a problem item (left out of listings
and named on stderr, ``gw show`` of it exits 8) like any other malformed one; the sound items beside
them are listed; the cache's tables are the same whether rebuilt alone, with the helper process or
brought forward by an update; and the arbiter's hook refuses a push of either tree, naming the file.
"""

from __future__ import annotations

import json
import sqlite3
import subprocess
import time
from pathlib import Path

import pytest

from conftest import git, make_repo, run_gw
from gitwork import cache, cachefill, codec, hooks_install, layout
from gitwork.errors import Corrupt, ExitCode
from gitwork.model import state_file_problem
from gitwork.workplane import Workplane
from test_cache_fill import _rebuilt, _state, shared, tables  # noqa: F401  (shared: a fixture)

_WHEN = "2026-12-02T10:00:00Z"
SURROGATE_TITLE = "w-00000000000000c1"
SURROGATE_LABEL = "w-00000000000000c2"
TWICE = "w-00000000000000c3"  # in its own shard (00) and in ff
ELSEWHERE = "w-00000000000000c4"  # only in ff


def _item(item_id: str, title: str = '"t"', labels: str = "") -> bytes:
    """An item.yaml as plain git could write it (the escapes are YAML's, in double quotes)."""
    return (f"id: {item_id}\ntitle: {title}\nstatus: open\npriority: 1\ncreated_at: {_WHEN}\n"
            f"updated_at: {_WHEN}\n{labels}").encode()


HOSTILE = {
    layout.item_path(SURROGATE_TITLE, "item.yaml"): _item(SURROGATE_TITLE, title='"\\ud800"'),
    layout.item_path(SURROGATE_LABEL, "item.yaml"): _item(SURROGATE_LABEL, labels='labels: ["ok", "a\\udfffb"]\n'),
    layout.item_path(TWICE, "item.yaml"): _item(TWICE, title="first"),
    f"items/ff/{TWICE}/item.yaml": _item(TWICE, title="second"),
    f"items/ff/{ELSEWHERE}/item.yaml": _item(ELSEWHERE, title="elsewhere"),
}


def _commit_hostile(repo: Path) -> str:
    from gitwork.store import Repository, Store, identity_signature

    store = Store(Repository.discover(str(repo)))
    try:
        base = store.snapshot()
        commit = store.write_commit(base, HOSTILE, "hostile\n", identity_signature("x"), int(time.time()) - 60)
        assert store.set_if_equals(base.commit, commit)
        return commit
    finally:
        store.close()


def _problems(repo: Path) -> dict[str, str]:
    db = sqlite3.connect(repo / ".git" / "gitwork" / cache.NAME)
    try:
        return dict(db.execute("SELECT id, problem FROM item WHERE problem IS NOT NULL AND id NOT LIKE 'w-000000000000000%'"
                               " AND (id LIKE '%c_' OR id LIKE 'ff/%')"))
    finally:
        db.close()


def test_a_lone_surrogate_is_a_corrupt_file_where_yaml_is_read() -> None:
    for text in (_item("w-1", title='"\\ud800"'), _item("w-1", labels='labels: ["\\uDC00"]\n'),
                 b'"k\\ud800": 1\n', _item("w-1", title='"\\U0000d800"')):
        with pytest.raises(Corrupt, match="lone surrogate"):
            codec.load_yaml(text, what="items/00/w-1/item.yaml")
    assert codec.load_yaml(_item("w-1", title='"caf\\u00e9 \\U0001F680"'))["title"] == "café 🚀"
    with pytest.raises(Corrupt):
        codec.load_yaml('title: "x\ud800"\n')  # text handed in already decoded is checked too


def test_a_folder_outside_its_shard_is_refused_by_the_state_file_rules() -> None:
    doc = codec.load_yaml(_item(TWICE))
    assert state_file_problem(layout.item_path(TWICE, "item.yaml"), doc) is None
    found = state_file_problem(f"items/ff/{TWICE}/item.yaml", doc)
    assert found is not None and "not in its id's shard" in found and layout.item_dir(TWICE) in found
    lease = {"item": TWICE, "holder": "eve", "epoch": 1, "fence": 1, "state": "active"}
    assert "not in its id's shard" in (state_file_problem(f"items/ff/{TWICE}/lease.yaml", lease) or "")


def test_every_cli_reader_names_the_bad_folders_and_lists_the_rest(repo: Path) -> None:
    _state(repo, count=6)
    _commit_hostile(repo)
    for args in (("list",), ("ready",), ("search", "t"), ("list", "--json"), ("ready", "--json")):
        done = run_gw(repo, *args)
        assert done.returncode == 0 and "internal error" not in done.stderr, (args, done.stderr)
        assert f"items/00/{SURROGATE_TITLE}/item.yaml holds a lone surrogate" in done.stderr, args
        assert f"items/00/{SURROGATE_LABEL}/item.yaml holds a lone surrogate" in done.stderr, args
        assert f"items/ff/{TWICE} is not in its id's shard" in done.stderr, args
        assert f"items/ff/{ELSEWHERE} is not in its id's shard" in done.stderr, args
    listed = {row["item"]: row["title"] for row in json.loads(run_gw(repo, "list", "--json").stdout)}
    assert listed[TWICE] == "first"  # the folder the engine reads; the other is named above
    assert len(listed) == 5 and not {ELSEWHERE, SURROGATE_TITLE, SURROGATE_LABEL} & set(listed)
    for item in (SURROGATE_TITLE, SURROGATE_LABEL):
        shown = run_gw(repo, "show", item)
        assert shown.returncode == int(ExitCode.CORRUPT) and "internal error" not in shown.stderr
        assert "lone surrogate" in shown.stderr
    shown = run_gw(repo, "show", TWICE)
    assert shown.returncode == 0 and "first" in shown.stdout
    assert run_gw(repo, "show", ELSEWHERE).returncode == int(ExitCode.NOT_FOUND)


def test_the_cache_holds_the_same_rows_rebuilt_alone_with_the_helper_and_updated(
        repo: Path, shared: dict[str, list[object]], monkeypatch: pytest.MonkeyPatch) -> None:  # noqa: F811
    _state(repo, count=20)
    with Workplane(str(repo), agent="alice") as wp:
        wp.rows()  # a cache at the sound state, brought forward below by an update
    _commit_hostile(repo)
    with Workplane(str(repo), agent="alice") as wp:
        wp.rows()
    cache._forget(str(repo / ".git" / "gitwork" / cache.NAME))
    updated = tables(repo)
    problems = _problems(repo)
    assert set(problems) == {SURROGATE_TITLE, SURROGATE_LABEL, f"ff/{TWICE}", f"ff/{ELSEWHERE}"}
    assert "lone surrogate" in problems[SURROGATE_LABEL] and "not in its id's shard" in problems[f"ff/{ELSEWHERE}"]
    assert [r[3] for r in updated["item"] if r[0] == TWICE] == ["first"]  # (title) the folder the engine reads  # the folder the engine reads
    with_helper = _rebuilt(repo)
    assert shared["frames"], "the helper delivered no shard"
    monkeypatch.setattr(cachefill, "HELPER_FOLDERS", 10**9)
    alone = _rebuilt(repo)
    assert updated["item"] == with_helper["item"] == alone["item"]
    assert updated == with_helper == alone


def test_gw_serve_lists_the_rest_and_answers_the_bad_item_as_corrupt(repo: Path) -> None:
    pytest.importorskip("fastapi")
    from fastapi.testclient import TestClient

    from gitwork.serve.app import create_app
    from gitwork.serve.tokens import Tokens
    from gitwork.store import Repository

    _state(repo, count=6)
    _commit_hostile(repo)
    token = Tokens(Repository.discover(str(repo)).gitwork_dir()).add("alice", "person")[0]
    with TestClient(create_app(str(repo)), base_url="http://gw", headers={"Authorization": f"Bearer {token}"}) as client:
        listed = client.get("/v1/items")
        assert listed.status_code == 200
        ids = [row["item"] for row in listed.json()]
        assert ids.count(TWICE) == 1 and SURROGATE_TITLE not in ids and ELSEWHERE not in ids
        assert client.get("/v1/items", params={"q": "t"}).status_code == 200
        bad = client.get(f"/v1/items/{SURROGATE_TITLE}")
        assert (bad.status_code, bad.json()["error"]) == (500, "corrupt") and "lone surrogate" in bad.json()["message"]
        assert client.get(f"/v1/items/{TWICE}").status_code == 200
        board = client.get("/")
        assert board.status_code == 200 and TWICE[:6] in board.text


def test_the_arbiter_hook_refuses_a_push_of_either_tree(repo: Path, tmp_path: Path) -> None:
    bare = make_repo(tmp_path / "remote.git", bare=True)
    hooks_install.install_server(str(bare))
    with Workplane(str(repo), agent="alice") as wp:  # the real clock: the arbiter refuses a future commit
        wp.do("init")
        wp.do("new", title="sound")
    state = "refs/gitwork/state"
    sound = git(repo, "rev-parse", state)
    done = subprocess.run(["git", "push", "-q", str(bare), f"{state}:{state}"], cwd=repo, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    forged = _commit_hostile(repo)
    done = subprocess.run(["git", "push", "-q", str(bare), f"{state}:{state}"], cwd=repo, capture_output=True, text=True)
    assert done.returncode != 0 and "internal error" not in done.stderr
    assert f"items/00/{SURROGATE_TITLE}/item.yaml holds a lone surrogate" in done.stderr
    assert f"items/ff/{TWICE}/item.yaml: items/ff/{TWICE} is not in its id's shard" in done.stderr
    assert git(bare, "rev-parse", state) == sound != forged


def test_gw_export_takes_an_item_from_its_own_folder_once(repo: Path) -> None:
    _state(repo, count=2)
    from gitwork.store import Repository, Store, identity_signature

    store = Store(Repository.discover(str(repo)))
    try:  # only the folders outside their shard (a lone surrogate makes the export corrupt, below)
        base = store.snapshot()
        twins = {path: data for path, data in HOSTILE.items() if TWICE in path or ELSEWHERE in path}
        assert store.set_if_equals(base.commit, store.write_commit(base, twins, "twins\n", identity_signature("x"),
                                                                   int(time.time()) - 60))
    finally:
        store.close()
    done = run_gw(repo, "export", "--format", "jsonl")
    assert done.returncode == 0, done.stderr
    exported = [json.loads(line) for line in done.stdout.splitlines()]
    ids = [doc["id"] for doc in exported]
    assert ids.count(TWICE) == 1 and ELSEWHERE not in ids and len(ids) == 3
    assert next(doc for doc in exported if doc["id"] == TWICE)["title"] == "first"
    _commit_hostile(repo)
    before = git(repo, "rev-parse", "refs/gitwork/state")
    done = run_gw(repo, "export", "--format", "jsonl")
    assert done.returncode == int(ExitCode.CORRUPT) and "lone surrogate" in done.stderr, done.stderr
    assert len(done.stderr.strip().splitlines()) == 1 and "internal error" not in done.stderr
    assert git(repo, "rev-parse", "refs/gitwork/state") == before
