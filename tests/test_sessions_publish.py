"""Multi-step sessions, second pass (issue 28): later source steps build on earlier ones, ``gw session done``
publishes every source branch or none, parallel branches may not touch the same file, handoff by kind,
``done`` on every route. Real repositories and real session worktrees throughout."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from conftest import Clock, git
from gitwork.errors import Illegal, Invalid, NonFastForward
from gitwork.sessions import commit as session_commit
from gitwork.sessions import steps
from gitwork.workplane import Workplane
from test_sessions_steps import T0, answer, check_invariants, make_project, new_item, on_ref
from test_sessions_steps import person_identity  # noqa: F401  (autouse: git's identity for the person)

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
