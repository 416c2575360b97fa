"""Items that wait on events (issue 29 point 5, issue 25's ``defer --until``; docs/everyday.md, "Waiting on
events"): a timer, a ref reachable from another, a command's exit.

Real repositories, real git (``merge-base``, ``fetch`` from a bare remote), the real coordinator
(``gw coordinate --once`` in a child process), real commands run by it, and forgeries made with git
plumbing and pushed with plain ``git push`` to an arbiter with gitwork's server hook. Time: freezegun in
this process, ``GW_NOW`` for ``gw`` (in-process ``gw_here`` and child processes alike).
"""

from __future__ import annotations

import datetime as dt
import json
import os
import subprocess
from pathlib import Path
from typing import Any

import freezegun
import pytest

from conftest import git, gw_here, make_repo, replace_blob, run_gw, tip
from gitwork import codec
from gitwork.cli.main import main
from gitwork.hooks_install import install_server
from gitwork.workplane import Workplane

T0 = "2030-01-01T12:00:00Z"
LATER = "2030-01-01T15:00:00Z"  # three hours on
ILLEGAL, INVALID, FORBIDDEN = 6, 5, 77


def gw(repo: Path, *args: str, at: str = T0, who: str = "alice") -> subprocess.CompletedProcess[str]:
    return gw_here(repo, *args, env={"GW_NOW": at, "GW_AGENT": who})


def js(done: subprocess.CompletedProcess[str]) -> Any:
    assert done.stdout, done.stderr
    return json.loads(done.stdout)


def new(repo: Path, title: str, at: str = T0) -> str:
    done = gw(repo, "new", title, "--json", at=at)
    assert done.returncode == 0, done.stderr
    return str(js(done)["item"])


def ready(repo: Path, at: str = T0) -> list[str]:
    return [row["item"] for row in js(gw(repo, "ready", "--json", at=at))]


@pytest.fixture
def plane(tmp_path: Path) -> Path:
    """A repository with a code history (main, and a branch ``feature`` not merged) and gitwork's state."""
    repo = make_repo(tmp_path / "repo")
    git(repo, "checkout", "-q", "-b", "main")
    for who in ("user.name", "user.email"):
        git(repo, "config", who, "tester@example.com")
    git(repo, "commit", "-q", "--allow-empty", "-m", "one")
    git(repo, "checkout", "-q", "-b", "feature")
    git(repo, "commit", "-q", "--allow-empty", "-m", "the feature")
    git(repo, "checkout", "-q", "main")
    assert gw(repo, "init").returncode == 0
    return repo


# --- timers ------------------------------------------------------------------------------------------


def test_a_deferred_item_is_not_ready_nor_claimable_until_its_time_passes_with_no_commit(plane: Path) -> None:
    later, now_ready = new(plane, "later"), new(plane, "now")
    done = gw(plane, "defer", later, "--until", "2h", "--json")
    assert done.returncode == 0, done.stderr
    assert js(done)["until"] == "2030-01-01T14:00:00Z"  # resolved against the clock, recorded as an instant
    assert ready(plane) == [now_ready]
    before = tip(plane)
    refused = gw(plane, "claim", later)
    assert refused.returncode == ILLEGAL, refused.stderr
    assert "waiting on timer until 2030-01-01T14:00:00Z" in refused.stderr and "--force" in refused.stderr
    assert tip(plane) == before
    claimed = gw(plane, "claim", "--next", "--json", who="bob")
    assert js(claimed)["item"] == now_ready  # claim --next never offers the deferred item
    blocked = gw(plane, "blocked")
    assert "waiting on: timer until 2030-01-01T14:00:00Z" in blocked.stdout, blocked.stdout
    assert "waiting:   1. timer until 2030-01-01T14:00:00Z" in gw(plane, "show", later).stdout
    # The time passes: ready again, with no commit made for it.
    moved = tip(plane)
    assert later in ready(plane, at=LATER)
    assert later not in [e["item"] for e in js(gw(plane, "blocked", "--json", at=LATER))]
    assert "(passed)" in gw(plane, "show", later, at=LATER).stdout
    assert tip(plane) == moved
    assert gw(plane, "claim", later, at=LATER).returncode == 0


