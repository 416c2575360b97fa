"""An attacker's pass (session 11) on the places where features meet:

- offline replay x the arbiter's own roles (an admin removed on the arbiter, a clone still listing her),
  through a file remote and a real ``git daemon``: one refused command wedged the clone's every sync and
  lease command;
- the board's steering (revoke, exec-stop: one command document on the arbiter) x a live agent on another
  clone: the coordinator never heard of it, killed a tmux agent that ignores SIGHUP only in its records,
  and its end never reached the arbiter, so the item could not be run elsewhere;
- path leases x merge commits at the code remote: a merge's own changes were never judged.

Each scenario runs real clones, a real bare arbiter under ``gw hooks install --server`` and the real ``gw``
in child processes; nothing is mocked.
"""

from __future__ import annotations

import contextlib
import json
from pathlib import Path

import pytest

from conftest import git, make_repo, run_gw, second_clone, tip
from daemon import GitDaemon
from gitwork.sessions import steps
from gitwork.workplane import Workplane
from test_launch import item_of, launched, needs_tmux, poll, runs  # noqa: F401  (launched: a fixture)
from test_launch_refused import kill_agents
from test_launch_seams import agent, alive, pids
from test_launcher import agents
from test_path_hook import World, commit, push, template, under, world  # noqa: F401  (fixtures)
from test_sessions import person_identity  # noqa: F401  (autouse fixture of the path-hook world)
from test_sessions_launch import Project, project  # noqa: F401  (project: a fixture)
from test_sync import command_ids, gw_ok

SYNC_REFUSED, REMOTE_REFUSED = 15, 14


def gw_json(repo: Path, *args: str) -> tuple[int, dict]:
    done = run_gw(repo, args[0], "--json", *args[1:])  # before any "--"
    return done.returncode, (json.loads(done.stdout) if done.stdout.strip() else {"stderr": done.stderr})


def two_clones(tmp_path: Path, machine_a: Path, url: str) -> tuple[Path, Path, dict]:
    """Machine ``a`` with a new item on the arbiter (``made``, its answer), and a second clone ``b`` of it."""
    a, b = machine_a, tmp_path / "b"
    code, made = gw_json(a, "new", "A's work")
    assert code == 0, made
    assert run_gw(a, "sync").returncode == 0
    second_clone(url, b)
    return a, b, made


# --- offline replay x the arbiter's roles ----------------------------------------------------------------


def demoted_admin(a: Path, remote: Path) -> dict[str, str]:
    """Machine ``a`` and its arbiter ``remote`` (gitwork's server hooks) both listed alice among the admins; the
    arbiter's admin removed her (``gitwork.admins`` on the arbiter now says ``lead`` only), ``a`` still has the
    old setting. bob holds ``x`` on the arbiter and asked for a decision (to nobody: for the admins). Offline
    on ``a``: alice decides it (her clone still thinks her an admin), bob records a new item.
    Returns the ids: the item, the decide's and the new's command ids, and an unheld item ``y``."""
    assert run_gw(remote.parent, "hooks", "install", "--server", str(remote)).returncode == 0
    git(remote, "config", "gitwork.admins", "lead")
    git(a, "config", "gitwork.admins", "lead,alice")
    x = gw_ok(a, "new", "X", "--as", "lead")["item"]
    y = gw_ok(a, "new", "Y", "--as", "lead")["item"]
    gw_ok(a, "claim", x, "--as", "bob")  # carries both news to the arbiter
    gw_ok(a, "ask", x, "pg or mysql?", "--as", "bob")
    gw_ok(a, "sync")
    assert tip(a) == tip(remote)
    decided = gw_ok(a, "decide", x, "1", "--choose", "pg", "--why", "fast", "--as", "alice")
    found = gw_ok(a, "new", "Found offline", "--as", "bob")
    return {"x": x, "y": y, "decide": decided["command_id"], "new": found["command_id"]}


