"""The local hooks, tried with the real git commands: a session branch is commit-once.

Each refusal listed in the issue is attempted for real (second commit with and without
``--no-verify``, ``--amend``, ``reset``, ``rebase``, ``branch -f``, ``update-ref``, deleting an
unpublished session branch), and ``git gc``/``git pack-refs`` must keep working. Also: installing is
idempotent, chains hooks that were there, writes to the common git dir (so every worktree runs them),
is explicit about ``core.hooksPath``, and starts no Python for refs that are not session branches.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import git, run_gw
from gitwork import hooks_install, sessions
from gitwork.errors import Invalid
from test_sessions import claimed, init_project, person_identity  # noqa: F401  (autouse fixture)


def attempt(cwd: Path | str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True)


def refused(done: subprocess.CompletedProcess[str]) -> bool:
    """Refused by *our* hook (not by git for some other reason)."""
    return done.returncode != 0 and "gitwork:" in done.stderr


@pytest.fixture
def committed(repo: Path) -> dict[str, object]:
    """Hooks installed; alice holds an item and has made her session's one commit."""
    init_project(repo)
    hooks_install.install_local(str(repo))
    wp, item = claimed(repo)
    info = sessions.start(wp, item)
    source = Path(info["worktree"])
    (source / "a.txt").write_text("alpha v2\n")
    done = sessions.commit(wp, ["a.txt"], "the one commit", cwd=str(source))
    return {"wp": wp, "source": source, "branch": f"session/{info['session']}", "commit": done["commit"],
            "base": info["base"], "ref": f"refs/heads/session/{info['session']}"}


def branch_at(repo: Path, s: dict[str, object]) -> str:
    return git(repo, "rev-parse", str(s["ref"]))


def test_second_commit_refused_with_and_without_no_verify(repo: Path, committed: dict[str, object]) -> None:
    source = committed["source"]
    Path(source, "a.txt").write_text("alpha v3\n")
    by_pre_commit = attempt(source, "commit", "-q", "-am", "second")
    assert refused(by_pre_commit) and "commit-once" in by_pre_commit.stderr
    by_transaction = attempt(source, "commit", "-q", "--no-verify", "-am", "second")
    assert refused(by_transaction) and "commit-once" in by_transaction.stderr
    assert branch_at(repo, committed) == committed["commit"]


def test_amend_refused_with_and_without_no_verify(repo: Path, committed: dict[str, object]) -> None:
    source = committed["source"]
    assert refused(attempt(source, "commit", "-q", "--amend", "-m", "reworded"))
    assert refused(attempt(source, "commit", "-q", "--amend", "--no-verify", "-m", "reworded"))
    assert branch_at(repo, committed) == committed["commit"]


def test_reset_refused(repo: Path, committed: dict[str, object]) -> None:
    source = committed["source"]
    for mode in ("--hard", "--soft", "--mixed"):
        assert refused(attempt(source, "reset", "-q", mode, str(committed["base"])))
        assert branch_at(repo, committed) == committed["commit"]
    # Measured: `reset --hard` rewrites the files before it moves the ref, so the refused reset still
    # leaves the worktree at the base; the commit is intact and `reset --hard HEAD` (a no-op move) restores it.
    assert attempt(source, "reset", "-q", "--hard", "HEAD").returncode == 0
    assert Path(source, "a.txt").read_text() == "alpha v2\n"


def test_rebase_refused(repo: Path, committed: dict[str, object]) -> None:
    (repo / "b.txt").write_text("main moved on\n")
    git(repo, "commit", "-q", "-am", "main moves")
    done = attempt(committed["source"], "rebase", "main")
    assert refused(done)
    assert branch_at(repo, committed) == committed["commit"]
    attempt(committed["source"], "rebase", "--abort")
    assert branch_at(repo, committed) == committed["commit"]


def test_branch_force_and_update_ref_refused(repo: Path, committed: dict[str, object]) -> None:
    source = committed["source"]
    # update-ref needs no checkout dance: git itself does not stop it even for a checked-out branch.
    assert refused(attempt(repo, "update-ref", str(committed["ref"]), "main"))
    assert refused(attempt(repo, "update-ref", str(committed["ref"]), "main", str(committed["commit"])))
    # branch -f of a checked-out branch is refused by git itself; detach first so our hook decides.
    git(source, "checkout", "-q", "--detach")
    done = attempt(repo, "branch", "-f", str(committed["branch"]), "main")
    assert refused(done), done.stderr
    assert refused(attempt(repo, "checkout", "-q", "-B", str(committed["branch"]), "main"))
    assert branch_at(repo, committed) == committed["commit"]
    assert git(repo, "symbolic-ref", "HEAD") == "refs/heads/main"


def test_deleting_an_unpublished_session_branch_refused(repo: Path, committed: dict[str, object]) -> None:
    git(committed["source"], "checkout", "-q", "--detach")
    assert refused(attempt(repo, "branch", "-D", str(committed["branch"])))
    assert refused(attempt(repo, "update-ref", "-d", str(committed["ref"])))
    assert refused(attempt(repo, "update-ref", "-d", str(committed["ref"]), str(committed["commit"])))
    assert branch_at(repo, committed) == committed["commit"]


