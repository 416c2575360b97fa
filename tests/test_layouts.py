"""The layout matrix: the core commands on every repository layout git supports, checked against git.

gitwork reads and writes git's files itself to stay fast; whatever it reads or writes, it must read or
write exactly as git would, or ask git. Each layout below is built with git itself; the real ``gw``
(its entry point, in this process; in a child where the layout changes the interpreter itself) runs
the core commands in the layout's directory and environment (``GIT_DIR``, ``GIT_OBJECT_DIRECTORY`` ...
as a person would have them), and every result is checked against what
git reports: ``git fsck --full --strict``, ``git rev-list`` of the state ref, file modes, fsync calls.
Each layout is built once, in its own test, so the matrix spreads over xdist workers.
"""

from __future__ import annotations

import json
import os
import stat
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

from conftest import gw_cmd, gw_here
from gitwork.workplane import Workplane

STATE = "refs/gitwork/state"
IDENTITY = {"GIT_AUTHOR_NAME": "Person", "GIT_AUTHOR_EMAIL": "person@example.com",
            "GIT_COMMITTER_NAME": "Person", "GIT_COMMITTER_EMAIL": "person@example.com"}


class Layout:
    """A repository as a person would use it: where gw runs, and the environment it runs in."""

    def __init__(self, cwd: Path, env: dict[str, str] | None = None, *, work_tree: bool = True,
                 objects: Path | None = None) -> None:
        self.cwd, self.env, self.work_tree = cwd, dict(env or {}), work_tree
        self.objects = objects  # where git itself keeps this repository's objects

    def git(self, *args: str, check: bool = True, env: dict[str, str] | None = None) -> str:
        done = subprocess.run(["git", *args], cwd=self.cwd, capture_output=True, text=True,
                              env={**os.environ, **self.env, **(env or {})})
        if check and done.returncode != 0:
            raise AssertionError(f"git {' '.join(args)} failed ({done.returncode}): {done.stderr}")
        return done.stdout.strip()

    def gw(self, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
        """``gw`` in this layout's directory and environment: through the CLI's entry point in this
        process, or in a child when the layout changes the interpreter itself (a sitecustomize on
        PYTHONPATH, which only a new interpreter loads)."""
        if "PYTHONPATH" in self.env:
            return subprocess.run(gw_cmd(*args), cwd=self.cwd, capture_output=True, text=True, timeout=120,
                                  env={**os.environ, **self.env, **(env or {})})
        return gw_here(self.cwd, *args, env={**self.env, **(env or {})})

    def ok(self, *args: str, env: dict[str, str] | None = None) -> object:
        done = self.gw(*args, "--json", env=env)
        assert done.returncode == 0, f"gw {' '.join(args)} -> {done.returncode}: {done.stderr.strip()}"
        assert done.stderr.strip() == "" or "warning" not in done.stderr.lower(), done.stderr
        return json.loads(done.stdout)

    def fsck(self) -> None:
        done = subprocess.run(["git", "fsck", "--full", "--strict", "--no-progress"], cwd=self.cwd,
                              capture_output=True, text=True, env={**os.environ, **self.env})
        assert done.returncode == 0 and "error" not in done.stderr, done.stderr


def sh(cwd: Path, *args: str, env: dict[str, str] | None = None) -> str:
    done = subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True,
                          env={**os.environ, **IDENTITY, **(env or {})})
    assert done.returncode == 0, f"git {' '.join(args)}: {done.stderr}"
    return done.stdout.strip()


def project(path: Path, *init: str) -> Path:
    """A repository on branch main with one commit."""
    path.mkdir(parents=True, exist_ok=True)
    sh(path, "init", "-q", "-b", "main", *init)
    (path / "a.txt").write_text("alpha\n")
    sh(path, "add", "a.txt")
    sh(path, "commit", "-q", "-m", "initial")
    return path


def origin_with_state(tmp: Path, commands: int = 4) -> Path:
    """A repository whose state ref already has a few commits (to clone, share or fetch shallowly)."""
    origin = project(tmp / "origin")
    sh(origin, "config", "uploadpack.allowFilter", "true")
    with Workplane(str(origin)) as wp:  # in-process: the origin is not what is under test
        wp.do("init")
        for n in range(commands):
            wp.do("new", title=f"origin item {n}", description=f"a description to make blob {n}")
    return origin


# --- the layouts ------------------------------------------------------------------------------------


def default(tmp: Path) -> Layout:
    return Layout(project(tmp / "repo"))


def sha256(tmp: Path) -> Layout:
    return Layout(project(tmp / "repo", "--object-format=sha256"))


def bare(tmp: Path) -> Layout:
    path = tmp / "bare.git"
    sh(tmp, "init", "-q", "--bare", str(path))
    return Layout(path, work_tree=False)


