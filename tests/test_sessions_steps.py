"""Multi-step sessions (issue 13, docs/sessions.md "Multi-step sessions"): the manifest, step/parallel
branches, the request and response gates, handoff, nested exchanges, block and resume, done and stop.

Everything runs against real repositories; the lifecycle through the library (``gitwork.sessions.steps``)
where the invariant is about the record, and through real ``gw`` processes where it is about processes
(kill -9 between transitions, operators launched by ``gw step next --launch``).
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import os
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from conftest import Clock, git, gw_cmd, run_gw, tip
from gitwork.errors import GwError, Illegal, Invalid, Stale
from gitwork.records.sessions import canonical, check_schema, load_json
from gitwork.sessions import commit as session_commit
from gitwork.sessions import rules as session_rules
from gitwork.sessions import steps
from gitwork.workplane import Workplane

T0 = dt.datetime(2030, 1, 1, 12, 0, 0, tzinfo=dt.timezone.utc)
RULES = """sessions:
  operators:
    planner: {command: [python3, plan.py]}
    coder: {command: [python3, code.py], validate: "test -f response/response.md"}
    shipper: {command: [python3, ship.py], writes_source: true}
  steps:
    plan: {operator: planner}
    build: {operator: coder, parallel: 2}
    review: {operator: user}
    ship: {operator: shipper}
  chains:
    feature: [plan, build, review]
    solo: [review]
    release: [ship]
