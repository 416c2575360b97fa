"""The launch seams of issue 24: crashes at the exact points between fork and record, stopping runs
that already ended or were lost, large and secret environments, and bad input before any record.

Real tmux (a private socket per test), real processes, real signals: ``GW_CRASH_AT`` kills ``gw run``
with SIGKILL at a named step, the rest is observed from outside (/proc, tmux, the state ref).
"""

from __future__ import annotations

import os
import signal
import subprocess
from pathlib import Path

import pytest

from conftest import end_executions, live_processes, run_gw, second_clone, tip
from test_launch import gw_json, item_of, launched, needs_tmux, poll, runs  # noqa: F401  (launched: a fixture)

AGENT = "import os, sys, time\nopen(sys.argv[1], 'a').write(f'{os.getpid()}\\n')\ntime.sleep(600)\n"


def pids(path: Path) -> list[int]:
    return [int(line) for line in path.read_text().split()] if path.exists() else []


def alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def running(repo: Path) -> tuple[int, list[int]]:
    """How many wrappers run ``repo``'s agent, and the pids of the agents themselves, from /proc: no wait for
    an agent to write its pid. ``gw run`` returns once its wrapper has started the agent (launch/process.py,
    ``wait_started``), and a wrapper forked by a killed ``gw run`` is a process from its fork on, its agent
    or not: a second launch shows here at once."""
    script, wrappers, agents = os.fsencode(repo / "agent.py"), 0, []
    for pid, argv, _parent in live_processes():
        if script not in argv:
            continue
        if argv[1:2] == [script]:
            agents.append(pid)
        else:
            wrappers += 1
    return wrappers, sorted(agents)


def agent(repo: Path) -> list[str]:
    (repo / "agent.py").write_text(AGENT)
    return ["python3", str(repo / "agent.py"), str(repo / "agents.log")]


# --- 4: the subprocess backend, gw run killed between the fork and the handle file -----------------


def test_a_run_killed_between_fork_and_handle_leaves_one_agent_that_stop_ends(launched: Path) -> None:
    item = item_of(launched)
    done = run_gw(launched, "run", item, "--backend", "subprocess", "--as", "alice", "--", *agent(launched),
                  env={"GW_CRASH_AT": "after-fork"})
    assert done.returncode == -signal.SIGKILL, (done.returncode, done.stderr)
    first = poll(lambda: pids(launched / "agents.log"), "the first agent")[0]
    code, doc = gw_json(launched, "run", item, "--backend", "subprocess", "--as", "alice", "--", *agent(launched))
    assert code == 0, doc
    assert running(launched) == (1, [first]) and pids(launched / "agents.log") == [first]
    assert doc["existing"] is True and doc["state"] == "running", doc
    code, doc = gw_json(launched, "stop", doc["execution"])
    assert code == 0 and doc["state"] == "stopped", doc
    poll(lambda: not alive(first), "the agent to end")


def test_stop_of_a_lost_execution_kills_what_may_still_run(launched: Path) -> None:
    item = item_of(launched)
    code, doc = gw_json(launched, "run", item, "--backend", "subprocess", "--as", "alice", "--", *agent(launched))
    assert code == 0, doc
    first = poll(lambda: pids(launched / "agents.log"), "the agent")[0]
    # Recorded lost while its agent runs (what the coordinator of an older gw did to a live agent).
    from gitwork.workplane import Workplane

    with Workplane(str(launched), agent="alice") as wp:
        wp.record("exec-state", execution=doc["execution"], to="lost", reason="judged by an older gw")
    code, stopped = gw_json(launched, "stop", doc["execution"])
    assert code == 0 and stopped["state"] == "lost" and stopped["killed"] == 1, stopped
    poll(lambda: not alive(first), "the agent to be killed")


def test_a_wrapper_killed_alone_has_its_agent_killed_before_the_execution_is_lost(launched: Path) -> None:
    item = item_of(launched)
    code, doc = gw_json(launched, "run", item, "--backend", "subprocess", "--as", "alice", "--", *agent(launched))
    assert code == 0, doc
    first = poll(lambda: pids(launched / "agents.log"), "the agent")[0]
    wrapper = int(doc["handle"].partition("@")[0])
    os.kill(wrapper, signal.SIGKILL)  # the wrapper alone: its agent runs on, in its process group
    poll(lambda: not alive(wrapper), "the wrapper to die")
    assert alive(first)
    code, settled = gw_json(launched, "coordinate", "--once")
    assert code == 0, settled
    assert not alive(first), "an execution was declared lost while its agent ran"
    assert [r["state"] for r in runs(launched)] == ["lost"]


