"""The test suite's wall time against its CPU time, by xdist worker count (issue 26).

    python benchmarks/bench_suite.py [--workers auto,2,3,4] [--runs 1] [--per-test N] [-- PYTEST_ARGS...]
    python benchmarks/bench_suite.py --record PATH [--per-test N]   (rank an existing GW_TEST_CPU record)

Runs ``python -m pytest -n W -p no:cacheprovider -q`` from the repository root, once per worker count
per round (rounds interleave the counts, so a change of load hits each alike), with this interpreter
(the development venv: the suite imports the tree, not an installed build). Each run is reaped with
``os.wait4``: its CPU time is user + system of pytest, its workers and every child they reaped. The
floor is that CPU time over the cores: the wall time if every core were busy with the suite for the
whole run. Prints one JSON object (also written to benchmarks/results/suite.json) with each run's
wall, pytest's own "in N s", CPU, floor, outcome line and the load before and after. Nothing here
asserts a speed. `auto` is what `.ci/run` and the README run (tests/conftest.py picks the count).

``--per-test N`` runs with ``GW_TEST_CPU`` (tests/conftest.py: each test's CPU, its reaped children and its
fork server's gw children included) and adds, per run, the N tests and the N files that cost the most CPU,
the sum over tests, and the sums of the set-up and teardown phases (fixtures: repositories built per test).
On a shared machine a test's wall time says little; its CPU is what the other workers lose. The record's
``start``/``end`` (one monotonic clock for all workers) add ``tail``: the time each worker sat idle after its
last test while another still ran, and which test each worker ended with. ``--record PATH`` ranks a record
written by another run (``GW_TEST_CPU=PATH pytest ...``) without running anything.
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


def per_test(path: Path, top: int) -> dict[str, Any]:
    """The heaviest tests and files by CPU, from a GW_TEST_CPU record."""
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    files: dict[str, float] = {}
    for row in rows:
        name = row["test"].split("::")[0]
        files[name] = files.get(name, 0.0) + row["cpu"]
    return {
        "tests": len(rows), "cpu_s": round(sum(r["cpu"] for r in rows), 1),
        "setup_s": round(sum(r.get("setup", 0.0) for r in rows), 1),
        "teardown_s": round(sum(r.get("teardown", 0.0) for r in rows), 1),
        "top_tests": [[r["test"], round(r["cpu"], 2)] for r in sorted(rows, key=lambda r: -r["cpu"])[:top]],
        "top_files": [[name, round(cpu, 1)] for name, cpu in sorted(files.items(), key=lambda f: -f[1])[:top]],
        **({"tail": tail(rows)} if rows and all("start" in r and "end" in r for r in rows) else {}),
    }


def tail(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """When each worker ran its last test, from the records' ``start`` and ``end`` (one monotonic clock for
    every worker): ``idle_worker_s`` sums, over the workers, the time from a worker's last test's end to the
    last end of the run (a worker with nothing left while another finishes); ``last`` names the tests that
    ended last on each worker, with when they started, relative to the first test's start."""
    first = min(r["start"] for r in rows)
    ends: dict[str, dict[str, Any]] = {}
    for row in rows:
        if row["worker"] not in ends or row["end"] > ends[row["worker"]]["end"]:
            ends[row["worker"]] = row
    last = max(r["end"] for r in rows)
    return {
        "span_s": round(last - first, 1),
        "idle_worker_s": round(sum(last - r["end"] for r in ends.values()), 1),
        "last": {worker: [r["test"], round(r["start"] - first, 1), round(r["end"] - first, 1)]
                 for worker, r in sorted(ends.items())},
    }


def one_run(workers: str, extra: list[str], top: int = 0) -> dict[str, Any]:
    argv = [sys.executable, "-m", "pytest", "-n", workers, "-p", "no:cacheprovider", "-q", *extra]
    load_before = os.getloadavg()
    env = dict(os.environ)
    record = Path(tempfile.mkdtemp(prefix="gw-test-cpu-")) / "cpu.jsonl"
    if top:
        env["GW_TEST_CPU"] = str(record)
    with tempfile.TemporaryFile("w+") as output:  # a file, not a pipe: os.wait4 reaps it, nothing reads
        t0 = time.perf_counter()
        proc = subprocess.Popen(argv, cwd=c.REPO_ROOT, stdout=output, stderr=subprocess.STDOUT, text=True, env=env)
        _pid, status, usage = os.wait4(proc.pid, 0)  # this run's own rusage, its reaped descendants included
        wall = time.perf_counter() - t0
        proc.returncode = os.waitstatus_to_exitcode(status)
        output.seek(0)
        out = output.read()
    cpu = usage.ru_utime + usage.ru_stime
    summary = [line for line in out.splitlines() if re.search(r"\d+ (passed|failed)", line)]
    pytest_s = re.search(r" in ([\d.]+)s", summary[-1]) if summary else None
    cores = len(os.sched_getaffinity(0))
    tests = per_test(record, top) if top and record.exists() else None
    return {
        "workers": workers, "wall_s": round(wall, 1), "pytest_s": float(pytest_s[1]) if pytest_s else None,
        "cpu_s": round(cpu, 1), "user_s": round(usage.ru_utime, 1), "sys_s": round(usage.ru_stime, 1),
        "floor_s": round(cpu / cores, 1), "cores": cores,
        "outcome": summary[-1].strip("= ") if summary else out[-500:],
        "load_before": [round(x, 2) for x in load_before], "load_after": [round(x, 2) for x in os.getloadavg()],
        "exit": proc.returncode, **({"per_test": tests} if tests else {}),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--workers", default="auto", help="comma-separated xdist counts (auto, 2, 3, ...)")
    parser.add_argument("--runs", type=int, default=1, help="rounds over the worker counts")
    parser.add_argument("--per-test", type=int, default=0, metavar="N",
                        help="record each test's CPU (GW_TEST_CPU) and report the N heaviest tests and files")
    parser.add_argument("--record", type=Path, metavar="PATH",
                        help="run nothing: rank the tests of an existing GW_TEST_CPU record (--per-test N of them)")
    parser.add_argument("pytest_args", nargs="*", help="more pytest arguments, after --")
    args = parser.parse_args()
    if args.record:
        print(json.dumps(per_test(args.record, args.per_test or 20), indent=2))
        return
    runs: list[dict[str, Any]] = []
    for round_ in range(args.runs):
        for workers in args.workers.split(","):
            c.log(f"round {round_ + 1}: pytest -n {workers}")
            runs.append(one_run(workers, args.pytest_args, args.per_test))
            c.log(json.dumps(runs[-1]))
    result = {"bench": "suite", "date": time.strftime("%Y-%m-%d %H:%M:%S %z"), "runs": runs}
    c.save("suite", result)
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
