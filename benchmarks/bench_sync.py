"""Several machines, measured: gw through a real ``git daemon`` on loopback.

    python benchmarks/bench_sync.py [--claims 25] [--offline 1000] [--contended-items 120] [--quick]

1. Median ``gw claim ID`` through the daemon (one machine, no contention) next to the median plain
   ``git push`` of one commit to the same daemon, measured interleaved in the same run (target: the
   claim within 2x the push). ``gw claim`` without a remote is shown for reference.
2. ``gw sync`` of N offline commands (made with the library, ``Workplane.do("new", ...)``): once as a
   plain fast-forward push, once replayed on a remote another machine has moved meanwhile.
3. 12 contending processes running ``gw claim --next`` in a loop through the daemon: claims per second,
   as 12 machines x 1 process and as 3 machines x 4 processes (exit codes other than 0/3 are counted).

Prints a table; asserts nothing about speed (the machine is shared). Every child gets a scrubbed
environment (own HOME, no system git config, no GIT_*/GW_* variables, bytecode writing allowed).
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT))

from daemon import GitDaemon, bare_repo  # noqa: E402

STATE = "refs/gitwork/state"


def scrubbed_env(home: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("GIT_", "GW_"))}
    env.update(HOME=str(home), XDG_CONFIG_HOME=str(home / ".config"), GIT_CONFIG_NOSYSTEM="1", NO_COLOR="1")
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    return env


def gw_program() -> list[str]:
    script = Path(sys.executable).with_name("gw")
    return [str(script)] if script.exists() else [sys.executable, "-m", "gitwork"]


GW = gw_program()


def run(args: list[str], cwd: Path, *, check: bool = True, env: dict[str, str] | None = None
        ) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(args, cwd=cwd, capture_output=True, text=True, env=env)
    if check and done.returncode != 0:
        raise SystemExit(f"{' '.join(args)} failed ({done.returncode}): {done.stderr.strip()}")
    return done


def gw(cwd: Path, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    return run([*GW, *args], cwd, check=check)


def timed(args: list[str], cwd: Path, *, check: bool = True) -> float:
    started = time.perf_counter()
    run(args, cwd, check=check)
    return time.perf_counter() - started


def machine(tmp: Path, name: str, url: str, *, publish: bool = False) -> Path:
    path = tmp / name
    run(["git", "init", "-q", str(path)], tmp)
    run(["git", "remote", "add", "origin", url], path)
    gw(path, "init", "--remote", "origin")
    if publish:
        gw(path, "sync")
    return path


def make_items(path: Path, count: int, prefix: str) -> list[str]:
    from gitwork.workplane import Workplane

    with Workplane(str(path), agent="bench") as plane:
        return [plane.do("new", title=f"{prefix} {n}").result["item"] for n in range(count)]


# --- 1. one claim vs one push ------------------------------------------------------------------


def bench_claim_vs_push(tmp: Path, daemon: GitDaemon, claims: int) -> list[tuple[str, str, str]]:
    bare_repo(daemon.base, "single")
    url = daemon.url("single")
    a = machine(tmp, "single-a", url, publish=True)
    items = make_items(a, claims, "claim")
    gw(a, "sync")
    local = tmp / "local-only"
    run(["git", "init", "-q", str(local)], tmp)
    gw(local, "init")
    local_items = make_items(local, claims, "local")

    # The plain-git baseline: one new commit pushed to a branch of the same served repository.
    pusher = tmp / "pusher"
    run(["git", "init", "-q", str(pusher)], tmp)
    ident = {**os.environ, "GIT_AUTHOR_NAME": "b", "GIT_AUTHOR_EMAIL": "b@x", "GIT_COMMITTER_NAME": "b",
             "GIT_COMMITTER_EMAIL": "b@x"}
    tree = run(["git", "mktree"], pusher).stdout.strip()
    parent = None
    commits = []
    for n in range(claims):
        args = ["git", "commit-tree", tree, "-m", f"c{n}", *(["-p", parent] if parent else [])]
        parent = run(args, pusher, env=ident).stdout.strip()
        commits.append(parent)

    claim_times, push_times, local_times = [], [], []
    for n in range(claims):  # interleaved, so both see the same machine load
        claim_times.append(timed([*GW, "claim", items[n], "--as", "bench"], a))
        push_times.append(timed(["git", "push", "-q", url, f"{commits[n]}:refs/heads/bench"], pusher))
        local_times.append(timed([*GW, "claim", local_items[n], "--as", "bench"], local))
    landed = run(["git", "rev-parse", STATE], daemon.base / "single.git").stdout.strip()
    assert landed == run(["git", "rev-parse", STATE], a).stdout.strip(), "claims did not land on the remote"
    claim_ms, push_ms = statistics.median(claim_times) * 1e3, statistics.median(push_times) * 1e3
    return [
        ("gw claim ID through git daemon (median)", f"{claim_ms:.0f} ms", f"n={claims}"),
        ("git push of one commit through git daemon (median)", f"{push_ms:.0f} ms", f"n={claims}"),
        ("ratio claim / push (target <= 2x)", f"{claim_ms / push_ms:.2f}x", ""),
        ("gw claim ID, no remote (median, reference)", f"{statistics.median(local_times) * 1e3:.0f} ms",
         f"n={claims}"),
    ]


# --- 2. sync of many offline commands ------------------------------------------------------------


def bench_offline_sync(tmp: Path, daemon: GitDaemon, count: int) -> list[tuple[str, str, str]]:
    rows = []
    for mode in ("fast-forward", "replayed"):
        name = f"offline-{mode}"
        bare_repo(daemon.base, name)
        url = daemon.url(name)
        a = machine(tmp, f"{name}-a", url, publish=True)
        if mode == "replayed":
            b = machine(tmp, f"{name}-b", url)
        started = time.perf_counter()
        make_items(a, count, "offline")
        made = time.perf_counter() - started
        if mode == "replayed":
            gw(b, "new", "moved the remote meanwhile")
            gw(b, "sync")
        took = timed([*GW, "sync"], a)
        remote_tip = run(["git", "rev-parse", STATE], daemon.base / f"{name}.git").stdout.strip()
        assert remote_tip == run(["git", "rev-parse", STATE], a).stdout.strip()
        landed = int(run(["git", "rev-list", "--count", STATE], daemon.base / f"{name}.git").stdout)
        assert landed >= count + 1, landed
        if mode == "fast-forward":
            rows.append((f"{count} offline `new` via Workplane.do (in-process)", f"{made:.1f} s",
                         f"{made / count * 1e3:.1f} ms each"))
        rows.append((f"gw sync of {count} offline commands ({mode})", f"{took:.2f} s",
                     f"{took / count * 1e3:.2f} ms per command"))
    return rows


# --- 3. contention -----------------------------------------------------------------------------------

LOOP = r"""
while :; do
  "$@" claim --next --as "$ME" > /dev/null 2> "$OUT.err"; rc=$?
  echo "$rc" >> "$OUT"
  case "$rc" in 0|3) ;; *) cat "$OUT.err" >> "$OUT.errors" ;; esac
  [ "$rc" -eq 3 ] && exit 0
