"""A delegated start (docs/security.md, "Delegation") whose peer is killed (-9) between the steps of
its launch: the sender's retry under the same request id ends with one agent, under the execution id
made from the request id, in the first lease epoch (issue 24, point 5).

The world (two repositories serving each other, real SSH keys) is test_delegation's; the peer server
is killed by ``GW_CRASH_AT`` at the named step of ``gw run`` inside it.
"""

from __future__ import annotations

import pytest

from gitwork.delegation.service import execution_for
from gitwork.launch.run import runs
from test_delegation import crashed_start, world  # noqa: F401  (world: a fixture)


@pytest.mark.slow
@pytest.mark.parametrize("step, item", [("after-fork", "crash-mid-start"), ("after-reserve", "retry")])
def test_a_peer_killed_mid_launch_leaves_one_agent_under_the_requests_execution(world, step: str,  # noqa: F811
                                                                                  item: str) -> None:
    item_id = world.items[item]
    request_id, first, again = crashed_start(world, item_id, f"crashy-{item}", step)
    assert first == [execution_for(request_id)]
    assert again["receipt"]["outcome"] == "done", again
    assert again["receipt"]["execution"] == execution_for(request_id), again
    with world.plane("peer") as wp:
        rows = runs(wp, item_id)
    assert [(r["execution"], r["state"], r.get("epoch")) for r in rows] == [(execution_for(request_id), "running", 1)]
