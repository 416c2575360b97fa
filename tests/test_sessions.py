"""Session start and session commit, through the Python API and the CLI, against real repositories.

A session is started only by the item's holder, under its fence; it creates ``session/<id>`` at the
frozen head and a worktree for it under ``.worktrees/sessions/<id>/source``, and never touches the
person's checked-out branch, index or working tree. ``session commit`` commits exactly the declared
files, once, with trailers, and records each path's blob before and after.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import re
from pathlib import Path
from typing import Any

import pytest

from conftest import Clock, git, run_gw, tip
from gitwork import sessions
from gitwork.errors import Illegal, Invalid, Stale
from gitwork.workplane import Workplane

T0 = dt.datetime(2030, 1, 1, 12, 0, 0, tzinfo=dt.timezone.utc)
SESSION_ID = re.compile(r"[0-9]{8}-[0-9]{6}-[a-z0-9-]+\Z")




@pytest.fixture(autouse=True)
def person_identity(clean_env: None, monkeypatch: pytest.MonkeyPatch) -> None:
    """The person's own raw git commits need an author; gitwork itself must not rely on it."""
    for role in ("AUTHOR", "COMMITTER"):
        monkeypatch.setenv(f"GIT_{role}_NAME", "Person")
        monkeypatch.setenv(f"GIT_{role}_EMAIL", "person@example.com")


def init_project(path: Path) -> Path:
    """A project on branch main with two files."""
    git(path, "checkout", "-q", "-b", "main")
    (path / "a.txt").write_text("alpha\n")
    (path / "b.txt").write_text("beta\n")
    git(path, "add", "a.txt", "b.txt")
    git(path, "commit", "-q", "-m", "initial")
    return path


def claimed(path: Path, agent: str = "alice", clock: Clock | None = None, **settings: Any) -> tuple[Workplane, str]:
    """An initialised work plane with one item claimed by ``agent``."""
    wp = Workplane(str(path), now=clock or Clock(T0), agent=agent, **settings)
    wp.do("init")
    item = wp.do("new", title="Change the files").result["item"]
    wp.do("claim", item=item)
    return wp, item


def person_state(path: Path) -> dict[str, str]:
    """Everything about the person's checkout that gitwork must never change."""
    return {
        "head": git(path, "symbolic-ref", "-q", "HEAD", check=False) or git(path, "rev-parse", "HEAD"),
        "head_commit": git(path, "rev-parse", "HEAD"),
        "status": git(path, "status", "--porcelain=v1", "--untracked-files=all"),
        "staged": git(path, "diff", "--cached"),
        "unstaged": git(path, "diff"),
        "index": git(path, "ls-files", "-s"),
        "files": json.dumps({p.name: p.read_text() for p in sorted(path.iterdir()) if p.is_file()}),
    }


def dirty_person(path: Path) -> None:
    """Uncommitted work of every kind: staged, unstaged, untracked."""
    (path / "a.txt").write_text("alpha, edited by the person\n")
    git(path, "add", "a.txt")
    (path / "a.txt").write_text("alpha, edited again (unstaged)\n")
    (path / "notes.txt").write_text("untracked notes\n")


# --- start ---------------------------------------------------------------------------------------


def test_start_creates_branch_and_worktree_without_touching_the_person(repo: Path) -> None:
    init_project(repo)
    wp, item = claimed(repo)
    dirty_person(repo)
    before = person_state(repo)
    base = git(repo, "rev-parse", "HEAD")

    info = sessions.start(wp, item)

    assert person_state(repo) == before
    session = info["session"]
    assert SESSION_ID.match(session) and session.startswith("20300101-120000-repo-alice")
    source = repo / ".worktrees" / "sessions" / session / "source"
    assert info["worktree"] == str(source) and source.is_dir()
    assert git(source, "symbolic-ref", "HEAD") == f"refs/heads/session/{session}"
    assert git(repo, "rev-parse", f"session/{session}") == base
    assert (source / "a.txt").read_text() == "alpha\n"  # the committed state, not the person's edits
    # The whole .worktrees folder is ignored: the person's status shows nothing new.
    assert ".worktrees" not in git(repo, "status", "--porcelain", "--untracked-files=all")
    manifest = sessions.Session.load(str(repo), session)
    assert manifest["item"] == item and manifest["fence"] == 1 and manifest["base"] == base
    assert manifest["into"] == "main" and manifest["state"] == "started"
    events = wp.history(item)
    assert events[-1]["type"] == "session-start" and events[-1]["session"] == session
    assert events[-1]["fence"] == 1 and events[-1]["base"] == base
    subject = git(repo, "log", "-1", "--format=%s%n%b", "refs/gitwork/state")
    assert f"Session: {session}" in subject and "Fence: 1" in subject