def test_gc_and_pack_refs_still_work(repo: Path, committed: dict[str, object]) -> None:
    assert attempt(repo, "pack-refs", "--all").returncode == 0
    packed = hooks_dir(repo).parent / "packed-refs"
    assert f"{committed['commit']} {committed['ref']}" in packed.read_text()
    assert not (hooks_dir(repo).parent / str(committed["ref"])).exists()  # the loose file was pruned
    done = attempt(repo, "gc", "-q")
    assert done.returncode == 0, done.stderr
    assert branch_at(repo, committed) == committed["commit"]
    # Packed, the rules still hold.
    git(committed["source"], "checkout", "-q", "--detach")
    assert refused(attempt(repo, "branch", "-D", str(committed["branch"])))
    assert refused(attempt(repo, "update-ref", str(committed["ref"]), "main"))
    assert branch_at(repo, committed) == committed["commit"]


def test_a_session_branch_may_move_once_and_be_deleted_while_it_holds_nothing(repo: Path) -> None:
    init_project(repo)
    hooks_install.install_local(str(repo))
    wp, item = claimed(repo)
    info = sessions.start(wp, item)
    ref = f"refs/heads/session/{info['session']}"
    source = Path(info["worktree"])
    # A plain git commit is the one move (gitwork adds trailers, but the hook counts commits).
    (source / "b.txt").write_text("beta v2\n")
    assert attempt(source, "commit", "-q", "-am", "one").returncode == 0
    assert refused(attempt(source, "commit", "-q", "--allow-empty", "--no-verify", "-m", "two"))
    # A fresh branch still at its (published) base holds no work: deleting it loses nothing.
    other = sessions.start(wp, item)
    git(other["worktree"], "checkout", "-q", "--detach")
    assert attempt(repo, "branch", "-D", f"session/{other['session']}").returncode == 0
    # Creating a session branch with more than one commit of its own is refused.
    (repo / "a.txt").write_text("x\n")
    git(repo, "commit", "-q", "-am", "unpublished 1")
    (repo / "a.txt").write_text("y\n")
    git(repo, "commit", "-q", "-am", "unpublished 2")
    head = git(repo, "rev-parse", "HEAD")
    git(repo, "reset", "-q", "--hard", "HEAD~2")  # main is back: the two commits are on no branch
    assert refused(attempt(repo, "branch", "session/20300101-000000-x-y", head))
    assert git(repo, "rev-parse", ref) != head


