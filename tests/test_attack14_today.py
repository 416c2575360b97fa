"""An outsider's pass (session 12, attack14) on what was added today (``git log 8f96889..main``).

Real clones, real bare remotes, real git; nothing mocked.
"""

from __future__ import annotations

import json
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


@pytest.mark.parametrize("kind", ["blob", "tag", "superscript", "huge"])
def test_a_hostile_fence_ref_does_not_wedge_the_publisher(world: World, kind: str) -> None:  # noqa: F811
    """Anyone who can push to the code remote can point the fence ref at anything: a blob, an annotated tag,
    a commit whose ``Epoch:`` is a digit Python's ``isdigit`` takes but ``int`` does not. The arbiter still
    renews the publisher's lease, so (docs/sessions.md) the fence is overwritten and the queue lands; it
    must not stop every pass of every publisher for good (a traceback, or git's own error)."""
    code = apart_remote(world)
    _hostile_fence(code, kind)
    session = world.session("alice", {"x.txt": "x\n"})
    pubqueue.enqueue(world.planes["alice"], session, remote="code")
    result = pubqueue.work(world.planes["pub"], "code", once=True)
    assert [h["outcome"] for h in result["handled"]] == ["landed"]
    assert git(code, "show", "main:x.txt") == "x"
    assert fence_epochs(code)[0] != "Epoch: 99999999999999999999"
