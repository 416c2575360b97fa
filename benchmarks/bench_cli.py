"""Start-up and per-command cost of ``gw``, in-process commands per second, growth per 1,000 renewals.

    python benchmarks/bench_cli.py [--quick] [--runs N] [--reinstall]

Each figure is measured side by side with its floor in the same run:
- process start-to-exit of ``gw --version``, ``gw claim ID``, ``gw release ID`` next to ``python -c
  pass`` (the interpreter floor) and ``benchmarks/floor.sh`` (the same state change done with git
  plumbing in bash: hash-object -w, mktree, commit-tree, update-ref REF NEW OLD). Before every timed
  run the ref is reset with ``git update-ref`` so each run makes the identical state change; with and
  without PYTHONDONTWRITEBYTECODE (this machine sets it);
- in-process ``Workplane.do`` claim/release loop (commands per second) next to the floor's loop and
  next to one ``git update-ref`` process (the CAS every command pays);
- repository growth per 1,000 renewals, loose and after ``git gc``.
Results: stdout (markdown) and benchmarks/results/bench_cli.json.
"""

from __future__ import annotations

import argparse
import datetime as dt
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _common as c  # noqa: E402


def startup(repo: Path, item: str, runs: int) -> dict[str, dict[str, float]]:
    """Process start-to-exit medians; every case in one side-by-side hyperfine run per env."""
    base = c.tip(repo)
    claimed = subprocess.run([str(c.venv_gw()), "claim", item], cwd=repo, env=c.child_env(), capture_output=True)
    if claimed.returncode != 0:
        raise RuntimeError(f"gw claim failed: {claimed.stderr.decode()}")
    held = c.tip(repo)
    to_base = ["git", "update-ref", c.REF, base]
    to_held = ["git", "update-ref", c.REF, held]
    py, gw = str(c.venv_python()), str(c.venv_gw())
    results: dict[str, dict[str, float]] = {}
    for bytecode in (True, False):
        env = c.child_env(bytecode=bytecode)
        tag = "" if bytecode else " [PYTHONDONTWRITEBYTECODE=1]"
        cases = [
            c.Case("python -c pass" + tag, [py, "-c", "pass"], env=env),
            c.Case("gw --version" + tag, [gw, "--version"], env=env),
            c.Case("gw claim ID" + tag, [gw, "claim", item], prepare=to_base, env=env),
            c.Case("gw release ID" + tag, [gw, "release", item], prepare=to_held, env=env),
        ]
        if bytecode:
            cases += [
                c.Case("git --version", ["git", "--version"], env=env),
                c.Case("floor claim (git plumbing)", c.floor_argv("claim", item), prepare=to_base, env=env),
                c.Case("floor release (git plumbing)", c.floor_argv("release", item), prepare=to_held, env=env),
            ]
        results.update(c.measure(cases, repo, runs=runs, warmup=3))
    c.git(repo, "update-ref", c.REF, base)
    return results


