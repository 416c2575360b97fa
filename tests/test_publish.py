"""``gw publish``: fast-forward, or a clean merge whose gates pass in a scratch worktree; never rebase/force.

Refusals (a conflict, a failing gate, a dirty checkout of the target) exit 13 and change nothing: not
the target branch, not the lease, not the person's checkout. The person's checked-out branch, index
and uncommitted work are compared byte for byte before and after every publish.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from conftest import git, make_repo, run_gw, tip
from gitwork import hooks_install, sessions
from gitwork.errors import NonFastForward, Stale
from gitwork.publish import publish
from gitwork.workplane import Workplane
from test_sessions import Clock, claimed, dirty_person, init_project, person_identity, person_state  # noqa: F401


def session_with_commit(repo: Path, wp: Workplane, item: str, files: dict[str, str | None],
                        from_ref: str | None = None) -> dict[str, Any]:
    info = sessions.start(wp, item, from_ref=from_ref)
    source = Path(info["worktree"])
    for name, text in files.items():
        if text is None:
            (source / name).unlink()
        else:
            (source / name).write_text(text)
    done = sessions.commit(wp, list(files), "session change", cwd=str(source))
    return {**info, "commit": done["commit"]}


def move_main(repo: Path, name: str, text: str) -> str:
    """Someone else lands a commit on main (the person is on another branch)."""
    scratch = repo.parent / "other-hands"
    if not scratch.exists():
        git(repo, "worktree", "add", "-q", "--detach", str(scratch), "main")
    git(scratch, "checkout", "-q", "--detach", "main")
    (scratch / name).write_text(text)
    git(scratch, "commit", "-q", "-am", f"main: {name}")
    new = git(scratch, "rev-parse", "HEAD")
    git(repo, "update-ref", "refs/heads/main", new)
    return new


def on_other_branch(repo: Path) -> None:
    git(repo, "checkout", "-q", "-b", "work")
    dirty_person(repo)


def lease_state(wp: Workplane, item: str) -> str:
    lease = wp.lease(item)
    assert lease is not None
    return lease.state


def test_fast_forward_into_the_persons_clean_checked_out_branch(repo: Path) -> None:
    init_project(repo)
    hooks_install.install_local(str(repo))
    wp, item = claimed(repo)
    (repo / "untracked.txt").write_text("the person's untracked file\n")
    s = session_with_commit(repo, wp, item, {"a.txt": "alpha v2\n"})

    result = publish(wp, s["session"])

    assert result["mode"] == "fast-forward" and result["commit"] == s["commit"]
    assert git(repo, "rev-parse", "main") == s["commit"]
    # The checkout of main moved with its branch: not left silently out of date.
    assert result["worktree_updated"] == str(repo)
    assert (repo / "a.txt").read_text() == "alpha v2\n"
    assert git(repo, "status", "--porcelain", "--untracked-files=no") == ""
    assert (repo / "untracked.txt").read_text() == "the person's untracked file\n"
    assert lease_state(wp, item) == "released"
    types = [e["type"] for e in wp.history(item)]
    assert types[-4:] == ["session-commit", "publish", "done", "released"]
    assert wp.history(item)[-3]["mode"] == "fast-forward"
    assert wp.item(item).status == "done" and result["status"] == "done"  # delivered: never offered again
    assert not Path(s["worktree"]).exists()
    assert git(repo, "for-each-ref", "refs/heads/session/") == ""  # deleted: its commit is on main
    assert sessions.Session.load(str(repo), s["session"])["state"] == "published"


def test_fast_forward_leaves_the_person_on_another_branch_untouched(repo: Path) -> None:
    init_project(repo)
    wp, item = claimed(repo)
    on_other_branch(repo)
    before = person_state(repo)
    s = session_with_commit(repo, wp, item, {"b.txt": "beta v2\n", "c.txt": "new\n"}, from_ref="main")
    assert person_state(repo) == before

    result = publish(wp, s["session"])

    assert person_state(repo) == before
    assert result["worktree_updated"] is None
    assert git(repo, "rev-parse", "main") == s["commit"]


def test_clean_merge_with_a_passing_gate_run_on_the_merge_result(repo: Path, tmp_path: Path) -> None:
    init_project(repo)
    mark = tmp_path / "gate-ran"
    gate = f"grep -q 'alpha v2' a.txt && grep -q 'beta moved' b.txt && pwd > {mark}"
    wp, item = claimed(repo, gates=(gate,))
    on_other_branch(repo)
    s = session_with_commit(repo, wp, item, {"a.txt": "alpha v2\n"}, from_ref="main")
    moved = move_main(repo, "b.txt", "beta moved\n")
    before = person_state(repo)

    result = publish(wp, s["session"])

    assert result["mode"] == "merge" and result["previous"] == moved
    merge = git(repo, "rev-parse", "main")
    assert merge == result["commit"]
    assert git(repo, "rev-list", "--parents", "-n1", merge).split()[1:] == [moved, s["commit"]]
    assert "Fence: 1" in git(repo, "log", "-1", "--format=%B", merge)
    assert git(repo, "show", f"{merge}:a.txt") == "alpha v2" and git(repo, "show", f"{merge}:b.txt") == "beta moved"
    scratch = Path(s["worktree"]).parent / "merge"
    assert mark.read_text().strip() == str(scratch)
    assert not scratch.exists() and str(scratch) not in git(repo, "worktree", "list")
    assert result["gates"] == [{"gate": gate, "exit": 0}]
    assert person_state(repo) == before
    assert lease_state(wp, item) == "released"


def refused_unchanged(repo: Path, wp: Workplane, item: str, s: dict[str, Any], before: dict[str, str],
                      main: str) -> None:
    assert git(repo, "rev-parse", "main") == main
    assert lease_state(wp, item) == "active"
    assert person_state(repo) == before
    assert sessions.Session.load(str(repo), s["session"])["state"] == "committed"
    assert git(repo, "rev-parse", f"session/{s['session']}") == s["commit"]
    assert Path(s["worktree"]).is_dir()
    assert not (Path(s["worktree"]).parent / "merge").exists()
    assert wp.history(item)[-1]["type"] == "session-commit"


def test_conflict_is_refused_with_exit_13_and_changes_nothing(repo: Path) -> None:
    init_project(repo)
    env = {"GW_AGENT": "alice", "GW_NOW": "2030-01-01T12:00:00Z"}
    wp, item = claimed(repo, clock=Clock())
    on_other_branch(repo)
    s = session_with_commit(repo, wp, item, {"a.txt": "alpha from the session\n"}, from_ref="main")
    main = move_main(repo, "a.txt", "alpha from main\n")
    before = person_state(repo)
    state = tip(repo)

    with pytest.raises(NonFastForward, match="conflicts in: a.txt"):
        publish(wp, s["session"])
    done = run_gw(repo, "publish", s["session"], "--json", env=env)
    assert done.returncode == 13, done.stderr
    error = json.loads(done.stdout)
    assert error["error"] == "non-fast-forward" and error["details"]["conflicts"] == ["a.txt"]

    assert tip(repo) == state
    refused_unchanged(repo, wp, item, s, before, main)


def test_failing_gate_is_refused_with_exit_13_and_changes_nothing(repo: Path) -> None:
    init_project(repo)
    git(repo, "config", "gitwork.gates", "echo checking the merge; echo 'tests: 1 failed'; exit 3")
    env = {"GW_AGENT": "alice", "GW_NOW": "2030-01-01T12:00:00Z"}
    wp, item = claimed(repo)
    on_other_branch(repo)
    s = session_with_commit(repo, wp, item, {"a.txt": "alpha v2\n"}, from_ref="main")
    main = move_main(repo, "b.txt", "beta moved\n")
    before = person_state(repo)

    done = run_gw(repo, "publish", s["session"], env=env)

    assert done.returncode == 13, done.stderr
    assert "exit 3" in done.stderr and "tests: 1 failed" in done.stderr
    refused_unchanged(repo, wp, item, s, before, main)
    assert git(repo, "worktree", "list", "--porcelain").count("worktree ") == 3  # person, other hands, session


def test_dirty_checkout_of_the_target_is_refused_and_untouched(repo: Path) -> None:
    init_project(repo)
    wp, item = claimed(repo)
    s = session_with_commit(repo, wp, item, {"b.txt": "beta v2\n"})
    dirty_person(repo)  # the person is on main, with staged, unstaged and untracked work
    before = person_state(repo)
    main = git(repo, "rev-parse", "main")
    with pytest.raises(NonFastForward, match="uncommitted changes"):
        publish(wp, s["session"])
    refused_unchanged(repo, wp, item, s, before, main)


def test_publish_after_losing_the_lease_is_refused(repo: Path) -> None:
    init_project(repo)
    clock = Clock()
    wp, item = claimed(repo, clock=clock)
    s = session_with_commit(repo, wp, item, {"a.txt": "alpha v2\n"})
    clock.advance(3600)
    Workplane(str(repo), now=clock, agent="bob").do("takeover", item=item)
    main = git(repo, "rev-parse", "main")
    with pytest.raises(Stale):
        publish(wp, s["session"])
    assert git(repo, "rev-parse", "main") == main


def test_publish_needs_a_commit(repo: Path) -> None:
    init_project(repo)
    wp, item = claimed(repo)
    info = sessions.start(wp, item)
    done = run_gw(repo, "publish", info["session"], "--json", env={"GW_AGENT": "alice", "GW_NOW": "2030-01-01T12:00:00Z"})
    assert done.returncode == 5 and "no commit yet" in json.loads(done.stdout)["message"]


# --- to a remote ---------------------------------------------------------------------------------


@pytest.fixture
def remote(repo: Path, tmp_path: Path) -> Path:
    bare = make_repo(tmp_path / "code.git", bare=True)
    hooks_install.install_server(str(bare))
    init_project(repo)
    git(repo, "remote", "add", "origin", str(bare))
    git(repo, "push", "-q", "origin", "main")
    return bare


def test_remote_publish_fast_forward_then_merge(repo: Path, remote: Path, tmp_path: Path) -> None:
    wp, item = claimed(repo, gates=("test -f a.txt",))
    local_main = git(repo, "rev-parse", "main")
    first = session_with_commit(repo, wp, item, {"a.txt": "alpha v2\n"})
    result = publish(wp, first["session"], remote="origin", keep_open=True)  # more to come: keep the lease
    assert result["mode"] == "fast-forward" and not result["released"] and result["status"] == "in_progress"
    assert git(remote, "rev-parse", "main") == first["commit"]
    assert git(repo, "rev-parse", "main") == local_main  # the local branch is not touched
    assert git(repo, "rev-parse", "refs/remotes/origin/main") == first["commit"]

    # Someone else pushes to main; the next publish merges cleanly on top of it.
    other = tmp_path / "other"
    git(tmp_path, "clone", "-q", "-b", "main", str(remote), str(other))
    (other / "b.txt").write_text("beta from elsewhere\n")
    git(other, "commit", "-q", "-am", "elsewhere")
    git(other, "push", "-q", "origin", "main")
    elsewhere = git(other, "rev-parse", "HEAD")

    second = session_with_commit(repo, wp, item, {"c.txt": "new file\n"}, from_ref="main")
    result = publish(wp, second["session"], remote="origin")
    assert result["mode"] == "merge" and result["previous"] == elsewhere
    assert result["released"] and wp.item(item).status == "done"
    merged = git(remote, "rev-parse", "main")
    assert git(remote, "rev-list", "--parents", "-n1", merged).split()[1:] == [elsewhere, second["commit"]]
    assert git(remote, "merge-base", "--is-ancestor", elsewhere, merged) == ""  # only ever forward


def test_remote_publish_refused_on_conflict_leaves_the_remote_alone(repo: Path, remote: Path, tmp_path: Path) -> None:
    wp, item = claimed(repo)
    s = session_with_commit(repo, wp, item, {"a.txt": "alpha from the session\n"})
    other = tmp_path / "other"
    git(tmp_path, "clone", "-q", "-b", "main", str(remote), str(other))
    (other / "a.txt").write_text("alpha from elsewhere\n")
    git(other, "commit", "-q", "-am", "elsewhere")
    git(other, "push", "-q", "origin", "main")
    remote_main = git(remote, "rev-parse", "main")
    with pytest.raises(NonFastForward, match="a.txt"):
        publish(wp, s["session"], remote="origin")
    assert git(remote, "rev-parse", "main") == remote_main
    assert lease_state(wp, item) == "active"


def test_never_force_the_remote_moved_between_decision_and_push(repo: Path, remote: Path, tmp_path: Path,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    """The CAS push: a push that lands between our fetch and our push is not overwritten; we re-decide."""
    import gitwork.publish as publish_module

    wp, item = claimed(repo)
    s = session_with_commit(repo, wp, item, {"a.txt": "alpha v2\n"})
    other = tmp_path / "other"
    git(tmp_path, "clone", "-q", "-b", "main", str(remote), str(other))
    real_push = publish_module._push
    sneaked: list[str] = []

    def push_after_someone_else(top: str, name: str, into: str, new: str, target: str) -> bool:
        if not sneaked:
            (other / "b.txt").write_text("sneaked in\n")
            git(other, "commit", "-q", "-am", "sneaked in")
            git(other, "push", "-q", "origin", "main")
            sneaked.append(git(other, "rev-parse", "HEAD"))
        return real_push(top, name, into, new, target)

    monkeypatch.setattr(publish_module, "_push", push_after_someone_else)
    result = publish(wp, s["session"], remote="origin")
    assert result["mode"] == "merge" and result["previous"] == sneaked[0]
    assert git(remote, "merge-base", "--is-ancestor", sneaked[0], "main") == ""
    assert git(remote, "show", "main:b.txt") == "sneaked in"


def test_cli_publish_json(repo: Path) -> None:
    init_project(repo)
    env = {"GW_AGENT": "alice", "GW_NOW": "2030-01-01T12:00:00Z"}
    wp, item = claimed(repo)
    on_other_branch(repo)
    s = session_with_commit(repo, wp, item, {"a.txt": "alpha v2\n"}, from_ref="main")
    done = run_gw(repo, "publish", s["session"], "--json", env=env)
    assert done.returncode == 0, done.stderr
    doc = json.loads(done.stdout)
    assert doc["ok"] and doc["mode"] == "fast-forward" and doc["commit"] == s["commit"] and doc["released"]
    again = run_gw(repo, "publish", s["session"], "--json", env=env)
    assert again.returncode == 5 and "already published" in json.loads(again.stdout)["message"]
