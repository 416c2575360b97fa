"""Multi-step sessions, second pass (issue 28): later source steps build on earlier ones, ``gw session done``
publishes every source branch or none, parallel branches may not touch the same file, handoff by kind,
``done`` on every route. Real repositories and real session worktrees throughout."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest

from conftest import Clock, git
from gitwork.errors import Illegal, Invalid, NonFastForward
from gitwork.sessions import commit as session_commit
from gitwork.sessions import steps
from gitwork.workplane import Workplane
from test_sessions_steps import (
    T0,
    answer,
    check_invariants,
    make_project,
    new_item,
    on_ref,
    person_identity,  # noqa: F401  (autouse: git's identity for the person)
)

RULES = """sessions:
  operators:
    planner: {command: [python3, plan.py]}
    coder: {command: [python3, code.py], writes_source: true}
    reviewer: {command: [python3, review.py]}
  steps:
    plan: {operator: planner}
    make: {operator: coder}
    polish: {operator: coder}
    build: {operator: coder, parallel: 2}
    review: {operator: reviewer}
  chains:
    serial: [plan, make, polish]
    fanout: [plan, build, review]
    chain4: [plan, build, polish, review]
"""


@pytest.fixture
def project(tmp_path: Path) -> Path:
    path = make_project(tmp_path / "proj", RULES)
    (path / "b.txt").write_text("beta\n")
    git(path, "add", "b.txt")
    git(path, "commit", "-q", "-m", "b")
    return path


@pytest.fixture
def plane(project: Path):  # type: ignore[no-untyped-def]
    wp = Workplane(str(project), now=Clock(T0), agent="alice")
    wp.do("init")
    yield wp
    wp.close()


def folder_of(project: Path, session: str) -> Path:
    return project / ".worktrees" / "sessions" / session


def request_of(project: Path, session: str, key: str) -> dict[str, Any]:
    return json.loads((folder_of(project, session) / key / "request" / "request.json").read_text())


def plan(plane: Workplane, project: Path, session: str) -> None:
    answer(folder_of(project, session), "step-1/parallel-1",
           {"status": "done", "fields": {"plan": "response/data/plan.md"}}, {"data/plan.md": "the plan\n"})
    steps.submit(plane, session, "step-1/parallel-1")


def build(plane: Workplane, project: Path, session: str, key: str, files: dict[str, str],
          submit: bool = True) -> dict[str, Any]:
    """What a source-writing operator does: edit its worktree, commit the declared files once, answer."""
    source = request_of(project, session, key)["source"]
    for name, text in files.items():
        (Path(source["worktree"]) / name).write_text(text)
    made = session_commit(plane, sorted(files), f"work of {key}", session=source["session"], cwd=source["worktree"])
    answer(folder_of(project, session), key, {"status": "done", "fields": {"code": "response/response.md"},
                                              "commits": [made["commit"]]}, {"response.md": f"{key}\n"})
    if submit:
        steps.submit(plane, session, key)
    return made


def reflog(project: Path, ref: str = "main") -> list[str]:
    return git(project, "reflog", "show", "--format=%H", ref).splitlines()


# --- 1: later source steps build on earlier ones ------------------------------------------------------


def test_a_later_source_step_starts_from_the_earlier_steps_commit(project: Path, plane: Workplane) -> None:
    main = git(project, "rev-parse", "main")
    session = steps.create(plane, new_item(plane), "serial")["session"]
    plan(plane, project, session)
    first = build(plane, project, session, "step-2/parallel-1", {"a.txt": "alpha, made\n"})
    request = request_of(project, session, "step-3/parallel-1")
    source = request["source"]
    # The worktree of step 3 holds step 2's committed source, and the request pins it.
    assert source["base"] == first["commit"]
    assert source["pins"] == [{"from": "step-2/parallel-1", "commit": first["commit"]}]
    assert (Path(source["worktree"]) / "a.txt").read_text() == "alpha, made\n"
    manifest = check_invariants(project, session)
    assert manifest["branches"]["step-2/parallel-1"]["base"] == main
    assert manifest["branches"]["step-3/parallel-1"]["base"] == first["commit"]
    second = build(plane, project, session, "step-3/parallel-1", {"b.txt": "beta, polished\n"})
    changes = (folder_of(project, session) / "step-3/parallel-1/response/changes.md").read_text()
    assert f"Base: {first['commit']}" in changes
    done = steps.done(plane, session)
    assert done["status"] == "done"
    assert git(project, "rev-parse", "main") == second["commit"]  # a fast-forward over both
    assert git(project, "show", "main:a.txt") == "alpha, made" and git(project, "show", "main:b.txt") == "beta, polished"


def test_a_response_made_against_another_base_is_refused(project: Path, plane: Workplane) -> None:
    session = steps.create(plane, new_item(plane), "serial")["session"]
    plan(plane, project, session)
    build(plane, project, session, "step-2/parallel-1", {"a.txt": "alpha, made\n"})
    source = request_of(project, session, "step-3/parallel-1")["source"]
    # The operator worked from main's head instead of the pinned base (its session record says so).
    manifest_path = project / ".worktrees" / "sessions" / source["session"] / "session.yaml"
    git(Path(source["worktree"]), "reset", "-q", "--hard", "main")
    text = manifest_path.read_text().replace(source["base"], git(project, "rev-parse", "main"))
    manifest_path.write_text(text)
    made = build(plane, project, session, "step-3/parallel-1", {"b.txt": "beta, stale\n"}, submit=False)
    before = git(project, "rev-parse", "refs/gitwork/state")
    with pytest.raises(Invalid, match="pinned"):
        steps.submit(plane, session, "step-3/parallel-1")
    assert git(project, "rev-parse", "refs/gitwork/state") == before
    assert made["commit"]


# --- 2: done publishes all branches or none ------------------------------------------------------------


def test_done_lands_every_parallel_branch_in_one_ref_update(project: Path, plane: Workplane) -> None:
    session = steps.create(plane, new_item(plane), "fanout")["session"]
    plan(plane, project, session)
    one = build(plane, project, session, "step-2/parallel-1", {"a.txt": "alpha, A\n"})
    two = build(plane, project, session, "step-2/parallel-2", {"b.txt": "beta, B\n"})
    answer(folder_of(project, session), "step-3/parallel-1", {"status": "done", "fields": {}})
    steps.submit(plane, session, "step-3/parallel-1")
    moves = len(reflog(project))
    steps.done(plane, session)
    assert len(reflog(project)) == moves + 1  # ONE atomic ref update for both branches
    head = git(project, "rev-parse", "main")
    for commit in (one["commit"], two["commit"]):
        git(project, "merge-base", "--is-ancestor", commit, head)
    assert git(project, "show", "main:a.txt") == "alpha, A" and git(project, "show", "main:b.txt") == "beta, B"


def test_a_conflict_at_done_lands_nothing_blocks_and_resumes(project: Path, plane: Workplane) -> None:
    item = new_item(plane)
    session = steps.create(plane, item, "fanout")["session"]
    plan(plane, project, session)
    build(plane, project, session, "step-2/parallel-1", {"a.txt": "alpha, A\n"})
    build(plane, project, session, "step-2/parallel-2", {"b.txt": "beta, B\n"})
    answer(folder_of(project, session), "step-3/parallel-1", {"status": "done", "fields": {}})
    steps.submit(plane, session, "step-3/parallel-1")
    # main moves meanwhile, in a way that conflicts with branch 2 only.
    (project / "b.txt").write_text("beta, on main\n")
    git(project, "commit", "-q", "-am", "main moves")
    moved = git(project, "rev-parse", "main")
    with pytest.raises(NonFastForward, match="b.txt") as refused:
        steps.done(plane, session)
    assert refused.value.details["conflicts"] == ["b.txt"]
    assert git(project, "rev-parse", "main") == moved  # branch 1 did not land alone
    manifest = check_invariants(project, session)
    assert manifest["status"] == "blocked" and manifest["conflicts"] == ["b.txt"]
    assert plane.lease(item).state == "active" and plane.item(item).status != "done"
    subjects = git(project, "log", "--format=%s", "refs/gitwork/state").splitlines()
    assert not any(s.startswith("publish ") for s in subjects)
    with pytest.raises(Illegal):
        steps.done(plane, session)  # blocked: resume first
    git(project, "revert", "--no-edit", "HEAD")  # the person resolves it on main
    resumed = steps.resume(plane, session)
    assert resumed["status"] == "running" and "conflicts" not in resumed["manifest"]
    done = steps.done(plane, session)
    assert done["status"] == "done" and plane.item(item).status == "done"
    assert git(project, "show", "main:a.txt") == "alpha, A" and git(project, "show", "main:b.txt") == "beta, B"


def test_parallel_branches_touching_the_same_file_are_refused_at_submit(project: Path, plane: Workplane) -> None:
    session = steps.create(plane, new_item(plane), "fanout")["session"]
    plan(plane, project, session)
    build(plane, project, session, "step-2/parallel-1", {"a.txt": "alpha, A\n"})
    build(plane, project, session, "step-2/parallel-2", {"a.txt": "alpha, B\n", "b.txt": "beta, B\n"}, submit=False)
    before = git(project, "rev-parse", "refs/gitwork/state")
    with pytest.raises(Invalid, match=r"a\.txt.*step-2/parallel-1"):
        steps.submit(plane, session, "step-2/parallel-2")
    assert git(project, "rev-parse", "refs/gitwork/state") == before


# --- 3: handoff by kind; the 4-step chain with a fan-out, from gw session create to a published main ------


def test_handoff_names_the_nearest_earlier_producer_of_each_kind(project: Path, plane: Workplane) -> None:
    session = steps.create(plane, new_item(plane), "fanout")["session"]
    plan(plane, project, session)
    for key, name in (("step-2/parallel-1", "a.txt"), ("step-2/parallel-2", "b.txt")):
        build(plane, project, session, key, {name: f"{key}\n"})
    request = request_of(project, session, "step-3/parallel-1")
    # the review gets both branches' code (the nearest producer of `code` fanned out) AND step 1's plan
    assert request["inputs"] == [
        {"name": "code", "from": "step-2/parallel-1", "path": "step-2/parallel-1/response/response.md"},
        {"name": "code", "from": "step-2/parallel-2", "path": "step-2/parallel-2/response/response.md"},
        {"name": "plan", "from": "step-1/parallel-1", "path": "step-1/parallel-1/response/data/plan.md"}]


def test_needs_limits_the_kinds_handed_on(tmp_path: Path) -> None:
    rules = RULES.replace("review: {operator: reviewer}", "review: {operator: reviewer, needs: [plan]}")
    project = make_project(tmp_path / "proj", rules)
    wp = Workplane(str(project), now=Clock(T0), agent="alice")
    wp.do("init")
    try:
        session = steps.create(wp, new_item(wp), "fanout")["session"]
        plan(wp, project, session)
        build(wp, project, session, "step-2/parallel-1", {"a.txt": "A\n"})
        build(wp, project, session, "step-2/parallel-2", {"new.txt": "B\n"})
        assert [i["name"] for i in request_of(project, session, "step-3/parallel-1")["inputs"]] == ["plan"]
    finally:
        wp.close()


def cli(project: Path, *args: str) -> dict[str, Any]:
    """``gw ARGS --json`` through the CLI's entry point in this process (``gw_here``: the same parsing and
    commands, the hooks and git still their own processes) without a 0.2-0.4 s interpreter start each."""
    from conftest import gw_here

    done = gw_here(project, *args, "--json", env={"GW_AGENT": "alice"})
    assert done.returncode == 0, (args, done.stdout, done.stderr)
    return json.loads(done.stdout) if done.stdout.strip() else {}


def test_four_step_chain_with_a_fan_out_from_create_to_a_published_main(tmp_path: Path) -> None:
    """plan -> build A || build B (source) -> polish (source, on both) -> review, all through `gw`."""
    project = make_project(tmp_path / "proj", RULES)
    cli(project, "init")
    item = cli(project, "new", "Four steps")["item"]
    session = cli(project, "session", "create", item, "--chain", "chain4")["session"]
    folder = folder_of(project, session)
    answer(folder, "step-1/parallel-1", {"status": "done", "fields": {"plan": "response/data/plan.md"}},
           {"data/plan.md": "the plan\n"})
    cli(project, "step", "submit", session, "step-1/parallel-1")
    made = {}
    for key, name in (("step-2/parallel-1", "a.txt"), ("step-2/parallel-2", "b.txt")):
        request = request_of(project, session, key)
        assert [i["name"] for i in request["inputs"]] == ["plan"]
        tree = Path(request["source"]["worktree"])
        (tree / name).write_text(f"written by {key}\n")
        made[key] = cli(tree, "session", "commit", request["source"]["session"], "--file", name, "-m", key)["commit"]
        answer(folder, key, {"status": "done", "fields": {"code": "response/response.md"}, "commits": [made[key]]},
               {"response.md": f"{key}\n"})
        cli(project, "step", "submit", session, key)
    polish = request_of(project, session, "step-3/parallel-1")
    assert [p["commit"] for p in polish["source"]["pins"]] == [made["step-2/parallel-1"], made["step-2/parallel-2"]]
    assert {(i["name"], i["from"]) for i in polish["inputs"]} == {
        ("code", "step-2/parallel-1"), ("code", "step-2/parallel-2"), ("plan", "step-1/parallel-1")}
    tree = Path(polish["source"]["worktree"])
    assert (tree / "a.txt").read_text() == "written by step-2/parallel-1\n"  # it starts from both branches
    assert (tree / "b.txt").read_text() == "written by step-2/parallel-2\n"
    (tree / "c.txt").write_text("polished\n")
    last = cli(tree, "session", "commit", polish["source"]["session"], "--file", "c.txt", "-m", "polish")["commit"]
    answer(folder, "step-3/parallel-1", {"status": "done", "fields": {"code": "response/response.md"},
                                         "commits": [last]}, {"response.md": "polished\n"})
    cli(project, "step", "submit", session, "step-3/parallel-1")
    review = request_of(project, session, "step-4/parallel-1")
    assert [(i["name"], i["from"]) for i in review["inputs"]] == [("code", "step-3/parallel-1"),
                                                                  ("plan", "step-1/parallel-1")]
    answer(folder, "step-4/parallel-1", {"status": "done", "fields": {}})
    cli(project, "step", "submit", session, "step-4/parallel-1")
    moves = len(reflog(project))
    cli(project, "session", "done", session)
    assert len(reflog(project)) == moves + 1
    assert git(project, "rev-parse", "main") == last  # polish holds everything: a fast-forward
    for name, text in (("a.txt", "written by step-2/parallel-1"), ("b.txt", "written by step-2/parallel-2"),
                       ("c.txt", "polished")):
        assert git(project, "show", f"main:{name}") == text
    manifest = check_invariants(project, session)
    assert manifest["status"] == "done" and not folder.exists()
    assert cli(project, "show", item)["status"] == "done"


# --- 5: done on every route ends the session as the spec says ----------------------------------------------


@pytest.mark.parametrize("route", ["user", "external"])
def test_done_on_a_person_route_releases_the_lease_deletes_the_folder_and_keeps_the_audit(
        project: Path, plane: Workplane, route: str) -> None:
    item = new_item(plane)
    session = steps.create(plane, item, "fanout")["session"]
    plan(plane, project, session)
    build(plane, project, session, "step-2/parallel-1", {"a.txt": "A\n"})
    build(plane, project, session, "step-2/parallel-2", {"b.txt": "B\n"})
    answer(folder_of(project, session), "step-3/parallel-1", {"status": "done", "fields": {}})
    steps.submit(plane, session, "step-3/parallel-1")
    main = git(project, "rev-parse", "main")
    ended = steps.done(plane, session, route=route)
    assert ended["status"] == "done" and ended["folder"] is None and not folder_of(project, session).exists()
    assert plane.lease(item).state == "released" and plane.item(item).status == "done"
    assert git(project, "rev-parse", "main") == main  # nothing published on a person's route
    manifest = check_invariants(project, session)
    assert manifest["route"] == route and on_ref(project, f"sessions/{session}/step-3/parallel-1/response/response.json")
    # the source branches were not published: their unpublished commit-once sessions are dropped on the record
    subjects = git(project, "log", "--format=%s", "refs/gitwork/state").splitlines()
    assert sum(s.startswith("session-drop ") for s in subjects) == 2
    again = steps.done(plane, session, route=route)  # a re-run converges, records nothing
    assert again["status"] == "done" and git(project, "log", "--format=%s", "refs/gitwork/state").splitlines() == subjects


# --- 8: review steps ------------------------------------------------------------------------------------------

REVIEW_RULES = RULES.replace("  chains:\n", """    check: {operator: reviewer, distinct_operator: true, max_rounds: 1, seal: true}
    selfcheck: {operator: planner, distinct_operator: true}
  chains:
    reviewed: [plan, build, check]
    selfreviewed: [plan, selfcheck]
