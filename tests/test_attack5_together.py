"""An attacker's pass (session 5) over features together: ``claim --next`` inside a ``batch`` after an
earlier member claimed or deferred the item it would have picked.

``claim --next`` ranks the ready items of the batch's base commit (the read cache is at that commit);
an item an earlier member of the same batch already changed is no longer a candidate there, so the
member picks the next one instead of refusing the whole batch (75 "held by you", 6 "waiting").
"""

from __future__ import annotations

import json
from pathlib import Path

from conftest import git, gw_here

ENV = {"GW_AGENT": "alice", "GW_NO_AUTO_GC": "1"}


def ok(repo: Path, *args: str, input: str | None = None) -> str:
    done = gw_here(repo, *args, env=ENV, input=input)
    assert done.returncode == 0, (args, done.stdout, done.stderr)
    return done.stdout


def world(repo: Path) -> list[str]:
    ok(repo, "init")
    for n in range(3):
        ok(repo, "new", f"task {n}")
    return [row["item"] for row in json.loads(ok(repo, "ready", "--json"))]


def batch(repo: Path, *ops: dict) -> dict:
    return json.loads(ok(repo, "apply", "-", "--json", input=json.dumps({"op": "batch", "ops": list(ops)})))


def test_two_claim_next_in_one_batch_take_two_items(repo: Path) -> None:
    ready = world(repo)
    batch(repo, {"op": "claim", "next": True}, {"op": "claim", "next": True})
    held = [row["item"] for row in json.loads(ok(repo, "list", "--json")) if row["holder"] == "alice"]
    assert sorted(held) == sorted(ready[:2]), (held, ready)


def test_claim_next_after_a_defer_in_the_same_batch_takes_the_next_item(repo: Path) -> None:
    ready = world(repo)
    before = git(repo, "rev-parse", "refs/gitwork/state")
    batch(repo, {"op": "defer", "item": ready[0], "until": "2h"}, {"op": "claim", "next": True})
    assert git(repo, "rev-parse", "refs/gitwork/state") != before
    rows = {row["item"]: row for row in json.loads(ok(repo, "list", "--json"))}
    assert rows[ready[1]]["holder"] == "alice"
    assert rows[ready[0]]["holder"] is None and rows[ready[0]]["blocked"]


def test_claim_next_in_a_batch_with_nothing_left_is_not_found(repo: Path) -> None:
    ready = world(repo)
    before = git(repo, "rev-parse", "refs/gitwork/state")
    done = gw_here(repo, "apply", "-", env=ENV, input=json.dumps({"op": "batch", "ops": [
        *({"op": "claim", "item": item} for item in ready), {"op": "claim", "next": True}]}))
    assert done.returncode == 3 and "#4 (claim)" in done.stderr, done.stderr
    assert git(repo, "rev-parse", "refs/gitwork/state") == before
