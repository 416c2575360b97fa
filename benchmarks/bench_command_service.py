"""The command service at the arbiter: ``claim --next`` over REST through nginx, at 12, 25 and 50 agents.

    python benchmarks/bench_command_service.py [--agents 12,25,50] [--clones 5] [--items-per-agent 2]
                                               [--sync-every 2] [--fcgi-workers 8] [--floor-rounds 200]
                                               [--out FILE]

(also ``python benchmarks/bench_ceiling.py --via rest``, the same run). For each agent count N: the
deployment of docs/deploy.md, "The command service": one fresh bare arbiter with gw's server hooks,
``gw serve`` on it (tests/webserver.py's ``CommandService``), nginx + fcgiwrap + ``git http-backend``
serving git under ``/NAME.git/`` and proxying ``/v1/`` to gw serve (``WebServer(api=...)``); N x
``--items-per-agent`` ready items published from a clone through git; ``--clones`` clones
(``gw init --remote origin``) each running ``gw sync`` every ``--sync-every`` seconds during the run,
as machines following the plane do (0: none); N agent processes, each with a token of its own
(role agent), looping ``POST /v1/commands {"op": "claim", "next": true}`` over one kept-alive
``http.client`` connection through nginx until the answer is 404 "no ready item". Agents start, connect,
and wait for one "go" line, so their start-up is not timed.

Reported per N: grants/s (grants / time to the last grant), p50/p99 of the claim latency (from the
agent's previous grant, or the go, to its next grant) and of single calls, the CPU per grant of the
agents (``wait4``), of gw serve (its /proc stat, children included: the ``git update-ref`` it runs), of
the web server's process group (nginx, fcgiwrap and the git they run for the followers' fetches), and
of the followers; ``granted_once_each`` (every item's claim exactly once in the arbiter's history),
``fences_increase`` (the fences granted, in the state ref's order, strictly increasing), whether
every clone reached the arbiter's tip after a last ``gw sync``. The floors of the same run: one empty
REST request (``GET /v1/whoami``) through nginx and straight to gw serve, a bare ``git update-ref``
compare-and-swap on the arbiter (a process, as gw runs it), and one agent alone (``--agents`` may
include 1). Load average before and after each run. One JSON object on stdout (and in ``--out``).
"""

from __future__ import annotations

import argparse
import http.client
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
sys.path.insert(0, str(Path(__file__).resolve().parent))
import webserver  # noqa: E402
from bench_herd import REF, emit_runs, git, group_cpu, gw, quantile, seed_clones  # noqa: E402
from webserver import CommandService, WebServer  # noqa: E402

CLAIM = json.dumps({"op": "claim", "next": True, "ttl": "1h"})


# --- one agent (a process of its own: python bench_command_service.py --agent PORT TOKEN) ------------


def agent(port: int, token: str) -> None:
    """Loop ``claim --next`` over one kept-alive connection until 404; print every call as JSON."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=600)
    conn.connect()
    headers = {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}
    sys.stdout.write("ready\n")
    sys.stdout.flush()
    sys.stdin.readline()  # the go
    before = resource.getrusage(resource.RUSAGE_SELF)
    calls: list[tuple[float, float, int]] = []
    errors: list[str] = []
    while True:
        t0 = time.monotonic()
        conn.request("POST", "/v1/commands", CLAIM, headers)
        response = conn.getresponse()
        body = response.read()
        calls.append((t0, time.monotonic() - t0, response.status))
        if response.status == 200:
            continue
        if response.status == 404:
            break  # no ready item: done
        if response.status in (409, 503):
            time.sleep(float(response.getheader("Retry-After") or 0) / 10)  # a tenth of the hint: keep it tight
            continue
        errors.append(f"{response.status}: {body[:200].decode(errors='replace')}")
        break
    after = resource.getrusage(resource.RUSAGE_SELF)
    loop_cpu = after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime
    sys.stdout.write(json.dumps({"calls": calls, "errors": errors, "loop_cpu": loop_cpu}) + "\n")


# --- the driver -------------------------------------------------------------------------------------


def proc_cpu(pid: int) -> float:
    """CPU seconds of process ``pid`` and of its reaped children (Linux /proc)."""
    with open(f"/proc/{pid}/stat", "rb") as stat:
        fields = stat.read().rpartition(b")")[2].split()
    return sum(int(f) for f in fields[11:15]) / os.sysconf("SC_CLK_TCK")


def round_trips(port: int, path: str, token: str, rounds: int) -> float:
    """Median seconds of ``GET path`` over one kept-alive connection."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    headers = {"Authorization": f"Bearer {token}"}
    times = []
    for _ in range(rounds):
        t0 = time.perf_counter()
        conn.request("GET", path, headers=headers)
        response = conn.getresponse()
        response.read()
        assert response.status == 200, response.status
        times.append(time.perf_counter() - t0)
    conn.close()
    return statistics.median(times)


