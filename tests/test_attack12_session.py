"""An outsider's pass (session 11, attack12) on what the session added: the arbiter's verdicts by roles,
the coordinator reading the arbiter each pass, ``exec-lost``, ``gw`` installed as a script.

Real clones, a real bare arbiter, the real ``gw`` in child processes; nothing of git is mocked.
"""

from __future__ import annotations

import json
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path

from conftest import git, run_gw
from gitwork.launch import coordinate
from gitwork.workplane import Workplane
from test_attack11_seams import SYNC_REFUSED, _kill_agents, demoted_admin, gw_json, two_clones
from test_launch import poll, runs
from test_launch_seams import agent, alive, pids
from test_sync import STATE, command_ids

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
        monkeypatch.setattr(coordinate, "ArbiterView", lambda wp, timeout=None: early)
        done = coordinate.tick(Workplane(str(a)))
        assert alive(first), f"the agent launched after the pass's fetch was killed: {done}"
        [record] = runs(a)
        assert record["state"] == "running", (record, done)
    finally:
        _kill_agents(a)


class Killed(BaseException):
    """The coordinator's process killed (kill -9, the host's reboot) at that point of its pass."""


def test_an_end_recorded_by_a_pass_killed_before_its_push_is_pushed_by_the_next_pass(
        tmp_path: Path, machine_a: Path, url: str, monkeypatch) -> None:
    """A pass records an agent's end in the local ref, then pushes it (``publish_ends``); the
    ``coordinator-ends-unpushed`` marker, which makes the next pass push again, is written only when that
    push fails. A coordinator killed between the two (kill -9, a reboot, a service manager's stop
    timeout) left no marker, and the next pass, finding no end of its own to record (the execution is no
    longer live here), pushed nothing: the arbiter held the execution live, and every ``gw run`` of the item
    on another clone was refused (75) until something else in that clone pushed."""
    a, b, made = two_clones(tmp_path, machine_a, url)
    code, doc = gw_json(a, "run", made["item"], "--backend", "subprocess", "--as", "alice", "--", "sh", "-c", "exit 3")
    assert code == 0, doc
    poll(lambda: (a / ".git" / "gitwork" / "executions" / doc["execution"] / "code").exists(), "the agent's exit")

    def killed(wp, done, *owing):
        raise Killed(done)

    monkeypatch.setattr(coordinate, "publish_ends", killed)
    try:
        coordinate.tick(Workplane(str(a)))
    except Killed as death:
        assert [x["action"] for x in death.args[0]] == ["exited"], death.args
    else:
        raise AssertionError("the pass did not record the end")
    monkeypatch.undo()
    code, passed = gw_json(a, "coordinate", "--once")
    assert code == 0, passed
    try:
        code, again = gw_json(b, "run", made["item"], "--backend", "subprocess", "--as", "alice", "--", *agent(b))
        assert code == 0 and again["state"] == "running", (again, passed)
    finally:
        _kill_agents(b)


def _at(minutes: int) -> dict[str, str]:
    """A clock pinned ``minutes`` after a start three hours ago (the arbiter takes back-dated commits)."""
    start = datetime.now(timezone.utc).replace(microsecond=0) - timedelta(hours=3)
    return {"GW_NOW": (start + timedelta(minutes=minutes)).strftime("%Y-%m-%dT%H:%M:%SZ")}


