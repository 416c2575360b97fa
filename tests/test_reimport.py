"""Re-importing never loses work done in gitwork (issue 24, point 7).

A re-import is a three-way merge per field: the base is what the last import wrote (kept in the
item's provenance, ``imported``), "theirs" the source now, "ours" the item now. A field changes only
when the source changed it since the last import; a change on both sides is a conflict, reported and
left alone unless ``prefer="source"``. Dependencies merge as sets. The whole file is validated before
anything is committed, and a refusal names the file's line. Real repositories throughout.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from conftest import run_gw, tip
from gitwork import importers
from gitwork.errors import Invalid
from gitwork.ops.imports import merge_set, merge_value
from gitwork.workplane import Workplane


def bead(external: str) -> str:
    return importers.item_id("beads", external)


def write(path: Path, lines: list[dict]) -> None:
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))


def base_lines() -> list[dict]:
    return [
        {"id": "bd-1", "title": "Schema", "status": "open", "priority": 1, "created_at": "2025-01-09T12:00:00Z"},
        {"id": "bd-2", "title": "API", "status": "open", "priority": 2, "created_at": "2025-01-09T12:01:00Z",
         "dependencies": [{"issue_id": "bd-2", "depends_on_id": "bd-1", "type": "blocks"}]},
        {"id": "bd-3", "title": "Docs", "status": "open", "priority": 3, "created_at": "2025-01-09T12:02:00Z"},
    ]


def test_done_in_gitwork_stays_done_on_a_reimport(tmp_path: Path, repo: Path, wp: Workplane) -> None:
    source = tmp_path / "issues.jsonl"
    write(source, base_lines())
    importers.run(wp, "beads", str(source))
    lease = wp.do("claim", item=bead("bd-1")).result
    wp.do("done", item=bead("bd-1"), fence=lease["fence"])
    before = tip(repo)
    again = importers.run(wp, "beads", str(source))
    assert wp.item(bead("bd-1")).status == "done"
    assert again["conflicts"] == [] and again["updated"] == 0 and tip(repo) == before


def test_a_dependency_added_in_gitwork_stays_and_one_removed_in_the_source_goes(tmp_path: Path, repo: Path,
                                                                               wp: Workplane) -> None:
    source = tmp_path / "issues.jsonl"
    lines = base_lines()
    write(source, lines)
    importers.run(wp, "beads", str(source))
    wp.do("edit", item=bead("bd-3"), add_deps=[bead("bd-2")])
    importers.run(wp, "beads", str(source))
    assert wp.item(bead("bd-3")).depends_on == [bead("bd-2")]  # added here: kept
    lines[1]["dependencies"] = []  # the source drops bd-2 -> bd-1
    lines[2]["dependencies"] = [{"issue_id": "bd-3", "depends_on_id": "bd-1", "type": "blocks"}]  # and adds one
    write(source, lines)
    result = importers.run(wp, "beads", str(source))
    assert wp.item(bead("bd-2")).depends_on == []
    assert sorted(wp.item(bead("bd-3")).depends_on) == sorted([bead("bd-2"), bead("bd-1")])
    assert result["conflicts"] == []


def test_a_change_on_both_sides_is_a_conflict_reported_and_left_alone(tmp_path: Path, repo: Path,
                                                                      wp: Workplane) -> None:
    source = tmp_path / "issues.jsonl"
    lines = base_lines()
    write(source, lines)
    importers.run(wp, "beads", str(source))
    wp.do("edit", item=bead("bd-1"), title="Schema (ours)")
    wp.do("edit", item=bead("bd-3"), priority=0)  # a gitwork-side change the source does not touch
    lines[0]["title"] = "Schema (theirs)"
    lines[2]["title"] = "Docs (theirs)"  # a source-side change gitwork did not touch
    write(source, lines)
    result = importers.run(wp, "beads", str(source))
    assert result["conflicts"] == [{"item": bead("bd-1"), "external": "bd-1", "field": "title",
                                    "gitwork": "Schema (ours)", "source": "Schema (theirs)", "base": "Schema"}]
    assert wp.item(bead("bd-1")).title == "Schema (ours)"
    assert wp.item(bead("bd-3")).title == "Docs (theirs)" and wp.item(bead("bd-3")).priority == 0
    # The conflict stays reported until it is settled; a re-run changes nothing.
    before = tip(repo)
    assert importers.run(wp, "beads", str(source))["conflicts"] == result["conflicts"]
    assert tip(repo) == before
    # The CLI names it, per item and field, on stderr and in --json.
    done = run_gw(repo, "import", "beads", str(source), "--json")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["conflicts"][0]["field"] == "title"
    done = run_gw(repo, "import", "beads", str(source))
    assert "1 conflict" in done.stderr and "bd-1" in done.stderr and "title" in done.stderr
    # --prefer source takes the source's value.
    done = run_gw(repo, "import", "beads", str(source), "--prefer", "source")
    assert done.returncode == 0, done.stderr
    assert wp.item(bead("bd-1")).title == "Schema (theirs)"
    assert importers.run(wp, "beads", str(source))["conflicts"] == []


def test_an_item_someone_holds_is_a_conflict_not_closed(tmp_path: Path, repo: Path, wp: Workplane) -> None:
    source = tmp_path / "issues.jsonl"
    source.write_text('{"id": "bd-1", "title": "t"}\n')
    importers.run(wp, "beads", str(source))
    with Workplane(str(repo), agent="carol") as carol:
        carol.do("claim", item=bead("bd-1"))
    before = tip(repo)
    source.write_text('{"id": "bd-1", "title": "t", "status": "closed"}\n')
    result = importers.run(wp, "beads", str(source))
    assert [(c["field"], c["gitwork"], c["source"]) for c in result["conflicts"]] == [
        ("status", "in_progress", "done")]
    assert tip(repo) == before and wp.item(bead("bd-1")).status == "in_progress"
    with pytest.raises(Exception, match="held by carol"):  # the source cannot take a live lease away
        importers.run(wp, "beads", str(source), prefer="source")
    assert tip(repo) == before


def test_an_oversize_field_on_line_205_refuses_the_whole_file(tmp_path: Path, repo: Path, wp: Workplane) -> None:
    source = tmp_path / "issues.jsonl"
    lines = [{"id": f"bd-{n}", "title": f"item {n}", "created_at": "2025-01-09T12:00:00Z"} for n in range(1, 301)]
    lines[204]["notes"] = "x" * (300 * 1024)  # kept in provenance: over the 256 KiB a structured field may hold
    write(source, lines)
    before = tip(repo)
    with pytest.raises(Invalid, match=r"issues\.jsonl:205: ") as raised:
        importers.run(wp, "beads", str(source), size=100)  # line 205 is in the third batch
    assert "#" not in str(raised.value) and "nothing was imported" in str(raised.value)
    assert tip(repo) == before
    done = run_gw(repo, "import", "beads", str(source), "--batch", "100")
    assert done.returncode == 5 and "issues.jsonl:205:" in done.stderr and done.stderr.count("\n") == 1
    assert tip(repo) == before


def test_a_bad_reference_is_found_before_the_first_batch(tmp_path: Path, repo: Path, wp: Workplane) -> None:
    source = tmp_path / "issues.jsonl"
    lines = [{"id": f"bd-{n}", "title": f"item {n}"} for n in range(1, 21)]
    lines[14]["id"] = "x" * 1100  # longer than an external id may be
    write(source, lines)
    before = tip(repo)
    with pytest.raises(Invalid, match=r"issues\.jsonl:15: "):
        importers.run(wp, "beads", str(source), size=5)
    assert tip(repo) == before


@pytest.mark.parametrize("status", ["in_progress", "hooked", "pinned", "blocked", "deferred", "someday"])
def test_not_ready_beads_statuses_stay_out_of_ready(tmp_path: Path, repo: Path, wp: Workplane, status: str) -> None:
    source = tmp_path / "issues.jsonl"
    write(source, [{"id": "bd-1", "title": "t", "status": status, "assignee": "alice"},
                   {"id": "bd-2", "title": "free", "status": "open"}])
    importers.run(wp, "beads", str(source))
    assert {row[0] for row in wp.ready()} == {bead("bd-2")}
    done = run_gw(repo, "ready", "--json")
    assert bead("bd-1") not in done.stdout and bead("bd-2") in done.stdout


@settings(max_examples=300, deadline=None)
@given(st.sampled_from("abc"), st.sampled_from("abc"), st.sampled_from("abc"), st.booleans())
def test_three_way_merge_of_a_value(base: str, ours: str, theirs: str, prefer_source: bool) -> None:
    value, conflict = merge_value(base, ours, theirs, prefer_source=prefer_source)
    if theirs == base or ours == theirs:
        assert (value, conflict) == (ours, False)  # the source did not change it, or both agree
    elif ours == base:
        assert (value, conflict) == (theirs, False)  # only the source changed it
    else:
        assert conflict and value == (theirs if prefer_source else ours)
    # Merging again against the value taken changes nothing (idempotent when the base is updated).
    if not conflict:
        assert merge_value(theirs, value, theirs, prefer_source=prefer_source) == (value, False)


@settings(max_examples=300, deadline=None)
@given(st.sets(st.integers(0, 6)), st.sets(st.integers(0, 6)), st.sets(st.integers(0, 6)))
def test_three_way_merge_of_a_set(base: set, ours: set, theirs: set) -> None:
    merged = merge_set(sorted(base), sorted(ours), sorted(theirs))
    assert len(merged) == len(set(merged))
    result = set(merged)
    assert (ours - base) <= result  # added here: kept
    assert (theirs - base) <= result  # added there: taken
    assert not ((base - theirs) & result)  # removed there: gone
    assert not ((base - ours) & result)  # removed here: stays out
    assert result <= ours | theirs
    assert merge_set(sorted(theirs), merged, sorted(theirs)) == merged  # again: no change


def test_a_race_while_deciding_lands_nothing_and_the_import_decides_again(
        tmp_path: Path, repo: Path, wp: Workplane) -> None:
    """The batches are decided first and land by one move of the ref: another writer moving the
    state meanwhile lands none of them; the import decides again on the new tip (and sees the lease
    taken meanwhile, naming its line)."""
    source = tmp_path / "issues.jsonl"
    lines = [{"id": f"bd-{n}", "title": f"item {n}"} for n in range(1, 11)]
    write(source, lines)
    importers.run(wp, "beads", str(source))
    for line in lines:
        line["status"] = "closed"
    write(source, lines)
    before = tip(repo)

    def racing(done: int, total: int) -> None:
        if done == 5:  # the first batch decided: carol claims an item of the second
            with Workplane(str(repo), agent="carol") as carol:
                carol.do("claim", item=bead("bd-8"))

    with pytest.raises(Exception, match=r"issues\.jsonl:8: .*held by carol.*nothing was imported"):
        importers.run(wp, "beads", str(source), size=5, prefer="source", progress=racing)
    landed = wp.store.snapshot().info
    assert landed is not None and list(landed.parents) == [before]  # carol's claim only: no batch landed
    assert [wp.item(bead(f"bd-{n}")).status for n in range(1, 11)] == ["open"] * 7 + ["in_progress", "open", "open"]


def test_a_batch_refused_after_a_race_midway_names_its_line_and_a_rerun_finishes(
        tmp_path: Path, repo: Path, wp: Workplane, monkeypatch: pytest.MonkeyPatch) -> None:
    """After a lost race the batches go one by one: one refused after another writer moved the state
    between two of them leaves the ones before it; running the import again finishes it."""
    source = tmp_path / "issues.jsonl"
    lines = [{"id": f"bd-{n}", "title": f"item {n}"} for n in range(1, 11)]
    write(source, lines)
    importers.run(wp, "beads", str(source))
    for line in lines:
        line["status"] = "closed"
    write(source, lines)
    real = wp.submit
    sent: list[int] = []

    def racing(doc: dict):  # type: ignore[no-untyped-def]
        sent.append(len(doc["ops"]))
        if len(sent) == 2:  # between batch 1 and batch 2, carol claims an item of batch 2
            with Workplane(str(repo), agent="carol") as carol:
                carol.do("claim", item=bead("bd-8"))
        return real(doc)

    def moving(done: int, total: int) -> None:
        if done == 5 and not sent:  # while deciding: someone else writes, so the decided batches lose
            with Workplane(str(repo), agent="dave") as dave:
                dave.do("new", title="unrelated")

    monkeypatch.setattr(wp, "submit", racing)
    with pytest.raises(Exception, match=r"issues\.jsonl:8: .*held by carol.*1 of 2 batches landed.*run it again"):
        importers.run(wp, "beads", str(source), size=5, prefer="source", progress=moving)
    assert [wp.item(bead(f"bd-{n}")).status for n in (1, 5, 6)] == ["done", "done", "open"]
    monkeypatch.setattr(wp, "submit", real)
    with Workplane(str(repo), agent="carol") as carol:
        carol.do("release", item=bead("bd-8"))
    again = importers.run(wp, "beads", str(source), size=5, prefer="source")  # idempotent: finishes it
    assert again["updated"] == 5 and {wp.item(bead(f"bd-{n}")).status for n in range(1, 11)} == {"done"}


def test_prefer_must_be_gitwork_or_source(tmp_path: Path, repo: Path, wp: Workplane) -> None:
    source = tmp_path / "issues.jsonl"
    write(source, base_lines())
    before = tip(repo)
    done = run_gw(repo, "import", "beads", str(source), "--prefer", "theirs")
    assert done.returncode == 2 and "--prefer must be one of gitwork, source" in done.stderr
    assert done.stderr.count("\n") == 1 and tip(repo) == before


def test_every_document_is_decided_once_and_an_unchanged_one_without_parsing_its_item(
        tmp_path: Path, repo: Path, wp: Workplane, monkeypatch: pytest.MonkeyPatch) -> None:
    """Speed as behaviour: a multi-batch import decides each document once (no second pass), lands
    only the batches that change something, and a document unchanged since it was last taken whole
    is answered from the item file's digest, never parsing the item."""
    from gitwork import engine

    source = tmp_path / "issues.jsonl"
    lines = [{"id": f"bd-{n}", "title": f"item {n}"} for n in range(1, 13)]
    write(source, lines)
    decided: list[str] = []
    real_import = engine.OPS["import"].func

    def counting(ctx):  # type: ignore[no-untyped-def]
        decided.append(ctx.cmd["external"])
        return real_import(ctx)

    monkeypatch.setattr(engine.OPS["import"], "func", counting)
    first = importers.run(wp, "beads", str(source), size=5)
    assert (first["created"], first["batches"], len(first["commits"])) == (12, 3, 3)
    assert sorted(decided) == sorted(line["id"] for line in lines)  # once each
    parsed: list[str] = []
    real_item = engine.Context.item

    def parsing(self, item_id):  # type: ignore[no-untyped-def]
        parsed.append(item_id)
        return real_item(self, item_id)

    monkeypatch.setattr(engine.Context, "item", parsing)
    before = tip(repo)
    again = importers.run(wp, "beads", str(source), size=5)
    assert again["unchanged"] == 12 and again["commits"] == [] and tip(repo) == before and parsed == []
    lines[2]["title"] = "item 3, renamed"
    lines[10]["title"] = "item 11, renamed"
    wp.do("edit", item=bead("bd-7"), title="ours")
    lines[6]["title"] = "theirs"  # a conflict: reported, left alone, and no digest kept for it
    write(source, lines)
    result = importers.run(wp, "beads", str(source), size=5)
    assert (result["updated"], result["unchanged"], len(result["commits"])) == (2, 10, 2)  # batches 1 and 3
    assert [(c["external"], c["field"]) for c in result["conflicts"]] == [("bd-7", "title")]
    parsed.clear()
    settled = tip(repo)
    again = importers.run(wp, "beads", str(source), size=5)  # the conflict is reported again, every time
    assert [(c["external"], c["field"]) for c in again["conflicts"]] == [("bd-7", "title")]
    assert tip(repo) == settled and set(parsed) == {bead("bd-7")}
    again = importers.run(wp, "beads", str(source), size=5, prefer="source")  # and settled by --prefer source
    assert again["updated"] == 1 and wp.item(bead("bd-7")).title == "theirs"