def git_dir_absolute(tmp: Path) -> Layout:
    sh(tmp, "init", "-q", "--bare", str(tmp / "store.git"))
    (tmp / "wt").mkdir()
    return Layout(tmp / "wt", {"GIT_DIR": str(tmp / "store.git"), "GIT_WORK_TREE": str(tmp / "wt")})


def git_dir_relative(tmp: Path) -> Layout:
    sh(tmp, "init", "-q", "--bare", str(tmp / "store.git"))
    (tmp / "wt").mkdir()
    return Layout(tmp / "wt", {"GIT_DIR": "../store.git", "GIT_WORK_TREE": "."})


def object_directory(tmp: Path) -> Layout:
    repo = project(tmp / "repo")
    objects = tmp / "elsewhere" / "objects"
    objects.mkdir(parents=True)
    # The project's first commit lives in .git/objects: reachable through the alternates variable.
    env = {"GIT_OBJECT_DIRECTORY": str(objects), "GIT_ALTERNATE_OBJECT_DIRECTORIES": str(repo / ".git" / "objects")}
    return Layout(repo, env, objects=objects)


def linked_worktree(tmp: Path) -> Layout:
    main = project(tmp / "main")
    sh(main, "worktree", "add", "-q", "-b", "side", str(tmp / "linked"))
    return Layout(tmp / "linked", objects=main / ".git" / "objects")


def clone_shared(tmp: Path) -> Layout:
    origin = origin_with_state(tmp)
    sh(tmp, "clone", "-q", "--shared", str(origin), str(tmp / "clone"))
    sh(tmp / "clone", "fetch", "-q", "origin", f"{STATE}:{STATE}")
    return Layout(tmp / "clone")


def clone_reference(tmp: Path) -> Layout:
    origin = origin_with_state(tmp)
    sh(tmp, "clone", "-q", "--reference", str(origin), f"file://{origin}", str(tmp / "clone"))
    sh(tmp / "clone", "fetch", "-q", "origin", f"{STATE}:{STATE}")
    return Layout(tmp / "clone")


def shallow(tmp: Path) -> Layout:
    origin = origin_with_state(tmp)
    clone = project(tmp / "clone")
    sh(clone, "remote", "add", "origin", f"file://{origin}")
    sh(clone, "fetch", "-q", "--depth", "1", "origin", f"+{STATE}:{STATE}")
    assert (clone / ".git" / "shallow").read_text().split() == [sh(clone, "rev-parse", STATE)]
    return Layout(clone)


def partial(tmp: Path) -> Layout:
    origin = origin_with_state(tmp)
    sh(tmp, "clone", "-q", "--filter=blob:none", "--no-checkout", f"file://{origin}", str(tmp / "clone"))
    sh(tmp / "clone", "fetch", "-q", "origin", f"+{STATE}:{STATE}")
    missing = sh(tmp / "clone", "rev-list", "--objects", "--missing=print", STATE)
    assert any(line.startswith("?") for line in missing.splitlines()), "the partial clone has every blob"
    return Layout(tmp / "clone")


def gc_aggressive(tmp: Path) -> Layout:
    layout = Layout(project(tmp / "repo"))
    layout.ok("init")
    layout.ok("new", "packed before the rest")
    layout.git("gc", "-q", "--aggressive", "--prune=now")
    assert STATE in (layout.cwd / ".git" / "packed-refs").read_text()
    assert not (layout.cwd / ".git" / STATE).exists()
    return layout


def shared_group(tmp: Path) -> Layout:
    return Layout(project(tmp / "repo", "--shared=group"))


def global_config(tmp: Path) -> Layout:
    home = tmp / "home"
    home.mkdir()
    (home / ".gitconfig").write_text(
        "; a comment line\n"
        "[extensions]\n\tobjectFormat = sha256   ; git reads extensions from the repository's config only\n"
        "[gitwork]\n\tagent = alice#laptop\n\tdefault-ttl = 20m ; inline comment\n"
    )
    return Layout(project(tmp / "repo"), {"HOME": str(home), "XDG_CONFIG_HOME": str(home / ".config")})


FSYNC_SHIM = '''
import os
_real = os.fsync
def _counting(fd):
    with open(os.environ["GW_TEST_FSYNC_LOG"], "a") as log:
        log.write("%d\\n" % fd)
    return _real(fd)
os.fsync = _counting
'''


def fsync(tmp: Path) -> Layout:
    repo = project(tmp / "repo")
    sh(repo, "config", "core.fsync", "loose-object,reference")
    shim = tmp / "shim"
    shim.mkdir()
    (shim / "sitecustomize.py").write_text(FSYNC_SHIM)
    python_path = os.pathsep.join(p for p in (str(shim), os.environ.get("PYTHONPATH", "")) if p)
    return Layout(repo, {"PYTHONPATH": python_path, "GW_TEST_FSYNC_LOG": str(tmp / "fsync.log")})


