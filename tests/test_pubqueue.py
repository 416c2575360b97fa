"""The publish queue on the arbiter (docs/sessions.md, "The publish queue"; gitwork/pubqueue.py, ops/queue.py).

One world: ``origin.git``, the arbiter and the code remote, guarded by the server hook as a user installs it
(`gw hooks install --server`); alice's clone (item A claimed), bob's clone (item B claimed) and the
publisher's clone. Sessions are real commit-once session branches, merges are made by `git merge-tree`,
gates run with `sh -c` in a scratch worktree, every push goes through the server hook.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import shutil
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from conftest import Clock, git, gw_cmd, make_repo, pin_arbiter_clock, run_gw, scrubbed
from gitwork import pubqueue, sessions
from gitwork.clock import format_instant
from gitwork.errors import Held, NotFound, Stale
from gitwork.sync import Arbiter, configure_remote
from gitwork.workplane import Workplane
from test_sessions import T0, init_project, person_identity  # noqa: F401  (autouse fixture)

STATE = "refs/gitwork/state"


def arbitered(path: Path, bare: Path, clock: Clock, agent: str, **settings: Any) -> Workplane:
    git(path, "remote", "set-url", "origin", str(bare))
    plane = Workplane(str(path), now=clock, agent=agent, **settings)
    configure_remote(plane, "origin")
    return plane


@pytest.fixture(scope="module")
def template(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str, str]:
    with scrubbed(tmp_path_factory), pytest.MonkeyPatch.context() as monkeypatch:
        for role in ("AUTHOR", "COMMITTER"):
            monkeypatch.setenv(f"GIT_{role}_NAME", "Person")
            monkeypatch.setenv(f"GIT_{role}_EMAIL", "person@example.com")
        base = tmp_path_factory.mktemp("queue")
        bare = make_repo(base / "origin.git", bare=True)
        assert run_gw(base, "hooks", "install", "--server", str(bare)).returncode == 0
        pin_arbiter_clock(bare, format_instant(T0 + dt.timedelta(days=1)))
        repo, clock = make_repo(base / "alice"), Clock(T0)
        init_project(repo)
        git(repo, "remote", "add", "origin", str(bare))
        git(repo, "push", "-q", "origin", "main")
        git(bare, "symbolic-ref", "HEAD", "refs/heads/main")
        with arbitered(repo, bare, clock, "alice") as alice:
            alice.do("init")
            first = alice.do("new", title="Alice's change").result["item"]
            second = alice.do("new", title="Bob's change").result["item"]
            Arbiter(alice).sync()
            alice.do("claim", item=first)
        for name in ("bob", "pub"):
            git(base, "clone", "-q", str(bare), str(base / name))
            with arbitered(base / name, bare, clock, name) as plane:
                Arbiter(plane).sync()
                if name == "bob":
                    plane.do("claim", item=second)
    return base, first, second


class World:
    def __init__(self, tmp_path: Path, template: tuple[Path, str, str], gates: tuple[str, ...]) -> None:
        self.clock = Clock(T0 + dt.timedelta(minutes=1))
        shutil.copytree(template[0], tmp_path, symlinks=True, dirs_exist_ok=True)
        self.base, self.bare = tmp_path, tmp_path / "origin.git"
        self.items = {"alice": template[1], "bob": template[2]}
        self.planes = {name: arbitered(tmp_path / name, self.bare, self.clock, name,
                                       **({"gates": gates} if name == "pub" else {}))
                       for name in ("alice", "bob", "pub")}

    def session(self, who: str, files: dict[str, str]) -> str:
        """A committed session of ``who``'s item writing ``files``."""
        started = sessions.start(self.planes[who], self.items[who])
        for name, text in files.items():
            Path(started["worktree"], name).write_text(text)
        sessions.commit(self.planes[who], list(files), f"{who}'s change", cwd=started["worktree"])
        return str(started["session"])

    def main(self) -> str:
        return git(self.bare, "rev-parse", "refs/heads/main")

    def refs(self) -> str:
        return git(self.bare, "for-each-ref", "--format=%(objectname) %(refname)")

    def close(self) -> None:
        for plane in self.planes.values():
            plane.close()


@pytest.fixture
def world(request: pytest.FixtureRequest, tmp_path: Path, template: tuple[Path, str, str]) -> Iterator[World]:
    gates = getattr(request, "param", ("test -f a.txt",))
    built = World(tmp_path, template, gates)
    yield built
    built.close()


def thread_texts(wp: Workplane, item: str) -> list[dict[str, Any]]:
    Arbiter(wp).sync()
    return wp.thread(item)[1]