# --- 5: a retry by execution id (a delegated start's, made from its request id) ---------------------


@pytest.mark.parametrize("step", ["after-reserve", "after-claim", "after-launching", "after-fork"])
def test_a_retry_by_id_after_a_crash_runs_one_agent_under_that_id(launched: Path, step: str) -> None:
    item, execution = item_of(launched), "x-" + "7" * 16  # as delegation.service.execution_for makes it
    crashed = run_gw(launched, "run", item, "--backend", "subprocess", "--as", "alice", "--id", execution, "--",
                     *agent(launched), env={"GW_CRASH_AT": step})
    assert crashed.returncode == -signal.SIGKILL, crashed.stderr
    code, doc = gw_json(launched, "run", item, "--backend", "subprocess", "--as", "alice", "--id", execution, "--",
                        *agent(launched))
    assert code == 0, doc
    assert doc["execution"] == execution and doc["state"] == "running", doc
    assert doc["existing"] is (step == "after-fork")  # forked: adopted; else started now, under its own id
    first = poll(lambda: pids(launched / "agents.log"), "the agent")
    assert running(launched) == (1, first) and pids(launched / "agents.log") == first and len(first) == 1
    assert [(r["execution"], r["state"]) for r in runs(launched)] == [(execution, "running")]
    assert doc["epoch"] == 1, doc  # nothing was lost under epoch 1: no new epoch was needed


# --- 6: gw stop of a run that already exited; --env on tmux; a bad --ttl ---------------------------


@needs_tmux
@pytest.mark.parametrize("backend", ["tmux", "subprocess"])
def test_stop_of_an_exited_run_records_its_exit_and_keeps_its_output(launched: Path, backend: str) -> None:
    item = item_of(launched)
    code, doc = gw_json(launched, "run", item, "--backend", backend, "--as", "alice", "--",
                        "sh", "-c", "echo last words; exit 3")
    assert code == 0, doc
    folder = launched / ".git" / "gitwork" / "executions" / doc["execution"]
    poll(lambda: (folder / "code").exists(), "the agent to exit")
    code, stopped = gw_json(launched, "stop", doc["execution"])
    assert code == 0, stopped
    assert stopped["state"] == "exited" and stopped["code"] == 3, stopped
    done = run_gw(launched, "capture", doc["execution"])
    assert done.returncode == 0 and "last words" in done.stdout, (done.returncode, done.stdout, done.stderr)


@needs_tmux
def test_a_large_secret_environment_reaches_a_tmux_agent_through_a_file_only(launched: Path) -> None:
    item = item_of(launched)
    secret = "s3cr3t-" + "x" * 20_000  # above what a tmux client's command line takes
    out = launched / "seen.txt"
    code, doc = gw_json(launched, "run", item, "--as", "alice", "--env", f"API_KEY={secret}", "--",
                        "sh", "-c", f"printf %s \"$API_KEY\" > {out}; sleep 600")
    assert code == 0, doc
    poll(lambda: out.exists() and out.read_text() == secret, "the agent to see its environment")
    folder = launched / ".git" / "gitwork" / "executions" / doc["execution"]
    assert not any(secret.encode() in p.read_bytes() for p in folder.rglob("*") if p.is_file())  # read, removed
    from test_launch import socket_of

    shown = subprocess.run(["tmux", "-S", socket_of(launched), "show-environment", "-t", doc["execution"]],
                           capture_output=True, text=True)
    assert "s3cr3t" not in shown.stdout  # not a tmux session variable either
    assert "s3cr3t" not in run_gw(launched, "show", item, "--json").stdout


@pytest.mark.parametrize("ttl", ["bogus", "0", "-5m"])
def test_a_bad_ttl_is_refused_before_anything_is_written(launched: Path, ttl: str) -> None:
    before = tip(launched)
    done = run_gw(launched, "run", item_of(launched), "--backend", "subprocess", "--ttl", ttl, "--", "cat")
    assert done.returncode == 5 and "Traceback" not in done.stderr, (done.returncode, done.stderr)
    assert tip(launched) == before
    assert not (launched / ".git" / "gitwork" / "executions").exists() or \
        not any((launched / ".git" / "gitwork" / "executions").iterdir())


