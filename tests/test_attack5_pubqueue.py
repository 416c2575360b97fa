"""An attacker's pass (session 5) over the publish queue together with leases: a queued session whose
lease ends (revoked, handed off) before the publisher reaches it must never land on the code remote,
and the queue must not stay stuck on it.

The world is test_pubqueue's: ``origin.git`` (arbiter and code remote, server hooks installed), alice's
and bob's clones holding items A and B, and the publisher's clone.
"""

from __future__ import annotations

from typing import Any

import pytest

from gitwork import pubqueue
from gitwork.sync import Arbiter
from test_pubqueue import World, template, world  # noqa: F401 - fixtures
from test_sessions import init_project, person_identity  # noqa: F401 - autouse fixture

__all__ = ["template", "world"]


def _revoke(world: World) -> None:
    world.planes["bob"].do("revoke", item=world.items["alice"], reason="taken back")


def _handoff(world: World) -> None:
    world.planes["alice"].do("handoff", item=world.items["alice"], to="bob", reason="reassign")


@pytest.mark.parametrize("end", [_revoke, _handoff], ids=["revoked", "handed-off"])
def test_a_queued_session_whose_lease_ended_never_lands(world: World, end: Any) -> None:
    session = world.session("alice", {"a.txt": "a\n"})
    pubqueue.enqueue(world.planes["alice"], session)
    end(world)
    main = world.main()
    result = pubqueue.work(world.planes["pub"], once=True)
    assert world.main() == main, "code under an ended lease reached main"
    assert [h["session"] for h in result["handled"]] == [session]
    assert result["handled"][0]["outcome"] != "landed", result
    assert pubqueue.listing(world.planes["pub"]) == [], "the queue is not stuck on it"
    Arbiter(world.planes["alice"]).sync()
    assert world.planes["alice"].context().item(world.items["alice"]).status != "done"