def test_every_import_commit_replays_to_the_same_tree_on_its_parent(tmp_path: Path, repo: Path) -> None:
    """The arbiter re-applies every pushed commit: an import's outcome depends only on the parent
    tree, the recorded document, the time and the settings (not on the importer's process)."""
    from conftest import Clock, git
    from gitwork import engine

    clock = Clock()
    source = tmp_path / "issues.jsonl"
    lines = base_lines()
    with Workplane(str(repo), agent="lead", now=clock) as wp:
        wp.do("init")
        write(source, lines)
        importers.run(wp, "beads", str(source))
        clock.advance(60)
        wp.do("edit", item=bead("bd-1"), title="Schema (ours)")
        wp.do("edit", item=bead("bd-3"), add_deps=[bead("bd-2")])
        with Workplane(str(repo), agent="carol", now=clock) as carol:
            carol.do("claim", item=bead("bd-2"), ttl="1h", force=True)
        lines[0]["title"] = "Schema (theirs)"  # a conflict
        lines[1]["status"] = "closed"  # held by carol: a conflict too
        lines[2].update(priority=0, dependencies=[{"issue_id": "bd-3", "depends_on_id": "bd-1", "type": "blocks"}])
        write(source, lines)
        clock.advance(60)
        result = importers.run(wp, "beads", str(source), size=2)  # several batches: the checked path
        assert {c["field"] for c in result["conflicts"]} == {"title", "status"} and result["commits"]
        for commit in git(repo, "rev-list", "refs/gitwork/state").split():
            doc = engine.parse_command_from_message(git(repo, "log", "-1", "--format=%B", commit) + "\n")
            if doc is None or doc["op"] != "batch":
                continue
            parent = wp.store.snapshot(git(repo, "rev-parse", f"{commit}^"))
            at = clock.__class__(dt_from(git(repo, "log", "-1", "--format=%at", commit)))()
            outcome = engine.apply(parent, doc, at, wp.settings)
            again = engine.land(wp.store, parent, doc, outcome, at)
            # Only the command's own record may differ: it keeps the digest of the document as first asked
            # for, which a replay of the recorded (resolved) document does not have.
            differ = git(repo, "diff", "--name-only", commit, again).split()
            assert all(path.startswith("commands/") for path in differ), git(repo, "diff", commit, again)