def in_process(repo: Path, item: str, pairs: int) -> dict[str, object]:
    """Workplane.do claim/release loop in one process, next to the floor's loop and bare update-ref."""
    from gitwork.workplane import Workplane

    c.BUSY_SEEN.append(c.wait_quiet())
    claims: list[float] = []
    releases: list[float] = []
    with Workplane(str(repo), agent=c.AGENT) as wp:
        for _ in range(3):  # warm the object caches, as a long-lived agent process would
            wp.do("claim", item=item)
            wp.do("release", item=item)
        t_start, cpu_start = time.perf_counter(), c.cpu_now()
        for _ in range(pairs):
            t0 = time.perf_counter()
            wp.do("claim", item=item)
            t1 = time.perf_counter()
            wp.do("release", item=item)
            t2 = time.perf_counter()
            claims.append(t1 - t0)
            releases.append(t2 - t1)
        total, cpu_total = time.perf_counter() - t_start, c.cpu_now() - cpu_start
    env = c.child_env()
    floor_claims: list[float] = []
    floor_releases: list[float] = []
    floor_pairs = max(5, pairs // 2)
    t_start, cpu_start = time.perf_counter(), c.cpu_now()
    for _ in range(floor_pairs):
        t0 = time.perf_counter()
        subprocess.run(c.floor_argv("claim", item), cwd=repo, env=env, check=True, stdout=subprocess.DEVNULL)
        t1 = time.perf_counter()
        subprocess.run(c.floor_argv("release", item), cwd=repo, env=env, check=True, stdout=subprocess.DEVNULL)
        t2 = time.perf_counter()
        floor_claims.append(t1 - t0)
        floor_releases.append(t2 - t1)
    floor_total, floor_cpu = time.perf_counter() - t_start, c.cpu_now() - cpu_start
    # The one process every command must start: git update-ref REF NEW OLD (a no-op move here).
    head = c.tip(repo)
    cas: list[float] = []
    for _ in range(max(20, pairs)):
        t0 = time.perf_counter()
        subprocess.run(["git", "update-ref", c.REF, head, head], cwd=repo, env=env, check=True)
        cas.append(time.perf_counter() - t0)
    ms = lambda xs: statistics.median(xs) * 1000  # noqa: E731
    return {
        "pairs": pairs,
        "claim_median_ms": ms(claims),
        "release_median_ms": ms(releases),
        "commands_per_s": 2 * pairs / total,
        "cpu_ms_per_command": cpu_total * 1000 / (2 * pairs),
        "floor_cpu_ms_per_command": floor_cpu * 1000 / (2 * floor_pairs),
        "floor_pairs": floor_pairs,
        "floor_claim_median_ms": ms(floor_claims),
        "floor_release_median_ms": ms(floor_releases),
        "floor_commands_per_s": 2 * floor_pairs / floor_total,
        "update_ref_median_ms": ms(cas),
    }


def growth(renewals: int) -> dict[str, object]:
    """Bytes added to .git/objects by N renewals: loose, then after git gc (packed)."""
    from gitwork.workplane import Workplane

    repo = c.make_repo(c.scratch("growth") / "repo")
    state = c.build_state(repo, 100)
    item = state["claimable"][0]
    # A fake clock one minute apart per renewal: each renewal then writes a new lease, as in real use.
    clock = [dt.datetime.now(dt.timezone.utc).replace(microsecond=0)]

    def now() -> dt.datetime:
        return clock[0]

    with Workplane(str(repo), agent=c.AGENT, now=now) as wp:
        wp.do("claim", item=item, ttl="15m")
    c.git(repo, "gc", "-q", "--prune=now")
    objects = c.common_dir(repo) / "objects"
    before = {"du_kib": c.du_kib(objects), "apparent_kib": c.du_kib(objects, apparent=True),
              "pack_kib": _pack_kib(repo)}
    loose_before = _loose_count(repo)
    # A fresh Workplane after gc: a long-lived one fails once gc removed its object dirs (see README).
    with Workplane(str(repo), agent=c.AGENT, now=now) as wp:
        log_every = max(1, renewals // 5)
        for k in range(renewals):
            clock[0] += dt.timedelta(minutes=1)
            wp.do("renew", item=item)
            if (k + 1) % log_every == 0:
                c.log(f"growth: {k + 1}/{renewals} renewals")
    after = {"du_kib": c.du_kib(objects), "apparent_kib": c.du_kib(objects, apparent=True)}
    loose_objects = _loose_count(repo) - loose_before
    c.git(repo, "gc", "-q", "--prune=now")
    packed = {"du_kib": c.du_kib(objects), "pack_kib": _pack_kib(repo)}
    scale = 1000 / renewals
    return {
        "renewals": renewals,
        "loose_objects_per_renewal": loose_objects / renewals,
        "loose_du_kib_per_1000": (after["du_kib"] - before["du_kib"]) * scale,
        "loose_apparent_kib_per_1000": (after["apparent_kib"] - before["apparent_kib"]) * scale,
        "packed_kib_per_1000": (packed["pack_kib"] - before["pack_kib"]) * scale,
        "before": before, "after_loose": after, "after_gc": packed,
    }


def _loose_count(repo: Path) -> int:
    return int(dict(line.split(": ") for line in c.git(repo, "count-objects", "-v").splitlines())["count"])


def _pack_kib(repo: Path) -> int:
    return int(dict(line.split(": ") for line in c.git(repo, "count-objects", "-v").splitlines())["size-pack"])


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="few runs, 100 renewals (a smoke run)")
    parser.add_argument("--runs", type=int, help="timed runs per process case (default 40, quick 8)")
    parser.add_argument("--pairs", type=int, help="in-process claim/release pairs (default 100, quick 15)")
    parser.add_argument("--renewals", type=int, help="renewals for the growth figure (default 1000, quick 100)")
    parser.add_argument("--no-wait", action="store_true", help="do not wait for an idle machine before timing")
    parser.add_argument("--reinstall", action="store_true", help="reinstall gitwork into the bench venv")
    args = parser.parse_args(argv)
    c.QUIET["enabled"] = not args.no_wait
    runs = args.runs or (8 if args.quick else 40)
    pairs = args.pairs or (15 if args.quick else 100)
    renewals = args.renewals or (100 if args.quick else 1000)

    info = c.machine()
    c.log(f"machine: {info}")
    repo = c.make_repo(c.scratch("cli") / "repo")
    state = c.build_state(repo, 100)
    item = state["claimable"][0]
    c.log(f"state: 100 items at {state['commit'][:12]}; timing on {item}")

    start = startup(repo, item, runs)
    c.log("in-process loop")
    inproc = in_process(repo, item, pairs)
    c.log("growth per renewals")
    grow = growth(renewals)
    info["loadavg_at_end"] = open("/proc/loadavg").read().split()[:3]
    info["max_busy_before_a_measurement"] = max(c.BUSY_SEEN) if c.BUSY_SEEN else None
    c.save("bench_cli" + ("-quick" if args.quick else ""), {"machine": info, "startup": start, "in_process": inproc,
                                                             "growth": grow})

    print(f"## Process start-to-exit (median of {runs}, {c.runner_name()}, 100 items)\n")
    rows = [(name, r["median_ms"], r["min_ms"], r["stdev_ms"], r.get("cpu_ms")) for name, r in start.items()]
    print(c.markdown(("command", "median ms", "min ms", "stdev ms", "CPU ms (user+sys, mean)"), rows))
    print(f"\n## In-process (Workplane.do, {pairs} claim/release pairs)\n")
    print(c.markdown(("what", "gitwork", "floor (floor.sh loop)"), [
        ("claim median ms", inproc["claim_median_ms"], inproc["floor_claim_median_ms"]),
        ("release median ms", inproc["release_median_ms"], inproc["floor_release_median_ms"]),
        ("commands per second", inproc["commands_per_s"], inproc["floor_commands_per_s"]),
        ("CPU ms per command (incl. git children)", inproc["cpu_ms_per_command"], inproc["floor_cpu_ms_per_command"]),
        ("one `git update-ref` process, ms", inproc["update_ref_median_ms"], inproc["update_ref_median_ms"]),
    ]))
    print(f"\n## Growth per 1,000 renewals (measured over {renewals})\n")
    print(c.markdown(("what", "value"), [
        ("loose objects per renewal", grow["loose_objects_per_renewal"]),
        ("loose, du KiB per 1,000", grow["loose_du_kib_per_1000"]),
        ("loose, apparent KiB per 1,000", grow["loose_apparent_kib_per_1000"]),
        ("after git gc, pack KiB per 1,000", grow["packed_kib_per_1000"]),
    ]))
    return 0


if __name__ == "__main__":
    c.enter_venv(sys.argv[1:])
    sys.exit(main(sys.argv[1:]))