def test_start_refused_for_someone_who_does_not_hold_the_item(repo: Path) -> None:
    init_project(repo)
    clock = Clock(T0)
    _alice, item = claimed(repo, clock=clock)
    bob = Workplane(str(repo), now=clock, agent="bob")
    state = tip(repo)
    with pytest.raises(Stale):
        sessions.start(bob, item)
    with pytest.raises(Stale):
        sessions.start(Workplane(str(repo), now=clock, agent="alice"), item, fence=7)  # a fence never granted
    assert tip(repo) == state
    assert git(repo, "for-each-ref", "refs/heads/session/") == ""
    assert not (repo / ".worktrees" / "sessions").exists() or not os.listdir(repo / ".worktrees" / "sessions")


def test_start_after_losing_the_lease_is_refused_and_leaves_nothing(repo: Path) -> None:
    init_project(repo)
    clock = Clock(T0)
    alice, item = claimed(repo, clock=clock)
    clock.advance(3600)
    Workplane(str(repo), now=clock, agent="bob").do("takeover", item=item)
    state = tip(repo)
    with pytest.raises(Stale):
        sessions.start(alice, item, fence=1)
    assert tip(repo) == state and git(repo, "for-each-ref", "refs/heads/session/") == ""


def test_start_from_another_branch_and_unique_ids_in_one_second(repo: Path) -> None:
    init_project(repo)
    git(repo, "branch", "release")
    wp, item = claimed(repo)
    first = sessions.start(wp, item, from_ref="release")
    second = sessions.start(wp, item, from_ref="release")
    assert first["into"] == "release"
    assert first["session"] != second["session"] and second["session"].endswith("-2")
    assert {s["session"] for s in sessions.list_sessions(wp)} == {first["session"], second["session"]}


def test_start_refuses_an_unpublished_base(repo: Path) -> None:
    init_project(repo)
    wp, item = claimed(repo)
    tree = git(repo, "rev-parse", "HEAD^{tree}")
    dangling = git(repo, "commit-tree", tree, "-m", "on no branch")
    with pytest.raises(Invalid, match="no branch"):
        sessions.start(wp, item, from_ref=dangling)


def test_start_from_a_linked_worktree_puts_the_session_under_the_main_worktree(repo: Path, tmp_path: Path) -> None:
    init_project(repo)
    linked = tmp_path / "linked"
    git(repo, "worktree", "add", "-q", "-b", "feature", str(linked))
    _wp, item = claimed(repo)
    from_linked = Workplane(str(linked), now=Clock(T0), agent="alice")
    info = sessions.start(from_linked, item)
    assert info["into"] == "feature"
    assert Path(info["worktree"]).parent.parent.parent.parent == repo
    assert not (linked / ".worktrees").exists()


# --- commit --------------------------------------------------------------------------------------


def started(repo: Path, **settings: Any) -> tuple[Workplane, str, dict[str, Any], Path]:
    init_project(repo)
    wp, item = claimed(repo, **settings)
    info = sessions.start(wp, item)
    return wp, item, info, Path(info["worktree"])


def test_commit_exactly_the_declared_files_with_trailers_and_a_changes_record(repo: Path) -> None:
    wp, item, info, source = started(repo)
    base = info["base"]
    (source / "a.txt").write_text("alpha v2\n")
    (source / "c.txt").write_text("new file\n")
    (source / "b.txt").unlink()
    dirty_person(repo)
    before = person_state(repo)

    done = sessions.commit(wp, ["a.txt", "c.txt", "b.txt"], "Change a, add c, drop b", cwd=str(source))

    assert person_state(repo) == before
    commit = done["commit"]
    assert git(repo, "rev-parse", f"session/{info['session']}") == commit
    assert git(repo, "rev-parse", f"{commit}^") == base
    assert git(repo, "rev-list", "--count", f"{base}..{commit}") == "1"
    assert sorted(git(repo, "diff", "--name-only", base, commit).split()) == ["a.txt", "b.txt", "c.txt"]
    message = git(repo, "log", "-1", "--format=%B", commit)
    assert f"Work-Item: {item}" in message and "Fence: 1" in message and f"Session: {info['session']}" in message
    assert git(repo, "log", "-1", "--format=%an", commit) == "alice"  # no git identity configured: the holder
    expected = {
        "a.txt": (git(repo, "rev-parse", f"{base}:a.txt"), git(repo, "rev-parse", f"{commit}:a.txt")),
        "b.txt": (git(repo, "rev-parse", f"{base}:b.txt"), None),
        "c.txt": (None, git(repo, "rev-parse", f"{commit}:c.txt")),
    }
    assert {c["path"]: (c["before"], c["after"]) for c in done["files"]} == expected
    event = wp.history(item)[-1]
    assert event["type"] == "session-commit" and event["commit"] == commit and event["fence"] == 1
    assert {c["path"]: (c["before"], c["after"]) for c in event["files"]} == expected
    manifest = sessions.Session.load(str(repo), info["session"])
    assert manifest["state"] == "committed" and manifest["commit"] == commit
    assert {c["path"]: (c.get("before"), c.get("after")) for c in manifest["changes"]} == expected