# Red together, green alone: each session adds one file; the gate fails when both are there.
CLASH = ('if test -f x.txt && test -f y.txt; then echo "x.txt and y.txt together break the build"; exit 3; fi',)


def test_two_green_sessions_land_in_order_fast_forward_then_a_merge(world: World) -> None:
    first = world.session("alice", {"x.txt": "x\n"})
    second = world.session("bob", {"y.txt": "y\n"})
    queued = [pubqueue.enqueue(world.planes["alice"], first), pubqueue.enqueue(world.planes["bob"], second)]
    assert [q["position"] for q in queued] == [1, 2]
    assert [e["session"] for e in pubqueue.listing(world.planes["pub"])] == [first, second]

    result = pubqueue.work(world.planes["pub"], once=True)

    assert [(h["session"], h["outcome"], h["mode"]) for h in result["handled"]] == [
        (first, "landed", "fast-forward"), (second, "landed", "merge")]
    main = world.main()
    assert git(world.bare, "show", f"{main}:x.txt") == "x" and git(world.bare, "show", f"{main}:y.txt") == "y"
    assert git(world.bare, "rev-list", "--count", "--merges", "main") == "1"
    assert pubqueue.listing(world.planes["pub"]) == []
    assert "session/" not in world.refs()  # the landed session branches were deleted on the code remote
    for who in ("alice", "bob"):
        Arbiter(world.planes[who]).sync()
        ctx = world.planes[who].context()
        assert ctx.item(world.items[who]).status == "done"
        assert ctx.lease(world.items[who]).state == "released"
        (listed,) = sessions.list_sessions(world.planes[who])  # the holder's own clone reads the record
        assert (listed["state"], listed["live"]) == ("published", False)
    publisher = world.planes["pub"].context().file("queue/publisher.yaml")
    assert publisher is not None and b"state: released" in publisher


@pytest.mark.parametrize("world", [CLASH], indirect=True)
def test_red_together_the_second_is_sent_back_with_the_gate_output_and_main_stays_at_the_first(world: World) -> None:
    first = world.session("alice", {"x.txt": "x\n"})
    second = world.session("bob", {"y.txt": "y\n"})
    pubqueue.enqueue(world.planes["alice"], first)
    pubqueue.enqueue(world.planes["bob"], second)

    result = pubqueue.work(world.planes["pub"], once=True)

    assert [(h["session"], h["outcome"]) for h in result["handled"]] == [(first, "landed"), (second, "returned")]
    main = world.main()
    assert git(world.bare, "show", f"{main}:x.txt") == "x"
    assert subprocess.run(["git", "cat-file", "-e", f"{main}:y.txt"], cwd=world.bare).returncode != 0
    returned = result["handled"][1]
    assert returned["gate"] == CLASH[0] and "break the build" in returned["output"]
    # The item stays with its holder; the holder is told, in the item's thread, with the gate's output.
    bob = world.planes["bob"]
    messages = thread_texts(bob, world.items["bob"])
    assert messages[-1]["to"] == "bob" and "together break the build" in messages[-1]["text"]
    ctx = bob.context()
    assert ctx.item(world.items["bob"]).status == "in_progress" and ctx.lease(world.items["bob"]).holder == "bob"
    assert pubqueue.listing(bob) == []


def test_a_conflict_is_sent_back_naming_the_paths(world: World) -> None:
    first = world.session("alice", {"a.txt": "alice\n"})
    second = world.session("bob", {"a.txt": "bob\n"})
    pubqueue.enqueue(world.planes["alice"], first)
    pubqueue.enqueue(world.planes["bob"], second)
    result = pubqueue.work(world.planes["pub"], once=True)
    assert [h["outcome"] for h in result["handled"]] == ["landed", "returned"]
    assert "conflicts in: a.txt" in result["handled"][1]["reason"]
    assert git(world.bare, "show", "main:a.txt") == "alice"


