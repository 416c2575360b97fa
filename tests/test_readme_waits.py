"""README.md's "Waiting on events" block, run as written (the README's shell examples are executed by a
test: tests/test_readme.py runs the others)."""

from __future__ import annotations

import subprocess
from pathlib import Path

from conftest import git, make_repo, tip
from test_readme import blocks, gw_on_path


def test_the_waiting_on_events_block_runs_as_written(tmp_path: Path) -> None:
    (block,) = [body for body in blocks("sh") if "gw waits check" in body]
    repo = make_repo(tmp_path / "repo")
    for key, value in (("user.name", "dev"), ("user.email", "dev@example.com")):
        git(repo, "config", key, value)
    git(repo, "checkout", "-q", "-b", "main")
    git(repo, "commit", "-q", "--allow-empty", "-m", "one")
    git(repo, "checkout", "-q", "-b", "feature")
    git(repo, "commit", "-q", "--allow-empty", "-m", "the feature")
    git(repo, "checkout", "-q", "main")
    env = {**gw_on_path(tmp_path), "GW_AGENT": "alice"}
    assert subprocess.run(["gw", "init"], cwd=repo, env=env, capture_output=True).returncode == 0
    done = subprocess.run(["bash", "-e", "-c", block], cwd=repo, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "waiting on: timer until" in done.stdout and "waiting on: ref feature reachable from main" in done.stdout
    assert "claim refused: exit 6" in done.stdout and "is waiting on timer until" in done.stderr
    assert "satisfied" in done.stdout
    assert done.stdout.rstrip().splitlines()[-1].endswith("Announce the release"), done.stdout  # ready at last
    assert tip(repo) is not None
