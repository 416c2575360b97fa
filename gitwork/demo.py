"""``gw demo``: the main job on a throwaway repository, narrated.

It creates a repository in a temporary folder, adds items with dependencies, starts two real ``gw``
processes racing to claim the same item, shows the single winner and the loser's exit code, releases,
and prints the state ref's ``git log``. Everything runs through the real CLI in child processes.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
import sys
import tempfile
import time

from . import gitcmd

_QUIET = False


def _say(text: str) -> None:
    if _QUIET:
        return
    sys.stdout.write(text + "\n")
    sys.stdout.flush()


def _gw(repo: str, *args: str, show: bool = True) -> subprocess.CompletedProcess[str]:
    if show:
        _say(f"$ gw {shlex.join(args)}")
    done = subprocess.run([sys.executable, "-m", "gitwork", *args], cwd=repo, capture_output=True, text=True)
    if show:
        for stream in (done.stdout, done.stderr):
            for line in stream.rstrip("\n").splitlines():
                _say(f"  {line}")
    return done


def _finish(repo: str, report: dict[str, object], as_json: bool) -> int:
    """Show the state ref's log, and with ``as_json`` print the report (with that log) as one object."""
    _say("$ git log --format='%h %an: %s' refs/gitwork/state")
    log = gitcmd.run(["log", "--format=%h %an: %s", "refs/gitwork/state"], cwd=repo, check=False).out
    for line in log.splitlines():
        _say(f"  {line}")
    report["log"] = log.splitlines()
    if as_json:
        sys.stdout.write(json.dumps({"ok": True, **report}, indent=2) + "\n")
    return 0


def run(keep: bool = False, as_json: bool = False) -> int:
    """Run the demo; with ``as_json`` print one JSON summary instead of the narration."""
    global _QUIET
    _QUIET = as_json
    report: dict[str, object] = {}
    repo = tempfile.mkdtemp(prefix="gitwork-demo-")
    try:
        gitcmd.run(["init", "-q", repo])
        _say(f"# a throwaway repository: {repo}")
        _gw(repo, "init")
        schema = _gw(repo, "new", "Design the schema", "-p", "1", "-c", "reviewed by someone").stdout.strip()
        api = _gw(repo, "new", "Build the API", "--dep", schema, "-c", "tests pass").stdout.strip()
        _gw(repo, "new", "Write the docs", "--dep", api, "-p", "3")
        _gw(repo, "ready")

        _say("\n# two agents race to claim the same item, at the same moment")
        env = dict(os.environ)
        racers = [
            subprocess.Popen([sys.executable, "-m", "gitwork", "claim", schema, "--as", name],
                             cwd=repo, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            for name in ("agent-a", "agent-b")
        ]
        winner = None
        race = {}
        for name, proc in zip(("agent-a", "agent-b"), racers, strict=True):
            out, err = proc.communicate()
            race[name] = proc.returncode
            _say(f"$ gw claim {schema[:8]} --as {name}   -> exit {proc.returncode}")
            _say(f"  {err.strip()}")
            if proc.returncode == 0:
                winner = name
        report.update(repository=repo, items=[schema, api], race_exit_codes=race, winner=winner)
        if winner is None:
            _say("no winner?")
            return 1
        _say(f"# exactly one winner ({winner}); the loser got exit 75 (EX_TEMPFAIL: try later)")

        _say("\n# the winner works, ticks the criterion, and finishes")
        _gw(repo, "check", schema, "1", "--as", winner)
        _gw(repo, "decision", schema, "Use one table per entity", "--why", "simplest that works", "--as", winner)
        _gw(repo, "done", schema, "--as", winner)
        _gw(repo, "ready")
        _say("\n# the next agent takes the best ready item, then releases it")
        _gw(repo, "claim", "--next", "--as", "agent-c")
        _gw(repo, "release", api, "--as", "agent-c")

        _say("\n# the audit trail: one commit per command on refs/gitwork/state")
        return _finish(repo, report, as_json)
    finally:
        if keep:
            _say(f"\n(kept {repo})")
        else:
            shutil.rmtree(repo, ignore_errors=True)


AGENT = 'echo "agent $GW_AGENT on $GW_ITEM, fence $GW_FENCE, execution $GW_EXECUTION"; sleep 60'


def run_launch(keep: bool = False, as_json: bool = False) -> int:
    """``gw demo run``: two shells race ``gw run`` on one item; one agent starts, the other is told which
    execution already runs. tmux when it is installed (on the demo's own tmux server), else subprocess."""
    global _QUIET
    _QUIET = as_json
    backend = "tmux" if shutil.which("tmux") else "subprocess"
    repo = tempfile.mkdtemp(prefix="gitwork-demo-run-")
    socket = os.path.join(repo, ".git", "demo-tmux.sock")
    saved = os.environ.get("GW_TMUX_SOCKET")
    os.environ["GW_TMUX_SOCKET"] = socket  # children inherit it: the demo's agents never touch your tmux
    report: dict[str, object] = {"repository": repo, "backend": backend}
    try:
        gitcmd.run(["init", "-q", repo])
        _say(f"# a throwaway repository: {repo} (backend {backend})")
        _gw(repo, "init")
        item = _gw(repo, "new", "Fix the flaky test", "-c", "the test passes 100 times").stdout.strip()

        _say("\n# two shells run an agent on the same item, at the same moment")
        racers = {name: subprocess.Popen([sys.executable, "-m", "gitwork", "run", item, "--json", "--as", name,
                                          "--backend", backend, "--", "sh", "-c", AGENT],
                                         cwd=repo, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
                  for name in ("shell-a", "shell-b")}
        race: dict[str, dict[str, object]] = {}
        for name, proc in racers.items():
            out, err = proc.communicate()
            doc = json.loads(out) if out.strip() else {}
            execution = doc.get("execution") or (doc.get("details") or {}).get("execution")
            race[name] = {"exit": proc.returncode, "execution": execution, "existing": doc.get("existing")}
            said = ("started" if doc.get("existing") is False else "told it already runs") if proc.returncode == 0 \
                else err.strip()
            _say(f"$ gw run {item[:8]} --as {name} -- sh -c '...'   -> exit {proc.returncode}: {execution} ({said})")
        started = [r["execution"] for r in race.values() if r["exit"] == 0 and r["existing"] is False]
        report.update(item=item, race=race, started=started)
        if len(started) != 1 or any(r["execution"] != started[0] for r in race.values()):
            _say("expected one started execution, named to both shells")
            return 1
        execution = str(started[0])
        _say(f"# one agent runs ({execution}); the other shell was told which execution runs, and started nothing")

        _say("\n# what runs, and what its terminal shows")
        _gw(repo, "runs")
        deadline = time.monotonic() + 10
        captured = ""
        while "agent " not in captured and time.monotonic() < deadline:
            captured = _gw(repo, "capture", execution, show=False).stdout
            time.sleep(0.05)
        _say(f"$ gw capture {execution}")
        for line in captured.strip().splitlines():
            _say(f"  {line}")
        report["captured"] = captured.strip()
        _gw(repo, "stop", execution, "--reason", "demo over")
        _say("\n# every step is a commit on refs/gitwork/state")
        return _finish(repo, report, as_json)
    finally:
        if shutil.which("tmux"):
            subprocess.run(["tmux", "-S", socket, "kill-server"], capture_output=True)
        if saved is None:
            os.environ.pop("GW_TMUX_SOCKET", None)
        else:
            os.environ["GW_TMUX_SOCKET"] = saved
        if keep:
            _say(f"\n(kept {repo})")
        else:
            shutil.rmtree(repo, ignore_errors=True)
