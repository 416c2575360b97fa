"""The server-side guard of the state ref: a pre-receive hook running ``python -m gitwork.statecheck``.

``receive.denyNonFastForwards`` does not protect refs outside ``refs/heads``, so without this hook
anyone with push access could rewind or rewrite the arbiter's history. Each refused push below is
crafted with git plumbing and pushed with plain ``git push``; the hook must refuse it and leave the
remote's ref where it was, while normal gw traffic and branch pushes go through untouched.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import copy_world, git, let_post, make_repo, run_gw, scrubbed, tip
from daemon import GitDaemon
from test_sync import STATE, gw_ok, machine, new_item

IDENTITY = {"GIT_AUTHOR_NAME": "Mallory", "GIT_AUTHOR_EMAIL": "m@example.invalid",
            "GIT_COMMITTER_NAME": "Mallory", "GIT_COMMITTER_EMAIL": "m@example.invalid"}


def install_statecheck(bare: Path) -> Path:
    hook = bare / "hooks" / "pre-receive"
    hook.write_text(f'#!/bin/sh\nexec "{sys.executable}" -m gitwork.statecheck\n')
    hook.chmod(0o755)
    return hook


def push(repo: Path, url: str, *refspecs: str, force: bool = False) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["git", "push", "--porcelain", *(["--force"] if force else []), url, *refspecs],
                          cwd=repo, capture_output=True, text=True)


def craft(repo: Path, parent: str, changes: dict[str, bytes | None], message: str = "crafted") -> str:
    """A commit on top of ``parent`` with ``changes`` (path -> new content, ``None`` = delete)."""
    env = {**os.environ, **IDENTITY, "GIT_INDEX_FILE": str(repo / ".git" / "crafted-index")}

    def run(*args: str, data: bytes | None = None) -> str:
        done = subprocess.run(["git", *args], cwd=repo, env=env, input=data, capture_output=True)
        assert done.returncode == 0, done.stderr.decode()
        return done.stdout.decode().strip()

    run("read-tree", parent)
    for path, content in changes.items():
        if content is None:
            run("update-index", "--force-remove", path)
        else:
            blob = run("hash-object", "-w", "--stdin", data=content)
            run("update-index", "--add", "--cacheinfo", f"100644,{blob},{path}")
    tree = run("write-tree")
    return run("commit-tree", tree, "-p", parent, "-m", message)


def blob(repo: Path, rev: str, path: str) -> bytes:
    return subprocess.run(["git", "cat-file", "blob", f"{rev}:{path}"], cwd=repo, capture_output=True,
                          check=True).stdout


def events_log(repo: Path, rev: str = STATE) -> str:
    names = git(repo, "ls-tree", "-r", "--name-only", rev).splitlines()
    return next(name for name in names if name.endswith("/events.log"))


class Guarded:
    """A bare arbiter with the state check installed, and a machine that has published some history."""

    def __init__(self, tmp: Path, url: str | None = None) -> None:
        self.bare = make_repo(tmp / "remote.git", bare=True)
        self.hook = install_statecheck(self.bare)
        self.url = url or f"file://{self.bare}"
        self.a = machine(tmp, "a", self.url, publish=True)
        self.item = new_item(self.a, "guarded item")
        claimed = gw_ok(self.a, "claim", self.item, "--as", "alice")
        gw_ok(self.a, "release", self.item, "--as", "alice", "--fence", str(claimed["fence"]))
        self.tip = tip(self.bare)
        assert self.tip == tip(self.a)

    @classmethod
    def copy_of(cls, template: Guarded, to: Path) -> Guarded:
        """The same published history in ``to``, for a fraction of the six processes it took to build."""
        copy_world(template.bare.parent, to, {"a": "remote.git"})
        copy = cls.__new__(cls)
        copy.bare, copy.a = to / "remote.git", to / "a"
        copy.hook, copy.url = copy.bare / "hooks" / "pre-receive", f"file://{to / 'remote.git'}"
        copy.item, copy.tip = template.item, template.tip
        assert tip(copy.bare) == tip(copy.a) == copy.tip
        return copy

    def refused(self, done: subprocess.CompletedProcess[str], *words: str) -> None:
        assert done.returncode != 0, done.stdout + done.stderr
        assert "pre-receive hook declined" in done.stdout + done.stderr
        for word in words:
            assert word in done.stderr, done.stderr
        assert tip(self.bare) == self.tip  # the remote did not move


@pytest.fixture(scope="module")
def guarded_template(tmp_path_factory: pytest.TempPathFactory) -> Guarded:
    with scrubbed(tmp_path_factory):
        return Guarded(tmp_path_factory.mktemp("guarded"))


@pytest.fixture
def guarded(guarded_template: Guarded, tmp_path: Path) -> Guarded:
    return Guarded.copy_of(guarded_template, tmp_path / "guarded")


def test_normal_gw_pushes_are_accepted(guarded: Guarded) -> None:
    a = guarded.a
    assert len(git(guarded.bare, "rev-list", STATE).splitlines()) == 4  # init, new, claim, release: all passed
    for n in range(3):
        new_item(a, f"offline {n}")
    claimed = gw_ok(a, "claim", guarded.item, "--as", "bob")
    assert tip(guarded.bare) == claimed["commit"]
    gw_ok(a, "renew", guarded.item, "--as", "bob", "--fence", str(claimed["fence"]))
    gw_ok(a, "sync")
    assert tip(guarded.bare) == tip(a)


def test_force_push_rewinding_the_state_ref_is_refused(guarded: Guarded) -> None:
    parent = git(guarded.a, "rev-parse", f"{guarded.tip}~2")
    done = push(guarded.a, guarded.url, f"{parent}:{STATE}", force=True)
    guarded.refused(done, "non-fast-forward")
    # A rewrite (same tree, new commit on the old parent) is just as much a rewind.
    info = git(guarded.a, "log", "-1", "--format=%T %P", guarded.tip).split()
    replaced = subprocess.run(["git", "commit-tree", info[0], "-p", info[1], "-m", "rewritten"], cwd=guarded.a,
                              env={**os.environ, **IDENTITY}, capture_output=True, text=True).stdout.strip()
    guarded.refused(push(guarded.a, guarded.url, f"{replaced}:{STATE}", force=True), "non-fast-forward")


def test_without_the_hook_git_accepts_the_rewind(guarded: Guarded) -> None:
    """Why the hook exists: git's own settings do not protect refs outside refs/heads."""
    git(guarded.bare, "config", "receive.denyNonFastForwards", "true")
    guarded.hook.unlink()
    parent = git(guarded.a, "rev-parse", f"{guarded.tip}~2")
    assert push(guarded.a, guarded.url, f"{parent}:{STATE}", force=True).returncode == 0
    assert tip(guarded.bare) == parent


