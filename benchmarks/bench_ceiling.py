"""The arbiter's ceiling: grants per second and claim latency as the herd grows, per transport.

    python benchmarks/bench_ceiling.py [--transport nginx|daemon|http] [--agents 12,25,50] [--clones 5]
                                       [--items-per-agent 4] [--fcgi-workers 8] [--[no-]server-hook]
                                       [--arbiter cas|batch] [--via git|rest] [--out FILE]

For each agent count N: one fresh arbiter (for ``nginx``: the deployment of docs/deploy.md, nginx +
fcgiwrap + ``git http-backend`` with the server hook; for ``daemon``: ``git daemon``, with the hook
only given ``--server-hook``, which a like-for-like comparison wants), ``--clones``
machines, N agent processes spread over them, each looping ``gw claim --next`` (retrying on exit 75)
over N x ``--items-per-agent`` ready items until none is left — the herd of benchmarks/bench_herd.py.
``--arbiter batch`` runs it against the batch arbiter (docs/deploy.md): requests in the arbiter's inbox,
applied in batches by its post-receive hook (the server hooks are then always installed).

Reported per N: grants/s (items granted / time to the last grant), p50 and p99 of the claim latency
(from an agent's previous grant, or its start, to its next grant: what an agent waits for a piece of
work, lost races and retries included), p50/p99 of single calls, how many calls lost a race (75),
and whether every item was granted exactly once on the arbiter. One JSON object on stdout (and in
``--out``); the load average before and after each run is recorded with it, because the figures
mean nothing without it.

``--via rest``: the command service at the arbiter instead (docs/deploy.md): every agent a process
looping ``POST /v1/commands`` through nginx to ``gw serve`` on the arbiter's repository;
benchmarks/bench_command_service.py runs it (its own JSON; ``--transport``/``--arbiter`` do not apply).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_herd import TRANSPORTS, emit_runs, herd, quantile  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--transport", choices=TRANSPORTS, default="nginx")
    parser.add_argument("--agents", default="12,25,50", help="comma-separated herd sizes")
    parser.add_argument("--clones", type=int, default=5)
    parser.add_argument("--items-per-agent", type=int, default=4)
    parser.add_argument("--fcgi-workers", type=int, default=8, help="--transport nginx: fcgiwrap's children")
    parser.add_argument("--server-hook", action=argparse.BooleanOptionalAction, default=None,
                        help="install gw's server hook on the arbiter (default: only with --transport nginx)")
    parser.add_argument("--arbiter", choices=("cas", "batch"), default="cas",
                        help="cas: each clone pushes state commits; batch: the arbiter's inbox (docs/deploy.md)")
    parser.add_argument("--via", choices=("git", "rest"), default="git",
                        help="git: every agent a gw process pushing; rest: the command service at the arbiter")
    parser.add_argument("--out", help="also write the JSON here")
    args = parser.parse_args()
    if args.via == "rest":
        from bench_command_service import main as rest_main

        rest_main(["--agents", args.agents, "--clones", str(args.clones), "--items-per-agent",
                   str(args.items_per_agent), "--fcgi-workers", str(args.fcgi_workers),
                   *(["--out", args.out] if args.out else [])])
        return
    runs = []
    for agents in [int(n) for n in args.agents.split(",")]:
        items = agents * args.items_per_agent
        load_before = os.getloadavg()
        summary, calls, waits = herd(args.transport, agents, args.clones, items, args.fcgi_workers,
                                      args.server_hook, args.arbiter)
        load_after = os.getloadavg()
        durations = [c[2] for c in calls if c[3] == 0]
        last = summary["last_grant_s"] or 0
        runs.append({
            "agents": agents, "clones": args.clones, "items": items, "server_hook": summary["server_hook"],
            "granted": summary["granted"], "granted_once_each": summary["granted_once_each"],
            "errors": summary["errors"],
            "grants_per_s": round(summary["granted"] / last, 2) if last else None,
            "claim_p50_s": quantile(waits, 50), "claim_p99_s": quantile(waits, 99),
            "call_p50_s": quantile(durations, 50), "call_p99_s": quantile(durations, 99),
            "calls": len(calls), "lost_races": sum(c[3] == 75 for c in calls), "pushes": summary["pushes"],
            "wall_s": summary["wall_s"], "cpu_s": summary["cpu_s"],
            # CPU of every process of the herd (clients, git, server, hooks) per grant, and what that
            # allows on this machine's cores once nothing else runs: the CPU-bound ceiling.
            "cpu_per_grant_s": round(summary["cpu_s"] / summary["granted"], 4) if summary["granted"] else None,
            "cpu_bound_grants_per_s": (round((os.cpu_count() or 1) * summary["granted"] / summary["cpu_s"], 1)
                                       if summary["cpu_s"] else None),
            # The arbiter's share alone (its server's process group): what one arbiter machine with these
            # cores could grant if the agents ran elsewhere.
            "client_cpu_per_grant_s": (round(summary["client_cpu_s"] / summary["granted"], 4)
                                       if summary["granted"] else None),
            "server_cpu_per_grant_s": (round(summary["server_cpu_s"] / summary["granted"], 4)
                                       if summary["granted"] else None),
            "server_bound_grants_per_s": (round((os.cpu_count() or 1) * summary["granted"] / summary["server_cpu_s"], 1)
                                          if summary["server_cpu_s"] else None),
            "load_before": [round(x, 2) for x in load_before], "load_after": [round(x, 2) for x in load_after],
        })
        print(json.dumps(runs[-1]), file=sys.stderr)
    emit_runs({"bench": "ceiling", "transport": args.transport, "arbiter": args.arbiter,
               "server_hook": runs[0]["server_hook"] if runs else None}, runs, args.out)


if __name__ == "__main__":
    main()
