"""An outsider's pass (session 11, attack12) on what the session added: the arbiter's verdicts by roles,
the coordinator reading the arbiter each pass, ``exec-lost``, ``gw`` installed as a script.

Real clones, a real bare arbiter, the real ``gw`` in child processes; nothing of git is mocked.
"""

from __future__ import annotations

from pathlib import Path

from conftest import run_gw
from gitwork.launch import coordinate
from gitwork.workplane import Workplane
from test_attack11_seams import _kill_agents, gw_json
from test_launch import poll, runs
from test_launch_seams import agent, alive, pids

# --- the coordinator's view of the arbiter, fetched at the start of its pass -----------------------------


def test_an_agent_launched_after_the_passs_fetch_is_not_killed_as_replaced(machine_a: Path, monkeypatch) -> None:
    """A pass fetches the arbiter's state once, first, then looks after each running execution. A ``gw run``
    whose launch lands on the arbiter after that fetch (while the pass probes other executions) is running
    by the time the pass reads it; the fetched state, older, knows neither the execution nor its lease, and
    the pass judged it by that: "its lease (fence N) was replaced", and killed the agent it had just seen
    launched (recorded ``stopped``, the end pushed). An arbiter's state that has not heard of an execution
    cannot say it must stop."""
    a = machine_a
    code, made = gw_json(a, "new", "A's work")
    assert code == 0, made
    assert run_gw(a, "sync").returncode == 0
    early = coordinate.ArbiterView(Workplane(str(a)))  # the pass's fetch, before the launch lands
    assert early.view is not None and early.problem is None
    try:
        code, doc = gw_json(a, "run", made["item"], "--backend", "subprocess", "--as", "alice", "--", *agent(a))
        assert code == 0 and doc["state"] == "running", doc
        first = poll(lambda: pids(a / "agents.log"), "the agent")[0]
        monkeypatch.setattr(coordinate, "ArbiterView", lambda wp: early)
        done = coordinate.tick(Workplane(str(a)))
        assert alive(first), f"the agent launched after the pass's fetch was killed: {done}"
        [record] = runs(a)
        assert record["state"] == "running", (record, done)
    finally:
        _kill_agents(a)