def test_claim_force_overrides_a_wait_and_undefer_ends_the_timer(plane: Path) -> None:
    one, two = new(plane, "one"), new(plane, "two")
    assert gw(plane, "defer", one, "--until", "tomorrow").returncode == 0
    assert js(gw(plane, "show", one, "--json"))["waits"][0]["until"] == "2030-01-02T00:00:00Z"  # next UTC midnight
    assert gw(plane, "claim", one, "--force").returncode == 0
    assert gw(plane, "defer", two, "--until", "2030-02-01").returncode == 0
    assert two not in ready(plane)
    assert gw(plane, "undefer", two).returncode == 0
    assert two in ready(plane)
    types = [e["type"] for e in js(gw(plane, "log", two, "--json"))["events"]] if "events" in gw(
        plane, "log", two, "--json").stdout else [e["type"] for e in js(gw(plane, "history", two, "--json"))]
    assert "deferred" in types and "undeferred" in types


@pytest.mark.parametrize("until", ["2029-12-31T00:00:00Z", "2030-01-01", "soon", "0s", "-2h", "2030-13-45", "9" * 70])
def test_defer_refuses_a_time_not_in_the_future_or_not_a_time_with_5_and_changes_nothing(plane: Path, until: str) -> None:
    item = new(plane, "one")
    before = tip(plane)
    done = gw(plane, "defer", item, f"--until={until}")
    assert done.returncode == INVALID, done.stderr
    assert done.stderr.count("\n") == 1 and "Traceback" not in done.stderr, done.stderr
    assert tip(plane) == before
    if until == "soon":
        assert gw(plane, "undefer", item).returncode == INVALID  # not deferred
        assert tip(plane) == before


def test_defer_under_freezegun_records_the_instant_so_a_replay_means_the_same_time(plane: Path) -> None:
    with freezegun.freeze_time("2030-01-01 12:00:00") as frozen:
        with Workplane(str(plane), agent="alice") as wp:
            item = wp.do("new", title="timed").result["item"]
            applied = wp.do("defer", item=item, until="1h30m")
            assert applied.command["until"] == "2030-01-01T13:30:00Z"
            assert item not in [r[0] for r in wp.ready()]
            frozen.tick(dt.timedelta(minutes=91))
            assert item in [r[0] for r in wp.ready()]


# --- refs --------------------------------------------------------------------------------------------


def test_a_ref_wait_ends_by_one_command_once_git_finds_the_ref_merged(plane: Path) -> None:
    item = new(plane, "ship after the PR")
    assert gw(plane, "wait", item, "--ref", "feature", "--reachable-from", "main").returncode == 0
    assert item not in ready(plane)
    assert "waiting on: ref feature reachable from main" in gw(plane, "blocked").stdout
    claim = gw(plane, "claim", item)
    assert claim.returncode == ILLEGAL and "ref feature reachable from main" in claim.stderr
    before = tip(plane)
    checked = js(gw(plane, "waits", "check", "--json"))["checked"]
    assert [c["action"] for c in checked] == ["pending"] and tip(plane) == before  # not merged: no commit
    git(plane, "merge", "-q", "--no-edit", "feature")
    checked = js(gw(plane, "waits", "check", "--json"))["checked"]
    assert [c["action"] for c in checked] == ["satisfied"]
    assert git(plane, "rev-list", "--count", f"{before}..refs/gitwork/state") == "1"  # the outcome: one commit
    assert item in ready(plane)
    history = js(gw(plane, "history", item, "--json"))
    events = history["events"] if isinstance(history, dict) else history
    ended = [e for e in events if e["type"] == "wait-ended"]
    assert [e["type"] for e in events if e["type"].startswith("wait")] == ["wait", "wait-ended"]
    assert ended[0]["outcome"] == "satisfied" and ended[0]["commit"] == git(plane, "rev-parse", "feature")
    assert "wait-ended" in gw(plane, "log", item).stdout


@pytest.mark.parametrize("args", [["--ref=-x"], ["--ref", "a..b"], ["--ref", "feature", "--every", "1m"],
                                  ["--ref", "feature", "--remote", "bad name"], [],
                                  ["--ref", "feature", "--command", "true"], ["--command", "true", "--remote", "o"]])
def test_a_bad_wait_is_refused_with_5_and_changes_nothing(plane: Path, args: list[str]) -> None:
    item = new(plane, "one")
    before = tip(plane)
    done = gw(plane, "wait", item, *args)
    assert done.returncode == INVALID, done.stderr
    assert "Traceback" not in done.stderr and tip(plane) == before


