"""``claim --next`` under contention through a real ``git daemon`` or smart-HTTP arbiter.

    python benchmarks/bench_herd.py [--procs 12] [--clones 3] [--items 60] [--transport daemon|http|nginx]
                                    [--arbiter cas|batch]

One bare arbiter served by ``git daemon`` (tests/daemon.py), by ``git http-backend`` behind a
local Python HTTP server (tests/httpd.py), or by the deployment of docs/deploy.md: nginx + fcgiwrap
+ ``git http-backend`` with ``gw hooks install --server`` on the arbiter (tests/webserver.py; its
``--fcgi-workers`` children serve requests at once). ``--clones`` machines that ran
``gw init --remote origin``, and ``--procs`` processes spread over them, each looping
``gw claim --next`` until gw answers "no ready item" (exit 3), retrying on exit 75. Per granted
claim: the wall time of the call that got it, and the time since that worker's previous grant (so a
75 and its retry count against the claim). Afterwards the arbiter's history is checked: every item
granted exactly once. Prints one JSON object (median and worst of both, how many pushes moved the
arbiter's ref, and the CPU time of every process the herd started, servers included) on stdout.

``--arbiter batch``: the batch arbiter (docs/deploy.md): the server hooks are installed, the arbiter's
git config says ``gitwork.arbiter batch`` and every clone pushes its commands to the arbiter's inbox
(``GW_ARBITER=batch``); "pushes" then counts the batches that moved the state ref.

Runs ``python -m gitwork`` from the interpreter running this script (the worktree's venv), with
bytecode written and read as a normal install has it (this machine sets PYTHONDONTWRITEBYTECODE).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))
import webserver  # noqa: E402
from daemon import GitDaemon, bare_repo  # noqa: E402
from httpd import GitHTTPServer  # noqa: E402
from httpd import served_repo as httpd_repo  # noqa: E402
from webserver import WebServer  # noqa: E402

REF = "refs/gitwork/state"
TRANSPORTS = ("daemon", "http", "nginx")


def gw(repo: Path, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    base = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    return subprocess.run([sys.executable, "-m", "gitwork", *args], cwd=repo, capture_output=True, text=True,
                          env={**base, **(env or {})})


def gw_timed(repo: Path, *args: str, env: dict[str, str] | None = None) -> tuple[int, str, float]:
    """``gw *args``: its exit code, stderr, and the CPU seconds it and the processes it waited for
    used (``wait4``): the client's share of a call (git push and fetch included; the server's not)."""
    base = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    with tempfile.TemporaryFile() as err:
        proc = subprocess.Popen([sys.executable, "-m", "gitwork", *args], cwd=repo, stdout=subprocess.DEVNULL,
                                stderr=err, env={**base, **(env or {})})
        _pid, status, usage = os.wait4(proc.pid, 0)
        proc.returncode = os.waitstatus_to_exitcode(status)  # reaped here: Popen must not wait again
        err.seek(0)
        return proc.returncode, err.read().decode(errors="replace"), usage.ru_utime + usage.ru_stime


def git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=repo, capture_output=True, text=True, check=True).stdout.strip()


def machine(base: Path, name: str, url: str) -> Path:
    path = base / name
    path.mkdir()
    git(path, "init", "-q")
    git(path, "remote", "add", "origin", url)
    done = gw(path, "init", "--remote", "origin")
    assert done.returncode == 0, done.stderr
    return path


def emit_runs(head: dict[str, Any], runs: list[dict[str, Any]], out: str | None) -> None:
    """Print a multi-run bench's JSON (``head``, the date, the cores, ``runs``), and write it to ``out``."""
    import datetime as dt

    result = {**head, "date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
              "cpus": os.cpu_count(), "runs": runs}
    text = json.dumps(result, indent=2)
    print(text)
    if out:
        Path(out).write_text(text + "\n", encoding="utf-8")


def quantile(values: list[float], q: int, digits: int = 3) -> float | None:
    """The q-th percentile, rounded to ``digits`` (inclusive method: a p99 of few values is their top
    end, not beyond it); one rule for every bench that reports percentiles of its calls."""
    if not values:
        return None
    if len(values) == 1:
        return round(values[0], digits)
    return round(statistics.quantiles(values, n=100, method="inclusive")[q - 1], digits)