@pytest.mark.parametrize("transport", ["file", "git-daemon"])
def test_an_offline_command_the_arbiters_roles_refuse_is_reported_and_the_rest_lands(machine_a: Path, remote: Path,
                                                                                    transport: str) -> None:
    """Replay decides with the clone's settings; the arbiter's hook re-applies with its own. A command the
    clone's roles allow and the arbiter's do not (alice was removed from the admins there) passed the replay
    and was refused by the hook, which turns the whole push down: ``gw sync`` failed with exit 14 naming it,
    every later sync the same, forever, and bob's offline work behind it never landed. Now the arbiter's
    verdict is the command's refusal, as a replay's would be: exit 15 naming it, kept in refused.jsonl, the
    rest landed, and the next sync is clean."""
    a = machine_a
    ids = demoted_admin(a, remote)
    with contextlib.ExitStack() as stack:
        if transport == "git-daemon":  # the hook's words come back through git's side band
            daemon = stack.enter_context(GitDaemon(remote.parent))
            git(a, "remote", "set-url", "origin", daemon.url(remote.stem))
        code, report = gw_json(a, "sync")
        again = gw_json(a, "sync")[0]
    assert code == SYNC_REFUSED, report
    assert [(e["command_id"], e["op"]) for e in report["refused"]] == [(ids["decide"], "decide")]
    assert "admin" in report["refused"][0]["message"]
    on_remote = command_ids(remote)
    assert ids["new"] in on_remote and ids["decide"] not in on_remote
    assert tip(a) == tip(remote)
    kept = [json.loads(line) for line in (a / ".git" / "gitwork" / "refused.jsonl").read_text().splitlines()]
    assert [entry["command_id"] for entry in kept] == [ids["decide"]]
    assert again == 0


def test_a_claim_from_that_clone_is_not_stopped_by_anothers_refused_offline_command(machine_a: Path,
                                                                                   remote: Path) -> None:
    """The same wedge through the arbiter's CAS: every lease command of the clone carries its unsynced
    commands, so carol's claim of an unrelated item was refused (exit 14, "decide by alice refused") and
    so was every claim, renew and done of every agent on that machine. Now carol's claim lands with bob's
    offline work, and says which command of the clone the arbiter refused."""
    a = machine_a
    ids = demoted_admin(a, remote)
    code, claimed = gw_json(a, "claim", ids["y"], "--as", "carol")
    assert code == 0, claimed
    assert claimed["holder"] == "carol"
    assert [e["command_id"] for e in claimed.get("refused", [])] == [ids["decide"]]
    on_remote = command_ids(remote)
    assert ids["new"] in on_remote and ids["decide"] not in on_remote and claimed["command_id"] in on_remote
    assert gw_json(a, "sync")[0] == 0


# --- the board's steering x a live launcher on another clone -------------------------------------------


_kill_agents = kill_agents


@pytest.mark.parametrize("steer", ["revoke", "exec-stop"])
def test_a_steer_made_on_the_arbiter_stops_the_agent_at_the_next_coordinator_pass(
        tmp_path: Path, machine_a: Path, url: str, steer: str) -> None:
    """docs/serve.md: the board's Revoke and Stop are one command document each, and "the host's gw coordinate
    kills it on its next pass". The board serves the arbiter's state (or another clone's), so the document
    lands on the arbiter; the coordinator of the clone that runs the agent read only its own local ref,
    which nothing brought up to date (a coordinator pass pushes and fetches nothing while no renewal is
    due): the revoked or stopped agent ran on, its lease renewed... until half its ttl was gone, and an
    ``exec-stop`` is no end of the lease, so the renewal succeeded and the stop waited for whatever next
    made the clone fetch. Now each pass also reads the arbiter's state, fetched."""
    a, b, made = two_clones(tmp_path, machine_a, url)
    try:
        code, doc = gw_json(a, "run", made["item"], "--backend", "subprocess", "--as", "alice", "--",
                            *agent(a))
        assert code == 0 and doc["state"] == "running", doc
        first = poll(lambda: pids(a / "agents.log"), "the agent")[0]
        # (the board sees the execution launching: its `running` record is local until a sync pushes it)
        assert run_gw(b, "sync").returncode == 0
        if steer == "revoke":
            order = {"op": "revoke", "item": made["item"], "reason": "wrong approach", "as": "carol"}
        else:
            order = {"op": "exec-stop", "execution": doc["execution"], "reason": "wrong approach", "as": "carol"}
        steered = run_gw(b, "apply", "-", input=json.dumps(order))
        assert steered.returncode == 0, steered.stdout + steered.stderr
        assert run_gw(b, "sync").returncode == 0  # (a no-op for the revoke: it was decided by the arbiter)
        code, passed = gw_json(a, "coordinate", "--once")
        assert code == 0, passed
        assert not alive(first), f"the agent runs on after the {steer} on the arbiter: {passed}"
        [record] = runs(a)
        why = "revoked" if steer == "revoke" else "stop asked by carol: wrong approach"
        assert record["state"] == "stopped" and why in record["reason"], record
    finally:
        _kill_agents(a)


