"""One list of git's config files (``gitdir.config_paths``): a setting in any file git reads is seen by
discovery's own reader and by ``gw serve``'s writer, and a change to it is noticed by the writer.

The writer kept a copy of the list; the two differed (``GIT_CONFIG_SYSTEM``, ``GIT_CONFIG_GLOBAL``
and ``GIT_CONFIG_NOSYSTEM`` were the reader's or no one's), so a change git saw could stay unseen by
the server until its periodic re-read. Each case is compared with ``git config --get`` itself."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from conftest import git, make_repo
from gitwork import gitdir
from gitwork.serve import writer
from gitwork.workplane import Workplane

KEY = "gitwork.clock-margin"  # any setting gitwork reads from git config; its name is load()'s "clock_margin"


class Linked:
    """A repository and a linked worktree of it (its git directory is not the common one)."""

    def __init__(self, base: Path) -> None:
        self.main = make_repo(base / "main")
        git(self.main, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "--allow-empty", "-m", "first")
        self.tree = base / "linked"
        git(self.main, "worktree", "add", "-q", str(self.tree))
        self.common = self.main / ".git"
        self.git_dir = Path(git(self.tree, "rev-parse", "--absolute-git-dir"))
        assert self.git_dir != self.common

    def git_says(self) -> str | None:
        done = subprocess.run(["git", "config", "--get", KEY], cwd=self.tree, capture_output=True, text=True)
        return done.stdout.strip() if done.returncode == 0 else None

    def reader_says(self) -> str | None:
        values = gitdir.read_config(str(self.git_dir), str(self.common))
        assert values is not None, "the reader gave up on plain config files"
        return values.get(KEY)


def set_in(path: Path, value: str) -> None:
    """As a person does it: ``git config --file`` (a lock file renamed over the old one)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    subprocess.run(["git", "config", "--file", str(path), KEY, value], check=True)


def file_of(scope: str, world: Linked, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The file ``scope`` names, with the environment that makes git read it."""
    home = Path(os.environ["HOME"])  # a scratch one (conftest)
    if scope == "system":
        monkeypatch.delenv("GIT_CONFIG_NOSYSTEM")
        monkeypatch.setenv("GIT_CONFIG_SYSTEM", str(tmp_path / "system-gitconfig"))
        return tmp_path / "system-gitconfig"
    if scope == "global: GIT_CONFIG_GLOBAL":
        monkeypatch.setenv("GIT_CONFIG_GLOBAL", str(tmp_path / "global-gitconfig"))
        return tmp_path / "global-gitconfig"
    if scope == "global: XDG_CONFIG_HOME":
        return Path(os.environ["XDG_CONFIG_HOME"]) / "git" / "config"
    if scope == "global: ~/.gitconfig":
        return home / ".gitconfig"
    if scope == "local":
        return world.common / "config"
    assert scope == "worktree"
    git(world.main, "config", "extensions.worktreeConfig", "true")
    return world.git_dir / "config.worktree"


SCOPES = ["system", "global: GIT_CONFIG_GLOBAL", "global: XDG_CONFIG_HOME", "global: ~/.gitconfig", "local",
          "worktree"]


@pytest.mark.parametrize("scope", SCOPES)
def test_a_setting_in_each_file_git_reads_is_seen_by_the_reader_and_the_writer_and_its_change_noticed(
        scope: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    world = Linked(tmp_path)
    path = file_of(scope, world, tmp_path, monkeypatch)
    # Only a file's stamp may tell the writer to read again: its periodic re-read never comes here.
    monkeypatch.setattr(writer, "REFRESH", 1e9)
    set_in(path, "41")
    assert world.git_says() == "41", "the test's file is not one git reads"
    assert world.reader_says() == "41"
    assert (str(path), scope.split(":")[0]) in (gitdir.config_paths(str(world.git_dir), str(world.common)) or [])
    serving = writer.Writer(str(world.tree), now=lambda: None)
    try:
        assert serving._plane()[1].clock_margin == 41  # noqa: SLF001 - the settings its writes are decided with
        set_in(path, "42")
        assert world.git_says() == "42" and world.reader_says() == "42"
        assert serving._plane()[1].clock_margin == 42, f"the writer did not notice a change to {path}"  # noqa: SLF001
    finally:
        serving.close()


@pytest.mark.parametrize("scope", ["system", "worktree"])
def test_a_file_git_does_not_read_is_not_read(scope: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The two files git passes over in this environment: the system file under GIT_CONFIG_NOSYSTEM=1 and
    config.worktree without extensions.worktreeConfig. Neither is read, by git or by gitwork."""
    world = Linked(tmp_path)
    if scope == "system":
        path = tmp_path / "system-gitconfig"
        monkeypatch.setenv("GIT_CONFIG_SYSTEM", str(path))  # GIT_CONFIG_NOSYSTEM=1 stays (conftest)
    else:
        path = world.git_dir / "config.worktree"
    set_in(path, "41")
    assert world.git_says() is None
    assert world.reader_says() is None
    with Workplane(str(world.tree)) as wp:
        assert wp.settings.clock_margin == 30  # the default
    files = gitdir.config_paths(str(world.git_dir), str(world.common)) or []
    assert (str(path), "system") not in files


def test_a_nosystem_git_dies_on_is_left_to_git(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    world = Linked(tmp_path)
    monkeypatch.setenv("GIT_CONFIG_NOSYSTEM", "maybe")
    assert gitdir.config_paths(str(world.git_dir), str(world.common)) is None
    assert gitdir.read_config(str(world.git_dir), str(world.common)) is None
    assert subprocess.run(["git", "config", "--get", KEY], cwd=world.tree, capture_output=True).returncode not in (0, 1)