def test_hostile_input_changes_nothing(world: World) -> None:
    first = world.session("alice", {"x.txt": "x\n"})
    refs = world.refs()
    env = {"GW_AGENT": "alice", "GW_NOW": "2030-01-01T12:05:00Z"}
    unknown = run_gw(world.base / "alice", "publish", "--queue", "20300101-120000-nope-alice", "--json", env=env)
    assert unknown.returncode == 3, unknown.stdout + unknown.stderr
    assert json.loads(unknown.stdout)["ok"] is False
    with pytest.raises(NotFound):
        pubqueue.enqueue(world.planes["alice"], "20300101-120000-nope-alice")
    assert run_gw(world.base / "alice", "queue", "remove", "20300101-120000-nope-alice", env=env).returncode == 3
    # bob queues alice's session by hand (gw apply): not his to queue.
    doc = json.dumps({"op": "queue-add", "item": world.items["alice"], "session": first})
    theirs = run_gw(world.base / "bob", "apply", "-", "--json", env={**env, "GW_AGENT": "bob"}, input=doc)
    assert theirs.returncode in (7, 77), theirs.stdout + theirs.stderr
    # A target that is not a plain branch name (the publisher puts it in refspecs) is refused.
    for into in ("x:refs/heads/main", "session/x", "../main", "-x", "+main"):
        bad = json.dumps({"op": "queue-add", "item": world.items["alice"], "session": first, "into": into})
        assert run_gw(world.base / "alice", "apply", "-", env=env, input=bad).returncode == 5, into
    # Only gitwork's own publisher writes the publisher's records.
    land = json.dumps({"op": "queue-land", "epoch": 1, "session": first, "commit": "0" * 40, "mode": "merge"})
    assert run_gw(world.base / "bob", "apply", "-", env={**env, "GW_AGENT": "bob"}, input=land).returncode == 5
    assert world.refs() == refs
    # Removing someone else's entry: refused (77) for a person when admins are configured; nothing changes.
    pubqueue.enqueue(world.planes["alice"], first)
    refs = world.refs()
    git(world.base / "bob", "config", "gitwork.admins", "root")
    other = run_gw(world.base / "bob", "queue", "remove", first, "--json", env={**env, "GW_AGENT": "bob"})
    assert other.returncode == 77, other.stdout + other.stderr
    assert world.refs() == refs
    gone = run_gw(world.base / "alice", "queue", "remove", first, "--json", env=env)
    assert gone.returncode == 0, gone.stdout + gone.stderr
    assert pubqueue.listing(world.planes["pub"]) == []


def test_a_forged_queue_entry_pushed_with_plain_git_is_refused_by_the_arbiter(world: World) -> None:
    first = world.session("alice", {"x.txt": "x\n"})
    pubqueue.enqueue(world.planes["alice"], first)
    repo = world.base / "bob"
    Arbiter(world.planes["bob"]).sync()
    tip = git(repo, "rev-parse", STATE)
    entry = git(repo, "show", f"{STATE}:queue/entries/00000001.yaml")
    forged = entry.replace("holder: alice", "holder: bob").replace("seq: 1", "seq: 2")
    env = {**os.environ, "GIT_INDEX_FILE": str(repo / ".git" / "forged-index")}
    plumb = lambda *a, i=None: subprocess.run(["git", *a], cwd=repo, env=env, input=i, capture_output=True,  # noqa: E731
                                              text=True, check=True).stdout.strip()
    plumb("read-tree", STATE)
    blob = plumb("hash-object", "-w", "--stdin", i=forged + "\n")
    plumb("update-index", "--add", "--cacheinfo", f"100644,{blob},queue/entries/00000002.yaml")
    commit = plumb("commit-tree", plumb("write-tree"), "-p", tip, "-m", "queue-add forged")
    before = git(world.bare, "rev-parse", STATE)
    pushed = subprocess.run(["git", "push", "origin", f"{commit}:{STATE}"], cwd=repo, capture_output=True, text=True)
    assert pushed.returncode != 0 and "remote:" in pushed.stderr
    assert git(world.bare, "rev-parse", STATE) == before
    assert [e["session"] for e in pubqueue.listing(world.planes["pub"])] == [first]


def test_one_publisher_at_a_time_and_a_stale_publisher_is_refused(world: World) -> None:
    first = world.session("alice", {"x.txt": "x\n"})
    pubqueue.enqueue(world.planes["alice"], first)
    old = pubqueue.Publisher(world.planes["pub"], ttl=60)
    old.take()
    rival = pubqueue.Publisher(world.planes["bob"], ttl=60)
    with pytest.raises(Held):
        rival.take()
    world.clock.at += dt.timedelta(minutes=2)  # the first publisher paused past its lease
    rival.take()
    assert rival.epoch == (old.epoch or 0) + 1
    main, state = world.main(), git(world.bare, "rev-parse", STATE)
    with pytest.raises(Stale, match="publisher lease epoch"):
        old.handle(pubqueue.entries(pubqueue.view(world.planes["pub"]))[0])
    assert (world.main(), git(world.bare, "rev-parse", STATE)) == (main, state)  # its stale fence moved nothing
    assert [h["outcome"] for h in rival.pass_once()] == ["landed"]


