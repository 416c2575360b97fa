"""``gw claim`` and ``gw release`` as processes, beside their floors, on a loaded machine (issue 27 point 4).

    python benchmarks/bench_startup.py [--runs 30] [--quick]

Re-executes itself in the non-editable benchmark venv (``$GW_BENCH_VENV``, default /tmp/benchvenv), as
a user's ``pip install`` has it: the installed ``gw`` script, bytecode compiled (PYTHONDONTWRITEBYTECODE
unset, one warm-up round). On a five-item repository, each round runs, interleaved:
``python -c pass`` (the interpreter with site), ``python -S -c pass`` (without site),
``python -I -S -c pass``, ``gw --version`` (entry point, nothing else),
``gw claim ID --ttl 30m`` and ``gw release ID`` (each a real state commit through the engine);
with ``--against VENV``, the same three gw cases of the build installed in VENV, in the same rounds.
Each process is reaped with ``os.wait4``: its CPU time (user + system, its own children included,
the one ``git update-ref``) is per process, not a mean. Prints medians and minima of wall and CPU
time, and ``uptime``'s load, as one JSON object. Nothing here asserts a speed.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _common as c  # noqa: E402


def timed(argv: list[str], cwd: Path, env: dict[str, str]) -> tuple[float, float]:
    """Wall and CPU seconds of one process (CPU from its own rusage, its reaped children included)."""
    t0 = time.perf_counter()
    proc = subprocess.Popen(argv, cwd=cwd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _pid, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - t0
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode != 0:
        raise SystemExit(f"{argv} exited {proc.returncode}: {proc.stderr.read().decode() if proc.stderr else ''}")
    return wall, usage.ru_utime + usage.ru_stime


def stats(pairs: list[tuple[float, float]]) -> dict[str, float]:
    wall = [w * 1000 for w, _ in pairs]
    cpu = [u * 1000 for _, u in pairs]
    return {"wall_median_ms": round(statistics.median(wall), 1), "wall_min_ms": round(min(wall), 1),
            "cpu_median_ms": round(statistics.median(cpu), 1), "cpu_min_ms": round(min(cpu), 1), "runs": len(wall)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=30)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--reinstall", action="store_true")
    parser.add_argument("--against", metavar="VENV", help="another venv with another build of gitwork installed: "
                        "its gw --version, claim and release are timed in the same rounds (a before/after pair)")
    parser.add_argument("--default-identity", action="store_true",
                        help="no GW_AGENT: each gw works out user@host/sSID itself, as a person's shell has it")
    args = parser.parse_args()
    c.enter_venv(sys.argv[1:])
    if args.against:
        args.against = os.path.abspath(args.against)
    runs = 5 if args.quick else args.runs
    env = c.child_env(bytecode=True)
    if args.default_identity:
        del env["GW_AGENT"]
    py, gw = str(c.venv_python()), str(c.venv_gw())
    repo = c.scratch("startup")
    c.make_repo(repo)
    subprocess.run([gw, "init"], cwd=repo, env=env, check=True, stdout=subprocess.DEVNULL)
    items = [subprocess.run([gw, "new", f"item {n}"], cwd=repo, env=env, check=True, capture_output=True,
                            text=True).stdout.strip() for n in range(5)]
    item = items[0]
    cases = {
        "python -c pass": [py, "-c", "pass"],
        "python -S -c pass": [py, "-S", "-c", "pass"],
        "python -I -S -c pass": [py, "-I", "-S", "-c", "pass"],
        "gw --version": [gw, "--version"],
        "gw claim ID --ttl 30m": [gw, "claim", item, "--ttl", "30m"],
        "gw release ID": [gw, "release", item],
    }
    if args.against:  # the other build, interleaved: the same repository, the same item, the same load
        other = os.path.join(args.against, "bin", "gw")
        cases.update({"gw --version (against)": [other, "--version"],
                      "gw claim ID --ttl 30m (against)": [other, "claim", item, "--ttl", "30m"],
                      "gw release ID (against)": [other, "release", item]})
    times: dict[str, list[tuple[float, float]]] = {name: [] for name in cases}
    load_before = os.getloadavg()
    for round_no in range(runs + 1):  # round 0 compiles the bytecode and warms the page cache
        for name, argv in cases.items():
            sample = timed(argv, repo, env)
            if round_no:
                times[name].append(sample)
    result = {"cases": {name: stats(pairs) for name, pairs in times.items()},
              "load": {"before": load_before, "after": os.getloadavg()},
              "uptime": subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip(),
              "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())}
    sys.stdout.write(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
