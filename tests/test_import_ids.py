"""Issue 25, point 9: after an import the old ids work.

``gw show bd-a2``, ``gw show '#12'`` (and every verb taking an id) find the item through its provenance
(the read cache's ``alias`` index, not a scan); a name two imported items share is exit 4 listing both.
``gw import --dry-run`` reports what would change and writes nothing (refs, work tree and git dir hashed
before and after). An imported ``in_progress`` item with an assignee is not offered by ``ready`` or
``claim --next``. Comments keep their original dates in ``gw show`` and ``gw thread``.
Real repositories, the real entry point.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

from conftest import git, gw_here
from gitwork.importers import item_id

ENV = {"GW_AGENT": "lead", "GW_NO_AUTO_GC": "1"}

BEADS = [
    {"id": "bd-a1", "title": "Auth epic", "status": "open", "priority": 1, "created_at": "2025-01-09T12:00:00Z"},
    {"id": "bd-a2", "title": "Token endpoint", "status": "in_progress", "assignee": "alice", "priority": 2,
     "created_at": "2025-01-09T12:01:00Z",
     "comments": [{"id": 1, "author": "alice", "text": "Starting on this", "created_at": "2025-01-10T08:00:00Z"}]},
    {"id": "12", "title": "A bead named like an issue number", "status": "open", "created_at": "2025-01-09T12:02:00Z"},
]
GITHUB = [{"number": 12, "title": "Crash on empty file", "state": "OPEN", "body": "Steps", "labels": [],
           "createdAt": "2025-01-05T10:00:00Z"}]


def run(repo: Path, *args: str) -> tuple[int, str, str]:
    done = gw_here(repo, *args, env=ENV)
    return done.returncode, done.stdout, done.stderr


def ok(repo: Path, *args: str) -> str:
    code, out, err = run(repo, *args)
    assert code == 0, (args, out, err)
    return out


def write_beads(path: Path, records: list[dict[str, object]]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return path


def imported(tmp_path: Path, repo: Path) -> Path:
    ok(repo, "init")
    ok(repo, "import", "beads", str(write_beads(tmp_path / "issues.jsonl", BEADS)), "--no-progress")
    (tmp_path / "gh.json").write_text(json.dumps(GITHUB))
    ok(repo, "import", "github", str(tmp_path / "gh.json"), "--no-progress")
    return repo


def test_old_ids_resolve_through_provenance(tmp_path: Path, repo: Path) -> None:
    imported(tmp_path, repo)
    token, epic, issue = item_id("beads", "bd-a2"), item_id("beads", "bd-a1"), item_id("github", "12")
    assert json.loads(ok(repo, "show", "bd-a2", "--json"))["item"] == token
    assert json.loads(ok(repo, "show", "#12", "--json"))["item"] == issue
    assert [d["item"] for d in json.loads(ok(repo, "show", "bd-a1", "#12", "--json"))] == [epic, issue]
    ok(repo, "claim", "bd-a1")  # a verb that writes: the document carries the gitwork id
    ok(repo, "edit", "bd-a1", "--add-label", "auth")
    assert json.loads(ok(repo, "show", epic, "--json"))["labels"] == ["auth"]
    ok(repo, "new", "follow-up", "--dep", "bd-a1")
    ok(repo, "msg", "bd-a1", "on it")
    assert "on it" in ok(repo, "thread", "bd-a1")
    # "12" is the bead's name and (as 12) the issue's number: ambiguous, both listed; nothing written
    before = git(repo, "rev-parse", "refs/gitwork/state")
    code, _out, err = run(repo, "show", "12")
    assert code == 4 and item_id("beads", "12") in err and issue in err, err
    code, _out, err = run(repo, "edit", "12", "--add-label", "x")
    assert code == 4 and git(repo, "rev-parse", "refs/gitwork/state") == before
    # neither an id nor a name in a source: still the malformed-id refusal (exit 5), saying both
    code, _out, err = run(repo, "show", "bd-zz")
    assert code == 5 and "imported" in err and len(err.strip().splitlines()) == 1


def test_the_lookup_is_an_index_of_the_cache() -> None:
    from gitwork import cache

    assert "CREATE TABLE IF NOT EXISTS alias (name TEXT NOT NULL, item TEXT NOT NULL, PRIMARY KEY (name, item))" \
        in cache._DDL


def fingerprint(repo: Path) -> dict[str, str]:
    found = {"refs": git(repo, "for-each-ref", "--format=%(refname) %(objectname)")}
    for root, _dirs, files in os.walk(repo):
        for name in files:
            path = Path(root) / name
            if "gitwork" in path.parts and name.startswith("cache.sqlite"):
                continue  # the read cache is derived data, brought to the tip by any read
            found[str(path.relative_to(repo))] = hashlib.sha256(path.read_bytes()).hexdigest()
    return found


def test_dry_run_reports_and_writes_nothing(tmp_path: Path, repo: Path) -> None:
    ok(repo, "init")
    source = write_beads(tmp_path / "issues.jsonl", BEADS)
    before = fingerprint(repo)
    report = json.loads(ok(repo, "import", "beads", str(source), "--dry-run", "--json"))
    assert fingerprint(repo) == before, "a dry run writes nothing"
    assert report["dry_run"] is True and (report["created"], report["updated"], report["unchanged"],
                                          report["deleted"]) == (3, 0, 0, 0)
    assert sorted(report["ids"]["created"]) == sorted(item_id("beads", b["id"]) for b in BEADS)  # type: ignore[arg-type]
    ok(repo, "import", "beads", str(source), "--no-progress")
    changed = [dict(BEADS[0], title="Auth epic, renamed"), dict(BEADS[1]), dict(BEADS[2], status="tombstone"),
               {"id": "bd-a9", "title": "brand new", "status": "open"}]
    write_beads(source, changed)
    before = fingerprint(repo)
    report = json.loads(ok(repo, "import", "beads", str(source), "--dry-run", "--json"))
    assert fingerprint(repo) == before
    assert (report["created"], report["updated"], report["unchanged"], report["deleted"]) == (1, 1, 1, 1), report
    assert report["ids"]["deleted"] == [item_id("beads", "12")] and report["ids"]["updated"] == [item_id("beads", "bd-a1")]
    plain = run(repo, "import", "beads", str(source), "--dry-run")
    assert plain[0] == 0 and "dry run" in plain[2] and "1 created, 1 updated, 1 unchanged, 1 deleted" in plain[2]
    assert fingerprint(repo) == before


def test_in_progress_with_an_assignee_is_not_offered(tmp_path: Path, repo: Path) -> None:
    imported(tmp_path, repo)
    token = item_id("beads", "bd-a2")
    ready = {row["item"] for row in json.loads(ok(repo, "ready", "--json"))}
    assert token not in ready and item_id("beads", "bd-a1") in ready
    explained = {row["item"]: row for row in json.loads(ok(repo, "ready", "--explain", "--json"))}
    assert explained[token]["ready"] is False
    assert "in progress in beads bd-a2 when imported (assignee alice)" in explained[token]["why_not"][0]["reason"]
    for _ in range(3):  # claim --next takes the others, never it
        code, out, _err = run(repo, "claim", "--next", "--json")
        if code != 0:
            break
        assert json.loads(out)["item"] != token
    shown = json.loads(ok(repo, "show", token, "--json"))
    assert shown["status"] == "in_progress" and shown["owner"] == "alice" and shown["lease"] is None


def test_comments_keep_their_dates_in_the_human_view(tmp_path: Path, repo: Path) -> None:
    imported(tmp_path, repo)
    assert "2025-01-10" in ok(repo, "show", "bd-a2"), "show's last messages: the comment's own date"
    assert "2025-01-10" in ok(repo, "thread", "bd-a2")
