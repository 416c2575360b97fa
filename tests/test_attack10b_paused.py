"""An attacker's pass on paused processes (SIGSTOP ... SIGCONT): something another process decides is
dead or stale (by age, or by a lease that ran out) while its owner is only paused, and that the owner
then acts on when resumed.

A resumed process that is refused (a stale fence, a lost compare-and-swap) is fine; one that silently
does what another process already decided (or undid) is not.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from conftest import git, gw_cmd, make_repo, run_gw, second_clone
from gitwork import pubqueue, stalelocks
from test_launch import gw_json
from test_pubqueue import World, template, world  # noqa: F401  (fixtures)
from test_sessions import person_identity  # noqa: F401  (autouse fixture)

# The publisher's client-side pre-push hook (pub's clone only), standing for the moment a tester pauses
# the publisher's process group: just before its push of main leaves (the lease already checked, the
# ref advertisement read). It says so, then stops itself; the test stops the whole group, and later
# continues it.
PAUSE_AT_PUSH = """#!/bin/sh
input=$(cat)
case "$input" in *refs/heads/main*) if [ -f "$GW_PAUSE" ]; then rm -f "$GW_PAUSE"; echo $$ > "$GW_MARK"; kill -STOP $$; fi ;; esac
exit 0
"""


@pytest.mark.parametrize("where", ["arbiter", "apart"])
def test_a_paused_publisher_resumed_after_a_takeover_lands_nothing(world: World, where: str) -> None:  # noqa: F811
    """docs/sessions.md: "a paused publisher that wakes up lands nothing". With the arbiter as the code
    remote, the branch and the record are one atomic push, refused under a taken-over epoch. With a code
    remote apart from the arbiter, the branch once moved by a compare-and-swap on the target's tip only: a
    publisher paused at its push, past its lease, while another took over and sent the entry back (its
    gate failed there), landed the session on main when it was continued (a strict xfail until session
    12). Now the successor moved the code remote's publisher fence first, and the landing's atomic push
    carries the fence's lease: refused whole, exit 7."""
    code, remote = world.bare, "origin"
    if where == "apart":
        code, remote = make_repo(world.base / "code.git", bare=True), "code"
        assert run_gw(world.base, "hooks", "install", "--server", str(code)).returncode == 0
        git(world.base / "alice", "push", "-q", str(code), "main")
        for name in ("alice", "bob", "pub"):
            git(world.base / name, "remote", "add", "code", str(code))
    first = world.session("alice", {"x.txt": "x\n"})
    pubqueue.enqueue(world.planes["alice"], first, remote=remote)
    before = git(code, "rev-parse", "refs/heads/main")

    pub = world.base / "pub"
    hook = pub / ".git" / "hooks" / "pre-push"
    assert not hook.exists()  # (gitwork installs no pre-push hook of its own in a clone)
    hook.write_text(PAUSE_AT_PUSH)
    hook.chmod(0o755)
    pause, mark = world.base / "pause-push", world.base / "paused"
    pause.touch()
    git(pub, "config", "gitwork.gates", "true")
    env = {**os.environ, "GW_AGENT": "pub", "GW_NOW": "2030-01-01T12:02:00Z", "GW_PAUSE": str(pause),
           "GW_MARK": str(mark)}
    paused = subprocess.Popen([*gw_cmd(), "queue", "work", "--once", "--remote", remote, "--ttl", "60s", "--json"],
                              cwd=pub, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                              start_new_session=True)
    try:
        deadline = time.monotonic() + 60
        while not (mark.exists() and mark.read_text().strip()) and time.monotonic() < deadline \
                and paused.poll() is None:
            time.sleep(0.02)
        assert mark.exists(), paused.communicate()
        os.killpg(paused.pid, signal.SIGSTOP)  # the publisher, its git push and the hook: all paused
        # Its lease runs out; another publisher takes over and sends the entry back (its gate fails).
        bob = world.base / "bob"
        git(bob, "config", "gitwork.gates", "echo the build is red here; exit 3")
        later = {"GW_AGENT": "pub2", "GW_NOW": "2030-01-01T12:04:00Z"}
        took = run_gw(bob, "queue", "work", "--once", "--remote", remote, "--json", env=later)
        assert took.returncode == 0, took.stdout + took.stderr
        assert [h["outcome"] for h in json.loads(took.stdout)["handled"]] == ["returned"]
        assert git(code, "rev-parse", "refs/heads/main") == before
    finally:
        os.killpg(paused.pid, signal.SIGCONT)
    out, err = paused.communicate(timeout=60)
    # Resumed: refused (its epoch was taken over, or its entry is gone) is fine; landing is not.
    assert git(code, "rev-parse", "refs/heads/main") == before, (paused.returncode, out, err)
    if where == "apart":  # refused by the fence its successor set, and told so
        assert paused.returncode == 7 and "taken over" in err, (paused.returncode, out, err)
        assert git(code, "log", "-1", "--format=%B", pubqueue.FENCE_REF).strip().endswith("Epoch: 2")


