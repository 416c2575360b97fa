"""The server's pre-receive hook, tried with real pushes into a bare repository.

Local hooks are a convenience (``--no-verify``, libgit2 and ``core.hooksPath=/dev/null`` skip them);
this is the real gate. The pushing repositories here have no local hooks at all, like a client that
bypasses them. Refused: a session branch created with more than one new commit, any update or
force-push of an existing session branch, deleting an unpublished one, and, on any branch, a commit
whose ``Fence:`` for a ``Work-Item:`` is below a fence since granted on the server's state ref.
"""

from __future__ import annotations

import datetime as dt
import json
import subprocess
from pathlib import Path

import pytest

from conftest import git, make_repo, run_gw
from gitwork import hookcheck, hooks_install, sessions
from gitwork.workplane import Workplane
from test_sessions import Clock, init_project, person_identity  # noqa: F401  (autouse fixture)

# A past instant for clocks whose commits are pushed to the hooked arbiter: conftest.Clock starts in
# 2030, which the arbiter's real clock refuses as a commit time (derive.time_refusal).
PAST = dt.datetime(2025, 3, 1, 9, 0, 0, tzinfo=dt.timezone.utc)

SESSION = "session/20300101-120000-proj-agent"


def push(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["git", "push", "-q", "origin", *args], cwd=cwd, capture_output=True, text=True)


def remote_ref(bare: Path, ref: str) -> str | None:
    return git(bare, "rev-parse", "-q", "--verify", ref, check=False) or None


def commit_file(cwd: Path, name: str, text: str, message: str) -> str:
    (cwd / name).write_text(text)
    git(cwd, "add", name)
    git(cwd, "commit", "-q", "-m", message)
    return git(cwd, "rev-parse", "HEAD")


@pytest.fixture
def bare(tmp_path: Path) -> Path:
    path = make_repo(tmp_path / "remote.git", bare=True)
    hooks_install.install_server(str(path))
    return path


@pytest.fixture
def work(repo: Path, bare: Path) -> Path:
    init_project(repo)
    git(repo, "remote", "add", "origin", str(bare))
    git(repo, "push", "-q", "origin", "main")
    return repo


def test_session_branch_created_with_one_commit_accepted_more_refused(work: Path, bare: Path) -> None:
    git(work, "checkout", "-q", "-b", SESSION)
    one = commit_file(work, "a.txt", "one\n", "the one commit")
    assert push(work, SESSION).returncode == 0
    assert remote_ref(bare, f"refs/heads/{SESSION}") == one

    two_branch = SESSION + "-2"
    git(work, "checkout", "-q", "-b", two_branch, "main")
    commit_file(work, "a.txt", "first\n", "first")
    commit_file(work, "b.txt", "second\n", "second")
    done = push(work, two_branch)
    assert done.returncode != 0 and "at most one new commit" in done.stderr
    assert remote_ref(bare, f"refs/heads/{two_branch}") is None


def test_update_or_force_push_of_a_session_branch_refused(work: Path, bare: Path) -> None:
    git(work, "checkout", "-q", "-b", SESSION)
    one = commit_file(work, "a.txt", "one\n", "the one commit")
    assert push(work, SESSION).returncode == 0
    commit_file(work, "a.txt", "two\n", "a second commit")
    fast_forward = push(work, SESSION)
    assert fast_forward.returncode != 0 and "commit-once" in fast_forward.stderr
    git(work, "reset", "-q", "--hard", "main")
    commit_file(work, "b.txt", "rewritten\n", "rewritten")
    forced = push(work, "--force", SESSION)
    assert forced.returncode != 0 and "commit-once" in forced.stderr
    assert remote_ref(bare, f"refs/heads/{SESSION}") == one


def test_deleting_an_unpublished_session_branch_refused_published_allowed(work: Path, bare: Path) -> None:
    git(work, "checkout", "-q", "-b", SESSION)
    one = commit_file(work, "a.txt", "one\n", "the one commit")
    assert push(work, SESSION).returncode == 0
    deleted = push(work, f":refs/heads/{SESSION}")
    assert deleted.returncode != 0 and "unpublished" in deleted.stderr
    assert remote_ref(bare, f"refs/heads/{SESSION}") == one
    # Publishing and deleting in one atomic push: the hook counts the push's own branch update.
    assert push(work, "--atomic", f"{one}:refs/heads/main", f":refs/heads/{SESSION}").returncode == 0
    assert remote_ref(bare, "refs/heads/main") == one and remote_ref(bare, f"refs/heads/{SESSION}") is None
    # A session branch still at its published base holds nothing: deleting it is fine.
    assert push(work, f"main:refs/heads/{SESSION}-b").returncode == 0
    assert push(work, f":refs/heads/{SESSION}-b").returncode == 0