def test_commit_refuses_undeclared_changes_and_changes_nothing(repo: Path) -> None:
    wp, item, info, source = started(repo)
    (source / "a.txt").write_text("alpha v2\n")
    (source / "sneaky.txt").write_text("not declared\n")
    state = tip(repo)
    with pytest.raises(Invalid, match="undeclared files changed: sneaky.txt"):
        sessions.commit(wp, ["a.txt"], "only a", cwd=str(source))
    assert git(repo, "rev-parse", f"session/{info['session']}") == info["base"]
    assert tip(repo) == state
    assert git(source, "diff", "--cached", "--name-only") == ""  # nothing staged either


def test_commit_refuses_nothing_changed_and_declared_but_unchanged(repo: Path) -> None:
    wp, _item, info, source = started(repo)
    with pytest.raises(Invalid, match="nothing changed"):
        sessions.commit(wp, ["a.txt"], "nothing", cwd=str(source))
    (source / "a.txt").write_text("alpha v2\n")
    with pytest.raises(Invalid, match="did not change: b.txt"):
        sessions.commit(wp, ["a.txt", "b.txt"], "b unchanged", cwd=str(source))
    with pytest.raises(Invalid, match="not inside the session worktree"):
        sessions.commit(wp, ["../../../../a.txt"], "escape", cwd=str(source))
    assert git(repo, "rev-parse", f"session/{info['session']}") == info["base"]


def test_commit_is_once(repo: Path) -> None:
    wp, _item, info, source = started(repo)
    (source / "a.txt").write_text("alpha v2\n")
    first = sessions.commit(wp, ["a.txt"], "first", cwd=str(source))
    (source / "a.txt").write_text("alpha v3\n")
    with pytest.raises(Illegal, match="commit-once"):
        sessions.commit(wp, ["a.txt"], "second", cwd=str(source))
    assert git(repo, "rev-parse", f"session/{info['session']}") == first["commit"]


def test_commit_after_a_takeover_is_refused_before_committing(repo: Path) -> None:
    init_project(repo)
    clock = Clock(T0)
    alice, item = claimed(repo, clock=clock)
    info = sessions.start(alice, item)
    source = Path(info["worktree"])
    clock.advance(3600)
    Workplane(str(repo), now=clock, agent="bob").do("takeover", item=item)
    (source / "a.txt").write_text("too late\n")
    state = tip(repo)
    with pytest.raises(Stale):
        sessions.commit(alice, ["a.txt"], "late", cwd=str(source))
    assert git(repo, "rev-parse", f"session/{info['session']}") == info["base"]
    assert tip(repo) == state


# --- CLI -----------------------------------------------------------------------------------------


def test_cli_session_start_commit_list(repo: Path) -> None:
    init_project(repo)
    env = {"GW_AGENT": "carol", "GW_NOW": "2030-01-01T12:00:00Z"}
    assert run_gw(repo, "init", env=env).returncode == 0
    item = run_gw(repo, "new", "CLI session", env=env).stdout.strip()
    assert run_gw(repo, "claim", item, env=env).returncode == 0
    before = person_state(repo)
    started_ = run_gw(repo, "session", "start", item, env=env)
    assert started_.returncode == 0, started_.stderr
    source = Path(started_.stdout.strip())
    assert source.is_dir() and source.name == "source"
    assert person_state(repo) == before

    (source / "docs").mkdir()
    (source / "docs" / "new.md").write_text("# new\n")
    # Relative to the current directory when run inside the worktree, like git.
    done = run_gw(source / "docs", "session", "commit", "--file", "new.md", "-m", "Add docs", "--json", env=env)
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert result["ok"] and [f["path"] for f in result["files"]] == ["docs/new.md"]
    assert git(source, "rev-parse", "HEAD") == result["commit"]

    again = run_gw(source, "session", "commit", "--file", "docs/new.md", "-m", "again", "--json", env=env)
    assert again.returncode == 6 and json.loads(again.stdout)["error"] == "illegal-transition"

    listed = run_gw(repo, "session", "list", "--json", env=env)
    rows = json.loads(listed.stdout)
    assert [(r["item"], r["state"], r["commit"]) for r in rows] == [(item, "committed", result["commit"])]


def test_cli_session_commit_exit_codes(repo: Path) -> None:
    init_project(repo)
    env = {"GW_AGENT": "carol", "GW_NOW": "2030-01-01T12:00:00Z"}
    run_gw(repo, "init", env=env)
    item = run_gw(repo, "new", "exit codes", env=env).stdout.strip()
    run_gw(repo, "claim", item, env=env)
    source = Path(run_gw(repo, "session", "start", item, env=env).stdout.strip())
    (source / "a.txt").write_text("changed\n")
    (source / "b.txt").write_text("changed too\n")
    undeclared = run_gw(source, "session", "commit", "--file", "a.txt", "-m", "x", "--json", env=env)
    assert undeclared.returncode == 5
    assert "b.txt" in json.loads(undeclared.stdout)["message"]
    stale = run_gw(source, "session", "commit", "--file", "a.txt", "--file", "b.txt", "-m", "x",
                   env={**env, "GW_NOW": "2030-01-01T14:00:00Z"})  # the lease has expired by then
    assert stale.returncode == 7, stale.stderr
    assert git(source, "rev-list", "--count", "main..HEAD") == "0"