def test_deleting_the_state_ref_is_refused(guarded: Guarded) -> None:
    guarded.refused(push(guarded.a, guarded.url, f":{STATE}"), "deleting")
    done = subprocess.run(["git", "push", guarded.url, "--delete", STATE], cwd=guarded.a, capture_output=True,
                          text=True)
    guarded.refused(done)


@pytest.mark.parametrize("how", ["drop-last-line", "drop-first-line", "change-a-line", "delete-the-file", "empty"])
def test_rewriting_an_append_only_file_is_refused(guarded: Guarded, how: str) -> None:
    path = events_log(guarded.a)
    lines = blob(guarded.a, guarded.tip, path).splitlines(keepends=True)
    assert len(lines) >= 3
    content: bytes | None
    if how == "drop-last-line":
        content = b"".join(lines[:-1])
    elif how == "drop-first-line":
        content = b"".join(lines[1:])
    elif how == "change-a-line":
        record = json.loads(lines[1])
        record["by"] = "mallory"
        content = b"".join([lines[0], (json.dumps(record, separators=(",", ":")) + "\n").encode(), *lines[2:]])
    elif how == "delete-the-file":
        content = None
    else:
        content = b""
    forged = craft(guarded.a, guarded.tip, {path: content}, f"forged: {how}")
    assert git(guarded.a, "merge-base", "--is-ancestor", guarded.tip, forged) == ""  # a fast-forward
    guarded.refused(push(guarded.a, guarded.url, f"{forged}:{STATE}"), "append-only")
    # Hidden under a later, innocent commit it is still refused.
    innocent = craft(guarded.a, forged, {"notes.txt": b"nothing to see\n"})
    guarded.refused(push(guarded.a, guarded.url, f"{innocent}:{STATE}"), "append-only")