"""


@pytest.fixture(autouse=True)
def person_identity(clean_env: None, monkeypatch: pytest.MonkeyPatch) -> None:
    for role in ("AUTHOR", "COMMITTER"):
        monkeypatch.setenv(f"GIT_{role}_NAME", "Person")
        monkeypatch.setenv(f"GIT_{role}_EMAIL", "person@example.com")


def make_project(path: Path, rules: str = RULES) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    git(path, "init", "-q", "-b", "main")
    (path / ".workplane").write_text(rules)
    (path / "a.txt").write_text("alpha\n")
    git(path, "add", ".workplane", "a.txt")
    git(path, "commit", "-q", "-m", "initial")
    return path


@pytest.fixture
def project(tmp_path: Path) -> Path:
    return make_project(tmp_path / "proj")


@pytest.fixture
def plane(project: Path):  # type: ignore[no-untyped-def]
    wp = Workplane(str(project), now=Clock(T0), agent="alice")
    wp.do("init")
    yield wp
    wp.close()


def new_item(wp: Workplane, title: str = "Build it") -> str:
    return str(wp.do("new", title=title).result["item"])


def answer(folder: str | Path, key: str, doc: dict[str, Any] | str, files: dict[str, str] | None = None) -> None:
    """What an operator does: write files into its own response/, then response.json."""
    out = Path(folder) / key / "response"
    for name, text in (files or {}).items():
        (out / name).parent.mkdir(parents=True, exist_ok=True)
        (out / name).write_text(text)
    out.mkdir(parents=True, exist_ok=True)
    (out / "response.json").write_text(doc if isinstance(doc, str) else json.dumps(doc))


DONE = {"status": "done", "fields": {}}


def on_ref(repo: Path, path: str) -> bytes | None:
    done = subprocess.run(["git", "cat-file", "blob", f"refs/gitwork/state:{path}"], cwd=repo, capture_output=True)
    return done.stdout if done.returncode == 0 else None


def check_invariants(repo: Path, session: str, mirrored: bool = True) -> dict[str, Any]:
    """The recorded manifest satisfies its schema; the folder's copy is it (once a command completed:
    a kill -9 may leave it one transition behind, and the next command mirrors it); every request hash
    matches the file in the folder and the copy on the ref; each branch was recorded exactly once."""
    data = on_ref(repo, f"sessions/{session}/state.json")
    assert data is not None
    manifest = check_schema("state", json.loads(data), "recorded")
    folder = repo / ".worktrees" / "sessions" / session
    if folder.exists() and mirrored:
        assert (folder / "state.json").read_bytes() == canonical(manifest)
    for key, digest in manifest["requests"].items():
        assert hashlib.sha256(on_ref(repo, f"sessions/{session}/{key}/request/request.json") or b"").hexdigest() == digest
        if folder.exists():
            assert hashlib.sha256((folder / key / "request" / "request.json").read_bytes()).hexdigest() == digest
    subjects = git(repo, "log", "--format=%s", "refs/gitwork/state").splitlines()
    for key in manifest["requests"]:
        assert sum(s.startswith(f"session-branch {session} {key} ") for s in subjects) == 1, key
    assert sum(s.startswith(f"session-create {session} ") for s in subjects) == 1
    return manifest


def commits(repo: Path) -> int:
    return int(git(repo, "rev-list", "--count", "refs/gitwork/state"))


# --- the lifecycle, through the library ---------------------------------------------------------------


def test_create_records_manifest_and_lease_before_the_first_branch(project: Path, plane: Workplane) -> None:
    item = new_item(plane)
    made = steps.create(plane, item, "feature")
    session = made["session"]
    assert session.startswith("20300101-120000-proj-planner")
    assert [t["op"] for t in made["transitions"]] == ["session-create", "session-branch"]
    subjects = git(project, "log", "--format=%s", "refs/gitwork/state").splitlines()[:3]
    assert subjects[2].startswith("claim ") and subjects[1].startswith("session-create ")
    assert subjects[0].startswith(f"session-branch {session} step-1/parallel-1 ")
    manifest = check_invariants(project, session)
    assert manifest["status"] == "running" and manifest["chain"] == ["step-1/parallel-1"]
    assert manifest["steps"] == {"step-1/parallel-1": "planner"}
    assert manifest["leases"] == {"alice": {"item": item, "fence": 1, "epoch": 1}}
    folder = project / ".worktrees" / "sessions" / session / "step-1" / "parallel-1"
    assert (folder / "response" / "data").is_dir() and (folder / "response" / "artifacts").is_dir()
    request = json.loads((folder / "request" / "request.json").read_text())
    assert request["operator"] == "planner" and request["inputs"] == [] and request["resume"] is None
    # Running create again continues the same session: nothing new is recorded.
    before = tip(project)
    again = steps.create(plane, item, "feature")
    assert again["session"] == session and again["existing"] and tip(project) == before
    assert steps.read_session(plane, session)["manifest"] == manifest
    assert [r["session"] for r in steps.read_sessions(plane)] == [session]


def test_two_sessions_in_the_same_second_by_the_same_operator_get_distinct_ids(project: Path,
                                                                                plane: Workplane) -> None:
    first = steps.create(plane, new_item(plane, "one"), "feature")["session"]
    second = steps.create(plane, new_item(plane, "two"), "feature")["session"]
    assert first != second and second == f"{first}-2"
    # Two processes at the very same instant (GW_NOW), racing for the folder and the record.
    items = [new_item(plane, "three"), new_item(plane, "four")]
    env = {**os.environ, "GW_NOW": "2030-01-01T12:00:00Z", "GW_AGENT": "alice"}
    racers = [subprocess.Popen(gw_cmd("session", "create", item, "--chain", "feature", "--json"), cwd=project,
                               env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for item in items]
    outs = [racer.communicate(timeout=60) for racer in racers]
    assert [r.returncode for r in racers] == [0, 0], outs
    ids = {json.loads(out)["session"] for out, _err in outs}
    assert len(ids | {first, second}) == 4
    for session in ids | {first, second}:
        check_invariants(project, session)


def test_handoff_fans_out_and_joins(project: Path, plane: Workplane) -> None:
    session = steps.create(plane, new_item(plane), "feature")["session"]
    folder = project / ".worktrees" / "sessions" / session
    answer(folder, "step-1/parallel-1", {"status": "done", "fields": {"plan": "response/data/plan.md"}},
           {"data/plan.md": "the plan\n", "response.md": "planned\n"})
    made = steps.submit(plane, session, "step-1/parallel-1")
    assert [t["op"] for t in made["transitions"]] == ["session-submit", "session-branch", "session-branch"]
    assert made["open"] == ["step-2/parallel-1", "step-2/parallel-2"]
    for m in (1, 2):
        request = json.loads((folder / f"step-2/parallel-{m}/request/request.json").read_text())
        assert request["inputs"] == [{"name": "plan", "from": "step-1/parallel-1",
                                      "path": "step-1/parallel-1/response/data/plan.md"}]
        assert request["parallel"] == {"index": m, "of": 2}
        assert (folder / request["inputs"][0]["path"]).read_text() == "the plan\n"
    answer(folder, "step-2/parallel-1", {"status": "done", "fields": {"code": "response/response.md"}},
           {"response.md": "one\n"})
    joined = steps.submit(plane, session, "step-2/parallel-1")
    assert joined["open"] == ["step-2/parallel-2"]  # the join: step 3 waits for the other branch
    answer(folder, "step-2/parallel-2", {"status": "done", "fields": {"code": "response/response.md"}},
           {"response.md": "two\n"})
    assert steps.submit(plane, session, "step-2/parallel-2")["open"] == ["step-3/parallel-1"]
    request = json.loads((folder / "step-3/parallel-1/request/request.json").read_text())
    # handoff by kind: both branches' code, and step 1's plan (its nearest producer)
    assert [i["path"] for i in request["inputs"]] == ["step-2/parallel-1/response/response.md",
                                                      "step-2/parallel-2/response/response.md",
                                                      "step-1/parallel-1/response/data/plan.md"]
    assert request["operator"] == "user"
    check_invariants(project, session)


def test_a_sibling_landing_while_a_branch_checks_is_not_an_outside_write(project: Path, plane: Workplane) -> None:
    """Two parallel operators submit at once: the one that checks the folder against the record it read
    before its sibling landed saw the sibling's new state.json as a write outside the open branches and
    was refused (exit 5, about one run in three). The check is judged on the settled, newest record."""
    session = steps.create(plane, new_item(plane), "feature")["session"]
    folder = project / ".worktrees" / "sessions" / session
    answer(folder, "step-1/parallel-1", {"status": "done", "fields": {}}, {"response.md": "planned\n"})
    steps.submit(plane, session, "step-1/parallel-1")
    before = steps._open_run(plane, session, None)  # what branch 1's submit read, before its sibling landed
    for key in ("step-2/parallel-1", "step-2/parallel-2"):
        answer(folder, key, {"status": "done", "fields": {}}, {"response.md": f"{key}\n"})
    steps.submit(plane, session, "step-2/parallel-2")
    assert steps.outside_writes(before) == ["state.json"]  # the stale view: what made the refusal
    run, outside = steps._settled_outside_writes(plane, session, None, before)
    assert outside == [] and run.manifest["branches"]["step-2/parallel-2"]["status"] == "done"
    assert steps.submit(plane, session, "step-2/parallel-1")["open"] == ["step-3/parallel-1"]
    (folder / "step-1/parallel-1/response/response.md").write_text("rewritten after it was recorded\n")
    assert steps._settled_outside_writes(plane, session, None, run)[1] == ["step-1/parallel-1/response/response.md"]


def test_waiting_runs_the_nested_exchange_then_resumes_the_same_branch(project: Path, plane: Workplane) -> None:
    session = steps.create(plane, new_item(plane), "feature")["session"]
    folder = project / ".worktrees" / "sessions" / session
    answer(folder, "step-1/parallel-1", {"status": "waiting", "fields": {},
                                         "awaiting": {"exchange": "ask-user", "operator": "user",
                                                      "ask": {"question": "which database?"}}})
    made = steps.submit(plane, session, "step-1/parallel-1")
    assert [t["op"] for t in made["transitions"]] == ["session-submit", "session-branch"]
    assert made["open"] == ["step-1/parallel-1/ask-user"]
    exchange = json.loads((folder / "step-1/parallel-1/ask-user/request/request.json").read_text())
    assert exchange["operator"] == "user" and exchange["ask"] == {"question": "which database?"}
    answer(folder, "step-1/parallel-1/ask-user", {"status": "done", "fields": {"answer": "response/answer.md"}},
           {"answer.md": "sqlite\n"})
    resumed = steps.submit(plane, session, "step-1/parallel-1/ask-user")
    assert [t["op"] for t in resumed["transitions"]] == ["session-submit", "session-resume"]
    assert resumed["open"] == ["step-1/parallel-1"]
    manifest = check_invariants(project, session)
    assert manifest["resumes"][-1] == {"branch": "step-1/parallel-1", "from": "step-1/parallel-1/ask-user",
                                       "reason": "wait", "at": "2030-01-01T12:00:00Z"}
    env = steps.branch_env(steps.Where(str(project), session), manifest, "step-1/parallel-1")
    assert env["GW_SESSION_EXCHANGE"].endswith("step-1/parallel-1/ask-user/response")
    # The same exchange name again would resume at once without running it: refused.
    answer(folder, "step-1/parallel-1", {"status": "waiting", "fields": {},
                                         "awaiting": {"exchange": "ask-user", "operator": "user"}})
    with pytest.raises(Invalid, match="already had the exchange"):
        steps.submit(plane, session, "step-1/parallel-1")
    answer(folder, "step-1/parallel-1", {"status": "done", "fields": {}})
    assert steps.submit(plane, session, "step-1/parallel-1")["open"] == ["step-2/parallel-1", "step-2/parallel-2"]


def test_block_keeps_the_session_and_resume_reenters_at_the_next_step(project: Path, plane: Workplane) -> None:
    session = steps.create(plane, new_item(plane), "feature")["session"]
    folder = project / ".worktrees" / "sessions" / session
    answer(folder, "step-1/parallel-1", {"status": "done", "fields": {"plan": "response/plan.md"}}, {"plan.md": "p"})
    steps.submit(plane, session, "step-1/parallel-1")
    blocked = steps.block(plane, session, "step-2/parallel-2", "the API key is missing")
    assert blocked["status"] == "blocked" and blocked["open"] == ["step-2/parallel-1"]
    with pytest.raises(Illegal, match="still running"):
        steps.resume(plane, session)  # parallel-1 is still at work
    # ... and may still wait on a nested exchange while its sibling blocks the session.
    answer(folder, "step-2/parallel-1", {"status": "waiting", "fields": {},
                                         "awaiting": {"exchange": "ask", "operator": "user"}})
    assert steps.submit(plane, session, "step-2/parallel-1")["open"] == ["step-2/parallel-1/ask"]
    answer(folder, "step-2/parallel-1/ask", DONE)
    assert steps.submit(plane, session, "step-2/parallel-1/ask")["open"] == ["step-2/parallel-1"]
    answer(folder, "step-2/parallel-1", {"status": "done", "fields": {}}, {"response.md": "x"})
    assert steps.submit(plane, session, "step-2/parallel-1")["status"] == "blocked"
    resumed = steps.resume(plane, session)
    assert [t["op"] for t in resumed["transitions"]] == ["session-resume", "session-branch"]
    assert resumed["open"] == ["step-3/parallel-1"]
    request = json.loads((folder / "step-3/parallel-1/request/request.json").read_text())
    assert request["resume"] == "step-2/parallel-2" and request["operator"] == "coder"
    assert request["inputs"] == [{"name": "plan", "from": "step-1/parallel-1", "path": "step-1/parallel-1/response/plan.md"}]
    with pytest.raises(Illegal, match="only a blocked session"):
        steps.resume(plane, session)
    answer(folder, "step-3/parallel-1", {"status": "done", "fields": {}}, {"response.md": "y"})
    assert steps.submit(plane, session, "step-3/parallel-1")["open"] == ["step-4/parallel-1"]
    manifest = check_invariants(project, session)
    assert [r["reason"] for r in manifest["resumes"]] == ["wait", "block"]


def test_stop_ends_the_session_and_releases_the_lease(project: Path, plane: Workplane) -> None:
    item = new_item(plane)
    session = steps.create(plane, item, "feature")["session"]
    before = tip(project)
    with pytest.raises(Illegal, match="would strand its multi-step session"):
        plane.do("done", item=item)  # finishing the item would strand the running session
    assert tip(project) == before
    stopped = steps.stop(plane, session, reason="not needed")
    assert stopped["status"] == "stopped" and stopped["folder"]
    manifest = check_invariants(project, session)
    assert manifest["stoppedAt"] == "2030-01-01T12:00:00Z" and manifest["reason"] == "not needed"
    assert plane.lease(item).state == "released"
    assert [t["op"] for t in stopped["transitions"]] == ["session-end"]
    with pytest.raises(Illegal, match="takes no more transitions"):
        steps.block(plane, session, "step-1/parallel-1", "late")
    with pytest.raises(Illegal):
        steps.done(plane, session)


def test_done_publishes_the_source_step_and_keeps_the_audit_on_the_ref(project: Path, plane: Workplane) -> None:
    item = new_item(plane)
    session = steps.create(plane, item, "release")["session"]
    folder = project / ".worktrees" / "sessions" / session
    request = json.loads((folder / "step-1/parallel-1/request/request.json").read_text())
    source = request["source"]
    assert source["session"] == f"{session}-s1-p1" and source["branch"] == f"session/{session}-s1-p1"
    assert source["base"] == git(project, "rev-parse", "main")
    with pytest.raises(Invalid, match="commit it first"):
        answer(folder, "step-1/parallel-1", DONE)
        steps.submit(plane, session, "step-1/parallel-1")
    (Path(source["worktree"]) / "a.txt").write_text("alpha, shipped\n")
    made = session_commit(plane, ["a.txt"], "Ship it", session=source["session"], cwd=source["worktree"])
    answer(folder, "step-1/parallel-1", {"status": "done", "fields": {"notes": "response/response.md"},
                                         "commits": [made["commit"]]}, {"response.md": "shipped\n"})
    steps.submit(plane, session, "step-1/parallel-1")
    changes = (folder / "step-1/parallel-1/response/changes.md").read_text()
    assert made["commit"] in changes and "| a.txt |" in changes
    done = steps.done(plane, session)
    assert done["status"] == "done" and done["folder"] is None and not folder.exists()
    assert git(project, "show", "main:a.txt") == "alpha, shipped"
    # Only the published commit survives, on main: no session branch, no worktree is left behind.
    assert git(project, "branch", "--list", "session/*") == "" and str(project / ".worktrees") not in \
        git(project, "worktree", "list")
    assert plane.item(item).status == "done" and plane.lease(item).state == "released"
    # The audit record: what every branch was asked and answered, after the folder is gone.
    manifest = check_invariants(project, session)
    assert manifest["status"] == "done" and manifest["route"] == "publish"
    for key, digest in manifest["responses"].items():
        response = on_ref(project, f"sessions/{session}/{key}/response/response.json") or b""
        assert hashlib.sha256(response).hexdigest() == digest
    listing = (on_ref(project, f"sessions/{session}/step-1/parallel-1/response/files.sha256") or b"").decode()
    assert "response/changes.md" in listing and "response/response.md" in listing
    assert steps.read_sessions(plane)[0]["status"] == "done"


# --- refusals: one line, a documented code, nothing changed ------------------------------------------


def _open_session(plane: Workplane) -> tuple[str, Path]:
    session = steps.create(plane, new_item(plane), "feature")["session"]
    folder = Path(steps.read_session(plane, session)["folder"])
    answer(folder, "step-1/parallel-1", {"status": "done", "fields": {"plan": "response/plan.md"}}, {"plan.md": "p"})
    steps.submit(plane, session, "step-1/parallel-1")
    return session, folder


def _outside_write(plane: Workplane, folder: Path) -> None:
    (folder / "step-1/parallel-1/response/plan.md").write_text("rewritten by the next agent")


def _stale_fence(plane: Workplane, folder: Path) -> None:
    item = steps.read_session(plane, folder.name)["item"]
    plane.do("release", item=item)
    plane.do("claim", item=item)  # fence 2 now; the submit below quotes fence 1


REFUSALS: dict[str, tuple[Any, Any, type[GwError], str]] = {
    "schema": ({"status": "finished", "fields": {}}, None, Invalid, "fails response.schema.json"),
    "blocked without stop": ({"status": "blocked", "fields": {}}, None, Invalid, "fails response.schema.json"),
    "not json": ("{not json", None, Invalid, "is not valid JSON"),
    "too deep": ('{"status": "done", "fields": {}, "next": ' + "[" * 40 + "]" * 40 + "}", None, Invalid,
                 "nested too deeply"),
    "too large": (json.dumps({"status": "done", "fields": {}, "next": "x" * 70_000}), None, Invalid, "too large"),
    "duplicate key": ('{"status": "done", "status": "blocked", "fields": {}}', None, Invalid, "duplicate key"),
    "field missing": ({"status": "done", "fields": {"code": "response/none.md"}}, None, Invalid, "does not exist"),
    "field escapes": ({"status": "done", "fields": {"code": "response/../../../state.json"}}, None, Invalid,
                      "plain path"),
    "validator": ({"status": "done", "fields": {}}, None, Invalid, "coder validator refused"),
    "outside write": ({"status": "done", "fields": {}}, _outside_write, Invalid, "outside the open branches"),
    "request changed": ({"status": "done", "fields": {}},
                        lambda wp, f: (f / "step-2/parallel-1/request/request.json").write_text("{}"), Invalid,
                        "changed on disk"),
    "stale fence": ({"status": "done", "fields": {}}, _stale_fence, Stale, "fence 1 is stale"),
}


def test_a_bad_submit_is_refused_and_changes_nothing(project: Path, plane: Workplane) -> None:
    """Each case on the same open branch (a refusal changes nothing, so they can share it); the stale
    fence last, since it re-grants the lease."""
    session, folder = _open_session(plane)
    branch = folder / "step-2/parallel-1"
    kept = {path: path.read_bytes() for path in (branch / "request/request.json",
                                                 folder / "step-1/parallel-1/response/plan.md")}
    for case in sorted(REFUSALS, key=lambda c: c == "stale fence"):
        doc, prepare, error, message = REFUSALS[case]
        shutil.rmtree(branch / "response")
        answer(folder, "step-2/parallel-1", doc, {"response.md": "x"} if case != "validator" else None)
        if prepare:
            prepare(plane, folder)
        before = (tip(project), (folder / "state.json").read_bytes())
        with pytest.raises(error, match=message) as raised:
            steps.submit(plane, session, "step-2/parallel-1", fence=1)
        assert "\n" not in raised.value.message, case
        assert (tip(project), (folder / "state.json").read_bytes()) == before, case
        assert steps.read_session(plane, session)["manifest"]["branches"]["step-2/parallel-1"]["status"] == "open"
        for path, data in kept.items():
            path.write_bytes(data)


def test_a_resume_naming_another_operators_branch_is_refused_by_the_op(project: Path, plane: Workplane) -> None:
    """The gate is in the engine too: a record whose request resumes a branch of another operator."""
    session, folder = _open_session(plane)
    manifest = steps.read_session(plane, session)["manifest"]
    request = json.loads((folder / "step-2/parallel-1/request/request.json").read_text())
    request.update(branch="step-3/parallel-1", resume="step-1/parallel-1")  # the planner's branch, not coder's
    data = canonical(request)
    new = json.loads(json.dumps(manifest))
    new["chain"].append("step-3/parallel-1")
    new["steps"]["step-3/parallel-1"] = "coder"
    new["requests"]["step-3/parallel-1"] = hashlib.sha256(data).hexdigest()
    new["branches"]["step-3/parallel-1"] = {"stage": "build", "status": "open", "position": 1}
    before = tip(project)
    with pytest.raises(Invalid, match="resume names step-1/parallel-1, which the manifest records for planner"):
        plane.record("session-branch", item=manifest["item"], session=session, key="step-3/parallel-1",
                     manifest=canonical(new).decode(), request=data.decode())
    assert tip(project) == before
    # The op also refuses a recorded request rewritten, or a new branch that changes the session's status.
    request.update(resume=None)
    data = canonical(request)
    new["requests"]["step-3/parallel-1"] = hashlib.sha256(data).hexdigest()
    for change, message in ((("requests", "step-1/parallel-1", "0" * 64), "was recorded and may not change"),
                            (("status", None, "blocked"), "changes neither")):
        forged = json.loads(json.dumps(new))
        if change[1]:
            forged[change[0]][change[1]] = change[2]
        else:
            forged[change[0]] = change[2]
        with pytest.raises(GwError, match=message):
            plane.record("session-branch", item=manifest["item"], session=session, key="step-3/parallel-1",
                         manifest=canonical(forged).decode(), request=data.decode())
    assert tip(project) == before
    # ... and the gate before an operator starts refuses a request rewritten on disk to do the same.
    (folder / "step-2/parallel-1/request/request.json").write_bytes(canonical({**request, "resume": "step-1/parallel-1"}))
    with pytest.raises(Invalid, match="changed on disk"):
        steps.next_step(plane, session)
    with pytest.raises(Invalid, match="cannot be submitted"):
        plane.submit({"op": "session-end", "item": manifest["item"], "session": session, "to": "stopped",
                      "manifest": canonical(manifest).decode()})


def test_wait_submits_a_response_once_it_is_whole_not_while_it_is_written(project: Path, plane: Workplane) -> None:
    """A person's editor or ``echo ... > response.json`` writes the file in place: ``gw step wait`` may
    see it empty or cut short. It waits on until the document parses (bounded by its timeout; a
    document still broken then is refused as before), instead of submitting the half and refusing it
    (exit 5) while the operator was still writing. Deterministic: the half is there before the wait
    starts, and the rest comes only once the half was read twice (before, the second read was the
    submit's, which refused it; now it is the wait's next look)."""
    session, folder = _open_session(plane)
    key = "step-2/parallel-1"
    path = folder / key / "response" / "response.json"
    whole = json.dumps({"status": "done", "fields": {"code": "response/response.md"}}).encode()
    answer(folder, key, "", {"response.md": "built"})  # its files first, as an operator does
    path.write_bytes(whole[: len(whole) // 2])  # then response.json: the editor's first write; the rest comes later
    looked = threading.Event()
    reads: list[bytes | None] = []
    real_read = steps._read  # noqa: SLF001 - counted, not replaced: every read still reads the file

    def counted(at: str, *args: Any) -> bytes | None:
        data = real_read(at, *args)
        if at.endswith(f"{key}/response/response.json"):
            reads.append(data)
            if len(reads) >= 2:
                looked.set()
        return data

    def rest() -> None:
        assert looked.wait(60)
        with open(path, "ab") as out:  # the rest, in place (not a rename)
            out.write(whole[len(whole) // 2:])

    writer = threading.Thread(target=rest)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(steps, "_read", counted)
        writer.start()
        try:
            done = steps.wait(plane, session, key, timeout=60)
        finally:
            looked.set()
            writer.join(60)
    assert done["manifest"]["branches"][key]["status"] == "done"
    other = folder / "step-2" / "parallel-2" / "response"
    other.mkdir(parents=True, exist_ok=True)
    (other / "response.json").write_bytes(b'{"status": ')  # still broken at the deadline: refused as before
    with pytest.raises(Invalid, match="not valid JSON"):
        steps.wait(plane, session, "step-2/parallel-2", timeout=0.2)


def test_cli_refusals_are_one_line_with_documented_codes(project: Path, plane: Workplane) -> None:
    session, folder = _open_session(plane)
    plane.close()
    answer(folder, "step-2/parallel-1", {"status": "nope", "fields": {}})
    before = (tip(project), (folder / "state.json").read_bytes())
    env = {"GW_AGENT": "alice"}
    for args, code in ((["step", "submit", session, "step-2/parallel-1"], 5),
                       (["step", "submit", session, "step-9/parallel-1"], 3),
                       (["step", "submit", session, "../../etc"], 5),
                       (["session", "done", session], 6),
                       (["step", "resume", session], 6),
                       (["session", "status", "nope"], 5),
                       (["session", "create", "w-", "--chain", "nope"], 5),
                       (["step", "wait", session, "step-2/parallel-2", "--timeout", "0"], 75)):
        done = run_gw(project, *args, env=env)
        assert done.returncode == code, (args, done.stderr)
        assert done.stderr.count("\n") == 1 and done.stderr.startswith("gw: "), done.stderr
    assert (tip(project), (folder / "state.json").read_bytes()) == before


def test_bad_rules_are_refused_naming_the_entry(tmp_path: Path) -> None:
    cases = {
        "sessions: [1]": "a mapping",
        "sessions: {chains: {x: [nope]}}": "chains.x",
        "sessions: {steps: {a: {operator: ghost}}}": "steps.a.operator",
        "sessions: {operators: {bot: {}}}": "needs a command",
        "sessions: {steps: {a: {operator: user, parallel: 99}}}": "steps.a.parallel",
        "sessions: {steps: {a: {operator: user, writes_source: true}}}": "cannot write source",
    }
    for number, (text, message) in enumerate(cases.items()):
        repo = make_project(tmp_path / f"p{number}", text + "\n")
        with pytest.raises(Invalid, match=message):
            with Workplane(str(repo), agent="alice") as wp:
                session_rules.load(wp.settings)


def test_bounded_json_parsing() -> None:
    assert load_json(b'{"a": [1, 2]}', "doc") == {"a": [1, 2]}
    for data, message in ((b"[" * 5000 + b"]" * 5000, "nested too deeply"), (b"x" * 70_000, "too large"),
                          (b'{"a": NaN}', "not valid JSON"), (b'{"a": 1, "a": 2}', "duplicate key")):
        with pytest.raises(Invalid, match=message):
            load_json(data, "doc")


# --- processes: kill -9 between transitions, operators launched by gw run ------------------------------


def _gw(repo: Path, *args: str, crash: str | None = None) -> subprocess.CompletedProcess[str]:
    env = {"GW_AGENT": "alice", "GW_NO_AUTO_GC": "1"}
    if crash:
        env["GW_CRASH_AT"] = crash
    return run_gw(repo, *args, env=env)


@pytest.mark.slow
def test_kill_9_between_any_two_transitions_then_the_same_command_converges(project: Path, plane: Workplane) -> None:
    item = new_item(plane)
    plane.close()
    walk: list[tuple[list[str], list[str]]] = [
        (["session", "create", item, "--chain", "feature"],
         ["session-create-written", "session-create-recorded", "session-request-written", "session-branch-recorded"]),
        (["step", "submit", "{s}", "step-1/parallel-1"],
         ["session-submit-checked", "session-submit-recorded", "session-branch-recorded", "session-request-written"]),
        (["step", "block", "{s}", "step-2/parallel-1", "--reason", "stuck"], ["session-submit-recorded"]),
        (["step", "block", "{s}", "step-2/parallel-2", "--reason", "stuck too"], []),
        (["step", "resume", "{s}"], ["session-resume-recorded", "session-branch-recorded"]),
    ]
    session = None
    folder = project / ".worktrees" / "sessions"
    for args, crashes in walk:
        if args[1] == "submit":
            answer(folder / session, "step-1/parallel-1", {"status": "done", "fields": {}})
        for crash in [*crashes, None]:
            before = commits(project) if session else 0
            done = _gw(project, *(a.format(s=session) for a in args), crash=crash)
            if crash:
                assert done.returncode == -9, (args, crash, done.stderr)
            else:
                assert done.returncode == 0, (args, done.stderr)
            session = session or (sorted(os.listdir(folder))[0] if folder.exists() and os.listdir(folder) else None)
            if session and on_ref(project, f"sessions/{session}/state.json"):
                check_invariants(project, session, mirrored=crash is None)
            assert commits(project) >= before
    assert sorted(os.listdir(folder)) == [session]  # no second session for the same create
    manifest = check_invariants(project, session)
    assert manifest["status"] == "running" and manifest["current"] == 3
    assert [(r["branch"], r["from"]) for r in manifest["resumes"]] == [("step-3/parallel-1", "step-2/parallel-1"),
                                                                        ("step-3/parallel-2", "step-2/parallel-2")]
    # The end: kill -9 after the record and after the release, then done again finishes the rest.
    answer(folder / session, "step-3/parallel-1", {"status": "done", "fields": {}}, {"response.md": "b"})
    answer(folder / session, "step-3/parallel-2", {"status": "done", "fields": {}}, {"response.md": "c"})
    for key in ("step-3/parallel-1", "step-3/parallel-2"):
        assert _gw(project, "step", "submit", session, key).returncode == 0
    answer(folder / session, "step-4/parallel-1", DONE)
    assert _gw(project, "step", "submit", session, "step-4/parallel-1").returncode == 0
    for crash in ("session-end-recorded", "session-end-released", None):
        done = _gw(project, "session", "done", session, crash=crash)
        assert done.returncode == (-9 if crash else 0), done.stderr
    assert not (folder / session).exists()
    subjects = git(project, "log", "--format=%s", "refs/gitwork/state").splitlines()
    assert sum(s.startswith(f"session-end {session}") for s in subjects) == 1
    assert subjects[0].startswith(f"done {item}")


OPERATOR = r'''
import json, os, subprocess, sys
request = json.load(open(os.environ["GW_SESSION_REQUEST"]))
out = os.environ["GW_SESSION_RESPONSE"]
root = os.environ["GW_SESSION_ROOT"]
seen = "".join(open(os.path.join(root, i["path"])).read() for i in request["inputs"])
os.makedirs(os.path.join(out, "data"), exist_ok=True)
name = f"{request['stage']}-{request['parallel']['index']}.md"
with open(os.path.join(out, "data", name), "w") as handle:
    handle.write(f"{request['stage']} {request['parallel']['index']} saw [{seen}]")
with open(os.path.join(out, "response.md"), "w") as handle:
    handle.write("done\n")
doc = {"status": "done", "fields": {request["stage"] + str(request["parallel"]["index"]): "response/data/" + name}}
if request.get("source"):
    tree = request["source"]["worktree"]
    with open(os.path.join(tree, "shipped.txt"), "w") as handle:
        handle.write(seen + "\n")
    made = subprocess.run([sys.executable, "-m", "gitwork", "session", "commit", request["source"]["session"],
                           "--file", "shipped.txt", "-m", "ship", "--json"], cwd=tree, capture_output=True, text=True)
    doc["commits"] = [json.loads(made.stdout)["commit"]]
with open(os.path.join(out, "response.json"), "w") as handle:
    json.dump(doc, handle)
sys.exit(subprocess.call([sys.executable, "-m", "gitwork", "step", "submit", os.environ["GW_SESSION"],
                          os.environ["GW_SESSION_KEY"]]))
'''


@pytest.mark.slow
def test_end_to_end_three_steps_two_parallel_launched_operators_publish(tmp_path: Path) -> None:
    py = sys.executable
    rules = (f"sessions:\n  operators:\n    bot: {{command: [{py}, {tmp_path / 'op.py'}]}}\n"
             f"  steps:\n    plan: {{operator: bot}}\n    build: {{operator: bot, parallel: 2}}\n"
             f"    ship: {{operator: bot, writes_source: true}}\n  chains:\n    feature: [plan, build, ship]\n")
    (tmp_path / "op.py").write_text(OPERATOR)
    project = make_project(tmp_path / "proj", rules)
    with Workplane(str(project), agent="alice") as wp:
        wp.do("init")
        item = new_item(wp)
    session = json.loads(_gw(project, "session", "create", item, "--chain", "feature", "--json").stdout)["session"]
    deadline = time.monotonic() + 90
    while True:  # the driver: launch whatever is open (once per branch) until the chain is finished
        done = _gw(project, "step", "next", session, "--launch", "--json")
        assert done.returncode == 0, done.stderr
        if json.loads(done.stdout)["finished"]:
            break
        assert time.monotonic() < deadline, done.stdout
        time.sleep(0.2)
    finished = json.loads(_gw(project, "session", "done", session, "--json").stdout)
    assert finished["status"] == "done" and finished["folder"] is None
    shipped = git(project, "show", "main:shipped.txt")
    assert "build 1 saw [plan 1 saw []]" in shipped and "build 2 saw [plan 1 saw []]" in shipped
    # Reconstruct every step from the ref alone: what it was asked and what it answered.
    manifest = check_invariants(project, session)
    assert manifest["chain"] == ["step-1/parallel-1", "step-2/parallel-1", "step-2/parallel-2", "step-3/parallel-1"]
    for key in manifest["chain"]:
        asked = json.loads(on_ref(project, f"sessions/{session}/{key}/request/request.json") or b"")
        answered = json.loads(on_ref(project, f"sessions/{session}/{key}/response/response.json") or b"")
        assert asked["branch"] == key and answered["status"] == "done"
    last = json.loads(on_ref(project, f"sessions/{session}/step-3/parallel-1/request/request.json") or b"")
    # handoff by kind: each kind from its nearest producer (build1, build2 from step 2; plan1 from step 1)
    assert [i["from"] for i in last["inputs"]] == ["step-2/parallel-1", "step-2/parallel-2", "step-1/parallel-1"]
    runs = json.loads(_gw(project, "runs", "--json").stdout)
    assert len(runs) == 4 and len({r["execution"] for r in runs}) == 4  # each branch ran exactly once


# --- the lifecycle as a state machine ------------------------------------------------------------------


def lifecycle_machine(root: Path) -> type:
    from hypothesis import strategies as st
    from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

    class Lifecycle(RuleBasedStateMachine):
        """Random walks through create, submit (valid and invalid), wait/answer, block, resume, done and
        stop. After each: the manifest validates, its copy and every request hash match, and each
        transition was exactly one commit; a refusal changed nothing and never advanced a branch."""

        count = 0

        def __init__(self) -> None:
            super().__init__()
            Lifecycle.count += 1
            self.project = make_project(root / f"run{Lifecycle.count}")
            self.wp = Workplane(str(self.project), now=Clock(T0), agent="alice")
            self.wp.do("init")
            self.item = new_item(self.wp)
            made = steps.create(self.wp, self.item, "feature")
            self.session = made["session"]
            self.folder = Path(made["folder"])
            self.exchanges = self.moves = 0
            self.ids = {self.session}

        def teardown(self) -> None:
            self.wp.close()
            check_invariants(self.project, self.session)  # once per run: each branch recorded exactly once

        @property
        def manifest(self) -> dict[str, Any]:
            return steps.read_session(self.wp, self.session)["manifest"]

        def open_keys(self) -> list[str]:
            return sorted(k for k, b in self.manifest["branches"].items() if b["status"] == "open")

        def transition(self, call: Any, extra: int = 0) -> dict[str, Any]:
            self.moves += 1
            before = commits(self.project)
            result = call()
            assert commits(self.project) - before == len(result["transitions"]) + extra
            return result

        def refused(self, call: Any, error: type[GwError]) -> None:
            before = (tip(self.project), self.manifest)
            with pytest.raises(error):
                call()
            assert (tip(self.project), self.manifest) == before

        def ended(self) -> bool:
            return self.manifest["status"] in ("done", "stopped")

        def choices(self) -> list[str]:
            """The moves that make sense now (each also has refusals tried inside it), weighted to progress."""
            manifest = self.manifest
            busy = any(b["status"] in ("open", "waiting") for b in manifest["branches"].values())
            moves = []
            if self.open_keys():
                moves += ["submit"] * 4 + ["invalid", "block"] + (["wait"] if self.exchanges < 2 else [])
            if manifest["status"] == "blocked" and not busy:
                moves += ["resume"] * 3
            if steps.finished(manifest) and manifest["status"] == "running":
                moves += ["done-user", "done-publish"]
            return moves + (["stop"] if self.moves >= 12 or not moves else [])

        @precondition(lambda self: not self.ended())
        @rule(data=st.data())
        def act(self, data: Any) -> None:
            move = data.draw(st.sampled_from(self.choices()))
            manifest = self.manifest
            if move in ("submit", "invalid", "block", "wait"):
                keys = self.open_keys() if move != "wait" else [k for k in self.open_keys() if not steps.is_exchange(k)]
                if not keys:
                    return
                key = data.draw(st.sampled_from(keys))
            if move == "submit":
                answer(self.folder, key, {"status": "done", "fields": {"out": "response/response.md"}},
                       {"response.md": key})
                self.transition(lambda: steps.submit(self.wp, self.session, key))
                assert self.manifest["branches"][key]["status"] == "done"
            elif move == "invalid":  # a red gate: never advanced
                answer(self.folder, key, {"status": "done", "fields": {"out": "response/missing.md"}})
                self.refused(lambda: steps.submit(self.wp, self.session, key), Invalid)
            elif move == "wait":
                self.exchanges += 1
                answer(self.folder, key, {"status": "waiting", "fields": {},
                                          "awaiting": {"exchange": f"x{self.exchanges}", "operator": "user"}})
                self.transition(lambda: steps.submit(self.wp, self.session, key))
                assert f"{key}/x{self.exchanges}" in self.open_keys()
            elif move == "block":
                self.transition(lambda: steps.block(self.wp, self.session, key, "stuck"))
                assert self.manifest["status"] == "blocked"
                if any(b["status"] in ("open", "waiting") for b in self.manifest["branches"].values()):
                    self.refused(lambda: steps.resume(self.wp, self.session), Illegal)
            elif move == "resume":
                blocked = [k for k in steps.round_keys(manifest, manifest["current"])
                           if manifest["branches"][k]["status"] == "blocked"]
                self.transition(lambda: steps.resume(self.wp, self.session))
                after = self.manifest
                for number, key in enumerate(blocked, 1):  # no lost resume: each blocked branch re-entered
                    new = f"step-{manifest['current'] + 1}/parallel-{number}"
                    request = json.loads((self.folder / new / "request" / "request.json").read_text())
                    assert request["resume"] == key and after["steps"][new] == after["steps"][key]
                    assert new in self.open_keys()
            elif move.startswith("done"):
                route = move.partition("-")[2]
                self.transition(lambda: steps.done(self.wp, self.session, route=route), extra=1)
                assert self.manifest["status"] == "done" and not self.folder.exists()  # every route deletes it
            else:
                if not steps.finished(manifest):
                    self.refused(lambda: steps.done(self.wp, self.session), Illegal)
                self.transition(lambda: steps.stop(self.wp, self.session, reason="enough"), extra=1)
                assert self.manifest["status"] == "stopped"

        @precondition(lambda self: len(self.ids) < 3)
        @rule()
        def another_session_in_the_same_second(self) -> None:
            """The clock never moves here: every session is started in the same second by the same operator."""
            made = self.transition(lambda: steps.create(self.wp, new_item(self.wp, "more"), "feature"), extra=2)
            assert made["session"] not in self.ids
            self.ids.add(made["session"])

        @precondition(lambda self: self.ended())
        @rule(data=st.data())
        def after_the_end(self, data: Any) -> None:
            key = data.draw(st.sampled_from(sorted(self.manifest["branches"])))
            self.refused(lambda: steps.block(self.wp, self.session, key, "late"), Illegal)
            self.refused(lambda: steps.resume(self.wp, self.session), Illegal)

        @invariant()
        def manifest_holds(self) -> None:
            snapshot = self.wp.context().snapshot
            base = f"sessions/{self.session}"
            manifest = check_schema("state", json.loads(snapshot.blob(f"{base}/state.json") or b""), "recorded")
            if self.folder.exists():
                assert (self.folder / "state.json").read_bytes() == canonical(manifest)
            for key, digest in manifest["requests"].items():
                assert hashlib.sha256(snapshot.blob(f"{base}/{key}/request/request.json") or b"").hexdigest() == digest
                if self.folder.exists():
                    assert hashlib.sha256((self.folder / key / "request/request.json").read_bytes()).hexdigest() == digest
            for key, state in manifest["branches"].items():
                if state["status"] != "open" and key in manifest["responses"]:
                    recorded = snapshot.blob(f"{base}/{key}/response/response.json")
                    assert hashlib.sha256(recorded or b"").hexdigest() == manifest["responses"][key]

    return Lifecycle


@pytest.mark.slow
def test_lifecycle_state_machine(tmp_path: Path) -> None:
    from hypothesis import HealthCheck, settings
    from hypothesis.stateful import run_state_machine_as_test

    run_state_machine_as_test(lifecycle_machine(tmp_path), settings=settings(
        max_examples=4, stateful_step_count=16, deadline=None, derandomize=True,
        suppress_health_check=list(HealthCheck)))


# --- point 4: a write into another branch's response/ ----------------------------------------------


def _planted_world(plane: Workplane, project: Path) -> tuple[str, Path]:
    """Plan done, then the two parallel build branches open side by side (the feature chain)."""
    session = steps.create(plane, new_item(plane), "feature")["session"]
    folder = project / ".worktrees" / "sessions" / session
    answer(folder, "step-1/parallel-1", {"status": "done", "fields": {}}, {"response.md": "planned\n"})
    steps.submit(plane, session, "step-1/parallel-1")
    return session, folder


def test_a_file_planted_in_a_siblings_response_is_refused_at_the_siblings_submit(project: Path,
                                                                                 plane: Workplane) -> None:
    session, folder = _planted_world(plane, project)
    # Branch 2 writes its own answer, and plants a file in branch 1's response/ while both are open.
    answer(folder, "step-2/parallel-2", {"status": "done", "fields": {"code": "response/response.md"}},
           {"response.md": "two\n"})
    (folder / "step-2/parallel-1/response").mkdir(parents=True, exist_ok=True)
    (folder / "step-2/parallel-1/response/planted.md").write_text("not yours\n")
    answer(folder, "step-2/parallel-1", {"status": "done", "fields": {"code": "response/response.md"}},
           {"response.md": "one\n"})
    before = tip(project)
    done = run_gw(project, "step", "submit", session, "step-2/parallel-1", env={"GW_AGENT": "alice"})
    assert done.returncode == 5, done.stderr
    assert "step-2/parallel-1/response/planted.md" in done.stderr and len(done.stderr.strip().splitlines()) == 1
    assert tip(project) == before
    assert steps.read_session(plane, session)["manifest"]["branches"]["step-2/parallel-1"]["status"] == "open"
    # Registering the planted file is how its own branch claims it: then it is its own.
    answer(folder, "step-2/parallel-1", {"status": "done", "fields": {"code": "response/response.md",
                                                                      "extra": "response/planted.md"}})
    assert steps.submit(plane, session, "step-2/parallel-1")["already"] is False


def test_a_file_planted_in_a_siblings_response_is_refused_at_the_planters_submit(project: Path,
                                                                                 plane: Workplane) -> None:
    session, folder = _planted_world(plane, project)
    answer(folder, "step-2/parallel-1", {"status": "done", "fields": {"code": "response/response.md"}},
           {"response.md": "one\n"})  # branch 1 has answered (response.json last), not yet submitted
    (folder / "step-2/parallel-1/response/data").mkdir(exist_ok=True)
    (folder / "step-2/parallel-1/response/data/planted.md").write_text("not yours\n")
    answer(folder, "step-2/parallel-2", {"status": "done", "fields": {"code": "response/response.md"}},
           {"response.md": "two\n"})
    before = tip(project)
    with pytest.raises(Invalid, match="step-2/parallel-1/response/data/planted.md"):
        steps.submit(plane, session, "step-2/parallel-2")
    assert tip(project) == before
    with pytest.raises(Invalid, match="step-2/parallel-1/response/data/planted.md"):
        steps.submit(plane, session, "step-2/parallel-1")
    assert tip(project) == before
    (folder / "step-2/parallel-1/response/data/planted.md").unlink()
    steps.submit(plane, session, "step-2/parallel-2")
    assert steps.submit(plane, session, "step-2/parallel-1")["open"] == ["step-3/parallel-1"]
