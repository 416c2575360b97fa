"""The seam between multi-step sessions (issue 13) and the launcher (issue 12): operators of a session's
parallel branches run at once under the session's one lease, each branch at most once; the coordinator
drives sessions, settles branches whose operator ended (an operator killed mid-step blocks the session
with the reason) and stops a session's operators when the session ends or its lease is lost.

Real repositories, real operator processes (the subprocess backend, the wrapper, ``gw step submit``
from inside the operator), real kill -9; the coordinator pass is run in-process (``coordinate.once``).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any, Iterator

import pytest

from conftest import end_executions, git, run_gw, tip
from gitwork.launch.coordinate import once
from gitwork.launch.process import alive
from gitwork.launch.run import run as launch_run
from gitwork.launch.run import runs
from gitwork.records.executions import LIVE
from gitwork.sessions import steps
from gitwork.workplane import Workplane
from test_launch import poll

BOT = r'''
import json, os, subprocess, sys, time
request = json.load(open(os.environ["GW_SESSION_REQUEST"]))
stage, index = request["stage"], request["parallel"]["index"]
marks = MARKS
seen = {"key": os.environ["GW_SESSION_KEY"], "fence": os.environ["GW_FENCE"], "execution": os.environ["GW_EXECUTION"],
        "item": os.environ["GW_ITEM"], "argv": sys.argv[1:]}
with open(os.path.join(marks, f"{stage}-{index}.tmp"), "w") as out:
    json.dump(seen, out)
os.replace(os.path.join(marks, f"{stage}-{index}.tmp"), os.path.join(marks, f"{stage}-{index}.started"))
if stage in ("build", "hang"):  # wait for the test to say go (hang: it never does)
    deadline = time.monotonic() + 120
    while not os.path.exists(os.path.join(marks, "go")):
        if time.monotonic() > deadline:
            sys.exit(3)
        time.sleep(0.02)
with open(os.path.join(os.environ["GW_SESSION_RESPONSE"], "response.json"), "w") as out:
    json.dump({"status": "done", "fields": {}}, out)
sys.exit(subprocess.call([sys.executable, "-m", "gitwork", "step", "submit", os.environ["GW_SESSION"],
                          os.environ["GW_SESSION_KEY"]]))
'''


@pytest.fixture(autouse=True)
def person_identity(clean_env: None, monkeypatch: pytest.MonkeyPatch) -> None:
    for role in ("AUTHOR", "COMMITTER"):
        monkeypatch.setenv(f"GIT_{role}_NAME", "Person")
        monkeypatch.setenv(f"GIT_{role}_EMAIL", "person@example.com")


class Project:
    def __init__(self, root: Path, wp: Workplane, item: str, marks: Path) -> None:
        self.root, self.wp, self.item, self.marks = root, wp, item, marks

    def started(self) -> dict[str, dict[str, Any]]:
        return {p.stem: json.loads(p.read_text()) for p in self.marks.glob("*.started")}

    def live(self, session: str) -> list[dict[str, Any]]:
        return [r for r in runs(self.wp) if r.get("session") == session and r["state"] in LIVE]


@pytest.fixture
def project(tmp_path: Path) -> Iterator[Project]:
    """A repository whose chains run the scripted operator ``bot``; afterwards every process a test
    started is ended, pass or fail."""
    marks = tmp_path / "marks"
    marks.mkdir()
    (tmp_path / "bot.py").write_text(BOT.replace("MARKS", repr(str(marks))))
    root = tmp_path / "proj"
    root.mkdir()
    git(root, "init", "-q", "-b", "main")
    (root / ".workplane").write_text(
        f"sessions:\n  operators:\n    bot: {{command: [{sys.executable}, {tmp_path / 'bot.py'}, --flag]}}\n"
        "  steps:\n    plan: {operator: bot}\n    build: {operator: bot, parallel: 2}\n"
        "    hang: {operator: bot, parallel: 2}\n"
        "  chains:\n    feature: [plan, build]\n    hang: [hang]\n  backend: subprocess\n")
    (root / "a.txt").write_text("alpha\n")
    git(root, "add", ".")
    git(root, "commit", "-q", "-m", "initial")
    wp = Workplane(str(root), agent="alice")
    wp.do("init")
    item = str(wp.do("new", title="parallel work").result["item"])
    try:
        yield Project(root, wp, item, marks)
    finally:
        wp.close()
        end_executions(root)


def manifest(p: Project, session: str) -> dict[str, Any]:
    return steps.read_session(p.wp, session)["manifest"]


def two_running(p: Project, session: str, stage: str) -> list[dict[str, Any]]:
    """Coordinator passes until both branches of the step have started their operators; their records."""
    poll(lambda: once(p.wp) is not None and {f"{stage}-1", f"{stage}-2"} <= set(p.started()),
         f"both {stage} operators to start")
    return p.live(session)


@pytest.mark.slow
def test_parallel_branches_run_at_once_under_the_sessions_one_lease_and_a_retry_starts_nothing(
        project: Project) -> None:
    p = project
    session = steps.create(p.wp, p.item, "feature")["session"]
    plan = run_gw(p.root, "coordinate", "--once")  # the plan branch, launched by a coordinator process
    assert plan.returncode == 0 and f"{session} step-1/parallel-1 s-" in plan.stderr, plan.stderr
    assert f"({p.item}): launched" in plan.stderr
    # plan ran (and submitted itself; its process may still be on its way out), then both build branches
    running = [r for r in two_running(p, session, "build") if r["branch"].startswith("step-2/")]
    assert sorted(r["branch"] for r in running) == ["step-2/parallel-1", "step-2/parallel-2"], running
    lease = p.wp.lease(p.item)
    assert {(r["epoch"], r["fence"], r["holder"]) for r in running} == {(lease.epoch, lease.fence, "alice")}
    assert manifest(p, session)["leases"]["alice"]["fence"] == lease.fence  # the session's one lease
    for r in running:
        assert alive(*(lambda h: (int(h[0]), h[2]))(r["handle"].partition("@")))
        assert r["execution"] == steps.branch_execution(manifest(p, session), r["branch"])
        # The session's variables went through gw run's env (their names recorded, never a `env K=V` prefix).
        assert r["command"][-1] == "--flag" and "GW_SESSION_KEY" in r["env"] and "GW_FENCE" not in r["env"]
    seen = p.started()
    assert {seen[f"build-{n}"]["key"] for n in (1, 2)} == {"step-2/parallel-1", "step-2/parallel-2"}
    assert {seen[f"build-{n}"]["fence"] for n in (1, 2)} == {str(lease.fence)}
    assert seen["build-1"]["argv"] == ["--flag"]
    # Retries start nothing: the driver again, the coordinator again, gw run of the branch under another
    # id, and a plain gw run of the item, each answer what runs.
    before = len(runs(p.wp))
    again = steps.next_step(p.wp, session, launch=True)
    assert all(b["execution"]["existing"] for b in again["branches"]), again["branches"]
    assert [a for a in once(p.wp) if a["action"] == "launched"] == []
    other = launch_run(p.wp, p.item, [sys.executable, "-c", "pass"], backend_kind="subprocess",
                       execution="s-another-try", session=session, branch="step-2/parallel-1")
    first = [r["execution"] for r in running if r["branch"] == "step-2/parallel-1"]
    assert [other["execution"]] == first and other["existing"] is True
    plain = launch_run(p.wp, p.item, ["cat"], backend_kind="subprocess")
    assert plain["existing"] is True and plain["execution"] in {r["execution"] for r in runs(p.wp)}
    assert len(runs(p.wp)) == before and {r["execution"] for r in running} <= {r["execution"] for r in p.live(session)}
    # Go: both answer and submit themselves; the join finishes the chain, each branch having run once.
    (p.marks / "go").touch()
    poll(lambda: once(p.wp) is not None and steps.read_session(p.wp, session)["finished"] and not p.live(session),
         "the chain to finish and its operators to exit")
    done = runs(p.wp)
    assert sorted((r["branch"], r["state"], r.get("code")) for r in done) == [
        ("step-1/parallel-1", "exited", 0), ("step-2/parallel-1", "exited", 0), ("step-2/parallel-2", "exited", 0)]


@pytest.mark.slow
def test_an_operator_killed_mid_step_is_marked_and_the_session_blocks_with_the_reason(project: Project) -> None:
    p = project
    session = steps.create(p.wp, p.item, "hang")["session"]
    running = {r["branch"]: r for r in two_running(p, session, "hang")}
    folders = p.root / ".git" / "gitwork" / "executions"
    # Branch 1: kill -9 of the operator itself (its wrapper records 137); branch 2: of its whole process
    # group, wrapper and all (nothing is recorded: the execution is lost).
    agent = int((folders / running["step-1/parallel-1"]["execution"] / "child").read_text())
    os.kill(agent, signal.SIGKILL)
    group = int(running["step-1/parallel-2"]["handle"].partition("@")[0])
    os.killpg(group, signal.SIGKILL)
    poll(lambda: (folders / running["step-1/parallel-1"]["execution"] / "code").exists(), "the wrapper's record")
    poll(lambda: not alive(group, running["step-1/parallel-2"]["handle"].partition("@")[2]), "the group to end")
    passed = run_gw(p.root, "coordinate", "--once", "--json")  # a real coordinator process this time
    assert passed.returncode == 0, passed.stderr
    actions = json.loads(passed.stdout)["actions"]
    by = {(a.get("branch") or a.get("execution"), a["action"]) for a in actions}
    assert (running["step-1/parallel-1"]["execution"], "exited") in by
    assert (running["step-1/parallel-2"]["execution"], "lost") in by
    assert {("step-1/parallel-1", "blocked"), ("step-1/parallel-2", "blocked")} <= by, actions
    recorded = manifest(p, session)
    assert recorded["status"] == "blocked"
    assert {k: b["status"] for k, b in recorded["branches"].items()} == {"step-1/parallel-1": "blocked",
                                                                         "step-1/parallel-2": "blocked"}
    for key, words in (("step-1/parallel-1", "exited with code 137 without a response"),
                       ("step-1/parallel-2", "was lost")):
        answer = git(p.root, "show", f"refs/gitwork/state:sessions/{session}/{key}/response/response.json")
        assert words in json.loads(answer)["stop"]["reason"] and running[key]["execution"] in answer
    # Nothing hangs and nothing restarts: another pass launches nothing and records nothing of its own.
    before = tip(p.root)
    assert once(p.wp) == []
    assert git(p.root, "log", "--format=%s", f"{before}..refs/gitwork/state").count("coord-lease") == 2
    assert int(git(p.root, "rev-list", "--count", f"{before}..refs/gitwork/state")) == 2  # take, release
    assert p.live(session) == [] and len(runs(p.wp)) == 2


@pytest.mark.parametrize("how", ["session-stop", "lease-revoked", "stop-killed"])
def test_a_sessions_operators_stop_when_it_stops_or_its_lease_ends(project: Project, how: str) -> None:
    p = project
    session = steps.create(p.wp, p.item, "hang")["session"]
    two_running(p, session, "hang")
    if how == "lease-revoked":
        assert run_gw(p.root, "revoke", p.item, "--reason", "reassigning", "--as", "carol").returncode == 0
    else:  # a person, from another shell; stop-killed: that gw is killed (-9) once the stop is recorded,
        # before it stopped anything or released the lease: the coordinator stops the operators
        crash = {"GW_CRASH_AT": "session-end-recorded"} if how == "stop-killed" else {}
        done = run_gw(p.root, "session", "stop", session, "--reason", "enough", env={"GW_AGENT": "alice", **crash})
        assert done.returncode == (-signal.SIGKILL if crash else 0), done.stderr
        assert len(p.live(session)) == (2 if crash else 0)
    if how != "session-stop":
        actions = once(p.wp)
        assert sorted(a["action"] for a in actions) == ["stopped", "stopped"], actions
        assert all(("revoked" if how == "lease-revoked" else f"session {session} is stopped") in a["reason"]
                   for a in actions), actions
    records = [r for r in runs(p.wp) if r.get("session") == session]
    assert sorted(r["state"] for r in records) == ["stopped", "stopped"], records
    for r in records:
        pid, _, start = r["handle"].partition("@")
        poll(lambda pid=pid, start=start: not alive(int(pid), start), "the operator to end", limit=10)
    assert [a for a in once(p.wp) if a["action"] == "launched"] == []  # an ended session launches nothing


@pytest.mark.slow
@pytest.mark.parametrize("step", ["after-reserve", "after-start"])
def test_a_launch_killed_between_steps_converges_to_one_operator_per_branch(project: Project, step: str) -> None:
    p = project
    session = steps.create(p.wp, p.item, "hang")["session"]
    env = {"GW_AGENT": "alice", "GW_CRASH_AT": step}
    crashed = run_gw(p.root, "step", "next", session, "--launch", env=env)
    assert crashed.returncode == -signal.SIGKILL, crashed.stderr
    for _retry in range(2):
        done = run_gw(p.root, "step", "next", session, "--launch", "--json", env={"GW_AGENT": "alice"})
        assert done.returncode == 0, done.stderr
    live = p.live(session)
    recorded = manifest(p, session)
    assert sorted((r["branch"], r["execution"]) for r in live) == [
        (key, steps.branch_execution(recorded, key)) for key in ("step-1/parallel-1", "step-1/parallel-2")]
    poll(lambda: {"hang-1", "hang-2"} <= set(p.started()), "both operators to start")
    for r in live:
        pid, _, start = r["handle"].partition("@")
        assert alive(int(pid), start)
    assert len(runs(p.wp)) == 2  # the crashed launch's execution was settled and used again, never doubled


@pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is not installed (apt-get install tmux)")
def test_with_the_tmux_backend_each_branch_has_its_own_tmux_session_and_stop_ends_them(
        project: Project, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    p = project
    socket = str(tmp_path / "tmux.sock")
    monkeypatch.setenv("GW_TMUX_SOCKET", socket)
    rules = p.root / ".workplane"
    rules.write_text(rules.read_text().replace("backend: subprocess", "backend: tmux"))  # sessions.backend

    def tmux_sessions() -> list[str]:
        done = subprocess.run(["tmux", "-S", socket, "list-sessions", "-F", "#{session_name}"], capture_output=True,
                              text=True)
        return sorted(done.stdout.split()) if done.returncode == 0 else []

    try:
        session = steps.create(p.wp, p.item, "hang")["session"]
        running = two_running(p, session, "hang")
        assert {r["backend"] for r in running} == {"tmux"}
        assert tmux_sessions() == sorted(r["execution"] for r in running)  # both panes live at once
        steps.stop(p.wp, session, reason="enough")
        assert sorted(r["state"] for r in runs(p.wp)) == ["stopped", "stopped"]
        assert tmux_sessions() == []
    finally:
        subprocess.run(["tmux", "-S", socket, "kill-server"], capture_output=True)
