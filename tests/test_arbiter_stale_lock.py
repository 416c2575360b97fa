"""The soak's stuck pushes (seed 124758941): a ref lock left on the arbiter by a killed git process.

What happened: the arbiter's git runs its housekeeping inside a push (``receive.autogc``: once ~6,700
loose objects have piled up, ~105 s into a busy soak round, ``git gc --auto`` runs ``pack-refs
--prune`` in the foreground of ``receive-pack``, which locks each loose ref to prune it). The
arbiter-stop fault kills the daemon's process group with it; the killed ``pack-refs`` leaves
``refs/gitwork/state.lock`` behind, and from then on every push of every clone fails with "cannot
lock ref" while fetches work: nothing acknowledged is lost (it is all in the clones), but nothing
lands either, and git never removes the lock by itself.

The arbiter's pre-receive hook now removes a lock on a pushed state ref that is older than
``STALE_AFTER`` and that no git process of the repository that could hold it (housekeeping,
``update-ref``...) is running for; a young lock, or one such a process may hold, is left alone.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from conftest import run_gw, tip
from gitwork import stalelocks
from test_launch import gw_json


def stale_lock(remote: Path, age: float) -> Path:
    """The lock a killed ``git pack-refs`` leaves: the ref's value, in ``<ref>.lock``, ``age`` seconds old."""
    lock = remote / "refs" / "gitwork" / "state.lock"
    lock.parent.mkdir(parents=True, exist_ok=True)
    lock.write_text((tip(remote) or "0" * 40) + "\n")
    then = time.time() - age
    os.utime(lock, (then, then))
    return lock


def test_a_stale_lock_on_the_arbiter_no_longer_stops_every_push(machine_a: Path, remote: Path) -> None:
    assert run_gw(remote.parent, "hooks", "install", "--server", str(remote)).returncode == 0
    lock = stale_lock(remote, age=stalelocks.STALE_AFTER + 30)
    code, made = gw_json(machine_a, "new", "written while the arbiter's ref was locked")
    assert code == 0, made
    synced = run_gw(machine_a, "sync", "--json")
    assert synced.returncode == 0, synced.stdout + synced.stderr  # before: 11, "locked for over 5s"
    assert tip(remote) == tip(machine_a)
    assert not lock.exists()
    code, claimed = gw_json(machine_a, "claim", made["item"], "--as", "alice")  # an arbiter op lands too
    assert code == 0, claimed


