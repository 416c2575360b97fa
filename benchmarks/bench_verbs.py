"""Start-up of EVERY verb of ``gw``, side by side with ``python -c pass`` and ``gw show ID`` (issue 25, point 1).

    PYTHONPATH=. python benchmarks/bench_verbs.py [--runs N] [--typer]

The verb list is the fast path's table (``gitwork/cli/fast_table.py``, generated from the app), so a
new verb is measured without editing this file. Each verb runs as ``python -m gitwork VERB ...`` in a
small repository (20 items, one held), with its required arguments filled in: an unknown item id
(``w-ffff``), ``1`` for a number, ``x`` for a required option. So most mutations stop at their first
refusal (not found, exit 3): what is timed is the start, the parse and the opening of the work plane,
the part every verb pays; reads run in full. ``--typer`` also times each verb through typer
(``gitwork.cli.app.run_app``, the path every verb but 13 took before), for the comparison.
Skipped, with the reason printed: the verbs that run until stopped or that start other programs
(``demo``, ``coordinate``, ``mcp``, ``serve``, ``step wait``, ``thread --follow`` is not used).
Each verb runs alternately with ``gw show ID`` (the load of a shared machine drifts; a pair sees the
same load) and its ratio is of the two medians of ``--runs`` (default 7) wall-clock runs, after one
warm-up. Nothing here asserts a speed.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from gitwork.cli.fast_table import GROUPS, TYPER_ONLY, VERBS  # noqa: E402

SKIP = {"demo": "runs a whole demo", "coordinate": "runs until stopped", "mcp": "serves MCP on stdin until EOF",
        "step wait": "waits for a response", "hooks install": "writes hooks into the repository"}
MISSING = "w-ffff"


def argv_for(words: list[str], row: tuple) -> list[str]:  # type: ignore[type-arg]
    """The verb with its required arguments filled in (see the module's docstring)."""
    _target, positionals, options, _defaults, _envvars, required = row
    args = [*words]
    for name, needed, _many, kind in positionals:
        if needed:
            args.append("1" if kind == "int" else MISSING if name in ("item", "items") else "x")
    spelled = {keyword: spelling for spelling, (keyword, _kind) in reversed(list(options.items()))}
    for keyword in required:
        args += [spelled[keyword], "x"]
    return args


def _once(argv: list[str], cwd: Path, env: dict[str, str]) -> float:
    start = time.perf_counter()
    subprocess.run(argv, cwd=cwd, env=env, capture_output=True, stdin=subprocess.DEVNULL, timeout=60)
    return (time.perf_counter() - start) * 1000


def timed(argv: list[str], cwd: Path, env: dict[str, str], runs: int) -> tuple[float, int]:
    """Median wall-clock milliseconds of ``runs`` runs (after one warm-up), and the exit code."""
    done = subprocess.run(argv, cwd=cwd, env=env, capture_output=True, stdin=subprocess.DEVNULL, timeout=60)
    return statistics.median(_once(argv, cwd, env) for _ in range(runs)), done.returncode


def paired(argv: list[str], beside: list[str], cwd: Path, env: dict[str, str], runs: int) -> tuple[float, float, int]:
    """``argv`` and ``beside`` run alternately (a shared machine's load drifts; pairs see the same load):
    the median of each, and ``argv``'s exit code."""
    done = subprocess.run(argv, cwd=cwd, env=env, capture_output=True, stdin=subprocess.DEVNULL, timeout=60)
    mine, other = [], []
    for _ in range(runs):
        mine.append(_once(argv, cwd, env))
        other.append(_once(beside, cwd, env))
    return statistics.median(mine), statistics.median(other), done.returncode


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=7)
    parser.add_argument("--typer", action="store_true", help="also time every verb through typer")
    options = parser.parse_args()
    py = sys.executable
    gw = [py, "-m", "gitwork"]
    typer_gw = [py, "-c", "import sys; from gitwork.cli.app import run_app; sys.exit(run_app(sys.argv[1:]))"]
    env = {**os.environ, "PYTHONPATH": str(ROOT), "GW_AGENT": "bench", "GW_NO_AUTO_GC": "1", "NO_COLOR": "1"}
    with tempfile.TemporaryDirectory() as tmp:
        repo = Path(tmp) / "repo"
        subprocess.run(["git", "init", "-q", str(repo)], check=True)
        subprocess.run([*gw, "init"], cwd=repo, env=env, check=True, capture_output=True)
        items = [subprocess.run([*gw, "new", f"item {n}", "-c", "works"], cwd=repo, env=env, check=True,
                                capture_output=True, text=True).stdout.strip() for n in range(20)]
        subprocess.run([*gw, "claim", items[0]], cwd=repo, env=env, check=True, capture_output=True)
        rows: list[tuple[str, float, float, float | None, int]] = []
        show_argv = [*gw, "show", items[0]]
        floor, show, _ = paired([py, "-c", "pass"], show_argv, repo, env, options.runs)
        help_ms, help_show, _ = paired([*gw, "--help"], show_argv, repo, env, options.runs)
        typer_help = timed([*typer_gw, "--help"], repo, env, options.runs)[0] if options.typer else None
        verbs = [([verb], row) for verb, row in VERBS.items()] + [
            ([*group.split(), verb], row) for group, grouped in GROUPS.items() for verb, row in grouped.items()]
        for words, row in verbs:
            name = " ".join(words)
            if name in SKIP:
                print(f"skipped {name}: {SKIP[name]}", file=sys.stderr)
                continue
            argv = argv_for(words, row)
            ms, beside, code = paired([*gw, *argv], show_argv, repo, env, options.runs)
            slow = timed([*typer_gw, *argv], repo, env, options.runs)[0] if options.typer else None
            rows.append((" ".join(argv), ms, ms / beside, slow, code))
    print(f"# gw start-up per verb ({time.strftime('%Y-%m-%d %H:%M')}, median of {options.runs}, "
          f"load {os.getloadavg()[0]:.1f})\n")
    print(f"| command | ms | x `gw show` (run alternately with it) | {'typer ms | ' if options.typer else ''}exit |")
    print(f"|---|---:|---:|{'---:|' if options.typer else ''}---:|")
    print(f"| `python -c pass` | {floor:.0f} | {floor / show:.2f} | {'| ' if options.typer else ''}0 |")
    print(f"| `gw show ID` | {show:.0f} | 1.00 | {'| ' if options.typer else ''}0 |")
    print(f"| `gw --help` | {help_ms:.0f} | {help_ms / help_show:.2f} | "
          f"{f'{typer_help:.0f} | ' if typer_help is not None else ''}0 |")
    for argv, ms, ratio, slow, code in rows:
        print(f"| `gw {argv}` | {ms:.0f} | {ratio:.2f} | {f'{slow:.0f} | ' if slow is not None else ''}{code} |")
    worst = max(rows, key=lambda r: r[2])
    over = [r[0] for r in rows if r[2] > 1.5]
    print(f"\nworst ratio: `gw {worst[0]}` {worst[2]:.2f}x `gw show`; over 1.5x: {over or 'none'}; "
          f"`gw --help` {help_ms / help_show:.2f}x; typer-only commands (not measured): {sorted(TYPER_ONLY)}")
    results = ROOT / "benchmarks" / "results"
    results.mkdir(exist_ok=True)
    (results / "bench_verbs.json").write_text(json.dumps(
        {"floor_ms": floor, "show_ms": show, "help_ms": help_ms, "typer_help_ms": typer_help,
         "verbs": [{"argv": a, "ms": m, "x_show": r, "typer_ms": t, "exit": c} for a, m, r, t, c in rows]},
        indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