def test_the_coordinator_fetches_both_refs_from_a_remote_and_records_the_merge(tmp_path: Path) -> None:
    code = make_repo(tmp_path / "code.git", bare=True)
    dev = make_repo(tmp_path / "dev")
    for key, value in (("user.name", "dev"), ("user.email", "dev@example.com")):
        git(dev, "config", key, value)
    git(dev, "checkout", "-q", "-b", "main")
    git(dev, "commit", "-q", "--allow-empty", "-m", "one")
    git(dev, "checkout", "-q", "-b", "pr-12")
    git(dev, "commit", "-q", "--allow-empty", "-m", "the change")
    git(dev, "remote", "add", "origin", str(code))
    git(dev, "push", "-q", "origin", "main", "pr-12")
    plane = tmp_path / "plane"
    subprocess.run(["git", "clone", "-q", "--single-branch", "-b", "main", str(code), str(plane)], check=True)
    assert gw(plane, "init").returncode == 0
    item = new(plane, "after pr 12")
    assert gw(plane, "wait", item, "--ref", "pr-12", "--remote", "origin").returncode == 0

    def coordinate(at: str) -> list[dict[str, Any]]:
        done = run_gw(plane, "coordinate", "--once", "--json", env={"GW_AGENT": "alice", "GW_NOW": at})
        assert done.returncode == 0, done.stderr
        return [a for a in json.loads(done.stdout)["actions"] if a["action"].startswith("wait-")]

    first = coordinate(T0)
    assert [a["action"] for a in first] == ["wait-pending"] and "is not reachable from origin's main" in first[0]["reason"]
    git(dev, "checkout", "-q", "main")
    git(dev, "merge", "-q", "--no-ff", "--no-edit", "pr-12")
    git(dev, "push", "-q", "origin", "main")
    # The next pass does not fetch again before the back-off says (a coordinator passes every 5 s).
    assert [a["reason"] for a in coordinate("2030-01-01T12:00:05Z")] == ["next check at 2030-01-01T12:00:30Z"]
    # What a checker killed during its fetch leaves (its process gone), and a live checker's refs.
    gone = subprocess.Popen(["true"])
    gone.wait()
    head = git(plane, "rev-parse", "HEAD").strip()
    for pid in (gone.pid, os.getpid()):
        git(plane, "update-ref", f"refs/gitwork-waits/{pid}/target", head)
    assert [a["action"] for a in coordinate("2030-01-01T12:00:30Z")] == ["wait-satisfied"]
    assert item in ready(plane)
    # The refs of the check are gone, and the dead checker's too; a live checker's stay.
    assert git(plane, "for-each-ref", "--format=%(refname)", "refs/gitwork-waits").split() == [
        f"refs/gitwork-waits/{os.getpid()}/target"]


# --- commands ----------------------------------------------------------------------------------------


def roles(repo: Path, workplane: str = "") -> None:
    (repo / ".workplane").write_text("admins: [lead]\nagents: [bot]\n" + workplane)


def test_only_admins_and_the_owner_declare_a_command_wait_and_agents_never(plane: Path) -> None:
    roles(plane)
    item = new(plane, "gated")  # created by alice, a person: its owner when none is named
    other = gw(plane, "new", "owned", "--owner", "bot", "--json", who="lead")
    owned_by_bot = js(other)["item"]
    before = tip(plane)
    for who, target in (("bot", item), ("carol", item), ("bot", owned_by_bot)):
        done = gw(plane, "wait", target, "--command", "true", who=who)
        assert done.returncode == FORBIDDEN, (who, done.stderr)
        assert tip(plane) == before
    assert gw(plane, "wait", item, "--command", "true", who="alice").returncode == 0  # the owner
    assert gw(plane, "wait", owned_by_bot, "--command", "true", who="lead").returncode == 0  # an admin
    # Ending a wait is the declarer's or an admin's: not an agent's, not another person's.
    before = tip(plane)
    for who in ("bot", "carol"):
        assert gw(plane, "unwait", item, "1", who=who).returncode == FORBIDDEN
    assert tip(plane) == before
    assert gw(plane, "unwait", item, "1", who="lead").returncode == 0