def test_pushes_without_trailers_are_unaffected(work: Path, bare: Path) -> None:
    for n in range(3):
        commit_file(work, "a.txt", f"v{n}\n", f"plain commit {n}")
    assert push(work, "main").returncode == 0
    git(work, "checkout", "-q", "-b", "feature")
    tip = commit_file(work, "b.txt", "feature\n", "feature work")
    assert push(work, "feature").returncode == 0
    assert remote_ref(bare, "refs/heads/feature") == tip
    assert push(work, "--force", "main~1:refs/heads/feature").returncode == 0  # ordinary branches: git's rules


def test_stale_fence_refused_after_takeover_and_the_new_holder_accepted(tmp_path: Path, work: Path, bare: Path) -> None:
    """Alice loses the lease to Bob (on another clone) before pushing: her work is refused, his lands."""
    clock = Clock(PAST)  # the arbiter refuses commits dated after its own clock (plus clock_margin)
    alice = Workplane(str(work), now=clock, agent="alice")
    alice.do("init")
    item = alice.do("new", title="Contested work").result["item"]
    alice.do("claim", item=item)
    git(work, "push", "-q", "origin", "refs/gitwork/state:refs/gitwork/state")
    session_a = sessions.start(alice, item)
    Path(session_a["worktree"], "a.txt").write_text("alice's version\n")
    stale_commit = sessions.commit(alice, ["a.txt"], "alice's change", cwd=session_a["worktree"])["commit"]

    clone_b = tmp_path / "bob"
    git(tmp_path, "clone", "-q", "-b", "main", str(bare), str(clone_b))
    git(clone_b, "fetch", "-q", "origin", "refs/gitwork/state:refs/gitwork/state")
    clock.advance(3600)  # alice's 15-minute lease expired long ago
    bob = Workplane(str(clone_b), now=clock, agent="bob")
    granted = bob.do("takeover", item=item).result
    assert granted["fence"] == 2
    assert git(clone_b, "push", "-q", "origin", "refs/gitwork/state:refs/gitwork/state") == ""

    refused = push(work, session_a["branch"])
    assert refused.returncode != 0
    assert "stale fence 1" in refused.stderr and item in refused.stderr
    assert remote_ref(bare, f"refs/heads/{session_a['branch']}") is None
    into_main = push(work, f"{stale_commit}:refs/heads/main")
    assert into_main.returncode != 0 and "stale fence" in into_main.stderr

    session_b = sessions.start(bob, item, from_ref="main")
    Path(session_b["worktree"], "a.txt").write_text("bob's version\n")
    fresh = sessions.commit(bob, ["a.txt"], "bob's change", cwd=session_b["worktree"])["commit"]
    assert "Fence: 2" in git(clone_b, "log", "-1", "--format=%B", fresh)
    accepted = subprocess.run(["git", "push", "-q", "origin", session_b["branch"], f"{fresh}:refs/heads/main"],
                              cwd=clone_b, capture_output=True, text=True)
    assert accepted.returncode == 0, accepted.stderr
    assert remote_ref(bare, "refs/heads/main") == fresh


def test_state_ref_rewind_refused_by_the_state_check(work: Path, bare: Path) -> None:
    wp = Workplane(str(work), now=Clock(PAST), agent="alice")
    wp.do("init")
    wp.do("new", title="one")
    git(work, "push", "-q", "origin", "refs/gitwork/state:refs/gitwork/state")
    tip = remote_ref(bare, "refs/gitwork/state")
    rewind = push(work, "--force", "refs/gitwork/state~1:refs/gitwork/state")
    assert rewind.returncode != 0 and "non-fast-forward" in rewind.stderr
    deleted = push(work, ":refs/gitwork/state")
    assert deleted.returncode != 0
    assert remote_ref(bare, "refs/gitwork/state") == tip


