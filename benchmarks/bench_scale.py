"""Per-command cost and ``gw ready`` / ``gw list`` as the item count grows.

    python benchmarks/bench_scale.py [--quick] [--sizes 100,10000,100000] [--keep] [--no-packed] [--shape rich|plain]

For each size the state is built through the library as ONE commit (Store.write_commit with every
item.yaml and events.log, then Store.set_if_equals), and the build time is reported. Then, side by
side with the floor (benchmarks/floor.sh: the same change with git plumbing):
- in-process claim and release (one Workplane, Workplane.do), medians;
- ``gw claim ID`` / ``gw release ID`` start-to-exit (the ref is reset before every run);
- ``gw ready`` and ``gw list`` cold (the read cache ``<common dir>/gitwork/cache.sqlite*`` deleted before
  every run) and warm, next to the floor for reading every item.yaml with plumbing (``git ls-tree -r
  | git cat-file --batch``) and the interpreter floor (``python -c pass``);
- with loose objects as built, and (largest size) again after ``git repack -ad``;
- per-command cost and loose growth per renewal with 10,000 / 100,000 / 1,000,000 earlier commands
  recorded under ``commands/`` (the de-duplication records every command adds; ``--history``).
``--shape rich`` (the default; issue 27's data shape): every item after the first ten with 1-3
dependencies, 1-4 labels, non-ASCII titles, a quarter done (about 53% ready, 75% listed);
``--shape plain``: the earlier shape (two labels each, a tenth with one dependency, a fifth done).
The listings are timed beside their own floor: ONE SQL statement on the cache file returning the
rows the listing prints (id, status, priority, holder, title; same filter and order) and writing
them as tab-separated lines to /dev/null, in a fresh interpreter.
``--keep`` reuses states built by an earlier run (under $TMPDIR/gw-bench/scale-SHAPE-N).
Results: stdout (markdown) and benchmarks/results/bench_scale.json.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _common as c  # noqa: E402


def prepared_state(n: int, keep: bool, shape: str = "rich") -> tuple[Path, dict[str, object]]:
    root = c.BENCH_TMP / f"scale-{shape}-{n}"
    marker = root / "state.json"
    if keep and marker.exists():
        state = json.loads(marker.read_text())
        repo = root / "repo"
        try:
            c.git(repo, "update-ref", c.REF, state["commit"])
            packed = int(dict(ln.split(": ") for ln in c.git(repo, "count-objects", "-v").splitlines())["size-pack"])
            if packed == 0:  # an earlier run's `git repack` would make the "loose" figures packed ones
                c.log(f"{n} items: reusing {repo} (built in {state['total_s']:.1f}s by an earlier run)")
                state["reused"] = True
                return repo, state
            c.log(f"{n} items: the kept state was repacked by an earlier run: rebuilding it loose")
        except RuntimeError:
            pass
    if root.exists():
        shutil.rmtree(root)
    repo = c.make_repo(root / "repo")
    c.BUSY_SEEN.append(c.wait_quiet())
    c.log(f"{n} items: building the state in one commit ...")
    state = c.build_state(repo, n, shape=shape)
    objects = c.common_dir(repo) / "objects"
    state["objects_du_kib"] = c.du_kib(objects)
    c.log(f"{n} items: built in {state['total_s']:.1f}s (encode {state['encode_s']:.1f}s, write objects "
          f"{state['write_s']:.1f}s), .git/objects {state['objects_du_kib'] / 1024:.0f} MiB loose")
    state["reused"] = False
    marker.write_text(json.dumps(state))
    return repo, state


def in_process(repo: Path, item: str, pairs: int) -> dict[str, object]:
    """One Workplane, ``pairs`` claim/release pairs after a few warm-up pairs; raw times in seconds."""
    from gitwork.workplane import Workplane

    c.BUSY_SEEN.append(c.wait_quiet())
    claims: list[float] = []
    releases: list[float] = []
    with Workplane(str(repo), agent=c.AGENT) as wp:
        t0 = time.perf_counter()
        wp.do("claim", item=item)
        first_claim = time.perf_counter() - t0
        wp.do("release", item=item)
        for _ in range(2):
            wp.do("claim", item=item)
            wp.do("release", item=item)
        cpu_start = c.cpu_now()
        for _ in range(pairs):
            t0 = time.perf_counter()
            wp.do("claim", item=item)
            t1 = time.perf_counter()
            wp.do("release", item=item)
            claims.append(t1 - t0)
            releases.append(time.perf_counter() - t1)
        cpu = c.cpu_now() - cpu_start
    return {"first": first_claim, "claims": claims, "releases": releases, "cpu": cpu}


def cli_commands(repo: Path, base: str, item: str, runs: int) -> dict[str, dict[str, float]]:
    gw = str(c.venv_gw())
    c.git(repo, "update-ref", c.REF, base)
    done = subprocess.run([gw, "claim", item], cwd=repo, env=c.child_env(), capture_output=True)
    if done.returncode != 0:
        raise RuntimeError(f"gw claim failed: {done.stderr.decode()}")
    held = c.tip(repo)
    to_base = ["git", "update-ref", c.REF, base]
    to_held = ["git", "update-ref", c.REF, held]
    results = c.measure([
        c.Case("gw claim ID", [gw, "claim", item], prepare=to_base),
        c.Case("floor claim", c.floor_argv("claim", item), prepare=to_base),
        c.Case("gw release ID", [gw, "release", item], prepare=to_held),
        c.Case("floor release", c.floor_argv("release", item), prepare=to_held),
    ], repo, runs=runs, warmup=2)
    c.git(repo, "update-ref", c.REF, base)
    return results


def per_command(targets: dict[int, tuple[Path, str, str]], pairs: int, runs: int, label: str,
                rounds: int = 3) -> dict[int, dict[str, object]]:
    """In-process and CLI claim/release for every target, in rounds that go round all targets.

    Interleaving the sizes means a burst of outside load lands on every size alike, so the ratio
    between sizes (the target) is not decided by when the load happened.
    """
    ip: dict[int, list[dict[str, object]]] = {k: [] for k in targets}
    cli: dict[int, list[dict[str, dict[str, float]]]] = {k: [] for k in targets}
    for round_no in range(rounds):
        for key, (repo, base, item) in targets.items():
            c.log(f"{label} {key}: round {round_no + 1}/{rounds}, in-process claim/release on {item}")
            c.git(repo, "update-ref", c.REF, base)
            ip[key].append(in_process(repo, item, max(3, pairs // rounds)))
            c.log(f"{label} {key}: round {round_no + 1}/{rounds}, gw claim / gw release / floor")
            cli[key].append(cli_commands(repo, base, item, max(3, runs // rounds)))
    out: dict[int, dict[str, object]] = {}
    for key in targets:
        claims = [t for r in ip[key] for t in r["claims"]]  # type: ignore[attr-defined]
        releases = [t for r in ip[key] for t in r["releases"]]  # type: ignore[attr-defined]
        cpu = sum(r["cpu"] for r in ip[key])  # type: ignore[misc]
        out[key] = {
            "in_process": {"first_claim_ms": ip[key][0]["first"] * 1000,  # type: ignore[operator]
                           "claim_median_ms": statistics.median(claims) * 1000,
                           "release_median_ms": statistics.median(releases) * 1000,
                           "cpu_ms_per_command": cpu * 1000 / (len(claims) + len(releases)),
                           "pairs": len(claims)},
            "cli": c.merge(cli[key]),
        }
    return out


# The floor of a listing: one SQL statement returning the printed columns, written to /dev/null.
FLOOR_SQL = r"""import sqlite3, sys
db = sqlite3.connect(sys.argv[1])
where = {"ready": "status IN ('open', 'in_progress') AND waiting = 0 AND lease_state IS NOT 'active'",
         "list": "status NOT IN ('done', 'cancelled')"}[sys.argv[2]]
