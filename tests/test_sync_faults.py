"""Crashes and outages while talking to the arbiter: no torn state, a retry completes, nothing twice.

The faults are real: ``kill -9`` of the gw process (at the crash points in ``gitwork/sync/`` and at random
moments of a looping claimer) and a ``git daemon`` stopped while a push is inside the server.
After each, the remote must hold a valid commit that passes the server-side state check, ``git
fsck`` must report no error, and every command id must appear on the remote at most once.
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import time
from collections import Counter
from pathlib import Path

import pytest

from conftest import git, run_gw, tip
from daemon import GitDaemon, bare_repo
from gitwork.workplane import Workplane
from test_sync import STATE, TRACKING, assert_sound, command_ids, gw_ok, machine, new_item, show
from test_sync_daemon import gw_program, parse_log

KILLED = -signal.SIGKILL
REMOTE = 12


def grants(bare: Path) -> Counter[str]:
    count: Counter[str] = Counter()
    for line in git(bare, "log", "--format=%B", STATE).splitlines():
        if line.startswith("Command: "):
            cmd = json.loads(line[len("Command: "):])
            if cmd["op"] in ("claim", "takeover"):
                count[cmd["item"]] += 1
    return count




# --- kill -9 at the crash points --------------------------------------------------------------------


def test_kill_before_push_of_a_claim(tmp_path: Path, remote: Path, url: str, machine_a: Path) -> None:
    a = machine_a
    item = new_item(a, "crash")
    gw_ok(a, "sync")
    local, published = tip(a), tip(remote)
    died = run_gw(a, "claim", item, "--as", "alice", env={"GW_CRASH_AT": "before-push"})
    assert died.returncode == KILLED
    assert tip(remote) == published and tip(a) == local
    assert_sound(remote)

    retry = gw_ok(a, "claim", item, "--as", "alice")
    assert retry["epoch"] == 1
    assert tip(remote) == tip(a) == retry["commit"]
    assert grants(remote) == Counter({item: 1})
    assert_sound(remote)


def test_kill_after_push_of_a_claim(tmp_path: Path, remote: Path, url: str, machine_a: Path) -> None:
    a = machine_a
    item = new_item(a, "crash")
    gw_ok(a, "sync")
    local = tip(a)
    died = run_gw(a, "claim", item, "--as", "alice", env={"GW_CRASH_AT": "after-push"})
    assert died.returncode == KILLED
    # The claim is on the arbiter; this machine's state ref did not hear of it.
    assert tip(remote) != local
    assert tip(a) == local
    assert_sound(remote)

    gw_ok(a, "sync")
    assert tip(a) == tip(remote)
    lease = show(a, item)["lease"]
    assert (lease["holder"], lease["epoch"]) == ("alice", 1)
    # Claiming again is answered from the arbiter's state: it is already ours, not granted twice.
    again = run_gw(a, "claim", item, "--as", "alice", "--json")
    assert again.returncode == 75
    assert grants(remote) == Counter({item: 1})
    assert_sound(remote)


@pytest.mark.parametrize("point", ["before-push", "after-push"])
def test_kill_during_a_replaying_sync(tmp_path: Path, remote: Path, url: str, point: str, machine_a: Path) -> None:
    a = machine_a
    b = machine(tmp_path, "b", url)
    offline = [gw_ok(a, "new", f"offline {n}")["command_id"] for n in range(4)]
    new_item(b, "moved the remote")
    gw_ok(b, "sync")  # A's commands must now be replayed on a tip they were not written on
    before = tip(remote)

    died = run_gw(a, "sync", env={"GW_CRASH_AT": point})
    assert died.returncode == KILLED
    assert (tip(remote) == before) == (point == "before-push")
    assert_sound(remote)

    report = gw_ok(a, "sync")
    assert report["refused"] == []
    assert tip(a) == tip(remote)
    ids = command_ids(remote)
    assert all(ids.count(i) == 1 for i in offline)
    assert_sound(remote)
    gw_ok(b, "pull")
    assert tip(b) == tip(remote)


def test_retried_lease_document_with_the_same_id_lands_once(tmp_path: Path, remote: Path, url: str,
                                                            machine_a: Path) -> None:
    a = machine_a
    item = new_item(a, "renewed")
    fence = gw_ok(a, "claim", item, "--as", "alice")["fence"]
    doc = a / "renew.json"
    doc.write_text(json.dumps({"op": "renew", "item": item, "id": "c-00000000000000aa", "as": "alice",
                               "fence": fence, "ttl": "1h"}))
    died = run_gw(a, "apply", str(doc), env={"GW_CRASH_AT": "after-push"})
    assert died.returncode == KILLED
    retry = run_gw(a, "apply", str(doc), "--json")
    assert retry.returncode == 0, retry.stdout + retry.stderr
    assert command_ids(remote).count("c-00000000000000aa") == 1


def test_resent_offline_document_with_the_same_id_lands_once(tmp_path: Path, remote: Path, url: str,
                                                             machine_a: Path) -> None:
    a = machine_a
    doc = a / "new.json"
    doc.write_text(json.dumps({"op": "new", "title": "once", "id": "c-00000000000000bb"}))
    gw_ok(a, "apply", str(doc))
    assert run_gw(a, "sync", env={"GW_CRASH_AT": "after-push"}).returncode == KILLED
    run_gw(a, "apply", str(doc))  # the client cannot tell whether it landed: it sends again
    gw_ok(a, "sync")
    assert command_ids(remote).count("c-00000000000000bb") == 1


# --- a real SIGKILL at a random moment ------------------------------------------------------------

LOOP = r"""
while :; do
  "$GW" claim --next --as "$ME" --json > "$OUT.last" 2>> "$OUT.err"; rc=$?
  printf '%s %s\n' "$rc" "$(tr -d '\n' < "$OUT.last")" >> "$OUT"
  [ "$rc" -eq 3 ] && exit 0
