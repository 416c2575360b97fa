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
import subprocess
import time
from pathlib import Path

from conftest import run_gw, tip
from gitwork.sync import arbiterlock
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
    lock = stale_lock(remote, age=arbiterlock.STALE_AFTER + 30)
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
    assert arbiterlock.sweep(str(remote), ["refs/gitwork/state"]) == []
    assert young.exists()
    old = stale_lock(remote, age=arbiterlock.STALE_AFTER + 30)
    # A git process of this repository that may hold ref locks (here one that waits on its stdin,
    # standing for a paused `git pack-refs`): its lock may still be in use.
    holder = subprocess.Popen(["git", "-c", "x.y=1", "update-ref", "--stdin"], cwd=remote, stdin=subprocess.PIPE,
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        time.sleep(0.1)
        assert arbiterlock.sweep(str(remote), ["refs/gitwork/state"]) == []
        assert old.exists()
    finally:
        holder.kill()
        holder.wait()
    assert [line.split(":")[0] for line in arbiterlock.sweep(str(remote), ["refs/gitwork/state"])] == \
        ["removed the stale lock refs/gitwork/state.lock"]
    assert not old.exists()
    assert arbiterlock.sweep(str(remote), ["refs/heads/main", "../../etc/passwd"]) == []  # none there, none outside
