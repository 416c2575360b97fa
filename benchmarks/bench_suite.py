"""The test suite's wall time against its CPU time, by xdist worker count (issue 26).

    python benchmarks/bench_suite.py [--workers auto,2,3,4] [--runs 1] [-- PYTEST_ARGS...]

Runs ``python -m pytest -n W -p no:cacheprovider -q`` from the repository root, once per worker count
per round (rounds interleave the counts, so a change of load hits each alike), with this interpreter
(the development venv: the suite imports the tree, not an installed build). Each run is reaped with
``os.wait4``: its CPU time is user + system of pytest, its workers and every child they reaped. The
floor is that CPU time over the cores: the wall time if every core were busy with the suite for the
whole run. Prints one JSON object (also written to benchmarks/results/suite.json) with each run's
wall, pytest's own "in N s", CPU, floor, outcome line and the load before and after. Nothing here
asserts a speed. `auto` is what `.ci/run` and the README run (tests/conftest.py picks the count).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _common as c  # noqa: E402


def one_run(workers: str, extra: list[str]) -> dict[str, Any]:
    argv = [sys.executable, "-m", "pytest", "-n", workers, "-p", "no:cacheprovider", "-q", *extra]
    load_before = os.getloadavg()
    with tempfile.TemporaryFile("w+") as output:  # a file, not a pipe: os.wait4 reaps it, nothing reads
        t0 = time.perf_counter()
        proc = subprocess.Popen(argv, cwd=c.REPO_ROOT, stdout=output, stderr=subprocess.STDOUT, text=True)
        _pid, status, usage = os.wait4(proc.pid, 0)  # this run's own rusage, its reaped descendants included
        wall = time.perf_counter() - t0
        proc.returncode = os.waitstatus_to_exitcode(status)
        output.seek(0)
        out = output.read()
    cpu = usage.ru_utime + usage.ru_stime
    summary = [line for line in out.splitlines() if re.search(r"\d+ (passed|failed)", line)]
    pytest_s = re.search(r" in ([\d.]+)s", summary[-1]) if summary else None
    cores = len(os.sched_getaffinity(0))
    return {
        "workers": workers, "wall_s": round(wall, 1), "pytest_s": float(pytest_s[1]) if pytest_s else None,
        "cpu_s": round(cpu, 1), "user_s": round(usage.ru_utime, 1), "sys_s": round(usage.ru_stime, 1),
        "floor_s": round(cpu / cores, 1), "cores": cores,
        "outcome": summary[-1].strip("= ") if summary else out[-500:],
        "load_before": [round(x, 2) for x in load_before], "load_after": [round(x, 2) for x in os.getloadavg()],
        "exit": proc.returncode,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--workers", default="auto", help="comma-separated xdist counts (auto, 2, 3, ...)")
    parser.add_argument("--runs", type=int, default=1, help="rounds over the worker counts")
    parser.add_argument("pytest_args", nargs="*", help="more pytest arguments, after --")
    args = parser.parse_args()
    runs: list[dict[str, Any]] = []
    for round_ in range(args.runs):
        for workers in args.workers.split(","):
            c.log(f"round {round_ + 1}: pytest -n {workers}")
            runs.append(one_run(workers, args.pytest_args))
            c.log(json.dumps(runs[-1]))
    result = {"bench": "suite", "date": time.strftime("%Y-%m-%d %H:%M:%S %z"), "runs": runs}
    c.save("suite", result)
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