done
"""


# The kills are the trials, so their number is the budget (not a wall time): KILLS kills, each at a moment drawn
# from KILL_AFTER seconds after the loop (re)starts, about one `claim --next` of the loop here (bash, gw's start, a
# fetch, the push and the hook's 0.2 s): a kill lands before, inside or after a push about as often as it lands
# between claims. Then the loop claims what is left, unkilled, with the server's hook no longer slowed (its 0.2 s
# only widens the window a kill can land in). ITEMS is more than the kill rounds claim (10-17 in 12 rounds seen at
# load below 1, fewer under load), so the loop is still running at each of them. Before (session 8): a wait of 0.3-2.5 s per kill until 25 items were
# claimed, 6-11 kills in 11-23 s; see docs/performance.md, "Session 9, suite9a: waits".
ITEMS, KILLS, KILL_AFTER = 22, 12, (0.1, 1.0)


@pytest.mark.slow
def test_sigkill_at_random_moments_of_a_looping_claimer(tmp_path: Path) -> None:
    base = tmp_path / "served"
    base.mkdir()
    bare = bare_repo(base, "plane")
    # A slow server (while `slow` exists) widens the window in which a kill lands while the push is in flight;
    # the marker says whether it did (counted below).
    inside, slow = tmp_path / "in-the-hook", tmp_path / "slow"
    slow.touch()
    hook = bare / "hooks" / "pre-receive"
    hook.write_text(f'#!/bin/sh\ncat >/dev/null\n[ -e "{slow}" ] || exit 0\n'
                    f'touch "{inside}"\nsleep 0.2\nrm -f "{inside}"\n')
    hook.chmod(0o755)
    rng = random.Random(int(os.environ.get("GW_TEST_SEED", "0")) or None)
    with GitDaemon(base) as daemon:
        a = machine(tmp_path, "a", daemon.url("plane"), publish=True)
        with Workplane(str(a)) as plane:  # the items, offline through the library: only the claims are under test
            for n in range(ITEMS):
                plane.do("new", title=f"item {n}")
        gw_ok(a, "sync")
        program = gw_program(tmp_path)
        out = tmp_path / "claims.log"
        env = {**os.environ, "GW": program, "ME": "looper", "OUT": str(out)}
        kills = in_the_hook = unheard = 0  # kills; of them, those inside the server; those that left a grant untold
        started = time.monotonic()
        finished = False
        while kills < KILLS:
            proc = subprocess.Popen(["bash", "-c", LOOP], cwd=a, env=env, start_new_session=True)
            try:
                proc.wait(timeout=rng.uniform(*KILL_AFTER))
                finished = True  # the loop finished: nothing left to claim
                break
            except subprocess.TimeoutExpired:
                in_the_hook += inside.exists()
                os.killpg(proc.pid, signal.SIGKILL)  # the loop and the gw/git it is running right now
                proc.wait()
                kills += 1
                told = sum(1 for rc, _doc in parse_log(out) if rc == 0) if out.exists() else 0
            daemon.settle()  # the server side of a killed push finishes on its own: check what it leaves
            assert_sound(bare)
            unheard += sum(grants(bare).values()) > told + unheard
        during = sum(grants(bare).values())
        if not finished:  # the budget spent: the loop claims what is left, unkilled
            slow.unlink()
            proc = subprocess.Popen(["bash", "-c", LOOP], cwd=a, env=env, start_new_session=True)
            try:
                assert proc.wait(timeout=240) == 0
            finally:
                if proc.poll() is None:
                    os.killpg(proc.pid, signal.SIGKILL)
                    proc.wait()
        print(f"\n{kills} SIGKILLs ({in_the_hook} inside the server's hook, {unheard} after the arbiter granted a claim"
              f" the loop had not heard of); {during} of {ITEMS} items claimed by then; all in"
              f" {time.monotonic() - started:.1f} s")
        assert kills >= 3

        gw_ok(a, "sync")
        assert tip(a) == tip(bare)
    assert_sound(bare)
    # Every item granted exactly once, epoch 1, to the looper; nothing else was granted.
    counted = grants(bare)
    assert len(counted) == ITEMS and set(counted.values()) == {1}
    with Workplane(str(bare)) as plane:
        for item_id in counted:
            lease = plane.lease(item_id)
            assert lease is not None and (lease.epoch, lease.holder) == (1, "looper")
    # Whatever the loop was told, it was never told it won an item twice.
    won = Counter(doc["item"] for rc, doc in parse_log(out) if rc == 0)
    assert set(won.values()) <= {1}


# --- the daemon stopped while a push is inside the server ----------------------------------------

PRE_RECEIVE_STALL = """#!/bin/sh
cat >/dev/null
touch "{marker}"
sleep 60
"""

# Runs once the ref update is committed on the server, before the client hears back.
REFTX_STALL = """#!/bin/sh
[ "$1" = committed ] || exit 0
grep -q refs/gitwork/state || exit 0
touch "{marker}"
sleep 60
"""


@pytest.mark.slow
@pytest.mark.parametrize("when", ["before-the-ref-moves", "after-the-ref-moved"])
def test_daemon_stopped_in_the_middle_of_a_sync(tmp_path: Path, when: str) -> None:
    base = tmp_path / "served"
    base.mkdir()
    bare = bare_repo(base, "plane")
    daemon = GitDaemon(base)
    daemon.start()
    try:
        a = machine(tmp_path, "a", daemon.url("plane"), publish=True)
        b = machine(tmp_path, "b", daemon.url("plane"))
        offline = [gw_ok(a, "new", f"offline {n}")["command_id"] for n in range(5)]
        new_item(b, "moved the remote")
        gw_ok(b, "sync")
        before, a_local = tip(bare), tip(a)

        marker = tmp_path / "in-the-server"
        name, body = (("pre-receive", PRE_RECEIVE_STALL) if when == "before-the-ref-moves"
                      else ("reference-transaction", REFTX_STALL))
        hook = bare / "hooks" / name
        hook.write_text(body.format(marker=marker))
        hook.chmod(0o755)

        syncing = subprocess.Popen([gw_program(tmp_path), "sync"], cwd=a, stdout=subprocess.PIPE,
                                   stderr=subprocess.PIPE, text=True)
        deadline = time.monotonic() + 60
        while not marker.exists():
            assert syncing.poll() is None, f"sync ended before reaching the server: {syncing.communicate()}"
            assert time.monotonic() < deadline, "the push never reached the hook"
            time.sleep(0.02)
        daemon.stop()
        out, err = syncing.communicate(timeout=60)
        if when == "before-the-ref-moves":
            assert tip(bare) == before
            assert syncing.returncode == REMOTE, (out, err)
        else:
            assert tip(bare) != before  # landed before the server died
            # git 2.39's push sometimes exits 0 ("Done", no ref status) when the server dies after
            # committing the ref: then the sync rightly believes it landed. Either answer is honest.
            assert syncing.returncode in (0, REMOTE), (out, err)
        if syncing.returncode == REMOTE:
            assert len(err.strip().splitlines()) == 1, err
            assert tip(a) == a_local  # local state intact
            # What the sync fetched, or (git updates it when its half-read report looked good) the
            # commit that really is on the remote: never anything else.
            assert tip(a, TRACKING) in (before, tip(bare))
        else:
            assert tip(a) == tip(bare)
        assert_sound(bare)

        hook.unlink()
        daemon.start()
        report = gw_ok(a, "sync")
        assert report["refused"] == []
        assert tip(a) == tip(bare)
        ids = command_ids(bare)
        assert all(ids.count(i) == 1 for i in offline)
        assert_sound(bare)
        gw_ok(b, "pull")
        assert tip(b) == tip(bare)
    finally:
        daemon.stop()