def unicode_path(tmp: Path) -> Layout:
    return Layout(project(tmp / "with spaces" / "ünï cødé répo"))


LAYOUTS: dict[str, Callable[[Path], Layout]] = {f.__name__: f for f in (
    default, sha256, bare, git_dir_absolute, git_dir_relative, object_directory, linked_worktree, clone_shared,
    clone_reference, shallow, partial, gc_aggressive, shared_group, global_config, fsync, unicode_path,
)}


# --- what every layout must do ------------------------------------------------------------------------


def loose_objects(objects: Path) -> set[str]:
    return {f"{d.name}{f.name}" for d in objects.iterdir() if len(d.name) == 2 and d.is_dir()
            for f in d.iterdir() if not f.name.startswith("tmp_")}


def core_commands(layout: Layout) -> dict[str, str]:
    """init, new, ready, claim, msg, thread, release, history, log: each as git sees it afterwards."""
    layout.ok("init")
    first = layout.ok("new", "first item", "-c", "it works")["item"]
    second = layout.ok("new", "second item", "--dep", first)["item"]
    ready = [row["item"] for row in layout.ok("ready")]
    assert first in ready and second not in ready
    claim = layout.ok("claim", first, "--as", "alice")
    assert claim["holder"] == "alice" and claim["fence"] >= 1
    assert layout.ok("msg", first, "hello from the layout matrix", "--as", "alice")["seq"] == 1
    thread = layout.gw("thread", first)
    assert thread.returncode == 0 and "hello from the layout matrix" in thread.stdout, thread.stderr
    layout.ok("release", first, "--as", "alice")
    events = [e["type"] for e in layout.ok("history", first)]
    assert events[0] == "created" and "claim" in events and events[-1] == "released"
    # gw log walks the same first-parent history git does (and stops where git stops: shallow).
    logged = [entry["commit"] for entry in layout.ok("log")]
    assert logged == layout.git("rev-list", "--first-parent", STATE).split()
    tip = layout.git("rev-parse", STATE)
    assert logged[0] == tip and len(tip) in (40, 64)
    layout.fsck()
    return {"first": first, "second": second, "tip": tip}


@pytest.mark.parametrize("name", list(LAYOUTS))
def test_core_commands_on_every_layout(name: str, tmp_path: Path) -> None:
    layout = LAYOUTS[name](tmp_path)
    before = loose_objects(layout.objects) if layout.objects else set()
    log = tmp_path / "fsync.log"
    result = core_commands(layout)

    if name == "sha256":
        assert len(result["tip"]) == 64
        assert layout.git("rev-parse", "--show-object-format") == "sha256"
    if name == "global_config":
        # objectFormat in the global config is ignored, as git ignores it; the inline comments too.
        assert len(result["tip"]) == 40
        claim = layout.ok("claim", result["first"])
        assert claim["holder"] == "alice"
        assert layout.ok("renew", result["first"])["holder"] == "alice"
        # And inside a hook, where GIT_DIR is set and gw asks git, the same person is the same name:
        # its own renew is not refused as someone else's (exit 7).
        in_hook = {"GIT_DIR": str(layout.cwd / ".git")}
        assert layout.ok("renew", result["first"], env=in_hook)["holder"] == "alice"
        assert layout.ok("show", result["first"], env=in_hook)["lease"]["holder"] == "alice"
    if name == "object_directory":
        assert layout.objects is not None
        written = loose_objects(layout.objects) - before
        assert result["tip"] in written
        assert not loose_objects(layout.cwd / ".git" / "objects") & written, "objects went to .git/objects"
        assert subprocess.run(["git", "cat-file", "-e", result["tip"]], cwd=layout.cwd).returncode != 0
    if name == "linked_worktree":
        assert layout.objects is not None and result["tip"] in loose_objects(layout.objects)
    if name == "shallow":
        # The state's history stops at the shallow boundary, for gw exactly as for git.
        assert len(layout.ok("log")) == len(layout.git("log", "--format=%H", STATE).split())
    if name == "gc_aggressive":
        layout.git("gc", "-q", "--aggressive", "--prune=now")
        assert layout.ok("claim", result["first"], "--as", "bob")["holder"] == "bob"
        layout.fsck()
    if name == "shared_group":
        check_shared_modes(layout.cwd / ".git" / "objects", layout.git("rev-list", "--objects", STATE))
        # gw's own folder in the git directory (its read cache) gets the mode git gives its folders.
        made_by_git = layout.cwd / ".git" / "refs" / "gitwork"
        made_by_gw = layout.cwd / ".git" / "gitwork"
        assert stat.S_IMODE(made_by_gw.stat().st_mode) == stat.S_IMODE(made_by_git.stat().st_mode) == 0o2775
    if name == "fsync":
        # Exactly one fsync per loose object gw wrote (git fsyncs each one with loose-object set):
        # every object but the project's own first commit, tree and blob, which git wrote; and one per
        # move of the state ref (``reference``, which git fsyncs too), which gw makes in-process but the
        # first (the ref's folder made by git, with git's permissions: `git update-ref`).
        everything = loose_objects(layout.cwd / ".git" / "objects")
        moves = int(layout.git("rev-list", "--count", STATE).strip()) - 1
        assert len(log.read_text().split()) == len(everything) - 3 + moves
        log.write_text("")
        layout.ok("new", "one more")
        made = loose_objects(layout.cwd / ".git" / "objects") - everything
        assert made and len(log.read_text().split()) == len(made) + 1
        # Without the setting: none (git's default on Linux leaves loose objects to the page cache).
        layout.git("config", "--unset", "core.fsync")
        log.write_text("")
        layout.ok("new", "and one without fsync")
        assert log.read_text() == ""


