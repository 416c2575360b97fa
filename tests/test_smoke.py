from __future__ import annotations

import json

from conftest import git, run_gw, tip


def test_claim_release_cycle_through_the_cli(repo):
    assert run_gw(repo, "init").returncode == 0
    created = run_gw(repo, "new", "Write the docs", "--json")
    assert created.returncode == 0, created.stderr
    item = json.loads(created.stdout)["item"]
    claimed = run_gw(repo, "claim", item[:8], "--as", "alice", "--json")
    assert claimed.returncode == 0, claimed.stderr
    lease = json.loads(claimed.stdout)
    assert (lease["epoch"], lease["fence"], lease["holder"]) == (1, 1, "alice")
    before = tip(repo)
    lost = run_gw(repo, "claim", item, "--as", "bob")
    assert lost.returncode == 75
    assert tip(repo) == before
    assert run_gw(repo, "release", item, "--as", "alice", "--fence", "1").returncode == 0
    log = git(repo, "log", "--format=%s", "refs/gitwork/state").splitlines()
    assert log[0].startswith(f"release {item} by alice")
    assert len(log) == 4  # init, new, claim, release: one commit per successful command
