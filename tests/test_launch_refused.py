"""Launch x sync, the CI failure of the harness (seed 20261202, I2): a clone's launch, and another
clone ending its lease on the arbiter before the clone's later execution records get there.

Since issue 27 the reservation, the claim and ``launching`` are one command the arbiter decides (one
state commit before the agent starts); only ``running`` (and what follows) are local records that
reach the arbiter with the clone's next push. When another clone ends the lease on the arbiter first
(a revoke, a takeover), ``running`` replays after it (a fact about a process, needing no fence), and
the arbiter's view is an execution running under a lease that ended: its coordinator must kill the
agent (by process group) and record it ``stopped``, never leave it running under the dead fence.
(Before issue 27 ``launching`` was local too and was refused on replay, leaving ``reserved``: that
path, an older gw's records, is still settled by killing whatever of it runs: ``run.probe``.)
"""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path

import pytest

from conftest import end_executions, run_gw, second_clone
from test_launch import gw_json, poll, runs
from test_launch_seams import agent, alive, pids


@pytest.mark.slow
def test_an_agent_whose_launch_records_the_arbiter_refused_is_killed_before_it_is_lost(
        tmp_path: Path, machine_a: Path, url: str) -> None:
    a, b = machine_a, tmp_path / "b"
    second_clone(url, b)
    code, made = gw_json(a, "new", "A's work")
    assert code == 0, made
    assert run_gw(a, "sync").returncode == 0
    try:
        code, doc = gw_json(a, "run", made["item"], "--backend", "subprocess", "--as", "alice", "--", *agent(a))
        assert code == 0 and doc["state"] == "running", doc
        first = poll(lambda: pids(a / "agents.log"), "the agent")[0]
        # b ends alice's lease on the arbiter before a's launch records get there.
        assert run_gw(b, "sync").returncode == 0
        revoked = run_gw(b, "revoke", made["item"], "--reason", "taken back", "--as", "carol")
        assert revoked.returncode == 0, revoked.stdout + revoked.stderr
        synced = run_gw(a, "sync", "--json")
        assert synced.returncode == 0, synced.stdout + synced.stderr  # `running` needs no fence: replayed
        assert [r["op"] for r in json.loads(synced.stdout)["replayed"]] == ["exec-state"]
        [record] = runs(a)
        assert (record["state"], record["epoch"]) == ("running", 1)  # launched under the lease revoked since
        assert alive(first)
        code, done = gw_json(a, "coordinate", "--once")
        assert code == 0, done
        assert not alive(first), f"the execution was recorded {runs(a)[0]['state']} while its agent ran: {done}"
        [record] = runs(a)
        assert record["state"] == "stopped" and "revoked" in record["reason"], record
    finally:
        kill_agents(a)


def kill_agents(a: Path) -> None:
    """Kill every agent clone ``a`` started (each execution's process group, each pid in agents.log)."""
    end_executions(a)
    for pid in pids(a / "agents.log"):
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
