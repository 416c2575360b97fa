"""``gw run`` and ``gw coordinate`` (issue 12): time from ``gw run`` to the agent's first line of output,
beside ``tmux new-session`` alone; the coordinator's cost per pass at 100 live executions.

    python benchmarks/bench_launch.py [--runs 15] [--executions 100] [--passes 5]

Runs ``python -m gitwork`` from the interpreter running this script, on a throwaway repository with
its own tmux server (``GW_TMUX_SOCKET`` under the temporary folder), killed at the end.

- **first output**: each run starts ``sh -c 'echo first > MARK; exec sleep 600'`` on a fresh item
  and polls (every 0.5 ms) until MARK exists: the agent's first line written. Interleaved, each
  round: ``gw run --backend tmux``, ``gw run --backend subprocess``, and the floor,
  ``tmux new-session -d`` of the same command on the same server. Medians and 90th percentiles.
- **coordinator pass**: ``--executions`` agents (``sleep 600`` in tmux) started in-process through
  ``gitwork.launch.run.run``; then ``tick()`` in-process (no renewals due: a pass that only checks)
  and ``gw coordinate --once`` as a process (which also takes and releases the coordinator lease).

Prints one JSON object on stdout. Nothing here asserts a speed.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

AGENT = 'echo first > "$MARK"; exec sleep 600'


def wait_for(path: str, limit: float = 30.0) -> None:
    deadline = time.perf_counter() + limit
    while not os.path.exists(path):
        if time.perf_counter() > deadline:
            raise SystemExit(f"timed out waiting for {path}")
        time.sleep(0.0005)


def first_output(argv: list[str], cwd: str, mark: str) -> float:
    """Seconds from starting ``argv`` to the agent's first line (the mark file)."""
    env = {**os.environ, "MARK": mark}
    t0 = time.perf_counter()
    proc = subprocess.Popen(argv, cwd=cwd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    wait_for(mark)
    elapsed = time.perf_counter() - t0
    if proc.wait() != 0:
        raise SystemExit(f"{argv[:6]} failed: {proc.stderr.read().decode() if proc.stderr else ''}")
    return elapsed


def summary(times: list[float]) -> dict[str, float]:
    ordered = sorted(times)
    return {"median_ms": round(statistics.median(ordered) * 1000, 1),
            "p90_ms": round(ordered[int(0.9 * (len(ordered) - 1))] * 1000, 1), "runs": len(ordered)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=15)
    parser.add_argument("--executions", type=int, default=100)
    parser.add_argument("--passes", type=int, default=5)
    args = parser.parse_args()
    if not shutil.which("tmux"):
        raise SystemExit("bench_launch needs tmux")
    root = tempfile.mkdtemp(prefix="gw-bench-launch-")
    repo = os.path.join(root, "repo")
    socket = os.path.join(root, "tmux.sock")
    os.environ["GW_TMUX_SOCKET"] = socket
    os.environ["GW_AGENT"] = "bench"
    gw = [sys.executable, "-m", "gitwork"]
    try:
        subprocess.run(["git", "init", "-q", repo], check=True)
        from gitwork.workplane import Workplane

        with Workplane(repo) as wp:
            wp.do("init")
            items = [wp.do("new", title=f"item {n}").result["item"] for n in range(3 * args.runs + args.executions + 1)]
        # One warm-up of each, so the tmux server and the page cache are up before anything is timed.
        # (gw's own start of the server, so it runs with gitwork's tmux configuration).
        subprocess.run([*gw, "run", items.pop(), "--", "true"], cwd=repo, check=True, stdout=subprocess.DEVNULL,
                       stderr=subprocess.DEVNULL)
        times: dict[str, list[float]] = {"gw run (tmux)": [], "gw run (subprocess)": [], "tmux new-session": []}
        for n in range(args.runs):
            for case in times:
                item = items.pop()
                mark = os.path.join(root, f"mark-{n}-{case.split()[-1].strip('()')}")
                if case == "tmux new-session":
                    argv = ["tmux", "-S", socket, "new-session", "-d", "-s", f"floor-{n}", "-e", f"MARK={mark}",
                            "--", "sh", "-c", AGENT]
                else:
                    argv = [*gw, "run", item, "--backend", case.split("(")[1].rstrip(")"), "--", "sh", "-c", AGENT]
                times[case].append(first_output(argv, repo, mark))
        versions = []
        for _ in range(args.runs):  # the start-up floor of any gw process: interpreter plus entry point
            t0 = time.perf_counter()
            subprocess.run([*gw, "--version"], check=True, stdout=subprocess.DEVNULL)
            versions.append(time.perf_counter() - t0)
        times["gw --version"] = versions
        result: dict[str, object] = {"first_output": {case: summary(t) for case, t in times.items()}}
        # Stop the first-output agents, then start the live executions the coordinator passes over.
        subprocess.run(["tmux", "-S", socket, "kill-server"], capture_output=True)
        for folder in Path(repo, ".git", "gitwork", "executions").glob("*/handle"):
            try:
                os.killpg(int(folder.read_text().partition("@")[0]), 9)
            except (ProcessLookupError, ValueError):
                pass
        from gitwork.launch import coordinate
        from gitwork.launch import run as launch

        with Workplane(repo) as wp:
            for _row in launch.runs(wp):  # the killed ones are lost now: one pass records that
                pass
            coordinate.tick(wp)
            t0 = time.perf_counter()
            for item in items[: args.executions]:
                launch.run(wp, item, ["sleep", "600"], "tmux")
            started = time.perf_counter() - t0
            ticks = []
            for _ in range(args.passes):
                t0 = time.perf_counter()
                actions = coordinate.tick(wp)
                ticks.append(time.perf_counter() - t0)
            assert sum(a["action"] == "running" for a in actions) == args.executions, actions[:3]
        onces = []
        for _ in range(args.passes):
            t0 = time.perf_counter()
            subprocess.run([*gw, "coordinate", "--once"], cwd=repo, check=True, stdout=subprocess.DEVNULL)
            onces.append(time.perf_counter() - t0)
        result["coordinator"] = {
            "live_executions": args.executions,
            "start_in_process_ms_each": round(started / args.executions * 1000, 1),
            "tick_in_process": summary(ticks),
            "tick_per_execution_ms": round(statistics.median(ticks) / args.executions * 1000, 2),
            "gw_coordinate_once": summary(onces),
        }
        result["machine"] = {"cpus": os.cpu_count(), "load": os.getloadavg()[0]}
        sys.stdout.write(json.dumps(result, indent=2) + "\n")
    finally:
        subprocess.run(["tmux", "-S", socket, "kill-server"], capture_output=True)
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
