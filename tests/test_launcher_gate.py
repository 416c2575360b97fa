"""The resident launcher's gated pane (issue 27 point 4; docs/launch.md, "The resident launcher"):
the tmux pane starts while the launch's commit is written, and its agent only once that commit landed.

Real tmux, real processes, a real ``gw launcher`` killed with SIGKILL (``GW_CRASH_AT``, which the
launcher reads from the caller's environment while it runs that launch). What holds, wherever it dies:

- never an agent without its committed ``launching`` record, never two agents for one item;
- no pane left waiting: a pending pane (``pending~NONCE``) whose launcher died, or whose commit was
  refused, goes away having started nothing;
- no tmux session named after an execution id without that execution's record;
- a refused commit starts no agent, leaves no pending session, and answers with the very line and
  exit code of a launch without the launcher;
- two ``gw run`` racing on one item start one agent.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest

import test_launch
from conftest import gw_cmd
from test_launch import needs_tmux, poll, tmux_sessions
from test_launcher import _marked, agents, converged, new_item, one_agent_alone, start_launcher

pytestmark = needs_tmux
launched = test_launch.launched  # the fixture: a repository with its own tmux server


def run(repo: Path, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(gw_cmd("run", *args), cwd=repo, capture_output=True, text=True, timeout=60,
                          env={**os.environ, **(env or {})})


def records(repo: Path) -> dict[str, dict[str, Any]]:
    from gitwork.launch.run import runs
    from gitwork.workplane import Workplane

    with Workplane(str(repo), agent="reader") as wp:
        return {row["execution"]: row for row in runs(wp)}


def pending(repo: Path) -> list[str]:
    return [name for name in tmux_sessions(repo) if name.startswith("pending~")]


def agent_execution(pid: int) -> str | None:
    """The ``GW_EXECUTION`` an agent process was started with."""
    try:
        with open(f"/proc/{pid}/environ", "rb") as read:
            env = read.read().split(b"\0")
    except OSError:
        return None
    return next((entry[len(b"GW_EXECUTION="):].decode() for entry in env if entry.startswith(b"GW_EXECUTION=")), None)


def sound(repo: Path, marker: str) -> None:
    """The invariants after any crash: no pane left pending (they go by themselves), every agent under a
    committed `launching` (or later) record of its own, one agent at most, and no session named after
    an execution that has no record."""
    poll(lambda: not pending(repo), "the pending panes to go")
    found = records(repo)
    live = agents(marker)
    assert len(live) <= 1, live
    for pid in live:
        execution = agent_execution(pid)
        assert execution in found and found[execution]["state"] in ("launching", "running"), (execution, found)
        assert "fence" in found[execution], found[execution]
    for name in tmux_sessions(repo):
        assert name in found, (name, sorted(found))


@pytest.mark.parametrize("point", ["before-tmux", "after-new-session", "before-cas", "after-cas", "after-go"])
def test_kill_9_of_the_launcher_at_each_step_of_a_gated_launch(launched: Path, point: str) -> None:
    """Killed before tmux, after the pane started (it waits on the gate), mid-commit (objects written,
    the ref not moved), after the commit (no go yet) and after go: the invariants hold at once, and the
    caller's own launch (the retry) or one more ``gw run`` converges on one agent under the current fence."""
    item = new_item(launched, f"gate {point}")
    marker = str(640 + ["before-tmux", "after-new-session", "before-cas", "after-cas", "after-go"].index(point))
    proc = start_launcher(launched)
    done = run(launched, item, "--json", "--", "sleep", marker, env={"GW_AGENT": "alice", "GW_CRASH_AT": point})
    assert proc.wait(timeout=30) == -signal.SIGKILL
    sound(launched, marker)
    if point in ("before-cas", "after-cas"):  # the caller's own launch dies at the same point of its commit
        assert done.returncode == -signal.SIGKILL, done
    else:
        assert done.returncode == 0, done.stderr
    final = run(launched, item, "--json", "--", "sleep", marker, env={"GW_AGENT": "alice"})
    assert final.returncode == 0, final.stderr
    sound(launched, marker)
    converged(launched, item, json.loads(final.stdout), marker)


