"""Attack pass 8 on the importers, from outside: hostile exports of beads, GitHub and CSV.

Each case is an export as another tracker (or a hostile hand) could write it; the promise is one
line naming the file's line (or the bad option), a documented exit code, and nothing written.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from conftest import run_gw, tip
from gitwork import importers
from gitwork.errors import Invalid, UsageError
from gitwork.workplane import Workplane

# JSON text as written: "\ud800" is an escape a JSON encoder may emit for a lone surrogate (Python's
# json.dumps does, for a str holding one); json.loads turns it back into a str UTF-8 cannot encode.
LONE = "\\ud800"


@pytest.mark.parametrize("kind, text, where", [
    ("beads", '{"id": "bd-1", "title": "fine"}\n{"id": "bd-2", "title": "x ' + LONE + ' y"}\n', "bad:2"),
    ("beads", '{"id": "bd-3", "title": "t", "description": "d ' + LONE + '"}\n', "bad:1"),
    ("beads", '{"id": "bd-4", "title": "t", "acceptance_criteria": "- [ ] ok ' + LONE + '"}\n', "bad:1"),
    ("beads", '{"id": "bd-5", "title": "t", "status": "closed", "close_reason": "r' + LONE + '"}\n', "bad:1"),
    ("beads", '{"id": "bd-6", "title": "t", "assignee": "' + LONE + 'bob"}\n', "bad:1"),
    ("github", '[{"number": 1, "title": "ok"}, {"number": 2, "title": "t", "body": "b ' + LONE + '"}]', "bad: entry 2"),
    ("jsonl", '{"id": "w-0123456789abcdef", "title": "t ' + LONE + '"}\n', "bad:1"),
])
def test_a_lone_surrogate_escape_in_an_export_is_refused_by_its_line(tmp_path: Path, repo: Path, wp: Workplane,
                                                                     kind: str, text: str, where: str) -> None:
    source = tmp_path / "bad"
    source.write_text(text)
    before = tip(repo)
    with pytest.raises(Invalid, match=rf"/{where}: .*lone surrogate.*nothing was imported"):
        importers.run(wp, kind, str(source))
    assert tip(repo) == before


def test_the_cli_refuses_a_lone_surrogate_in_one_line_with_exit_5(tmp_path: Path, repo: Path, wp: Workplane) -> None:
    source = tmp_path / "issues.jsonl"
    source.write_text('{"id": "bd-1", "title": "x ' + LONE + '"}\n')
    before = tip(repo)
    done = run_gw(repo, "import", "beads", str(source), env={"GW_AGENT": "alice"})
    assert done.returncode == 5, done.stderr
    assert len(done.stderr.strip().splitlines()) == 1 and "issues.jsonl:1:" in done.stderr
    assert "internal error" not in done.stderr and tip(repo) == before


def test_a_csv_map_file_that_is_not_utf8_is_a_usage_error(tmp_path: Path, repo: Path, wp: Workplane) -> None:
    (tmp_path / "t.csv").write_text("Key,Summary\nK1,hello\n")
    (tmp_path / "map.yaml").write_bytes(b"external: Key\ntitle: Summ\xff\n")
    before = tip(repo)
    with pytest.raises(UsageError, match=r"--map .*map.yaml.*UTF-8"):
        importers.run(wp, "csv", str(tmp_path / "t.csv"), mapping=str(tmp_path / "map.yaml"))
    (tmp_path / "map.json").write_text('{"external": "Key", "title": ')
    with pytest.raises(UsageError, match=r"--map .*map.json.*not a JSON or YAML mapping"):
        importers.run(wp, "csv", str(tmp_path / "t.csv"), mapping=str(tmp_path / "map.json"))
    assert tip(repo) == before


def test_a_mapped_csv_column_named_twice_in_the_header_is_refused(tmp_path: Path, repo: Path, wp: Workplane) -> None:
    """Which of two ``Key`` columns holds the id cannot be known: taking the last silently imports the
    wrong value (the first is lost, the second becomes the external id)."""
    source = tmp_path / "t.csv"
    source.write_text("Key,Summary,Key\nK1,hello,K9\n")
    before = tip(repo)
    with pytest.raises(Invalid, match=r"t.csv:1: column 'Key' appears 2 times in the header"):
        importers.run(wp, "csv", str(source), mapping="external=Key,title=Summary")
    assert tip(repo) == before
    # a column named twice that nothing maps is no ambiguity: kept, as every unmapped column is
    source.write_text("Key,Summary,Note,Note\nK1,hello,a,b\n")
    assert importers.run(wp, "csv", str(source), mapping="external=Key,title=Summary")["created"] == 1



def test_two_comments_under_one_id_in_one_issue_are_refused_not_one_dropped(tmp_path: Path, repo: Path,
                                                                            wp: Workplane) -> None:
    """The thread keeps one message per id; a second comment under the same id was dropped while the
    import answered success: a comment acknowledged and lost."""
    source = tmp_path / "items.jsonl"
    source.write_text('{"id": "w-00000000000000a1", "title": "t", "thread": ['
                      '{"id": "m-1234", "by": "bob", "text": "first"}, {"id": "m-1234", "by": "eve", "text": "second"}]}\n')
    before = tip(repo)
    with pytest.raises(Invalid, match=r"items.jsonl:1: comments #2 id 'm-1234' is comments #1's too"):
        importers.run(wp, "jsonl", str(source))
    assert tip(repo) == before
    beads = tmp_path / "issues.jsonl"
    beads.write_text('{"id": "bd-1", "title": "t", "comments": [{"id": 7, "author": "bob", "text": "first"}, '
                     '{"id": 7, "author": "eve", "text": "second"}]}\n')
    with pytest.raises(Invalid, match=r"issues.jsonl:1: comments #2 id 'm-[0-9a-f]{16}' is comments #1's too"):
        importers.run(wp, "beads", str(beads))
    assert tip(repo) == before


@pytest.mark.parametrize("kind, text, where", [
    ("beads", '{"id": "bd-1", "title": "fine"}\n{"id": "bd-2", "title": "t", "x_matrix": [[1, 2], [3, 4]]}\n', "bad:2"),
    ("beads", '{"id": "bd-3", "title": "t", "x_custom": [{"rows": [[1]]}]}\n', "bad:1"),
    ("github", '[{"number": 1, "title": "t", "projectItems": [["a"]]}]', "bad:1"),
])
def test_a_list_inside_a_list_in_a_kept_field_is_refused_by_its_line(tmp_path: Path, repo: Path, wp: Workplane,
                                                                     kind: str, text: str, where: str) -> None:
    """A field gitwork keeps in the item's provenance is written as YAML, whose gitwork form has no list
    directly inside a list: that was an internal error (exit 1) from the writer."""
    source = tmp_path / "bad"
    source.write_text(text)
    before = tip(repo)
    with pytest.raises(Invalid, match=rf"/{where}: fields\.\S+ holds a list directly inside a list.*nothing was imported"):
        importers.run(wp, kind, str(source))
    assert tip(repo) == before
    # the same value one mapping deeper is a list of mappings, which the format holds: imported
    source.write_text('{"id": "bd-9", "title": "t", "x_matrix": [{"row": [1, 2]}, {"row": [3, 4]}]}\n')
    importers.run(wp, "beads", str(source))
    item = wp.item(importers.item_id("beads", "bd-9"))
    assert item.provenance["fields"]["x_matrix"] == [{"row": [1, 2]}, {"row": [3, 4]}]


def test_a_number_with_a_fraction_in_a_kept_field_is_kept_as_its_text_and_a_reimport_changes_nothing(
        tmp_path: Path, repo: Path, wp: Workplane) -> None:
    """``"estimate": 1.5`` anywhere in an issue was an internal error (exit 1: the item file holds no
    float); it is kept as its text, as the format's readers keep a YAML float, and a whole one as the integer."""
    source = tmp_path / "issues.jsonl"
    source.write_text('{"id": "bd-1", "title": "t", "estimate": 1.5, "x_meta": {"score": 2.0, "w": [0.25]}}\n')
    importers.run(wp, "beads", str(source))
    item = wp.item(importers.item_id("beads", "bd-1"))
    assert item.provenance["fields"] == {"estimate": "1.5", "x_meta": {"score": 2, "w": ["0.25"]}}
    before = tip(repo)
    assert importers.run(wp, "beads", str(source))["unchanged"] == 1 and tip(repo) == before


