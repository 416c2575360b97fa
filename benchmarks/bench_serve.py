"""``gw serve`` against ``gw``: claim/renew/release over HTTP (one keep-alive client) beside the same
commands as ``gw`` processes; ``GET /v1/ready`` at 10,000 and 100,000 items (cold: the first request
builds the read cache; warm); the latency from a ``gw msg`` process's exit to the event on
``/v1/events``; the board's first render at 10,000 items in Chromium (Debian's ``chromium``).

    python benchmarks/bench_serve.py [--sizes 10000,100000] [--rounds 20] [--no-browser]

The server runs as ``gw serve --bind 127.0.0.1:0`` in its own process (as users run it), started from
the interpreter running this script. Figures are medians in milliseconds; prints one JSON object.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import httpx  # noqa: E402

import _common as c  # noqa: E402


def median_ms(times: list[float]) -> float:
    return round(statistics.median(times) * 1000, 1)


class Server:
    """``gw serve`` on a free port over ``repo``, with a token; stopped on exit."""

    def __init__(self, repo: Path) -> None:
        gw = [sys.executable, "-m", "gitwork"]
        self.token = subprocess.run([*gw, "serve", "token", "add", "bench", "--role", "admin"], cwd=repo,
                                    capture_output=True, text=True, check=True).stdout.strip()
        self.proc = subprocess.Popen([*gw, "serve", "--bind", "127.0.0.1:0", "--json"], cwd=repo,
                                     stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        assert self.proc.stdout is not None
        lines = []
        for line in self.proc.stdout:
            lines.append(line)
            if line.startswith("}"):
                break
        self.url = json.loads("".join(lines))["url"]
        self.headers = {"Authorization": f"Bearer {self.token}"}

    def client(self) -> httpx.Client:
        return httpx.Client(base_url=self.url, headers=self.headers, timeout=600)

    def close(self) -> None:
        self.proc.terminate()
        self.proc.wait(20)

    def __enter__(self) -> Server:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def lease_round_trips(rounds: int) -> dict[str, Any]:
    """claim, renew, release of one item, ``rounds`` times: over HTTP and as ``gw`` processes."""
    repo = c.scratch("serve-lease")
    c.make_repo(repo)
    c.build_state(repo, 100, realistic=False)
    item = subprocess.run([sys.executable, "-m", "gitwork", "ready", "-n", "1", "--json"], cwd=repo,
                          capture_output=True, text=True, check=True)
    item_id = json.loads(item.stdout)[0]["item"]
    out: dict[str, Any] = {}
    with Server(repo) as server, server.client() as http:
        times: dict[str, list[float]] = {"claim": [], "renew": [], "release": []}
        for _ in range(rounds):
            for op in times:
                t0 = time.perf_counter()
                answer = http.post("/v1/commands", json={"op": op, "item": item_id})
                times[op].append(time.perf_counter() - t0)
                assert answer.status_code == 200, answer.text
        out["http"] = {op: median_ms(ts) for op, ts in times.items()}
    times = {"claim": [], "renew": [], "release": []}
    env = c.child_env(GW_AGENT="bench")
    for _ in range(rounds):
        for op in times:
            t0 = time.perf_counter()
            subprocess.run([sys.executable, "-m", "gitwork", op, item_id], cwd=repo, env=env, check=True,
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            times[op].append(time.perf_counter() - t0)
    out["gw"] = {op: median_ms(ts) for op, ts in times.items()}
    shutil.rmtree(repo, ignore_errors=True)
    return out


def ready_at(n: int, runs: int, browser: bool) -> dict[str, Any]:
    repo = c.scratch(f"serve-ready-{n}")
    c.make_repo(repo)
    built = c.build_state(repo, n)
    out: dict[str, Any] = {"items": n, "build_s": round(built["total_s"], 1)}
    with Server(repo) as server, server.client() as http:
        t0 = time.perf_counter()
        first = http.get("/v1/ready", params={"limit": 20})
        out["ready20_cold_ms"] = round((time.perf_counter() - t0) * 1000, 1)  # builds the read cache
        assert first.status_code == 200, first.text
        for key, params in (("ready20_warm_ms", {"limit": 20}), ("ready_all_warm_ms", {})):
            times = []
            for _ in range(runs):
                t0 = time.perf_counter()
                assert http.get("/v1/ready", params=params).status_code == 200
                times.append(time.perf_counter() - t0)
            out[key] = median_ms(times)
        out["ready_all_count"] = len(http.get("/v1/ready").json())
        times = []
        for _ in range(runs):
            t0 = time.perf_counter()
            subprocess.run([sys.executable, "-m", "gitwork", "ready", "-n", "20", "--json"], cwd=repo, check=True,
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            times.append(time.perf_counter() - t0)
        out["gw_ready20_ms"] = median_ms(times)
        if browser and shutil.which("chromium"):
            out["board_first_render_ms"] = board_render(server)
    shutil.rmtree(repo, ignore_errors=True)
    return out


def board_render(server: Server) -> float:
    """The board at ``/`` until its load event, in Chromium, signed in by cookie (best of 3)."""
    from playwright.sync_api import sync_playwright

    host = server.url.split("//")[1].split(":")[0]
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=shutil.which("chromium"), args=["--no-sandbox"])
        best = float("inf")
        for _ in range(3):
            context = browser.new_context()
            context.add_cookies([{"name": "gw_token", "value": server.token, "domain": host, "path": "/"}])
            page = context.new_page()
            t0 = time.perf_counter()
            page.goto(f"{server.url}/", wait_until="load")
            page.wait_for_selector("section.column")
            best = min(best, time.perf_counter() - t0)
            context.close()
        browser.close()
    return round(best * 1000, 1)


def event_latency(rounds: int) -> dict[str, Any]:
    """From a ``gw msg`` process's exit (its commit is on the ref) to the ``state`` event."""
    repo = c.scratch("serve-sse")
    c.make_repo(repo)
    c.build_state(repo, 10, realistic=False)
    item_id = json.loads(subprocess.run([sys.executable, "-m", "gitwork", "ready", "-n", "1", "--json"], cwd=repo,
                                        capture_output=True, text=True, check=True).stdout)[0]["item"]
    arrivals: list[float] = []
    latencies: list[float] = []
    with Server(repo) as server, server.client() as http:
        opened = threading.Event()

        def listen() -> None:
            with http.stream("GET", "/v1/events") as stream:
                for line in stream.iter_lines():
                    if line.startswith("event: hello"):
                        opened.set()
                    elif line.startswith("event: state"):
                        arrivals.append(time.perf_counter())
                        if len(arrivals) >= rounds:
                            return

        thread = threading.Thread(target=listen, daemon=True)
        thread.start()
        opened.wait(30)
        env = c.child_env(GW_AGENT="bench")
        for n in range(rounds):
            seen = len(arrivals)
            subprocess.run([sys.executable, "-m", "gitwork", "msg", item_id, f"message {n}"], cwd=repo, env=env,
                           check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            exited = time.perf_counter()
            deadline = exited + 10
            while len(arrivals) == seen and time.perf_counter() < deadline:
                time.sleep(0.001)
            latencies.append(max(arrivals[-1] - exited, 0.0) if len(arrivals) > seen else float("nan"))
            time.sleep(0.05)
        thread.join(5)
    shutil.rmtree(repo, ignore_errors=True)
    return {"median_ms": median_ms(latencies), "max_ms": round(max(latencies) * 1000, 1), "rounds": rounds}


def history_walk(commands: int, runs: int) -> dict[str, Any]:
    """The state ref's whole log (what ``GET /v1/log`` reads) in a warm process: gitwork's own reader
    (loose objects inflated in Python, packs through ``cat-file --batch``) beside pygit2 doing the same
    walk and message parsing, loose and after ``git gc``. Decides whether the server should use pygit2."""
    try:
        import pygit2
    except ImportError:
        return {"skipped": "pygit2 is not installed (pip install pygit2 to measure it)"}
    from gitwork.statecommit import parse_command_from_message, split_author, trailers_of
    from gitwork.workplane import Workplane

    repo = c.scratch("serve-history")
    c.make_repo(repo)
    with Workplane(str(repo), agent="bench") as wp:
        wp.do("init")
        item = wp.do("new", title="walked").result["item"]
        for _ in range(commands // 3):
            for op in ("claim", "renew", "release"):
                wp.do(op, item=item)
    out: dict[str, Any] = {"commits": commands // 3 * 3 + 2}

    def ours() -> int:
        with Workplane(str(repo)) as wp:
            return len(list(wp.log()))

    def theirs() -> int:
        git_repo = pygit2.Repository(str(repo))
        commit = git_repo.revparse_single("refs/gitwork/state")
        count = 0
        while commit is not None:
            message = commit.message
            split_author(f"{commit.author.name} <{commit.author.email}> {commit.author.time} +0000")
            parse_command_from_message(message)
            trailers_of(message)
            count += 1
            commit = commit.parents[0] if commit.parents else None
        return count

    for layout in ("loose", "packed"):
        if layout == "packed":
            c.git(repo, "gc", "-q")
        for name, walk in (("gitwork", ours), ("pygit2", theirs)):
            walk()  # warm: the server's case
            times = []
            for _ in range(runs):
                t0 = time.perf_counter()
                walk()
                times.append(time.perf_counter() - t0)
            out[f"{layout}_{name}_ms"] = median_ms(times)
    shutil.rmtree(repo, ignore_errors=True)
    return out


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--sizes", default="10000,100000")
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--no-browser", action="store_true")
    parser.add_argument("--history", type=int, default=600, help="commands in the log walked (0: skip)")
    args = parser.parse_args()
    os.environ.setdefault("TMPDIR", tempfile.gettempdir())
    result: dict[str, Any] = {"machine": c.machine(), "lease_round_trips": lease_round_trips(args.rounds),
                              "event_latency": event_latency(args.rounds), "ready": []}
    if args.history:
        result["history_walk"] = history_walk(args.history, args.runs)
    for n in (int(s) for s in args.sizes.split(",") if s):
        result["ready"].append(ready_at(n, args.runs, browser=not args.no_browser and n <= 10_000))
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
