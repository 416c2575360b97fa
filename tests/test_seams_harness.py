"""Seams the system harness (tests/harness/) pointed at, each pinned by a deterministic test.

- acting as who it says: a lease's fence is not a credential. ``renew``/``release``/``handoff`` by an
  identity that is not the holder are refused (exit 7, nothing written) even when it presents the
  holder's current fence; an administrator ends someone's lease with ``revoke`` or ``takeover``.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from conftest import gw_here, make_repo, tip


@pytest.fixture
def plane(tmp_path: Path) -> tuple[Path, str]:
    repo = make_repo(tmp_path / "repo")
    assert gw_here(repo, "init").returncode == 0
    made = gw_here(repo, "new", "seam item", "--as", "alice", "--json")
    assert made.returncode == 0, made.stdout + made.stderr
    return repo, json.loads(made.stdout)["item"]


@pytest.mark.parametrize("verb", [["renew"], ["release"], ["handoff", "--reason", "blocked"]])
def test_a_holder_only_op_by_another_identity_with_the_holders_fence_is_refused(plane: tuple[Path, str],
                                                                               verb: list[str]) -> None:
    repo, item = plane
    claim = gw_here(repo, "claim", item, "--as", "alice", "--ttl", "1h", "--json")
    assert claim.returncode == 0, claim.stdout + claim.stderr
    fence = json.loads(claim.stdout)["fence"]
    before = tip(repo)
    done = gw_here(repo, verb[0], item, *verb[1:], "--as", "bob", "--fence", str(fence), "--json")
    assert done.returncode == 7, (done.returncode, done.stdout, done.stderr)
    assert "alice" in done.stdout + done.stderr and "bob" in done.stdout + done.stderr
    assert tip(repo) == before
    lease = json.loads(gw_here(repo, "show", item, "--json").stdout)
    assert "alice" in json.dumps(lease) and "Traceback" not in done.stderr
    # the holder itself, with the same fence, still may
    mine = gw_here(repo, verb[0], item, *verb[1:], "--as", "alice", "--fence", str(fence), "--json")
    assert mine.returncode == 0, mine.stdout + mine.stderr