def test_other_refs_and_gitwork_state_writes_never_start_python(repo: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The sh prefilter: with a Python path that does not exist, only session refs notice."""
    init_project(repo)
    monkeypatch.setattr(sys, "executable", "/nonexistent/python3")
    hooks_install.install_local(str(repo))
    monkeypatch.undo()
    assert attempt(repo, "branch", "feature").returncode == 0
    assert attempt(repo, "update-ref", "refs/tags/v1", "HEAD").returncode == 0
    assert run_gw(repo, "init").returncode == 0  # a refs/gitwork/state write through update-ref
    assert run_gw(repo, "new", "still works").returncode == 0
    broken = attempt(repo, "branch", "session/20300101-000000-p-a")
    assert broken.returncode != 0  # python was needed here, and the hook fails closed


# --- installing ---------------------------------------------------------------------------------


def hooks_dir(repo: Path) -> Path:
    return Path(git(repo, "rev-parse", "--path-format=absolute", "--git-common-dir")) / "hooks"


def test_install_is_idempotent_and_chains_existing_hooks(repo: Path, tmp_path: Path) -> None:
    init_project(repo)
    folder = hooks_dir(repo)
    marker = tmp_path / "legacy-ran"
    (folder / "pre-commit").write_text(f"#!/bin/sh\necho pre-commit >> {marker}\n")
    (folder / "pre-commit").chmod(0o755)
    (folder / "reference-transaction").write_text(
        f"#!/bin/sh\ncat >/dev/null\necho \"rt $1\" >> {marker}\n"
        "case \"$GW_TEST_REFUSE\" in yes) [ \"$1\" = prepared ] && exit 1;; esac\nexit 0\n")
    (folder / "reference-transaction").chmod(0o755)

    first = hooks_install.install_local(str(repo))
    assert {h["hook"]: h["status"] for h in first["hooks"]} == {"reference-transaction": "chained",
                                                                "pre-commit": "chained"}
    scripts = {name: (folder / name).read_text() for name in hooks_install.LOCAL_HOOKS}
    second = hooks_install.install_local(str(repo))
    assert {h["status"] for h in second["hooks"]} == {"unchanged"}
    assert {name: (folder / name).read_text() for name in hooks_install.LOCAL_HOOKS} == scripts
    assert (folder / "pre-commit.legacy").read_text().startswith("#!/bin/sh\necho pre-commit")
    assert sys.executable in scripts["pre-commit"]

    (repo / "a.txt").write_text("changed\n")
    git(repo, "commit", "-q", "-am", "a normal commit")
    ran = marker.read_text().splitlines()
    assert "pre-commit" in ran and "rt prepared" in ran and "rt committed" in ran
    # The legacy hook's refusal still stands.
    (repo / "a.txt").write_text("again\n")
    env = {**os.environ, "GW_TEST_REFUSE": "yes"}
    blocked = subprocess.run(["git", "commit", "-q", "-am", "blocked"], cwd=repo, capture_output=True, env=env)
    assert blocked.returncode != 0
    assert git(repo, "log", "-1", "--format=%s") == "a normal commit"


def test_install_refuses_to_overwrite_a_legacy_file(repo: Path) -> None:
    init_project(repo)
    folder = hooks_dir(repo)
    (folder / "pre-commit").write_text("#!/bin/sh\nexit 0\n")
    (folder / "pre-commit.legacy").write_text("#!/bin/sh\nexit 0\n")
    with pytest.raises(Invalid, match="already exists"):
        hooks_install.install_local(str(repo))
    assert (folder / "pre-commit").read_text() == "#!/bin/sh\nexit 0\n"
    assert not (folder / "reference-transaction").exists()  # all or nothing


def test_install_from_a_linked_worktree_writes_the_common_dir(repo: Path, tmp_path: Path) -> None:
    init_project(repo)
    linked = tmp_path / "linked"
    git(repo, "worktree", "add", "-q", "-b", "feature", str(linked))
    report = hooks_install.install_local(str(linked))
    assert Path(report["hooks_dir"]) == hooks_dir(repo)
    assert (hooks_dir(repo) / "reference-transaction").exists()
    # ...and the hook guards session branches whichever worktree moves them.
    wp, item = claimed(repo)
    info = sessions.start(wp, item)
    Path(info["worktree"], "a.txt").write_text("v2\n")
    sessions.commit(wp, ["a.txt"], "one", cwd=info["worktree"])
    assert refused(attempt(linked, "update-ref", f"refs/heads/session/{info['session']}", "feature"))


def test_core_hooks_path_is_explicit(repo: Path, tmp_path: Path) -> None:
    init_project(repo)
    shared = tmp_path / "shared-hooks"
    git(repo, "config", "core.hooksPath", str(shared))
    with pytest.raises(Invalid, match="core.hooksPath"):
        hooks_install.install_local(str(repo))
    cli = run_gw(repo, "hooks", "install", "--json")
    assert cli.returncode == 5 and "core.hooksPath" in json.loads(cli.stdout)["message"]
    assert not shared.exists() and not (hooks_dir(repo) / "pre-commit").exists()
    report = hooks_install.install_local(str(repo), use_hooks_path=True)
    assert Path(report["hooks_dir"]) == shared and (shared / "reference-transaction").exists()
    # git runs them from there: the rule holds.
    wp, item = claimed(repo)
    info = sessions.start(wp, item)
    Path(info["worktree"], "a.txt").write_text("v2\n")
    sessions.commit(wp, ["a.txt"], "one", cwd=info["worktree"])
    assert refused(attempt(repo, "update-ref", f"refs/heads/session/{info['session']}", "main"))


def test_cli_hooks_install(repo: Path) -> None:
    init_project(repo)
    first = run_gw(repo, "hooks", "install", "--json")
    assert first.returncode == 0, first.stderr
    doc = json.loads(first.stdout)
    assert doc["ok"] and Path(doc["hooks_dir"]) == hooks_dir(repo)
    assert [h["status"] for h in doc["hooks"]] == ["installed", "installed"]
    again = json.loads(run_gw(repo, "hooks", "install", "--json").stdout)
    assert [h["status"] for h in again["hooks"]] == ["unchanged", "unchanged"]
    for name in hooks_install.LOCAL_HOOKS:
        assert os.access(hooks_dir(repo) / name, os.X_OK)


def test_a_new_session_may_start_on_published_session_work(repo: Path) -> None:
    """A base that is an earlier session's published commit (trailers and all) is still a base."""
    from gitwork.publish import publish

    init_project(repo)
    hooks_install.install_local(str(repo))
    wp, item = claimed(repo)
    first = sessions.start(wp, item)
    Path(first["worktree"], "a.txt").write_text("v2\n")
    sessions.commit(wp, ["a.txt"], "first session", cwd=first["worktree"])
    # fast-forward: main's tip now carries first's Session trailer; the item stays alice's for more work
    publish(wp, first["session"], keep_open=True)
    second = sessions.start(wp, item)
    assert second["base"] == git(repo, "rev-parse", "main")
    Path(second["worktree"], "a.txt").write_text("v3\n")
    done = sessions.commit(wp, ["a.txt"], "second session", cwd=second["worktree"])
    assert git(repo, "rev-parse", f"session/{second['session']}") == done["commit"]
    Path(second["worktree"], "a.txt").write_text("v4\n")
    assert refused(attempt(second["worktree"], "commit", "-q", "--no-verify", "-am", "and again"))
