"""A lease that ended cannot land code: the arbiter is also the code remote, with the server hook installed.

Every end of a lease (revoke, release, handoff, expiry and takeover, done) makes its fence unusable at
the code remote: the pre-receive check reads the lease's state on the server's state ref, not only its
fence number. And `gw publish` asks the arbiter first: after a revoke there, it exits 7 with nothing
moved, neither the remote's branch nor the local one.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from conftest import Clock, git, gw_cmd, make_repo, pin_arbiter_clock, run_gw, scrubbed
from gitwork import sessions
from gitwork.clock import format_instant
from gitwork.errors import Stale
from gitwork.publish import publish
from gitwork.sync import Arbiter, configure_remote
from gitwork.workplane import Workplane
from test_sessions import T0, init_project, person_identity  # noqa: F401  (autouse fixture)

STATE = "refs/gitwork/state"


def remote_ref(bare: Path, ref: str) -> str | None:
    return git(bare, "rev-parse", "-q", "--verify", ref, check=False) or None


def guarded_remote(path: Path) -> Path:
    """The arbiter and code remote, with the server hook installed as a user would (`gw hooks install --server`)."""
    make_repo(path, bare=True)
    done = run_gw(path.parent, "hooks", "install", "--server", str(path))
    assert done.returncode == 0, done.stderr
    pin_arbiter_clock(path, format_instant(T0 + dt.timedelta(days=1)))  # this world's clocks start at T0 (2030)
    return path


def arbitered_by(path: Path, bare: Path, clock: Clock, agent: str) -> Workplane:
    """``path``'s work plane, with ``origin`` (``bare``) as its arbiter."""
    git(path, "remote", "set-url", "origin", str(bare))
    plane = Workplane(str(path), now=clock, agent=agent)
    configure_remote(plane, "origin")
    return plane


