# ruff: noqa: F811  (fixtures imported from test_launch and test_launcher, shadowed by parameters: pytest's way)
"""Attack on the launcher's shell pane (gitwork/launch/tmux.py ``PANE``, docs/launch.md): very long
arguments, a leading dash, an agent that closes its stdout and forks and exits, one that ignores TERM,
one ended by a signal, kill -9 of the pane's shell, and two ``gw run`` at once on one item."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from conftest import gw_cmd
from test_launch import launched, needs_tmux, poll  # noqa: F401  (launched: a fixture)
from test_launcher import agents, all_runs, item_of, new_item, run, shell_resident  # noqa: F401

pytestmark = [pytest.mark.slow, needs_tmux]


def folder_of(repo: Path, execution: str) -> Path:
    return repo / ".git" / "gitwork" / "executions" / execution


def stop(repo: Path, execution: str) -> dict[str, object]:
    from gitwork.launch.run import stop as stop_run
    from gitwork.workplane import Workplane

    with Workplane(str(repo), agent="alice") as wp:
        return stop_run(wp, execution)


def test_long_arguments_reach_the_agent_or_are_refused_in_one_line(launched: Path,
                                                                  shell_resident: subprocess.Popen[str]) -> None:
    """A prompt of 64 KiB as one argument is refused (5, one line: the recorded command is bounded),
    nothing recorded; one of hostile characters that fills the bound reaches the agent whole."""
    out = launched / "argv.out"
    script = launched / "agent.sh"
    script.write_text("#!/bin/sh\nprintf '%s' \"$1\" > \"$OUT\"\n")
    script.chmod(0o755)
    other = new_item(launched, "too long")
    refused, _ = run(launched, other, "--", str(script), "w" * 65536, env={"GW_AGENT": "alice"})
    assert refused.returncode == 5 and refused.stderr.count("\n") == 1, refused.stderr
    assert [r for r in all_runs(launched) if r["item"] == other] == []
    prompt = ("'$(x)`y`;*?[a] \\ " * 80)[: 1000 - len(str(script)) - 8]
    done, _ = run(launched, item_of(launched), "--json", "--env", f"OUT={out}", "--", str(script), prompt,
                  env={"GW_AGENT": "alice"})
    assert done.returncode == 0, done.stderr
    folder = folder_of(launched, json.loads(done.stdout)["execution"])
    poll(lambda: (folder / "code").exists(), "the agent's end")
    assert (folder / "code").read_text() == "0\n"
    assert out.read_text() == prompt
    assert not list(launched.glob("**/y")) and not list(launched.glob("x"))


def test_a_leading_dash_agent_argument_and_an_env_of_quotes(launched: Path,
                                                            shell_resident: subprocess.Popen[str]) -> None:
    """Arguments that look like options to env or sh (``-i``, ``--default-signal``, ``-c``) and an
    environment value of quotes, a newline and ``'\\''``: all reach the agent as they are."""
    out = launched / "argv.out"
    script = launched / "-agent.sh"
    script.write_text("#!/bin/sh\n{ printf '%s\\0' \"$@\"; printf '%s' \"$GW_T_V\"; } > \"$OUT\"\n")
    script.chmod(0o755)
    words = ["-i", "--default-signal", "-c", "exit 9", "-"]
    value = "a'b\"c\n'\\''\n$(x)"
    done, _ = run(launched, item_of(launched), "--json", "--env", f"OUT={out}", "--env", f"GW_T_V={value}", "--",
                  str(script), *words, env={"GW_AGENT": "alice"})
    assert done.returncode == 0, done.stderr
    folder = folder_of(launched, json.loads(done.stdout)["execution"])
    poll(lambda: (folder / "code").exists(), "the agent's end")
    assert (folder / "code").read_text() == "0\n"
    *argv, env_value = out.read_text().split("\0")
    assert argv == words and env_value == value


def test_an_agent_that_closes_stdout_forks_and_exits(launched: Path, shell_resident: subprocess.Popen[str]) -> None:
    """The agent closes its stdout, leaves a child behind and exits 0: its code is 0, recorded as it
    ended, and the child it left does not outlive the pane."""
    marker = "731"
    done, _ = run(launched, item_of(launched), "--json", "--", "sh", "-c",
                  f"exec >&- 2>&-; sleep {marker} & exit 0", env={"GW_AGENT": "alice"})
    assert done.returncode == 0, done.stderr
    execution = json.loads(done.stdout)["execution"]
    folder = folder_of(launched, execution)
    poll(lambda: (folder / "code").exists(), "the shell's code file")
    assert (folder / "code").read_text() == "0\n"
    ended = stop(launched, execution)
    assert ended["state"] == "exited" and ended["code"] == 0, ended
    # The pane's shell led the pane's session: its end hangs up the group, so nothing is left behind.
    poll(lambda: agents(marker) == [], "the forked child's end")


def test_an_agent_that_ignores_term_is_stopped(launched: Path, shell_resident: subprocess.Popen[str]) -> None:
    """An agent that ignores SIGTERM: ``stop`` ends it all the same (it escalates), and the end is
    recorded; nothing of it runs on."""
    marker = "732"
    done, _ = run(launched, item_of(launched), "--json", "--", "sh", "-c",
                  f"trap '' TERM; exec sleep {marker}", env={"GW_AGENT": "alice"})
    assert done.returncode == 0, done.stderr
    execution = json.loads(done.stdout)["execution"]
    poll(lambda: len(agents(marker)) == 1, "the agent")
    ended = stop(launched, execution)
    assert ended["state"] == "stopped", ended
    poll(lambda: agents(marker) == [], "the agent's end")


def test_kill_9_of_the_pane_shell_leaves_no_agent_running_unrecorded(launched: Path,
                                                                      shell_resident: subprocess.Popen[str]) -> None:
    """kill -9 of the pane's shell while its agent runs: the execution is not reported ``running`` for
    ever; ``stop`` kills the orphaned agent (by process group)."""
    marker = "733"
    done, _ = run(launched, item_of(launched), "--json", "--", "sleep", marker, env={"GW_AGENT": "alice"})
    assert done.returncode == 0, done.stderr
    execution = json.loads(done.stdout)["execution"]
    folder = folder_of(launched, execution)
    shell = int((folder / "handle").read_text().partition("@")[0])
    assert len(agents(marker)) == 1
    os.kill(shell, signal.SIGKILL)
    stop(launched, execution)
    poll(lambda: agents(marker) == [], "the orphaned agent's end")


def test_two_gw_run_at_once_on_one_item_start_one_agent(launched: Path,
                                                        shell_resident: subprocess.Popen[str]) -> None:
    """Two ``gw run`` of one item at the same moment, through the launcher: one agent runs, the other
    call is refused or answers the same execution."""
    marker = "734"
    item = new_item(launched, "twice")
    env = {**os.environ, "GW_AGENT": "alice"}
    procs = [subprocess.Popen(gw_cmd("run", item, "--json", "--", "sleep", marker), cwd=launched, env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for _ in range(2)]
    outs = [p.communicate(timeout=60) for p in procs]
    time.sleep(0.2)
    assert len(agents(marker)) == 1, outs
    ok = [json.loads(o) for (o, _e), p in zip(outs, procs, strict=True) if p.returncode == 0]
    assert len({doc["execution"] for doc in ok}) == 1, outs
    live = [r for r in all_runs(launched) if r["item"] == item and r["state"] == "running"]
    assert len(live) == 1, live
    for pid in agents(marker):
        os.kill(pid, signal.SIGKILL)
