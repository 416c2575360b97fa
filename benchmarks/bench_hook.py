"""The arbiter's server hook deriving a large push: ``git push`` of N state commits at once.

    python benchmarks/bench_hook.py [--commands 200] [--items 20] [--rounds 5] [--profile]

A real bare arbiter with gitwork's server hook (``gw hooks install --server``, so the pre-receive hook
runs ``python -m gitwork.hookcheck pre-receive`` and with it ``gitwork/derive.py``), a clone that ran
``gw init`` and made ``--items`` items (pushed first), then ``--commands`` ordinary commands made with
the library (in turn ``msg``, ``claim``, ``msg`` under the lease, ``release``... on the items) and
pushed with one plain ``git push``: every one of them is re-applied and compared by the hook.

Each round pushes the same commits to a fresh copy of the arbiter (objects and all), so every round
pays for the pack transfer and the hook. Printed: the median wall time of the push with the hook, of
the same push to a copy without any hook (git alone), the difference (the hook's cost), and the hook
alone run as git runs it on the same commits (less noisy than a difference of two pushes); beside each,
the CPU time (user + system) of every process involved, which a loaded machine does not inflate. With
``--profile`` the hook's own work is run once in this process under cProfile (top 25 by cumulative time).

Runs with the interpreter it is started with and the sources of this tree (``PYTHONPATH``); it asserts
nothing about speed (the machine is shared).
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ["PYTHONPATH"] = str(ROOT) + (os.pathsep + os.environ["PYTHONPATH"] if os.environ.get("PYTHONPATH") else "")

from gitwork.errors import GwError
from gitwork.hooks_install import install_server
from gitwork.workplane import Workplane

STATE = "refs/gitwork/state"


def git(cwd: Path, *args: str) -> str:
    done = subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"git {' '.join(args)}: {done.stderr}")
    return done.stdout.strip()


def build(base: Path, commands: int, items: int) -> tuple[Path, Path, str, str]:
    """(the hooked arbiter after the set-up push, the clone, the arbiter's tip, the clone's tip)."""
    bare = base / "arbiter.git"
    git(base, "init", "-q", "--bare", str(bare))
    install_server(str(bare))
    clone = base / "clone"
    git(base, "init", "-q", str(clone))
    git(clone, "remote", "add", "origin", str(bare))
    with Workplane(str(clone), agent="alice") as wp:
        wp.do("init")
        ids = [wp.do("new", title=f"item {n}").result["item"] for n in range(items)]
        git(clone, "push", "-q", "origin", f"{STATE}:{STATE}")
        made = 0
        cycle = ("msg", "claim", "msg", "release")
        while made < commands:
            item = ids[(made // len(cycle)) % len(ids)]
            name = cycle[made % len(cycle)]
            args = {"msg": {"text": f"note {made}", "epoch": "current"}, "claim": {"ttl": "1h"}, "release": {}}[name]
            try:
                wp.do(name, item=item, **args)
            except GwError as error:
                raise SystemExit(f"{name} {item}: {error.message}") from error
            made += 1
    return bare, clone, git(bare, "rev-parse", STATE), git(clone, "rev-parse", STATE)


def cpu_of_children() -> float:
    """User + system seconds of every waited-for descendant so far (git, receive-pack, the hook)."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def timed_push(clone: Path, bare: Path) -> tuple[float, float, subprocess.CompletedProcess[str]]:
    """(wall seconds, CPU seconds of every process involved, the push)."""
    cpu, started = cpu_of_children(), time.perf_counter()
    done = subprocess.run(["git", "push", "-q", str(bare), f"{STATE}:{STATE}"], cwd=clone, capture_output=True,
                          text=True)
    return time.perf_counter() - started, cpu_of_children() - cpu, done


def timed_hook(bare: Path, old: str, new: str) -> tuple[float, float]:
    """The server hook alone, as git runs it, on a copy that already holds the pushed objects:
    (wall seconds, CPU seconds)."""
    cpu, started = cpu_of_children(), time.perf_counter()
    done = subprocess.run([str(bare / "hooks" / "pre-receive")], cwd=bare, input=f"{old} {new} {STATE}\n",
                          capture_output=True, text=True, env={**os.environ, "GIT_DIR": "."})
    seconds = time.perf_counter() - started
    if done.returncode != 0:
        raise SystemExit(f"the hook refused: {done.stderr}")
    return seconds, cpu_of_children() - cpu


def profile(bare: Path, old: str, new: str) -> None:
    """The hook's state check run here under cProfile, on the pushed objects already in ``bare``."""
    import cProfile
    import pstats

    from gitwork import hookcheck

    here = os.getcwd()
    os.chdir(bare)
    try:
        profiler = cProfile.Profile()
        profiler.enable()
        problems = hookcheck.check_update(str(bare), STATE, old, new)
        profiler.disable()
    finally:
        os.chdir(here)
    assert not problems, problems
    pstats.Stats(profiler).sort_stats("cumulative").print_stats(25)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--commands", type=int, default=200)
    parser.add_argument("--items", type=int, default=20)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--profile", action="store_true")
    options = parser.parse_args()
    base = Path(tempfile.mkdtemp(prefix="gw-bench-hook-"))
    try:
        bare, clone, old, new = build(base, options.commands, options.items)
        pushed = int(git(clone, "rev-list", "--count", f"{old}..{new}"))
        hooked, plain, hooked_cpu, plain_cpu = [], [], [], []
        for round_ in range(options.rounds):
            for kind, into, cpu_into in (("hook", hooked, hooked_cpu), ("plain", plain, plain_cpu)):
                copy = base / f"round-{round_}-{kind}.git"
                shutil.copytree(bare, copy, symlinks=True)
                if kind == "plain":
                    shutil.rmtree(copy / "hooks")
                    (copy / "hooks").mkdir()
                seconds, cpu, done = timed_push(clone, copy)
                if done.returncode != 0 or git(copy, "rev-parse", STATE) != new:
                    raise SystemExit(f"the {kind} push was refused: {done.stderr}")
                into.append(seconds)
                cpu_into.append(cpu)
        print(f"push of {pushed} state commits ({options.commands} commands on {options.items} items: msg, claim, "
              f"msg, release in turn), {options.rounds} rounds, median wall time")
        print(f"  with the derive hook  {statistics.median(hooked):7.3f} s   (min {min(hooked):.3f}, max {max(hooked):.3f}; "
              f"CPU {statistics.median(hooked_cpu):.3f} s)")
        print(f"  git alone (no hook)   {statistics.median(plain):7.3f} s   (min {min(plain):.3f}, max {max(plain):.3f}; "
              f"CPU {statistics.median(plain_cpu):.3f} s)")
        print(f"  the hook's cost       {statistics.median(hooked) - statistics.median(plain):7.3f} s")
        runs = [timed_hook(base / "round-0-hook.git", old, new) for _ in range(options.rounds)]
        alone, alone_cpu = [wall for wall, _ in runs], [cpu for _, cpu in runs]
        print(f"  the hook alone        {statistics.median(alone):7.3f} s   (min {min(alone):.3f}, max {max(alone):.3f}; "
              f"CPU {statistics.median(alone_cpu):.3f} s; the pre-receive hook on the same commits, objects already there)")
        print(f"  load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")
        if options.profile:
            profile(base / "round-0-hook.git", old, new)
    finally:
        shutil.rmtree(base, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
