"""The batch document: several command documents, one commit, all or nothing (issue 18 point 8, issue 16).

``gw apply`` reads JSON lines and multi-document YAML as one batch; each member is validated and run
by its own op on the tree the members before it left; a refusal names the member's position (and its
line) and leaves the state ref unchanged; ``gw sync`` replays a batch like any command.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from conftest import git, run_gw, tip
from gitwork import engine
from gitwork.errors import ExitCode, Invalid, NotFound
from gitwork.statecommit import read
from gitwork.workplane import Workplane

A = "w-a000000000000001"
B = "w-b000000000000002"


def state_files(repo: Path, commit: str) -> set[str]:
    return set(git(repo, "diff-tree", "-r", "--no-commit-id", "--name-only", f"{commit}^", commit).split())


def test_json_lines_are_one_commit_each_member_sees_the_ones_before(repo: Path, wp: Workplane) -> None:
    before = tip(repo)
    lines = "\n".join(json.dumps(d) for d in [
        {"op": "new", "title": "first", "item": A},
        {"op": "new", "title": "second", "item": B, "depends_on": [A]},  # A exists only in this batch
        {"op": "msg", "item": A, "text": "one", "epoch": "current"},
        {"op": "msg", "item": A, "text": "two", "epoch": "current"},  # numbered after the one before
        {"op": "edit", "item": B, "add_labels": ["x"]},
    ]) + "\n"
    done = run_gw(repo, "apply", "-", "--json", input=lines)
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert result["op"] == "batch" and result["count"] == 5 and result["changed"] == 5
    assert git(repo, "rev-list", "--count", f"{before}..refs/gitwork/state").strip() == "1"
    _, messages = wp.thread(A)
    assert [(m["seq"], m["text"]) for m in messages] == [(1, "one"), (2, "two")]
    assert wp.item(B).depends_on == [A] and wp.item(B).labels == ["x"]
    # The commit carries the members as their ops resolved them: ids minted, epochs read.
    command = read(wp.store, tip(repo)).command
    assert all(member["id"] for member in command["ops"])
    assert [m.get("epoch") for m in command["ops"][2:4]] == [0, 0]


def test_multi_document_yaml_is_one_batch(repo: Path, wp: Workplane) -> None:
    text = f"op: new\ntitle: one\nitem: {A}\n---\n# a comment\nop: new\ntitle: two\nitem: {B}\n"
    before = tip(repo)
    done = run_gw(repo, "apply", "-", input=text)
    assert done.returncode == 0, done.stderr
    assert "batch of 2" in done.stderr
    assert git(repo, "rev-list", "--count", f"{before}..refs/gitwork/state").strip() == "1"
    assert wp.item(B).title == "two"


def test_a_refusal_names_the_member_and_its_line_and_writes_nothing(repo: Path, wp: Workplane) -> None:
    before = tip(repo)
    lines = "\n".join([json.dumps({"op": "new", "title": "kept out", "item": A}), "",
                       json.dumps({"op": "edit", "item": "w-ffff"})]) + "\n"
    done = run_gw(repo, "apply", "-", "--json", input=lines)
    assert done.returncode == ExitCode.NOT_FOUND, done.stderr
    assert done.stderr.count("\n") == 1 and "#2 (edit)" in done.stderr and "line 3" in done.stderr
    error = json.loads(done.stdout)
    assert error["details"]["position"] == 2 and error["details"]["line"] == 3
    assert tip(repo) == before
    with pytest.raises(NotFound):
        wp.item(A)


@pytest.mark.parametrize("member, says", [
    ({"op": "batch", "ops": [{"op": "new", "title": "x"}]}, "cannot hold a batch"),
    ({"op": "publish", "session": "s"}, "record that only gitwork"),
    ({"op": "new", "title": "x", "bogus": 1}, "unknown field"),
    ({"op": "new", "title": "same id", "id": "c-twice-0001"}, "appears twice"),
    ({"op": "new", "title": "nobody", "as": ""}, "not a valid identity"),
])
def test_members_are_validated_as_documents_of_their_own_op(repo: Path, wp: Workplane, member: dict,
                                                          says: str) -> None:
    before = tip(repo)
    first = {"op": "new", "title": "first", "id": "c-twice-0001"}
    with pytest.raises(Invalid, match=says) as raised:
        wp.submit({"op": "batch", "ops": [first, member]})
    assert raised.value.message.startswith("#2 (")
    assert tip(repo) == before


def test_a_batch_of_nothing_new_writes_nothing_and_a_retry_is_answered(repo: Path, wp: Workplane) -> None:
    doc = {"op": "batch", "id": "c-batch-retry-1", "ops": [{"op": "new", "title": "once", "item": A}]}
    first = wp.submit(doc)
    again = wp.submit(doc)
    assert again.result.get("duplicate") is True and again.commit == first.commit
    before = tip(repo)
    wp.submit({"op": "batch", "ops": [{"op": "init"}]})  # init on an existing state: no change
    assert tip(repo) == before


def test_arbiter_ops_are_refused_in_a_batch_when_an_arbiter_decides_them(repo: Path, wp: Workplane) -> None:
    wp.do("new", title="held", item=A)
    snapshot = wp.store.snapshot()
    cmd = engine.validate_command({"op": "batch", "ops": [{"op": "claim", "item": A}], "as": "alice"})
    with pytest.raises(Invalid, match="decided by the arbiter"):
        engine.apply(snapshot, cmd, wp.now(), wp.settings.replace(remote="origin"))
    assert engine.apply(snapshot, dict(cmd), wp.now(), wp.settings).result["changed"] == 1  # no arbiter: fine


def test_sync_replays_a_batch_on_the_remote_tip(tmp_path: Path, remote: Path, url: str, machine_a: Path) -> None:
    from test_sync import gw_ok, machine

    a = machine_a
    b = machine(tmp_path, "b", url)
    gw_ok(b, "sync")
    lines = "\n".join(json.dumps(d) for d in [
        {"op": "new", "title": "batched one", "item": A},
        {"op": "new", "title": "batched two", "item": B, "depends_on": [A]},
        {"op": "msg", "item": A, "text": "from the batch", "epoch": "current"},
    ]) + "\n"
    done = run_gw(a, "apply", "-", "--json", input=lines)
    assert done.returncode == 0, done.stderr
    gw_ok(b, "new", "elsewhere first")  # the remote moves on before a syncs
    gw_ok(b, "sync")
    synced = gw_ok(a, "sync")
    assert [entry["op"] for entry in synced["replayed"]] == ["batch"] and synced["refused"] == []
    assert tip(remote) == tip(a)
    gw_ok(b, "sync")
    shown = gw_ok(b, "show", B)
    assert shown["depends_on"] == [A]
    assert [m["text"] for m in gw_ok(b, "thread", A)] == ["from the batch"]


def test_the_batch_op_is_declared_with_its_members_validated_by_the_engine() -> None:
    spec = engine.spec("batch")
    assert spec is not None and spec.roles and not spec.arbiter and not spec.internal
    with pytest.raises(Invalid, match="non-empty list"):
        engine.validate_command({"op": "batch", "ops": []})
    with pytest.raises(Invalid, match="at most 1000"):
        engine.validate_command({"op": "batch", "ops": [{"op": "init"}] * 1001})