# --- the arbiter: a push paused while its receive-pack holds the state ref's lock ----------------------------

# The arbiter's reference-transaction hook: receive-pack runs it ("prepared") once it holds the lock of every
# ref it moves, before it renames them. The push that finds a ``pauseN`` file says so and stops itself there.
PAUSE_IN_LOCK = """#!/bin/sh
[ "$1" = prepared ] || exit 0
input=$(cat)
case "$input" in *refs/gitwork/state*) ;; *) exit 0 ;; esac
for n in 1 2; do
  if [ -f "{base}/pause$n" ]; then rm -f "{base}/pause$n"; echo $$ > "{base}/paused$n"; kill -STOP $$; exit 0; fi
done
exit 0
"""


def paused_gw(repo: Path, mark: Path, *args: str, env: dict[str, str] | None = None) -> subprocess.Popen[str]:
    """``gw ARGS --json`` in ``repo`` (its own process group), paused once its push holds the arbiter's lock
    (or ended before it got there)."""
    proc = subprocess.Popen([*gw_cmd(), *args, "--json"], cwd=repo, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, start_new_session=True, env={**os.environ, **(env or {})})
    deadline = time.monotonic() + 60
    while not (mark.exists() and mark.read_text().strip()) and time.monotonic() < deadline and proc.poll() is None:
        time.sleep(0.02)
    if proc.poll() is None:
        assert mark.exists(), "neither paused nor ended"
        os.killpg(proc.pid, signal.SIGSTOP)  # the gw, its git push, the arbiter's receive-pack and its hook
    return proc


def test_a_push_paused_holding_the_arbiters_lock_is_not_told_it_landed(
        machine_a: Path, remote: Path, tmp_path: Path) -> None:
    """Two clones claim one item; a's push is paused (SIGSTOP of its process group, the arbiter's
    receive-pack with it: a file:// push runs it as a child) once it holds ``refs/gitwork/state.lock``,
    long enough for the lock to look stale; b's push comes, its pre-receive hook removes that lock, and
    b's receive-pack takes its own, and is paused there too. Continued, a's receive-pack renames the lock
    at the path (b's) over the ref and answers a "ok"; b's rename finds nothing, b retries and finds its
    own commit there. Both are told their claim was granted: two workers on one item."""
    assert run_gw(remote.parent, "hooks", "install", "--server", str(remote)).returncode == 0
    hook = remote / "hooks" / "reference-transaction"
    assert not hook.exists()
    base = tmp_path / "marks"
    base.mkdir()
    hook.write_text(PAUSE_IN_LOCK.replace("{base}", str(base)))
    hook.chmod(0o755)
    code, made = gw_json(machine_a, "new", "one item, one worker")
    assert code == 0, made
    assert run_gw(machine_a, "sync").returncode == 0
    b = second_clone(f"file://{remote}", tmp_path / "b")
    lock = remote / "refs" / "gitwork" / "state.lock"
    (base / "pause1").touch()
    paused = [paused_gw(machine_a, base / "paused1", "claim", made["item"], "--as", "alice")]
    try:
        assert paused[0].poll() is None and lock.exists()
        time.sleep(stalelocks.STALE_AFTER + 0.2)  # the pause lasts: the lock is older than STALE_AFTER (real time:
        # what may hold it is judged by when it started)
        (base / "pause2").touch()
        paused.append(paused_gw(b, base / "paused2", "claim", made["item"], "--as", "bob",
                                env={"GW_LOCK_TIMEOUT": "0.5"}))  # (refused while a's lock stays: 11)
    finally:
        for proc in paused:  # a first, then b
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGCONT)
                proc.wait(timeout=60)
    told = [(proc.returncode, *proc.communicate()) for proc in paused]
    granted = [who for who, (code, _out, _err) in zip(("alice", "bob"), told, strict=True) if code == 0]
    assert len(granted) <= 1, (told, git(remote, "log", "--format=%s", "refs/gitwork/state"))


