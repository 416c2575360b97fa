"""Several machines through a file:// bare remote: the arbiter decides leases, offline work replays.

Every "machine" is a separate clone driven by the real ``gw`` (its entry point, in this process unless
the invariant is about a process; see ``gw_ok``); the remote is a real bare repository. Nothing is mocked: what the tests read back is what git has on the refs.
"""

from __future__ import annotations

import json
import subprocess
from collections import Counter
from pathlib import Path

import pytest

from conftest import git, gw_here, make_repo, run_gw, run_module, tip
from daemon import closed_port

STATE = "refs/gitwork/state"
TRACKING = "refs/remotes/origin/gitwork/state"
HELD, NOT_FOUND, REMOTE, SYNC_REFUSED = 75, 3, 12, 15


# --- helpers shared with the other sync test files ---------------------------------------------


def gw_ok(repo: Path, *args: str, env: dict[str, str] | None = None, timeout: float | None = None) -> dict:
    """``gw *args --json`` succeeded; its document. In this process (``gw_here``: the same entry point,
    engine and git calls without an interpreter start), or in a child process when a ``timeout`` bounds
    it. The invariants these files pin are about refs on the arbiter; the ones about processes (kill -9,
    racing clones, crash points) start their own with ``run_gw`` or ``subprocess``."""
    if timeout is None:
        done = gw_here(repo, *args, "--json", env=env)
    else:
        done = run_gw(repo, *args, "--json", env=env, timeout=timeout)
    assert done.returncode == 0, f"gw {' '.join(args)} -> {done.returncode}: {done.stdout} {done.stderr}"
    return json.loads(done.stdout)


def gw_refused(repo: Path, *args: str, env: dict[str, str] | None = None, timeout: float = 120) -> dict:
    """``gw sync``/``push``/``pull`` that refused some of this clone's commands: exit 15, the report on stdout."""
    done = run_gw(repo, *args, "--json", env=env, timeout=timeout)
    assert done.returncode == SYNC_REFUSED, f"gw {' '.join(args)} -> {done.returncode}: {done.stdout} {done.stderr}"
    report = json.loads(done.stdout)
    assert report["ok"] is False and report["error"] == "sync-refused" and report["refused"], report
    return report


def command_ids(git_dir: Path, ref: str = STATE) -> list[str]:
    """Every Command-Id trailer on the ref's history (all parents), oldest first."""
    out = git(git_dir, "log", "--reverse", "--format=%(trailers:key=Command-Id,valueonly,separator=%x2C)", ref)
    return [line.strip() for line in out.splitlines() if line.strip()]


def assert_sound(bare: Path) -> None:
    """The remote is intact: ``fsck --full --strict`` clean, the whole state history passes the server check
    (as if pushed from nothing), no command applied twice."""
    fsck = subprocess.run(["git", "fsck", "--full", "--strict", "--no-dangling", "--no-progress"], cwd=bare,
                          capture_output=True, text=True)
    assert fsck.returncode == 0 and "error" not in (fsck.stdout + fsck.stderr).lower(), fsck.stdout + fsck.stderr
    head = tip(bare)
    assert head is not None
    # a child process forked like run_gw's (conftest's run_module): the hook's own process, without an interpreter start
    check = run_module(bare, "gitwork.statecheck", input=f"{'0' * 40} {head} {STATE}\n",
                       # a re-check of the history comes after it: the arbiter's clock is later than
                       # any commit (tests date commands days ahead, and the hook bounds commit times)
                       env={"GIT_DIR": str(bare), "GW_NOW": "2100-01-01T00:00:00Z"})
    assert check.returncode == 0, check.stderr
    duplicated = [i for i, n in Counter(command_ids(bare)).items() if n > 1]
    assert duplicated == [], f"applied twice: {duplicated}"


def is_ancestor(git_dir: Path, old: str, new: str) -> bool:
    done = subprocess.run(["git", "merge-base", "--is-ancestor", old, new], cwd=git_dir, capture_output=True)
    return done.returncode == 0


def machine(tmp: Path, name: str, url: str, *, publish: bool = False) -> Path:
    """A clone-like repository with ``origin`` = ``url`` made the arbiter by ``gw init --remote``."""
    path = make_repo(tmp / name)
    git(path, "remote", "add", "origin", url)
    gw_ok(path, "init", "--remote", "origin")
    if publish:
        gw_ok(path, "sync")
    return path


def new_item(repo: Path, title: str, *extra: str) -> str:
    return gw_ok(repo, "new", title, *extra)["item"]


def show(repo: Path, item: str) -> dict:
    return gw_ok(repo, "show", item)




# --- set-up ---------------------------------------------------------------------------------------