def dt_from(epoch: str):  # type: ignore[no-untyped-def]
    import datetime as dt

    return dt.datetime.fromtimestamp(int(epoch), tz=dt.timezone.utc)


def test_an_item_imported_before_bases_were_kept_reports_differences_as_conflicts(
        tmp_path: Path, repo: Path, wp: Workplane) -> None:
    """No base (an older gitwork imported it): which side changed a field cannot be known, so a
    difference is a conflict, never a silent overwrite; --prefer source settles it and records a base."""
    from conftest import git
    from gitwork import codec, layout
    from gitwork.store import identity_signature

    source = tmp_path / "issues.jsonl"
    lines = base_lines()
    write(source, lines)
    importers.run(wp, "beads", str(source))
    lease = wp.do("claim", item=bead("bd-1")).result
    wp.do("done", item=bead("bd-1"), fence=lease["fence"])
    # What an older gitwork left: the same item without provenance.imported, nor the digest of the
    # document last taken whole (a commit made with the store).
    for name in ("bd-1", "bd-3"):
        doc = wp.item(bead(name)).to_doc()
        doc["provenance"].pop("imported")
        doc["provenance"].pop("digest")
        snapshot = wp.store.snapshot()
        path = layout.item_path(bead(name), layout.ITEM_FILE)
        commit = wp.store.write_commit(snapshot, {path: codec.dump_yaml(doc)}, "older import\n",
                                       identity_signature("lead"), 1_700_000_000)
        git(repo, "update-ref", "refs/gitwork/state", commit, snapshot.commit)
    lines[2]["title"] = "Docs (theirs)"
    write(source, lines)
    result = importers.run(wp, "beads", str(source))
    assert {(c["external"], c["field"]) for c in result["conflicts"]} == {("bd-1", "status"), ("bd-3", "title")}
    assert "base" not in result["conflicts"][0]
    assert wp.item(bead("bd-1")).status == "done" and wp.item(bead("bd-3")).title == "Docs"
    importers.run(wp, "beads", str(source), prefer="source")
    assert wp.item(bead("bd-3")).title == "Docs (theirs)" and "imported" in wp.item(bead("bd-3")).provenance