def test_after_a_revoke_the_item_can_be_run_on_another_clone_once_the_agent_is_stopped(
        tmp_path: Path, machine_a: Path, url: str) -> None:
    """The point of the board's Revoke is to give the item to someone else. The coordinator of the clone
    that ran the agent recorded its end (``stopped``) in its local ref only, so the arbiter still had the
    execution ``launching``: every ``gw run`` of the item on any other clone was refused (75, "being launched
    by another gw run"), for as long as nothing in the first clone pushed. A pass that records an end now
    pushes it (``gw sync``), so the next launch elsewhere starts, and only after the first agent was killed."""
    a, b, made = two_clones(tmp_path, machine_a, url)
    try:
        code, doc = gw_json(a, "run", made["item"], "--backend", "subprocess", "--as", "alice", "--", *agent(a))
        assert code == 0 and doc["state"] == "running", doc
        first = poll(lambda: pids(a / "agents.log"), "the agent")[0]
        order = {"op": "revoke", "item": made["item"], "reason": "wrong approach", "as": "carol"}
        steered = run_gw(b, "apply", "-", input=json.dumps(order))
        assert steered.returncode == 0, steered.stdout + steered.stderr
        code, passed = gw_json(a, "coordinate", "--once")
        assert code == 0 and not alive(first), passed
        code, again = gw_json(b, "run", made["item"], "--backend", "subprocess", "--as", "carol", "--", *agent(b))
        assert code == 0 and again["state"] == "running", again
    finally:
        _kill_agents(a)
        _kill_agents(b)


def test_an_execution_whose_host_is_gone_is_declared_lost_once_its_lease_ended_and_the_item_runs_elsewhere(
        tmp_path: Path, machine_a: Path, url: str) -> None:
    """An execution the arbiter holds live blocks every launch of its item on every clone until its host
    records its end: a host that never comes back blocked the item for good, after a revoke too. Not by
    itself (a host only cut off may still run its agent): an admin declares it lost (``gw stop ID --lost``,
    op ``exec-lost``), which is refused while its lease is live (revoke it first: then nothing the agent does
    lands under its fence), and then the item runs elsewhere, one agent at a time."""
    a, b, made = two_clones(tmp_path, machine_a, url)
    try:
        code, doc = gw_json(a, "run", made["item"], "--backend", "subprocess", "--as", "alice", "--", *agent(a))
        assert code == 0 and doc["state"] == "running", doc
        poll(lambda: pids(a / "agents.log"), "the agent")
    finally:
        _kill_agents(a)  # the host is gone, its agent with it; its coordinator never runs again
    execution = doc["execution"]
    assert run_gw(b, "pull").returncode == 0
    before = tip(b)
    # Under a live lease: refused, nothing written (an agent cut off from the arbiter may still be at work).
    code, refused = gw_json(b, "stop", execution, "--lost", "--reason", "its host is gone", "--as", "carol")
    assert code == 6 and "revoke" in refused["message"], refused
    assert tip(b) == before
    order = {"op": "revoke", "item": made["item"], "reason": "its host is gone", "as": "carol"}
    steered = run_gw(b, "apply", "-", input=json.dumps(order))
    assert steered.returncode == 0, steered.stdout + steered.stderr
    code, held = gw_json(b, "run", made["item"], "--backend", "subprocess", "--as", "carol", "--", *agent(b))
    assert code == 75 and "--lost" in held["message"], held  # the revoke alone does not end the execution
    # An agent may not declare someone else's execution lost (the rule of revoke).
    git(b, "config", "gitwork.agents", "bot")
    code, forbidden = gw_json(b, "stop", execution, "--lost", "--reason", "mine now", "--as", "bot")
    assert code == 77, forbidden
    code, lost = gw_json(b, "stop", execution, "--lost", "--reason", "its host is gone", "--as", "carol")
    assert code == 0 and lost["state"] == "lost", lost
    code, twice = gw_json(b, "stop", execution, "--lost", "--reason", "again", "--as", "carol")
    assert code == 0 and twice["state"] == "lost", twice  # already ended: its record, nothing written
    try:
        code, again = gw_json(b, "run", made["item"], "--backend", "subprocess", "--as", "carol", "--", *agent(b))
        assert code == 0 and again["state"] == "running" and again["execution"] != execution, again
    finally:
        _kill_agents(b)
    # The host back: its own late record of the agent (``running``) is refused on replay, said (15), and its
    # view of the execution is the arbiter's: lost.
    pulled = run_gw(a, "pull")
    assert pulled.returncode == SYNC_REFUSED and "(exec-state)" in pulled.stderr, pulled.stderr
    code, shown = gw_json(a, "runs", "--item", made["item"])
    assert code == 0 and [r["state"] for r in shown if r["execution"] == execution] == ["lost"], shown


