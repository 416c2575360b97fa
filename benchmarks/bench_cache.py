"""The read cache (gitwork/cache.py) at scale: ``gw ready --limit 20``, full listings, cold rebuild,
incremental update after one command, cache size; each beside its floor in the same run.

    python benchmarks/bench_cache.py [--sizes 10000,100000] [--runs 10] [--rebuilds 3] [--rebuild-only] [--packed]
                                     [--shape plain|rich] [--repo PATH]

States are built by ``_common.build_state`` (one commit; a fifth of the items done, a tenth depend on
an earlier item, so about three quarters are ready). Runs ``python -m gitwork`` from the interpreter
running this script. Figures: medians of ``--runs`` process runs (start to exit), interleaved with
the floors: ``gw --version`` (interpreter plus gw's entry point) and, for the rebuild, streaming
every item.yaml through ``git cat-file --batch`` and parsing it. Besides wall times, ``cpu`` holds
the median CPU time (user + system, children included) of each figure: steadier than wall time
when other work shares the cores. The cold rebuild is measured three ways, interleaved ``--rebuilds``
times: ``gw cache rebuild`` as a process, the floor, and ``index.rebuild`` in this process (after
``cache.drop``); ``ratios`` divides each median by the floor's. A second floor, ``git_floor``, is git
alone (``git ls-tree -r | git cat-file --batch`` of every item.yaml, nothing parsed: bench_scale's
floor); ``ratios`` has ``process_cpu_git``, the process's CPU over it. ``--rebuild-only`` stops there.
``--shape rich``: issue 27's data shape (1-3 dependencies, 1-4 labels, non-ASCII titles, a quarter done).
``--repo PATH``: measure the rebuild on a state built earlier (kept; implies ``--rebuild-only``). A
rebuild of 20,000 folders or more runs a helper process (gitwork/cachefill.py): its CPU is in the
figures (children, once it has exited). Prints one JSON object per size.

``--timeline --repo PATH``: one ``gw cache rebuild`` with ``GW_CACHE_TRACE`` set (each process of the
rebuild appends ``<monotonic> <process CPU> <pid> <event>`` lines, gitwork/cachefill.trace): prints,
for the writer and the helper, the wall and CPU seconds spent on each activity (from each event to
the next), the chunks each took, and the marks of the serial tail (finish, fixed, indexes, commit).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _common as c  # noqa: E402


def _cpu(who: int) -> float:
    usage = resource.getrusage(who)
    return usage.ru_utime + usage.ru_stime


def timed(argv: list[str], cwd: Path, runs: int, cpu: dict[str, float] | None = None, name: str = "") -> float:
    """Median wall ms of ``runs`` processes; with ``cpu``, also their median CPU ms (user + system,
    the process and its children) under ``name``: steadier than wall time when other work shares
    the cores."""
    times, spent = [], []
    for _ in range(runs):
        c0, t0 = _cpu(resource.RUSAGE_CHILDREN), time.perf_counter()
        subprocess.run(argv, cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False)
        times.append(time.perf_counter() - t0)
        spent.append(_cpu(resource.RUSAGE_CHILDREN) - c0)
    if cpu is not None:
        cpu[name] = round(statistics.median(spent) * 1000, 1)
    return round(statistics.median(times) * 1000, 1)


def stream_floor(repo: Path, cpu: dict[str, float] | None = None) -> float:
    """Every item.yaml through one ``git cat-file --batch``, each parsed: what a rebuild cannot beat."""
    from gitwork import codec

    c0 = _cpu(resource.RUSAGE_SELF) + _cpu(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    listing = subprocess.run(["git", "ls-tree", "-r", c.REF, "items"], cwd=repo, capture_output=True, check=True).stdout
    oids = [line.split()[2] for line in listing.decode().splitlines() if line.endswith("/item.yaml")]
    proc = subprocess.run(["git", "cat-file", "--batch"], cwd=repo, input=("\n".join(oids) + "\n").encode(),
                          capture_output=True, check=True).stdout
    at = 0
    while at < len(proc):
        header_end = proc.index(b"\n", at)
        size = int(proc[at:header_end].split()[2])
        codec.load_yaml(proc[header_end + 1:header_end + 1 + size], what="item.yaml")
        at = header_end + 1 + size + 1
    if cpu is not None:
        cpu["floor_stream_parse_s"] = round(_cpu(resource.RUSAGE_SELF) + _cpu(resource.RUSAGE_CHILDREN) - c0, 2)
    return round(time.perf_counter() - t0, 2)


def git_floor(repo: Path) -> tuple[float, float]:
    """Every item.yaml through ``git ls-tree -r | git cat-file --batch``, nothing parsed: (wall s, CPU s)."""
    c0, t0 = _cpu(resource.RUSAGE_CHILDREN), time.perf_counter()
    subprocess.run(["bash", "-c", f"git ls-tree -r {c.REF} items | awk '/item\\.yaml$/ {{print $3}}' "
                                  "| git cat-file --batch >/dev/null"], cwd=repo, check=True)
    return round(time.perf_counter() - t0, 2), round(_cpu(resource.RUSAGE_CHILDREN) - c0, 2)


def rebuild_in_process(repo: Path) -> tuple[float, float]:
    """``index.rebuild`` after ``cache.drop`` in this process: (wall s, CPU s, git's included)."""
    from gitwork import cache
    from gitwork.index import rebuild
    from gitwork.workplane import Workplane

    with Workplane(str(repo), agent="bench") as wp:
        snapshot = wp.context().snapshot
        cache.drop(cache.path_for(snapshot))
        c0 = _cpu(resource.RUSAGE_SELF) + _cpu(resource.RUSAGE_CHILDREN)
        t0 = time.perf_counter()
        rebuild(snapshot)
        return (round(time.perf_counter() - t0, 3),
                round(_cpu(resource.RUSAGE_SELF) + _cpu(resource.RUSAGE_CHILDREN) - c0, 3))


# What a traced process is doing from one event until its next (GW_CACHE_TRACE, gitwork/cachefill.trace).
_DOING = {"update-start": "start", "part-trees": "shard trees", "batch-trees": "git: folders",
          "batch-blobs": "git: files", "batch-end": "summarise", "rows": "summarise", "take": "insert",
          "taken": "between shards", "helper-spawn": "spawn helper", "finish": "wait for helper",
          "finished": "left-overs, waiting fixes", "fixed": "shown, rewait", "indexes": "indexes",
          "index": "indexes", "commit": "commit", "committed": "read, exit", "helper-main": "helper start",
          "helper-chunk": "chunk start", "helper-chunk-end": "between chunks", "helper-end": "exit",
          "spawn": "interpreter, imports, open"}


def timeline(repo: Path) -> dict[str, object]:
    """One ``gw cache rebuild`` with ``GW_CACHE_TRACE`` set: each process's time by what it was doing
    (from each traced event to its next: wall and the process's CPU), seconds from the spawn; the
    chunks each process took, and when the marks of the tail came."""
    trace = Path(tempfile.mkdtemp(prefix="gw-trace-")) / "trace"
    env = dict(os.environ, GW_CACHE_TRACE=str(trace))
    c0, t0 = _cpu(resource.RUSAGE_CHILDREN), time.monotonic()
    subprocess.run([sys.executable, "-m", "gitwork", "cache", "rebuild", "--json"], cwd=repo, env=env,
                   check=True, capture_output=True)
    t1, cpu = time.monotonic() - t0, _cpu(resource.RUSAGE_CHILDREN) - c0
    events: dict[str, list[tuple[float, float, str]]] = {}
    for line in trace.read_text().splitlines():
        when, spent, pid, event = line.split(" ", 3)
        events.setdefault(pid, []).append((float(when) - t0, float(spent), event))
    shutil.rmtree(trace.parent, ignore_errors=True)
    out: dict[str, object] = {"wall_s": round(t1, 3), "cpu_s": round(cpu, 2), "load": os.getloadavg()}
    for seen in events.values():
        own = [e for e in seen if not e[2].startswith("frame-in")]
        writer = any(e[2] == "update-start" for e in seen)
        if writer:
            own.insert(0, (0.0, 0.0, "spawn"))
        role = "writer" if writer else "helper"
        wall: dict[str, float] = {}
        spent: dict[str, float] = {}
        for (at, c1, event), (nxt, c2, _e) in zip(own, [*own[1:], (t1, own[-1][1], "exit")], strict=False):
            doing = _DOING.get(event.split(" ")[0], event)
            wall[doing] = wall.get(doing, 0.0) + nxt - at
            spent[doing] = spent.get(doing, 0.0) + c2 - c1
        chunks = [round(at, 3) for at, _c, e in own if e.startswith("part-trees")]
        frames = [at for at, _c, e in seen if e.startswith("frame-in shard")]
        marks = {e: round(at, 3) for at, _c, e in own if not e.startswith(("rows", "take", "part", "batch"))
                 and not e.startswith("helper-chunk")}
        out[role] = {"first": round(own[0][0], 3), "last": round(own[-1][0], 3), "cpu_at_last": own[-1][1],
                     "chunks": len(chunks), "chunk_starts": chunks, "marks": marks,
                     "wall_s": {k: round(v, 3) for k, v in sorted(wall.items(), key=lambda kv: -kv[1])},
                     "cpu_s": {k: round(v, 3) for k, v in sorted(spent.items(), key=lambda kv: -kv[1])}}
        if frames:
            out[role]["frames_in"] = [round(frames[0], 3), round(frames[-1], 3), len(frames)]  # type: ignore[index]
    return out


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--sizes", default="10000,100000")
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--rebuilds", type=int, default=1, help="cold rebuilds, each beside a floor run")
    parser.add_argument("--packed", action="store_true",
                        help="pack the state (git gc) before measuring: a repository after housekeeping")
    parser.add_argument("--shape", choices=("plain", "rich"), default="plain",
                        help="the items' data shape (rich: issue 27's, see _common.build_state)")
    parser.add_argument("--rebuild-only", action="store_true",
                        help="only the cold rebuild (process and in-process) beside its floor")
    parser.add_argument("--repo", help="measure the rebuild on this repository's state as it is (built "
                                       "earlier with _common.build_state; kept): --sizes, --shape and "
                                       "--packed then only label the figures")
    parser.add_argument("--timeline", action="store_true",
                        help="with --repo: one traced rebuild (GW_CACHE_TRACE), each process's time by activity")
    args = parser.parse_args()
    gw = [sys.executable, "-m", "gitwork"]
    if args.timeline and args.repo:
        print(json.dumps(timeline(Path(args.repo))), flush=True)
        return
    for n in (int(s) for s in args.sizes.split(",")):
        root = Path(tempfile.mkdtemp(prefix=f"gw-cache-{n}-"))
        try:
            if args.repo:
                repo, built = Path(args.repo), {"total_s": 0.0, "claimable": []}
                args.rebuild_only = True
            else:
                repo = c.make_repo(root / "repo")
                c.log(f"building {n} items")
                built = c.build_state(repo, n, shape=args.shape)
            if args.packed and not args.repo:
                c.log("git gc")
                c.git(repo, "gc", "-q")
            cache_file = c.common_dir(repo) / "gitwork" / "cache.sqlite"
            c.log("cold rebuild")
            cpu: dict[str, float] = {}
            colds, inprocess, floors, gits, size, closed = [], [], [], [], 0, 0
            for _ in range(args.rebuilds):  # interleaved with the floor, so all see the same load
                c0, t0 = _cpu(resource.RUSAGE_CHILDREN), time.perf_counter()
                rebuilt = subprocess.run([*gw, "cache", "rebuild", "--json"], cwd=repo, capture_output=True,
                                         text=True)
                colds.append((time.perf_counter() - t0, _cpu(resource.RUSAGE_CHILDREN) - c0))
                assert rebuilt.returncode == 0, rebuilt.stderr
                size = json.loads(rebuilt.stdout)["bytes"]
                closed = os.path.getsize(cache_file)  # after the process's last close checkpointed the WAL
                floors.append((stream_floor(repo, cpu), cpu["floor_stream_parse_s"]))
                gits.append(git_floor(repo))
                inprocess.append(rebuild_in_process(repo))
            cold = round(statistics.median(w for w, _c in colds), 2)
            floor_stream = round(statistics.median(w for w, _c in floors), 2)
            cpu["cold_rebuild_s"] = round(statistics.median(c for _w, c in colds), 2)
            cpu["floor_stream_parse_s"] = round(statistics.median(c for _w, c in floors), 2)
            cpu["in_process_rebuild_s"] = round(statistics.median(c for _w, c in inprocess), 2)
            cpu["git_floor_s"] = round(statistics.median(c for _w, c in gits), 2)
            ratios = {"process_cpu": round(cpu["cold_rebuild_s"] / cpu["floor_stream_parse_s"], 2),
                      "process_cpu_git": round(cpu["cold_rebuild_s"] / cpu["git_floor_s"], 2),
                      "in_process_cpu": round(cpu["in_process_rebuild_s"] / cpu["floor_stream_parse_s"], 2),
                      "process_wall": round(cold / floor_stream, 2),
                      "in_process_wall": round(statistics.median(w for w, _c in inprocess) / floor_stream, 2)}
            if args.rebuild_only:
                print(json.dumps({
                    "items": n, "shape": args.shape, "packed": args.packed, "cold_rebuild_s": cold,
                    "floor_stream_parse_s": floor_stream, "git_floor_s": round(statistics.median(w for w, _c in gits), 2),
                    "in_process_rebuild_s": round(statistics.median(w for w, _c in inprocess), 2),
                    "cache_bytes": size, "cache_bytes_closed": closed, "cpu": cpu, "ratios": ratios,
                    "each": {"process": colds, "in_process": inprocess, "floor": floors, "git_floor": gits},
                    "load": os.getloadavg()}), flush=True)
                continue
            ready_all = subprocess.run([*gw, "ready"], cwd=repo, capture_output=True, text=True).stdout.count("\n")
            c.log("warm reads")
            figures = {
                "items": n, "ready_rows": ready_all, "build_s": round(built["total_s"], 1),
                "cold_rebuild_s": cold, "floor_stream_parse_s": floor_stream, "cache_bytes": size,
                "gw_version_ms": timed([*gw, "--version"], repo, args.runs, cpu, "gw_version_ms"),
                "python_pass_ms": timed([sys.executable, "-c", "pass"], repo, args.runs, cpu, "python_pass_ms"),
                "ready_limit20_ms": timed([*gw, "ready", "--limit", "20"], repo, args.runs, cpu, "ready_limit20_ms"),
                "ready_full_ms": timed([*gw, "ready"], repo, max(3, args.runs // 3), cpu, "ready_full_ms"),
                "list_full_ms": timed([*gw, "list"], repo, max(3, args.runs // 3), cpu, "list_full_ms"),
                "list_limit20_ms": timed([*gw, "list", "--limit", "20"], repo, args.runs, cpu, "list_limit20_ms"),
                "cpu": cpu, "load": os.getloadavg(),
            }
            # Incremental: one command, then the cache brought to the new tip (in-process).
            from gitwork import cache
            from gitwork.rows import item_summary as summary
            from gitwork.rows import thread_entry as entry
            from gitwork.workplane import Workplane

            steps = []
            with Workplane(str(repo), agent="bench") as wp:
                for item in built["claimable"][:10]:
                    wp.do("claim", item=item, ttl=600)
                    snapshot = wp.context().snapshot
                    t0 = time.perf_counter()
                    cache.at(snapshot, lambda db: None, summary, entry)
                    steps.append(time.perf_counter() - t0)
            figures["incremental_after_one_command_ms"] = round(statistics.median(steps) * 1000, 1)
            figures["cache_bytes_after"] = os.path.getsize(cache_file)
            print(json.dumps(figures), flush=True)
        finally:
            shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