def test_the_coordinator_polls_an_allowed_command_with_back_off_until_it_exits_0(plane: Path) -> None:
    roles(plane, "wait_commands:\n  - sh -c *\n")
    item = new(plane, "after CI")
    check = 'echo run >> runs.log; echo "not yet"; test -e ci-passed'
    assert gw(plane, "wait", item, "--command", f"sh -c '{check}'", "--every", "1m", who="lead").returncode == 0

    def coordinate(at: str, process: bool = False) -> list[dict[str, Any]]:
        """``gw coordinate --once``: in a child process, or (the same entry point) in this one."""
        args, env = ("coordinate", "--once", "--json"), {"GW_AGENT": "lead", "GW_NOW": at}
        done = run_gw(plane, *args, env=env) if process else gw_here(plane, *args, env=env)
        assert done.returncode == 0, done.stderr
        return [a for a in json.loads(done.stdout)["actions"] if a["action"].startswith("wait-")]

    first = coordinate(T0, process=True)
    assert [a["action"] for a in first] == ["wait-pending"] and first[0]["code"] == 1
    assert "next try at 2030-01-01T12:01:00Z" in first[0]["reason"]
    assert coordinate("2030-01-01T12:00:30Z")[0]["reason"].startswith("next try at")  # not due: not run
    assert (plane / "runs.log").read_text().count("run") == 1
    second = coordinate("2030-01-01T12:01:00Z")
    assert "next try at 2030-01-01T12:03:00Z" in second[0]["reason"]  # backed off: twice every
    (plane / "ci-passed").write_text("")
    before = tip(plane)
    assert [a["action"] for a in coordinate("2030-01-01T12:03:00Z", process=True)] == ["wait-satisfied"]
    assert item in ready(plane, at="2030-01-01T12:03:00Z")
    ended = [e for e in js(gw(plane, "history", item, "--json")) if e["type"] == "wait-ended"][0]
    assert ended["outcome"] == "satisfied" and ended["code"] == 0 and "not yet" in ended["detail"]
    assert ended["by"] == "lead" and tip(plane) != before
    assert (plane / "runs.log").read_text().count("run") == 3
    assert not list((plane / ".git" / "gitwork" / "waits").iterdir())  # its poll state went with it


def test_a_command_that_never_passes_times_out_and_blocks_the_item_and_a_missing_one_fails(plane: Path) -> None:
    roles(plane, "wait_commands:\n  - 'false'\n  - no-such-program-gw\n")
    slow, missing = new(plane, "slow"), new(plane, "missing")
    assert gw(plane, "wait", slow, "--command", "false", "--every", "10s", "--timeout", "1m", who="lead").returncode == 0
    assert gw(plane, "wait", missing, "--command", "no-such-program-gw", who="lead").returncode == 0
    first = {a["item"]: a for a in js(gw(plane, "waits", "check", "--json", who="lead"))["checked"]}
    assert first[slow]["action"] == "pending" and first[missing]["action"] == "failed"
    assert first[missing]["code"] == 127
    later = {a["item"]: a for a in js(gw(plane, "waits", "check", "--json", at="2030-01-01T12:02:00Z",
                                         who="lead"))["checked"]}
    assert later[slow]["action"] == "timeout"
    stuck = {e["item"]: e for e in js(gw(plane, "blocked", "--json", at="2030-01-01T12:02:00Z"))}
    assert stuck[slow]["status"] == "blocked" and stuck[slow]["blocked_by"][0]["kind"] == "wait-failed"
    assert "ended timeout" in gw(plane, "blocked", at="2030-01-01T12:02:00Z").stdout
    assert stuck[missing]["blocked_by"][0]["outcome"] == "failed"


def test_a_hostile_command_wait_is_never_run_by_a_coordinator_whose_workplane_does_not_allow_it(plane: Path) -> None:
    """An agent with push access forges a command wait straight into item.yaml (no op would let it
    declare one), and a declared command tries a shell's tricks: neither runs."""
    roles(plane, "wait_commands:\n  - echo *\n")
    item = new(plane, "victim")
    path = next(p for p in git(plane, "ls-tree", "-r", "--name-only", "refs/gitwork/state").splitlines()
                if p.endswith(f"{item}/item.yaml"))
    doc = codec.load_yaml(git(plane, "cat-file", "blob", f"refs/gitwork/state:{path}").encode(), what=path)
    doc["waits"] = [{"id": "1", "kind": "command", "command": "touch pwned-forged", "every": 30, "timeout": 7200,
                     "by": "bot", "at": T0}]
    replace_blob(plane, path, codec.dump_yaml(doc))
    assert gw(plane, "wait", item, "--command", "echo hi; touch pwned-semicolon", who="lead").returncode == 0
    assert gw(plane, "wait", item, "--command", "echo '$(touch pwned-subshell)'", who="lead").returncode == 0
    git(plane, "config", "gitwork.wait-commands", "touch *")  # neither git config nor the environment
    before = tip(plane)
    done = {a["wait"]: a for a in js(gw_here(plane, "waits", "check", "--json", env={
        "GW_NOW": T0, "GW_AGENT": "lead", "GW_WAIT_COMMANDS": "touch *"}))["checked"]}
    assert done["1"]["action"] == "refused" and done["2"]["action"] == "refused"  # not listed: never run
    assert done["3"]["action"] == "satisfied"  # echo ran, without a shell: "$(...)" is its argument
    assert not list(plane.glob("pwned*"))
    assert git(plane, "rev-list", "--count", f"{before}..refs/gitwork/state") == "1"
    assert item not in ready(plane)  # the refused waits still hold it