def test_a_refused_commit_starts_nothing_and_says_what_a_plain_gw_run_says(launched: Path) -> None:
    """An item someone else holds: the commit is refused after the pane was started; exit 75 and the
    very line of a launch without the launcher, no agent, no pending session, nothing recorded."""
    item = new_item(launched, "held")
    claimed = subprocess.run(gw_cmd("claim", item), cwd=launched, capture_output=True, text=True, timeout=60,
                             env={**os.environ, "GW_AGENT": "alice"})
    assert claimed.returncode == 0, claimed.stderr
    plain = run(launched, item, "--", "sleep", "651", env={"GW_AGENT": "bob", "GW_LAUNCHER": "off"})
    # (and one refused before its commit, once its pane started: an item that does not exist)
    plain_missing = run(launched, "w-0badc0de", "--", "sleep", "651", env={"GW_AGENT": "bob", "GW_LAUNCHER": "off"})
    proc = start_launcher(launched)
    try:
        refused = run(launched, item, "--", "sleep", "651", env={"GW_AGENT": "bob"})
        missing = run(launched, "w-0badc0de", "--", "sleep", "651", env={"GW_AGENT": "bob"})
        assert proc.poll() is None  # it answered
        assert not pending(launched) and not tmux_sessions(launched)  # gone when gw run answered, the launcher alive
    finally:
        proc.kill()
        proc.wait()
    assert refused.returncode == plain.returncode == 75, (refused, plain)
    assert refused.stderr == plain.stderr and refused.stderr.count("\n") == 1, (refused.stderr, plain.stderr)
    assert missing.returncode == plain_missing.returncode != 0 and missing.stderr == plain_missing.stderr, missing
    assert records(launched) == {}
    # Not "an agent would run by now": nothing that could start one lives (no pane's shell, wrapper or env naming
    # it; tmux's server keeps the command line of the client that started it, and starts nothing by itself).
    poll(lambda: all(os.path.basename(argv[0]) == b"tmux" for argv, _parent in _marked("651").values()),
         "no process left that names `sleep 651` but tmux's server")
    assert agents("651") == []
    folders = list((launched / ".git" / "gitwork" / "executions").glob("*"))
    assert not [f for folder in folders for f in folder.iterdir() if f.name.startswith(("gate.", "go.", "env."))]


def test_two_gw_run_racing_on_one_item_start_one_agent(launched: Path) -> None:
    """One through the launcher (its pane gated), one launching itself, at the same moment, three times:
    one agent each time, under the one live execution."""
    proc = start_launcher(launched)
    try:
        for n in range(3):
            item = new_item(launched, f"race {n}")
            marker = str(660 + n)
            argv = ["run", item, "--json", "--", "sleep", marker]
            racers = [subprocess.Popen(gw_cmd(*argv), cwd=launched, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                       text=True, env={**os.environ, "GW_AGENT": "alice", **extra})
                      for extra in ({}, {"GW_LAUNCHER": "off"})]
            answers = [(r.communicate(timeout=60), r.returncode) for r in racers]
            assert all(code in (0, 75) for _out, code in answers), answers
            assert proc.poll() is None
            sound(launched, marker)
            live = [r for r in records(launched).values() if r["item"] == item and r["state"] in ("reserved", "launching", "running")]
            assert len(live) == 1, live
            poll(lambda m=marker: one_agent_alone(m), "the one agent, and nothing else that could start one")  # noqa: B023
            assert len(agents(marker)) == 1
    finally:
        proc.kill()
        proc.wait()


@pytest.mark.parametrize("launcher", [True, False])
def test_stopping_the_execution_whose_launch_started_the_tmux_server_stops_only_it(launched: Path,
                                                                                   launcher: bool) -> None:
    """tmux's server keeps the command line of the client that started it, the first launch's pane
    command (the pane's marker and that execution's folder): settling or stopping that execution kills
    its own processes, never the server with every other agent in it."""
    proc = start_launcher(launched) if launcher else None
    env = {"GW_AGENT": "alice", **({} if launcher else {"GW_LAUNCHER": "off"})}
    try:
        first = run(launched, new_item(launched, "first"), "--json", "--", "sleep", "671", env=env)
        assert first.returncode == 0, first.stderr
        second = run(launched, new_item(launched, "second"), "--json", "--", "sleep", "672", env=env)
        assert second.returncode == 0, second.stderr
        stopped = subprocess.run(gw_cmd("stop", json.loads(first.stdout)["execution"]), cwd=launched,
                                 capture_output=True, text=True, timeout=60, env={**os.environ, **env})
        assert stopped.returncode == 0, stopped.stderr
        assert agents("671") == []
        assert len(agents("672")) == 1 and json.loads(second.stdout)["execution"] in tmux_sessions(launched)
    finally:
        if proc is not None:
            proc.kill()
            proc.wait()