def test_an_execution_is_not_declared_lost_on_a_stale_view_of_its_lease(tmp_path: Path, machine_a: Path,
                                                                        url: str) -> None:
    """``gw stop ID --lost`` (op ``exec-lost``) is allowed only once the execution's lease has ended, a fact
    the arbiter decides (its host's coordinator renews the lease there). The op was decided on the declaring
    clone's own ref: a clone that had not heard of the renewals saw the lease expired and answered 0,
    "lost", to a person who then acts on it (tells someone the item is free, stops watching the host),
    while the arbiter holds the lease live and the agent at work; the declaration was refused only at that
    clone's next sync. Deciding it on the arbiter answers at once with what holds: refused, revoke first."""
    a, b, made = two_clones(tmp_path, machine_a, url)
    try:
        done = run_gw(a, "run", "--json", made["item"], "--backend", "subprocess", "--as", "alice", "--",
                      *agent(a), env=_at(0))
        assert done.returncode == 0, done.stdout + done.stderr
        doc = json.loads(done.stdout)
        assert run_gw(b, "pull").returncode == 0  # b knows the lease: 15 minutes from minute 0
        renewed = run_gw(a, "renew", made["item"], "--fence", str(doc["fence"]), "--as", "alice", env=_at(10))
        assert renewed.returncode == 0, renewed.stderr  # on the arbiter: live until minute 25
        declared = run_gw(b, "stop", "--json", doc["execution"], "--lost", "--reason", "its host is gone",
                          "--as", "carol", env=_at(20))
        answer = json.loads(declared.stdout) if declared.stdout.strip() else {"stderr": declared.stderr}
        assert declared.returncode == 6 and "revoke" in answer.get("message", ""), answer
    finally:
        _kill_agents(a)


def test_a_host_back_with_its_agent_running_after_it_was_declared_lost_stops_it(tmp_path: Path, machine_a: Path,
                                                                              url: str) -> None:
    """exec-lost's promise (docs/launch.md): a host only cut off may still run its agent, but once it hears of
    the end its coordinator stops it. Here the host comes back with its agent alive, after a revoke, the
    declaration and a new run of the item on another clone: its first pass kills it (the arbiter's lease,
    another holder's under a later fence, says so; the host's own ref still shows its lease live), so two
    agents work on the item only while the host is cut off, never after."""
    a, b, made = two_clones(tmp_path, machine_a, url)
    try:
        code, doc = gw_json(a, "run", made["item"], "--backend", "subprocess", "--as", "alice", "--", *agent(a))
        assert code == 0 and doc["state"] == "running", doc
        first = poll(lambda: pids(a / "agents.log"), "the agent")[0]
        assert run_gw(b, "pull").returncode == 0
        order = {"op": "revoke", "item": made["item"], "reason": "its host is gone", "as": "carol"}
        assert run_gw(b, "apply", "-", input=json.dumps(order)).returncode == 0
        code, lost = gw_json(b, "stop", doc["execution"], "--lost", "--reason", "its host is gone", "--as", "carol")
        assert code == 0 and lost["state"] == "lost", lost
        code, again = gw_json(b, "run", made["item"], "--backend", "subprocess", "--as", "carol", "--", *agent(b))
        assert code == 0 and again["state"] == "running", again
        second = poll(lambda: pids(b / "agents.log"), "the second agent")[0]
        code, passed = gw_json(a, "coordinate", "--once")  # the host is back
        assert code == 0, passed
        assert not alive(first), f"the host's agent runs on beside the new one: {passed}"
        assert alive(second)
    finally:
        _kill_agents(a)
        _kill_agents(b)


# --- the arbiter's verdict by roles, kept by command id ---------------------------------------------------


def test_a_verdict_refuses_only_the_command_it_was_given_not_a_later_one_under_its_id(machine_a: Path,
                                                                                   remote: Path) -> None:
    """The arbiter's verdict on a replayed command (its roles refuse it) is kept by command id in
    ``arbiter-refused.jsonl`` and refused by every later rebuild. Once refused, the command is gone from the
    clone's state, so its id is free again there (and was never recorded on the arbiter): a client choosing
    its ids (``gw apply``, REST) may use it for another command. That command, bob's new item, which the
    arbiter accepts, was refused at the next sync as "the arbiter's roles refuse it", without being asked:
    the verdict is on a command document, and now applies only to that document."""
    a = machine_a
    ids = demoted_admin(a, remote)
    code, report = gw_json(a, "sync")
    assert code == SYNC_REFUSED and [e["command_id"] for e in report["refused"]] == [ids["decide"]], report
    later = {"op": "new", "title": "Bob's other work", "id": ids["decide"], "as": "bob"}
    done = run_gw(a, "apply", "--json", "-", input=json.dumps(later))
    assert done.returncode == 0, done.stdout + done.stderr
    code, report = gw_json(a, "sync")
    assert code == 0, report
    assert ids["decide"] in command_ids(remote), (done.stdout, report)