def test_a_coordinator_pass_with_the_arbiter_unreachable_goes_on_with_what_the_clone_knows(
        tmp_path: Path, machine_a: Path) -> None:
    """The fetch a pass starts with must not make an unreachable arbiter the end of the pass (the executions
    of this host still need looking after): one ``fetch-error`` action, exit 0."""
    git(machine_a, "remote", "set-url", "origin", f"file://{tmp_path / 'gone.git'}")
    code, passed = gw_json(machine_a, "coordinate", "--once")
    assert code == 0, passed
    assert [a["action"] for a in passed["actions"]] == ["fetch-error"], passed


@needs_tmux
@pytest.mark.parametrize("steer", ["exec-stop", "revoke"])
def test_the_coordinators_stop_of_a_tmux_agent_that_ignores_hangups_ends_it(
        launched: Path, steer: str) -> None:  # noqa: F811
    """The coordinator's kill (a stop asked from the board, a revoked lease) of a tmux execution was tmux's
    ``kill-session`` alone: an agent that ignores SIGHUP (``nohup``, a trap, a runtime that handles it) ran
    on, recorded ``stopped``, and the next ``gw run`` of the item started a second agent beside it.
    ``gw stop`` already killed what survived, by process group; the coordinator now does too."""
    item, marker = item_of(launched), "1741"
    code, doc = gw_json(launched, "run", item, "--as", "alice", "--", "sh", "-c", f"trap '' HUP; exec sleep {marker}")
    assert code == 0 and doc["state"] == "running", doc
    poll(lambda: len(agents(marker)) == 1, "the agent")
    if steer == "revoke":
        order = {"op": "revoke", "item": item, "reason": "wrong approach", "as": "lead"}
    else:
        order = {"op": "exec-stop", "execution": doc["execution"], "reason": "wrong approach", "as": "lead"}
    steered = run_gw(launched, "apply", "-", input=json.dumps(order))
    assert steered.returncode == 0, steered.stdout + steered.stderr
    code, passed = gw_json(launched, "coordinate", "--once")
    assert code == 0 and [a["action"] for a in passed["actions"]] == ["stopped"], passed
    poll(lambda: agents(marker) == [], "the end of the agent recorded stopped")


def test_a_revoke_on_the_arbiter_is_not_undone_by_the_coordinator_driving_the_session(
        project: Project, tmp_path: Path) -> None:  # noqa: F811
    """A multi-step session's lease revoked from the board (on the arbiter): the coordinator of the clone that
    drives the session still saw the lease live in its own ref and launched the step's operators, and the
    launch (``exec-reserve``, decided by the arbiter, which claims a lease when its caller holds none) claimed
    the item again for the revoked holder: the revoke undone, its operators at work. Now a session whose lease
    ended on the arbiter is left alone (action ``left``)."""
    p = project
    bare = make_repo(tmp_path / "remote.git", bare=True)
    assert run_gw(tmp_path, "hooks", "install", "--server", str(bare)).returncode == 0
    git(p.root, "remote", "add", "origin", f"file://{bare}")
    assert run_gw(p.root, "remote", "set", "origin").returncode == 0
    p.wp.close()
    p.wp = Workplane(str(p.root), agent="alice")  # (its settings read again: now with the arbiter)
    session = steps.create(p.wp, p.item, "hang")["session"]
    assert run_gw(p.root, "sync").returncode == 0
    b = second_clone(f"file://{bare}", tmp_path / "b")
    order = {"op": "revoke", "item": p.item, "reason": "wrong approach", "as": "carol"}
    steered = run_gw(b, "apply", "-", input=json.dumps(order))
    assert steered.returncode == 0, steered.stdout + steered.stderr
    code, passed = gw_json(p.root, "coordinate", "--once")
    assert code == 0, passed
    assert list(p.marks.glob("*.started")) == [], f"the session's operators started after the revoke: {passed}"
    assert [(a.get("session"), a["action"]) for a in passed["actions"]] == [(session, "left")], passed
    assert gw_json(b, "sync")[0] == 0
    code, shown = gw_json(b, "show", p.item)
    assert shown["lease"]["state"] == "revoked", shown["lease"]