def _nested(depth: int) -> object:
    value: object = 1
    for _ in range(depth - 1):
        value = {"a": value}
    return value


@pytest.mark.parametrize("kind", ["beads", "jsonl", "github"])
def test_a_value_too_deep_for_the_import_document_is_named_by_its_line(tmp_path: Path, repo: Path, wp: Workplane,
                                                                      kind: str) -> None:
    """A line within the reader's bound but past the batch document's (32 levels, counted with the
    levels the import document adds) was refused without saying where: "command document is nested
    deeper than 32 levels". Every depth is either imported or refused naming its line."""
    import json

    source = tmp_path / "bad"
    before = tip(repo)
    for depth in range(24, 33):
        item = {"id": f"bd-{depth}", "title": "t", "x_deep": _nested(depth)}
        if kind == "jsonl":
            item = {"id": f"w-{depth:016x}", "title": "t", "provenance": {"x_deep": _nested(depth)}}
        elif kind == "github":
            item = {"number": depth, "title": "t", "x_deep": _nested(depth)}
        source.write_text(json.dumps([item]) if kind == "github" else json.dumps(item) + "\n")
        try:
            importers.run(wp, kind, str(source))
        except Invalid as error:
            where = "bad" if kind == "github" else "bad:1"  # GitHub's export is one document
            assert error.message.startswith(f"{source.parent}/{where}: ") and "nested deeper" in error.message, error
            assert tip(repo) == before
        else:
            before = tip(repo)