# The slow push: a pre-receive hook that was there before gitwork (kept as pre-receive.legacy, run first)
# holds a push of main for a while, so the test can kill the publisher while its landing is in flight.
SLOW_PUSH = """#!/bin/sh
input=$(cat)
case "$input" in *refs/heads/main*) if [ -f slow-push ]; then rm -f slow-push; touch pushing; sleep 4; fi ;; esac
exit 0
"""


def test_a_code_remote_apart_from_the_arbiter_a_landing_found_on_the_branch_is_recorded_not_repeated(
        world: World) -> None:
    """With a code remote that is not the arbiter the branch moves first, then the record: a publisher
    that died in between left the session on the branch. The next one records it (mode ``found``)
    without a second merge, and lands the next entry by a CAS push to the code remote."""
    code = make_repo(world.base / "code.git", bare=True)
    assert run_gw(world.base, "hooks", "install", "--server", str(code)).returncode == 0
    git(world.base / "alice", "push", "-q", str(code), "main")
    for name in ("alice", "bob", "pub"):
        git(world.base / name, "remote", "add", "code", str(code))
    first = world.session("alice", {"x.txt": "x\n"})
    second = world.session("bob", {"y.txt": "y\n"})
    pubqueue.enqueue(world.planes["alice"], first, remote="code")
    pubqueue.enqueue(world.planes["bob"], second, remote="code")
    alice = world.base / "alice"
    (alice / "z.txt").write_text("z\n")  # main moves under the queue: landing the first needs a merge
    git(alice, "add", "z.txt")
    git(alice, "commit", "-q", "-m", "z")
    git(alice, "push", "-q", str(code), "main")
    source = git(code, "rev-parse", f"refs/heads/session/{first}")
    tree = git(code, "merge-tree", "--write-tree", "main", source)
    merged = git(code, "commit-tree", tree, "-p", "main", "-p", source, "-m", f"Merge session {first}")
    git(code, "update-ref", "refs/heads/main", merged)  # what the dead publisher pushed before its record
    result = pubqueue.work(world.planes["pub"], "code", once=True)
    assert [(h["session"], h["mode"]) for h in result["handled"]] == [(first, "found"), (second, "merge")]
    assert git(code, "rev-list", "--count", "--merges", "main") == "2"  # the dead one's, and the second's
    assert git(code, "log", "--format=%s", "main").count("alice's change") == 1
    assert world.main() == git(world.base / "alice", "rev-parse", "origin/main")  # the arbiter's main: untouched


def test_an_entry_removed_while_the_publisher_works_on_it_is_skipped(world: World) -> None:
    first = world.session("alice", {"x.txt": "x\n"})
    pubqueue.enqueue(world.planes["alice"], first)
    publisher = pubqueue.Publisher(world.planes["pub"], ttl=60)
    publisher.take()
    entry = pubqueue.entries(pubqueue.view(world.planes["pub"]))[0]
    world.planes["alice"].do("queue-remove", session=first, reason="not yet")
    main = world.main()
    assert publisher.handle(entry)["outcome"] == "removed"
    assert world.main() == main  # the branch moves with the record or not at all
    publisher.release()


