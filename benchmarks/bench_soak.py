"""The system harness as a soak: gitwork's features together under faults, for minutes.

    python benchmarks/bench_soak.py [--minutes 30] [--round 0] [--seed N] [--off arbiter,mcp,...] [--keep DIR]

The same harness as tests/test_system_harness.py (tests/harness/: 3 clones and an arbiter behind
``git daemon`` with the server hook, ``gw run`` on tmux and subprocess, a coordinator per clone, CLI
workers, ``gw sync``, REST, MCP, two delegating peers; kill -9, arbiter outages, SIGSTOP/SIGCONT),
run longer. ``--round S`` splits the time into runs of S seconds, each with its own seed (0: one run
of ``--minutes``). Prints one JSON object on stdout: per run the seed, the wall time, the commits on
the arbiter, what was acknowledged (landed / reported refused / lost / duplicated), the violations
of each invariant (with the first few lines), the faults injected and how many agents ran at most;
and the totals. Nothing here asserts: the test is tests/test_system_harness.py.

Runs ``python -m gitwork`` from the interpreter running this script (the worktree's venv), in a
scrubbed environment (HOME and every GIT_*/GW_* variable replaced), as the tests do.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import random
import shutil
import signal
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT))


def scrub(home: Path) -> None:
    """The tests' scrubbed environment (conftest.scrub_env: HOME, no GIT_*/GW_*), for the whole soak."""
    import pytest

    from conftest import scrub_env

    scrub_env(home, pytest.MonkeyPatch())
    os.environ["PYTHONPATH"] = str(ROOT)  # the gw children (and the hooks they install) run this tree


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--minutes", type=float, default=30.0)
    parser.add_argument("--round", type=float, default=0.0, help="seconds per run (0: one run of --minutes)")
    parser.add_argument("--seed", type=int, help="the first run's seed (default: a fresh one)")
    parser.add_argument("--off", default="", help="actors and faults to switch off (GW_HARNESS_OFF)")
    parser.add_argument("--keep", help="keep each run's world under this folder")
    args = parser.parse_args()
    # SIGTERM ends the run the way Ctrl-C does: through the harness's teardown (every process it
    # started killed by group), never leaving the world running.
    signal.signal(signal.SIGTERM, lambda *_: (_ for _ in ()).throw(KeyboardInterrupt()))
    off = args.off
    base = Path(tempfile.mkdtemp(prefix="gw-soak-"))
    scrub(base / "home")
    (base / "home").mkdir()
    if off:
        os.environ["GW_HARNESS_OFF"] = off

    from harness.run import Switches, run_once

    seed = args.seed if args.seed is not None else random.SystemRandom().randrange(2**31)
    total = args.minutes * 60
    length = args.round or total
    started = time.monotonic()
    runs = []
    while time.monotonic() - started < total - 1:
        left = total - (time.monotonic() - started)
        seconds = min(length, left)
        root = Path(args.keep) / f"run-{seed}" if args.keep else base / f"run-{seed}"
        root.mkdir(parents=True, exist_ok=True)
        sys.stderr.write(f"[{time.monotonic() - started:7.1f}s] run seed {seed} for {seconds:.0f} s\n")
        report = run_once(root, seed, seconds, Switches.from_env())
        by_invariant = collections.defaultdict(list)
        for violation in report.violations:
            by_invariant[violation.split(":", 1)[0]].append(violation)
        runs.append({
            "seed": seed, "seconds": round(report.seconds, 1), "action_seconds": round(seconds, 1),
            "commits": report.commits, "acknowledged": report.acknowledged,
            "violations": {name: {"count": len(lines), "first": lines[:3]} for name, lines in sorted(by_invariant.items())},
            "faults": {k.removeprefix("fault:"): v for k, v in report.counts.items() if k.startswith("fault:")},
            # every non-zero exit of the clients (exit:OP:CODE): 11 (locked), 12 (unreachable) and 14
            # (remote-refused) say why pushes stopped landing, when they do
            "exits": {k.removeprefix("exit:"): v for k, v in report.counts.items()
                      if k.startswith("exit:") and not k.endswith(":0")},
            "events_tail": report.events[-15:] if report.violations or report.errors else [],
            "max_live_agents": report.max_live_agents, "errors": report.errors,
            "runs_started": sum(v for k, v in report.counts.items() if k.startswith("exit:run:0")),
        })
        sys.stderr.write(report.summary() + "\n")
        if not args.keep:
            shutil.rmtree(root, ignore_errors=True)
        seed = random.Random(seed).randrange(2**31)
    totals = collections.Counter[str]()
    for run in runs:
        totals["commits"] += run["commits"]
        for key, value in run["acknowledged"].items():
            totals[f"acknowledged:{key}"] += value
        for key, value in run["violations"].items():
            totals[f"violations:{key}"] += value["count"]
        for key, value in run["faults"].items():
            totals[f"faults:{key}"] += value
    print(json.dumps({"date": time.strftime("%Y-%m-%d"), "minutes": args.minutes, "round": args.round, "off": off,
                      "cores": os.cpu_count(), "load": os.getloadavg(), "runs": runs, "totals": dict(sorted(totals.items()))},
                     indent=2))
    shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()
