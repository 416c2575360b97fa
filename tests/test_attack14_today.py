"""An outsider's pass (session 12, attack14) on what was added today (``git log 8f96889..main``).

- the publish queue's fence on a code remote apart: a fence ref pointed by hand (a plain push, which
  gitwork's hook on the code remote lets through) at a blob, an annotated tag or a commit saying a
  non-ASCII digit stopped every publisher for good; a fence moved by hand while the gates ran was taken
  for a takeover (exit 7); a running ``gw queue work`` ended when the target kept moving (exit 13);
  over git daemon and smart HTTP the fence and a lost landing's read-back hold;
- the arbiter's clock as a verdict: an arbiter whose clock lags made every clone give up every local
  command;
- the coordinator's bounded push of ends: cut by the bound, landed on resume, nothing twice (held).

Real clones, real bare remotes (file://, ``git daemon``, smart HTTP), real git; nothing mocked.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from conftest import git, make_repo, run_gw, tip
from gitwork import pubqueue
from test_pubqueue import World, template, world  # noqa: F401  (fixtures)
from test_pubqueue_fence import apart_remote, fence_epochs
from test_sessions import person_identity  # noqa: F401  (autouse fixture)

# --- the publish queue's fence on a code remote apart ------------------------------------------------------------


def _hostile_fence(code: Path, kind: str) -> str:
    """Point the code remote's fence ref at something hostile, as anyone with push access can."""
    if kind == "blob":
        oid = git(code, "hash-object", "-w", "--stdin", input=b"not a fence\n")
    else:
        tree = git(code, "hash-object", "-t", "tree", "-w", "--stdin", input=b"")
        epoch = {"superscript": "\u00b2", "arabic": "\u0661\u0662", "tag": "1", "huge": "99999999999999999999"}[kind]
        oid = git(code, "commit-tree", tree, "-m", f"mine now\n\nEpoch: {epoch}")
        if kind == "tag":
            git(code, "tag", "-a", "-m", "a tag", "t", oid)
            oid = git(code, "rev-parse", "refs/tags/t")
    git(code, "update-ref", pubqueue.FENCE_REF, oid)
    return oid


def lands_one(world: World, code: Path) -> None:  # noqa: F811
    """alice's session, queued for the code remote, lands in one pass of pub's publisher."""
    session = world.session("alice", {"x.txt": "x\n"})
    pubqueue.enqueue(world.planes["alice"], session, remote="code")
    result = pubqueue.work(world.planes["pub"], "code", once=True)
    assert [h["outcome"] for h in result["handled"]] == ["landed"]
    assert git(code, "show", "main:x.txt") == "x"


@pytest.mark.parametrize("kind", ["blob", "tag", "superscript"])
def test_a_hostile_fence_ref_does_not_wedge_the_publisher(world: World, kind: str) -> None:  # noqa: F811
    """Anyone who can push to the code remote can point the fence ref at anything: a blob, an annotated tag,
    a commit whose ``Epoch:`` is a digit Python's ``isdigit`` takes but ``int`` does not. The arbiter still
    renews the publisher's lease, so (docs/sessions.md) the fence is overwritten and the queue lands; it
    must not stop every pass of every publisher for good (a traceback, or git's own error)."""
    code = apart_remote(world)
    _hostile_fence(code, kind)
    lands_one(world, code)
    assert fence_epochs(code)[0] != "Epoch: 99999999999999999999"


# A gate that moves the code remote's fence by hand while the publisher's gates run (anyone who can push
# there can), to a commit saying an epoch the arbiter never granted. (The scratch worktree is
# <base>/pub/.worktrees/queue/<entry>: the code remote is four folders up.)
HAND_MOVE = ("d=../../../../code.git; g='git -c user.name=h -c user.email=h@x --git-dir='$d; "
             "t=$($g hash-object -t tree -w --stdin </dev/null); "
             "c=$(printf 'by hand\\n\\nEpoch: 999\\n' | $g commit-tree $t); $g update-ref refs/gitwork-queue/fence $c")


@pytest.mark.parametrize("world", [(HAND_MOVE,)], indirect=True)
def test_a_fence_moved_by_hand_during_the_gates_does_not_stop_a_publisher_the_arbiter_still_renews(
        world: World) -> None:  # noqa: F811
    """docs/sessions.md: a fence moved by hand is overwritten while the arbiter renews the lease. That held
    only for the move before the pass (``_fence``); moved while the gates ran, the landing took it for a
    takeover ("the publisher lease was taken over", exit 7) though nobody else held the lease, and stopped
    ``gw queue work``: anyone who can push to the code remote could stop the queue at every pass."""
    code = apart_remote(world)
    lands_one(world, code)
    assert fence_epochs(code)[0] != "Epoch: 999"


# --- the arbiter's clock as a verdict ----------------------------------------------------------------------------