def test_a_field_the_source_drops_is_merged_like_any_change(tmp_path: Path, repo: Path, wp: Workplane) -> None:
    """An assignee (or parent, priority) removed in the source since the last import: gitwork did not
    touch it, so it goes; changed here too, it is a conflict, left as gitwork has it."""
    source = tmp_path / "issues.jsonl"
    lines = base_lines()
    lines[0]["assignee"] = "alice"
    lines[1]["assignee"] = "bob"
    lines[2]["dependencies"] = [{"issue_id": "bd-3", "depends_on_id": "bd-1", "type": "parent-child"}]
    write(source, lines)
    importers.run(wp, "beads", str(source))
    assert (wp.item(bead("bd-1")).owner, wp.item(bead("bd-3")).parent) == ("alice", bead("bd-1"))
    wp.do("edit", item=bead("bd-2"), owner="carol")  # changed here
    for line in lines:
        line.pop("assignee", None)
        line.pop("priority", None)
    lines[2]["dependencies"] = []
    write(source, lines)
    result = importers.run(wp, "beads", str(source))
    assert wp.item(bead("bd-1")).owner is None  # dropped there, untouched here: removed
    assert wp.item(bead("bd-3")).parent is None and wp.item(bead("bd-1")).priority == 2  # the default
    assert wp.item(bead("bd-2")).owner == "carol"  # dropped there, changed here: a conflict, ours kept
    assert [(c["external"], c["field"], c["gitwork"], c["source"]) for c in result["conflicts"]] == [
        ("bd-2", "owner", "carol", None)]
    before = tip(repo)
    assert importers.run(wp, "beads", str(source))["updated"] == 0 and tip(repo) == before  # settled


