"""gw export (issue 16): import(export(x)) is the identity on gitwork's fields.

A work plane with every kind of content (dependencies, a parent and links, criteria ticked and not,
decisions, a thread with a question, a decision request and its decision, a closed and a cancelled
item, labels, owners) is exported, imported into a fresh repository, and compared field by field.
"""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path

import pytest

from conftest import git, make_repo, run_gw, tip
from gitwork import importers
from gitwork.importers.export import items as exported_items
from gitwork.workplane import Workplane

EPIC, CHILD = importers.item_id("csv", "EPIC-1"), importers.item_id("csv", "T-2")  # as an import derives them

KEPT = ("id", "title", "description", "status", "priority", "owner", "labels", "depends_on", "parent", "links",
        "criteria", "decisions", "closed_reason", "created_at")
MESSAGE = ("id", "seq", "by", "kind", "text", "to", "reply_to", "choice")


@pytest.fixture(scope="module")
def source(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from conftest import scrub_env

    mp = pytest.MonkeyPatch()
    scrub_env(tmp_path_factory.mktemp("home"), mp)
    try:
        repo = make_repo(tmp_path_factory.mktemp("export") / "source")
        with Workplane(str(repo), agent="alice") as wp:
            wp.do("init")
            base = wp.do("new", title="Schema", priority=1, labels=["db"], criteria=["reviewed", "migrated"],
                         description="Tables\nand keys", owner="alice").result["item"]
            api = wp.do("new", title="API", depends_on=[base], criteria=["tests pass"]).result["item"]
            wp.do("new", title="Dropped idea", labels=["x"])
            dropped = [row[0] for row in wp.rows()[1].values() if row[1] == "Dropped idea"][0]
            wp.do("cancel", item=dropped, reason="not needed")
            lease = wp.do("claim", item=base).result
            wp.do("check", item=base, criterion=1, fence=lease["fence"])
            wp.do("decision", item=base, text="one table per aggregate", why="simpler joins", fence=lease["fence"])
            wp.post(base, "looks good", to="bob")
            wp.do("ask", item=base, text="ship now?", options=["yes", "no"], to="bob", epoch="current")
            with Workplane(str(repo), agent="bob") as bob:
                bob.do("msg", item=base, text="which index?", kind="question", epoch="current")
                bob.do("decide", item=base, question=2, choose="yes", why="tests pass", epoch="current")
            wp.do("check", item=base, criterion=2, fence=lease["fence"])
            wp.do("done", item=base, fence=lease["fence"])
            # A parent and a link, as an import records them.
            wp.submit({"op": "batch", "ops": [
                {"op": "import", "item": EPIC, "source": "csv", "external": "EPIC-1", "title": "Epic"},
                {"op": "import", "item": CHILD, "source": "csv", "external": "T-2", "title": "Child",
                 "parent": EPIC, "links": [{"kind": "related", "item": api}]},
            ]})
        yield repo
    finally:
        mp.undo()


def kept(doc: dict) -> dict:
    return {key: doc.get(key) for key in KEPT} | {
        "thread": [{k: m.get(k) for k in MESSAGE} for m in doc.get("thread", [])]}


def test_jsonl_round_trip_is_the_identity_on_gitworks_fields(source: Path, tmp_path: Path) -> None:
    out = tmp_path / "items.jsonl"
    done = run_gw(source, "export", "--format", "jsonl", "--output", str(out), "--json")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["items"] == 5
    fresh = make_repo(tmp_path / "fresh")
    with Workplane(str(fresh), agent="importer") as wp, Workplane(str(source)) as origin:
        wp.do("init")
        result = importers.run(wp, "jsonl", str(out))
        assert result["created"] == 5
        before = [kept(d) for d in exported_items(origin)]
        after = [kept(d) for d in exported_items(wp)]
        assert after == before
        assert any(d["decisions"] for d in before) and any(d["thread"] for d in before)
        assert any(d["parent"] for d in before) and any(d["links"] for d in before)
        # Again: nothing changes.
        settled = tip(fresh)
        assert importers.run(wp, "jsonl", str(out))["commits"] == [] and tip(fresh) == settled


def test_an_item_in_progress_comes_back_in_progress_without_a_lease_and_not_ready(tmp_path: Path) -> None:
    """jsonl maps statuses as beads and CSV do (docs/shadow.md, "Status mapping"): in progress stays in
    progress; the lease is not exported, so the item is not offered by ready until someone here takes it."""
    origin_repo = make_repo(tmp_path / "origin")
    out = tmp_path / "items.jsonl"
    with Workplane(str(origin_repo), agent="alice") as origin:
        origin.do("init")
        busy = origin.do("new", title="Busy").result["item"]
        idle = origin.do("new", title="Idle").result["item"]
        origin.do("claim", item=busy)
        assert origin.item(busy).status == "in_progress"
    done = run_gw(origin_repo, "export", "--format", "jsonl", "--output", str(out), "--json")
    assert done.returncode == 0, done.stderr
    fresh = make_repo(tmp_path / "fresh")
    with Workplane(str(fresh), agent="importer") as wp:
        wp.do("init")
        assert importers.run(wp, "jsonl", str(out))["created"] == 2
        assert (wp.item(busy).status, wp.item(idle).status) == ("in_progress", "open")
        assert wp.lease(busy) is None and [row[0] for row in wp.ready()] == [idle]
        settled = tip(fresh)
        assert importers.run(wp, "jsonl", str(out))["commits"] == [] and tip(fresh) == settled


def test_beads_export_reads_back_as_the_same_items(source: Path, tmp_path: Path) -> None:
    out = tmp_path / "issues.jsonl"
    with Workplane(str(source)) as origin:
        with open(out, "w", encoding="utf-8") as handle:
            from gitwork.importers.export import write

            write(origin, "beads", handle)
        before = {d["title"]: d for d in exported_items(origin)}
    lines = [json.loads(line) for line in out.read_text().splitlines()]
    child = next(line for line in lines if line["title"] == "Child")
    assert child["id"] == CHILD
    assert {(d["type"]) for d in child["dependencies"]} == {"parent-child", "related"}
    schema = next(line for line in lines if line["title"] == "Schema")
    assert schema["status"] == "closed" and schema["acceptance_criteria"] == "- [x] reviewed\n- [x] migrated"
    assert [c["author"] for c in schema["comments"]] == ["alice", "alice", "bob", "bob"]
    fresh = make_repo(tmp_path / "fresh")
    with Workplane(str(fresh), agent="importer") as wp:
        wp.do("init")
        importers.run(wp, "beads", str(out))
        after = {d["title"]: d for d in exported_items(wp)}
    assert set(after) == set(before)
    for title, doc in before.items():
        texts = [(c["text"], c["checked"]) for c in doc["criteria"]]  # beads keeps no who/when of a tick
        assert [(c["text"], c["checked"]) for c in after[title]["criteria"]] == texts
        assert ({"done": "done", "cancelled": "done"}.get(doc["status"], doc["status"])
                == after[title]["status"]), title  # beads has one closed state
        assert [m["text"] for m in after[title]["thread"]] == [m["text"] for m in doc["thread"]]
    assert after["API"]["depends_on"] == [after["Schema"]["id"]]
    assert after["Child"]["parent"] == after["Epic"]["id"]


def test_csv_export_has_the_columns_an_import_reads_without_a_map(source: Path, tmp_path: Path) -> None:
    done = run_gw(source, "export", "--format", "csv")
    assert done.returncode == 0, done.stderr
    rows = list(csv.DictReader(io.StringIO(done.stdout)))
    assert len(rows) == 5 and rows[0].keys() >= {"id", "title", "depends_on", "criteria"}
    out = tmp_path / "items.csv"
    out.write_text(done.stdout)
    fresh = make_repo(tmp_path / "fresh")
    with Workplane(str(fresh), agent="importer") as wp:
        wp.do("init")
        assert importers.run(wp, "csv", str(out))["created"] == 5
        titles = {d["title"]: d for d in exported_items(wp)}
    assert titles["Schema"]["description"] == "Tables\nand keys"
    assert [c["checked"] for c in titles["Schema"]["criteria"]] == [True, True]
    assert titles["API"]["depends_on"] == [titles["Schema"]["id"]]


def test_export_json_needs_a_file_and_leaves_the_state_alone(source: Path) -> None:
    before = tip(source)
    done = run_gw(source, "export", "--json")
    assert done.returncode == 2 and "needs --output" in done.stderr
    assert tip(source) == before


# --- beads round trips (issue 24, point 7) ------------------------------------------------------------

REALISTIC = Path(__file__).parent / "fixtures" / "import" / "beads-realistic.jsonl"


def _export_beads(wp: Workplane, path: Path) -> list[dict]:
    from gitwork.importers.export import write

    with open(path, "w", encoding="utf-8") as handle:
        write(wp, "beads", handle)
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_beads_export_keeps_status_times_and_every_dependency(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "repo")
    given = {line["id"]: line for line in map(json.loads, REALISTIC.read_text().splitlines())}
    with Workplane(str(repo), agent="importer") as wp:
        wp.do("init")
        importers.run(wp, "beads", str(REALISTIC))
        out = {line["id"]: line for line in _export_beads(wp, tmp_path / "out.jsonl")}
    live = {k for k, v in given.items() if v.get("status") != "tombstone"}
    assert live <= set(out)
    for name in live:
        theirs, ours = given[name], out[name]
        for key in ("status", "created_at", "updated_at", "closed_at", "title", "priority", "issue_type"):
            assert ours.get(key) == theirs.get(key), (name, key)
        assert _edges_of(ours) == _edges_of(theirs), name  # those on ids outside the file included


def _edges_of(line: dict) -> list[tuple[str, str]]:
    return sorted((d["depends_on_id"], d.get("type", "blocks"))
                  for d in line.get("dependencies", []) if d.get("issue_id", line["id"]) == line["id"])


def test_beads_export_then_import_changes_nothing_and_is_a_fixed_point(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "repo")
    with Workplane(str(repo), agent="importer") as wp:
        wp.do("init")
        importers.run(wp, "beads", str(REALISTIC))
        first = _export_beads(wp, tmp_path / "first.jsonl")
        before = tip(repo)
        result = importers.run(wp, "beads", str(tmp_path / "first.jsonl"))
        assert tip(repo) == before, result  # export -> import of the same file: ref unchanged
        # Work done in gitwork goes out in the export; importing that export is then a fixed point.
        api = importers.item_id("beads", "gw-api")
        lease = wp.do("claim", item=api, force=True).result  # its dependency is still in progress
        wp.do("done", item=api, fence=lease["fence"], force=True, reason="shipped")
        second = _export_beads(wp, tmp_path / "second.jsonl")
        assert next(line for line in second if line["id"] == "gw-api")["status"] == "closed"
        importers.run(wp, "beads", str(tmp_path / "second.jsonl"))
        assert wp.item(api).status == "done"
        third = _export_beads(wp, tmp_path / "third.jsonl")
        settled = tip(repo)
        importers.run(wp, "beads", str(tmp_path / "third.jsonl"))
        assert tip(repo) == settled and _export_beads(wp, tmp_path / "fourth.jsonl") == third
    # A fresh repository: import -> export -> import -> export gives the same file.
    fresh = make_repo(tmp_path / "fresh")
    with Workplane(str(fresh), agent="importer") as wp:
        wp.do("init")
        importers.run(wp, "beads", str(tmp_path / "first.jsonl"))
        assert _export_beads(wp, tmp_path / "again.jsonl") == first


def test_a_tombstone_and_a_cancel_survive_the_beads_round_trip(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "repo")
    lines = [json.loads(line) for line in REALISTIC.read_text().splitlines()]
    with Workplane(str(repo), agent="importer") as wp:
        wp.do("init")
        importers.run(wp, "beads", str(REALISTIC))
        pin = next(line for line in lines if line["id"] == "gw-pin")
        pin.update(status="tombstone", deleted_at="2025-03-05T00:00:00Z", deleted_by="maria")
        later = tmp_path / "later.jsonl"
        later.write_text("".join(json.dumps(line) + "\n" for line in lines))
        importers.run(wp, "beads", str(later))
        assert wp.item(importers.item_id("beads", "gw-pin")).status == "cancelled"
        wp.do("cancel", item=importers.item_id("beads", "gw-wait"), reason="vendor dropped")
        out = {line["id"]: line for line in _export_beads(wp, tmp_path / "out.jsonl")}
        assert out["gw-pin"]["status"] == "tombstone" and out["gw-wait"]["status"] == "closed"
        # The cancel is work done here: importing the export records it once (gitwork's close time
        # becomes the source's), then importing it again changes nothing.
        importers.run(wp, "beads", str(tmp_path / "out.jsonl"))
        before = tip(repo)
        result = importers.run(wp, "beads", str(tmp_path / "out.jsonl"))
        assert tip(repo) == before, (result, git(repo, "diff", before, "refs/gitwork/state"))
        # beads has one closed state: gitwork's cancel comes back as "closed", a conflict left alone.
        assert [(c["external"], c["field"], c["gitwork"]) for c in result["conflicts"]] == [
            ("gw-wait", "status", "cancelled")]


def test_items_made_in_gitwork_come_back_from_their_beads_export_unchanged(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "repo")
    with Workplane(str(repo), agent="alice") as wp:
        wp.do("init")
        importers.run(wp, "beads", str(REALISTIC))
        schema = wp.do("new", title="Native schema", criteria=["reviewed"], labels=["db"]).result["item"]
        api = wp.do("new", title="Native API", depends_on=[schema, importers.item_id("beads", "gw-api")]).result["item"]
        lease = wp.do("claim", item=schema).result
        wp.do("check", item=schema, criterion=1, fence=lease["fence"])
        wp.post(schema, "a note")
        out = {line["id"]: line for line in _export_beads(wp, tmp_path / "out.jsonl")}
        assert out[schema]["status"] == "in_progress" and "assignee" not in out[schema]
        assert {d["depends_on_id"] for d in out[api]["dependencies"]} == {schema, "gw-api"}
        items = len(wp.rows()[1])
        before = tip(repo)
        result = importers.run(wp, "beads", str(tmp_path / "out.jsonl"))
        assert tip(repo) == before and len(wp.rows()[1]) == items and result["conflicts"] == []
