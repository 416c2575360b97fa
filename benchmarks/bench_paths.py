"""Cost of a path-checked claim against a plain claim, side by side in one run.

    PYTHONPATH=. python benchmarks/bench_paths.py [--leases 50] [--runs 21]

Data shape: one repository, ``--leases`` items each leased by its own holder with one disjoint path glob
(``pkgN/**``, so ``paths.yaml`` lists them all and none overlaps the claim), plus two open items: one
without paths (the plain claim) and one declaring ``src/api/**`` and ``docs/api.md`` (the path-checked
claim: it reads ``paths.yaml`` and compares its globs with every live lease's). Before each timed run
the state ref is reset with ``git update-ref`` so every run makes the identical change; the two cases
alternate. Timed: ``gw claim ID`` start to exit in a child process (``python -m gitwork``), and the
same claim in-process through ``Workplane.do`` (engine only). Medians, in milliseconds.
Nothing here asserts a speed: a measurement, not a test.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REF = "refs/gitwork/state"


def git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=repo, capture_output=True, text=True, check=True).stdout.strip()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--leases", type=int, default=50)
    parser.add_argument("--runs", type=int, default=21)
    parser.add_argument("--sessions", type=int, default=0, help="also time conflict prediction at N live sessions")
    args = parser.parse_args()
    if args.sessions:
        prediction(args.sessions, max(3, args.runs // 5))
        return
    from gitwork.workplane import Workplane

    repo = Path(tempfile.mkdtemp(prefix="gw-bench-paths-"))
    git(repo, "init", "-q")
    with Workplane(str(repo), agent="bench") as wp:
        wp.do("init")
        for n in range(args.leases):
            item = wp.do("new", title=f"leased {n}", paths=[f"pkg{n}/**"]).result["item"]
            Workplane(str(repo), agent=f"holder{n}").do("claim", item=item, ttl="1h")
        plain = wp.do("new", title="plain").result["item"]
        checked = wp.do("new", title="checked", paths=["src/api/**", "docs/api.md"]).result["item"]
    base = git(repo, "rev-parse", REF)
    env = {**os.environ, "GW_AGENT": "bench"}
    process: dict[str, list[float]] = {"plain": [], "checked": []}
    engine: dict[str, list[float]] = {"plain": [], "checked": []}
    for _ in range(args.runs):
        for name, item in (("plain", plain), ("checked", checked)):
            git(repo, "update-ref", REF, base)
            start = time.perf_counter()
            done = subprocess.run([sys.executable, "-m", "gitwork", "claim", item], cwd=repo, env=env,
                                  capture_output=True)
            process[name].append((time.perf_counter() - start) * 1000)
            assert done.returncode == 0, done.stderr
            git(repo, "update-ref", REF, base)
            with Workplane(str(repo), agent="bench") as wp:
                start = time.perf_counter()
                wp.do("claim", item=item)
                engine[name].append((time.perf_counter() - start) * 1000)
    print(f"live path leases: {args.leases}; runs: {args.runs}; load: {os.getloadavg()[0]:.1f}")
    for label, table in (("gw claim (process)", process), ("Workplane.do claim (in-process)", engine)):
        p, c = statistics.median(table["plain"]), statistics.median(table["checked"])
        print(f"{label}: plain {p:.1f} ms, path-checked {c:.1f} ms, ratio {c / p:.2f}")


def prediction(sessions: int, runs: int) -> None:
    """``claim --next``'s prediction (``conflicts.rank_last``: 50 ready candidates with paths against N live
    session branches) and ``gw conflicts`` (``live_pairs``: one ``git merge-tree`` per pair), N sessions each
    one commit changing two files of a shared tree of 4 * N files (every fifth pair shares a file)."""
    from gitwork.conflicts import live_pairs, rank_last
    from gitwork.workplane import Workplane

    repo = Path(tempfile.mkdtemp(prefix="gw-bench-conflicts-"))
    git(repo, "init", "-q", "-b", "main")
    for n in range(4 * sessions):
        (repo / f"f{n}.txt").write_text(f"{n}\n")
    git(repo, "add", ".")
    git(repo, "-c", "user.name=b", "-c", "user.email=b@b", "commit", "-q", "-m", "base")
    with Workplane(str(repo), agent="bench") as wp:
        wp.do("init")
        for n in range(sessions):
            item = wp.do("new", title=f"session {n}").result["item"]
            fence = Workplane(str(repo), agent=f"holder{n}").do("claim", item=item, ttl="1h").result["fence"]
            shared = (n // 5) * 5  # every five sessions change one common file: conflicting pairs
            files = [f"f{shared}.txt", f"f{2 * sessions + n}.txt"]
            git(repo, "checkout", "-q", "-b", f"session/s{n}", "main")
            for name in files:
                (repo / name).write_text(f"session {n}\n")
            git(repo, "add", *files)
            git(repo, "-c", "user.name=b", "-c", "user.email=b@b", "commit", "-q", "-m",
                f"s{n}\n\nWork-Item: {item}\nFence: {fence}")
        git(repo, "checkout", "-q", "main")
        for n in range(50):
            wp.do("new", title=f"candidate {n}", paths=[f"f{n}.txt"])
    with Workplane(str(repo), agent="bench") as wp:
        ranks, pairs = [], []
        for _ in range(runs):
            start = time.perf_counter()
            last = rank_last(wp)
            ranks.append((time.perf_counter() - start) * 1000)
            start = time.perf_counter()
            found = live_pairs(wp)
            pairs.append((time.perf_counter() - start) * 1000)
    print(f"live sessions: {sessions}; runs: {runs}; load: {os.getloadavg()[0]:.1f}")
    print(f"claim --next prediction (rank_last, 50 candidates): {statistics.median(ranks):.0f} ms, ranked last {len(last)}")
    print(f"gw conflicts (live_pairs, {sessions * (sessions - 1) // 2} merge-trees): {statistics.median(pairs):.0f} ms, "
          f"{len(found['pairs'])} conflicting pairs")


if __name__ == "__main__":
    main()