@pytest.mark.slow
@pytest.mark.parametrize("phase", ["gate", "push"])
def test_a_publisher_killed_mid_landing_another_finishes_and_nothing_lands_twice(world: World, phase: str) -> None:
    """``gate``: killed (with its gate) while the gate runs, before anything moved. ``push``: only the
    publisher's own process is killed while its atomic push of main and the queue-land record is inside
    the code remote's hook; that orphaned push may still land both. Either way the next publisher,
    once the dead one's lease has expired, lands what is left, and nothing twice."""
    first = world.session("alice", {"x.txt": "x\n"})
    second = world.session("bob", {"y.txt": "y\n"})
    pubqueue.enqueue(world.planes["alice"], first)
    pubqueue.enqueue(world.planes["bob"], second)
    pub = world.base / "pub"
    mark = world.base / "gate-started" if phase == "gate" else world.bare / "pushing"
    git(pub, "config", "gitwork.gates", 'touch "$GW_MARK"; sleep 30' if phase == "gate" else "true")
    if phase == "push":
        legacy = world.bare / "hooks" / "pre-receive.legacy"
        legacy.write_text(SLOW_PUSH)
        legacy.chmod(0o755)
        (world.bare / "slow-push").touch()
    env = {**os.environ, "GW_AGENT": "pub", "GW_NOW": "2030-01-01T12:02:00Z", "GW_MARK": str(mark)}
    doomed = subprocess.Popen([*gw_cmd(), "queue", "work", "--once", "--ttl", "60s"], cwd=pub, env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)
    deadline = time.monotonic() + 60
    while not mark.exists() and time.monotonic() < deadline and doomed.poll() is None:
        time.sleep(0.05)
    assert mark.exists(), doomed.communicate()
    if phase == "gate":
        os.killpg(doomed.pid, signal.SIGKILL)  # the publisher and its gate
    else:
        os.kill(doomed.pid, signal.SIGKILL)  # the publisher only: its git push goes on without it
    doomed.wait()
    # Another publisher on another clone: while the dead one's lease lasts it is refused (75); after, it takes over.
    other = world.base / "bob"
    git(other, "config", "gitwork.gates", "true")
    busy = run_gw(other, "queue", "work", "--once", env={"GW_AGENT": "pub2", "GW_NOW": "2030-01-01T12:02:30Z"})
    assert busy.returncode == 75, busy.stdout + busy.stderr
    later = {"GW_AGENT": "pub2", "GW_NOW": "2030-01-01T12:04:00Z"}
    done = run_gw(other, "queue", "work", "--once", "--json", env=later)
    assert done.returncode == 0, done.stdout + done.stderr
    handled = json.loads(done.stdout)["handled"]
    assert all(h["outcome"] == "landed" for h in handled)
    assert [h["session"] for h in handled] == ([first, second] if phase == "gate" else [first, second][-len(handled):])
    log = git(world.bare, "log", "--format=%H %s", "main")
    assert log.count("bob's change") == 1 and log.count("alice's change") == 1
    assert git(world.bare, "rev-list", "--count", "--merges", "main") == "1"
    again = run_gw(other, "queue", "work", "--once", "--json", env={**later, "GW_NOW": "2030-01-01T12:05:00Z"})
    assert json.loads(again.stdout)["handled"] == []
    listed = run_gw(other, "queue", "--json", env=later)
    assert listed.returncode == 0 and json.loads(listed.stdout) == []
    # Each session was recorded landed exactly once on the state.
    with Workplane(str(other), agent="pub2") as plane:
        Arbiter(plane).sync()
        ctx = plane.context()
        for who, session in (("alice", first), ("bob", second)):
            landed = [e for e in ctx.records(world.items[who]) if e.get("type") == "publish"]
            assert [e["session"] for e in landed] == [session]


def test_the_rest_route_and_the_mcp_tools_are_the_same_queue(world: World, monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("fastapi")
    from fastapi.testclient import TestClient

    from gitwork.mcp import tools
    from gitwork.serve.app import create_app
    from gitwork.serve.tokens import Tokens
    from gitwork.store import Repository

    monkeypatch.setenv("GW_NOW", "2030-01-01T12:05:00Z")
    first = world.session("alice", {"x.txt": "x\n"})
    repo = world.base / "alice"
    # MCP: the tool queue-add runs gw publish --queue's function (pushes the branch, records queue-add).
    session = tools.Session(world.planes["alice"])
    failed, queued = session.call("queue-add", {"item": world.items["alice"], "session": first})
    assert not failed and queued["position"] == 1, queued
    failed, again = session.call("queue-add", {"item": world.items["alice"], "session": first})
    assert failed and again["code"] == 6  # queued already
    failed, listed = session.call("queue", {})
    assert not failed and [e["session"] for e in listed] == [first]
    token = Tokens(Repository.discover(str(repo)).gitwork_dir()).add("bob", "person")[0]
    with TestClient(create_app(str(repo)), base_url="http://gw", headers={"Authorization": f"Bearer {token}"}) as http:
        assert http.get("/v1/queue").json() == listed
        # REST: bob cannot queue alice's session by document, nor remove her entry (no admins: a person may).
        refused = http.post("/v1/commands", json={"op": "queue-add", "item": world.items["alice"], "session": first})
        assert refused.status_code in (403, 409) and refused.json()["ok"] is False
        elsewhere = http.post("/v1/queue", json={"item": world.items["alice"], "session": first})
        assert elsewhere.status_code in (403, 409) and elsewhere.json()["ok"] is False
        forged = http.post("/v1/commands", json={"op": "queue-land", "epoch": 1, "session": first,
                                                 "commit": "0" * 40, "mode": "merge"})
        assert forged.status_code == 422
        assert http.get("/v1/queue").json() == listed
