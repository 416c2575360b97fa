"""gw lets git pack its loose objects now and then (update-ref alone never triggers housekeeping)."""

from __future__ import annotations

import hashlib
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest

from conftest import git
from gitwork import workplane
from gitwork.workplane import Workplane


def loose_blobs_in_folder_17(repo: Path, count: int) -> None:
    """Write ``count`` loose blobs whose ids start with 17: git estimates the loose object count from
    that one folder (``gc --auto`` packs when it holds more than ``gc.auto / 256`` objects)."""
    n = 0
    for _ in range(count):
        while True:
            n += 1
            data = f"blob {n}\n".encode()
            if hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest().startswith("17"):
                break
        assert git(repo, "hash-object", "-w", "--stdin", input=data).startswith("17")


def test_commands_trigger_git_gc_auto(repo: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # With the threshold at 1, two loose objects in objects/17 are "too many" for git's estimate.
    git(repo, "config", "gc.auto", "1")
    git(repo, "config", "gc.autoDetach", "false")
    with Workplane(str(repo)) as wp:
        monkeypatch.setattr(workplane, "AUTO_GC_ONE_IN", 10**9)  # no housekeeping while setting up
        wp.do("init")
        for n in range(5):
            wp.do("new", title=f"item {n}")
        loose_blobs_in_folder_17(repo, 2)
        packs = repo / ".git" / "objects" / "pack"
        assert not list(packs.glob("*.pack"))
        monkeypatch.setattr(workplane, "AUTO_GC_ONE_IN", 1)
        wp.do("new", title="the one that triggers it")
    deadline = time.monotonic() + 30
    while not list(packs.glob("*.pack")) and time.monotonic() < deadline:
        time.sleep(0.02)
    assert list(packs.glob("*.pack")), "git gc --auto never packed the state objects"
    assert git(repo, "rev-parse", "refs/gitwork/state")  # and the state is intact
    assert len(git(repo, "rev-list", "refs/gitwork/state").split()) == 7


def test_gc_auto_zero_is_respected(repo: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every command draws the lot (``AUTO_GC_ONE_IN`` = 1) and asks ``git gc --auto``; with ``gc.auto``
    0 git packs nothing. The housekeeping is run to its end here (``gitcmd.start`` detaches it, which
    tests/test_startup.py checks), so the absence of a pack is git's answer, not a race."""
    from gitwork import gitcmd

    git(repo, "config", "gc.auto", "0")
    monkeypatch.setattr(workplane, "AUTO_GC_ONE_IN", 1)
    started: list[list[str]] = []

    def synchronous(args: Any, **_kwargs: Any) -> bool:
        started.append(list(args))
        assert subprocess.run(["git", *args], capture_output=True).returncode == 0
        return True

    monkeypatch.setattr(gitcmd, "start", synchronous)
    with Workplane(str(repo)) as wp:
        wp.do("init")
        for n in range(5):
            wp.do("new", title=f"item {n}")
    assert len(started) == 6 and all("gc" in a and "--auto" in a for a in started), started
    assert not list((repo / ".git" / "objects" / "pack").glob("*.pack"))


# --- writing while git keeps house ---------------------------------------------------------------------


def test_a_long_lived_workplane_writes_after_gc_removed_its_object_folders(repo: Path) -> None:
    """``git gc`` packs the objects and ``prune-packed`` removes the emptied fan-out folders; a
    Workplane that wrote into those folders before must make them again, as git does."""
    with Workplane(str(repo)) as wp:
        wp.do("init")
        for n in range(40):
            wp.do("new", title=f"before gc {n}")
        git(repo, "gc", "-q")
        objects = repo / ".git" / "objects"
        assert not [d for d in objects.iterdir() if len(d.name) == 2], "gc left loose objects: nothing tested"
        for n in range(40):
            wp.do("new", title=f"after gc {n}")
    assert len(git(repo, "rev-list", "refs/gitwork/state").split()) == 81
    git(repo, "fsck", "--full", "--strict")


def test_the_writer_remakes_a_folder_prune_packed_removed(repo: Path) -> None:
    """The exact race: the folder exists when checked, is gone when the temporary file is made."""
    from gitwork.objects import LooseObjects

    objects = repo / ".git" / "objects"
    writer = LooseObjects(str(objects))
    first = writer.write("blob", b"first")
    # Another blob in the same fan-out folder.
    n = 0
    while writer.hash("blob", f"other {n}".encode())[:2] != first[:2]:
        n += 1
    git(repo, "pack-objects", "-q", str(objects / "pack" / "pack"), input=f"{first}\n".encode())
    git(repo, "prune-packed")
    assert not (objects / first[:2]).exists()
    second = writer.write("blob", f"other {n}".encode())
    assert (objects / second[:2] / second[2:]).is_file()
    assert git(repo, "cat-file", "-p", second) == f"other {n}"
    assert git(repo, "cat-file", "-p", first) == "first"  # from the pack


WRITER = r"""
import sys, time
from gitwork.workplane import Workplane
deadline = time.monotonic() + float(sys.argv[2])
count = 0
with Workplane(sys.argv[1]) as wp:
    while time.monotonic() < deadline:
        item = wp.do("new", title=f"stress {count}").result["item"]
        wp.do("claim", item=item, **{"as": "w"})
        wp.do("release", item=item, **{"as": "w"})
        count += 3
print(count)
"""

HOUSEKEEPER = r"""
deadline=$(( $(date +%s) + $1 ))
while [ "$(date +%s)" -lt "$deadline" ]; do
    git gc --quiet || exit 1
    git repack -a -d -q || exit 1
    git prune-packed || exit 1
    git pack-refs --all || exit 1
done
"""


@pytest.mark.slow
def test_writers_beside_git_housekeeping(repo: Path) -> None:
    """Writers in a loop (a long-lived Workplane and the gw CLI) while gc, repack -a -d, prune-packed and
    pack-refs --all run beside them: no command fails, and git finds nothing wrong afterwards."""
    import os
    import subprocess
    import sys

    from conftest import gw_cmd

    seconds = 3
    with Workplane(str(repo)) as wp:
        wp.do("init")
    env = {**os.environ, "GW_NO_AUTO_GC": "1"}
    writer = subprocess.Popen([sys.executable, "-c", WRITER, str(repo), str(seconds)], cwd=repo, env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    keeper = subprocess.Popen(["sh", "-c", HOUSEKEEPER, "sh", str(seconds)], cwd=repo, env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    failures, cli_commands = [], 0
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        done = subprocess.run(gw_cmd("new", "from the cli"), cwd=repo, env=env, capture_output=True, text=True)
        cli_commands += 1
        if done.returncode != 0:
            failures.append(done.stderr.strip())
    out, err = writer.communicate(timeout=120)
    keeper_out, keeper_err = keeper.communicate(timeout=120)
    assert writer.returncode == 0, err
    assert keeper.returncode == 0, keeper_err
    assert failures == []
    written = int(out.strip())
    assert written >= 3 and cli_commands >= 1
    assert len(git(repo, "rev-list", "refs/gitwork/state").split()) == 1 + written + cli_commands
    git(repo, "fsck", "--full", "--strict")