def test_a_digest_planted_in_text_written_here_does_not_stop_a_source_change(
        tmp_path: Path, repo: Path, wp: Workplane) -> None:
    """The digest is read from the item file's bytes: only the provenance's own key counts. A
    description edited here that spells out the digest of the source's next document (lines that look
    like a top-level provenance and its digest), or a kept source field named digest, changes nothing:
    the next document is merged, not answered unchanged."""
    from gitwork.ops.imports import _digest, _digest_line

    source = tmp_path / "issues.jsonl"
    lines = base_lines()
    lines[0]["digest"] = "kept as provenance.fields.digest"
    write(source, lines)
    importers.run(wp, "beads", str(source))
    lines[0]["title"] = "Schema, renamed there"
    write(source, lines)
    planned = [d for d in importers.plan("beads", importers.read("beads", str(source)), str(source))
               if d["external"] == "bd-1"][0]
    planted = _digest_line(_digest(planned)).decode()
    wp.do("edit", item=bead("bd-1"), description=f"notes\nprovenance:\n{planted}\n{planted.strip()}\n")
    result = importers.run(wp, "beads", str(source))
    assert wp.item(bead("bd-1")).title == "Schema, renamed there" and result["updated"] == 1
    assert wp.item(bead("bd-1")).provenance["fields"]["digest"] == "kept as provenance.fields.digest"