def test_a_young_lock_or_one_a_housekeeping_process_may_hold_is_left_alone(remote: Path) -> None:
    young = stale_lock(remote, age=0.5)
    assert stalelocks.sweep(str(remote), ["refs/gitwork/state"]) == []
    assert young.exists()
    old = stale_lock(remote, age=stalelocks.STALE_AFTER + 30)
    # A git process of this repository that may hold ref locks (here one that waits on its stdin,
    # standing for a paused `git pack-refs`): its lock may still be in use.
    holder = subprocess.Popen(["git", "-c", "x.y=1", "update-ref", "--stdin"], cwd=remote, stdin=subprocess.PIPE,
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        time.sleep(0.1)
        assert stalelocks.sweep(str(remote), ["refs/gitwork/state"]) == []
        assert old.exists()
    finally:
        holder.kill()
        holder.wait()
    assert [line.split(":")[0] for line in stalelocks.sweep(str(remote), ["refs/gitwork/state"])] == \
        ["removed the stale lock refs/gitwork/state.lock"]
    assert not old.exists()
    assert stalelocks.sweep(str(remote), ["refs/heads/main", "../../etc/passwd"]) == []  # none there, none outside


# --- the same rule on a clone: the tracking ref a killed fetch left locked (issue 24's harness) ---------------


def tracking_lock(clone: Path, age: float) -> Path:
    """What ``git fetch`` killed between taking the tracking ref's lock and renaming it leaves: a
    lock ``age`` seconds old (the system harness's kill -9 of a ``gw sync`` process group, seed 20261202)."""
    lock = clone / ".git" / "refs" / "remotes" / "origin" / "gitwork" / "state.lock"
    lock.parent.mkdir(parents=True, exist_ok=True)
    lock.write_text("")
    then = time.time() - age
    os.utime(lock, (then, then))
    return lock


def moved_elsewhere(machine_a: Path, remote: Path) -> None:
    """The arbiter moves on from another clone, so a's next fetch has to move its tracking ref."""
    b = machine_a.parent / "b"
    subprocess.run(["git", "clone", "-q", f"file://{remote}", str(b)], check=True, capture_output=True)
    assert run_gw(b, "init", "--remote", "origin").returncode == 0
    assert gw_json(b, "new", "moves the arbiter")[0] == 0
    assert run_gw(b, "sync").returncode == 0


def test_a_killed_fetchs_tracking_lock_is_swept_and_the_clone_converges(machine_a: Path, remote: Path) -> None:
    moved_elsewhere(machine_a, remote)
    lock = tracking_lock(machine_a, age=stalelocks.STALE_AFTER + 30)
    synced = run_gw(machine_a, "sync", "--json", env={"GW_LOCK_TIMEOUT": "5"})
    assert synced.returncode == 0, synced.stdout + synced.stderr  # before: 11 until a person removed it
    assert not lock.exists()
    assert tip(machine_a) == tip(remote)
    said = [line for line in synced.stderr.splitlines() if line.strip()]
    assert len(said) == 1 and "removed the stale lock refs/remotes/origin/gitwork/state.lock" in said[0], said


def test_a_tracking_lock_a_live_git_of_the_clone_may_hold_is_left_and_reported(machine_a: Path, remote: Path) -> None:
    moved_elsewhere(machine_a, remote)
    before = tip(machine_a)
    lock = tracking_lock(machine_a, age=stalelocks.STALE_AFTER + 30)
    # A git of this clone that may hold ref locks, started from a subfolder of the work tree (a person's
    # own `git fetch` there would be one): its lock may be in use, so the sync waits, then says so.
    (machine_a / "sub").mkdir()
    holder = subprocess.Popen(["git", "update-ref", "--stdin"], cwd=machine_a / "sub", stdin=subprocess.PIPE,
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        synced = run_gw(machine_a, "sync", "--json", env={"GW_LOCK_TIMEOUT": "0.5"})
    finally:
        holder.kill()
        holder.wait()
    assert synced.returncode == 11, synced.stdout + synced.stderr
    assert str(lock) in synced.stderr and lock.exists() and tip(machine_a) == before
    young = tracking_lock(machine_a, age=0)  # a lock younger than STALE_AFTER: a live fetch's, for all we know
    synced = run_gw(machine_a, "sync", "--json", env={"GW_LOCK_TIMEOUT": "0.5"})
    assert synced.returncode == 11 and young.exists() and tip(machine_a) == before, synced.stdout + synced.stderr


def test_a_git_working_inside_the_repository_counts_as_a_holder(machine_a: Path, remote: Path) -> None:
    """A git whose working folder is in the repository, not at its top (a linked worktree's git dir,
    ``.git/worktrees/NAME``, is such a folder): it may hold the lock, so the lock is left."""
    lock = tracking_lock(machine_a, age=stalelocks.STALE_AFTER + 30)
    inside = machine_a / ".git" / "refs"
    holder = subprocess.Popen(["git", "update-ref", "--stdin"], cwd=inside, stdin=subprocess.PIPE,
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        time.sleep(0.1)
        assert stalelocks.sweep(str(machine_a / ".git"), ["refs/remotes/origin/gitwork/state"], under="refs/remotes/") == []
        assert lock.exists()
    finally:
        holder.kill()
        holder.wait()
    assert len(stalelocks.sweep(str(machine_a / ".git"), ["refs/remotes/origin/gitwork/state"], under="refs/remotes/")) == 1
    assert not lock.exists()


def test_a_lock_a_paused_gitwork_writer_holds_is_never_swept(remote: Path) -> None:
    """gitwork's own in-process writer (store._swap_files) holds its ``REF.lock`` by ``flock`` from before
    it exists until it renames it over the ref; paused (SIGSTOP) past the stale age, it is no git process,
    but its lock is in use all the same: removing it would let its rename, once resumed, land on another
    writer's lock. So a flocked lock is never stale, however old."""
    lock = stale_lock(remote, age=stalelocks.STALE_AFTER + 30)
    holder = subprocess.Popen([sys.executable, "-c", "import fcntl, os, sys, time\n"
                               "fd = os.open(sys.argv[1], os.O_RDONLY); fcntl.flock(fd, fcntl.LOCK_EX)\n"
                               "print('held', flush=True); time.sleep(60)", str(lock)],
                              stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout is not None and holder.stdout.readline() == "held\n"
        holder.send_signal(signal.SIGSTOP)
        assert stalelocks.sweep(str(remote), ["refs/gitwork/state"]) == []
        assert lock.exists()
    finally:
        holder.kill()
        holder.wait()
    assert len(stalelocks.sweep(str(remote), ["refs/gitwork/state"])) == 1 and not lock.exists()