@pytest.fixture(scope="module")
def template(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    """``origin.git`` (guarded), ``repo`` (alice's project, pushed, its item claimed through the arbiter)
    and ``admin`` (a synced clone): built once per module, copied by each test's ``world``."""
    with scrubbed(tmp_path_factory), pytest.MonkeyPatch.context() as monkeypatch:
        for role in ("AUTHOR", "COMMITTER"):  # what the autouse person_identity gives each test
            monkeypatch.setenv(f"GIT_{role}_NAME", "Person")
            monkeypatch.setenv(f"GIT_{role}_EMAIL", "person@example.com")
        base = tmp_path_factory.mktemp("guarded")
        bare, repo, clock = guarded_remote(base / "origin.git"), make_repo(base / "repo"), Clock(T0)
        init_project(repo)
        git(repo, "remote", "add", "origin", str(bare))
        git(repo, "push", "-q", "origin", "main")
        with arbitered_by(repo, bare, clock, "alice") as alice:
            alice.do("init")
            item = alice.do("new", title="Remote work").result["item"]
            Arbiter(alice).sync()
            alice.do("claim", item=item)  # through the arbiter
        git(base, "clone", "-q", str(bare), str(base / "admin"))
        with arbitered_by(base / "admin", bare, clock, "admin") as admin:
            Arbiter(admin).sync()
    return base, item


class World:
    def __init__(self, tmp_path: Path, template: tuple[Path, str]) -> None:
        self.clock = Clock(T0)
        shutil.copytree(template[0], tmp_path, symlinks=True, dirs_exist_ok=True)
        self.bare, self.repo, self.item = tmp_path / "origin.git", tmp_path / "repo", template[1]
        self.alice = arbitered_by(self.repo, self.bare, self.clock, "alice")
        self.admin = arbitered_by(tmp_path / "admin", self.bare, self.clock, "admin")
        self.session = sessions.start(self.alice, self.item)
        Path(self.session["worktree"], "a.txt").write_text("alice's change\n")
        self.commit = sessions.commit(self.alice, ["a.txt"], "alice's change", cwd=self.session["worktree"])["commit"]

    def snapshot(self) -> dict[str, Any]:
        return {"remote_main": remote_ref(self.bare, "refs/heads/main"),
                "remote_branches": git(self.bare, "for-each-ref", "--format=%(refname)", "refs/heads/"),
                "local_main": git(self.repo, "rev-parse", "main"),
                "local_state": git(self.repo, "rev-parse", STATE)}


@pytest.fixture
def world(tmp_path: Path, template: tuple[Path, str]) -> Iterator[World]:
    built = World(tmp_path, template)
    yield built
    built.alice.close()
    built.admin.close()


def push(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["git", "push", "-q", "origin", *args], cwd=cwd, capture_output=True, text=True)


def test_publish_after_a_revoke_on_the_arbiter_exits_7_and_moves_nothing(world: World) -> None:
    world.admin.do("revoke", item=world.item, reason="reassigned")
    before = world.snapshot()
    env = {"GW_AGENT": "alice", "GW_NOW": "2030-01-01T12:00:00Z"}

    done = run_gw(world.repo, "publish", world.session["session"], "--remote", "origin", "--json", env=env)

    assert done.returncode == 7, done.stdout + done.stderr
    assert "revoked" in json.loads(done.stdout)["message"]
    assert world.snapshot() == before  # the remote's main, its branches, local main, the local state
    # Locally, with the arbiter configured: the stale local state is not trusted either.
    with pytest.raises(Stale, match="revoked"):
        publish(world.alice, world.session["session"])
    assert world.snapshot() == before
    assert sessions.Session.load(str(world.repo), world.session["session"])["state"] == "committed"


def end_by_revoke(world: World) -> None:
    world.admin.do("revoke", item=world.item, reason="reassigned")


def end_by_release(world: World) -> None:
    world.alice.do("release", item=world.item)


def end_by_handoff(world: World) -> None:
    world.alice.do("handoff", item=world.item, reason="reassign")


def end_by_takeover(world: World) -> None:
    world.clock.advance(3600)
    world.admin.do("takeover", item=world.item)


def end_by_done(world: World) -> None:
    # The plain done op (a face that bypasses `gw done`) refuses to strand the session; after the
    # session is dropped on the record, done ends the lease, and its fence dies with it.
    sessions.drop(world.alice, world.session["session"], keep_branch=True)
    world.alice.do("done", item=world.item)
    Arbiter(world.alice).sync()


@pytest.mark.parametrize("end", [end_by_revoke, end_by_release, end_by_handoff, end_by_takeover, end_by_done])
def test_a_plain_git_push_under_an_ended_lease_is_refused_by_the_server(world: World, end: Any) -> None:
    remote_main = remote_ref(world.bare, "refs/heads/main")
    end(world)
    refused = push(world.repo, f"{world.commit}:refs/heads/main")
    assert refused.returncode != 0, refused.stderr
    assert "stale fence 1" in refused.stderr and world.item in refused.stderr
    parked = push(world.repo, f"{world.commit}:refs/heads/{world.session['branch']}")
    assert parked.returncode != 0 and "stale fence" in parked.stderr
    assert remote_ref(world.bare, "refs/heads/main") == remote_main


def test_a_live_lease_publishes_to_the_guarded_remote_and_then_its_fence_is_dead(world: World) -> None:
    result = publish(world.alice, world.session["session"], remote="origin")
    assert result["status"] == "done" and remote_ref(world.bare, "refs/heads/main") == world.commit
    with Workplane(str(world.bare), now=world.clock) as arbiter:
        arbiter_lease = arbiter.lease(world.item)
    assert arbiter_lease is not None and arbiter_lease.state == "released" and arbiter_lease.reason == "published"
    # The same fence cannot land anything more once the publish ended its lease.
    scratch = world.repo.parent / "late"
    git(world.repo, "worktree", "add", "-q", "--detach", str(scratch), world.commit)
    (scratch / "b.txt").write_text("one more thing\n")
    git(scratch, "commit", "-q", "-am", f"late\n\nWork-Item: {world.item}\nFence: 1")
    late = push(scratch, "HEAD:refs/heads/main")
    assert late.returncode != 0 and "released" in late.stderr


def test_the_server_lets_a_session_branch_go_once_its_drop_is_on_its_state_ref(world: World) -> None:
    branch = world.session["branch"]
    assert push(world.repo, branch).returncode == 0  # parked on the remote while the lease is live
    refused = push(world.repo, f":refs/heads/{branch}")
    assert refused.returncode != 0 and "unpublished" in refused.stderr
    sessions.drop(world.alice, world.session["session"], keep_branch=True)
    Arbiter(world.alice).sync()  # the drop record reaches the server's state ref
    accepted = push(world.repo, f":refs/heads/{branch}")
    assert accepted.returncode == 0, accepted.stderr
    assert remote_ref(world.bare, f"refs/heads/{branch}") is None


def test_done_with_remote_after_a_revoke_exits_7_and_moves_nothing(world: World) -> None:
    """`gw done` publishes the open session first, and asks the arbiter before anything moves."""
    world.admin.do("revoke", item=world.item, reason="reassigned")
    before = world.snapshot()
    env = {"GW_AGENT": "alice", "GW_NOW": "2030-01-01T12:00:00Z"}
    done = run_gw(world.repo, "done", world.item, "--remote", "origin", "--json", env=env)
    assert done.returncode == 7, done.stdout + done.stderr
    error = json.loads(done.stdout)
    assert world.session["session"] in error["message"] and "revoked" in error["message"]
    assert world.snapshot() == before


def test_done_with_remote_publishes_there_and_closes_the_item_on_the_arbiter(world: World) -> None:
    env = {"GW_AGENT": "alice", "GW_NOW": "2030-01-01T12:00:00Z"}
    done = run_gw(world.repo, "done", world.item, "--remote", "origin", env=env)
    assert done.returncode == 0, done.stderr
    assert f"done {world.item} by alice" in done.stderr
    assert remote_ref(world.bare, "refs/heads/main") == world.commit
    with Workplane(str(world.bare), now=world.clock) as on_arbiter:
        assert on_arbiter.item(world.item).status == "done"
        assert world.item not in [row[0] for row in on_arbiter.ready()]


# --- a revoke racing the publish: the branch and the record land together or not at all ----------

REVOKE_ON_MAIN = """#!{python}
# post-receive: the moment the server's main has moved, an admin revokes the item (once), as a revoke
# that reaches the arbiter between the publish's push of the code and its record would.
import os, subprocess, sys
lines = sys.stdin.read().split("\\n")
if any(line.endswith(" refs/heads/main") for line in lines) and not os.path.exists({marker!r}):
    open({marker!r}, "w").close()
    env = {{k: v for k, v in os.environ.items() if not k.startswith("GIT_")}}
    env.update(GW_AGENT="admin", GW_NOW="2030-01-01T12:00:00Z")
    done = subprocess.run([sys.executable, "-m", "gitwork", "revoke", {item!r}, "--reason", "race"], cwd={admin!r},
                          env=env, capture_output=True, text=True)
    with open({marker!r}, "w") as out:
        out.write(f"{{done.returncode}}\\n{{done.stderr}}")
"""


def lease_on_arbiter(world: World) -> Any:
    with Workplane(str(world.bare), now=world.clock) as arbiter:
        return arbiter.lease(world.item)


def test_a_revoke_right_after_main_moves_on_the_arbiter_finds_the_publish_recorded(world: World,
                                                                                   tmp_path: Path) -> None:
    """Issue 8.3's window: before, the publish pushed main, the revoke landed, and the record was refused
    (exit 7 with the code published under a revoked lease). Now both land in one atomic push."""
    import sys

    marker = tmp_path / "revoked"
    hook = world.bare / "hooks" / "post-receive"
    hook.write_text(REVOKE_ON_MAIN.format(python=sys.executable, marker=str(marker), item=world.item,
                                          admin=str(world.admin.repo.toplevel)))
    hook.chmod(0o755)
    env = {"GW_AGENT": "alice", "GW_NOW": "2030-01-01T12:00:00Z"}

    done = run_gw(world.repo, "publish", world.session["session"], "--remote", "origin", "--json", env=env)

    assert marker.exists(), "the server's hook never saw main move"
    revoke_exit = int(marker.read_text().split("\n", 1)[0])
    assert done.returncode == 0, done.stdout + done.stderr
    assert remote_ref(world.bare, "refs/heads/main") == world.commit
    lease = lease_on_arbiter(world)
    assert (lease.state, lease.reason) == ("released", "published")  # recorded with the code, not revoked
    assert revoke_exit == 5  # the revoke came after: there was no active lease left to revoke


def test_publish_racing_a_revoke_as_processes_never_leaves_code_under_a_revoked_lease(world: World) -> None:
    env = {"GW_NOW": "2030-01-01T12:00:00Z"}
    publishing = subprocess.Popen(gw_cmd("publish", world.session["session"], "--remote", "origin"),
                                  cwd=world.repo, env={**os.environ, **env, "GW_AGENT": "alice"},
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    revoking = subprocess.Popen(gw_cmd("revoke", world.item, "--reason", "race"), cwd=world.admin.repo.toplevel,
                                env={**os.environ, **env, "GW_AGENT": "admin"}, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True)
    published, _ = publishing.communicate(timeout=60)[1], revoking.communicate(timeout=60)
    lease = lease_on_arbiter(world)
    main = remote_ref(world.bare, "refs/heads/main")
    if publishing.returncode == 0:  # the publish landed first: its record with it, the revoke found nothing
        assert main == world.commit and (lease.state, lease.reason) == ("released", "published")
        assert revoking.returncode == 5
    else:  # the revoke landed first: nothing of the publish did
        assert publishing.returncode == 7, published
        assert main != world.commit and lease.state == "revoked" and revoking.returncode == 0


def test_an_atomic_push_of_a_stale_fence_with_the_state_ref_lands_nothing(world: World) -> None:
    """The server hook judges the code by the state ref as it was before the push, also when the same
    atomic push moves the state ref: after a revoke, the code is refused and the state does not move."""
    world.admin.do("revoke", item=world.item, reason="reassigned")
    Arbiter(world.alice).sync()
    world.alice.do("new", title="rides along", offline=True)  # a state commit the server would accept
    state_before = remote_ref(world.bare, STATE)
    local_state = git(world.repo, "rev-parse", STATE)
    refused = push(world.repo, "--atomic", f"{world.commit}:refs/heads/main", f"{local_state}:{STATE}")
    assert refused.returncode != 0 and "stale fence 1" in refused.stderr, refused.stderr
    assert remote_ref(world.bare, STATE) == state_before
    assert remote_ref(world.bare, "refs/heads/main") != world.commit


def test_the_arbiter_is_the_code_remote_by_name_or_by_url(tmp_path: Path) -> None:
    from gitwork.publish import code_remote_is_arbiter

    repo = make_repo(tmp_path / "clone")
    for name, url in [("origin", tmp_path / "a.git"), ("mirror", tmp_path / "a.git"), ("other", tmp_path / "b.git")]:
        git(repo, "remote", "add", name, str(url))
    top = str(repo)
    assert code_remote_is_arbiter(top, "origin", "origin") and code_remote_is_arbiter(top, "mirror", "origin")
    assert not code_remote_is_arbiter(top, "other", "origin") and not code_remote_is_arbiter(top, "origin", None)
