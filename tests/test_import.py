"""gw import beads|github|csv (issue 16): every field, provenance, idempotence, bad input.

Fixtures (tests/fixtures/import/) are written from the formats' documentation: beads' issues.jsonl
(dependency types, comments, a tombstone, a deferred issue), ``gh issue list --json`` (open and
closed, labels, assignees, comments), and a CSV with quoting, embedded line breaks and non-ASCII.
Imports run through the library in-process (real repositories); one case runs the real ``gw``.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from conftest import git, run_gw, tip
from gitwork import importers
from gitwork.errors import Invalid, NotFound, UsageError
from gitwork.workplane import Workplane

FIXTURES = Path(__file__).parent / "fixtures" / "import"
CSV_MAP = "external=Key,title=Summary,description=Details,status=State,priority=Prio,owner=Assignee,labels=Tags," \
          "depends_on=Blocked by"


def bead(external: str) -> str:
    return importers.item_id("beads", external)


def changed_paths(repo: Path, old: str, new: str) -> set[str]:
    return set(git(repo, "diff", "--name-only", old, new, "--", "items").split())


def test_beads_every_field_dependency_type_comment_and_tombstone(repo: Path, wp: Workplane) -> None:
    result = importers.run(wp, "beads", str(FIXTURES / "beads.jsonl"))
    assert (result["created"], len(result["commits"]), result["comments"]) == (5, 1, 2)
    epic, token, store, audit, gone, deferred = (bead(f"bd-a{n}") for n in range(1, 7))
    item = wp.item(token)
    assert item.title == "Token endpoint" and item.status == "in_progress" and item.owner == "alice"
    assert item.depends_on == [store]  # blocks → dependency
    assert item.parent == epic  # parent-child → parent link
    assert item.extra["links"] == [{"kind": "related", "item": audit}]  # blocks nothing
    assert item.criteria == [{"text": "issues tokens", "checked": True}, {"text": "refresh works", "checked": False}]
    assert item.created_at == "2025-01-09T12:01:00Z"
    prov = item.provenance
    assert prov["source"] == {"kind": "beads", "ref": "bd-a2"}
    assert prov["fields"] == {"issue_type": "task", "updated_at": "2025-01-10T17:30:00Z", "estimated_minutes": 90,
                              "dependencies": [
                                  {"issue_id": "bd-a2", "depends_on_id": "bd-a1", "type": "parent-child",
                                   "created_at": "2025-01-09T12:05:00Z"},
                                  {"issue_id": "bd-a2", "depends_on_id": "bd-a3", "type": "blocks",
                                   "created_at": "2025-01-09T12:06:00Z"},
                                  {"issue_id": "bd-a2", "depends_on_id": "bd-a4", "type": "related"}]}
    assert wp.item(audit).extra["links"] == [{"kind": "discovered-from", "item": token}]
    assert wp.item(store).status == "done" and wp.item(store).closed_reason == "Merged in #12"
    assert wp.item(epic).provenance["fields"]["design"] == "OAuth2 with PKCE\nsee RFC 7636"
    # Names gitwork's rules refuse: mapped by the documented rule, the original kept.
    assert wp.item(audit).owner == "Jose-Nunez" and wp.item(audit).labels == ["good-first-issue", "ops"]
    assert wp.item(audit).provenance["original"] == {"owner": "José Núñez",
                                                     "labels": {"good-first-issue": "good first issue"}}
    # Comments: thread messages with their authors and original times (the engine stamps its own `at`).
    _, thread = wp.thread(token)
    assert [(m["by"], m["text"], m.get("written_at"), m.get("author")) for m in thread] == [
        ("alice", "Starting on this", "2025-01-10T16:00:00Z", None),
        ("Bob-Smith", "Use the new key store", "2025-01-10T17:30:00Z", "Bob Smith")]
    # The tombstone is not a live item; what depended on it keeps the reference in provenance.
    with pytest.raises(NotFound):
        wp.item(gone)
    assert wp.item(deferred).status == "blocked" and wp.item(deferred).depends_on == []
    assert wp.item(deferred).provenance["fields"]["unresolved"] == ["bd-a5"]
    wp.do("edit", item=token, add_labels=["kept"])  # another op rewrites item.yaml: parent and links stay
    assert wp.item(token).parent == epic and wp.item(token).extra == {"links": [{"kind": "related", "item": audit}]}
    ready = {row[0] for row in wp.ready()}
    assert ready == {epic, audit}  # token is in progress in beads, deferred is blocked, store is done


@pytest.mark.parametrize("kind, name, mapping", [("beads", "beads.jsonl", None), ("github", "github.json", None),
                                                 ("csv", "tracker.csv", CSV_MAP)])
def test_reimport_of_an_unchanged_file_writes_nothing(repo: Path, wp: Workplane, kind: str, name: str,
                                                      mapping: str | None) -> None:
    first = importers.run(wp, kind, str(FIXTURES / name), mapping=mapping)
    assert first["created"] >= 3
    before = tip(repo)
    again = importers.run(wp, kind, str(FIXTURES / name), mapping=mapping)
    assert again["commits"] == [] and again["created"] == again["updated"] == 0
    assert tip(repo) == before


def test_reimport_of_a_changed_file_writes_exactly_the_changes(tmp_path: Path, repo: Path, wp: Workplane) -> None:
    source = tmp_path / "issues.jsonl"
    shutil.copy(FIXTURES / "beads.jsonl", source)
    importers.run(wp, "beads", str(source))
    before = tip(repo)
    lines = [json.loads(line) for line in source.read_text().splitlines()]
    lines[0]["title"] = "Auth epic (renamed)"
    lines[2]["comments"] = [{"id": 7, "author": "carol", "text": "Verified", "created_at": "2025-01-12T00:00:00Z"}]
    source.write_text("".join(json.dumps(line) + "\n" for line in lines))
    result = importers.run(wp, "beads", str(source))
    assert (result["updated"], result["created"], result["comments"]) == (2, 0, 1)
    assert git(repo, "rev-list", "--count", f"{before}..refs/gitwork/state").strip() == "1"
    touched = changed_paths(repo, before, tip(repo))
    epic, store = bead("bd-a1"), bead("bd-a3")
    assert {p.split("/")[2] for p in touched} == {epic, store}
    assert wp.item(epic).title == "Auth epic (renamed)"
    events = wp.history(epic)
    assert events[-1]["type"] == "import-updated" and events[-1]["changes"] == ["title"]
    assert [m["text"] for m in wp.thread(store)[1]] == ["Verified"]


def test_github_open_and_closed_with_labels_assignees_and_comments(repo: Path, wp: Workplane) -> None:
    importers.run(wp, "github", str(FIXTURES / "github.json"))
    crash, typo, rust = (wp.item(importers.item_id("github", n)) for n in ("101", "102", "103"))
    assert crash.status == "open" and crash.owner == "hubot" and crash.labels == ["bug", "help-wanted"]
    assert crash.provenance["source"] == {"kind": "github", "ref": "101", "url": "https://github.com/o/r/issues/101"}
    assert crash.provenance["fields"]["assignees"] == ["hubot", "monalisa"]
    assert crash.provenance["fields"]["milestone"] == {"number": 3, "title": "v2.4"}
    assert crash.description == "Steps:\n1. empty file\n2. run"
    assert [(m["by"], m["text"], m["written_at"]) for m in wp.thread(crash.id)[1]] == [
        ("monalisa", "Reproduced on 2.3", "2025-02-01T10:00:00Z")]
    assert (typo.status, typo.closed_reason) == ("done", "completed")
    assert (rust.status, rust.closed_reason) == ("cancelled", "not planned")


def test_csv_with_a_mapping_quoting_line_breaks_and_non_ascii(repo: Path, wp: Workplane) -> None:
    importers.run(wp, "csv", str(FIXTURES / "tracker.csv"), mapping=CSV_MAP)
    plan, cafe, runbook = (wp.item(importers.item_id("csv", k)) for k in ("T-1", "T-2", "T-3"))
    assert plan.title == 'Plan the "big" migration' and plan.description == "Line one\r\nline two, with a comma"
    assert plan.owner == "Zoe" and plan.provenance["original"] == {"owner": "Zoë"}
    assert plan.labels == ["db", "planning"] and plan.provenance["fields"] == {"Sprint": "S1", "status": "To Do"}
    assert cafe.title == "Café menu in Ünïcode ☕" and cafe.status == "done" and cafe.depends_on == [plan.id]
    assert runbook.status == "blocked" and runbook.depends_on == [plan.id, cafe.id]


def test_the_cli_imports_with_json_and_no_progress_bar_when_not_a_terminal(repo: Path, wp: Workplane) -> None:
    done = run_gw(repo, "import", "beads", str(FIXTURES / "beads.jsonl"), "--json", "--batch", "2")
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    # 7 documents (6 lines, one item's forward links, sent last) in 4 batches of 2, one commit each.
    assert result["created"] == 5 and result["batches"] == 4 and len(result["commits"]) == 4
    assert "importing" not in done.stderr


# --- bad input -----------------------------------------------------------------------------------------


def refused(tmp_path: Path, repo: Path, wp: Workplane, kind: str, text: str, says: str,
            error: type = Invalid, mapping: str | None = None) -> None:
    source = tmp_path / "bad"
    source.write_text(text)
    before = tip(repo)
    with pytest.raises(error, match=says):
        importers.run(wp, kind, str(source), mapping=mapping, size=1)
    assert tip(repo) == before  # nothing imported, not even the batches before the bad line


GOOD = '{"id": "bd-1", "title": "fine"}\n'


@pytest.mark.parametrize("text, says", [
    (GOOD + '{"id": "bd-2", "title": "cut off"\n', r"bad:2: not a JSON object"),
    (GOOD + "\n" + '["a list"]\n', r"bad:3: not a JSON object"),
    (GOOD + '{"title": "no id"}\n', r"bad:2: no 'id'"),
    (GOOD + '{"id": "bd-3", "title": "p", "priority": 9}\n', r"bad:2: priority must be 0-4"),
    (GOOD + '{"id": "bd-4", "title": "d", "dependencies": "bd-1"}\n', r"bad:2: dependencies must be a list"),
    (GOOD + '{"id": "bd-1", "title": "again"}\n', r"bad:2: id 'bd-1' already appears on line 1"),
    ('{"id": "a", "title": "a", "dependencies": [{"depends_on_id": "b", "type": "blocks"}]}\n'
     '{"id": "b", "title": "b", "dependencies": [{"depends_on_id": "a", "type": "blocks"}]}\n',
     r"/bad:[12]: dependency cycle in the source: (a -> b -> a|b -> a -> b)"),
    (GOOD + "[" * 100 + "]" * 100 + "\n", r"bad:2: .*nested deeper"),
    (GOOD + '{"id": "bd-9", "title": 5}\n', r"bad:2: no 'title'"),
])
def test_malformed_beads_input_is_reported_by_line_and_imports_nothing(tmp_path: Path, repo: Path,
                                                                       wp: Workplane, text: str, says: str) -> None:
    refused(tmp_path, repo, wp, "beads", text, says)


def test_every_malformed_line_is_named_in_one_report(tmp_path: Path, repo: Path, wp: Workplane) -> None:
    refused(tmp_path, repo, wp, "beads", GOOD + "nope\n" + GOOD.replace("bd-1", "bd-2") + "{\n",
            r"/bad:2: not a JSON object .*; \S*/bad:4: not a JSON object .*nothing was imported")


def test_unknown_fields_are_kept_not_refused(tmp_path: Path, repo: Path, wp: Workplane) -> None:
    source = tmp_path / "issues.jsonl"
    source.write_text('{"id": "bd-1", "title": "t", "x_custom": {"nested": [1, 2]}, "wisp": true}\n')
    importers.run(wp, "beads", str(source))
    assert wp.item(bead("bd-1")).provenance["fields"] == {"x_custom": {"nested": [1, 2]}, "wisp": True}


def test_bad_csv_and_bad_mappings(tmp_path: Path, repo: Path, wp: Workplane) -> None:
    header = "Key,Summary,State\n"
    refused(tmp_path, repo, wp, "csv", header + "A,one,open\nB,two,open,extra\n", r"bad:3: 4 cells",
            mapping="external=Key,title=Summary,status=State")
    refused(tmp_path, repo, wp, "csv", header + 'A,one,open\nB,"two,open\n', r"bad:3: unexpected end of data",
            mapping="external=Key,title=Summary,status=State")
    refused(tmp_path, repo, wp, "csv", header + "A,one,someday\n", r"bad:2: unknown status 'someday'",
            mapping="external=Key,title=Summary,status=State")
    refused(tmp_path, repo, wp, "csv", header, r"no column 'Owner'", mapping="external=Key,title=Summary,owner=Owner")
    refused(tmp_path, repo, wp, "csv", header, r"unknown field 'bogus'", error=UsageError,
            mapping="external=Key,title=Summary,bogus=State")


def test_an_id_that_collides_with_an_item_from_elsewhere_is_refused(tmp_path: Path, repo: Path,
                                                                    wp: Workplane) -> None:
    native = wp.do("new", title="made here").result["item"]
    source = tmp_path / "items.jsonl"
    source.write_text(json.dumps({"id": native, "title": "same id, another item"}) + "\n")
    before = tip(repo)
    with pytest.raises(Invalid, match="ids collide"):
        importers.run(wp, "jsonl", str(source))
    assert tip(repo) == before and wp.item(native).title == "made here"


def test_a_progress_bar_on_a_terminal_only(repo: Path, wp: Workplane) -> None:
    import os
    import pty
    import subprocess
    import sys

    main, child = pty.openpty()
    try:
        done = subprocess.run([sys.executable, "-m", "gitwork", "import", "beads", str(FIXTURES / "beads.jsonl")],
                              cwd=repo, stdout=subprocess.PIPE, stderr=child, timeout=60)
        os.close(child)
        child = -1
        shown = b""
        while True:
            try:
                chunk = os.read(main, 4096)
            except OSError:  # the terminal's other end is closed: everything was read
                break
            if not chunk:
                break
            shown += chunk
    finally:
        os.close(main)
        if child != -1:
            os.close(child)
    assert done.returncode == 0 and done.stdout == b""
    assert b"importing [" in shown and b"7/7" in shown  # 6 items and one item's forward links


def test_an_agent_does_not_import(repo: Path, wp: Workplane) -> None:
    git(repo, "config", "gitwork.agents", "bot")
    with Workplane(str(repo), agent="bot") as bot:
        with pytest.raises(Exception, match="agents do not import") as raised:
            importers.run(bot, "beads", str(FIXTURES / "beads.jsonl"))
    assert raised.value.code == 77


def test_the_bounds_on_a_file_and_a_line(tmp_path: Path, repo: Path, wp: Workplane,
                                        monkeypatch: pytest.MonkeyPatch) -> None:
    from gitwork.importers import source

    monkeypatch.setattr(source, "MAX_LINE", 200)
    refused(tmp_path, repo, wp, "beads", GOOD + json.dumps({"id": "bd-2", "title": "x" * 300}) + "\n",
            r"bad:2: longer than")
    monkeypatch.setattr(source, "MAX_FILE", 100)
    refused(tmp_path, repo, wp, "beads", GOOD * 5, r"larger than")