""")


def test_a_review_step_is_another_operator_bounded_and_seals_what_it_reviewed(tmp_path: Path) -> None:
    project = make_project(tmp_path / "proj", REVIEW_RULES)
    wp = Workplane(str(project), now=Clock(T0), agent="alice")
    wp.do("init")
    try:
        item = new_item(wp)
        before = git(project, "rev-parse", "refs/gitwork/state")
        with pytest.raises(Invalid, match="distinct_operator"):
            steps.create(wp, item, "selfreviewed")  # the planner would review its own plan
        assert git(project, "rev-parse", "refs/gitwork/state") == before
        session = steps.create(wp, item, "reviewed")["session"]
        plan(wp, project, session)
        build(wp, project, session, "step-2/parallel-1", {"a.txt": "A\n"})
        build(wp, project, session, "step-2/parallel-2", {"b.txt": "B\n"})
        key = "step-3/parallel-1"
        request = request_of(project, session, key)
        folder = folder_of(project, session)
        for entry in request["inputs"]:  # each artifact handed over by the hash it was recorded with
            assert len(entry["sha256"]) == 64
        # one question/answer round is allowed, a second is refused
        answer(folder, key, {"status": "waiting", "fields": {}, "awaiting": {"exchange": "q1", "operator": "user"}})
        steps.submit(wp, session, key)
        answer(folder, f"{key}/q1", {"status": "done", "fields": {}})
        steps.submit(wp, session, f"{key}/q1")
        answer(folder, key, {"status": "waiting", "fields": {}, "awaiting": {"exchange": "q2", "operator": "user"}})
        with pytest.raises(Invalid, match="max_rounds"):
            steps.submit(wp, session, key)
        answer(folder, key, {"status": "done", "fields": {"verdict": "response/response.md"}},
               {"response.md": "approved\n"})
        steps.submit(wp, session, key)
        sealed = (folder / key / "response" / "sealed.sha256").read_text().splitlines()
        assert sorted(line.split(" ", 1)[1] for line in sealed) == sorted(i["path"] for i in request["inputs"])
        assert {line.split(" ", 1)[0] for line in sealed} == {i["sha256"] for i in request["inputs"]}
        listing = (on_ref(project, f"sessions/{session}/{key}/response/files.sha256") or b"").decode()
        assert "response/sealed.sha256" in listing  # the seal is part of the recorded response
    finally:
        wp.close()


def test_chained_source_steps_with_the_local_hooks_installed(project: Path, plane: Workplane) -> None:
    """The commit-once hooks let a later source step commit once on a base holding earlier, still
    unpublished, commits of the same session (after a fan-out: their merge), and still refuse a second
    commit there."""
    from conftest import run_gw

    installed = run_gw(project, "hooks", "install")
    assert installed.returncode == 0, installed.stderr
    session = steps.create(plane, new_item(plane), "chain4")["session"]
    plan(plane, project, session)
    build(plane, project, session, "step-2/parallel-1", {"a.txt": "alpha, A\n"})
    build(plane, project, session, "step-2/parallel-2", {"b.txt": "beta, B\n"})
    last = build(plane, project, session, "step-3/parallel-1", {"c.txt": "polished\n"})
    tree = Path(request_of(project, session, "step-3/parallel-1")["source"]["worktree"])
    (tree / "c.txt").write_text("again\n")
    again = subprocess.run(["git", "commit", "-qam", "second"], cwd=tree, capture_output=True, text=True)
    assert again.returncode != 0 and "commit-once" in again.stderr
    git(tree, "checkout", "-q", "--", "c.txt")
    answer(folder_of(project, session), "step-4/parallel-1", {"status": "done", "fields": {}})
    steps.submit(plane, session, "step-4/parallel-1")
    steps.done(plane, session)
    assert git(project, "rev-parse", "main") == last["commit"]
    assert git(project, "show", "main:a.txt") == "alpha, A" and git(project, "show", "main:c.txt") == "polished"


def _gw(project: Path, *args: str, crash: str | None = None) -> subprocess.CompletedProcess[str]:
    from conftest import run_gw

    env = {"GW_AGENT": "alice", "GW_NO_AUTO_GC": "1", **({"GW_CRASH_AT": crash} if crash else {})}
    return run_gw(project, *args, env=env, timeout=120)


def test_gw_session_done_conflict_is_exit_13_one_line_and_a_kill_9_while_landing_converges(
        project: Path, plane: Workplane) -> None:
    item = new_item(plane)
    session = steps.create(plane, item, "fanout")["session"]
    plan(plane, project, session)
    build(plane, project, session, "step-2/parallel-1", {"a.txt": "alpha, A\n"})
    build(plane, project, session, "step-2/parallel-2", {"b.txt": "beta, B\n"})
    answer(folder_of(project, session), "step-3/parallel-1", {"status": "done", "fields": {}})
    steps.submit(plane, session, "step-3/parallel-1")
    plane.close()
    (project / "b.txt").write_text("beta, on main\n")
    git(project, "commit", "-q", "-am", "main moves")
    moved = git(project, "rev-parse", "main")
    refused = _gw(project, "session", "done", session)
    assert refused.returncode == 13 and "b.txt" in refused.stderr and len(refused.stderr.strip().splitlines()) == 1
    assert "Traceback" not in refused.stderr and git(project, "rev-parse", "main") == moved
    assert json.loads(_gw(project, "session", "status", session, "--json").stdout)["status"] == "blocked"
    git(project, "revert", "--no-edit", "HEAD")
    assert _gw(project, "step", "resume", session).returncode == 0
    reverted = git(project, "rev-parse", "main")
    for crash in ("session-publish-landed", "session-publish-recorded"):
        died = _gw(project, "session", "done", session, crash=crash)
        assert died.returncode == -9, died.stderr
    landed = git(project, "rev-parse", "main")
    assert landed != reverted
    done = _gw(project, "session", "done", session)
    assert done.returncode == 0, done.stderr
    assert git(project, "rev-parse", "main") == landed  # landed once: the re-runs only recorded
    subjects = git(project, "log", "--format=%s", "refs/gitwork/state").splitlines()
    for source in (f"{session}-s2-p1", f"{session}-s2-p2"):
        assert sum(s.startswith(f"publish {source} ") for s in subjects) == 1, subjects[:8]
    assert subjects[0].startswith(f"done {item}")
