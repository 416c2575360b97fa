"""``run_gw``'s fork server (tests/gwfork.py) gives what ``subprocess.run([python, -m, gitwork, ...])`` gives.

The suite runs most of its ``gw`` child processes through it, so a difference (a lost environment
variable, the server's working directory, a truncated argument, an exit status, stdin, a timeout that
never fires) would make other tests prove less than they say. Each case runs both ways and compares.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import gwfork
from conftest import gw_cmd, poll, run_gw


def spawned(repo: Path, *args: str, env: dict[str, str] | None = None,
            input: str | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(gw_cmd(*args), cwd=repo, capture_output=True, text=True, env={**os.environ, **(env or {})},
                          input=input, timeout=60)


def forked(repo: Path, *args: str, env: dict[str, str] | None = None,
           input: str | None = None) -> subprocess.CompletedProcess[str]:
    done = gwfork.SERVER_OF_THIS_PROCESS.run(args, repo, {**os.environ, **(env or {})}, input, 60)
    assert done is not None, "the fork server refused an ordinary environment"
    return done


def same(a: subprocess.CompletedProcess[str], b: subprocess.CompletedProcess[str]) -> None:
    assert (a.returncode, a.stdout, a.stderr) == (b.returncode, b.stdout, b.stderr)


def test_exit_status_output_cwd_env_and_a_long_argument_are_the_child_processes(repo: Path, tmp_path: Path) -> None:
    # outside a work plane: the refusal (its exit code and its one line) depends on the working directory
    same(forked(tmp_path, "list"), spawned(tmp_path, "list"))
    assert forked(tmp_path, "list").returncode != 0
    assert forked(repo, "init").returncode == 0
    # the environment is the request's: GW_AGENT names who acts, GW_NOW the instant (both read by gw at run time)
    env = {"GW_AGENT": "forked-alice", "GW_NOW": "2030-01-01T00:00:00Z"}
    long = "x" * 65536  # the longest description gw takes: more than one read of the server's socket
    made = forked(repo, "new", "a title", "-d", long, "--json", env=env)
    assert made.returncode == 0, made.stderr
    item = json.loads(made.stdout)["item"]
    shown = json.loads(forked(repo, "show", item, "--json").stdout)
    assert shown["description"] == long and "forked-alice" in json.dumps(shown) and "2030-01-01" in json.dumps(shown)
    same(forked(repo, "list", "--json"), spawned(repo, "list", "--json"))
    same(forked(repo, "show", "w-0000000000000000"), spawned(repo, "show", "w-0000000000000000"))


def test_stdin_and_a_usage_error(repo: Path) -> None:
    assert forked(repo, "init").returncode == 0
    document = json.dumps({"op": "new", "title": "from stdin"})  # gw apply - reads its document from stdin
    a, b = forked(repo, "apply", "-", input=document), spawned(repo, "apply", "-", input=document)
    assert a.returncode == b.returncode == 0, (a.stderr, b.stderr)
    titles = [row["title"] for row in json.loads(forked(repo, "list", "--json").stdout)]
    assert titles.count("from stdin") == 2
    same(forked(repo, "claim", "--no-such-option"), spawned(repo, "claim", "--no-such-option"))


def test_the_default_identity_is_the_callers_session_as_for_a_spawned_gw(repo: Path) -> None:
    """gw's default identity is derived from the session id (config.py): the server runs in the caller's."""
    assert forked(repo, "init").returncode == 0
    a, b = forked(repo, "whoami"), spawned(repo, "whoami")
    assert a.returncode == 0 and f"/s{os.getsid(0)} " in a.stdout, a.stdout
    same(a, b)


def test_a_timeout_kills_the_child_and_raises_as_subprocess_does(repo: Path) -> None:
    assert forked(repo, "init").returncode == 0
    item = json.loads(forked(repo, "new", "waited on", "--json").stdout)["item"]
    with pytest.raises(subprocess.TimeoutExpired):  # --follow prints new messages until stopped
        gwfork.SERVER_OF_THIS_PROCESS.run(["thread", item, "--follow"], repo, dict(os.environ), None, 1.0)
    pid = gwfork.SERVER_OF_THIS_PROCESS.last_pid
    poll(lambda: not Path(f"/proc/{pid}").exists(), 10, what=f"the follower {pid} to be killed")


def test_an_interpreter_setting_in_the_environment_is_a_real_start(repo: Path) -> None:
    assert gwfork.SERVER_OF_THIS_PROCESS.run(["--version"], repo, {**os.environ, "PYTHONIOENCODING": "latin-1"},
                                             None, 60) is None
    done = run_gw(repo, "--version", env={"PYTHONIOENCODING": "latin-1"})  # run_gw then starts python -m gitwork
    assert done.returncode == 0 and done.stdout


def test_a_module_of_gitwork_runs_as_python_dash_m_runs_it(repo: Path, tmp_path: Path) -> None:
    """``conftest.run_module`` forks ``python -m gitwork.statecheck`` (tests/test_sync.py's ``assert_sound``):
    the server hook's verdict, exit status and output are a spawned one's, for a sound history and a refused push."""
    assert forked(repo, "init").returncode == 0 and forked(repo, "new", "pushed").returncode == 0
    bare = tmp_path / "bare.git"
    subprocess.run(["git", "clone", "-q", "--bare", str(repo), str(bare)], check=True)
    subprocess.run(["git", "fetch", "-q", str(repo), "refs/gitwork/state:refs/gitwork/state"], cwd=bare, check=True)
    head = subprocess.run(["git", "rev-parse", "refs/gitwork/state"], cwd=bare, capture_output=True, text=True,
                          check=True).stdout.strip()
    env = {**os.environ, "GIT_DIR": str(bare), "GW_NOW": "2100-01-01T00:00:00Z"}
    for update, code in ((f"{'0' * 40} {head} refs/gitwork/state\n", 0),  # the whole history, as if pushed
                         (f"{head} {'0' * 40} refs/gitwork/state\n", 1)):  # a deletion: refused
        a = gwfork.SERVER_OF_THIS_PROCESS.run([], bare, env, update, 60, module="gitwork.statecheck")
        b = subprocess.run([sys.executable, "-m", "gitwork.statecheck"], cwd=bare, capture_output=True, text=True,
                           env=env, input=update, timeout=60)
        assert a is not None and gwfork.SERVER_OF_THIS_PROCESS.last_pid != os.getpid()
        assert a.args == b.args
        same(a, b)
        assert (a.returncode == 0) == (code == 0), a.stderr