def seed_clones(base: Path, url: str, items: int, clones_wanted: int) -> list[Path]:
    """The benches' world: ``items`` ready items made in the first clone and synced to the arbiter at
    ``url``, then ``clones_wanted`` clones in all, each synced."""
    first = machine(base, "m0", url)
    from gitwork.workplane import Workplane

    with Workplane(str(first), agent="admin") as wp:
        for n in range(items):
            wp.do("new", title=f"item {n}", priority=n % 3)
    assert gw(first, "sync").returncode == 0
    clones = [first] + [machine(base, f"m{k}", url) for k in range(1, clones_wanted)]
    for clone in clones[1:]:
        assert gw(clone, "sync").returncode == 0
    return clones


def group_cpu(group: int) -> float:
    """CPU seconds (user + system, its reaped children's included) of the live processes of process
    group ``group``: the server's own share of a run (git daemon reaps each receive-pack and hook it
    forks; fcgiwrap each git http-backend), apart from the clients' (Linux: read from /proc)."""
    ticks = 0
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as stat:
                fields = stat.read().rpartition(b")")[2].split()
        except OSError:
            continue
        if int(fields[2]) == group:
            ticks += sum(int(f) for f in fields[11:15])
    return ticks / os.sysconf("SC_CLK_TCK")


def serve(transport: str, base: Path, fcgi_workers: int = 8, server_hook: bool | None = None,
          arbiter_mode: str = "cas") -> tuple[Path, GitDaemon | GitHTTPServer | WebServer]:
    """The bare arbiter and its (not yet started) server: ``git daemon``, the Python smart-HTTP server, or
    the deployment of docs/deploy.md (nginx + fcgiwrap + git http-backend). ``server_hook``: install
    gitwork's pre-receive hook (``gw hooks install --server``); by default only for nginx, the
    deployment, so the daemon and http figures stay comparable with the earlier runs (which had none)."""
    if server_hook is None:
        server_hook = transport == "nginx" or arbiter_mode == "batch"
    server: GitDaemon | GitHTTPServer | WebServer
    if transport == "daemon":
        arbiter, server = bare_repo(base, "arbiter"), GitDaemon(base)
    elif transport == "http":
        arbiter, server = httpd_repo(base, "arbiter"), GitHTTPServer(base)
    else:
        reason = webserver.missing()
        if reason:
            raise SystemExit(f"--transport nginx: {reason}")
        arbiter = webserver.served_repo(base, "arbiter", server_hook=False)
        server = WebServer(base, workers=fcgi_workers)
    if server_hook:
        subprocess.run([sys.executable, "-m", "gitwork", "hooks", "install", "--server", str(arbiter)],
                       check=True, capture_output=True)
    if arbiter_mode == "batch":
        git(arbiter, "config", "gitwork.arbiter", "batch")
    return arbiter, server