def check_shared_modes(objects: Path, listing: str) -> None:
    """Every fan-out folder and loose object has the mode git itself gives it in a shared repository."""
    folders = [d for d in objects.iterdir() if len(d.name) == 2 and d.is_dir()]
    assert folders
    for folder in folders:
        assert stat.S_IMODE(folder.stat().st_mode) == 0o2775, f"{folder}: {oct(folder.stat().st_mode)}"
        for loose in folder.iterdir():
            assert stat.S_IMODE(loose.stat().st_mode) == 0o444, f"{loose}: {oct(loose.stat().st_mode)}"
    assert listing  # the state's objects are there for git to list


# --- sessions and publish, where a work tree with a branch exists -------------------------------------


@pytest.mark.parametrize("name", ["default", "sha256", "linked_worktree", "unicode_path", "shared_group"])
def test_session_commit_and_publish(name: str, tmp_path: Path) -> None:
    layout = LAYOUTS[name](tmp_path)
    layout.ok("init")
    item = layout.ok("new", "change a file")["item"]
    layout.ok("claim", item, "--as", "alice")
    branch = layout.git("symbolic-ref", "--short", "HEAD")
    started = layout.ok("session", "start", item, "--as", "alice")
    worktree = Path(started["worktree"])
    (worktree / "a.txt").write_text("alpha, changed in a session\n")
    session = Layout(worktree, layout.env)
    committed = session.ok("session", "commit", "--file", "a.txt", "-m", "change a", "--as", "alice")
    published = session.ok("publish", "--into", branch, "--as", "alice")
    assert published["commit"] == committed["commit"] == layout.git("rev-parse", branch)
    layout.fsck()
    if name == "shared_group":
        check_shared_modes(layout.cwd / ".git" / "objects", layout.git("rev-list", "--objects", STATE))


# --- several machines: sync where the layout has a remote ------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize("name", ["default", "shallow", "clone_shared", "partial"])
def test_sync_and_claim_after_the_remote_moved(name: str, tmp_path: Path) -> None:
    layout = LAYOUTS[name](tmp_path)
    arbiter = tmp_path / "arbiter.git"
    origin = tmp_path / "origin"
    if name == "default":
        sh(tmp_path, "init", "-q", "--bare", str(arbiter))
        layout.git("remote", "add", "origin", f"file://{arbiter}")
        layout.ok("init", "--remote", "origin")
        layout.ok("sync")
        other_url = f"file://{arbiter}"
    else:
        layout.git("remote", "set-url", "origin", f"file://{origin}")
        layout.ok("remote", "set", "origin")
        other_url = f"file://{origin}"
    other = project(tmp_path / "other")
    Layout(other).git("remote", "add", "origin", other_url)
    Layout(other).ok("init", "--remote", "origin")
    item = Layout(other).ok("new", "made on the other machine")["item"]
    Layout(other).ok("sync")
    Layout(other).ok("claim", item, "--as", "bob")  # the remote moves on
    Layout(other).ok("release", item, "--as", "bob")

    synced = layout.ok("sync")
    assert synced["tip"] == synced["remote_tip"]
    assert layout.ok("claim", item, "--as", "alice")["fence"] == 2
    local = layout.ok("new", "made offline here")["item"]
    Layout(other).ok("new", "and another over there")
    Layout(other).ok("sync")
    assert layout.ok("sync")["refused"] == []
    Layout(other).ok("sync")
    assert local in [row["item"] for row in Layout(other).ok("ready")]
    logged = [entry["commit"] for entry in layout.ok("log")]
    assert logged == layout.git("rev-list", "--first-parent", STATE).split()
    layout.fsck()