def test_an_arbiter_whose_clock_lags_does_not_make_a_clone_give_up_its_commands(machine_a: Path,
                                                                                  remote: Path) -> None:
    """The arbiter's clock stopped or lags by an hour (a restored VM, NTP down), the clone's is right. Every
    command the clone made is "more than 10 minutes past the arbiter's clock", and the clock refusal was taken
    as its verdict: the clone gave up every local command it had (written off in arbiter-refused.jsonl, the
    items it created gone), though nothing was wrong with them and the arbiter would take them once its clock
    is fixed. A clock verdict is right only when the clone's own clock agrees with the arbiter's now (its
    clock ran ahead *then*); clocks that still disagree fail the push and keep the commands (as before)."""
    import datetime as dt

    from conftest import pin_arbiter_clock
    from test_attack13_seams import hooked
    from test_sync import STATE, gw_ok

    a = machine_a
    hooked(remote)
    lag = (dt.datetime.now(dt.timezone.utc) - dt.timedelta(hours=1)).strftime("%Y-%m-%dT%H:%M:%SZ")
    pin_arbiter_clock(remote, lag)
    made = gw_ok(a, "new", "made while the arbiter's clock lags")
    done = run_gw(a, "sync", "--json")
    assert done.returncode != 0, done.stdout  # refused until the arbiter's clock is right
    assert not (a / ".git" / "gitwork" / "arbiter-refused.jsonl").exists(), done.stdout
    assert made["command_id"] in git(a, "log", "--format=%B", STATE)  # still the clone's, to push later
    assert tip(remote) != tip(a)
    hooked(remote)  # the arbiter's clock put right (the hook installed again: no pinned clock)
    assert run_gw(a, "sync").returncode == 0
    assert made["command_id"] in git(remote, "log", "--format=%B", STATE) and tip(remote) == tip(a)


# The code remote's post-receive.legacy (run by gitwork's post-receive, first): kills the receive-pack once,
# after the refs moved, when the push moved main: the landing's answer is lost.
LOSE_LANDING = """#!/bin/sh
input=$(cat)
case "$input" in *refs/heads/main*) ;; *) exit 0 ;; esac
if [ -f "$GIT_DIR/lose-answer" ]; then rm -f "$GIT_DIR/lose-answer"; kill -9 $(cut -d' ' -f4 /proc/$PPID/stat); fi
exit 0
"""


@pytest.mark.parametrize("transport", ["daemon", "http"])
def test_a_code_remote_over_the_network_under_gitworks_hook_takes_the_fence_and_a_lost_landing_is_read_back(
        world: World, transport: str, request: pytest.FixtureRequest) -> None:  # noqa: F811
    """The code remote served by ``git daemon`` or smart HTTP, under gitwork's server hook (which must not
    refuse the fence's empty commits on ``refs/gitwork-queue/fence``), with a fence a person left on a blob,
    and the landing's answer lost (its receive-pack killed after the refs moved): the publisher leases over
    the blob, lands once, and reads the lost answer back."""
    import subprocess

    from daemon import GitDaemon
    from httpd import GitHTTPServer

    served = world.base / "served"
    served.mkdir()
    code = make_repo(served / "code.git", bare=True)
    git(code, "config", "http.receivepack", "true")
    assert run_gw(world.base, "hooks", "install", "--server", str(code)).returncode == 0
    (code / "hooks" / "post-receive.legacy").write_text(LOSE_LANDING)
    (code / "hooks" / "post-receive.legacy").chmod(0o755)
    server = GitDaemon(served) if transport == "daemon" else GitHTTPServer(served)
    server.start()
    request.addfinalizer(server.stop)
    url = server.url("code")
    git(world.base / "alice", "push", "-q", url, "main")
    blob = git(world.base / "alice", "hash-object", "-w", "--stdin", input=b"left here\n")
    pushed = subprocess.run(["git", "push", url, f"{blob}:{pubqueue.FENCE_REF}"], cwd=world.base / "alice",
                            capture_output=True, text=True)
    for name in ("alice", "pub"):
        git(world.base / name, "remote", "add", "code", url)
    session = world.session("alice", {"x.txt": "x\n"})
    pubqueue.enqueue(world.planes["alice"], session, remote="code")
    (code / "lose-answer").touch()
    result = pubqueue.work(world.planes["pub"], "code", once=True)
    assert not (code / "lose-answer").exists()  # the answer was lost
    assert [h["outcome"] for h in result["handled"]] == ["landed"], result
    assert git(code, "show", "main:x.txt") == "x"
    assert git(code, "cat-file", "-t", pubqueue.FENCE_REF) == "commit"
    if pushed.returncode == 0:  # (the hook let a person put a blob there: the publisher leased over it)
        assert git(code, "rev-list", "--count", pubqueue.FENCE_REF) == "2"


