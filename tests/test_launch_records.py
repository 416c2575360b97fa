"""The execution record ops (``ops/executions.py``) through a real repository: what the engine
enforces whatever a launcher does (docs/launch.md, "Execution records")."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from conftest import Clock, make_repo
from gitwork.errors import Held, Illegal, Invalid, Stale
from gitwork.launch.build import current
from gitwork.records.executions import TRANSITIONS
from gitwork.workplane import Workplane


def reserve(wp: Workplane, item: str, execution: str, **extra: Any) -> dict[str, Any]:
    return wp.record("exec-reserve", item=item, execution=execution, command=["cat"], backend="tmux", host="h",
                     build=current(), **extra).result


@pytest.fixture
def plane(repo: Path) -> Any:
    with Workplane(str(repo), agent="alice") as wp:
        wp.do("init")
        wp.item_id = wp.do("new", title="records").result["item"]  # type: ignore[attr-defined]
        yield wp


def test_one_live_execution_per_item(plane: Any) -> None:
    reserve(plane, plane.item_id, "x-one1")
    with pytest.raises(Held) as refused:
        reserve(plane, plane.item_id, "x-two2")
    assert refused.value.details["execution"] == "x-one1"
    with pytest.raises(Held) as again:  # the same id, reserved by a concurrent gw run: settle that one
        reserve(plane, plane.item_id, "x-one1")
    assert again.value.details["execution"] == "x-one1"
    plane.record("exec-state", execution="x-one1", to="failed", reason="gave up")
    assert reserve(plane, plane.item_id, "x-two2")["state"] == "reserved"
    with pytest.raises(Held) as lane_taken:  # x-one1 never launched: its id comes back, once its lane is free
        reserve(plane, plane.item_id, "x-one1")
    assert lane_taken.value.details["execution"] == "x-two2"
    plane.record("exec-state", execution="x-two2", to="lost", reason="launcher died before launching")
    again = reserve(plane, plane.item_id, "x-one1")
    assert (again["reserved"], again["attempt"]) == (2, 2)  # reserved a second time, numbered after x-two2


SESSION = "20300101-120000-proj-bot"


def branch(key: str) -> dict[str, str]:
    return {"session": SESSION, "branch": key}


def test_one_live_execution_per_session_branch(plane: Any) -> None:
    item = plane.item_id
    reserve(plane, item, "s-one1", **branch("step-1/parallel-1"))
    assert reserve(plane, item, "s-two2", **branch("step-1/parallel-2"))["branch"] == "step-1/parallel-2"
    with pytest.raises(Held) as same:  # a second execution of one branch: refused, naming the first
        reserve(plane, item, "s-again", **branch("step-1/parallel-1"))
    assert same.value.details["execution"] == "s-one1"
    with pytest.raises(Held):  # a plain execution of the item excludes every branch
        reserve(plane, item, "x-plain")
    # A branch's execution that never launched (its gw run died first) is reserved again under its id;
    # one that launched is never reserved again (a lost process may still run under its fence).
    plane.record("exec-state", execution="s-one1", to="lost", reason="launcher died before launching")
    assert reserve(plane, item, "s-one1", **branch("step-1/parallel-1"))["reserved"] == 2
    fence = plane.do("claim", item=item).result["fence"]
    plane.record("exec-state", execution="s-two2", to="launching", fence=fence)
    plane.record("exec-state", execution="s-two2", to="lost")
    with pytest.raises(Invalid, match="exists already"):
        reserve(plane, item, "s-two2", **branch("step-1/parallel-2"))
    plane.record("exec-state", execution="s-one1", to="stopped")
    with pytest.raises(Invalid, match="exists already"):  # an id is never another branch's
        reserve(plane, item, "s-one1", **branch("step-1/parallel-3"))
    reserve(plane, item, "x-plain")
    with pytest.raises(Held):  # and a live plain one excludes a branch
        reserve(plane, item, "s-three", **branch("step-1/parallel-3"))
    events = [e for e in plane.history(item) if e["type"] == "execution" and e["execution"] == "s-two2"]
    assert {(e.get("session"), e.get("branch")) for e in events} == {(SESSION, "step-1/parallel-2")}


@pytest.mark.parametrize("extra, words", [
    ({"session": SESSION}, "both its session and its branch"),
    ({"env": ["GW_FENCE"]}, "set by gw run itself"),
    ({"env": ["1BAD"]}, "bad environment variable name"),
])
def test_malformed_lanes_and_environments_are_refused(plane: Any, extra: dict[str, Any], words: str) -> None:
    with pytest.raises(Invalid, match=words):
        reserve(plane, plane.item_id, "x-bad1", **extra)


def test_launching_needs_the_lease_and_records_it(plane: Any) -> None:
    reserve(plane, plane.item_id, "x-lease1")
    with pytest.raises(Stale, match="no lease"):
        plane.record("exec-state", execution="x-lease1", to="launching")
    lease = plane.do("claim", item=plane.item_id).result
    with pytest.raises(Stale):
        plane.record("exec-state", execution="x-lease1", to="launching", fence=lease["fence"] + 5)
    done = plane.record("exec-state", execution="x-lease1", to="launching", fence=lease["fence"]).result
    assert (done["epoch"], done["fence"], done["holder"]) == (lease["epoch"], lease["fence"], "alice")
    events = [e for e in plane.history(plane.item_id) if e["type"] == "execution"]
    assert [(e["execution"], e["state"]) for e in events] == [("x-lease1", "reserved"), ("x-lease1", "launching")]


def test_after_a_lost_execution_the_same_epoch_launches_nothing(plane: Any) -> None:
    lease = plane.do("claim", item=plane.item_id).result
    reserve(plane, plane.item_id, "x-lost1")
    plane.record("exec-state", execution="x-lost1", to="launching", fence=lease["fence"])
    plane.record("exec-state", execution="x-lost1", to="lost")
    reserve(plane, plane.item_id, "x-next1")
    with pytest.raises(Stale, match="lost under epoch"):
        plane.record("exec-state", execution="x-next1", to="launching", fence=lease["fence"])
    plane.do("release", item=plane.item_id)
    again = plane.do("claim", item=plane.item_id).result
    assert plane.record("exec-state", execution="x-next1", to="launching").result["epoch"] == again["epoch"] == 2


def test_someone_elses_item_and_closed_items_are_not_reserved(plane: Any) -> None:
    with Workplane(plane.repo.toplevel, agent="bob") as bob:
        bob.do("claim", item=plane.item_id)
    with pytest.raises(Held, match="held by bob"):
        reserve(plane, plane.item_id, "x-bobs")
    other = plane.do("new", title="closed").result["item"]
    plane.do("cancel", item=other)
    with pytest.raises(Illegal):
        reserve(plane, other, "x-closed")


@pytest.mark.parametrize("doc, words", [
    ({"execution": "bad.id"}, "bad execution id"),
    ({"execution": "x-ok12", "command": [""]}, "command must not be empty"),
])
def test_malformed_reservations_are_refused(plane: Any, doc: dict[str, Any], words: str) -> None:
    with pytest.raises(Invalid, match=words):
        plane.record("exec-reserve", **{"item": plane.item_id, "command": ["cat"], "backend": "tmux", "host": "h", "build": current(),
                                        **doc})


STATES = ("launching", "running", "exited", "failed", "lost", "stopped")


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(steps=st.lists(st.sampled_from(STATES), min_size=1, max_size=6))
def test_transitions_follow_the_table(tmp_path_factory: pytest.TempPathFactory, steps: list[str]) -> None:
    repo = make_repo(tmp_path_factory.mktemp("records"))
    with Workplane(str(repo), agent="alice") as wp:
        wp.do("init")
        item = wp.do("new", title="t").result["item"]
        wp.do("claim", item=item)
        reserve(wp, item, "x-model")
        state = "reserved"
        for step in steps:
            allowed = step in TRANSITIONS.get(state, ())
            try:
                wp.record("exec-state", execution="x-model", to=step, code=0 if step == "exited" else None)
            except Illegal:
                assert not allowed, (state, step)
                continue
            assert allowed, (state, step)
            state = step
        from gitwork.launch.run import find

        assert find(wp, "x-model")["state"] == state



# --- the coordinator lease: one gw coordinate per host ------------------------------------------------


def test_the_coordinator_lease_admits_one_holder_per_host(repo: Path) -> None:
    clock = Clock()
    first, second = {"host": "h", "pid": "1", "start": "1"}, {"host": "h", "pid": "2", "start": "2"}
    with Workplane(str(repo), agent="alice", now=clock) as wp:
        wp.do("init")

        def lease(action: str, holder: dict[str, str], **extra: Any) -> dict[str, Any]:
            return wp.record("coord-lease", host="h", action=action, holder=holder, ttl=30, **extra).result

        assert lease("take", first)["epoch"] == 1
        with pytest.raises(Held, match="a coordinator runs on h already"):
            lease("take", second)
        # The caller saw the holder's process dead: it takes over at once, under a new epoch.
        assert lease("take", second, over=1)["epoch"] == 2
        with pytest.raises(Stale, match="taken over by pid 2"):
            lease("renew", first, epoch=1)
        assert lease("renew", second, epoch=2)["epoch"] == 2
        # A live holder (a paused one, say) keeps it until it expires; then anyone may take it.
        clock.advance(20)
        with pytest.raises(Held):
            lease("take", first)
        clock.advance(11)
        assert lease("take", first)["epoch"] == 3
        with pytest.raises(Stale):
            lease("release", second, epoch=2)
        lease("release", first, epoch=3)
        assert lease("take", second)["epoch"] == 4  # released: free at once
        with pytest.raises(Invalid, match="bad host"):
            wp.record("coord-lease", host="../x", action="take", holder=first, ttl=30)


def test_a_new_epoch_after_a_lost_branch_waits_for_the_other_branches(plane: Any) -> None:
    """A lost execution forbids launching again under its epoch; the new epoch gw run would take
    (release, claim) must not end the lease under another branch of the session that still runs."""
    from gitwork.launch.run import run as launch_run

    item = plane.item_id
    lease = plane.do("claim", item=item).result
    for name, key in (("s-lost1", "step-1/parallel-1"), ("s-runs1", "step-1/parallel-2")):
        reserve(plane, item, name, **branch(key))
        plane.record("exec-state", execution=name, to="launching", fence=lease["fence"])
    plane.record("exec-state", execution="s-runs1", to="running", handle="0@0")
    plane.record("exec-state", execution="s-lost1", to="lost")
    with pytest.raises(Held, match="s-runs1 still runs") as refused:
        launch_run(plane, item, ["cat"], backend_kind="subprocess", execution="s-next1", session=SESSION,
                   branch="step-2/parallel-1")
    assert refused.value.details["execution"] == "s-runs1"
    now = plane.lease(item)
    assert (now.epoch, now.fence, now.state) == (lease["epoch"], lease["fence"], "active")  # not released


LANES = (None, "step-1/parallel-1", "step-1/parallel-2")


@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(moves=st.lists(st.tuples(st.sampled_from(("reserve", "end")), st.sampled_from(LANES), st.integers(0, 5)),
                      min_size=1, max_size=8))
def test_a_reservation_is_refused_exactly_when_a_live_execution_shares_its_lane(
        tmp_path_factory: pytest.TempPathFactory, moves: list[tuple[str, str | None, int]]) -> None:
    from gitwork.records.executions import same_lane

    repo = make_repo(tmp_path_factory.mktemp("lanes"))
    live: dict[str, tuple[str, str] | None] = {}  # the model: live execution -> its lane
    with Workplane(str(repo), agent="alice") as wp:
        wp.do("init")
        item = wp.do("new", title="t").result["item"]
        for number, (move, key, pick) in enumerate(moves):
            name = f"x-move{number}"
            if move == "end":
                if live:
                    ended = sorted(live)[pick % len(live)]
                    wp.record("exec-state", execution=ended, to="stopped")
                    del live[ended]
                continue
            lane = (SESSION, key) if key else None
            conflict = [other for other, theirs in live.items() if same_lane(lane, theirs)]
            try:
                reserve(wp, item, name, **(branch(key) if key else {}))
            except Held as refused:
                assert refused.details["execution"] in conflict, (conflict, refused.message)
                continue
            assert not conflict, conflict
            live[name] = lane
        from gitwork.launch.run import runs

        assert sorted(r["execution"] for r in runs(wp) if r["state"] == "reserved") == sorted(live)