def test_server_hook_chains_an_existing_pre_receive(tmp_path: Path, repo: Path) -> None:
    remote = make_repo(tmp_path / "chained.git", bare=True)
    existing = remote / "hooks" / "pre-receive"
    existing.write_text("#!/bin/sh\nif grep -q ' refs/heads/frozen$'; then echo 'frozen is frozen' >&2; exit 1; fi\n")
    existing.chmod(0o755)
    report = hooks_install.install_server(str(remote))
    assert report["hooks"][0]["status"] == "chained"
    assert hooks_install.install_server(str(remote))["hooks"][0]["status"] == "unchanged"
    init_project(repo)
    git(repo, "remote", "add", "origin", str(remote))
    assert push(repo, "main").returncode == 0
    frozen = push(repo, "main:refs/heads/frozen")
    assert frozen.returncode != 0 and "frozen is frozen" in frozen.stderr
    git(repo, "checkout", "-q", "-b", SESSION)
    commit_file(repo, "a.txt", "1\n", "1")
    commit_file(repo, "a.txt", "2\n", "2")
    assert "at most one new commit" in push(repo, SESSION).stderr  # and our checks still run


def test_register_server_check(work: Path, bare: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """More checks can be registered; each gets the whole push and yields refusals."""
    seen: list[list[str]] = []

    def no_wip(p: hookcheck.Push) -> list[str]:
        seen.append([u.ref for u in p.updates])
        return [f"{u.ref}: no wip branches" for u in p.updates if u.ref.startswith("refs/heads/wip/")]

    monkeypatch.setattr(hookcheck, "SERVER_CHECKS", list(hookcheck.SERVER_CHECKS))
    assert hookcheck.register_server_check(no_wip) is no_wip
    monkeypatch.chdir(bare)
    monkeypatch.setenv("GIT_DIR", str(bare))
    main = git(bare, "rev-parse", "refs/heads/main")
    zero = "0" * 40
    problems = hookcheck.pre_receive([], f"{zero} {main} refs/heads/wip/x\n{zero} {main} refs/heads/ok\n")
    assert problems == ["refs/heads/wip/x: no wip branches"]
    assert seen == [["refs/heads/wip/x", "refs/heads/ok"]]


def test_cli_install_server(tmp_path: Path, repo: Path) -> None:
    remote = make_repo(tmp_path / "cli.git", bare=True)
    outside = tmp_path / "not-a-repo"
    outside.mkdir()
    done = run_gw(outside, "hooks", "install", "--server", str(remote), "--json")
    assert done.returncode == 0, done.stderr
    doc = json.loads(done.stdout)
    assert doc["scope"] == "server" and Path(doc["hooks"][0]["path"]) == remote / "hooks" / "pre-receive"
    # git's gc packs no refs on the arbiter (ref packing racing pushes can lose an update; deploy.md)
    assert doc["gc.packRefs"] == "false" and git(remote, "config", "--get", "gc.packRefs") == "false"
    git(remote, "config", "gc.packRefs", "true")  # an administrator's own choice stays
    again = json.loads(run_gw(outside, "hooks", "install", "--server", str(remote), "--json").stdout)
    assert again["gc.packRefs"] == "true" and git(remote, "config", "--get", "gc.packRefs") == "true"
    not_bare = run_gw(outside, "hooks", "install", "--server", str(repo), "--json")
    assert not_bare.returncode == 5 and "not a bare" in json.loads(not_bare.stdout)["message"]
    assert not (repo / ".git" / "hooks" / "pre-receive").exists()


def test_fence_check_reads_only_the_items_in_the_trailers(work: Path, bare: Path) -> None:
    """Trailers naming items the server does not know, or malformed ones, are handled explicitly."""
    git(work, "commit", "-q", "--allow-empty", "-m", "unknown item\n\nWork-Item: w-0123456789abcdef\nFence: 1")
    assert push(work, "main").returncode == 0  # the server's state does not know it: nothing to compare
    git(work, "commit", "-q", "--allow-empty", "-m", "bad fence\n\nWork-Item: w-0123456789abcdef\nFence: soon")
    malformed = push(work, "main")
    assert malformed.returncode != 0 and "malformed Fence" in malformed.stderr
