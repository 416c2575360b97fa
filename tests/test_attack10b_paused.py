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

import pytest

from conftest import git, gw_cmd, make_repo, run_gw
from gitwork import pubqueue
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


APART = pytest.mark.xfail(strict=True, reason=(
    "with a code remote apart from the arbiter the publisher's push of the target is not fenced by its lease "
    "epoch: a publisher paused between its last lease check and its push, resumed after another publisher took "
    "over and sent the entry back, still lands it (only its queue-land record is refused); attack10b report"))


@pytest.mark.parametrize("where", ["arbiter", pytest.param("apart", marks=APART)])
def test_a_paused_publisher_resumed_after_a_takeover_lands_nothing(world: World, where: str) -> None:  # noqa: F811
    """docs/sessions.md: "a paused publisher that wakes up lands nothing". With the arbiter as the code
    remote that holds (the branch and the record are one atomic push, refused under a taken-over epoch).
    With a code remote apart from the arbiter, the branch moves first by a compare-and-swap on the
    target's tip only: a publisher paused at its push, past its lease, while another takes over and
    sends the entry back (its gate fails there), lands the session on main when it is continued."""
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