def update_ref_floor(repo: Path, rounds: int) -> float:
    """Median seconds of one ``git update-ref REF NEW OLD`` (a compare-and-swap, one process)."""
    tip = git(repo, "rev-parse", REF)
    times = []
    for n in range(rounds):
        t0 = time.perf_counter()
        subprocess.run(["git", "--git-dir", str(repo), "update-ref", "refs/bench/floor", tip,
                        "0" * 40 if n == 0 else tip], check=True, capture_output=True)
        times.append(time.perf_counter() - t0)
    git(repo, "update-ref", "-d", "refs/bench/floor")
    return statistics.median(times)


def claims_in_order(arbiter: Path) -> list[tuple[str, int]]:
    """Every claim on the arbiter's state ref, oldest first: (item, fence)."""
    log = git(arbiter, "log", "--reverse", "--first-parent", "--format=%B%x00", REF)
    found = []
    for message in log.split("\0"):
        command = re.search(r"^Command: (\{.*\})$", message, re.M)
        fence = re.search(r"^Fence: (\d+)$", message, re.M)
        if command and json.loads(command.group(1)).get("op") == "claim":
            found.append((json.loads(command.group(1))["item"], int(fence.group(1)) if fence else -1))
    return found


def run(agents: int, clones_wanted: int, items: int, sync_every: float, fcgi_workers: int,
        floor_rounds: int) -> dict[str, Any]:
    base = Path(tempfile.mkdtemp(prefix="gw-cmdsvc-"))
    os.environ.update({"GIT_AUTHOR_NAME": "bench", "GIT_AUTHOR_EMAIL": "b@x", "GIT_COMMITTER_NAME": "bench",
                       "GIT_COMMITTER_EMAIL": "b@x"})
    try:
        arbiter = webserver.served_repo(base, "arbiter")  # with gw hooks install --server
        git(arbiter, "config", "core.logAllRefUpdates", "always")
        with CommandService(arbiter) as service:
            assert service.address is not None
            with WebServer(base, workers=fcgi_workers, api=service.address) as web:
                url = web.url("arbiter")
                clones = seed_clones(base, url, items, clones_wanted)
                from gitwork.serve.tokens import Tokens
                from gitwork.store import Repository

                tokens = Tokens(Repository.discover(str(arbiter)).gitwork_dir())
                secrets = [tokens.add(f"agent-{k}", "agent")[0] for k in range(agents)]
                probe = tokens.add("probe", "agent")[0]
                assert web.port is not None
                api_port = int(service.address.rsplit(":", 1)[1])
                floors = {
                    "rest_empty_via_nginx_s": round(round_trips(web.port, "/v1/whoami", probe, floor_rounds), 5),
                    "rest_empty_direct_s": round(round_trips(api_port, "/v1/whoami", probe, floor_rounds), 5),
                    "update_ref_cas_s": round(update_ref_floor(arbiter, max(10, floor_rounds // 4)), 5),
                }
                env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
                procs = [subprocess.Popen([sys.executable, __file__, "--agent", str(web.port), secret],
                                          stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env)
                         for secret in secrets]
                for proc in procs:
                    assert proc.stdout is not None and proc.stdout.readline() == "ready\n"
                stop = threading.Event()
                follower_cpu = [0.0]
                follower_syncs = [0]
                lock = threading.Lock()

                def follow(clone: Path) -> None:
                    while not stop.wait(sync_every):
                        proc = subprocess.Popen([sys.executable, "-m", "gitwork", "sync"], cwd=clone, env=env,
                                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
                        _pid, _status, usage = os.wait4(proc.pid, 0)
                        proc.returncode = 0
                        with lock:
                            follower_cpu[0] += usage.ru_utime + usage.ru_stime
                            follower_syncs[0] += 1

                followers = [threading.Thread(target=follow, args=(clone,)) for clone in clones] if sync_every else []
                load_before = os.getloadavg()
                server_before = proc_cpu(service.proc.pid) if service.proc else 0.0
                web_group = web.proc.pid if web.proc is not None else 0
                web_before = group_cpu(web_group)
                for thread in followers:
                    thread.start()
                go = time.monotonic()
                for proc in procs:
                    assert proc.stdin is not None
                    proc.stdin.write("go\n")
                    proc.stdin.flush()
                results, agent_cpu = [], 0.0
                for proc in procs:
                    assert proc.stdout is not None
                    line = proc.stdout.readline()
                    _pid, _status, usage = os.wait4(proc.pid, 0)
                    proc.returncode = 0
                    agent_cpu += usage.ru_utime + usage.ru_stime
                    results.append(json.loads(line))
                wall = time.monotonic() - go
                server_cpu = (proc_cpu(service.proc.pid) if service.proc else 0.0) - server_before
                web_cpu = group_cpu(web_group) - web_before
                stop.set()
                for thread in followers:
                    thread.join()
                load_after = os.getloadavg()
                in_sync = []
                tip = git(arbiter, "rev-parse", REF)
                for clone in clones:
                    gw(clone, "sync")
                    in_sync.append(git(clone, "rev-parse", REF) == tip)
        claims = claims_in_order(arbiter)
        counts: dict[str, int] = {}
        for item, _fence in claims:
            counts[item] = counts.get(item, 0) + 1
        fences = [fence for _item, fence in claims]
        waits, calls, errors, last = [], [], [], 0.0
        loop_cpu = sum(result["loop_cpu"] for result in results)
        for result in results:
            since = go
            errors += result["errors"]
            for t0, seconds, status in result["calls"]:
                calls.append(seconds)
                if status == 200:
                    waits.append(t0 + seconds - since)
                    since = t0 + seconds
                    last = max(last, t0 + seconds - go)
        granted = len(waits)
        per = (lambda cpu: round(cpu / granted, 5) if granted else None)
        return {
            "agents": agents, "clones": clones_wanted, "items": items, "sync_every_s": sync_every,
            "granted": granted, "granted_once_each": len(counts) == items and set(counts.values()) == {1},
            "fences_increase": all(a < b for a, b in zip(fences, fences[1:], strict=False)), "clones_at_tip": all(in_sync),
            "errors": errors, "grants_per_s": round(granted / last, 2) if last else None,
            "claim_p50_s": quantile(waits, 50, 4), "claim_p99_s": quantile(waits, 99, 4), "claim_max_s": round(max(waits), 4) if waits else None,
            "call_p50_s": quantile(calls, 50, 4), "call_p99_s": quantile(calls, 99, 4),
            "calls": len(calls), "wall_s": round(wall, 2),
            # whole processes (their start-up included) and their loops alone (after the go)
            "agents_cpu_per_grant_s": per(agent_cpu), "agents_loop_cpu_per_grant_s": per(loop_cpu), "server_cpu_per_grant_s": per(server_cpu),
            "web_cpu_per_grant_s": per(web_cpu), "followers_cpu_s": round(follower_cpu[0], 2),
            "follower_syncs": follower_syncs[0],
            # gw serve is one Python process (its threads share one interpreter lock): one core at most
            "server_bound_grants_per_s": round(granted / server_cpu, 1) if server_cpu else None,
            "floors": floors,
            "load_before": [round(x, 2) for x in load_before], "load_after": [round(x, 2) for x in load_after],
        }
    finally:
        shutil.rmtree(base, ignore_errors=True)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--agents", default="12,25,50", help="comma-separated herd sizes")
    parser.add_argument("--clones", type=int, default=5)
    parser.add_argument("--items-per-agent", type=int, default=2)
    parser.add_argument("--sync-every", type=float, default=2.0, help="seconds between each clone's gw sync (0: none)")
    parser.add_argument("--fcgi-workers", type=int, default=8)
    parser.add_argument("--floor-rounds", type=int, default=200)
    parser.add_argument("--out", help="also write the JSON here")
    parser.add_argument("--agent", nargs=2, metavar=("PORT", "TOKEN"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.agent:
        agent(int(args.agent[0]), args.agent[1])
        return
    reason = webserver.missing()
    if reason:
        raise SystemExit(reason)
    runs = []
    for agents in [int(n) for n in args.agents.split(",")]:
        runs.append(run(agents, args.clones, agents * args.items_per_agent, args.sync_every, args.fcgi_workers,
                        args.floor_rounds))
        print(json.dumps(runs[-1]), file=sys.stderr)
    emit_runs({"bench": "command-service", "transport": "nginx", "via": "rest"}, runs, args.out)


if __name__ == "__main__":
    main()
