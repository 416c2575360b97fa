"""Shared plumbing for the gitwork benchmarks: the venv, repositories, states, timing and tables.

Every benchmark runs the *installed* package from a fresh non-editable venv (``/tmp/benchvenv`` by
default, override with ``GW_BENCH_VENV``) so bytecode is compiled once at install time, the way users
run ``gw``. The scripts re-execute themselves under that venv's Python, so ``python
benchmarks/bench_cli.py`` works from any interpreter. The venv is reinstalled whenever the sources
under ``gitwork/`` change (a digest is stamped into the venv).

Timing: process-level figures come from hyperfine when it is on PATH (``-N``, no shell), otherwise
from an interleaved ``time.perf_counter`` loop around ``subprocess.run``; both report medians.
Nothing here asserts a speed: these are measurements, not tests.
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import random
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, Sequence

BENCH_DIR = Path(__file__).resolve().parent
REPO_ROOT = BENCH_DIR.parent
RESULTS_DIR = BENCH_DIR / "results"
FLOOR_SH = BENCH_DIR / "floor.sh"
VENV = Path(os.environ.get("GW_BENCH_VENV", "/tmp/benchvenv"))
REF = "refs/gitwork/state"
AGENT = "bench"
BENCH_TMP = Path(tempfile.gettempdir()) / "gw-bench"
_T0 = time.perf_counter()


def log(message: str) -> None:
    """Progress on stderr (stdout carries the result tables)."""
    sys.stderr.write(f"[{time.perf_counter() - _T0:7.1f}s] {message}\n")
    sys.stderr.flush()


# --- the benchmark venv ------------------------------------------------------------------------------


def source_digest() -> str:
    digest = hashlib.sha1()
    for path in sorted([*(REPO_ROOT / "gitwork").rglob("*.py"), REPO_ROOT / "pyproject.toml"]):
        digest.update(str(path.relative_to(REPO_ROOT)).encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()


def venv_python() -> Path:
    return VENV / "bin" / "python"


def venv_gw() -> Path:
    return VENV / "bin" / "gw"


def _installed_digest() -> str:
    stamp = VENV / ".gitwork-source-digest"
    return stamp.read_text() if stamp.exists() else ""


def ensure_venv(reinstall: bool = False) -> None:
    """Create the venv and install the current sources non-editable (only when they changed).

    Several benchmark scripts may share the venv: each holds a shared lock on ``<venv>.lock`` for
    its whole run, and a reinstall needs the exclusive lock. When another run is in progress the
    installed build is used as it is (with a warning) rather than replaced under that run's feet.
    """
    import fcntl

    if os.environ.get("GW_BENCH_VENV_LOCK_FD"):
        return  # re-executed child: the parent took the lock and the fd was inherited across exec
    fd = os.open(str(VENV) + ".lock", os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        exclusive = True
    except BlockingIOError:
        exclusive = False
    digest = source_digest()
    if exclusive:
        fresh = not venv_python().exists()
        if fresh:
            log(f"creating {VENV}")
            subprocess.run([sys.executable, "-m", "venv", str(VENV)], check=True)
        if fresh or reinstall or _installed_digest() != digest:
            log(f"installing {REPO_ROOT} (non-editable) into {VENV}")
            args = [str(venv_python()), "-m", "pip", "install", "-q", "--disable-pip-version-check"]
            if not fresh:
                args += ["--force-reinstall", "--no-deps"]
            subprocess.run([*args, str(REPO_ROOT)], check=True, stdout=sys.stderr)
            (VENV / ".gitwork-source-digest").write_text(digest)
        fcntl.flock(fd, fcntl.LOCK_SH)
    else:
        log(f"another benchmark is using {VENV}; waiting for any install in progress")
        fcntl.flock(fd, fcntl.LOCK_SH)  # blocks only while someone holds it exclusively (installing)
        if _installed_digest() != digest:
            log(f"WARNING: gitwork sources changed since {VENV} was installed, but another benchmark is "
                f"running: measuring the installed build {_installed_digest()[:12]}")
    os.set_inheritable(fd, True)
    os.environ["GW_BENCH_VENV_LOCK_FD"] = str(fd)


def enter_venv(argv: Sequence[str]) -> None:
    """Make sure the venv is current, then re-execute this script under its Python if needed."""
    ensure_venv(reinstall="--reinstall" in argv)
    if Path(sys.prefix).resolve() != VENV.resolve():
        script = os.path.abspath(sys.argv[0])
        os.execv(str(venv_python()), [str(venv_python()), script, *[a for a in argv if a != "--reinstall"]])
    # Import gitwork from the venv's site-packages, never from the source tree next to us.
    sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != REPO_ROOT]


# --- environment and repositories -------------------------------------------------------------------


def child_env(bytecode: bool = True, **extra: str) -> dict[str, str]:
    """A clean environment for gw and git children.

    ``bytecode=True`` unsets PYTHONDONTWRITEBYTECODE (this machine sets it), the normal user setup;
    ``False`` sets it, as the test suite runs.
    """
    env = {k: v for k, v in os.environ.items() if not k.startswith(("GIT_", "GW_"))}
    env["PATH"] = f"{VENV / 'bin'}{os.pathsep}{env.get('PATH', '')}"
    env["GW_AGENT"] = AGENT
    env["LC_ALL"] = "C"
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    if not bytecode:
        env["PYTHONDONTWRITEBYTECODE"] = "1"
    env["FLOOR_TMP"] = str(floor_tmp())
    env.update(extra)
    return env


def floor_tmp() -> Path:
    """Scratch files of floor.sh (named by pid; it runs no mkdir/rm of its own)."""
    path = Path(tempfile.gettempdir()) / "gw-bench-floor-tmp"
    path.mkdir(exist_ok=True)
    return path


def git(repo: str | Path, *args: str, input: bytes | None = None) -> str:
    done = subprocess.run(["git", "-C", str(repo), *args], input=input, capture_output=True, env=child_env())
    if done.returncode != 0:
        raise RuntimeError(f"git {' '.join(args)} failed: {done.stderr.decode(errors='replace')}")
    return done.stdout.decode().strip()


def make_repo(path: str | Path) -> Path:
    path = Path(path)
    if path.exists():
        shutil.rmtree(path)
    path.mkdir(parents=True)
    git(path, "-c", "init.defaultBranch=main", "init", "-q")
    # No auto-gc surprises in the middle of a measurement.
    git(path, "config", "gc.auto", "0")
    return path


def scratch(name: str) -> Path:
    """A scratch directory under the system temp dir, emptied first."""
    path = BENCH_TMP / name
    if path.exists():
        shutil.rmtree(path)
    path.mkdir(parents=True)
    return path


def tip(repo: str | Path) -> str:
    return git(repo, "rev-parse", REF)


def common_dir(repo: str | Path) -> Path:
    return (Path(repo) / git(repo, "rev-parse", "--git-common-dir")).resolve()


def du_kib(path: str | Path, apparent: bool = False) -> int:
    args = ["du", "-sk", *(["--apparent-size"] if apparent else []), str(path)]
    return int(subprocess.run(args, capture_output=True, check=True).stdout.split()[0])


# --- states -----------------------------------------------------------------------------------------


def item_ids(n: int, seed: int = 1) -> list[str]:
    rng = random.Random(seed)
    seen: set[str] = set()
    out: list[str] = []
    while len(out) < n:
        item_id = f"w-{rng.getrandbits(64):016x}"
        if item_id not in seen:
            seen.add(item_id)
            out.append(item_id)
    return out


# Non-ASCII words for the "rich" shape's titles (accents, CJK, Cyrillic, emoji: 2-4 bytes in UTF-8).
RICH_WORDS = ("réglage", "naïve", "Straße", "ćwiczenie", "日本語", "構成", "поиск", "δοκιμή", "ünïcode", "🚀",
              "café", "señal", "Überprüfung", "数据", "ошибка", "fix", "the", "parser", "cache", "ready")


def build_state(repo: str | Path, n: int, *, realistic: bool = True, seed: int = 1, history: int = 0,
                shape: str = "plain") -> dict[str, Any]:
    """Write ``n`` items as ONE commit on a fresh state ref, through the library (Store.write_commit).

    ``realistic``: a fifth of the items are done and a tenth depend on an earlier item, so ``ready``
    has real filtering to do; otherwise every item is open with no dependency (contention runs).
    ``shape="rich"`` (issue 27's data shape; implies ``realistic``): a quarter of the items done, every
    item after the first ten with 1-3 dependencies on earlier items (for two in three of them only on
    done ones, so about 55% are ready), 1-4 labels from a vocabulary of 40, non-ASCII titles.
    ``history``: also write that many ``commands/<h>/<id>`` records, as if that many commands had run
    (the records share one blob: what grows with history is the commands/ trees, not blob count).
    Returns the ids, the commit, and how long building and writing took.
    """
    from gitwork import FORMAT_VERSION, codec, layout
    from gitwork.ids import command_id
    from gitwork.model import Item
    from gitwork.store import FORMAT_FILE, Repository, Store, identity_signature

    ids = item_ids(n, seed)
    now = int(time.time())
    when = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(now))
    t0 = time.perf_counter()
    changes: dict[str, bytes | None] = {
        FORMAT_FILE: codec.dump_yaml({"format": FORMAT_VERSION}),
        layout.COUNTERS: codec.dump_yaml({"fence": 0}),
    }
    open_ids: list[str] = []
    rich = shape == "rich"
    rng = random.Random(seed + 2)
    done_ids: list[str] = []
    for i, item_id in enumerate(ids):
        if rich:
            done = i % 4 == 3
            pool = done_ids if rng.random() < 2 / 3 and done_ids else ids[:i]
            deps = sorted(set(rng.sample(pool, min(len(pool), rng.randint(1, 3))))) if i >= 10 else []
            title = f"{' '.join(rng.choice(RICH_WORDS) for _ in range(rng.randint(3, 8)))} #{i}"
            labels = sorted({f"{rng.choice(('area', 'team', 'kind', 'stage'))}-{rng.randint(0, 9)}"
                             for _ in range(rng.randint(1, 4))})
        else:
            done = realistic and i % 5 == 4
            deps = [ids[i - 7]] if realistic and i % 10 == 3 and i >= 7 else []
            title = f"benchmark item {i}: make the frobnicator {i % 97} times faster"
            labels = sorted({"bench", f"area-{i % 8}"})
        if done:
            done_ids.append(item_id)
        item = Item(
            id=item_id,
            title=title,
            status="done" if done else "open",
            priority=i % 4,
            labels=labels,
            depends_on=deps,
            provenance={"by": AGENT, "at": when},
            created_at=when,
            updated_at=when,
        )
        if not done and not deps:
            open_ids.append(item_id)
        changes[layout.item_path(item_id, layout.ITEM_FILE)] = codec.dump_yaml(item.to_doc())
        changes[layout.item_path(item_id, layout.EVENTS_FILE)] = codec.encode_record(
            {"seq": 1, "at": when, "by": AGENT, "type": "created", "cmd": command_id(), "title": item.title}
        )
    if history:
        command_path = getattr(layout, "command_path", None)
        if command_path is None:
            raise RuntimeError("this gitwork has no commands/ records (layout.command_path)")
        record = json.dumps({"at": when, "by": AGENT, "op": "renew", "result": {"item": ids[0] if ids else None}},
                            sort_keys=True).encode() + b"\n"
        rng = random.Random(seed + 1)
        for _ in range(history):
            changes[command_path(f"c-{rng.getrandbits(64):016x}")] = record
    t1 = time.perf_counter()
    repository = Repository.discover(str(repo))
    store = Store(repository)
    try:
        base = store.snapshot()
        if base.commit is not None:
            raise RuntimeError(f"{repo} already has a state ref")
        commit = store.write_commit(base, changes, f"benchmark state: {n} items\n", identity_signature(AGENT), now)
        t2 = time.perf_counter()
        if not store.set_if_equals(None, commit):
            raise RuntimeError("could not create the state ref")
    finally:
        store.close()
    return {"ids": ids, "claimable": open_ids, "commit": commit, "n": n,
            "encode_s": t1 - t0, "write_s": t2 - t1, "total_s": time.perf_counter() - t0}


# --- timing -----------------------------------------------------------------------------------------


class Case:
    """One command to time: argv, an optional command run before every timed run, and its env."""

    def __init__(self, name: str, argv: Sequence[str], *, prepare: Sequence[str] | None = None,
                 env: dict[str, str] | None = None) -> None:
        self.name, self.argv, self.prepare, self.env = name, list(argv), list(prepare) if prepare else None, env


def summarise(times: Sequence[float], cpu_ms: float | None = None) -> dict[str, float]:
    """Wall-clock statistics in ms, plus the mean CPU time (user + system, children included).

    CPU time is the figure to trust when the machine is shared: waiting for a core inflates wall
    time but not CPU time.
    """
    ms = [t * 1000 for t in times]
    out = {"median_ms": statistics.median(ms), "mean_ms": statistics.fmean(ms),
           "stdev_ms": statistics.stdev(ms) if len(ms) > 1 else 0.0, "min_ms": min(ms), "max_ms": max(ms),
           "runs": len(ms)}
    if cpu_ms is not None:
        out["cpu_ms"] = cpu_ms
    out["times_ms"] = [round(t, 3) for t in ms]
    return out


def merge(parts: Sequence[dict[str, dict[str, Any]]]) -> dict[str, dict[str, Any]]:
    """Combine :func:`measure` results of several rounds (same case names) into one summary each."""
    out: dict[str, dict[str, Any]] = {}
    for name in parts[0]:
        times = [t / 1000 for part in parts for t in part[name]["times_ms"]]
        cpu = [part[name].get("cpu_ms") for part in parts]
        cpu_mean = (sum(c * part[name]["runs"] for c, part in zip(cpu, parts, strict=True)) / len(times)  # type: ignore[operator]
                    if all(c is not None for c in cpu) else None)
        out[name] = summarise(times, cpu_mean)
    return out


def cpu_now() -> float:
    """CPU seconds used so far by this process and its waited-for children (git update-ref, ...)."""
    import resource

    me, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return me.ru_utime + me.ru_stime + kids.ru_utime + kids.ru_stime


def have_hyperfine() -> bool:
    return shutil.which("hyperfine") is not None and os.environ.get("GW_BENCH_RUNNER") != "interleave"


def cpu_busy(seconds: float = 1.0) -> float:
    """Fraction of all CPUs busy over ``seconds`` (from /proc/stat; 0.0 where unavailable)."""
    def sample() -> tuple[int, int]:
        fields = [int(x) for x in open("/proc/stat").readline().split()[1:]]
        return sum(fields), fields[3] + fields[4]  # total, idle + iowait

    try:
        total0, idle0 = sample()
        time.sleep(seconds)
        total1, idle1 = sample()
    except OSError:
        return 0.0
    return 1.0 - (idle1 - idle0) / max(1, total1 - total0)


# threshold: busy fraction of all CPUs; timeout: per wait; budget: total waiting per script run.
QUIET = {"enabled": True, "threshold": 0.15, "timeout": 600.0, "budget": 2400.0, "waited": 0.0}


def wait_quiet() -> float:
    """Wait (within a time budget) until the machine is nearly idle; other people's tests skew timings.

    Returns the busy fraction seen just before measuring, which is stored with the results.
    """
    busy = cpu_busy(1.0)
    if not QUIET["enabled"]:
        return busy
    started = time.monotonic()
    deadline = started + min(QUIET["timeout"], max(0.0, QUIET["budget"] - QUIET["waited"]))
    warned = False
    while busy > QUIET["threshold"] and time.monotonic() < deadline:
        if not warned:
            log(f"machine busy ({busy:.0%} of all CPUs): waiting for it to quieten (--no-wait skips this)")
            warned = True
        busy = cpu_busy(2.0)
    QUIET["waited"] += time.monotonic() - started
    if busy > QUIET["threshold"]:
        log(f"still busy ({busy:.0%}; waited {QUIET['waited']:.0f}s in all): measuring anyway")
    return busy


BUSY_SEEN: list[float] = []


def measure(cases: Sequence[Case], cwd: str | Path, *, runs: int, warmup: int = 2) -> dict[str, dict[str, float]]:
    """Median start-to-exit times of cases measured side by side.

    With hyperfine, cases sharing an env go to one hyperfine call; the runs are split into a few
    rounds (one hyperfine call each) so that a burst of load from elsewhere hits every case alike.
    """
    if not have_hyperfine():
        BUSY_SEEN.append(wait_quiet())
        return _measure_interleaved(cases, cwd, runs=runs, warmup=warmup)
    times: dict[str, list[float]] = {case.name: [] for case in cases}
    cpu: dict[str, float] = {case.name: 0.0 for case in cases}
    groups: dict[str, list[Case]] = {}
    for case in cases:
        groups.setdefault(json.dumps(case.env or child_env(), sort_keys=True), []).append(case)
    rounds = max(1, min(4, runs // 5))
    per_round = [runs // rounds + (1 if r < runs % rounds else 0) for r in range(rounds)]
    for round_no, round_runs in enumerate(per_round):
        for key, group in groups.items():
            BUSY_SEEN.append(wait_quiet())
            env = json.loads(key)
            with tempfile.NamedTemporaryFile(suffix=".json") as out:
                args = ["hyperfine", "-N", "--style", "basic", "--runs", str(round_runs),
                        "--warmup", str(warmup if round_no == 0 else 1), "--export-json", out.name]
                if any(c.prepare for c in group):
                    for case in group:
                        args += ["--prepare", shlex.join(case.prepare) if case.prepare else "true"]
                for case in group:
                    args += ["--command-name", case.name, shlex.join(case.argv)]
                log(f"hyperfine round {round_no + 1}/{rounds}: {', '.join(c.name for c in group)} ({round_runs} runs)")
                subprocess.run(args, cwd=cwd, env=env, check=True, stdout=sys.stderr)
                data = json.load(open(out.name))
            for case, res in zip(group, data["results"], strict=False):
                times[case.name].extend(res["times"])
                cpu[case.name] += (res["user"] + res["system"]) * len(res["times"])
    return {name: summarise(ts, cpu[name] * 1000 / len(ts)) for name, ts in times.items()}


def _measure_interleaved(cases: Sequence[Case], cwd: str | Path, *, runs: int, warmup: int) -> dict[str, dict[str, float]]:
    import resource

    times: dict[str, list[float]] = {c.name: [] for c in cases}
    cpu: dict[str, float] = {c.name: 0.0 for c in cases}
    log(f"timing (interleaved): {', '.join(c.name for c in cases)} ({runs} runs)")
    for round_no in range(warmup + runs):
        for case in cases:
            env = case.env or child_env()
            if case.prepare:
                subprocess.run(case.prepare, cwd=cwd, env=env, check=True, stdout=subprocess.DEVNULL)
            before = resource.getrusage(resource.RUSAGE_CHILDREN)
            t0 = time.perf_counter()
            done = subprocess.run(case.argv, cwd=cwd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
            elapsed = time.perf_counter() - t0
            after = resource.getrusage(resource.RUSAGE_CHILDREN)
            if done.returncode != 0:
                raise RuntimeError(f"{case.name} exited {done.returncode}: {done.stderr.decode(errors='replace')}")
            if round_no >= warmup:
                times[case.name].append(elapsed)
                cpu[case.name] += (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return {name: summarise(ts, cpu[name] * 1000 / len(ts)) for name, ts in times.items()}


def runner_name() -> str:
    return "hyperfine -N" if have_hyperfine() else "perf_counter + subprocess (interleaved)"


# --- reporting --------------------------------------------------------------------------------------


def machine() -> dict[str, Any]:
    def out(*args: str) -> str:
        try:
            return subprocess.run(args, capture_output=True, text=True).stdout.strip()
        except OSError:
            return "n/a"

    cpu = "n/a"
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return {
        "nproc": os.cpu_count(),
        "cpu": cpu,
        "python": platform.python_version(),
        "git": out("git", "--version"),
        "hyperfine": out("hyperfine", "--version") if shutil.which("hyperfine") else "absent",
        "kernel": platform.release(),
        "loadavg_at_start": open("/proc/loadavg").read().split()[:3] if os.path.exists("/proc/loadavg") else None,
        "gitwork_source_digest": source_digest()[:12],
        "gitwork_installed_digest": _installed_digest()[:12],
        "gitwork_commit": git(REPO_ROOT, "rev-parse", "--short", "HEAD"),
        "runner": runner_name(),
        "date": time.strftime("%Y-%m-%d %H:%M:%S %z"),
    }


def save(name: str, data: dict[str, Any]) -> Path:
    RESULTS_DIR.mkdir(exist_ok=True)
    path = RESULTS_DIR / f"{name}.json"
    path.write_text(json.dumps(data, indent=2, sort_keys=False) + "\n")
    log(f"results written to {path.relative_to(REPO_ROOT)}")
    return path


def markdown(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    def cell(value: Any) -> str:
        if isinstance(value, float):
            return f"{value:.1f}" if value >= 10 else f"{value:.2f}"
        return "" if value is None else str(value)

    lines = ["| " + " | ".join(headers) + " |", "|" + "|".join("---" for _ in headers) + "|"]
    lines += ["| " + " | ".join(cell(v) for v in row) + " |" for row in rows]
    return "\n".join(lines)


def floor_argv(op: str, item_id: str, agent: str = AGENT) -> list[str]:
    return ["bash", str(FLOOR_SH), op, item_id, agent]