def test_a_command_sent_again_after_its_verdict_is_reported_refused_again(machine_a: Path, remote: Path) -> None:
    """The same document under the same id, sent again after the arbiter's verdict on it (a client retrying
    what it was told was refused): ``gw apply`` acknowledges it (its id is free again in the clone), and the
    next sync refuses it by the same verdict. Refusals were reported once per command id, so this second
    refusal was not reported: sync said 0 and the acknowledged command was gone without a word. A refusal
    is now reported once per refused commit."""
    from gitwork.engine import parse_command_from_message

    a = machine_a
    ids = demoted_admin(a, remote)
    message = git(a, "log", "-1", "--format=%B", f"{STATE}~1")
    sent = parse_command_from_message(message)
    assert sent is not None and sent["id"] == ids["decide"], message
    code, report = gw_json(a, "sync")
    assert code == SYNC_REFUSED and [e["command_id"] for e in report["refused"]] == [ids["decide"]], report
    done = run_gw(a, "apply", "--json", "-", input=json.dumps(sent))
    assert done.returncode == 0, done.stdout + done.stderr
    code, report = gw_json(a, "sync")
    assert code == SYNC_REFUSED and [e["command_id"] for e in report["refused"]] == [ids["decide"]], report
    assert ids["decide"] not in command_ids(remote)


def test_a_gw_run_that_carries_a_refused_offline_command_says_so(machine_a: Path, remote: Path) -> None:
    """``gw run``'s launch (``exec-reserve``, decided by the arbiter) carries the clone's local commands, and
    its catch-up (``_catch_up``, a pull) replays them; a command refused there (here by the arbiter's roles)
    is recorded in ``refused.jsonl`` as reported, so the next ``gw sync`` exits 0 about it. A claim lists
    such refusals in its answer (``refused``); ``gw run`` dropped the list: the acknowledged command was
    refused without any command saying so."""
    a = machine_a
    ids = demoted_admin(a, remote)
    code, doc = gw_json(a, "run", ids["y"], "--backend", "subprocess", "--as", "bob", "--", "sh", "-c", "exit 0")
    assert code == 0, doc
    assert [e["command_id"] for e in doc.get("refused", [])] == [ids["decide"]], doc


def test_a_coordinator_renewal_that_carries_a_refused_offline_command_says_so(machine_a: Path, remote: Path) -> None:
    """The coordinator's renewal of an agent's lease (decided by the arbiter) carries the clone's local
    commands; one the arbiter refuses there (its roles) was recorded as reported, so the next ``gw sync``
    exits 0 about it, and the pass's actions did not name it: nobody was told. Now a ``sync-refused`` action,
    as for the pass's own push of ends."""
    a = machine_a
    for where in (a, remote):
        git(where, "config", "gitwork.clock-margin", "1s")
    code, made = gw_json(a, "new", "Z")
    assert code == 0, made
    try:
        code, doc = gw_json(a, "run", made["item"], "--backend", "subprocess", "--as", "carol", "--ttl", "10s", "--",
                            *agent(a))
        launched = time.monotonic()
        assert code == 0 and doc["state"] == "running", doc
        ids = demoted_admin(a, remote)  # leaves alice's decide (refused by the arbiter's roles) local
        time.sleep(max(0.0, 4.5 - (time.monotonic() - launched)))  # (wall) near half the 10 s lease

        def renewing() -> dict | None:
            code, passed = gw_json(a, "coordinate", "--once")
            assert code == 0, passed
            return passed if any(x["action"] == "renewed" for x in passed["actions"]) else None

        passed = poll(renewing, "a pass that renews the lease")
        said = [x for x in passed["actions"] if x["action"] == "sync-refused"]
        assert [ids["decide"] in x["message"] for x in said] == [True], passed
    finally:
        _kill_agents(a)