# --- the coordinator's bounded push of its ends ------------------------------------------------------------------

# The arbiter's pre-receive.legacy (run first by gitwork's): once, it stops itself (SIGSTOP), its pid said.
PAUSE_ONCE = """#!/bin/sh
cat >/dev/null
if [ -f "$GIT_DIR/pause" ]; then rm -f "$GIT_DIR/pause"; echo $$ >"$GIT_DIR/paused.tmp"; mv "$GIT_DIR/paused.tmp" "$GIT_DIR/paused"; kill -STOP $$; fi
exit 0
"""


def test_a_push_of_ends_cut_by_the_coordinators_bound_lands_once_when_the_arbiter_resumes(machine_a: Path,
                                                                                         remote: Path) -> None:
    """The arbiter goes silent while a coordinator pass pushes its ends (its hook stopped): the pass gives up
    after its bound (a quarter of its ttl), keeps the marker that it owes a push, and the receive-pack it
    left behind may still land once resumed. The next pass pushes again: every command is on the arbiter
    exactly once and the clone's ref is the arbiter's (nothing lost, nothing twice)."""
    import os
    import signal
    import time

    from conftest import poll
    from gitwork.launch.coordinate import UNPUSHED, publish_ends
    from gitwork.workplane import Workplane
    from test_attack13_seams import hooked
    from test_sync import STATE, gw_ok

    a = machine_a
    hooked(remote)
    legacy = remote / "hooks" / "pre-receive.legacy"
    legacy.write_text(PAUSE_ONCE)
    legacy.chmod(0o755)
    made = [gw_ok(a, "new", f"offline {n}")["command_id"] for n in range(3)]
    (remote / "pause").touch()
    with Workplane(str(a)) as plane:
        first = publish_ends(plane, [], owing=True, timeout=1.0)
        assert [d["action"] for d in first] == ["sync-error"], first
        owed = Path(plane.repo.gitwork_dir()) / UNPUSHED
        assert owed.exists()
        paused = int((remote / "paused").read_text())
        os.kill(paused, signal.SIGCONT)  # the arbiter resumes: the push left behind may land now
        poll(lambda: not os.path.exists(f"/proc/{paused}"), 30, what="the resumed hook to end")
        time.sleep(0.2)
        second = publish_ends(plane, [], owing=True, timeout=10.0)
        assert not any(d["action"] == "sync-error" for d in second), second
        assert not owed.exists()
    log = git(remote, "log", "--format=%B", STATE)
    assert [log.count(f"Command-Id: {c}") for c in made] == [1, 1, 1], log
    assert tip(remote) == tip(a)


# A gate that, its first five runs, moves the code remote's main (a plain push meanwhile, as another team's
# merge button does): each round of the publisher finds main moved when it lands.
BUSY_MAIN = ("d=../../../../code.git; n=$(cat $d/moves 2>/dev/null || echo 0); "
             "if [ $n -lt 5 ]; then echo $((n+1)) >$d/moves; g='git -c user.name=h -c user.email=h@x --git-dir='$d; "
             "c=$(echo busy | $g commit-tree 'main^{tree}' -p main); $g update-ref refs/heads/main $c; fi")


def test_a_busy_code_remote_does_not_end_a_running_publisher(world: World) -> None:  # noqa: F811
    """``gw queue work`` (no ``--once``) on a code remote whose main others push to: main moved under each of
    the publisher's rounds (MAX_ROUNDS of them), and the pass said "the next pass tries again", but the
    error ended ``gw queue work`` itself: the queue stood still until a person started it again. The
    next pass does try again, and lands."""
    import os
    import signal
    import subprocess
    import time

    from conftest import gw_cmd

    code = apart_remote(world)
    session = world.session("alice", {"x.txt": "x\n"})
    pubqueue.enqueue(world.planes["alice"], session, remote="code")
    pub = world.base / "pub"
    git(pub, "config", "gitwork.gates", BUSY_MAIN)
    env = {**os.environ, "GW_AGENT": "pub", "GW_NOW": "2030-01-01T12:02:00Z"}
    worker = subprocess.Popen([*gw_cmd(), "queue", "work", "--remote", "code"], cwd=pub, env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)
    try:
        deadline = time.monotonic() + 60
        while worker.poll() is None and time.monotonic() < deadline \
                and git(code, "ls-tree", "--name-only", "main", "x.txt", check=False) != "x.txt":
            time.sleep(0.05)
        assert worker.poll() is None, worker.communicate()
        assert git(code, "show", "main:x.txt") == "x"
        assert (code / "moves").read_text().strip() == "5"
    finally:
        if worker.poll() is None:
            os.killpg(worker.pid, signal.SIGINT)
        try:
            worker.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(worker.pid, signal.SIGKILL)
            worker.communicate()
