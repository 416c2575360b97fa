"""Launch x sync, the CI failure of the harness (seed 20261202, I2): a clone's own execution records
refused by the arbiter, and the agent they described.

A clone launches an agent under its lease: the claim is decided by the arbiter, ``launching`` and
``running`` are local records that reach the arbiter only with the clone's next push. When another
clone ends that lease on the arbiter first (a revoke, a takeover), the replay puts the records after
the revoke, where ``launching`` is fenced out (7) and ``running`` is illegal from ``reserved``: both
are refused, rightly, and the clone's ref now says the execution was only ``reserved``. Its agent
still runs under the dead fence; the coordinator must kill it (by process group) before it records
the execution ``lost``, never believe "nothing was started" from a record that lost its history.
"""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path

import pytest

from conftest import run_gw, second_clone
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
        assert synced.returncode == 15, synced.stdout + synced.stderr  # launching (7) and running refused
        refused = json.loads(synced.stdout)
        assert "2 of this clone's commands" in refused["message"], refused
        assert [r["state"] for r in runs(a)] == ["reserved"]  # the arbiter's view: its launch never landed
        assert alive(first)
        code, done = gw_json(a, "coordinate", "--once")
        assert code == 0, done
        assert not alive(first), f"the execution was recorded {runs(a)[0]['state']} while its agent ran: {done}"
        assert [r["state"] for r in runs(a)] == ["lost"]
        assert "killed" in runs(a)[0]["reason"], runs(a)
    finally:
        for handle in (a / ".git" / "gitwork" / "executions").glob("*/handle"):
            try:
                os.killpg(int(handle.read_text().partition("@")[0]), signal.SIGKILL)
            except (ProcessLookupError, PermissionError, ValueError):
                pass
        for pid in pids(a / "agents.log"):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