# --- the publisher's scratch worktree: a paused publisher resumed while the one that took over gates ----------

GATE = ('if [ -n "$GW_MARK" ]; then touch "$GW_MARK"; fi; if [ -n "$GW_STOP" ]; then kill -STOP $$; fi; '
        'if [ -n "$GW_WAIT" ]; then while [ ! -f "$GW_WAIT" ]; do sleep 0.02; done; fi; test -f a.txt')


def test_a_paused_publisher_resumed_leaves_the_new_publishers_gate_alone(world: World) -> None:  # noqa: F811
    """Two publishers on one clone. Publisher 1 is paused (SIGSTOP of its group) while its gate runs in
    its scratch worktree; its lease runs out, publisher 2 takes over and gates the same entry. Publisher
    1, continued, is refused (its epoch was taken over), but on its way out it removed its scratch
    worktree, which was also publisher 2's (``.worktrees/queue/<seq>``, one per entry): publisher 2's
    gate lost its files under it and the session was sent back to its holder for a gate that "failed"
    (exit 1, no output). Now each lease epoch has its own (``<seq>-e<epoch>``)."""
    first = world.session("alice", {"x.txt": "x\n"})
    pubqueue.enqueue(world.planes["alice"], first)
    before = world.main()
    pub = world.base / "pub"
    git(pub, "config", "gitwork.gates", GATE)
    mark1, mark2, go = world.base / "gating1", world.base / "gating2", world.base / "go"
    one = subprocess.Popen([*gw_cmd(), "queue", "work", "--once", "--ttl", "60s", "--json"], cwd=pub,
                           env={**os.environ, "GW_AGENT": "pub", "GW_NOW": "2030-01-01T12:02:00Z",
                                "GW_MARK": str(mark1), "GW_STOP": "1"},
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    two = None
    try:
        deadline = time.monotonic() + 60
        while not mark1.exists() and time.monotonic() < deadline and one.poll() is None:
            time.sleep(0.02)
        assert mark1.exists(), one.communicate()
        os.killpg(one.pid, signal.SIGSTOP)  # paused inside its gate
        two = subprocess.Popen([*gw_cmd(), "queue", "work", "--once", "--json"], cwd=pub,
                               env={**os.environ, "GW_AGENT": "pub2", "GW_NOW": "2030-01-01T12:04:00Z",
                                    "GW_MARK": str(mark2), "GW_WAIT": str(go)},
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
        while not mark2.exists() and time.monotonic() < deadline and two.poll() is None:
            time.sleep(0.02)
        assert mark2.exists(), two.communicate()
        # Publisher 2's gate is running (waiting for `go`); publisher 1 is continued and ends.
        os.killpg(one.pid, signal.SIGCONT)
        out1, err1 = one.communicate(timeout=60)
        assert one.returncode == 7, (one.returncode, out1, err1)  # refused: its epoch was taken over
        go.touch()
        out2, err2 = two.communicate(timeout=60)
    finally:
        go.touch()
        for proc in (one, two):
            if proc is not None and proc.poll() is None:
                os.killpg(proc.pid, signal.SIGCONT)
                proc.kill()
                proc.wait()
    assert two.returncode == 0, out2 + err2
    assert [h["outcome"] for h in json.loads(out2)["handled"]] == ["landed"], out2
    assert world.main() != before
    assert not list((pub / ".worktrees" / "queue").iterdir())  # each removed its own