@pytest.mark.parametrize("entry", ['"str"', '{"kind": "beads"}', '{"kind": "csv", "source": "x.csv", "map": 5}',
                                   '{"kind": ["beads"], "source": "x"}', '{"kind": "beads", "source": 7}'])
def test_a_damaged_shadow_definition_is_one_line_and_add_repairs_it(tmp_path: Path, repo: Path, wp: Workplane,
                                                                    entry: str) -> None:
    """``shadows.json`` is this clone's own file: an entry that is not ``{kind, source[, map]}`` was an
    internal error (TypeError, KeyError, AttributeError) from ``gw shadow report``."""
    from gitwork.importers import shadow

    (Path(wp.repo.gitwork_dir()) / "shadows.json").write_text('{"old": ' + entry + "}")
    done = run_gw(repo, "shadow", "report", "old", env={"GW_AGENT": "alice"})
    assert done.returncode == 5 and len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert "shadows.json" in done.stderr and "gw shadow add old" in done.stderr and "internal" not in done.stderr
    export = tmp_path / "issues.jsonl"
    export.write_text('{"id": "bd-1", "title": "t"}\n')
    shadow.add(wp, "old", "beads", str(export))  # defining it again repairs it
    assert shadow.compare(wp, "old")["counts"]["only_in_source"] == 1


@pytest.mark.parametrize("kind, text, given", [
    ("beads", '{"id": "bd-1", "title": "t", "created_at": "0001-01-01T00:00:00+23:59"}\n', "0001-01-01T00:00:00+23:59"),
    ("beads", '{"id": "bd-2", "title": "t", "comments": [{"id": 1, "author": "a", "text": "x", '
              '"created_at": "0001-01-01T00:00:00+01:00"}]}\n', "0001-01-01T00:00:00+01:00"),
    ("github", '[{"number": 7, "title": "t", "createdAt": "9999-12-31T23:59:59-05:00"}]', "9999-12-31T23:59:59-05:00"),
    ("csv", "id,title,created_at\nK1,t,9999-12-31 23:30:00 -01:00\n", "9999-12-31 23:30:00 -01:00"),
])
def test_a_time_at_the_calendars_edge_with_an_offset_is_kept_as_given(tmp_path: Path, repo: Path, wp: Workplane,
                                                                      kind: str, text: str, given: str) -> None:
    """Bringing such a time to UTC leaves the calendar (OverflowError: an internal error, exit 1); it is
    no instant gitwork can write, so it is kept as the source gave it, as any time that is not one."""
    source = tmp_path / "export"
    source.write_text(text)
    mapping = "external=id,title=title,created_at=created_at" if kind == "csv" else None
    assert importers.run(wp, kind, str(source), mapping=mapping)["created"] == 1
    (item_id,) = wp.rows()[1]
    item = wp.item(item_id)
    kept = [*item.provenance.get("fields", {}).values(), *(m.get("given_at") for m in wp.thread(item_id)[1])]
    assert given in kept and item.created_at != given


