"""An attacker's pass (session 5) over the execution ledger: execution records forged by hand on the
state ref (git plumbing, as another tool or a careless hand leaves them). Every reader of them (``gw
cost``, ``gw runs``, ``gw show``) must refuse a bad one as corrupt (exit 8, naming its file), never
exit 1 on a Python error; the arbiter's hook names the same problem.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from conftest import git, gw_here
from gitwork.model import state_file_problem
from gitwork.records.executions import execution_path

ENV = {"GW_AGENT": "alice", "GW_NO_AUTO_GC": "1"}
STATE = "refs/gitwork/state"
CORRUPT = 8
EXEC = "x-forged0001"


def ok(repo: Path, *args: str) -> str:
    done = gw_here(repo, *args, env=ENV)
    assert done.returncode == 0, (args, done.stdout, done.stderr)
    return done.stdout


def forge(repo: Path, path: str, data: bytes) -> None:
    """Commit ``data`` at ``path`` (new folders included) on the state ref, with a scratch index."""
    blob = git(repo, "hash-object", "-w", "--stdin", input=data).strip()
    env = {**os.environ, "GIT_INDEX_FILE": str(repo / ".git" / "forge-index"), "GIT_AUTHOR_NAME": "hand",
           "GIT_AUTHOR_EMAIL": "hand@example.invalid", "GIT_COMMITTER_NAME": "hand",
           "GIT_COMMITTER_EMAIL": "hand@example.invalid"}

    def run(*args: str) -> str:
        return subprocess.run(["git", *args], cwd=repo, env=env, capture_output=True, text=True, check=True).stdout.strip()

    run("read-tree", STATE)
    run("update-index", "--add", "--cacheinfo", f"100644,{blob},{path}")
    commit = run("commit-tree", run("write-tree"), "-p", STATE, "-m", f"hand edit of {path}")
    run("update-ref", STATE, commit)


BAD = {
    "usage is a list": "usage: [1]\n",
    "tokens are text": "usage:\n  tokens_in: abc\n",
    "reports is a list": "usage:\n  reports: [1]\n",
    "tokens are negative": "usage:\n  tokens_out: -5\n",
    "no state": None,
}


@pytest.mark.parametrize("case", list(BAD))
def test_a_forged_execution_record_is_corrupt_not_a_crash(repo: Path, case: str) -> None:
    ok(repo, "init")
    item = ok(repo, "new", "victim").strip()
    extra = BAD[case]
    body = f"id: {EXEC}\nitem: {item}\n" + ("state: running\n" if case != "no state" else "") + (extra or "")
    forge(repo, execution_path(EXEC), body.encode())
    before = git(repo, "rev-parse", STATE)
    for args in (["cost"], ["cost", "--by", "agent"], ["runs"], ["runs", "--json"]):
        done = gw_here(repo, *args, env=ENV)
        assert done.returncode == CORRUPT, (args, done.stdout, done.stderr)
        assert "internal error" not in done.stderr and execution_path(EXEC) in done.stderr, done.stderr
        assert len(done.stderr.strip().splitlines()) == 1
    # Reads that do not need the record are unaffected.
    assert item[:8] in ok(repo, "list")
    assert git(repo, "rev-parse", STATE) == before
    # The arbiter's check of a pushed file (hookcheck) names the problem too.
    from gitwork import codec

    assert state_file_problem(execution_path(EXEC), codec.load_yaml(body.encode()))


def test_a_sound_execution_record_passes_the_check(repo: Path) -> None:
    body = (f"id: {EXEC}\nitem: w-0123456789abcdef\nstate: exited\nusage:\n  tokens_in: 10\n  tokens_out: 0\n"
            "  cost: \"0.25\"\n  reports: 1\n")
    from gitwork import codec

    assert state_file_problem(execution_path(EXEC), codec.load_yaml(body.encode())) is None
