"""``gw run`` and ``gw coordinate`` (issue 12): time from ``gw run`` to the agent's first line of output,
beside ``tmux new-session`` alone; the coordinator's cost per pass at 100 live executions.

    python benchmarks/bench_launch.py [--runs 15] [--executions 100] [--passes 5] [--against TREE] [--no-coordinator]
    python benchmarks/bench_launch.py --launcher-only --runs 20 --against /work/main   # the ratio alone, A/B
    python benchmarks/bench_launch.py --gate-ab 30   # the launcher's path in-process, gated pane or not
    python benchmarks/bench_launch.py --cas 30   # the state ref's compare-and-swap alone: git update-ref vs in-process

Runs ``python -m gitwork`` from the interpreter running this script, on a throwaway repository with
its own tmux server (``GW_TMUX_SOCKET`` under the temporary folder), killed at the end.

- **first output**: each run starts ``sh -c 'echo first > MARK; exec sleep 600'`` on a fresh item
  and polls (every 0.5 ms) until MARK exists: the agent's first line written. Interleaved, each
  round: ``gw run --backend tmux``, ``gw run --backend subprocess``, and the floor,
  ``tmux new-session -d`` of the same command on the same server. Medians and 90th percentiles, and
  the CPU time of the launching process (``os.wait4``: its own and its reaped children's, git and
  tmux clients; not the tmux server's nor the agent's).
- **the resident launcher** (``gw launcher``, docs/launch.md): the same ``gw run`` of both backends,
  handed over to a launcher started for the run (the cases without it set ``GW_LAUNCHER=off``); the
  CPU is the ``gw run`` process's (the launcher's own is reported apart, from ``/proc``: all of it
  over the rounds, divided by the launches it served; and per tmux launch, ``launcher_cpu``, read
  before and after each one, the ``gw run`` having exited).
- **A/B** (``--against TREE``, another checkout of gitwork, e.g. main): the same launcher case, its
  ``gw run`` and its launcher run from TREE (``PYTHONPATH``) on a repository of its own, interleaved
  in the same rounds: ``gw run (tmux), launcher, TREE``.
- **bytecode**: the package is compiled first (``compileall``), as an installed package is: under
  ``PYTHONDONTWRITEBYTECODE=1`` every module a ``gw`` process imports would otherwise be compiled
  from source at each start (about 50 ms of CPU per ``gw run``).
- **coordinator pass**: ``--executions`` agents (``sleep 600`` in tmux) started in-process through
  ``gitwork.launch.run.run``; then ``tick()`` in-process (no renewals due: a pass that only checks)
  and ``gw coordinate --once`` as a process (which also takes and releases the coordinator lease).

Prints one JSON object on stdout. Nothing here asserts a speed.
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
import time
from pathlib import Path

AGENT = 'echo first > "$MARK"; exec sleep 600'


def wait_for(path: str, limit: float = 30.0) -> None:
    deadline = time.perf_counter() + limit
    while not os.path.exists(path):
        if time.perf_counter() > deadline:
            raise SystemExit(f"timed out waiting for {path}")
        time.sleep(0.0005)


CPU: dict[str, list[float]] = {}  # case -> CPU seconds (user + system) of the launching process and its reaped children


def first_output(argv: list[str], cwd: str, mark: str, case: str = "", extra: dict[str, str] | None = None) -> float:
    """Seconds from starting ``argv`` to the agent's first line (the mark file); the CPU time of the
    process (its own, and its children's it waited for: git, tmux clients) goes to ``CPU[case]``."""
    env = {**os.environ, "MARK": mark, **(extra or {})}
    t0 = time.perf_counter()
    proc = subprocess.Popen(argv, cwd=cwd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    wait_for(mark)
    elapsed = time.perf_counter() - t0
    _pid, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode != 0:
        raise SystemExit(f"{argv[:6]} failed: {proc.stderr.read().decode() if proc.stderr else ''}")
    CPU.setdefault(case, []).append(usage.ru_utime + usage.ru_stime)
    return elapsed


def _cpu(pid: int) -> float:
    """CPU seconds (user + system) a live process has used so far, its reaped children's included."""
    with open(f"/proc/{pid}/stat") as stat:
        fields = stat.read().rpartition(")")[2].split()
    return sum(int(f) for f in fields[11:15]) / os.sysconf("SC_CLK_TCK")


def summary(times: list[float]) -> dict[str, float]:
    ordered = sorted(times)
    return {"median_ms": round(statistics.median(ordered) * 1000, 1),
            "p90_ms": round(ordered[int(0.9 * (len(ordered) - 1))] * 1000, 1), "runs": len(ordered)}


def cas_figures(moves: int) -> dict[str, object]:
    """Wall (median) and CPU (mean, this process and its reaped children: git) of moving the state ref
    by ``git update-ref`` and in-process (``Store.set_if_equals``; store.py), blocks of ``moves`` each,
    twice, alternately."""
    import resource

    from gitwork.store import Repository, Store
    from gitwork.workplane import Workplane

    root = tempfile.mkdtemp(prefix="gw-bench-cas-")
    try:
        repo = os.path.join(root, "repo")
        subprocess.run(["git", "init", "-q", repo], check=True)
        with Workplane(repo, agent="bench") as wp:
            wp.do("init")
        store = Store(Repository.discover(repo))
        base = store.snapshot()
        commits = [store.write_commit(base, {f"x/{n}": b"%d" % n}, "m", "a <a@b>", 1) for n in range(2 * moves)]

        def cpu() -> float:
            own, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
            return own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime

        walls: dict[str, list[float]] = {"git update-ref": [], "in-process": []}
        cpus: dict[str, list[float]] = {"git update-ref": [], "in-process": []}
        for mode in ("git update-ref", "in-process", "git update-ref", "in-process"):
            in_process = mode == "in-process"
            store._swaps_in_process = lambda in_process=in_process: in_process  # type: ignore[method-assign]
            start = cpu()
            for n in range(moves):
                tip = store.tip()
                new = commits[n] if commits[n] != tip else commits[moves + n]
                t0 = time.perf_counter()
                assert store.set_if_equals(tip, new)
                walls[mode].append(time.perf_counter() - t0)
            cpus[mode].append((cpu() - start) / moves)
        return {mode: {"wall_median_ms": round(statistics.median(walls[mode]) * 1000, 2),
                       "cpu_mean_ms": round(statistics.mean(cpus[mode]) * 1000, 2)} for mode in walls} | {
            "moves": moves, "load": os.getloadavg()[0]}
    finally:
        shutil.rmtree(root, ignore_errors=True)


def gate_figures(rounds: int) -> dict[str, object]:
    """The launcher's own path, in-process, its pane gated (started while the commit is written) and not
    (started after it), interleaved: ms from the launch's start to the agent's first line (the agent
    writes the wall clock: ``date +%s.%N``), and the CPU of the launch to its answer (this process and
    its reaped children: the tmux clients), as the resident launcher runs it."""
    import contextlib
    import io
    import resource

    root = tempfile.mkdtemp(prefix="gw-bench-gate-")
    repo = os.path.join(root, "repo")
    os.environ["GW_TMUX_SOCKET"] = os.path.join(root, "tmux.sock")
    os.environ["GW_AGENT"] = "bench"
    subprocess.run(["git", "init", "-q", repo], check=True)
    cwd = os.getcwd()
    os.chdir(repo)
    try:
        from gitwork.cli.main import _run
        from gitwork.launch import tmux
        from gitwork.workplane import Workplane

        with Workplane(repo) as wp:
            wp.do("init")
            items = [wp.do("new", title=f"i{n}").result["item"] for n in range(2 * rounds + 2)]
        tmux.USE_SHELL_PANE, tmux.CHECK_ONCE = tmux.shell_tools() is not None, True

        def cpu() -> float:
            return sum(u.ru_utime + u.ru_stime for u in (resource.getrusage(resource.RUSAGE_SELF),
                                                         resource.getrusage(resource.RUSAGE_CHILDREN)))

        def one(gated: bool, n: int) -> tuple[float, float]:
            tmux.USE_GATE = gated and tmux.gate_tool() is not None
            mark = os.path.join(root, f"mark-{n}-{gated}")
            agent = f'date +%s.%N > "{mark}.t"; mv "{mark}.t" "{mark}"; exec sleep 600'
            c0, w0 = cpu(), time.time()
            with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
                _run(["run", items.pop(), "--", "sh", "-c", agent])
            c1 = cpu()
            wait_for(mark)
            with open(mark) as read:
                return (float(read.read()) - w0) * 1000, (c1 - c0) * 1000

        one(True, -1), one(False, -2)  # warm-up (the tmux server, the page cache)
        rows: dict[bool, list[tuple[float, float]]] = {True: [], False: []}
        for n in range(rounds):
            for gated in ((True, False) if n % 2 else (False, True)):
                rows[gated].append(one(gated, n))
        return {("gated" if gated else "after the commit"): {
                    "first_line": summary([r[0] / 1000 for r in found]),
                    "cpu_ms_to_the_answer": round(statistics.median(r[1] for r in found), 1)}
                for gated, found in rows.items()} | {"machine": {"cpus": os.cpu_count(), "load": os.getloadavg()[0]}}
    finally:
        os.chdir(cwd)
        subprocess.run(["tmux", "-S", os.environ["GW_TMUX_SOCKET"], "kill-server"], capture_output=True)
        shutil.rmtree(root, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=15)
    parser.add_argument("--executions", type=int, default=100)
    parser.add_argument("--passes", type=int, default=5)
    parser.add_argument("--against", help="another gitwork checkout (e.g. /work/main): its launcher case, interleaved")
    parser.add_argument("--against-env", action="append", default=[], metavar="NAME=VALUE",
                        help="an environment variable for --against's launcher, e.g. --against . "
                             "--against-env GW_LAUNCHER_GATE=0 (this tree with its pane started after the commit)")
    parser.add_argument("--no-coordinator", action="store_true", help="only the first-output figures")
    parser.add_argument("--launcher-only", action="store_true",
                        help="only the launcher's tmux case (and --against's), the bare tmux floor and python -c pass: "
                             "the issue 27 ratio in a short run")
    parser.add_argument("--gate-ab", type=int, default=0, metavar="N",
                        help="only the launcher's path in-process, N rounds of its pane gated and not, interleaved")
    parser.add_argument("--cas", type=int, default=0, metavar="N",
                        help="only the state ref's compare-and-swap: N moves by git update-ref and N in-process, "
                             "interleaved in blocks, on a throwaway repository")
    args = parser.parse_args()
    if args.gate_ab:
        sys.stdout.write(json.dumps(gate_figures(args.gate_ab), indent=2) + "\n")
        return
    if args.cas:
        sys.stdout.write(json.dumps(cas_figures(args.cas), indent=2) + "\n")
        return
    if not shutil.which("tmux"):
        raise SystemExit("bench_launch needs tmux")
    root = tempfile.mkdtemp(prefix="gw-bench-launch-")
    repo = os.path.join(root, "repo")
    socket = os.path.join(root, "tmux.sock")
    os.environ["GW_TMUX_SOCKET"] = socket
    os.environ["GW_AGENT"] = "bench"
    gw = [sys.executable, "-m", "gitwork"]
    import compileall

    import gitwork

    compileall.compile_dir(os.path.dirname(gitwork.__file__), quiet=1)
    if args.against:
        compileall.compile_dir(os.path.join(args.against, "gitwork"), quiet=1)
    launcher = other = None
    other_repo = os.path.join(root, "other")
    try:
        subprocess.run(["git", "init", "-q", repo], check=True)
        from gitwork.workplane import Workplane

        with Workplane(repo) as wp:
            wp.do("init")
            # (as many items in --against's repository: a commit's cost grows with the state's trees, so the
            # two launchers' commits must be of the same shape)
            count = 5 * args.runs + (0 if args.no_coordinator else args.executions) + 1
            items = [wp.do("new", title=f"item {n}").result["item"] for n in range(count)]
        other_items: list[str] = []
        against = {"PYTHONPATH": os.path.abspath(args.against),
                   **dict(pair.split("=", 1) for pair in args.against_env)} if args.against else {}
        if args.against:
            subprocess.run(["git", "init", "-q", other_repo], check=True)
            with Workplane(other_repo) as wp:
                wp.do("init")
                other_items = [wp.do("new", title=f"item {n}").result["item"] for n in range(count)]
        # One warm-up of each, so the tmux server and the page cache are up before anything is timed.
        # (gw's own start of the server, so it runs with gitwork's tmux configuration).
        subprocess.run([*gw, "run", items.pop(), "--", "true"], cwd=repo, check=True, stdout=subprocess.DEVNULL,
                       stderr=subprocess.DEVNULL)
        cases = ["gw run (tmux)", "gw run (subprocess)", "gw run (tmux), launcher", "gw run (subprocess), launcher",
                 "tmux new-session", "tmux new-session, python -S in the pane", "gw --version", "python -c pass"]
        # The script a user runs (`gw`, beside this interpreter): no runpy, which `python -m` imports.
        script = os.path.join(os.path.dirname(sys.executable), "gw")
        if os.access(script, os.X_OK):
            cases.insert(4, "gw run (tmux), launcher, gw script")
        against_case = f"gw run (tmux), launcher, {args.against}" + "".join(f" {pair}" for pair in args.against_env)
        if args.against:
            cases.insert(3, against_case)
        if args.launcher_only:
            # (the `gw` script too: what a user types; `python -m gitwork` adds runpy)
            cases = [case for case in cases if case in ("gw run (tmux), launcher", "gw run (tmux), launcher, gw script",
                                                        against_case, "tmux new-session", "python -c pass")]
        os.environ["GW_LAUNCHER"] = "off"  # each launcher case says otherwise
        launcher = subprocess.Popen([*gw, "launcher"], cwd=repo, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        assert launcher.stderr is not None
        launcher.stderr.readline()  # "gw launcher PID serves gw run ..." once it listens
        launcher_cpu = _cpu(launcher.pid)
        if args.against:
            subprocess.run([*gw, "run", other_items.pop(), "--", "true"], cwd=other_repo, check=True,
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env={**os.environ, **against})
            other = subprocess.Popen([*gw, "launcher"], cwd=other_repo, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                     env={**os.environ, **against})
            assert other.stderr is not None
            other.stderr.readline()
        per_launch: dict[str, list[float]] = {}  # the launcher's CPU of each tmux launch
        times: dict[str, list[float]] = {case: [] for case in cases}
        # The floor of a Python wrapper in the pane (gw's design: the wrapper reports the start and the
        # exit code): the same tmux new-session, its pane starting the agent through `python -S`.
        exec_agent = "import os; os.execvp('sh', ['sh', '-c', os.environ['AGENT']])"
        for n in range(args.runs):
            for index, case in enumerate(cases):
                mark = os.path.join(root, f"mark-{n}-{index}")
                if case == "tmux new-session":
                    argv = ["tmux", "-S", socket, "new-session", "-d", "-s", f"floor-{n}", "-e", f"MARK={mark}",
                            "--", "sh", "-c", AGENT]
                elif case.startswith("tmux new-session,"):
                    argv = ["tmux", "-S", socket, "new-session", "-d", "-s", f"floor-py-{n}", "-e", f"MARK={mark}",
                            "-e", f"AGENT={AGENT}", "--", sys.executable, "-S", "-c", exec_agent]
                elif case in ("gw --version", "python -c pass"):  # start-up floors: no agent, start to exit
                    argv = [*gw, "--version"] if case == "gw --version" else [sys.executable, "-c", "pass"]
                    t0 = time.perf_counter()
                    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL)
                    _pid, _status, usage = os.wait4(proc.pid, 0)
                    times[case].append(time.perf_counter() - t0)
                    CPU.setdefault(case, []).append(usage.ru_utime + usage.ru_stime)
                    continue
                else:
                    argv = [*([script] if case.endswith("gw script") else gw), "run",
                            (other_items if case == against_case else items).pop(), "--backend",
                            case.split("(")[1].partition(")")[0], "--", "sh", "-c", AGENT]
                if ", launcher" in case:
                    os.environ["GW_LAUNCHER"] = "on"
                serving = other if case == against_case else launcher
                before = _cpu(serving.pid) if "(tmux), launcher" in case and serving else 0.0
                try:
                    times[case].append(first_output(argv, other_repo if case == against_case else repo, mark, case,
                                                    against if case == against_case else None))
                finally:
                    os.environ["GW_LAUNCHER"] = "off"
                if "(tmux), launcher" in case and serving:
                    per_launch.setdefault(case, []).append(_cpu(serving.pid) - before)
        served = sum(len(t) for case, t in times.items() if ", launcher" in case and case != against_case)
        result: dict[str, object] = {"first_output": {case: summary(t) for case, t in times.items()},
                                     "cpu_of_the_launching_process": {case: summary(t) for case, t in CPU.items()},
                                     "launcher_cpu_ms_per_launch": round((_cpu(launcher.pid) - launcher_cpu) / served
                                                                         * 1000, 1),
                                     # /proc counts CPU in clock ticks (10 ms): a mean over the rounds, not a median
                                     "launcher_cpu_mean_ms": {case: round(statistics.mean(t) * 1000, 1)
                                                              for case, t in per_launch.items()},
                                     "load_before_coordinator": os.getloadavg()[0]}
        # Issue 27's target: gw run to the agent's first line within 5x a bare `tmux new-session -d` (medians,
        # same run); beside it, the CPU of the whole launch (the client's, with its reaped children, and the
        # launcher's mean per tmux launch).
        floor = statistics.median(times["tmux new-session"])
        result["ratio_to_tmux_new_session"] = {
            case: round(statistics.median(t) / floor, 2) for case, t in times.items()
            if case.startswith("gw run") and t}
        result["target_5x_met"] = {case: ratio <= 5.0 for case, ratio in result["ratio_to_tmux_new_session"].items()}
        result["cpu_ms_client_plus_launcher"] = {
            case: round(statistics.median(CPU[case]) * 1000 + statistics.mean(per_launch[case]) * 1000, 1)
            for case in per_launch if CPU.get(case)}
        launcher.terminate()
        launcher.wait()
        if other is not None:
            other.terminate()
            other.wait()
        if args.no_coordinator:
            result["machine"] = {"cpus": os.cpu_count(), "load": os.getloadavg()[0]}
            sys.stdout.write(json.dumps(result, indent=2) + "\n")
            return
        os.environ.pop("GW_LAUNCHER")
        # Stop the first-output agents, then start the live executions the coordinator passes over.
        subprocess.run(["tmux", "-S", socket, "kill-server"], capture_output=True)
        for folder in Path(repo, ".git", "gitwork", "executions").glob("*/handle"):
            try:
                os.killpg(int(folder.read_text().partition("@")[0]), 9)
            except (ProcessLookupError, ValueError):
                pass
        from gitwork.launch import coordinate
        from gitwork.launch import run as launch

        with Workplane(repo) as wp:
            for _row in launch.runs(wp):  # the killed ones are lost now: one pass records that
                pass
            coordinate.tick(wp)
            t0 = time.perf_counter()
            for item in items[: args.executions]:
                launch.run(wp, item, ["sleep", "600"], "tmux")
            started = time.perf_counter() - t0
            ticks = []
            for _ in range(args.passes):
                t0 = time.perf_counter()
                actions = coordinate.tick(wp)
                ticks.append(time.perf_counter() - t0)
            assert sum(a["action"] == "running" for a in actions) == args.executions, actions[:3]
        onces = []
        for _ in range(args.passes):
            t0 = time.perf_counter()
            subprocess.run([*gw, "coordinate", "--once"], cwd=repo, check=True, stdout=subprocess.DEVNULL)
            onces.append(time.perf_counter() - t0)
        result["coordinator"] = {
            "live_executions": args.executions,
            "start_in_process_ms_each": round(started / args.executions * 1000, 1),
            "tick_in_process": summary(ticks),
            "tick_per_execution_ms": round(statistics.median(ticks) / args.executions * 1000, 2),
            "gw_coordinate_once": summary(onces),
        }
        result["machine"] = {"cpus": os.cpu_count(), "load": os.getloadavg()[0]}
        sys.stdout.write(json.dumps(result, indent=2) + "\n")
    finally:
        for proc in (launcher, other):
            if proc is not None and proc.poll() is None:
                proc.kill()
        subprocess.run(["tmux", "-S", socket, "kill-server"], capture_output=True)
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
