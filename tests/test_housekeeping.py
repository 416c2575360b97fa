"""gw lets git pack its loose objects now and then (update-ref alone never triggers housekeeping)."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from conftest import git
from gitwork import workplane
from gitwork.workplane import Workplane


def test_commands_trigger_git_gc_auto(repo: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # git estimates the loose count from one of the 256 object folders (objects/17): with the
    # threshold at 1, ~2,000 loose objects make "nothing there" a 1-in-2,000 chance.
    git(repo, "config", "gc.auto", "1")
    git(repo, "config", "gc.autoDetach", "false")
    with Workplane(str(repo)) as wp:
        wp.do("init")
        monkeypatch.setattr(workplane, "AUTO_GC_ONE_IN", 10**9)  # build up loose objects first
        for n in range(250):
            wp.do("new", title=f"item {n}")
        monkeypatch.setattr(workplane, "AUTO_GC_ONE_IN", 1)
        wp.do("new", title="the one that triggers it")
    packs = repo / ".git" / "objects" / "pack"
    deadline = time.monotonic() + 30
    while not list(packs.glob("*.pack")) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert list(packs.glob("*.pack")), "git gc --auto never packed the state objects"
    assert git(repo, "rev-parse", "refs/gitwork/state")  # and the state is intact
    assert len(git(repo, "rev-list", "refs/gitwork/state").split()) == 252


def test_gc_auto_zero_is_respected(repo: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    git(repo, "config", "gc.auto", "0")
    monkeypatch.setattr(workplane, "AUTO_GC_ONE_IN", 1)
    with Workplane(str(repo)) as wp:
        wp.do("init")
        for n in range(5):
            wp.do("new", title=f"item {n}")
    time.sleep(1)
    assert not list((repo / ".git" / "objects" / "pack").glob("*.pack"))