rows = db.execute("SELECT id, status, priority, holder, title FROM item WHERE problem IS NULL AND " + where
                  + " ORDER BY priority, created, id").fetchall()
with open("/dev/null", "w") as out:
    out.write("".join(f"{r[0]}\t{r[1]}\t{r[2]}\t{r[3] or ''}\t{r[4]}\n" for r in rows))
"""


def reads(repo: Path, base: str, runs_cold: int, runs_warm: int, tag: str = "") -> dict[str, dict[str, float]]:
    gw, py = str(c.venv_gw()), str(c.venv_python())
    c.git(repo, "update-ref", c.REF, base)
    cache_glob = str(c.common_dir(repo) / "gitwork" / "cache.sqlite*")
    cache_file = str(c.common_dir(repo) / "gitwork" / "cache.sqlite")
    drop_cache = ["bash", "-c", f"rm -f {cache_glob}"]
    floor_read = ["bash", "-c", f"git ls-tree -r {c.REF} items | awk '/item\\.yaml$/ {{print $3}}' "
                                "| git cat-file --batch >/dev/null"]
    results = c.measure([
        c.Case(f"gw ready cold{tag}", [gw, "ready"], prepare=drop_cache),
        c.Case(f"gw list cold{tag}", [gw, "list"], prepare=drop_cache),
        c.Case(f"floor: read every item.yaml (ls-tree -r, cat-file --batch){tag}", floor_read, prepare=drop_cache),
    ], repo, runs=runs_cold, warmup=1)
    results.update(c.measure([
        c.Case(f"gw ready warm{tag}", [gw, "ready"]),
        c.Case(f"gw list warm{tag}", [gw, "list"]),
        c.Case(f"floor: python -c pass{tag}", [py, "-c", "pass"]),
        c.Case(f"floor ready: one SQL statement + write{tag}", [py, "-c", FLOOR_SQL, cache_file, "ready"]),
        c.Case(f"floor list: one SQL statement + write{tag}", [py, "-c", FLOOR_SQL, cache_file, "list"]),
    ], repo, runs=runs_warm, warmup=2))
    return results


def history_state(h: int) -> tuple[Path, dict[str, object]]:
    root = c.scratch(f"history-{h}")
    repo = c.make_repo(root / "repo")
    c.BUSY_SEEN.append(c.wait_quiet())
    c.log(f"history {h}: building 100 items + {h} command records in one commit ...")
    state = c.build_state(repo, 100, history=h)
    c.log(f"history {h}: built in {state['total_s']:.1f}s")
    return repo, state


def renewal_growth(repo: Path, item: str, renewals: int) -> float:
    """Loose KiB (apparent size) added per 1,000 renewals."""
    from gitwork.workplane import Workplane

    objects = c.common_dir(repo) / "objects"
    with Workplane(str(repo), agent=c.AGENT) as wp:
        wp.do("claim", item=item)
        before = c.du_kib(objects, apparent=True)
        for _ in range(renewals):
            wp.do("renew", item=item)
        return (c.du_kib(objects, apparent=True) - before) * 1000 / renewals


def count_lines(repo: Path, *args: str) -> int:
    out = subprocess.run([str(c.venv_gw()), *args], cwd=repo, env=c.child_env(), capture_output=True, check=True)
    return len(out.stdout.splitlines())


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="sizes 100,1000,3000 and few runs (a smoke run)")
    parser.add_argument("--sizes", help="comma-separated item counts (default 100,10000,100000)")
    parser.add_argument("--runs", type=int, help="runs per CLI case (default 20, quick 6)")
    parser.add_argument("--pairs", type=int, help="in-process claim/release pairs per size (default 30, quick 8)")
    parser.add_argument("--history", help="earlier-command counts for the history table "
                                          "(default 10000,100000,1000000; quick 1000,10000; 0 to skip)")
    parser.add_argument("--keep", action="store_true", help="reuse states built by an earlier run")
    parser.add_argument("--shape", choices=("rich", "plain"), default="rich",
                        help="the items' data shape (default rich: 1-3 dependencies, labels, non-ASCII titles)")
    parser.add_argument("--no-packed", action="store_true", help="skip the repacked re-run at the largest size")
    parser.add_argument("--no-wait", action="store_true", help="do not wait for an idle machine before timing")
    parser.add_argument("--reinstall", action="store_true", help="reinstall gitwork into the bench venv")
    args = parser.parse_args(argv)
    c.QUIET["enabled"] = not args.no_wait
    sizes = [int(s) for s in (args.sizes or ("100,1000,3000" if args.quick else "100,10000,100000")).split(",")]
    runs = args.runs or (6 if args.quick else 20)
    pairs = args.pairs or (8 if args.quick else 30)
    info = c.machine()
    c.log(f"machine: {info}")

    states: dict[int, tuple[Path, dict[str, object]]] = {n: prepared_state(n, args.keep, args.shape) for n in sizes}
    targets = {n: (repo, str(st["commit"]), str(st["claimable"][len(st["claimable"]) // 2]))  # type: ignore[index]
               for n, (repo, st) in states.items()}
    per_size = per_command(targets, pairs, runs, "items")
    for n, (repo, state) in states.items():
        entry = per_size[n]
        entry["build"] = {k: state[k] for k in state if k.endswith("_s") or k.endswith("_kib")}
        entry["build"]["reused"] = state["reused"]  # type: ignore[index]
        base, item = targets[n][1], targets[n][2]
        if n >= 1000:
            big = n >= 50_000
            runs_cold = 3 if big else max(3, runs // 3)
            c.log(f"{n} items: gw ready / gw list, cold and warm")
            entry["reads"] = reads(repo, base, runs_cold, max(5, runs // 2))
            entry["ready_rows"] = count_lines(repo, "ready")
            entry["list_rows"] = count_lines(repo, "list")
            if n == max(sizes) and not args.no_packed:
                c.log(f"{n} items: git repack -ad, then cold/warm again")
                t0 = time.perf_counter()
                c.git(repo, "repack", "-adq")
                c.git(repo, "prune-packed")
                entry["repack_s"] = time.perf_counter() - t0
                entry["reads_packed"] = reads(repo, base, runs_cold, max(5, runs // 2), " (packed)")
                in_pack = c.measure([
                    c.Case("gw claim ID (packed)", [str(c.venv_gw()), "claim", item],
                           prepare=["git", "update-ref", c.REF, base]),
                    c.Case("floor claim (packed)", c.floor_argv("claim", item),
                           prepare=["git", "update-ref", c.REF, base]),
                ], repo, runs=runs, warmup=2)
                entry["cli"].update(in_pack)  # type: ignore[union-attr]
                c.git(repo, "update-ref", c.REF, base)
    histories = [int(h) for h in (args.history or ("1000,10000" if args.quick else "10000,100000,1000000")).split(",")
                 if int(h) > 0]
    per_history: dict[int, dict[str, object]] = {}
    if histories:
        hstates = {h: history_state(h) for h in histories}
        htargets = {h: (repo, str(st["commit"]), str(st["claimable"][0]))  # type: ignore[index]
                    for h, (repo, st) in hstates.items()}
        per_history = per_command(htargets, pairs, runs, "history")
        for h, (repo, st) in hstates.items():
            c.git(repo, "update-ref", c.REF, htargets[h][1])
            per_history[h]["build_s"] = st["total_s"]
            per_history[h]["commands_shard_tree_entries"] = h / 256
            per_history[h]["loose_apparent_kib_per_1000_renewals"] = renewal_growth(
                repo, htargets[h][2], 100 if args.quick else 300)
            shutil.rmtree(repo.parent, ignore_errors=True)
    info["loadavg_at_end"] = open("/proc/loadavg").read().split()[:3]
    info["max_busy_before_a_measurement"] = max(c.BUSY_SEEN) if c.BUSY_SEEN else None
    c.save("bench_scale" + ("-quick" if args.quick else ""), {"machine": info, "sizes": per_size,
                                                               "history": per_history})

    small = per_size[min(sizes)]
    print(f"## Per-command cost by item count (medians; CLI: {runs} runs, {c.runner_name()})\n")
    rows = []
    for n, entry in per_size.items():
        ip, cli = entry["in_process"], entry["cli"]  # type: ignore[index]
        rows.append((n, entry["build"]["total_s"], ip["claim_median_ms"], ip["release_median_ms"],  # type: ignore[index]
                     ip["cpu_ms_per_command"], cli["gw claim ID"]["median_ms"], cli["gw claim ID"]["cpu_ms"],
                     cli["floor claim"]["median_ms"], cli["gw release ID"]["median_ms"],
                     cli["floor release"]["median_ms"],
                     cli["gw claim ID"]["median_ms"] / small["cli"]["gw claim ID"]["median_ms"]))  # type: ignore[index]
    print(c.markdown(("items", "build s", "in-proc claim ms", "in-proc release ms", "in-proc CPU ms/cmd",
                      "gw claim ms", "gw claim CPU ms", "floor claim ms", "gw release ms", "floor release ms",
                      "gw claim / at smallest"), rows))
    print("\n## gw ready / gw list (medians, ms)\n")
    rows = []
    for n, entry in per_size.items():
        for key in ("reads", "reads_packed"):
            for name, r in (entry.get(key) or {}).items():  # type: ignore[union-attr]
                rows.append((n, name, r["median_ms"], r["min_ms"], r.get("cpu_ms"), r["runs"]))
    print(c.markdown(("items", "command", "median ms", "min ms", "CPU ms", "runs"), rows))
    if per_history:
        print("\n## Per-command cost by command history (100 items; commands/<h>/<id> records already present)\n")
        rows = []
        for h, entry in per_history.items():
            ip, cli = entry["in_process"], entry["cli"]  # type: ignore[index]
            rows.append((h, entry["commands_shard_tree_entries"], entry["build_s"], ip["claim_median_ms"],  # type: ignore[index]
                         ip["release_median_ms"], ip["cpu_ms_per_command"], cli["gw claim ID"]["median_ms"],  # type: ignore[index]
                         cli["floor claim"]["median_ms"], entry["loose_apparent_kib_per_1000_renewals"]))  # type: ignore[index]
        print(c.markdown(("earlier commands", "entries per commands/ shard", "build s", "in-proc claim ms",
                          "in-proc release ms", "in-proc CPU ms/cmd", "gw claim ms", "floor claim ms",
                          "loose KiB per 1,000 renewals"), rows))
    return 0


if __name__ == "__main__":
    c.enter_venv(sys.argv[1:])
    sys.exit(main(sys.argv[1:]))
