"""Crashes: `gw` killed with SIGKILL at named steps and at random moments.

Whatever the moment, the state ref points at the old commit or at the new one, `git fsck` finds
nothing broken (dangling objects and a temporary object file are what a crash may leave), the
state is still readable, and a lock left behind by a dead writer is reported, never waited on for
ever and never removed silently, unless it is one gitwork's own in-process compare-and-swap left (a
second link, no flock: its writer is dead, the kernel says so), which the next writer removes.
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import git, run_gw, tip
from gitwork.errors import ExitCode
from gitwork.workplane import Workplane

pytestmark = pytest.mark.slow


def fsck_is_clean(repo: Path) -> None:
    done = subprocess.run(["git", "fsck", "--strict", "--no-progress"], cwd=repo, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    for line in (done.stdout + done.stderr).splitlines():
        # A crash may leave unreferenced objects and half-written temporary object files; nothing else.
        assert line.startswith(("dangling ", "notice: ", "warning: garbage found")), line


def readable(repo: Path) -> list[dict[str, object]]:
    listed = run_gw(repo, "list", "--all", "--json")
    assert listed.returncode == 0, listed.stderr
    return json.loads(listed.stdout)


@pytest.fixture
def item(repo: Path) -> str:
    with Workplane(str(repo), agent="setup") as wp:
        wp.do("init")
        return wp.do("new", title="crash me").result["item"]


CRASHING_COMMANDS = [
    ("claim", "{item}", "--as", "alice"),  # fast path
    ("new", "another item", "--as", "alice"),  # typer path
    ("edit", "{item}", "--title", "renamed", "--as", "alice"),
]


@pytest.mark.parametrize("args", CRASHING_COMMANDS, ids=lambda a: a[0])
def test_killed_before_cas_leaves_the_old_commit(repo: Path, item: str, args: tuple[str, ...]) -> None:
    before = tip(repo)
    done = run_gw(repo, *(a.format(item=item) for a in args), env={"GW_CRASH_AT": "before-cas"})
    assert done.returncode == -signal.SIGKILL
    assert tip(repo) == before
    assert not (repo / ".git" / "refs" / "gitwork" / "state.lock").exists()
    fsck_is_clean(repo)
    rows = readable(repo)
    assert [r["title"] for r in rows] == ["crash me"] and rows[0]["holder"] is None
    # The next writer is not hindered by anything the dead one left.
    again = run_gw(repo, *(a.format(item=item) for a in args))
    assert again.returncode == 0, again.stderr
    assert git(repo, "rev-parse", "refs/gitwork/state^") == before


@pytest.mark.parametrize("args", CRASHING_COMMANDS, ids=lambda a: a[0])
def test_killed_after_cas_leaves_the_new_commit(repo: Path, item: str, args: tuple[str, ...]) -> None:
    before = tip(repo)
    done = run_gw(repo, *(a.format(item=item) for a in args), env={"GW_CRASH_AT": "after-cas"})
    assert done.returncode == -signal.SIGKILL
    after = tip(repo)
    assert after != before
    assert git(repo, "rev-parse", f"{after}^") == before  # exactly one new commit, on the old tip
    assert git(repo, "log", "-1", "--format=%s", "refs/gitwork/state").startswith(args[0])
    assert not (repo / ".git" / "refs" / "gitwork" / "state.lock").exists()
    fsck_is_clean(repo)
    rows = readable(repo)
    if args[0] == "claim":
        assert rows[0]["holder"] == "alice"
    elif args[0] == "new":
        assert sorted(r["title"] for r in rows) == ["another item", "crash me"]
    else:
        assert rows[0]["title"] == "renamed"


# A process that writes as fast as it can, logging every commit it saw land.
WRITER_LOOP = r"""
import sys
from gitwork.workplane import Workplane
log = open(sys.argv[1], "a", buffering=1)
wp = Workplane(".", agent="looper")
n = 0
while True:
    item = wp.do("new", title=f"loop {n}").result["item"]
    log.write(wp.store.tip() + "\n")
    for op in ("claim", "renew", "release"):
        log.write(wp.do(op, item=item).commit + "\n")
    n += 1