done
"""


def bench_contention(tmp: Path, daemon: GitDaemon, items: int, clones: int, procs: int) -> tuple[str, str, str]:
    name = f"contend-{clones}x{procs}"
    bare_repo(daemon.base, name)
    url = daemon.url(name)
    seed = machine(tmp, f"{name}-seed", url, publish=True)
    make_items(seed, items, "contended")
    gw(seed, "sync")
    machines = [machine(tmp, f"{name}-m{c}", url) for c in range(clones)]
    outs = []
    started = time.perf_counter()
    running = []
    for c, path in enumerate(machines):
        for p in range(procs):
            out = tmp / f"{name}-{c}-{p}.rc"
            outs.append(out)
            env = {**os.environ, "ME": f"m{c}-{p}", "OUT": str(out)}
            running.append(subprocess.Popen(["bash", "-c", LOOP, "loop", *GW], cwd=path, env=env))
    for proc in running:
        proc.wait(timeout=900)
    elapsed = time.perf_counter() - started
    codes: Counter[str] = Counter()
    errors: Counter[str] = Counter()
    for out in outs:
        codes.update(out.read_text().split())
        failures = out.with_name(out.name + ".errors")
        if failures.exists():
            errors.update(line[:160] for line in failures.read_text().splitlines() if line.strip())
    for line, n in errors.most_common(5):
        print(f"  [{clones}x{procs}] {n} x {line}", file=sys.stderr)
    won = codes.get("0", 0)
    other = {k: v for k, v in codes.items() if k not in ("0", "3")}
    grants = sum(1 for line in run(["git", "log", "--format=%s", STATE], daemon.base / f"{name}.git").stdout.splitlines()
                 if line.startswith("claim "))
    assert won == items == grants, (won, items, grants)
    return (f"{clones * procs} contending processes ({clones} machines x {procs}), {items} items",
            f"{won / elapsed:.2f} claims/s", f"{elapsed:.1f} s; other exits: {other or 'none'}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--claims", type=int, default=25, help="claims (and pushes) timed for the median")
    parser.add_argument("--offline", type=int, default=1000, help="offline commands for the sync benchmark")
    parser.add_argument("--contended-items", type=int, default=120, help="items the 12 processes claim")
    parser.add_argument("--quick", action="store_true", help="small sizes, for checking the script works")
    opts = parser.parse_args()
    if opts.quick:
        opts.claims, opts.offline, opts.contended_items = 5, 50, 24
    with tempfile.TemporaryDirectory(prefix="bench-sync-") as scratch:
        tmp = Path(scratch)
        (tmp / "home").mkdir()
        os.environ.clear()
        os.environ.update(scrubbed_env(tmp / "home"))
        served = tmp / "served"
        served.mkdir()
        rows: list[tuple[str, str, str]] = []
        with GitDaemon(served) as daemon:
            rows += bench_claim_vs_push(tmp, daemon, opts.claims)
            rows += bench_offline_sync(tmp, daemon, opts.offline)
            rows.append(bench_contention(tmp, daemon, opts.contended_items, 12, 1))
            rows.append(bench_contention(tmp, daemon, opts.contended_items, 3, 4))
    width = max(len(r[0]) for r in rows)
    print(f"\n{'measure'.ljust(width)}  {'result':>14}  notes")
    print(f"{'-' * width}  {'-' * 14}  -----")
    for what, result, notes in rows:
        print(f"{what.ljust(width)}  {result:>14}  {notes}")
    print(f"\n(git {run(['git', '--version'], Path('.')).stdout.split()[-1]}, python {sys.version.split()[0]}, "
          f"{os.cpu_count()} cpus; loopback git daemon; no speed is asserted)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
