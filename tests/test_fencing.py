"""Fencing: once a lease is gone, everything its old holder does under it is refused and changes nothing.

Time is driven in-process with freezegun and, for child processes, pinned with GW_NOW. The default
margin is 30 s: the holder's own view ends 30 s before expiry, a taker may start 30 s after it.
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from freezegun import freeze_time

from conftest import git, run_gw, tip
from gitwork.clock import format_instant
from gitwork.errors import ExitCode, Held, Invalid, Stale
from gitwork.workplane import Workplane

T0 = dt.datetime(2030, 6, 1, 9, 0, 0, tzinfo=dt.timezone.utc)
TTL = 60
MARGIN = 30


def seconds(n: float) -> dt.timedelta:
    return dt.timedelta(seconds=n)


@pytest.fixture
def frozen() -> Iterator[Any]:
    with freeze_time(T0) as clock:
        yield clock


@pytest.fixture
def alice(repo: Path, frozen: Any) -> Iterator[Workplane]:
    wp = Workplane(str(repo), agent="alice")
    wp.do("init")
    yield wp
    wp.close()


@pytest.fixture
def bob(repo: Path, alice: Workplane) -> Iterator[Workplane]:
    wp = Workplane(str(repo), agent="bob")
    yield wp
    wp.close()


def new_item(wp: Workplane, title: str = "fenced work", **args: Any) -> str:
    return wp.do("new", title=title, criteria=["c"], **args).result["item"]


def refused_with(error: type[Exception], repo: Path, wp: Workplane, op: str, **args: Any) -> Exception:
    before = tip(repo)
    with pytest.raises(error) as caught:
        wp.do(op, **args)
    assert tip(repo) == before, f"refused {op} moved the ref"
    return caught.value


HOLDER_OPS: list[tuple[str, dict[str, Any]]] = [
    ("edit", {"priority": 0}),  # not the title: the creator may curate title/labels/deps of a leased item
    ("renew", {}),
    ("release", {}),
    ("done", {"force": True, "reason": "late"}),
    ("check", {"criterion": 1}),
    ("decision", {"text": "late", "why": "late"}),
    ("handoff", {"reason": "timeout"}),
    ("cancel", {}),
]


def test_takeover_fences_out_the_old_holder(repo: Path, alice: Workplane, bob: Workplane, frozen: Any) -> None:
    item = new_item(alice)
    first = alice.do("claim", item=item, ttl="1m").result
    assert (first["epoch"], first["fence"], first["holder"]) == (1, 1, "alice")
    frozen.tick(seconds(TTL + MARGIN))
    second = bob.do("takeover", item=item, ttl="10m").result
    assert (second["epoch"], second["fence"], second["holder"]) == (2, 2, "bob")
    history = bob.history(item)
    assert history[-1]["type"] == "takeover"
    assert history[-1]["previous"] == {"holder": "alice", "epoch": 1, "fence": 1, "state": "active"}

    for op, args in HOLDER_OPS:
        error = refused_with(Stale, repo, alice, op, item=item, fence=first["fence"], **args)
        assert "fence 1 is stale" in str(error)
        # Without --fence the old holder is still not the holder: refused the same way.
        refused_with(Stale, repo, alice, op, item=item, **args)
    assert alice.item(item).title == "fenced work"
    lease = alice.lease(item)
    assert lease is not None and (lease.holder, lease.fence, lease.state) == ("bob", 2, "active")
    # The new holder works normally, and a fence from the future is stale too.
    bob.do("renew", item=item, fence=2)
    refused_with(Stale, repo, bob, "renew", item=item, fence=3)


def test_old_holder_refused_through_the_cli_with_a_pinned_clock(repo: Path, alice: Workplane, bob: Workplane,
                                                                frozen: Any) -> None:
    item = new_item(alice)
    alice.do("claim", item=item, ttl="1m")
    frozen.tick(seconds(TTL + MARGIN + 5))
    bob.do("takeover", item=item)
    before = tip(repo)
    env = {"GW_NOW": format_instant(T0 + seconds(TTL + MARGIN + 10))}
    calls = [
        ("edit", item, "--title", "late", "--fence", "1"),
        ("renew", item, "--fence", "1"),
        ("release", item, "--fence", "1"),
        ("done", item, "--fence", "1", "--force", "--reason", "late"),
    ]
    for args in calls:
        done = run_gw(repo, *args, "--as", "alice", env=env)
        assert done.returncode == ExitCode.STALE, (args, done.returncode, done.stderr)
        assert done.stderr.startswith("gw: stale: fence 1 is stale")
        assert tip(repo) == before
    # The fence may come from the environment (GW_FENCE), as a wrapper script would set it.
    done = run_gw(repo, "renew", item, "--as", "alice", "--json", env={**env, "GW_FENCE": "1"})
    assert done.returncode == ExitCode.STALE
    assert json.loads(done.stdout)["error"] == "stale"
    assert tip(repo) == before
    assert git(repo, "log", "-1", "--format=%s", "refs/gitwork/state").startswith(f"takeover {item} by bob")


def test_holder_view_ends_early_by_the_margin(repo: Path, alice: Workplane, frozen: Any) -> None:
    item = new_item(alice)
    alice.do("claim", item=item, ttl="1m")
    frozen.tick(seconds(TTL - MARGIN - 1))
    alice.do("edit", item=item, title="still mine", fence=1)  # 1 s before the holder's own deadline
    frozen.tick(seconds(1))
    error = refused_with(Stale, repo, alice, "renew", item=item, fence=1)
    assert "expired" in str(error)
    refused_with(Stale, repo, alice, "edit", item=item, title="too late", fence=1)
    # No one took over, yet the holder's view has ended: that is the margin.
    lease = alice.lease(item)
    assert lease is not None and lease.state == "active"
    assert alice.show(item)["lease"]["live"] is True  # others still see it as held
    view_cli = run_gw(repo, "show", item, "--json", env={"GW_NOW": format_instant(T0 + seconds(TTL + MARGIN))})
    assert json.loads(view_cli.stdout)["lease"]["live"] is False


def test_takeover_refused_until_expiry_plus_margin(repo: Path, alice: Workplane, bob: Workplane, frozen: Any) -> None:
    item = new_item(alice)
    alice.do("claim", item=item, ttl="1m")
    for offset in (0, TTL - 1, TTL, TTL + MARGIN - 1):
        frozen.move_to(T0 + seconds(offset))
        error = refused_with(Held, repo, bob, "takeover", item=item)
        assert "held by alice" in str(error)
        refused_with(Held, repo, bob, "claim", item=item)
    env = {"GW_NOW": format_instant(T0 + seconds(TTL + MARGIN - 1))}
    before = tip(repo)
    done = run_gw(repo, "takeover", item, "--as", "bob", env=env)
    assert done.returncode == ExitCode.HELD, done.stderr
    done = run_gw(repo, "claim", item, "--as", "bob", "--json", env=env)
    assert done.returncode == ExitCode.HELD
    assert json.loads(done.stdout)["details"]["holder"] == "alice"
    assert tip(repo) == before
    # Exactly at expiry plus margin the taker may go.
    done = run_gw(repo, "takeover", item, "--as", "bob", "--json",
                  env={"GW_NOW": format_instant(T0 + seconds(TTL + MARGIN))})
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["fence"] == 2


def test_the_gray_zone_between_holder_deadline_and_taker_start(repo: Path, alice: Workplane, bob: Workplane,
                                                               frozen: Any) -> None:
    # From expiry - margin to expiry + margin nobody may act: that window absorbs clock skew.
    item = new_item(alice)
    alice.do("claim", item=item, ttl="1m")
    for offset in (TTL - MARGIN, TTL, TTL + MARGIN - 1):
        frozen.move_to(T0 + seconds(offset))
        refused_with(Stale, repo, alice, "renew", item=item, fence=1)
        refused_with(Held, repo, bob, "takeover", item=item)


def test_handoff_allows_immediate_takeover(repo: Path, alice: Workplane, bob: Workplane, frozen: Any) -> None:
    item = new_item(alice)
    alice.do("claim", item=item, ttl="1h")
    alice.do("handoff", item=item, reason="needs-human", to="bob", message="over to you", fence=1)
    lease = alice.lease(item)
    assert lease is not None and lease.state == "handed-off"
    assert lease.handoff == {"reason": "needs-human", "to": "bob", "message": "over to you"}
    taken = bob.do("takeover", item=item).result  # no waiting for the hour to pass
    assert (taken["holder"], taken["epoch"], taken["fence"]) == ("bob", 2, 2)
    assert bob.history(item)[-1]["previous"]["state"] == "handed-off"
    refused_with(Stale, repo, alice, "renew", item=item, fence=1)
    refused_with(Stale, repo, alice, "handoff", item=item, reason="reassign", fence=1)


def test_takeover_of_a_released_lease_is_a_claim(repo: Path, alice: Workplane, bob: Workplane) -> None:
    item = new_item(alice)
    refused_with(Invalid, repo, bob, "takeover", item=item)  # never leased
    alice.do("claim", item=item)
    alice.do("release", item=item, fence=1)
    refused_with(Invalid, repo, bob, "takeover", item=item)
    assert bob.do("claim", item=item).result["epoch"] == 2


def test_revoke_ends_the_lease(repo: Path, alice: Workplane, bob: Workplane) -> None:
    item = new_item(alice)
    alice.do("claim", item=item, ttl="1h")
    admin = Workplane(str(repo), agent="admin")
    try:
        revoked = admin.do("revoke", item=item, reason="stuck agent").result
        assert (revoked["state"], revoked["holder"]) == ("revoked", "alice")
        lease = admin.lease(item)
        assert lease is not None and (lease.ended_by, lease.reason) == ("admin", "stuck agent")
        refused_with(Invalid, repo, admin, "revoke", item=item, reason="again")
    finally:
        admin.close()
    assert "was revoked" in str(refused_with(Stale, repo, alice, "renew", item=item, fence=1))
    refused_with(Stale, repo, alice, "release", item=item, fence=1)
    refused_with(Stale, repo, alice, "edit", item=item, title="mine", fence=1)
    assert bob.do("claim", item=item).result["fence"] == 2
    assert alice.item(item).status == "in_progress"


def test_fences_strictly_increase_across_items(repo: Path, alice: Workplane, bob: Workplane, frozen: Any) -> None:
    items = [new_item(alice, f"item {n}") for n in range(3)]
    fences: list[int] = []
    epochs: dict[str, list[int]] = {i: [] for i in items}

    def granted(result: dict[str, Any]) -> None:
        fences.append(result["fence"])
        epochs[result["item"]].append(result["epoch"])

    granted(alice.do("claim", item=items[0], ttl="1m").result)
    granted(bob.do("claim", item=items[1]).result)
    bob.do("renew", item=items[1])  # renewals draw no fence
    bob.do("release", item=items[1])
    granted(alice.do("claim", item=items[1]).result)
    granted(bob.do("claim", item=items[2]).result)
    bob.do("handoff", item=items[2], reason="reassign")
    granted(alice.do("takeover", item=items[2]).result)
    frozen.tick(seconds(TTL + MARGIN))
    granted(bob.do("takeover", item=items[0]).result)
    assert fences == list(range(1, len(fences) + 1))
    assert epochs == {items[0]: [1, 2], items[1]: [1, 2], items[2]: [1, 2]}
    counters = git(repo, "show", "refs/gitwork/state:counters.yaml")
    assert counters == f"fence: {fences[-1]}"
    trailers = git(repo, "log", "--reverse", "--format=%(trailers:key=Fence,valueonly)", "refs/gitwork/state").split()
    # Each grant's commit carries its fence; renew/release/handoff repeat the lease's own fence.
    grant_fences = [int(f) for f in trailers]
    assert sorted(set(grant_fences)) == fences


def test_stale_discovered_only_after_a_cas_retry(repo: Path, alice: Workplane) -> None:
    # Clock skew: alice's clock is behind, so she believes her lease is live; bob's is ahead, so he
    # takes it over. Bob's commit lands while alice's renew is between reading the tip and its CAS;
    # her CAS fails, she re-applies on the new tip, and only then is the renew refused as stale.
    item = new_item(alice)
    alice.do("claim", item=item, ttl="1m")
    late = T0 + seconds(TTL + MARGIN)
    bob = Workplane(str(repo), agent="bob", now=lambda: late)
    skewed = Workplane(str(repo), agent="alice", now=lambda: T0 + seconds(10))
    real_cas = skewed.store.set_if_equals
    interleaved: list[str | None] = []

    def cas_after_bob(old: str | None, new: str) -> bool:
        if not interleaved:
            interleaved.append(bob.do("takeover", item=item).commit)
        return real_cas(old, new)

    skewed.store.set_if_equals = cas_after_bob  # type: ignore[method-assign]
    try:
        with pytest.raises(Stale, match="fence 1 is stale"):
            skewed.do("renew", item=item, fence=1)
        assert tip(repo) == interleaved[0]
        log = git(repo, "log", "--format=%s", "refs/gitwork/state").splitlines()
        assert log[0].startswith(f"takeover {item} by bob") and not any(s.startswith("renew") for s in log)
    finally:
        skewed.close()
        bob.close()
