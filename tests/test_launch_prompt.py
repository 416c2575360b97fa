"""The Backend seam's ``prompt(text, timeout)`` and ``release`` (issue 28 point 7), on both backends: a
real tmux server and real subprocesses, driven through the real ``gw send --wait`` and ``gw detach``.

The agent is a small REPL that takes a moment over each line before it answers and shows its prompt
again, so a ``--wait`` that returned before the agent was back would not find the answer in its output.
"""

from __future__ import annotations

import os
import signal
import subprocess
from pathlib import Path

import pytest

from conftest import run_gw, tip
from test_launch import coordinate, gw_json, item_of, launched, needs_tmux, poll, runs, socket_of  # noqa: F401 (a fixture)

AGENT = r"""
import sys, time
while True:
    sys.stdout.write("agent> "); sys.stdout.flush()
    line = sys.stdin.readline()
    if not line:
        break
    time.sleep(30 if line.strip() == "slow" else 0.6)
    print("answer: " + line.strip().upper(), flush=True)
"""
BACKENDS = [pytest.param("tmux", marks=needs_tmux), "subprocess"]


def start(repo: Path, backend: str, name: str) -> str:
    (repo / "agent.py").write_text(AGENT)
    code, doc = gw_json(repo, "run", item_of(repo), "--as", "alice", "--backend", backend, "--id", name,
                        "--", "python3", "-u", str(repo / "agent.py"))
    assert code == 0, doc
    return str(doc["execution"])


def output(repo: Path, execution: str) -> str:
    done = run_gw(repo, "capture", execution)
    assert done.returncode == 0, done.stderr
    return done.stdout


@pytest.mark.parametrize("backend", BACKENDS)
def test_send_wait_returns_once_the_agent_is_back_at_its_prompt(launched: Path, backend: str) -> None:
    execution = start(launched, backend, f"x-prompt-{backend}")
    poll(lambda: "agent>" in output(launched, execution), "the first prompt")
    for word in ("hello", "again"):
        done = run_gw(launched, "send", execution, word, "--wait", "--timeout", "30")
        assert done.returncode == 0, done.stderr
        assert f"answer: {word.upper()}" in output(launched, execution)  # it waited for the answer
    # Not back in time: exit 75, one line; the execution runs on.
    done = run_gw(launched, "send", execution, "slow", "--wait", "--timeout", "1.5")
    assert done.returncode == 75 and "not back at its prompt after 1.5s" in done.stderr, done.stderr
    assert len(done.stderr.strip().splitlines()) == 1
    assert [r["state"] for r in runs(launched)] == ["running"]
    bad = run_gw(launched, "send", execution, "x", "--wait", "--key", "Enter")
    assert bad.returncode == 5 and "--wait" in bad.stderr


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_wait_on_an_agent_that_ends_is_refused_not_hung(launched: Path, backend: str) -> None:
    (launched / "quit.py").write_text("import sys\nsys.stdout.write('> '); sys.stdout.flush()\nsys.stdin.readline()\n")
    code, doc = gw_json(launched, "run", item_of(launched), "--as", "alice", "--backend", backend, "--id",
                        f"x-quit-{backend}", "--", "python3", "-u", str(launched / "quit.py"))
    assert code == 0, doc
    done = run_gw(launched, "send", doc["execution"], "bye", "--wait", "--timeout", "30")
    assert done.returncode == 6 and "ended before it came back" in done.stderr, done.stderr


def _alive(repo: Path, execution: str, backend: str) -> bool:
    if backend == "tmux":
        panes = subprocess.run(["tmux", "-S", socket_of(repo), "list-panes", "-t", f"={execution}:", "-F",
                                "#{pane_dead}"], capture_output=True, text=True)
        return panes.returncode == 0 and panes.stdout.strip() == "0"
    handle = (repo / ".git" / "gitwork" / "executions" / execution / "handle").read_text()
    try:
        os.killpg(int(handle.partition("@")[0]), 0)
    except ProcessLookupError:
        return False
    return True


@pytest.mark.parametrize("backend", BACKENDS)
def test_detach_releases_without_killing_and_the_coordinator_leaves_it_alone(launched: Path, backend: str) -> None:
    execution = start(launched, backend, f"x-detach-{backend}")
    poll(lambda: "agent>" in output(launched, execution), "the first prompt")
    code, doc = gw_json(launched, "detach", execution, "--reason", "a person takes it over")
    assert code == 0, doc
    assert doc["state"] == "released" and doc["reason"] == "a person takes it over"
    assert _alive(launched, execution, backend)  # released, not killed
    assert [(r["execution"], r["state"]) for r in runs(launched)] == [(execution, "released")]
    # The coordinator no longer judges it, even once its lease is revoked (it would kill a live one).
    assert run_gw(launched, "revoke", item_of(launched), "--reason", "test", "--as", "setup").returncode == 0
    assert [a for a in coordinate(launched) if a.get("execution") == execution] == []
    assert _alive(launched, execution, backend)
    before = tip(launched)
    again = run_gw(launched, "detach", execution)
    assert again.returncode == 5 and "only a running one" in again.stderr and tip(launched) == before
    if backend == "subprocess":  # ours to clean up: the fixture ends what it started
        handle = (launched / ".git" / "gitwork" / "executions" / execution / "handle").read_text()
        os.killpg(int(handle.partition("@")[0]), signal.SIGKILL)
