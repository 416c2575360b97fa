"""The board's pages at 10,000 items, timed by the page itself in Chromium (Debian's ``chromium``).

    python benchmarks/bench_board.py [--items 10000] [--runs 5]

Builds ``--items`` realistic items (``_common.build_state``: a fifth done, a tenth with a dependency)
in one commit, serves them with ``gw serve`` in its own process (as users run it), signs in by cookie
and loads each page in a fresh browser context: the figure is the page's own Navigation Timing
(``performance.getEntriesByType('navigation')[0]``), from the request's start to the end of the load
event, and to the first byte of the answer. ``board_first_after_start``: the first load of ``/``, the
browser started after the server (which builds the read cache from its start); ``board_cold``: a load
of ``/`` right after ``gw cache drop``, so the page itself builds the cache (median of up to 3); the
others are warm medians. Beside each wall figure, ``server_cpu``:
the CPU time (user + system, from ``/proc/PID/stat``, 10 ms ticks) the ``gw serve`` process spent on
that load, since the machine is shared and wall time moves with its load. The floor is the executions
page with no execution: the same frame, script and sign-in with nothing to read. Prints one JSON object.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _common as c  # noqa: E402
from bench_serve import Server  # noqa: E402

TIMING = """() => { const n = performance.getEntriesByType('navigation')[0];
  return {first_byte: n.responseStart - n.startTime, dom: n.domContentLoadedEventEnd - n.startTime,
          load: n.loadEventEnd - n.startTime, bytes: n.transferSize}; }"""


def server_cpu_ms(pid: int) -> float:
    """The process's user + system CPU so far, in milliseconds (Linux; 0.0 elsewhere)."""
    try:
        with open(f"/proc/{pid}/stat") as handle:
            fields = handle.read().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) * 1000 / os.sysconf("SC_CLK_TCK")  # utime, stime


def measure(items: int, runs: int, shape: str = "plain") -> dict[str, Any]:
    from playwright.sync_api import sync_playwright

    repo = c.scratch(f"board-{items}")
    c.make_repo(repo)
    built = c.build_state(repo, items, shape=shape)
    ids = built.get("ids") or []
    out: dict[str, Any] = {"items": items, "shape": shape, "build_s": round(built["total_s"], 1),
                           "load": os.getloadavg()[0]}
    pages = {"board": "/", "board_open_page_2": "/?status=open&page=2", "search": "/?q=item+12",
             "graph_open": "/graph", "leases": "/leases", "executions": "/executions"}
    if ids:
        pages["item"] = f"/items/{ids[len(ids) // 2]}"
    with Server(repo) as server, sync_playwright() as playwright:
        host = server.url.split("//")[1].split(":")[0]
        browser = playwright.chromium.launch(executable_path=shutil.which("chromium"), args=["--no-sandbox"])

        def load(path: str) -> dict[str, float]:
            context = browser.new_context()
            context.add_cookies([{"name": "gw_token", "value": server.token, "domain": host, "path": "/"}])
            page = context.new_page()
            cpu = server_cpu_ms(server.proc.pid)
            page.goto(f"{server.url}{path}", wait_until="load", timeout=600_000)  # the cold one builds the cache
            page.wait_for_function("performance.getEntriesByType('navigation')[0].loadEventEnd > 0")
            timing = page.evaluate(TIMING)
            timing["server_cpu"] = server_cpu_ms(server.proc.pid) - cpu  # the page, its script and stream
            context.close()
            return timing  # type: ignore[no-any-return]

        t0 = time.perf_counter()
        first = load("/")  # gw serve builds the read cache from its start, while the browser starts here
        out["board_first_after_start_ms"] = {key: round(first[key], 1) for key in ("first_byte", "load", "server_cpu")}
        out["board_first_after_start_ms"]["wall"] = round((time.perf_counter() - t0) * 1000, 1)
        colds = []
        for _ in range(min(runs, 3)):  # cold: the cache dropped under the running server, the page builds it
            subprocess.run([sys.executable, "-m", "gitwork", "cache", "drop"], cwd=repo, check=True,
                           capture_output=True)
            colds.append(load("/"))
        out["board_cold_ms"] = {key: round(statistics.median(g[key] for g in colds), 1)
                                for key in ("first_byte", "load", "server_cpu")}
        for name, path in pages.items():
            got = [load(path) for _ in range(runs)]
            out[name] = {key: round(statistics.median(g[key] for g in got), 1)
                         for key in ("first_byte", "dom", "load", "server_cpu")}
            out[name]["kib"] = round(got[0]["bytes"] / 1024, 1)
        browser.close()
    out["load_after"] = os.getloadavg()[0]
    shutil.rmtree(repo, ignore_errors=True)
    return out


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--items", type=int, default=10_000)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--shape", choices=("plain", "rich"), default="plain",
                        help="rich: issue 27's shape (labels, 1-3 dependencies, non-ASCII titles)")
    args = parser.parse_args(argv)
    if not shutil.which("chromium"):
        print("needs Debian's chromium (apt-get install chromium)", file=sys.stderr)
        return 2
    print(json.dumps(measure(args.items, args.runs, args.shape), indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
