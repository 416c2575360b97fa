"""No acknowledged command is ever lost (issue 24 point 1): nothing moves the local state ref backwards.

A command that exited 0 is on this clone's state ref (a local op), or on the arbiter (an op the
arbiter decides). Every adoption of the arbiter's tip onto the local ref must be a compare-and-swap
against the exact local tip it was built from (replayed on): a local command that lands meanwhile is
replayed on top, never dropped. These tests drive real ``gw`` processes against a bare repository
served by ``git daemon``, with a pre-receive hook that holds one push at an exact point and SIGSTOP
to hold a waiting process, so each interleaving is the one named, every run.
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

from conftest import git, gw_cmd, let_post, run_gw, tip
from daemon import GitDaemon, bare_repo
from gitwork import pushturn
from test_sync import STATE, assert_sound, command_ids, gw_ok, machine, new_item

# Holds the first push that finds the gate file (removing it, so only that one) until the release
# file appears: the push is inside the server, before the ref moves.
HOLD_ONE_PUSH = """#!/bin/sh
cat >/dev/null
if rm "{gate}" 2>/dev/null; then
  touch "{arrived}"
  n=0
  while [ ! -e "{release}" ] && [ $n -lt 3000 ]; do sleep 0.01; n=$((n+1)); done
fi
exit 0
"""


def wait_until(check, what: str, procs: list[subprocess.Popen[str]] = (), timeout: float = 60) -> None:  # type: ignore[assignment,no-untyped-def]
    deadline = time.monotonic() + timeout
    while not check():
        for proc in procs:
            assert proc.poll() is None, f"ended before {what}: {proc.communicate()}"
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.01)


def start(repo: Path, *args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(gw_cmd(*args, "--json"), cwd=repo, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)


def queue_dir(repo: Path) -> Path:
    common = Path(git(repo, "rev-parse", "--git-common-dir"))
    return (common if common.is_absolute() else repo / common) / "gitwork" / pushturn.QUEUE_DIR


def local_ids(repo: Path) -> list[str]:
    return command_ids(Path(git(repo, "rev-parse", "--absolute-git-dir")))


def test_a_carried_waiter_does_not_adopt_the_arbiter_tip_over_a_local_command(tmp_path: Path) -> None:
    """alice's claim is held in the server; carol's claim queues on A's turn; B wins the round; alice's
    second round carries carol's claim and lands; dave's ``gw msg`` (a local op) exits 0 on A before
    carol reads her answer. carol's adoption must not take the local ref back to the arbiter's tip."""
    served = tmp_path / "served"
    served.mkdir()
    bare = bare_repo(served, "plane")
    with GitDaemon(served) as daemon:
        a = machine(tmp_path, "a", daemon.url("plane"), publish=True)
        for repo in (a, bare):  # dave posts on items he neither holds nor owns (docs/leases.md, "Who may post")
            let_post(repo, "dave")
        x, y, z = (new_item(a, f"item {n}") for n in "xyz")
        gw_ok(a, "sync")
        b = machine(tmp_path, "b", daemon.url("plane"))

        gate, arrived, release = tmp_path / "gate", tmp_path / "arrived", tmp_path / "release"
        hook = bare / "hooks" / "pre-receive"
        hook.write_text(HOLD_ONE_PUSH.format(gate=gate, arrived=arrived, release=release))
        hook.chmod(0o755)
        gate.touch()

        alice = start(a, "claim", x, "--as", "alice")
        carol: subprocess.Popen[str] | None = None
        try:
            wait_until(arrived.exists, "alice's push to reach the server", [alice])
            carol = start(a, "claim", y, "--as", "carol")
            queue = queue_dir(a)
            wait_until(lambda: queue.exists() and any(queue.glob("*.json")), "carol's command in A's queue",
                       [alice, carol])
            os.kill(carol.pid, signal.SIGSTOP)  # carol waits for her answer: hold her there
            gw_ok(b, "claim", z, "--as", "bob", timeout=60)  # B moves the arbiter: alice's held push loses
            release.touch()
            out, err = alice.communicate(timeout=60)
            assert alice.returncode == 0, (out, err)
            assert any(queue.glob("*.answer")), "alice's second round carried carol's claim and answered it"

            said = gw_ok(a, "msg", x, "W: a message dave was told was posted", "--as", "dave", timeout=60)
            posted = said["command_id"]
            assert posted in local_ids(a)
        finally:
            if carol is not None:
                os.kill(carol.pid, signal.SIGCONT)
        assert carol is not None
        out, err = carol.communicate(timeout=60)
        assert carol.returncode == 0, (out, err)
        assert json.loads(out)["holder"] == "carol"

        # The acknowledged message is still on A's ref, and gw sync brings it to the arbiter, once.
        assert posted in local_ids(a), "the local ref was moved back over an acknowledged command"
        gw_ok(a, "sync", timeout=60)
        assert tip(a) == tip(bare)
        assert Counter(command_ids(bare))[posted] == 1
        claimed = {cmd.get("item"): author for cmd, author in claims(bare)}
        assert claimed == {x: "alice", y: "carol", z: "bob"}
        assert_sound(bare)


@pytest.mark.parametrize("same_item", [False, True], ids=["other-item", "claimed-item"])
def test_a_local_command_landing_while_the_holder_s_push_is_in_the_server_is_replayed_not_dropped(
        tmp_path: Path, same_item: bool) -> None:
    """alice's claim is held inside the server after its chain was built on A's local tip; dave's
    ``gw msg`` lands on that tip meanwhile. When the push wins, alice's adoption finds the local ref
    moved: the CAS from the tip her chain was built on fails, and the message is replayed on top of
    her claim, and ``gw sync`` brings it to the arbiter once. On the item alice just claimed too: dave
    does not hold it, so his message is recorded under the epoch he read (0) and replays as it was first
    applied (docs/leases.md, the epoch rule) instead of an exit 0 turning into a refusal later."""
    served = tmp_path / "served"
    served.mkdir()
    bare = bare_repo(served, "plane")
    with GitDaemon(served) as daemon:
        a = machine(tmp_path, "a", daemon.url("plane"), publish=True)
        for repo in (a, bare):  # dave posts on items he neither holds nor owns (docs/leases.md, "Who may post")
            let_post(repo, "dave")
        x, y = new_item(a, "item x"), new_item(a, "item y")
        gw_ok(a, "sync")
        gate, arrived, release = tmp_path / "gate", tmp_path / "arrived", tmp_path / "release"
        hook = bare / "hooks" / "pre-receive"
        hook.write_text(HOLD_ONE_PUSH.format(gate=gate, arrived=arrived, release=release))
        hook.chmod(0o755)
        gate.touch()
        alice = start(a, "claim", x, "--as", "alice")
        try:
            wait_until(arrived.exists, "alice's push to reach the server", [alice])
            posted = gw_ok(a, "msg", x if same_item else y, "posted while the claim was in the server", "--as",
                           "dave", timeout=60)["command_id"]
        finally:
            release.touch()
        out, err = alice.communicate(timeout=60)
        assert alice.returncode == 0, (out, err)
        claimed = json.loads(out)
        assert tip(bare) == claimed["commit"]  # the claim landed without the message (built before it)
        assert git(a, "merge-base", "--is-ancestor", claimed["commit"], STATE) == ""  # adopted
        assert "refused" not in claimed
        assert posted in local_ids(a)  # replayed on top of the claim
        assert status(a)["refused"] == []
        gw_ok(a, "sync", timeout=60)
        assert tip(a) == tip(bare)
        assert Counter(command_ids(bare))[posted] == 1
        assert_sound(bare)


def status(clone: Path) -> dict:
    done = run_gw(clone, "status", "--json")
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def claims(bare: Path) -> list[tuple[dict, str]]:
    out = git(bare, "log", "--reverse", "--format=%an%x00%B%x01", STATE)
    found = []
    for entry in out.split("\x01"):
        if "\x00" not in entry:
            continue
        author, body = entry.strip().split("\x00", 1)
        line = next((ln for ln in body.splitlines() if ln.startswith("Command: ")), None)
        cmd = json.loads(line[len("Command: "):]) if line else {}
        if cmd.get("op") == "claim":
            found.append((cmd, author))
    return found


# --- random interleavings --------------------------------------------------------------------------

LOCAL_OPS = ("msg", "new")  # land on the clone's own ref; the arbiter hears of them at the next push or sync
ARBITER_OPS = ("claim",)  # decided by the arbiter: on it before they exit 0


def one_op(rng: random.Random, clone: Path, items: list[str], n: int) -> list[str]:
    kind = rng.choice(LOCAL_OPS + ARBITER_OPS + ARBITER_OPS)
    who = f"{clone.name}-agent-{n}"
    if kind == "msg":
        return ["msg", rng.choice(items), f"note {n} from {who}", "--as", who]
    if kind == "new":
        return ["new", f"made offline {n}", "--as", who]
    return ["claim", "--next", "--as", who]


@pytest.mark.slow
@pytest.mark.parametrize("seed", [1, 2, 3])
def test_every_acknowledged_command_reaches_the_arbiter_once_whatever_the_interleaving(tmp_path: Path,
                                                                                       seed: int) -> None:
    """Two clones run local ops (``msg``, ``new``) and arbiter ops (``claim --next``) in random
    concurrent batches, the processes of a clone racing for its turn and its local ref; after ``gw sync``
    on both, every command that exited 0 is on the arbiter exactly once (or, a local command replay
    found stale, reported as refused by its id and not on the arbiter), and no item was granted twice."""
    rng = random.Random(int(os.environ.get("GW_TEST_SEED", "0")) or seed)
    served = tmp_path / "served"
    served.mkdir()
    bare = bare_repo(served, "plane")
    with GitDaemon(served) as daemon:
        a = machine(tmp_path, "a", daemon.url("plane"), publish=True)
        items = [new_item(a, f"item {n}") for n in range(12)]
        gw_ok(a, "sync")
        b = machine(tmp_path, "b", daemon.url("plane"))
        clones = [a, b]
        for repo in (a, b, bare):  # one_op's posters, who neither hold nor own the items they post on
            let_post(repo, *(f"{c.name}-agent-{i}" for c in clones for i in range(64)))
        acknowledged: dict[str, tuple[str, list[str]]] = {}
        n = 0
        for _batch in range(6):
            running = []
            for _ in range(rng.randint(2, 5)):
                clone = rng.choice(clones)
                args = one_op(rng, clone, items, n)
                n += 1
                running.append((clone, args, start(clone, *args)))
                time.sleep(rng.uniform(0, 0.05))
            for clone, args, proc in running:
                out, err = proc.communicate(timeout=120)
                if proc.returncode == 0:
                    acknowledged[json.loads(out)["command_id"]] = (clone.name, args)
                else:
                    # Refusals are fine (no ready item, held); a lost command is not.
                    assert proc.returncode in (3, 75), (args, proc.returncode, out, err)
        assert acknowledged
        for clone in (a, b, a):
            done = run_gw(clone, "sync", "--json", timeout=120)
            assert done.returncode in (0, 15), (done.stdout, done.stderr)  # 15: it reports a refusal
        on_arbiter = Counter(command_ids(bare))
        # A local command replay refuses (a message written on epoch 0 of an item another clone's claim
        # took to epoch 1 meanwhile: stale) is not lost: its verdict is reported and kept by command id.
        refused = {entry["command_id"]: entry for clone in clones for entry in status(clone)["refused"]}
        assert all(entry["error"] == "stale" and entry["op"] == "msg" for entry in refused.values()), refused
        missing = {cid: done for cid, done in acknowledged.items()
                   if on_arbiter[cid] != (0 if cid in refused else 1)}
        assert missing == {}, f"acknowledged, neither on the arbiter exactly once nor refused: {missing}; {refused}"
        granted = Counter(cmd["item"] for cmd, _ in claims(bare))
        assert all(count == 1 for count in granted.values()), granted
        assert_sound(bare)