def test_init_remote_adopts_the_remote_state(tmp_path: Path, remote: Path, url: str, machine_a: Path) -> None:
    a = machine_a
    item = new_item(a, "Shared item")
    gw_ok(a, "sync")
    assert tip(remote) == tip(a)

    b = machine(tmp_path, "b", url)
    # B adopted the remote's history instead of starting a second one of its own.
    assert tip(b) == tip(remote)
    assert git(b, "rev-list", "--max-parents=0", STATE) == git(remote, "rev-list", "--max-parents=0", STATE)
    assert show(b, item)["title"] == "Shared item"
    assert tip(b, TRACKING) == tip(remote)


def test_lease_commands_land_on_the_remote(tmp_path: Path, remote: Path, url: str, machine_a: Path) -> None:
    a = machine_a
    item = new_item(a, "Leased")  # offline-able: stays local until the claim carries it
    before = tip(remote)
    claimed = gw_ok(a, "claim", item, "--as", "alice")
    assert tip(remote) == tip(a) == claimed["commit"] != before
    renewed = gw_ok(a, "renew", item, "--as", "alice", "--fence", str(claimed["fence"]), "--ttl", "1h")
    assert tip(remote) == tip(a) == renewed["commit"]
    released = gw_ok(a, "release", item, "--as", "alice", "--fence", str(claimed["fence"]))
    assert tip(remote) == tip(a) == released["commit"]
    ops = [json.loads(line.split("Command: ", 1)[1])["op"]
           for line in git(remote, "log", "--reverse", "--format=%B", STATE).splitlines()
           if line.startswith("Command: ")]
    assert ops == ["init", "new", "claim", "renew", "release"]


def test_claim_made_elsewhere_is_held_without_a_sync(tmp_path: Path, remote: Path, url: str, machine_a: Path) -> None:
    a = machine_a
    item = new_item(a, "Contended")
    gw_ok(a, "sync")
    a_before = tip(a)
    b = machine(tmp_path, "b", url)
    won = gw_ok(b, "claim", item, "--as", "bob")
    remote_after_b = tip(remote)
    assert remote_after_b == won["commit"]

    # A never ran sync: its own view says the item is free, the arbiter says it is not.
    lost = run_gw(a, "claim", item, "--as", "alice", "--json")
    assert lost.returncode == HELD, lost.stdout + lost.stderr
    assert json.loads(lost.stdout)["error"] == "held"
    assert "bob" in json.loads(lost.stdout)["message"]
    assert tip(remote) == remote_after_b  # the refused claim published nothing
    assert tip(a) in (a_before, remote_after_b)  # never A's own losing commit


def test_stale_local_view_does_not_refuse_what_the_remote_allows(tmp_path: Path, remote: Path, url: str,
                                                                 machine_a: Path) -> None:
    a = machine_a
    item = new_item(a, "Released elsewhere")
    gw_ok(a, "sync")
    b = machine(tmp_path, "b", url)
    fence = gw_ok(b, "claim", item, "--as", "bob")["fence"]
    gw_ok(a, "pull")
    assert show(a, item)["lease"]["holder"] == "bob"  # A now believes the item is held
    gw_ok(b, "release", item, "--as", "bob", "--fence", str(fence))

    # A's local view is out of date; the claim must ask the remote before refusing.
    got = gw_ok(a, "claim", item, "--as", "alice")
    assert (got["holder"], got["epoch"]) == ("alice", 2)
    assert tip(remote) == got["commit"]


# --- offline ----------------------------------------------------------------------------------------


def test_offline_claim_is_local_only_and_shown_by_status(tmp_path: Path, remote: Path, url: str,
                                                         machine_a: Path) -> None:
    a = machine_a
    item = new_item(a, "Tentative")
    gw_ok(a, "sync")
    published = tip(remote)
    claimed = gw_ok(a, "claim", item, "--offline", "--as", "alice")
    assert tip(a) == claimed["commit"] != published
    assert tip(remote) == published  # not asked

    status = gw_ok(a, "status")
    assert status["remote_tip"] == published
    assert [p["command_id"] for p in status["pending"]] == [claimed["command_id"]]
    plain = run_gw(a, "status")
    assert plain.returncode == 0
    assert "not on the arbiter\t1" in plain.stdout

    report = gw_ok(a, "sync")
    assert report["refused"] == []
    assert tip(remote) == tip(a)
    assert gw_ok(a, "status")["pending"] == []