# --- path leases x merges at the code remote -----------------------------------------------------------


def merged(cwd: Path, side: str, message: str, extra: dict[str, str] | None = None) -> str:
    """A merge commit of ``main`` and ``side`` on branch ``merge``; with ``extra``, files the merge itself
    changes (an "evil merge": its tree is neither parent's nor what git's merge of them gives)."""
    git(cwd, "checkout", "-q", "-B", "merge", "main")
    git(cwd, "merge", "-q", "--no-ff", "--no-commit", side)
    for name, text in (extra or {}).items():
        (cwd / name).parent.mkdir(parents=True, exist_ok=True)
        (cwd / name).write_text(text)
        git(cwd, "add", name)
    git(cwd, "commit", "-q", "-m", message)
    return git(cwd, "rev-parse", "HEAD")


def test_a_merge_commit_changing_a_leased_path_itself_is_judged(world: World) -> None:  # noqa: F811
    """docs/leases.md: "a merge's own diff is not listed, its parents are". A merge commit whose parents are
    harmless (main, and bob's commit under his own ``lib/**`` lease) but whose own tree also changes
    ``src/api/x.py``, leased to alice, was let through: ``git log --name-only`` lists no path for a merge, so
    whatever a merge changes by itself was never judged, and any pusher reached any leased path that way.
    Now a merge is judged on what it changes beyond git's own merge of its parents (``git log
    --diff-merges=remerge``): nothing for a clean merge, the evil part of an evil one."""
    commit(world.work, {"lib/q.py": "q\n"}, under(world.lib, world.lib_fence), branch="side")
    clean = merged(world.work, "side", under(world.lib, world.lib_fence))
    assert push(world.work, "merge").returncode == 0 and world.branch("merge") == clean  # an honest merge passes
    evil = merged(world.work, "side", under(world.lib, world.lib_fence), extra={"src/api/x.py": "mine\n"})
    done = push(world.work, "+merge")
    assert done.returncode != 0, f"{evil[:12]} changed alice's src/api/x.py and was let through"
    assert "src/api/x.py" in done.stderr and "leased to alice" in done.stderr
    assert world.branch("merge") == clean


def test_an_end_the_coordinator_could_not_push_is_pushed_by_its_next_pass(tmp_path: Path, machine_a: Path,
                                                                         url: str) -> None:
    """The push of a recorded end can fail (the arbiter unreachable for a moment); the next pass, with no end
    of its own to record, pushes it then: the item can be run on another clone without anyone's gw sync."""
    a, b, made = two_clones(tmp_path, machine_a, url)
    code, doc = gw_json(a, "run", made["item"], "--backend", "subprocess", "--as", "alice", "--", "sh", "-c", "exit 3")
    assert code == 0, doc
    poll(lambda: (a / ".git" / "gitwork" / "executions" / doc["execution"] / "code").exists(), "the agent's exit")
    git(a, "remote", "set-url", "origin", f"file://{tmp_path / 'gone.git'}")
    code, passed = gw_json(a, "coordinate", "--once")
    assert code == 0 and [x["action"] for x in passed["actions"]] == ["fetch-error", "exited", "sync-error"], passed
    git(a, "remote", "set-url", "origin", url)
    code, passed = gw_json(a, "coordinate", "--once")
    assert code == 0 and passed["actions"] == [], passed
    try:
        code, again = gw_json(b, "run", made["item"], "--backend", "subprocess", "--as", "alice", "--", *agent(b))
        assert code == 0 and again["state"] == "running", again
    finally:
        _kill_agents(b)