@pytest.mark.slow
def test_kill_9_of_the_launcher_at_random_moments_of_gated_launches(launched: Path) -> None:
    """The launcher killed at a random moment of a gated tmux launch (the caller waiting on it, then
    launching itself as a retry): the invariants hold each time, and the caller converges on one agent
    under the current fence."""
    import random

    rng = random.Random(20261202 + 8)
    for n in range(6):
        item = new_item(launched, f"random gate {n}")
        marker = str(690 + n)
        proc = start_launcher(launched)
        caller = subprocess.Popen(gw_cmd("run", item, "--json", "--", "sleep", marker), cwd=launched,
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                  env={**os.environ, "GW_AGENT": "alice"})
        time.sleep(rng.uniform(0.0, 0.08))
        proc.kill()
        proc.wait()
        out, err = caller.communicate(timeout=60)
        assert caller.returncode == 0, err
        sound(launched, marker)
        converged(launched, item, json.loads(out), marker)


def test_the_shell_pane_takes_exactly_the_ascii_shell_names() -> None:
    """What the pane's shell holds (else the Python wrapper starts the agent): ``[A-Za-z_][A-Za-z0-9_]*``
    and none of the pane's own names, whatever Python's own idea of an identifier."""
    import re

    from gitwork.launch.tmux import SHELL_OWN, shell_env, shell_names

    names = ["A", "_", "_a1", "PATH", "1a", "a-b", "a b", "", "BASH_FUNC_f%%", "é", "xé", "x\u0660", "\uff41", "if",
             "ℌ", "a.b", "a=b", *SHELL_OWN]
    for name in names:
        plain = re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name) is not None and name not in SHELL_OWN
        assert shell_names([name]) is plain, name
        assert (shell_env({name: "v"}) is not None) is plain, name


def test_the_pane_waits_on_its_gate_unless_told_otherwise(launched: Path) -> None:
    """The launcher's tmux pane is the gated one (its command starts with the wait on its gate), and
    ``GW_LAUNCHER_GATE=0`` in the launcher's environment starts it after the commit, as before."""
    from test_launcher import pane_command

    for gate, marker in (("1", "681"), ("0", "682")):
        proc = start_launcher(launched, {"GW_LAUNCHER_GATE": gate})
        try:
            done = run(launched, new_item(launched, f"gate {gate}"), "--json", "--", "sleep", marker,
                       env={"GW_AGENT": "alice"})
        finally:
            proc.kill()
            proc.wait()
        assert done.returncode == 0, done.stderr
        command = pane_command(launched, json.loads(done.stdout)["execution"])
        assert command.startswith("/bin/sh -c ") and ('-s 4; } 4<' in command) is (gate == "1"), command
        poll(lambda m=marker: len(agents(m)) == 1, "its agent")  # (env's exec of it may come a moment later)


def test_a_pane_caught_inside_its_exec_is_starting_not_gone(monkeypatch: pytest.MonkeyPatch) -> None:
    """The fresh-clone CI once failed a gated launch with "its pane's shell did not start": the wait saw
    tmux's fork of the pane (its ``tmux`` command line: about to start), then a second read caught it
    inside ``execve``, where /proc/PID/cmdline reads empty. That second read is gone (one look decides)
    and an empty command line of a live process is a pane still starting."""
    from gitwork.launch import tmux

    marker = b"/x/wrapper.py"
    assert tmux._pane_stage([b""], marker) == "starting"  # inside execve
    assert tmux._pane_stage([b"tmux", b"-S", b"s", b"new-session", b""], marker) == "starting"  # the fork
    assert tmux._pane_stage([b"/bin/sh", b"-c", b"...", marker, b"/d", b""], marker) == "shell"
    assert tmux._pane_stage([b"sleep", b"5", b""], marker) == "other"
    # One look decides: a pane seen starting is not looked at again (the look that once said "gone").
    looks = iter([True, False])
    monkeypatch.setattr(tmux, "_runs", lambda pid, mark: next(looks))
    assert tmux._shell_seen(os.getpid(), marker) is True
    # A pane that died before it was seen is refused at once, not after the 10 s wait.
    monkeypatch.setattr(tmux, "_runs", lambda pid, mark: False)
    monkeypatch.setattr(tmux, "_alive", lambda pid: False)
    started = time.monotonic()
    assert tmux._shell_seen(os.getpid(), marker) is False and time.monotonic() - started < 1