# --- the arbiter: a forged outcome --------------------------------------------------------------------


def test_a_forged_wait_satisfied_by_someone_not_allowed_is_refused_by_the_arbiter(tmp_path: Path) -> None:
    bare = make_repo(tmp_path / "arbiter.git", bare=True)
    install_server(str(bare))
    git(bare, "config", "gitwork.admins", "alice")  # the arbiter's own settings decide

    def clone(name: str) -> Path:
        path = make_repo(tmp_path / name)
        git(path, "remote", "add", "origin", f"file://{bare}")
        git(path, "config", "gitwork.agent", name)
        assert main(["init", "--remote", "origin", "-C", str(path)]) == 0
        return path

    alice = clone("alice")
    with Workplane(str(alice)) as wp:
        item = wp.do("new", title="after the PR").result["item"]
        wp.do("wait", item=item, ref="refs/pull/1/head")
    assert main(["sync", "-C", str(alice)]) == 0
    bob = clone("bob")
    git(bob, "config", "gitwork.admins", "bob")  # bob's own clone says he is an admin: its engine agrees
    with Workplane(str(bob)) as wp:
        wp.do("wait-end", item=item, wait="1", outcome="satisfied")
    before = tip(bare)
    pushed = subprocess.run(["git", "push", "origin", "refs/gitwork/state"], cwd=bob, capture_output=True, text=True)
    assert pushed.returncode != 0 and "pre-receive hook declined" in pushed.stderr, pushed.stderr
    assert "only an admin or its declarer" in pushed.stderr
    assert tip(bare) == before
    with Workplane(str(alice)) as wp:  # the declarer may
        wp.do("wait-end", item=item, wait="1", outcome="satisfied")
    assert main(["sync", "-C", str(alice)]) == 0
    assert tip(bare) == tip(alice)


# --- the other faces: REST and MCP --------------------------------------------------------------------


def test_an_agent_defers_over_mcp_and_a_person_over_rest_and_listings_mark_it_blocked(plane: Path) -> None:
    from fastapi.testclient import TestClient

    from gitwork.mcp.tools import Session
    from gitwork.serve.app import create_app
    from gitwork.serve.tokens import Tokens
    from gitwork.store import Repository

    one, two = new(plane, "one"), new(plane, "two")
    with Workplane(str(plane), agent="bot", now=lambda: dt.datetime(2030, 1, 1, 12, tzinfo=dt.timezone.utc)) as wp:
        wp.do("claim", item=one)
        failed, doc = Session(wp).call("defer", {"item": one, "until": "1h"})
        assert not failed and doc["until"] == "2030-01-01T13:00:00Z", doc
        failed, doc = Session(wp).call("defer", {"item": one, "until": "yesterday"})
        assert failed and doc["error"] == "invalid"
        failed, doc = Session(wp).call("wait", {"item": one, "ref": "feature"})  # its PR merged: the holder may
        assert not failed and doc["what"] == "ref feature reachable from main", doc
        failed, doc = Session(wp).call("wait", {"item": one, "command": "true"})  # no such argument for a tool
        assert failed and doc["error"] in ("invalid", "usage"), doc
    token = Tokens(Repository.discover(str(plane)).gitwork_dir()).add("carol", "person")[0]
    http = TestClient(create_app(str(plane)), base_url="http://gw", headers={"Authorization": f"Bearer {token}"})
    got = http.post("/v1/commands", json={"op": "defer", "item": two, "until": "2999-01-01T00:00:00Z"})
    assert got.status_code == 200, got.text
    before = tip(plane)
    bad = http.post("/v1/commands", json={"op": "defer", "item": two, "until": "2000-01-01"})
    assert bad.status_code == 422 and "not in the future" in bad.text, bad.text  # exit 5, never a 500
    assert tip(plane) == before
    listed = {r["item"]: r for r in js(gw(plane, "list", "--json"))}
    assert listed[two]["blocked"] is True
    assert two in [r["item"] for r in js(gw(plane, "list", "-s", "blocked", "--json"))]
    explained = {e["item"]: e for e in js(gw(plane, "ready", "--explain", "--json"))}
    assert explained[two]["why_not"][0]["kind"] == "wait"