def herd(transport: str, procs: int, clones_wanted: int, items: int, fcgi_workers: int = 8,
         server_hook: bool | None = None,
         arbiter_mode: str = "cas") -> tuple[dict, list[tuple[int, float, float, int]], list[float]]:
    """One herd run: its summary, every call as (worker, start s, seconds, exit code), and per grant the
    time since that worker's previous grant (a claim's latency as the agent sees it, 75s included)."""
    base = Path(tempfile.mkdtemp(prefix="gw-herd-"))
    os.environ.update({"GIT_AUTHOR_NAME": "bench", "GIT_AUTHOR_EMAIL": "b@x", "GIT_COMMITTER_NAME": "bench",
                       "GIT_COMMITTER_EMAIL": "b@x"})
    try:
        arbiter, server = serve(transport, base, fcgi_workers, server_hook, arbiter_mode)
        git(arbiter, "config", "core.logAllRefUpdates", "always")  # one reflog line per push that moved it
        with server:
            url = server.url("arbiter")
            clones = seed_clones(base, url, items, clones_wanted)
            grants: list[tuple[float, float]] = []
            per_worker = [0] * procs
            last_grant = [0.0]
            tail: list[float] = []  # per worker: from its last grant (or start) to "no ready item"
            errors: list[str] = []
            calls_log: list[tuple[int, float, float, int]] = []
            client_cpu = [0.0]
            lock = threading.Lock()

            def worker(k: int) -> None:
                repo = clones[k % len(clones)]
                since = time.monotonic()
                while True:
                    t0 = time.monotonic()
                    code, stderr, used = gw_timed(repo, "claim", "--next", "--ttl", "1h", "--as", f"agent-{k}",
                                                  env=mode_env)
                    t1 = time.monotonic()
                    with lock:
                        calls_log.append((k, round(t0 - started, 3), round(t1 - t0, 3), code))
                        client_cpu[0] += used
                    if code == 0:
                        with lock:
                            grants.append((t1 - t0, t1 - since))
                            per_worker[k] += 1
                            last_grant[0] = max(last_grant[0], t1 - started)
                        since = t1
                    elif code == 3:
                        with lock:
                            tail.append(t1 - since)
                        return
                    elif code != 75:
                        with lock:
                            errors.append(f"agent-{k}: exit {code}: {stderr.strip()}")
                        return

            mode_env = {"GW_ARBITER": arbiter_mode}
            moves_before = len(git(arbiter, "reflog", "show", "--format=%H", REF).split())
            group = server.proc.pid if server.proc is not None else 0
            server_before = group_cpu(group)
            cpu_before = resource.getrusage(resource.RUSAGE_CHILDREN)
            started = time.monotonic()
            threads = [threading.Thread(target=worker, args=(k,)) for k in range(procs)]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join()
            wall = time.monotonic() - started
            server_cpu = group_cpu(group) - server_before
        cpu_after = resource.getrusage(resource.RUSAGE_CHILDREN)  # the server is stopped (and reaped) now
        cpu = (cpu_after.ru_utime - cpu_before.ru_utime) + (cpu_after.ru_stime - cpu_before.ru_stime)
        pushes = len(git(arbiter, "reflog", "show", "--format=%H", REF).split()) - moves_before
        log = git(arbiter, "log", "--format=%B", REF)
        claimed = re.findall(r'Command: \{.*?"item": "(w-[0-9a-f]+)".*?"op": "claim"', log)
        counts = {i: claimed.count(i) for i in set(claimed)}
        calls = [g[0] for g in grants]
        waits = [g[1] for g in grants]
        summary = {
            "transport": transport, "arbiter": arbiter_mode, "server_hook": (arbiter / "hooks" / "pre-receive").exists(),
            "procs": procs, "clones": clones_wanted, "items": items,
            "granted": len(grants), "pushes": pushes, "cpu_s": round(cpu, 2),
            # The clients' share (every gw call and the git it ran, by wait4) and the server's (its process
            # group: right for git daemon, which reaps what it forks; fcgiwrap reaps nothing it can count).
            "client_cpu_s": round(client_cpu[0], 2), "server_cpu_s": round(server_cpu, 2),
            "granted_once_each": len(counts) == items and set(counts.values()) == {1},
            "errors": errors, "wall_s": round(wall, 2),
            "call_median_s": round(statistics.median(calls), 3) if calls else None,
            "call_worst_s": round(max(calls), 3) if calls else None,
            "claim_median_s": round(statistics.median(waits), 3) if waits else None,
            "claim_worst_s": round(max(waits), 3) if waits else None,
            "grants_per_worker": per_worker, "last_grant_s": round(last_grant[0], 2),
            "longest_wait_ending_empty_s": round(max(tail), 2) if tail else None,
            # every call, the last "no ready item" and the 75s included: what a shell loop waits for at once
            "any_call_worst_s": round(max(c[2] for c in calls_log), 3) if calls_log else None,
        }
        return summary, calls_log, waits
    finally:
        shutil.rmtree(base, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--procs", type=int, default=12)
    parser.add_argument("--clones", type=int, default=3)
    parser.add_argument("--items", type=int, default=60)
    parser.add_argument("--transport", choices=TRANSPORTS, default="daemon")
    parser.add_argument("--fcgi-workers", type=int, default=8, help="--transport nginx: fcgiwrap's children")
    parser.add_argument("--server-hook", action=argparse.BooleanOptionalAction, default=None,
                        help="install gw's server hook on the arbiter (default: only with --transport nginx)")
    parser.add_argument("--arbiter", choices=("cas", "batch"), default="cas",
                        help="cas: each clone pushes state commits; batch: the arbiter's inbox (docs/deploy.md)")
    parser.add_argument("--calls", help="write every call as [worker, start s, seconds, exit code] to this JSON file")
    args = parser.parse_args()
    summary, calls_log, _waits = herd(args.transport, args.procs, args.clones, args.items, args.fcgi_workers,
                                         args.server_hook, args.arbiter)
    print(json.dumps(summary, indent=2))
    if args.calls:
        with open(args.calls, "w", encoding="utf-8") as handle:
            json.dump(calls_log, handle)


if __name__ == "__main__":
    main()