def test_partition_offline_claim_loses_other_work_lands(tmp_path: Path, remote: Path, url: str,
                                                        machine_a: Path) -> None:
    remote_tips: list[str] = []

    def note_remote() -> None:
        current = tip(remote)
        if current and (not remote_tips or remote_tips[-1] != current):
            remote_tips.append(current)

    a = machine_a
    contested = new_item(a, "Contested")
    edited = new_item(a, "Edited offline")
    gw_ok(a, "sync")
    note_remote()
    b = machine(tmp_path, "b", url)

    # The partition: A works offline, B claims the same item through the arbiter.
    tentative = gw_ok(a, "claim", contested, "--offline", "--as", "alice")
    under_fence = gw_ok(a, "edit", contested, "--priority", "0", "--fence", str(tentative["fence"]), "--as", "alice")
    created = gw_ok(a, "new", "Created offline", "--as", "alice")
    edit = gw_ok(a, "edit", edited, "--title", "Edited while partitioned", "--as", "alice")
    note_remote()
    won = gw_ok(b, "claim", contested, "--as", "bob")
    note_remote()
    assert tip(remote) == won["commit"]

    report = gw_refused(a, "sync")
    note_remote()
    refused = {entry["command_id"]: entry for entry in report["refused"]}
    replayed = {entry["command_id"] for entry in report["replayed"]}
    # The tentative claim lost to B's, and so did the edit made under its fence: both by command id.
    assert set(refused) == {tentative["command_id"], under_fence["command_id"]}
    assert refused[tentative["command_id"]]["error"] == "held"
    # Everything else landed.
    assert {created["command_id"], edit["command_id"]} <= replayed
    assert not replayed & set(refused)
    assert tip(a) == tip(remote)
    assert show(a, contested)["lease"]["holder"] == "bob"
    assert show(a, contested)["priority"] != 0
    assert show(a, created["item"])["title"] == "Created offline"
    assert show(a, edited)["title"] == "Edited while partitioned"

    # Refusals stay visible afterwards, by command id.
    status = gw_ok(a, "status")
    assert status["pending"] == []
    assert {tentative["command_id"], under_fence["command_id"]} <= {e.get("command_id") for e in status["refused"]}
    plain = run_gw(a, "status")
    assert tentative["command_id"] in plain.stdout

    # Nothing duplicated: each command id once on the remote, refused ones not at all.
    ids = command_ids(remote)
    assert [i for i, n in Counter(ids).items() if n > 1] == []
    assert created["command_id"] in ids and edit["command_id"] in ids and won["command_id"] in ids
    assert tentative["command_id"] not in ids and under_fence["command_id"] not in ids

    # B converges by pulling.
    gw_ok(b, "pull")
    assert tip(b) == tip(a) == tip(remote)
    assert show(b, created["item"])["title"] == "Created offline"

    # The remote's history only ever grew.
    assert len(remote_tips) >= 3
    for old, new in zip(remote_tips, remote_tips[1:], strict=False):
        assert is_ancestor(remote, old, new), f"remote rewound from {old} to {new}"


def test_work_under_a_refused_tentative_lease_is_refused(tmp_path: Path, remote: Path, url: str,
                                                         machine_a: Path) -> None:
    a = machine_a
    contested = new_item(a, "Contested")
    gw_ok(a, "sync")
    b = machine(tmp_path, "b", url)
    tentative = gw_ok(a, "claim", contested, "--offline", "--as", "alice")
    under_fence = gw_ok(a, "edit", contested, "--priority", "0", "--fence", str(tentative["fence"]), "--as", "alice")
    won = gw_ok(b, "claim", contested, "--as", "bob")
    assert won["fence"] == tentative["fence"]  # both drew the next number from the same counter

    report = gw_refused(a, "sync")
    refused = {entry["command_id"]: entry for entry in report["refused"]}
    assert set(refused) == {tentative["command_id"], under_fence["command_id"]}
    assert refused[under_fence["command_id"]]["error"] == "stale"
    assert show(a, contested)["priority"] != 0  # bob's item was not edited by alice
    assert under_fence["command_id"] not in command_ids(remote)


def test_sync_twice_is_a_no_op(tmp_path: Path, remote: Path, url: str, machine_a: Path) -> None:
    a = machine_a
    for n in range(3):
        new_item(a, f"item {n}")
    first = gw_ok(a, "sync")
    assert tip(remote) == tip(a)
    settled = tip(remote)
    second = gw_ok(a, "sync")
    assert second["replayed"] == [] and second["refused"] == []
    assert tip(remote) == tip(a) == settled
    assert first["refused"] == []


