"""The publish queue's fence on a code remote apart from the arbiter (docs/sessions.md, "The publish queue";
``pubqueue.FENCE_REF``): the code remote cannot check the publisher lease's epoch, so the publisher keeps
a fence there, moved to its epoch before it decides anything and moved again with every landing in the
same atomic push. What holds: a publisher whose lease was taken over lands nothing; a fence moved by hand
does not stop the queue while the arbiter says the lease holds; a code remote without atomic pushes is
refused before anything moves there. (The paused publisher itself: tests/test_attack10b_paused.py.)
"""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import pytest

from conftest import git, make_repo, run_gw
from gitwork import pubqueue
from gitwork.errors import Invalid, Stale
from test_pubqueue import World, template, world  # noqa: F401  (fixtures)
from test_sessions import person_identity  # noqa: F401  (autouse fixture)


def apart_remote(world: World, **config: str) -> Path:  # noqa: F811
    """A bare code remote apart from the arbiter, under gitwork's server hook, with main pushed, known as
    ``code`` in every clone; ``config`` set on it (``receive.denyNonFastForwards``, say)."""
    code = make_repo(world.base / "code.git", bare=True)
    assert run_gw(world.base, "hooks", "install", "--server", str(code)).returncode == 0
    for key, value in config.items():
        git(code, "config", key, value)
    git(world.base / "alice", "push", "-q", str(code), "main")
    for name in ("alice", "bob", "pub"):
        git(world.base / name, "remote", "add", "code", str(code))
    return code


def fence_epochs(code: Path) -> list[str]:
    """The ``Epoch:`` of each commit of the fence, newest first."""
    return [line for line in git(code, "log", "--format=%B", pubqueue.FENCE_REF).splitlines()
            if line.startswith("Epoch: ")]


def test_a_publisher_taken_over_before_it_fenced_stops_and_a_landing_moves_the_fence(world: World) -> None:  # noqa: F811
    """The successor fences first: the older publisher's own fence is refused by the arbiter (exit 7, its
    lease taken over), and it moved nothing; the successor's landing moves main and the fence together."""
    code = apart_remote(world, **{"receive.denyNonFastForwards": "true"})  # (the fence only fast-forwards)
    session = world.session("alice", {"x.txt": "x\n"})
    pubqueue.enqueue(world.planes["alice"], session, remote="code")
    old = pubqueue.Publisher(world.planes["pub"], "code", ttl=60)
    old.take()
    world.clock.at += dt.timedelta(minutes=2)  # paused past its lease, before its first pass
    rival = pubqueue.Publisher(world.planes["bob"], "code", ttl=60)
    rival.take()
    rival._fence()
    assert fence_epochs(code) == [f"Epoch: {rival.epoch}"]
    before = git(code, "rev-parse", "refs/heads/main")
    with pytest.raises(Stale, match="publisher lease epoch"):
        old.pass_once()
    assert git(code, "rev-parse", "refs/heads/main") == before
    assert fence_epochs(code) == [f"Epoch: {rival.epoch}"]  # never moved backwards
    assert [h["outcome"] for h in rival.pass_once()] == ["landed"]
    assert git(code, "rev-parse", "refs/heads/main") != before
    assert fence_epochs(code) == [f"Epoch: {rival.epoch}"] * 2  # the fence, then its landing's move


def test_a_fence_moved_by_hand_does_not_stop_a_publisher_the_arbiter_still_renews(world: World) -> None:  # noqa: F811
    """Anyone who can push to the code remote can write the fence ref; a fence at a later epoch than the
    arbiter ever granted is not a takeover while the arbiter renews the lease: it is overwritten (a
    fast-forward over it) and the queue lands."""
    code = apart_remote(world, **{"receive.denyNonFastForwards": "true"})
    tree = git(code, "hash-object", "-t", "tree", "-w", "--stdin", input=b"")
    forged = git(code, "commit-tree", tree, "-m", "mine now\n\nEpoch: 999")
    git(code, "update-ref", pubqueue.FENCE_REF, forged)
    session = world.session("alice", {"x.txt": "x\n"})
    pubqueue.enqueue(world.planes["alice"], session, remote="code")
    result = pubqueue.work(world.planes["pub"], "code", once=True)
    assert [h["outcome"] for h in result["handled"]] == ["landed"]
    assert git(code, "merge-base", "--is-ancestor", forged, pubqueue.FENCE_REF) == ""  # on top of it
    assert fence_epochs(code)[0] != "Epoch: 999"


def test_a_code_remote_without_atomic_pushes_is_refused_before_anything_moves(world: World) -> None:  # noqa: F811
    code = apart_remote(world, **{"receive.advertiseAtomic": "false"})
    session = world.session("alice", {"x.txt": "x\n"})
    pubqueue.enqueue(world.planes["alice"], session, remote="code")
    refs = git(code, "for-each-ref", "--format=%(objectname) %(refname)")
    queued = pubqueue.listing(world.planes["pub"])
    with pytest.raises(Invalid, match="does not take atomic pushes"):
        pubqueue.work(world.planes["pub"], "code", once=True)
    assert git(code, "for-each-ref", "--format=%(objectname) %(refname)") == refs  # no fence, no main
    assert pubqueue.listing(world.planes["pub"]) == queued  # the entry was not sent back for it


# A code remote's post-receive hook that kills its receive-pack once, after the refs moved: the publisher's
# push fails with the remote's end hung up, though the landing is there.
LOSE_THE_ANSWER = """#!/bin/sh
input=$(cat)
case "$input" in *{pattern}*) ;; *) exit 0 ;; esac
if [ -f "$GIT_DIR/lose-answer" ]; then rm -f "$GIT_DIR/lose-answer"; kill -9 $PPID; fi
exit 0
"""


@pytest.mark.parametrize("push", ["fence", "landing"])
def test_a_push_whose_answer_was_lost_landed_not_a_takeover(world: World, push: str) -> None:  # noqa: F811
    """The push moved the fence (the publisher's first push of its epoch) or, atomically, the target and
    the fence (the landing), and then the connection died: the publisher reads the fence back, finds its
    own, and goes on (it once took a lost landing for a takeover, exit 7, and a lost fence for a refusal)."""
    code = make_repo(world.base / "code.git", bare=True)  # (a plain code remote: no gitwork hook)
    git(world.base / "alice", "push", "-q", str(code), "main")
    for name in ("alice", "bob", "pub"):
        git(world.base / name, "remote", "add", "code", str(code))
    hook = code / "hooks" / "post-receive"
    hook.write_text(LOSE_THE_ANSWER.replace("{pattern}", "refs/heads/main" if push == "landing" else "refs/"))
    hook.chmod(0o755)
    session = world.session("alice", {"x.txt": "x\n"})
    pubqueue.enqueue(world.planes["alice"], session, remote="code")
    (code / "lose-answer").touch()  # (after the enqueue's push of the session branch)
    result = pubqueue.work(world.planes["pub"], "code", once=True)
    assert not (code / "lose-answer").exists()  # the answer was lost
    assert [h["outcome"] for h in result["handled"]] == ["landed"]
    assert git(code, "show", "main:x.txt") == "x"
    assert pubqueue.listing(world.planes["pub"]) == []