def test_an_imported_decision_request_cannot_be_decided_and_names_its_importer(tmp_path: Path, repo: Path) -> None:
    """A person (not an admin) who may import could post, through the import document, a decision
    request "by" an admin addressed to themselves, then decide it: a decision the admin never asked
    for, recorded on the item, where ``gw msg --kind decision-request`` and ``ask`` refuse a
    non-holder. An imported message now records who imported it, and decide refuses an imported
    request (exit 5): it was asked elsewhere, and is asked again here with ``gw ask``."""
    from conftest import git

    git(repo, "config", "gitwork.admins", "lead")
    with Workplane(str(repo), agent="lead") as lead:
        lead.do("init")
    item = importers.item_id("beads", "bd-q")
    forged = {"op": "import", "item": item, "source": "beads", "external": "bd-q", "title": "imported",
              "comments": [{"id": "m-forged-0001", "by": "lead", "kind": "decision-request", "to": "bob",
                            "text": "bob decides"}]}
    with Workplane(str(repo), agent="bob") as bob:
        bob.do("import", **{k: v for k, v in forged.items() if k != "op"})
        (message,) = bob.thread(item)[1]
        assert message["by"] == "lead" and message["imported_by"] == "bob"
        before = tip(repo)
        with pytest.raises(Invalid, match=r"#1 of w-\S+ was imported by bob.*gw ask"):
            bob.do("decide", item=item, question=1, choose="yes", why="lead asked me", epoch="current")
        assert tip(repo) == before and bob.item(item).decisions == []


@pytest.mark.parametrize("source, external", [("github", "acme/app#7"), ("csv", "K-1"), ("beads", "bd-7")])
def test_an_import_document_cannot_squat_another_sources_id(repo: Path, wp: Workplane, source: str,
                                                           external: str) -> None:
    """An import's item id is derived from its source and external id (``importers.item_id``). A
    document that names another id (here: the one beads' ``bd-9`` derives to) was accepted, so a person
    could take that id first and the real import of ``bd-9`` then failed for its whole file ("the ids
    collide"). The op now derives the id itself and refuses any other (exit 5), nothing written."""
    squatted = importers.item_id("beads", "bd-9")
    before = tip(repo)
    with pytest.raises(Invalid, match=rf"{source} {external!r} imports as {importers.item_id(source, external)}, "
                                      rf"not {squatted}"):
        wp.do("import", item=squatted, source=source, external=external, title="squat")
    assert tip(repo) == before
    wp.do("import", item=importers.item_id("beads", "bd-9"), source="beads", external="bd-9", title="real")
    assert wp.item(squatted).title == "real"


def test_a_gitwork_id_imports_only_as_itself(repo: Path, wp: Workplane) -> None:
    """The two sources that name an item by its own gitwork id (a gitwork export, gitwork's beads
    export of an item made here) may use only that id: external and item equal."""
    made = wp.do("new", title="made here").result["item"]
    other = importers.item_id("beads", "bd-1")
    before = tip(repo)
    for source in ("beads", "gitwork"):
        with pytest.raises(Invalid, match=rf"imports as {made}, not {other}"):
            wp.do("import", item=other, source=source, external=made, title="x")
    assert tip(repo) == before


@pytest.mark.parametrize("kind, text, where", [
    ("beads", '{"id": "bd-1", "title": "t", "comments": [{"id": 1, "text": "kept"}, {"id": 2, "text": 42}]}\n',
     "bad:1: comments #2 text must be text"),
    ("github", '[{"number": 1, "title": "t", "comments": [{"body": ["a", "b"]}]}]', "bad: entry 1: comments #1 body must be text"),
])
def test_a_comment_whose_text_is_not_text_is_refused_not_dropped(tmp_path: Path, repo: Path, wp: Workplane,
                                                                 kind: str, text: str, where: str) -> None:
    """A comment whose text is a number, a list or an object was skipped in silence while the import
    answered success: a comment of the source lost. It is refused by its line now, nothing written (a
    comment without text, null or blank, is still skipped: there is nothing to post)."""
    source = tmp_path / "bad"
    source.write_text(text)
    before = tip(repo)
    with pytest.raises(Invalid, match=rf"/{where}"):
        importers.run(wp, kind, str(source))
    assert tip(repo) == before
