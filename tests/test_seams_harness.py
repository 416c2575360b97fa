"""Seams the system harness (tests/harness/) pointed at, each pinned by a deterministic test.

- acting as who it says: a lease's fence is not a credential. ``renew``/``release``/``handoff`` by an
  identity that is not the holder are refused (exit 7, nothing written) even when it presents the
  holder's current fence; an administrator ends someone's lease with ``revoke`` or ``takeover``.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from conftest import gw_here, let_post, live_processes, make_repo, tip


@pytest.fixture
def plane(tmp_path: Path) -> tuple[Path, str]:
    repo = make_repo(tmp_path / "repo")
    assert gw_here(repo, "init").returncode == 0
    made = gw_here(repo, "new", "seam item", "--as", "alice", "--json")
    assert made.returncode == 0, made.stdout + made.stderr
    return repo, json.loads(made.stdout)["item"]


@pytest.mark.parametrize("verb", [["renew"], ["release"], ["handoff", "--reason", "blocked"]])
def test_a_holder_only_op_by_another_identity_with_the_holders_fence_is_refused(plane: tuple[Path, str],
                                                                               verb: list[str]) -> None:
    repo, item = plane
    claim = gw_here(repo, "claim", item, "--as", "alice", "--ttl", "1h", "--json")
    assert claim.returncode == 0, claim.stdout + claim.stderr
    fence = json.loads(claim.stdout)["fence"]
    before = tip(repo)
    done = gw_here(repo, verb[0], item, *verb[1:], "--as", "bob", "--fence", str(fence), "--json")
    assert done.returncode == 7, (done.returncode, done.stdout, done.stderr)
    assert "alice" in done.stdout + done.stderr and "bob" in done.stdout + done.stderr
    assert tip(repo) == before
    lease = json.loads(gw_here(repo, "show", item, "--json").stdout)
    assert "alice" in json.dumps(lease) and "Traceback" not in done.stderr
    # the holder itself, with the same fence, still may
    mine = gw_here(repo, verb[0], item, *verb[1:], "--as", "alice", "--fence", str(fence), "--json")
    assert mine.returncode == 0, mine.stdout + mine.stderr


# --- a non-holder's message replays on any later tip exactly as it was first applied ------------------


@pytest.fixture
def two_clones(tmp_path: Path):  # type: ignore[no-untyped-def]
    from harness.world import World

    made = World(tmp_path / "world", clones=2, items=1)
    for repo in (*made.clones, made.arbiter):  # bob posts on an item he neither holds nor owns
        let_post(repo, "bob")
    try:
        yield made
    finally:
        made.close()


def test_a_message_acknowledged_offline_lands_after_a_claim_that_landed_first_on_the_arbiter(two_clones) -> None:
    """bob posts in clone1 (exit 0, local: epoch 0, what the faces send by default), alice's claim in
    clone0 reaches the arbiter first (epoch 1); bob's ``gw sync`` replays the post on that tip. It must
    land as it was first applied (under epoch 0, by a non-holder), not turn into a refusal after an
    exit 0; and the arbiter's tip is what the engine makes of each recorded command (I4)."""
    from harness import invariants

    world = two_clones
    item = world.items[0]
    posted = gw_here(world.clones[1], "msg", item, "are you on it?", "--as", "bob", "--json")
    assert posted.returncode == 0, posted.stdout + posted.stderr
    command_id = json.loads(posted.stdout)["command_id"]
    claim = gw_here(world.clones[0], "claim", item, "--as", "alice", "--json")
    assert claim.returncode == 0 and json.loads(claim.stdout)["epoch"] == 1, claim.stdout + claim.stderr
    assert gw_here(world.clones[0], "sync").returncode == 0
    synced = gw_here(world.clones[1], "sync", "--json")
    assert synced.returncode == 0, synced.stdout + synced.stderr
    assert not json.loads(synced.stdout).get("refused"), synced.stdout
    assert invariants.command_id_counts(world.arbiter)[command_id] == 1
    thread = json.loads(gw_here(world.clones[1], "thread", item, "--json").stdout)
    mine = [m for m in json.dumps(thread).split("{") if "are you on it?" in m]
    assert mine and '"epoch": 0' in mine[0] and '"by": "bob"' in mine[0], thread
    assert invariants.replay_mismatches(world.arbiter) == []


# --- one live execution per item, across clones -------------------------------------------------------


def agent_processes(script: Path) -> list[int]:
    """The live processes running ``script`` (the world's agent) as their program, not the wrappers that
    name it among their arguments: found in /proc, before the agent has written anything."""
    return [pid for pid, argv, _parent in live_processes()
            if os.fsencode(script) in argv[:2] and b"wrapper" not in b" ".join(argv[:2])]


def test_gw_run_of_one_item_in_two_clones_by_its_holder_starts_one_agent(two_clones) -> None:
    """The soak's I1 (seed 1242089248: two live agents on one item under one fence, in clone0 and
    clone2): the launcher ``l0`` runs an item in clone0 (it claims it: fence F), then runs the same
    item in clone1, which has not synced clone0's execution records. ``exec-reserve`` was decided on
    the clone's own state, so clone1 reserved and launched a second agent under the same lease.
    The arbiter must decide it, as it decides the lease: the second ``gw run`` is refused (75)."""
    from harness.world import live_agents

    world = two_clones
    item = world.items[0]
    # l0 already holds the item's lease, and both clones know it (its earlier run, since ended): a gw run
    # by the holder asks the arbiter nothing about the lease, and decided the execution locally.
    claim = gw_here(world.clones[0], "claim", item, "--as", "l0", "--ttl", "1h", "--json")
    assert claim.returncode == 0, claim.stdout + claim.stderr
    for clone in world.clones:
        assert gw_here(clone, "sync").returncode == 0
    first = gw_here(world.clones[0], "run", item, "--backend", "subprocess", "--ttl", "1h", "--as", "l0", "--json",
                    "--", str(world.agent))
    assert first.returncode == 0, first.stdout + first.stderr
    try:
        import time

        deadline = time.monotonic() + 20
        while len(live_agents(world.agents)) < 1 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert len(live_agents(world.agents)) == 1
        second = gw_here(world.clones[1], "run", item, "--backend", "subprocess", "--ttl", "1h", "--as", "l0",
                         "--json", "--", str(world.agent))
        # No wait for a record: gw run returns only once the wrapper has started the agent (launch/process.py,
        # wait_started), so an agent the second run started is a live process now, record or not.
        assert len(agent_processes(world.agent)) == 1, (second.returncode, second.stdout, second.stderr)
        assert len(live_agents(world.agents)) == 1, (second.returncode, second.stdout, second.stderr)
        assert second.returncode == 75, (second.returncode, second.stdout, second.stderr)
    finally:
        world.kill_agents()