def test_a_well_formed_append_by_hand_is_refused_but_gw_s_own_is_accepted(guarded: Guarded) -> None:
    """A well-formed append passes the structural checks above, but a state commit must also be its
    command's replay (derive.py): one written by hand is refused; the same change made by gw lands."""
    path = events_log(guarded.a)
    old = blob(guarded.a, guarded.tip, path)
    last = json.loads(old.splitlines()[-1])
    last["seq"] += 1
    forged = craft(guarded.a, guarded.tip, {path: old + (json.dumps(last) + "\n").encode()})
    guarded.refused(push(guarded.a, guarded.url, f"{forged}:{STATE}"), "carries no command document")
    item = path.split("/")[2]
    for repo in (guarded.a, guarded.bare):  # alice may post on any item, here and on the arbiter that derives it
        let_post(repo, "alice")
    gw_ok(guarded.a, "msg", item, "an honest append", "--as", "alice")
    done = push(guarded.a, guarded.url, f"{STATE}:{STATE}")
    assert done.returncode == 0, done.stderr
    assert tip(guarded.bare) == tip(guarded.a)


@pytest.mark.parametrize("content", [b"format: 99\n", b"format: [1\n", b"format: one\n"])
def test_state_of_a_newer_or_broken_format_is_refused(guarded: Guarded, content: bytes) -> None:
    forged = craft(guarded.a, guarded.tip, {"format.yaml": content})
    done = push(guarded.a, guarded.url, f"{forged}:{STATE}")
    guarded.refused(done, "format.yaml" if b"[" in content else "format")


def test_unparseable_item_state_is_refused(guarded: Guarded) -> None:
    path = events_log(guarded.a).replace("events.log", "item.yaml")
    forged = craft(guarded.a, guarded.tip, {path: b"title: [unclosed\n"})
    guarded.refused(push(guarded.a, guarded.url, f"{forged}:{STATE}"))


def test_branch_pushes_are_unaffected(guarded: Guarded) -> None:
    a, url, bare = guarded.a, guarded.url, guarded.bare
    env = {**os.environ, **IDENTITY}
    for n in range(2):
        (a / "work.log").write_text("line\n" * (2 - n))  # a *.log that shrinks: not state, not checked
        git(a, "add", "work.log")
        subprocess.run(["git", "commit", "-q", "-m", f"work {n}"], cwd=a, env=env, check=True)
    assert push(a, url, "HEAD:refs/heads/main").returncode == 0
    assert tip(bare, "refs/heads/main") == tip(a, "HEAD")
    # Rewinding and deleting branches is git's business (its own settings decide), not the hook's.
    assert push(a, url, "HEAD~1:refs/heads/main", force=True).returncode == 0
    assert tip(bare, "refs/heads/main") == tip(a, "HEAD~1")
    assert push(a, url, ":refs/heads/main").returncode == 0
    assert tip(bare, "refs/heads/main") is None
    assert tip(bare) == guarded.tip


def test_the_hook_guards_pushes_through_git_daemon(tmp_path: Path) -> None:
    base = tmp_path / "served"
    base.mkdir()
    with GitDaemon(base) as daemon:
        guarded = Guarded(base, daemon.url("remote"))
        parent = git(guarded.a, "rev-parse", f"{guarded.tip}~1")
        guarded.refused(push(guarded.a, guarded.url, f"{parent}:{STATE}", force=True), "non-fast-forward")
        guarded.refused(push(guarded.a, guarded.url, f":{STATE}"), "deleting")
        gw_ok(guarded.a, "claim", guarded.item, "--as", "carol")
        assert tip(guarded.bare) == tip(guarded.a)


def test_gw_hooks_install_server_refuses_a_rewind(tmp_path: Path) -> None:
    bare = make_repo(tmp_path / "remote.git", bare=True)
    installed = run_gw(tmp_path, "hooks", "install", "--server", str(bare), "--json")
    assert installed.returncode == 0, installed.stderr
    assert (bare / "hooks" / "pre-receive").exists()
    url = f"file://{bare}"
    a = machine(tmp_path, "a", url, publish=True)
    item = new_item(a, "guarded by the installed hook")
    gw_ok(a, "claim", item, "--as", "alice")  # normal traffic passes the installed hook
    head = tip(bare)
    assert head == tip(a)
    done = push(a, url, f"{head}~1:{STATE}", force=True)
    assert done.returncode != 0, done.stdout + done.stderr
    assert "non-fast-forward" in done.stderr
    assert tip(bare) == head
    assert push(a, url, f":{STATE}").returncode != 0
    assert tip(bare) == head