# --- failures ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("where", ["missing-path", "closed-port"])
def test_unreachable_remote_is_exit_12_and_leaves_local_state(tmp_path: Path, remote: Path, url: str,
                                                               where: str, machine_a: Path) -> None:
    a = machine_a
    item = new_item(a, "Offline work")
    local = tip(a)
    tracking = tip(a, TRACKING)
    bad = f"file://{tmp_path}/nowhere.git" if where == "missing-path" else f"git://127.0.0.1:{closed_port()}/r.git"
    git(a, "remote", "set-url", "origin", bad)

    for args in (("sync",), ("pull",), ("push",), ("claim", item, "--as", "alice")):
        done = run_gw(a, *args)
        assert done.returncode == REMOTE, f"gw {args}: {done.returncode} {done.stderr}"
        assert len(done.stderr.strip().splitlines()) == 1, done.stderr
        assert "origin" in done.stderr
        assert done.stdout == ""
        assert tip(a) == local
        assert tip(a, TRACKING) == tracking
    as_json = run_gw(a, "sync", "--json")
    assert as_json.returncode == REMOTE
    assert json.loads(as_json.stdout)["code"] == REMOTE

    # Local work goes on; an offline claim still works while the remote is away.
    assert run_gw(a, "claim", item, "--offline", "--as", "alice").returncode == 0
    git(a, "remote", "set-url", "origin", url)
    gw_ok(a, "sync")
    assert tip(a) == tip(remote)
    assert show(a, item)["lease"]["holder"] == "alice"


def test_retried_sync_after_a_lost_reply_lands_nothing_twice(tmp_path: Path, remote: Path, url: str,
                                                             machine_a: Path) -> None:
    a = machine_a
    gw_ok(a, "sync")
    b = machine(tmp_path, "b", url)
    offline = [gw_ok(a, "new", f"offline {n}")["command_id"] for n in range(3)]
    new_item(b, "from b")
    gw_ok(b, "sync")  # the remote moved on: A's commands must be replayed, i.e. rewritten
    a_local, a_tracking = tip(a), tip(a, TRACKING)

    report = gw_ok(a, "sync")
    assert {e["command_id"] for e in report["replayed"]} == set(offline)
    landed = tip(remote)
    assert tip(a) == landed
    # Simulate the reply being lost: the push landed, but neither local ref moved.
    git(a, "update-ref", STATE, a_local)
    git(a, "update-ref", TRACKING, a_tracking)

    retry = gw_ok(a, "sync")
    assert retry["replayed"] == [] and retry["refused"] == []
    assert tip(remote) == landed  # nothing new was pushed
    assert tip(a) == landed
    ids = command_ids(remote)
    assert sorted(i for i in ids if i in offline) == sorted(offline)
    assert [i for i, n in Counter(ids).items() if n > 1] == []


def test_retried_fast_forward_push_after_a_lost_reply(tmp_path: Path, remote: Path, url: str, machine_a: Path) -> None:
    a = machine_a
    tracking = tip(a, TRACKING)
    offline = [gw_ok(a, "new", f"offline {n}")["command_id"] for n in range(2)]
    gw_ok(a, "sync")
    landed = tip(remote)
    git(a, "update-ref", TRACKING, tracking)  # as if the push's reply never came back
    claimed = gw_ok(a, "claim", "--next", "--as", "alice")  # a lease command right after
    assert tip(remote) == tip(a) == claimed["commit"]
    assert is_ancestor(remote, landed, claimed["commit"])
    ids = command_ids(remote)
    assert [i for i, n in Counter(ids).items() if n > 1] == []
    assert set(offline) <= set(ids)


# --- configuration ---------------------------------------------------------------------------------


def test_refspecs_leave_branch_pushes_alone(tmp_path: Path, remote: Path, url: str) -> None:
    a = make_repo(tmp_path / "a")
    git(a, "remote", "add", "origin", url)
    default_fetch = git(a, "config", "--get-all", "remote.origin.fetch").splitlines()
    gw_ok(a, "init", "--remote", "origin")
    gw_ok(a, "remote", "set", "origin")
    gw_ok(a, "remote", "set", "origin")

    fetch = git(a, "config", "--get-all", "remote.origin.fetch").splitlines()
    assert fetch.count(f"+{STATE}:{TRACKING}") == 1
    assert [spec for spec in fetch if spec != f"+{STATE}:{TRACKING}"] == default_fetch
    assert git(a, "config", "--get-all", "remote.origin.push", check=False) == ""
    assert git(a, "config", "gitwork.remote") == "origin"

    # A branch push moves the branch only; unpublished work-plane state stays local.
    gw_ok(a, "new", "not yet published")
    (a / "file.txt").write_text("hello\n")
    git(a, "add", "file.txt")
    git(a, "-c", "user.name=T", "-c", "user.email=t@example.invalid", "commit", "-q", "-m", "work")
    git(a, "push", "-q", "origin", "HEAD:refs/heads/main")
    assert tip(remote, "refs/heads/main") == tip(a, "HEAD")
    assert tip(remote) is None
    gw_ok(a, "sync")
    assert tip(remote) == tip(a)


def test_remote_set_refuses_an_unknown_remote(tmp_path: Path) -> None:
    a = make_repo(tmp_path / "a")
    assert run_gw(a, "init").returncode == 0
    done = run_gw(a, "remote", "set", "nosuch")
    assert done.returncode == 2
    assert git(a, "config", "gitwork.remote", check=False) == ""
