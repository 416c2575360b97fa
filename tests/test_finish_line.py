"""The finish line: `gw done` and `gw publish` in either order never lose work nor re-offer delivered work.

- `gw done` with the holder's one committed session publishes it first (the publish marks the item
  done); with a session that cannot be published (no commit yet, a conflict) it refuses, naming it,
  and changes nothing.
- A published item is `done`: `ready` never offers it again and a claim is refused (exit 6).
- A session whose lease ended is dead: it does not stand in the way of a bare `gw publish`, and
  `gw session drop` ends it on the record, removes its worktree, deletes its branch and says what it
  threw away.

The CLI cases run its entry point (what ``python -m gitwork`` runs) in this process (``gw_here``).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from conftest import Clock, git, gw_here, tip
from gitwork import hooks_install, sessions
from gitwork.errors import Illegal, Stale
from gitwork.publish import finish, publish
from gitwork.workplane import Workplane
from test_publish import move_main, on_other_branch, session_with_commit
from test_sessions import T0, claimed, init_project, person_identity  # noqa: F401  (autouse fixture)

NOW = "2030-01-01T12:00:00Z"


def env(agent: str = "alice", now: str = NOW) -> dict[str, str]:
    return {"GW_AGENT": agent, "GW_NOW": now}


def ready_ids(wp: Workplane) -> list[str]:
    return [row[0] for row in wp.ready()]


def types(wp: Workplane, item: str) -> list[str]:
    return [e["type"] for e in wp.history(item)]


# --- gw done publishes ------------------------------------------------------------------------------


def test_cli_done_publishes_the_open_session_then_marks_done(repo: Path) -> None:
    """Was: done released the lease and the session commit was stranded (publish then exit 7)."""
    init_project(repo)
    hooks_install.install_local(str(repo))
    wp, item = claimed(repo)
    on_other_branch(repo)
    s = session_with_commit(repo, wp, item, {"a.txt": "alpha v2\n"}, from_ref="main")

    done = gw_here(repo, "done", item, "--json", env=env())

    assert done.returncode == 0, done.stderr
    doc = json.loads(done.stdout)
    assert doc["ok"] and doc["status"] == "done" and doc["published"]["session"] == s["session"]
    assert git(repo, "rev-parse", "main") == s["commit"]
    assert types(wp, item)[-4:] == ["session-commit", "publish", "done", "released"]
    assert wp.item(item).status == "done" and item not in ready_ids(wp)
    assert git(repo, "for-each-ref", "refs/heads/session/") == ""
    assert sessions.Session.load(str(repo), s["session"])["state"] == "published"


def test_done_without_a_session_is_the_plain_done(repo: Path) -> None:
    init_project(repo)
    wp, item = claimed(repo)
    result = finish(wp, item)
    assert result["status"] == "done" and result["published"] is None
    assert types(wp, item)[-2:] == ["done", "released"]


def test_done_refuses_a_session_without_its_commit_naming_it(repo: Path) -> None:
    init_project(repo)
    wp, item = claimed(repo)
    s = sessions.start(wp, item)
    state = tip(repo)
    done = gw_here(repo, "done", item, "--json", env=env())
    assert done.returncode == 6, done.stderr
    error = json.loads(done.stdout)
    assert s["session"] in error["message"] and "no commit yet" in error["message"]
    assert error["details"]["sessions"] == [s["session"]]
    assert tip(repo) == state and wp.lease(item).state == "active"  # type: ignore[union-attr]
    # The library's own done op refuses too: no face can strand the session.
    with pytest.raises(Illegal, match=s["session"]):
        wp.do("done", item=item)
    assert tip(repo) == state


def test_done_refuses_when_the_merge_conflicts_and_changes_nothing(repo: Path) -> None:
    init_project(repo)
    wp, item = claimed(repo)
    on_other_branch(repo)
    s = session_with_commit(repo, wp, item, {"a.txt": "alpha from the session\n"}, from_ref="main")
    main = move_main(repo, "a.txt", "alpha from main\n")
    state = tip(repo)
    done = gw_here(repo, "done", item, "--json", env=env())
    assert done.returncode == 13, done.stderr
    error = json.loads(done.stdout)
    assert s["session"] in error["message"] and error["details"]["conflicts"] == ["a.txt"]
    assert git(repo, "rev-parse", "main") == main and tip(repo) == state
    assert wp.item(item).status == "in_progress" and wp.lease(item).state == "active"  # type: ignore[union-attr]


def test_done_refuses_two_open_sessions_naming_both(repo: Path) -> None:
    init_project(repo)
    wp, item = claimed(repo)
    first = session_with_commit(repo, wp, item, {"a.txt": "one\n"})
    second = sessions.start(wp, item)
    with pytest.raises(Illegal) as caught:
        finish(wp, item)
    assert first["session"] in caught.value.message and second["session"] in caught.value.message


# --- publish marks done -----------------------------------------------------------------------------


def test_publish_before_done_never_reoffers_the_item(repo: Path) -> None:
    """Was: publish released the lease and put the item back to open; bob claimed delivered work."""
    init_project(repo)
    clock = Clock(T0)
    wp, item = claimed(repo, clock=clock)
    on_other_branch(repo)
    s = session_with_commit(repo, wp, item, {"a.txt": "alpha v2\n"}, from_ref="main")
    published = gw_here(repo, "publish", "--json", env=env())  # bare: alice's only live session
    assert published.returncode == 0, published.stderr
    assert json.loads(published.stdout)["status"] == "done"
    assert item not in ready_ids(wp)
    bob = Workplane(str(repo), now=clock, agent="bob")
    state = tip(repo)
    claim = gw_here(repo, "claim", item, "--json", env=env("bob"))
    assert claim.returncode == 6, claim.stdout
    clock.advance(7200)
    assert item not in [row[0] for row in bob.ready()]
    assert gw_here(repo, "claim", "--next", env=env("bob", "2030-01-01T14:00:00Z")).returncode == 3
    assert tip(repo) == state
    # And `gw done` afterwards is harmless: the item is done already.
    again = gw_here(repo, "done", item, "--json", env=env())
    assert again.returncode == 6 and git(repo, "rev-parse", "main") == s["commit"]


def test_publish_keep_open_keeps_the_lease_and_the_item(repo: Path) -> None:
    init_project(repo)
    wp, item = claimed(repo)
    first = session_with_commit(repo, wp, item, {"a.txt": "one\n"})
    result = publish(wp, first["session"], keep_open=True)
    assert not result["released"] and result["status"] == "in_progress"
    assert wp.lease(item).state == "active" and item not in ready_ids(wp)  # type: ignore[union-attr]
    second = session_with_commit(repo, wp, item, {"b.txt": "two\n"}, from_ref="main")
    assert finish(wp, item)["published"]["session"] == second["session"]
    assert wp.item(item).status == "done"


def test_publish_with_unchecked_criteria_refused_before_anything_moves(repo: Path) -> None:
    init_project(repo)
    wp = Workplane(str(repo), now=Clock(T0), agent="alice")
    wp.do("init")
    item = wp.do("new", title="With criteria", criteria=["tests pass"]).result["item"]
    wp.do("claim", item=item)
    s = session_with_commit(repo, wp, item, {"a.txt": "v2\n"})
    main, state = git(repo, "rev-parse", "main"), tip(repo)
    with pytest.raises(Illegal, match="unchecked criteria"):
        publish(wp, s["session"])
    assert git(repo, "rev-parse", "main") == main and tip(repo) == state
    wp.do("check", item=item, criterion=1)
    assert publish(wp, s["session"])["status"] == "done"


def test_publish_refuses_to_strand_a_second_open_session(repo: Path) -> None:
    init_project(repo)
    wp, item = claimed(repo)
    first = session_with_commit(repo, wp, item, {"a.txt": "one\n"})
    second = sessions.start(wp, item)
    main = git(repo, "rev-parse", "main")
    with pytest.raises(Illegal, match=second["session"]):
        publish(wp, first["session"])
    assert git(repo, "rev-parse", "main") == main


# --- dead sessions and drop -------------------------------------------------------------------------


def test_dead_session_does_not_block_a_bare_publish_and_is_dropped_with_a_record(repo: Path) -> None:
    """Was: a session stranded by an ended lease blocked `gw publish` and could not be dropped."""
    init_project(repo)
    hooks_install.install_local(str(repo))
    clock = Clock(T0)
    wp, item = claimed(repo, clock=clock)
    on_other_branch(repo)
    dead = session_with_commit(repo, wp, item, {"a.txt": "first try\n"}, from_ref="main")
    Path(dead["worktree"], "scratch.txt").write_text("leftover\n")
    wp.do("release", item=item)  # the lease ends without publishing: the session is dead
    listed = {r["session"]: r for r in sessions.list_sessions(wp)}
    assert listed[dead["session"]]["live"] is False and listed[dead["session"]]["state"] == "committed"

    wp.do("claim", item=item)
    live = session_with_commit(repo, wp, item, {"b.txt": "second try\n"}, from_ref="main")
    published = gw_here(repo, "publish", "--json", env=env())
    assert published.returncode == 0, published.stderr
    assert json.loads(published.stdout)["session"] == live["session"]

    listed = {r["session"]: r for r in sessions.list_sessions(wp)}
    assert listed[dead["session"]]["state"] == "committed" and listed[live["session"]]["state"] == "published"
    wp.do("reopen", item=item, reason="check the warning")
    wp.do("claim", item=item)
    finished = gw_here(repo, "done", item, env=env())
    assert finished.returncode == 0, finished.stderr
    assert f"warning: session {dead['session']}" in finished.stderr and dead["commit"][:12] in finished.stderr

    dropped = gw_here(repo, "session", "drop", dead["session"], "--reason", "redone", env=env())
    assert dropped.returncode == 0, dropped.stderr
    assert dead["commit"][:12] in dropped.stderr and "a.txt" in dropped.stderr and "scratch.txt" in dropped.stderr
    assert not Path(dead["worktree"]).exists()
    assert git(repo, "rev-parse", "-q", "--verify", f"refs/heads/session/{dead['session']}", check=False) == ""
    event = [e for e in wp.history(item) if e["type"] == "session-drop"][-1]
    assert event["session"] == dead["session"] and event["commit"] == dead["commit"] and event["files"] == ["a.txt"]
    assert event["live"] is False and event["branch"] == "deleted" and event["reason"] == "redone"
    assert sessions.Session.load(str(repo), dead["session"])["state"] == "dropped"
    again = gw_here(repo, "session", "abandon", dead["session"], "--json", env=env())
    assert again.returncode == 0 and json.loads(again.stdout)["command_id"] is None  # already dropped: nothing new


def test_bare_publish_with_only_dead_sessions_names_them(repo: Path) -> None:
    init_project(repo)
    clock = Clock(T0)
    wp, item = claimed(repo, clock=clock)
    s = session_with_commit(repo, wp, item, {"a.txt": "v2\n"})
    clock.advance(3600)  # expired: dead by the holder's view
    with pytest.raises(Stale, match=s["session"]):
        publish(wp, None)


def test_drop_of_a_live_session_keeps_the_lease_and_lets_done_through(repo: Path) -> None:
    init_project(repo)
    wp, item = claimed(repo)
    s = sessions.start(wp, item)
    with pytest.raises(Illegal):
        finish(wp, item)
    result = sessions.drop(wp, s["session"], keep_branch=True)
    assert result["commit"] is None and result["branch"] == "kept"
    assert git(repo, "rev-parse", f"session/{s['session']}") == s["base"]
    assert wp.lease(item).state == "active"  # type: ignore[union-attr]
    assert finish(wp, item)["status"] == "done"


def test_only_the_sessions_holder_may_drop_it_and_published_ones_cannot_be(repo: Path) -> None:
    init_project(repo)
    clock = Clock(T0)
    wp, item = claimed(repo, clock=clock)
    s = session_with_commit(repo, wp, item, {"a.txt": "v2\n"})
    state = tip(repo)
    bob = Workplane(str(repo), now=clock, agent="bob")
    with pytest.raises(Exception, match="started by alice"):
        sessions.drop(bob, s["session"])
    assert tip(repo) == state and Path(s["worktree"]).is_dir()
    publish(wp, s["session"])
    with pytest.raises(Illegal, match="already published"):
        sessions.drop(wp, s["session"])


def test_local_hook_lets_a_dropped_session_branch_go_only_after_the_record(repo: Path) -> None:
    init_project(repo)
    hooks_install.install_local(str(repo))
    wp, item = claimed(repo)
    s = session_with_commit(repo, wp, item, {"a.txt": "v2\n"})
    ref = f"refs/heads/session/{s['session']}"
    git(repo, "worktree", "remove", "--force", s["worktree"])
    refused = run_git(repo, "update-ref", "-d", ref)
    assert refused.returncode != 0 and "gw session drop" in refused.stderr
    result = sessions.drop(wp, s["session"])
    assert result["branch"] == "deleted" and result["commit"] == s["commit"]
    assert git(repo, "rev-parse", "-q", "--verify", ref, check=False) == ""


def run_git(cwd: Path, *args: str) -> Any:
    import subprocess

    return subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True)


def test_only_the_sessions_holder_publishes_it_whatever_fence_it_quotes(repo: Path) -> None:
    """Found by the state machine: the fence in the manifest let another identity publish."""
    init_project(repo)
    clock = Clock(T0)
    wp, item = claimed(repo, clock=clock)
    s = session_with_commit(repo, wp, item, {"a.txt": "v2\n"})
    main, state = git(repo, "rev-parse", "main"), tip(repo)
    with pytest.raises(Stale, match="you are bob"):
        publish(Workplane(str(repo), now=clock, agent="bob"), s["session"])
    with pytest.raises(Stale, match="you are bob"):
        Workplane(str(repo), now=clock, agent="bob").record(  # the op itself refuses too
            "publish", item=item, session=s["session"], source=s["commit"], commit=s["commit"], into="main",
            mode="fast-forward", fence=1)
    assert git(repo, "rev-parse", "main") == main and tip(repo) == state


def test_drop_interrupted_after_its_record_finishes_the_clean_up_without_a_second_record(repo: Path) -> None:
    init_project(repo)
    wp, item = claimed(repo)
    s = session_with_commit(repo, wp, item, {"a.txt": "v2\n"})
    wp.record("session-drop", item=item, session=s["session"])  # the record landed; then the process died
    state = tip(repo)
    result = sessions.drop(wp, s["session"])
    assert result["command_id"] is None and result["commit"] == s["commit"] and result["branch"] == "deleted"
    assert tip(repo) == state and not Path(s["worktree"]).exists()
    assert sessions.Session.load(str(repo), s["session"])["state"] == "dropped"


@pytest.mark.parametrize("end", ["release", "revoke", "expiry", "takeover", "done-by-another"])
def test_a_session_whose_lease_ended_any_way_is_dead_and_droppable(repo: Path, end: str) -> None:
    init_project(repo)
    clock = Clock(T0)
    wp, item = claimed(repo, clock=clock)
    s = session_with_commit(repo, wp, item, {"a.txt": "v2\n"})
    bob = Workplane(str(repo), now=clock, agent="bob")
    if end == "release":
        wp.do("release", item=item)
    elif end == "revoke":
        bob.do("revoke", item=item, reason="admin")
    else:
        clock.advance(3600)
        if end == "takeover":
            bob.do("takeover", item=item)
        elif end == "done-by-another":
            finish(bob, item)  # nobody holds a live lease: anyone may close it
    assert [r["live"] for r in sessions.list_sessions(wp)] == [False]
    with pytest.raises(Stale, match=s["session"]):
        publish(wp, None)
    main = git(repo, "rev-parse", "main")
    result = sessions.drop(wp, s["session"])
    assert result["commit"] == s["commit"] and result["files"] == ["a.txt"]
    assert [e for e in wp.history(item) if e["type"] == "session-drop"][-1]["live"] is False
    assert git(repo, "rev-parse", "main") == main