# --- 3: two clones of one arbiter on one host --------------------------------------------------------


@needs_tmux
@pytest.mark.slow
def test_two_clones_on_one_host_each_judge_and_coordinate_only_their_own(tmp_path: Path, machine_a: Path,
                                                                         url: str) -> None:
    from conftest import gw_cmd

    a, b = machine_a, tmp_path / "b"
    subprocess.run(["git", "clone", "-q", url, str(b)], check=True, capture_output=True)
    env_a, env_b = {"GW_TMUX_SOCKET": str(tmp_path / "a.sock")}, {"GW_TMUX_SOCKET": str(tmp_path / "b.sock")}
    loop = None
    try:
        assert run_gw(b, "init", "--remote", "origin").returncode == 0
        code, made = gw_json(b, "new", "B's work")
        assert code == 0, made
        code, doc = gw_json(b, "run", made["item"], "--as", "bob", "--", "sleep", "600", env=env_b)
        assert code == 0 and doc["state"] == "running", doc
        for repo in (b, a):
            assert run_gw(repo, "sync").returncode == 0
        # a's coordinator sees b's execution on this host, and leaves it to b's: a's tmux server has no
        # such session, and that is no evidence about a process b started.
        code, done = gw_json(a, "coordinate", "--once", env=env_a)
        assert code == 0, done
        assert [r["state"] for r in runs(a) if r["execution"] == doc["execution"]] == ["running"]
        assert not [x for x in done.get("actions", []) if x.get("execution") == doc["execution"]], done
        # a's coordinator runs, its lease reaches b through the arbiter: b's own coordinator still runs.
        loop = subprocess.Popen(gw_cmd("coordinate", "--interval", "1s"), cwd=a, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True, env={**os.environ, **env_a})
        poll(lambda: "coord-lease" in subprocess.run(["git", "log", "--format=%s", "-5", "refs/gitwork/state"],
                                                     cwd=a, capture_output=True, text=True).stdout, "a's lease")
        for repo in (a, b):
            assert run_gw(repo, "sync").returncode == 0
        done_b = run_gw(b, "coordinate", "--once", env=env_b)
        assert done_b.returncode == 0, done_b.stderr
        assert [r["state"] for r in runs(b) if r["execution"] == doc["execution"]] == ["running"]
    finally:
        if loop is not None:
            loop.kill()
            loop.wait()
        for sock in ("a.sock", "b.sock"):
            subprocess.run(["tmux", "-S", str(tmp_path / sock), "kill-server"], capture_output=True)


# --- 2: launch x sync: the clone's execution records survive another clone moving the arbiter ----------


@pytest.mark.slow
def test_after_another_clone_moved_the_arbiter_sync_keeps_the_running_agent_and_run_adopts_it(
        tmp_path: Path, machine_a: Path, url: str) -> None:
    a, b = machine_a, tmp_path / "b"
    second_clone(url, b)
    code, made = gw_json(a, "new", "A's work")
    assert code == 0, made
    try:
        code, doc = gw_json(a, "run", made["item"], "--backend", "subprocess", "--as", "alice", "--", *agent(a))
        assert code == 0 and doc["state"] == "running", doc
        first = poll(lambda: pids(a / "agents.log"), "the agent")[0]
        assert gw_json(b, "new", "Elsewhere")[0] == 0 and run_gw(b, "sync").returncode == 0  # b moves the arbiter
        synced = run_gw(a, "sync", "--json")
        assert synced.returncode == 0, synced.stdout + synced.stderr  # exec-state replays on b's tip
        code, done = gw_json(a, "coordinate", "--once")
        assert code == 0, done
        assert [r["state"] for r in runs(a)] == ["running"]
        code, again = gw_json(a, "run", made["item"], "--backend", "subprocess", "--as", "alice", "--", *agent(a))
        assert code == 0 and again["existing"] is True and again["execution"] == doc["execution"], again
        assert running(a) == (1, [first]) and pids(a / "agents.log") == [first]
        assert run_gw(a, "sync").returncode == 0 and run_gw(b, "sync").returncode == 0
        assert [r["state"] for r in runs(b) if r["execution"] == doc["execution"]] == ["running"]
    finally:
        end_executions(a)