"""


def group_is_alive(pgid: int) -> bool:
    """Whether a live (not zombie) process is still in process group ``pgid`` (Linux /proc)."""
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as stat:
                fields = stat.read().rsplit(")", 1)[1].split()
        except OSError:
            continue  # ended while we looked
        if fields[0] != "Z" and int(fields[2]) == pgid:
            return True
    return False


def wait_until_group_is_gone(pgid: int, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while group_is_alive(pgid):
        assert time.monotonic() < deadline, f"process group {pgid} still running after {timeout} s"
        time.sleep(0.01)


@pytest.mark.parametrize("group", [False, True], ids=["kill-process", "kill-process-group"])
def test_random_sigkill_of_a_looping_writer(repo: Path, item: str, tmp_path: Path, group: bool) -> None:
    rng = random.Random()  # the scheduler adds its own randomness anyway; the delays are in the messages
    landed = tmp_path / "landed.log"
    lock = repo / ".git" / "refs" / "gitwork" / "state.lock"
    for _ in range(4):
        before = tip(repo)
        proc = subprocess.Popen([sys.executable, "-c", WRITER_LOOP, str(landed)], cwd=repo,
                                start_new_session=True, stderr=subprocess.PIPE)
        # Wait until it is committing (start-up is slow on a busy machine), then kill it at an
        # arbitrary moment of its loop.
        size = landed.stat().st_size if landed.exists() else 0
        deadline = time.monotonic() + 60
        while (landed.stat().st_size if landed.exists() else 0) == size:
            assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()
            time.sleep(0.01)
        delay = rng.random() * 0.5
        time.sleep(delay)  # the scenario itself: a kill at an arbitrary moment of the loop
        if group:
            os.killpg(proc.pid, signal.SIGKILL)  # the writer and any git child it is running
        else:
            proc.kill()
        _, err = proc.communicate(timeout=30)
        assert proc.returncode == -signal.SIGKILL, (delay, err)
        # An orphaned `git update-ref` may still be finishing (process-only kill): wait for the group.
        wait_until_group_is_gone(proc.pid)

        seen = landed.read_text().split() if landed.exists() else []
        now = tip(repo)
        assert now is not None
        # The ref is at the last commit the writer saw land, or at most one further (killed after the
        # CAS, before logging it); and it descends from where this round started.
        assert not seen or now == seen[-1] or git(repo, "rev-parse", f"{now}^") == seen[-1], (delay, now, seen[-3:])
        ancestry = subprocess.run(["git", "merge-base", "--is-ancestor", str(before), now], cwd=repo)
        assert ancestry.returncode == 0, "the ref moved to a commit that does not descend from the old tip"
        fsck_is_clean(repo)
        if lock.exists():
            # Killed while it held the lock (the ref is moved in-process, store.py): its lock has the
            # second link of gitwork's and no flock any more, so the next writer removes it and goes on.
            assert lock.stat().st_nlink == 2
            after = run_gw(repo, "claim", item, "--as", "bob", env={"GW_LOCK_TIMEOUT": "5"})
            assert after.returncode in (0, ExitCode.HELD), after.stderr  # (held: the looper claimed it last)
            assert not lock.exists()
        readable(repo)
    chain = int(git(repo, "rev-list", "--count", "refs/gitwork/state"))
    assert chain == int(git(repo, "rev-list", "--first-parent", "--count", "refs/gitwork/state"))
    assert chain >= 2 + 4, "the writer never got going: the kill test tested nothing"


def test_a_leftover_lock_is_reported_not_waited_on(repo: Path, item: str) -> None:
    lock = repo / ".git" / "refs" / "gitwork" / "state.lock"
    lock.write_text("0" * 40 + "\n")  # what a writer killed inside update-ref leaves behind
    before = tip(repo)
    started = time.monotonic()
    done = run_gw(repo, "claim", item, "--as", "alice", env={"GW_LOCK_TIMEOUT": "0.3"})
    elapsed = time.monotonic() - started
    assert done.returncode == ExitCode.LOCKED, done.stderr
    lines = done.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("gw: locked: ")
    assert str(lock) in lines[0]
    assert tip(repo) == before
    assert lock.exists(), "the lock must never be removed silently"
    assert elapsed < 30  # a generous bound: it gives up instead of hanging
    as_json = run_gw(repo, "new", "blocked too", "--json", env={"GW_LOCK_TIMEOUT": "0.3"})
    assert as_json.returncode == ExitCode.LOCKED
    doc = json.loads(as_json.stdout)
    assert (doc["error"], doc["details"]["lock"]) == ("locked", str(lock))
    # Reads do not need the lock.
    assert readable(repo)[0]["holder"] is None
    lock.unlink()
    assert run_gw(repo, "claim", item, "--as", "alice").returncode == 0


def test_a_lock_released_within_the_timeout_is_waited_for(repo: Path, item: str) -> None:
    # A live writer's lock is transient: gw retries the same CAS instead of failing.
    lock = repo / ".git" / "refs" / "gitwork" / "state.lock"
    lock.write_text("0" * 40 + "\n")
    proc = subprocess.Popen([sys.executable, "-m", "gitwork", "claim", item, "--as", "alice", "--json"], cwd=repo,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "GW_LOCK_TIMEOUT": "30"})
    time.sleep(1.0)  # the scenario itself: another writer holds the lock for a while, then lets go
    lock.unlink()
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    assert json.loads(out)["fence"] == 1


def test_a_lock_left_by_a_killed_in_process_writer_is_removed_by_the_next(repo: Path, item: str) -> None:
    """kill -9 of gw while it holds the state ref's lock (crash point ``ref-locked``): the ref is as it
    was, and the next writer takes the dead writer's lock away (its flock went with it) and lands."""
    lock = repo / ".git" / "refs" / "gitwork" / "state.lock"
    before = tip(repo)
    done = run_gw(repo, "claim", item, "--as", "alice", env={"GW_CRASH_AT": "ref-locked"})
    assert done.returncode == -signal.SIGKILL
    assert tip(repo) == before and lock.exists() and lock.stat().st_nlink == 2
    fsck_is_clean(repo)
    again = run_gw(repo, "claim", item, "--as", "alice", env={"GW_LOCK_TIMEOUT": "5"})
    assert again.returncode == 0, again.stderr
    assert not lock.exists() and git(repo, "rev-parse", "refs/gitwork/state^") == before
    assert [n for n in os.listdir(repo / ".git" / "gitwork") if n.startswith(".reflock-")] == []


def test_a_live_in_process_writers_lock_is_waited_for_not_removed(repo: Path, item: str) -> None:
    """A lock made as gitwork makes it (a second link) whose flock is held: its writer lives, so the
    next writer waits (LOCKED after its timeout) and never removes it; once let go, it is taken away."""
    import fcntl

    lock = repo / ".git" / "refs" / "gitwork" / "state.lock"
    mine = repo / ".git" / "gitwork" / "held-by-the-test"
    mine.write_text((tip(repo) or "") + "\n")
    with open(mine, "rb") as holder:
        fcntl.flock(holder, fcntl.LOCK_EX)
        os.link(mine, lock)
        blocked = run_gw(repo, "claim", item, "--as", "alice", env={"GW_LOCK_TIMEOUT": "0.3"})
        assert blocked.returncode == ExitCode.LOCKED and lock.exists(), blocked.stderr
    # Let go without removing it (the writer died): the next writer removes it.
    again = run_gw(repo, "claim", item, "--as", "alice", env={"GW_LOCK_TIMEOUT": "5"})
    assert again.returncode == 0, again.stderr
    assert not lock.exists()
