"""Contended claims: 8 processes looping ``gw claim --next`` over 200 ready items.

    python benchmarks/bench_contention.py [--quick] [--procs 8] [--items 200] [--reps 3]

Each process runs a shell loop ``while gw claim --next; ...`` until gw answers "no ready item"
(exit 3), retrying on exit 75. The figure is wall time from starting the processes to the last one
exiting, divided by the item count (each process's final, empty-handed call is included). Side by
side, in the same run:
- the same loop in ONE process (no contention), to show what contention costs;
- the floor: 8 processes running benchmarks/floor.sh (git plumbing) over a fixed share of the items
  each, retrying the CAS on a lost race, and the floor in one process.
After every run the history is checked: exactly one claim commit per item, a single first-parent chain.
The ref is reset to the built state before each repetition. Results: stdout and
benchmarks/results/bench_contention.json.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _common as c  # noqa: E402

GW_LOOP = r"""
n=0
while :; do
  gw claim --next --as "$AGENT_NAME" >/dev/null 2>>"$ERRS"
  rc=$?
  case $rc in
    0) n=$((n + 1)) ;;
    75) ;;
    3) break ;;
    *) echo "unexpected exit $rc" >>"$ERRS"; break ;;
  esac
done
echo "$n" >"$COUNT"
"""

FLOOR_LOOP = r"""
n=0
for id in $ITEMS; do
  bash "$FLOOR_SH" claim "$id" "$AGENT_NAME" >/dev/null 2>>"$ERRS" && n=$((n + 1))
done
echo "$n" >"$COUNT"
"""


def run_once(repo: Path, base: str, procs: int, kind: str, ids: list[str], work: Path) -> dict[str, float]:
    c.git(repo, "update-ref", c.REF, base)
    c.BUSY_SEEN.append(c.wait_quiet())
    children = []
    t0 = time.perf_counter()
    for k in range(procs):
        env = c.child_env(AGENT_NAME=f"agent-{k}", ERRS=str(work / f"err-{k}"), COUNT=str(work / f"count-{k}"),
                          FLOOR_SH=str(c.FLOOR_SH), ITEMS=" ".join(ids[k::procs]))
        script = GW_LOOP if kind == "gw" else FLOOR_LOOP
        children.append(subprocess.Popen(["bash", "-c", script], cwd=repo, env=env))
    for child in children:
        child.wait()
    wall = time.perf_counter() - t0
    claimed = sum(int((work / f"count-{k}").read_text()) for k in range(procs))
    errors = "".join((work / f"err-{k}").read_text() for k in range(procs) if (work / f"err-{k}").exists())
    for k in range(procs):
        for name in (f"err-{k}", f"count-{k}"):
            (work / name).unlink(missing_ok=True)
    # Correctness of the run (not a test: a broken run must not produce a figure).
    commits = int(c.git(repo, "rev-list", "--count", "--first-parent", f"{base}..{c.REF}"))
    merges = int(c.git(repo, "rev-list", "--count", "--merges", f"{base}..{c.REF}"))
    trailers = c.git(repo, "log", "--format=%(trailers:key=Work-Item,valueonly)", f"{base}..{c.REF}").split()
    if claimed != len(ids) or commits != len(ids) or merges or sorted(trailers) != sorted(ids):
        raise RuntimeError(f"{kind} x{procs}: claimed {claimed}, {commits} commits, {merges} merges, "
                           f"{len(set(trailers))} distinct items; stderr: {errors[-2000:]}")
    unexpected = [line for line in errors.splitlines() if "unexpected" in line]
    if unexpected:
        raise RuntimeError(f"{kind} x{procs}: {unexpected[:3]}")
    return {"wall_s": wall, "ms_per_claim": wall * 1000 / len(ids), "claims_per_s": len(ids) / wall}


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="40 items, one repetition (a smoke run)")
    parser.add_argument("--procs", type=int, default=8)
    parser.add_argument("--items", type=int, help="ready items (default 200, quick 40)")
    parser.add_argument("--reps", type=int, help="repetitions per scenario, median reported (default 3, quick 1)")
    parser.add_argument("--no-wait", action="store_true", help="do not wait for an idle machine before timing")
    parser.add_argument("--reinstall", action="store_true", help="reinstall gitwork into the bench venv")
    args = parser.parse_args(argv)
    c.QUIET["enabled"] = not args.no_wait
    n = args.items or (40 if args.quick else 200)
    reps = args.reps or (1 if args.quick else 3)
    info = c.machine()
    c.log(f"machine: {info}")
    work = c.scratch("contention")
    repo = c.make_repo(work / "repo")
    state = c.build_state(repo, n, realistic=False)
    base, ids = str(state["commit"]), list(state["ids"])
    scenarios = [("gw", args.procs), ("gw", 1), ("floor", args.procs), ("floor", 1)]
    raw: dict[str, list[dict[str, float]]] = {}
    for rep in range(reps):
        for kind, procs in scenarios:  # interleaved, so a burst of outside load hits every scenario
            name = f"{'gw claim --next' if kind == 'gw' else 'floor.sh claim'} x{procs} process{'es' if procs > 1 else ''}"
            c.log(f"rep {rep + 1}/{reps}: {name} over {n} items")
            raw.setdefault(name, []).append(run_once(repo, base, procs, kind, ids, work))
    results = {name: {"median_wall_s": statistics.median(r["wall_s"] for r in runs),
                      "median_ms_per_claim": statistics.median(r["ms_per_claim"] for r in runs),
                      "median_claims_per_s": statistics.median(r["claims_per_s"] for r in runs),
                      "runs": runs} for name, runs in raw.items()}
    c.git(repo, "update-ref", c.REF, base)
    info["loadavg_at_end"] = open("/proc/loadavg").read().split()[:3]
    info["max_busy_before_a_measurement"] = max(c.BUSY_SEEN) if c.BUSY_SEEN else None
    c.save("bench_contention" + ("-quick" if args.quick else ""),
           {"machine": info, "items": n, "procs": args.procs, "reps": reps, "results": results})
    print(f"## Contended claims ({n} ready items, median of {reps})\n")
    print(c.markdown(("scenario", "wall s", "ms per claim", "claims per s"),
                     [(name, r["median_wall_s"], r["median_ms_per_claim"], r["median_claims_per_s"])
                      for name, r in results.items()]))
    return 0


if __name__ == "__main__":
    c.enter_venv(sys.argv[1:])
    sys.exit(main(sys.argv[1:]))
