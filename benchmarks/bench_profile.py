"""Where the time goes: import time, cProfile and git process counts of the slowest commands.

    python benchmarks/bench_profile.py [--quick] [--items 10000] [--keep]

For ``gw claim ID`` (fast path), ``gw ready`` warm and cold and ``gw list`` warm on a state of
``--items`` items (built like bench_scale.py, reused with ``--keep``), prints:
- the slowest imports (``python -X importtime``) of a ``gw claim`` process;
- the top functions by own time and by cumulative time (cProfile of the whole ``main()``);
- how many processes each command starts (``strace -f -e execve``, when strace is installed).
Profiles are written to $TMPDIR/gw-bench/profile/*.prof for ``python -m pstats``. Numbers from
cProfile are inflated by the profiler; use them for proportions, the other benchmarks for times.
"""

from __future__ import annotations

import argparse
import io
import pstats
import re
import shutil
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _common as c  # noqa: E402
import bench_scale  # noqa: E402


def importtime(repo: Path, argv: list[str], top: int) -> list[tuple[str, float, float]]:
    done = subprocess.run([str(c.venv_python()), "-X", "importtime", "-m", "gitwork", *argv], cwd=repo,
                          env=c.child_env(), capture_output=True, text=True)
    rows = []
    for line in done.stderr.splitlines():
        m = re.match(r"import time:\s+(\d+) \|\s+(\d+) \|(\s*)(\S+)", line)
        if m:
            rows.append((m.group(4), int(m.group(1)) / 1000, int(m.group(2)) / 1000, len(m.group(3))))
    total = sum(r[1] for r in rows)
    top_level = sorted((r for r in rows if r[3] <= 1), key=lambda r: -r[2])[:top]
    own = sorted(rows, key=lambda r: -r[1])[:top]
    print(f"\n### -X importtime of `gw {' '.join(argv)}`: {total:.1f} ms in {len(rows)} imports\n")
    print(c.markdown(("top-level import", "cumulative ms"), [(r[0], r[2]) for r in top_level]))
    print()
    print(c.markdown(("module (own time)", "own ms"), [(r[0], r[1]) for r in own]))
    return [(r[0], r[1], r[2]) for r in rows]


def profile(repo: Path, argv: list[str], name: str, top: int, *, prepare: list[str] | None = None) -> None:
    out = c.BENCH_TMP / "profile" / f"{name}.prof"
    out.parent.mkdir(parents=True, exist_ok=True)
    if prepare:
        subprocess.run(prepare, cwd=repo, check=True)
    code = ("import cProfile, sys\nfrom gitwork.cli.main import main\n"
            f"sys.argv = ['gw', *{argv!r}]\ncProfile.run('main()', {str(out)!r})\n")
    # Profile the imports too: main() imports lazily, and the import of gitwork.cli.main is tiny.
    subprocess.run([str(c.venv_python()), "-c", code], cwd=repo, env=c.child_env(), check=True,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    for key, label in (("tottime", "own time"), ("cumulative", "cumulative")):
        buffer = io.StringIO()
        stats = pstats.Stats(str(out), stream=buffer)
        stats.sort_stats(key).print_stats(top)
        lines = buffer.getvalue().splitlines()
        total = next((ln for ln in lines if "function calls" in ln), "").strip()
        table = [ln for ln in lines if re.match(r"\s*\d", ln) and "function calls" not in ln]
        print(f"\n### cProfile `gw {' '.join(argv)}` ({name}), by {label}: {total}\n")
        print("```")
        print("   ncalls  tottime  percall  cumtime  percall filename:lineno(function)")
        for ln in table:
            print(re.sub(r"/\S*/site-packages/", "", re.sub(r"/root/\.pyenv/versions/[^/]+/lib/python[^/]+/", "", ln)))
        print("```")


def processes(repo: Path, argv: list[str], prepare: list[str] | None = None) -> list[str]:
    if not shutil.which("strace"):
        return []
    if prepare:
        subprocess.run(prepare, cwd=repo, check=True)
    log = c.BENCH_TMP / "profile" / "strace.log"
    subprocess.run(["strace", "-f", "-qq", "-e", "trace=execve", "-o", str(log), str(c.venv_gw()), *argv],
                   cwd=repo, env=c.child_env(), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    calls = []
    for line in log.read_text().splitlines():
        m = re.search(r'execve\("([^"]+)", \[(.*?)\]', line)
        if m and "= 0" in line.rsplit(")", 1)[-1]:
            args = re.findall(r'"((?:[^"\\]|\\.)*)"', m.group(2))
            calls.append(" ".join(a for a in args[:6]))
    return calls


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="1,000 items")
    parser.add_argument("--items", type=int, help="item count (default 10000, quick 1000)")
    parser.add_argument("--top", type=int, default=14, help="rows per table")
    parser.add_argument("--keep", action="store_true", help="reuse a state built by bench_scale.py --keep")
    parser.add_argument("--no-wait", action="store_true", help="accepted for symmetry; profiles do not wait")
    parser.add_argument("--reinstall", action="store_true", help="reinstall gitwork into the bench venv")
    args = parser.parse_args(argv)
    n = args.items or (1000 if args.quick else 10000)
    repo, state = bench_scale.prepared_state(n, args.keep)
    base = str(state["commit"])
    item = str(state["claimable"][len(state["claimable"]) // 2])
    cache_glob = str(c.common_dir(repo) / "gitwork" / "*.marshal")
    drop_cache = ["bash", "-c", f"rm -f {cache_glob}"]
    reset = ["git", "update-ref", c.REF, base]

    print(f"## Profiles at {n} items ({c.machine()['date']})")
    subprocess.run(reset, cwd=repo, check=True)
    importtime(repo, ["claim", item], args.top)
    subprocess.run(reset, cwd=repo, check=True)
    profile(repo, ["claim", item], "claim", args.top, prepare=reset)
    subprocess.run(reset, cwd=repo, check=True)
    subprocess.run([str(c.venv_gw()), "ready"], cwd=repo, env=c.child_env(), stdout=subprocess.DEVNULL, check=True)
    profile(repo, ["ready"], "ready-warm", args.top)
    profile(repo, ["list"], "list-warm", args.top)
    profile(repo, ["ready"], "ready-cold", args.top, prepare=drop_cache)
    importtime(repo, ["ready"], args.top)

    print("\n### Processes started per command (strace -f -e execve)\n")
    rows = []
    for label, cmd, prep in (("gw claim ID", ["claim", item], reset), ("gw ready (warm)", ["ready"], None),
                             ("gw ready (cold)", ["ready"], drop_cache)):
        calls = processes(repo, cmd, prep)
        rows.append((label, len(calls), "; ".join(calls)))
    print(c.markdown(("command", "execve", "what"), rows) if rows[0][1] else "(strace not installed)")
    subprocess.run(reset, cwd=repo, check=True)
    return 0


if __name__ == "__main__":
    c.enter_venv(sys.argv[1:])
    sys.exit(main(sys.argv[1:]))
