"""Shared fixtures: real git repositories in a scrubbed environment, and ways to run ``gw``.

Tests never mock git. HOME and every GIT_* variable are replaced so a developer's own git
configuration cannot change what a test sees, and no user.name/user.email is configured (as on a CI
machine): gitwork must work without them.
"""

from __future__ import annotations

import atexit
import contextlib
import datetime as dt
import functools
import io
import json
import os
import resource
import shutil
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import freezegun
import pytest
from hypothesis import settings

import gwfork
from gitwork import gitcmd
from gitwork.workplane import Workplane

ROOT = Path(__file__).resolve().parent.parent
T = TypeVar("T")
_monotonic = time.monotonic  # the real one: a test may freeze time (freezegun) while it polls

# freezegun patches the clocks of every loaded module, pytest's own timing module included, so
# `pytest --durations` reported frozen (nonsense) durations for the tests that freeze time.
freezegun.configure(extend_ignore_list=["_pytest.timing"])

# pytest caches each test module with its asserts rewritten (tests/__pycache__/*-pytest-*.pyc) unless
# bytecode writing is off, and PYTHONDONTWRITEBYTECODE=1 (set on the shared machines) turned it off: every
# worker of every run rewrote all ~130 modules again, ~4 s of CPU of its ~6.5 s collection (2026-12-02).
# The suite's own child processes already write bytecode (``scrub_env`` drops that variable), so the tree
# gets __pycache__ folders either way; set before the first test module is imported.
sys.dont_write_bytecode = False


# Every `git cat-file --batch` reader a test starts in this process (Workplane, hook checks). Holding
# the Popen keeps the child's stdin open, so a reader nobody closed stays alive until the check below
# sees it, whether or not the garbage collector has reclaimed its owner.
_readers: list[subprocess.Popen[bytes]] = []
_start_reader = gitcmd.CatFile._start


def _recorded_start(self: gitcmd.CatFile) -> subprocess.Popen[bytes]:
    before = self._proc
    proc = _start_reader(self)
    if proc is not before:
        _readers.append(proc)
    return proc


gitcmd.CatFile._start = _recorded_start  # type: ignore[method-assign]

# Every Workplane a test constructs, so that teardown closes the ones a helper handed out and nobody
# closed (``wp, item = claimed(repo)``): nothing a test opened outlives it.
_planes: list[Workplane] = []
_init_plane = Workplane.__init__


@functools.wraps(_init_plane)  # keeps its signature and docstring for docs/api.md (tests/test_api_docs.py)
def _recorded_init(self: Workplane, *args: Any, **kwargs: Any) -> None:
    _init_plane(self, *args, **kwargs)
    _planes.append(self)


Workplane.__init__ = _recorded_init  # type: ignore[method-assign]


@pytest.fixture(autouse=True)
def no_leaked_reader() -> Iterator[None]:
    """Fail a test that leaves a ``git cat-file --batch`` child running: a Workplane it did not close
    after reading with it. Then close every Workplane the test opened.

    Autouse fixtures are set up first and torn down last, so the test's own fixtures have closed
    their planes by the time this looks."""
    yield
    leaked = [proc for proc in _readers if proc.poll() is None]
    _readers.clear()
    planes = list(_planes)
    _planes.clear()
    for plane in planes:
        plane.close()  # idempotent: closing a closed plane does nothing
    for proc in leaked:
        assert proc.stdin is not None
        proc.stdin.close()  # what CatFile.close does: the reader ends on EOF
        proc.wait(timeout=10)
    if leaked:
        pytest.fail(f"{len(leaked)} `git cat-file --batch` reader(s) left running: close every Workplane "
                    "(`with Workplane(...) as wp:` or a fixture that closes it)", pytrace=False)


def _git_template() -> str:
    """A git template folder with nothing in it but an empty ``hooks/`` and ``info/`` (GIT_TEMPLATE_DIR, issue 26).

    git copies its default template (13 sample hooks, ``description``, ``info/exclude``: ~20 files) into
    every repository it creates, and the suite creates thousands; nothing reads those files (the samples
    never run). The two folders stay, so a test or gw that writes ``.git/hooks/NAME`` finds the folder as
    in a default repository. One per test process, removed when it ends (after every child it waited for)."""
    import tempfile

    folder = tempfile.mkdtemp(prefix="gw-git-template-")
    for sub in ("hooks", "info"):
        os.mkdir(os.path.join(folder, sub))
    atexit.register(shutil.rmtree, folder, ignore_errors=True)
    return folder


GIT_TEMPLATE = _git_template()


def scrub_env(home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for key in list(os.environ):
        if key.startswith(("GIT_", "GW_")):
            monkeypatch.delenv(key, raising=False)
    monkeypatch.setenv("GIT_TEMPLATE_DIR", GIT_TEMPLATE)
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(home / ".config"))
    monkeypatch.setenv("GIT_CONFIG_NOSYSTEM", "1")
    monkeypatch.setenv("NO_COLOR", "1")
    monkeypatch.delenv("PYTHONDONTWRITEBYTECODE", raising=False)


@pytest.fixture(autouse=True)
def clean_env(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    scrub_env(tmp_path_factory.mktemp("home"), monkeypatch)


@contextlib.contextmanager
def scrubbed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """The same scrubbed environment for a module- or session-scoped fixture (built before any
    function-scoped fixture, so ``clean_env`` is not in force yet)."""
    with pytest.MonkeyPatch.context() as monkeypatch:
        scrub_env(tmp_path_factory.mktemp("home"), monkeypatch)
        yield


def copy_world(template: Path, to: Path, clones: dict[str, str]) -> Path:
    """A private copy of a prepared set of repositories (a template built once per module).

    ``clones`` maps a clone's folder (relative to ``template``) to its remote's folder: the copy's
    ``origin`` is pointed at the copied remote, the only absolute path a clone records."""
    shutil.copytree(template, to, symlinks=True)
    for clone, remote in clones.items():
        git(to / clone, "remote", "set-url", "origin", f"file://{to / remote}")
    return to


def git(repo: Path | str, *args: str, check: bool = True, input: bytes | None = None) -> str:
    done = subprocess.run(["git", *args], cwd=repo, capture_output=True, input=input)
    if check and done.returncode != 0:
        raise AssertionError(f"git {' '.join(args)} failed: {done.stderr.decode()}")
    return done.stdout.decode().strip()


def make_repo(path: Path, *, bare: bool = False) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    subprocess.run(["git", "init", "-q", *(["--bare"] if bare else []), str(path)], check=True)
    return path


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    """A fresh, empty, non-bare git repository (no commits, no user identity)."""
    return make_repo(tmp_path / "repo")


@pytest.fixture
def wp(repo: Path):  # type: ignore[no-untyped-def]
    """An initialised work plane on ``repo``."""
    plane = Workplane(str(repo))
    plane.do("init")
    yield plane
    plane.close()


def let_post(repo: Path | str, *names: str) -> None:
    """List ``names`` in the setting ``people`` of ``repo`` (its git config): persons who may post on any
    item's thread (docs/leases.md, "Who may post"), for tests about threads rather than about who may post."""
    subprocess.run(["git", "config", "gitwork.people", ",".join(names)], cwd=repo, check=True)


def tip(repo: Path | str, ref: str = "refs/gitwork/state") -> str | None:
    done = subprocess.run(["git", "rev-parse", "-q", "--verify", ref], cwd=repo, capture_output=True)
    return done.stdout.decode().strip() or None


def gw_cmd(*args: str) -> list[str]:
    return [sys.executable, "-m", "gitwork", *args]


# ``run_gw``'s children are forked from a server that imported gitwork once (tests/gwfork.py): the same
# separate process, without the 30-50 ms of CPU of an interpreter start per call (~1,300 calls a run).
# GW_TESTS_FORK=0 starts every one with `python -m gitwork`, to tell whether a failure depends on it.
FORK = os.environ.get("GW_TESTS_FORK", "1") != "0"


def run_gw(repo: Path | str, *args: str, env: dict[str, str] | None = None, input: str | None = None,
           timeout: float = 60) -> subprocess.CompletedProcess[str]:
    """Run the real ``gw`` in a child process in ``repo``."""
    return run_module(repo, "gitwork", *args, env=env, input=input, timeout=timeout)


def run_module(cwd: Path | str, module: str, *args: str, env: dict[str, str] | None = None, input: str | None = None,
               timeout: float = 60) -> subprocess.CompletedProcess[str]:
    """``python -m MODULE ARGS`` (gitwork or one of its modules: ``gitwork.statecheck``) in a child process in
    ``cwd``, with this process's environment and ``env``: forked like ``run_gw``'s children."""
    full_env = dict(os.environ)
    if env:
        full_env.update(env)
    if FORK:
        done = gwfork.SERVER_OF_THIS_PROCESS.run(args, cwd, full_env, input, timeout, module=module)
        if done is not None:
            return done
    return subprocess.run([sys.executable, "-m", module, *args], cwd=cwd, capture_output=True, text=True,
                          env=full_env, input=input, timeout=timeout)


@pytest.fixture
def gw(repo: Path):  # type: ignore[no-untyped-def]
    def call(*args: str, **kwargs):  # type: ignore[no-untyped-def]
        return run_gw(repo, *args, **kwargs)

    return call


class Clock:
    """An injectable clock (``Workplane(path, now=clock)``): each command sees a controlled instant."""

    def __init__(self, start: dt.datetime = dt.datetime(2030, 1, 1, 12, 0, 0, tzinfo=dt.timezone.utc)) -> None:
        self.at = start

    def __call__(self) -> dt.datetime:
        return self.at

    def advance(self, seconds: float) -> None:
        self.at += dt.timedelta(seconds=seconds)


def pin_arbiter_clock(bare: Path, instant: str) -> None:
    """Make the server hook installed in ``bare`` read ``instant`` as the arbiter's clock (``GW_NOW``).

    The arbiter refuses a state commit dated after its own clock plus ``clock_margin``
    (``gitwork/derive.py``). A test world whose clocks start in 2030 (``Clock``, ``T0``) pins the
    arbiter's clock in that world too; without it the real clock (today) would refuse every commit."""
    hook = bare / "hooks" / "pre-receive"
    first, _, rest = hook.read_text().partition("\n")
    hook.write_text(f"{first}\nGW_NOW={instant}; export GW_NOW\n{rest}")


def bare_remote(tmp_path: Path) -> Path:
    """A bare repository to serve as the arbiter remote."""
    return make_repo(tmp_path / "remote.git", bare=True)


@pytest.fixture(scope="session")
def published_template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """``remote.git`` (a bare arbiter) and machine ``a`` that ran ``gw init --remote origin`` and a first
    ``gw sync`` to it: what most several-machines tests start from, built once per worker."""
    with scrubbed(tmp_path_factory):
        base = tmp_path_factory.mktemp("published")
        bare_remote(base)
        a = make_repo(base / "a")
        git(a, "remote", "add", "origin", f"file://{base / 'remote.git'}")
        for args in (("init", "--remote", "origin"), ("sync",)):
            done = run_gw(a, *args)
            assert done.returncode == 0, done.stderr
    return base


@pytest.fixture
def machine_a(published_template: Path, tmp_path: Path, remote: Path) -> Path:
    """Machine ``a`` publishing to the test's (empty) ``remote``: the same repositories
    ``machine(tmp_path, "a", url, publish=True)`` builds with three processes, copied from the template."""
    shutil.copytree(published_template / "remote.git", remote, symlinks=True, dirs_exist_ok=True)
    shutil.copytree(published_template / "a", tmp_path / "a", symlinks=True)
    git(tmp_path / "a", "remote", "set-url", "origin", f"file://{remote}")
    published = tip(remote)
    assert published is not None and tip(tmp_path / "a") == published
    return tmp_path / "a"


# How hard the property tests search (issue 26): the default run takes the `quick` number of examples of
# each heavy property and state machine (the suite must stay near 3 minutes on 2 cores), and
# `GW_HYPOTHESIS=thorough pytest ...` the `thorough` one (the numbers these tests had before, or more:
# for a change to a model, before a release, or a long run on a spare machine). Neither derandomizes:
# each default run draws new examples, so the runs add up.
HYPOTHESIS_RUNS = ("default", "thorough")


def hypothesis_run() -> str:
    run = os.environ.get("GW_HYPOTHESIS", "") or "default"
    if run not in HYPOTHESIS_RUNS:
        raise pytest.UsageError(f"GW_HYPOTHESIS={run!r}: expected one of {', '.join(HYPOTHESIS_RUNS)}")
    return run


# Shared defaults: no per-example deadline (the machines are shared, an example's time says nothing),
# and the properties without their own `max_examples` take 5 times hypothesis' 100 in the thorough run.
settings.register_profile("default", deadline=None)
settings.register_profile("thorough", deadline=None, max_examples=500)


def load_hypothesis_profile() -> None:
    settings.load_profile(hypothesis_run())


load_hypothesis_profile()


def examples(quick: int, thorough: int) -> int:
    """``max_examples`` for a heavy property: ``quick`` in the default run, ``thorough`` under
    ``GW_HYPOTHESIS=thorough``. Read when the decorator runs (at import)."""
    return thorough if hypothesis_run() == "thorough" else quick


def poll(check: Callable[[], T], timeout: float, interval: float = 0.02, what: str = "the condition") -> T:
    """Call ``check`` every ``interval`` seconds until it returns something true, and return that; fail
    the test after ``timeout`` seconds. The one wait loop of the tests (issue 26): the interval is short
    for a cheap check (a file, a ref), so a test waits for what it waits for and not for the next tick;
    a check that starts a process each time takes a longer one."""
    deadline = _monotonic() + timeout
    while True:
        got = check()
        if got:
            return got
        if _monotonic() > deadline:
            pytest.fail(f"{what} did not happen within {timeout} s", pytrace=False)
        time.sleep(interval)


# GW_TEST_CPU=PATH (issue 26): append one JSON line per test to PATH with the CPU seconds (user + system) each
# phase took in the process that ran it: its own, its reaped children's (git, servers, `python -m gitwork`), and
# its fork server's gw children's (``ForkServer.child_cpu``: grandchildren, not counted as children until the
# server ends). The wall time of a test says little on a shared machine; its CPU is what the other workers lose.
# A child reaped by a later test counts there. Each line also has the test's ``start`` and ``end`` on the machine's
# monotonic clock (seconds; the same clock in every worker): when each worker ended its last test, so the idle
# tail of a run (`python benchmarks/bench_suite.py --record PATH`). Off by default; read at import, before
# clean_env drops GW_*.
CPU_LOG = os.environ.get("GW_TEST_CPU", "")


def cpu_seconds() -> float:
    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return (own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime
            + gwfork.SERVER_OF_THIS_PROCESS.child_cpu)


_phase_cpu: dict[str, dict[str, float]] = {}


def _clock() -> float:
    """The machine's monotonic clock (one for every process of the run, unlike a worker's own start), read
    through ``clock_gettime``, which freezegun leaves alone: a test's start and end as every worker sees them."""
    return time.clock_gettime(time.CLOCK_MONOTONIC)


def _measured(item: pytest.Item, phase: str) -> Iterator[None]:
    cpu, wall = cpu_seconds(), _clock()
    yield
    end = _clock()
    record = _phase_cpu.setdefault(item.nodeid, {})
    record[phase] = round(cpu_seconds() - cpu, 4)
    record[f"{phase}_wall"] = round(end - wall, 4)
    if phase == "setup":
        record["start"] = round(wall, 3)
    if phase == "teardown":
        record["end"] = round(end, 3)
        line = {"test": item.nodeid, "worker": os.environ.get("PYTEST_XDIST_WORKER", "main"), **_phase_cpu.pop(item.nodeid)}
        line["cpu"] = round(sum(line.get(key, 0.0) for key in ("setup", "call", "teardown")), 4)
        fd = os.open(CPU_LOG, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, (json.dumps(line) + "\n").encode())  # one write of O_APPEND: workers' lines do not mix
        finally:
            os.close(fd)


if CPU_LOG:
    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_setup(item: pytest.Item) -> Iterator[None]:
        yield from _measured(item, "setup")

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_call(item: pytest.Item) -> Iterator[None]:
        yield from _measured(item, "call")

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_teardown(item: pytest.Item) -> Iterator[None]:
        yield from _measured(item, "teardown")


def pytest_unconfigure() -> None:
    gwfork.SERVER_OF_THIS_PROCESS.stop()  # waited for: its children's CPU is counted as this process's


# Where the suite writes its files (issue 26). A run creates ~29,000 files and thousands of git
# repositories, and on ext4 the kernel's share was a third of the suite's CPU: inode and block allocation,
# the journal. On a RAM file system (tmpfs) the same tests cost 11-23 % less CPU (2026-12-03, 232 tests
# of five files, -n 2, interleaved: sys 13.6 and 18.2 s on /tmp against 9.0 and 9.2 s on /dev/shm, user
# the same). So the controller puts pytest's basetemp and TMPDIR on /dev/shm where it is a tmpfs that
# allows executables (the tests write hooks and agents and run them) with room for a run and the two
# pytest keeps (~1.2 GB each); anywhere else, or with GW_TEST_TMPFS=0 or --basetemp, nothing changes.
TMPFS = Path("/dev/shm")
TMPFS_ROOM = 8 << 30


def held_project(tmp_path: Path) -> tuple[Path, str]:
    """``tmp_path/proj``: a repository with one commit on ``main``, an initialised work plane and an item
    alice holds (the sessions' starting point); (repository, item)."""
    repo = tmp_path / "proj"
    repo.mkdir()
    git(repo, "init", "-q", "-b", "main")
    (repo / "a.txt").write_text("alpha\n")
    git(repo, "add", "a.txt")
    git(repo, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "-m", "initial")
    with Workplane(str(repo), agent="alice") as wp:
        wp.do("init")
        item = str(wp.do("new", title="Build it").result["item"])
        wp.do("claim", item=item, ttl="1h")
    return repo, item


def end_executions(repo: Path | str) -> None:
    """SIGKILL what the executions of ``repo`` started on this host: each one's recorded process group
    (its ``handle``, ``pid@start``) while that pid still is the process it names, and the groups the
    product's own ``survivors`` finds by their marks (an agent whose pane shell is gone). Never a bare
    pid read from a file: pid_max is 32768 on the test machines, the suite starts hundreds of processes
    a second, and a pid whose process ended may be another test's tmux pane (a session leader: pgid =
    pid) by the time a teardown reads it."""
    import signal

    from gitwork.launch.process import alive
    from gitwork.launch.wrapper import survivors

    for folder in sorted(Path(repo, ".git", "gitwork", "executions").glob("*")):
        groups = set(survivors(str(folder)))
        try:
            pid, _at, start = (folder / "handle").read_text().strip().partition("@")
            if pid.isdigit() and alive(int(pid), start):
                groups.add(int(pid))
        except OSError:
            pass
        for group in groups:
            try:
                os.killpg(group, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass


def live_processes() -> Iterator[tuple[int, list[bytes], int]]:
    """``(pid, argv, parent)`` of every live process on this host, from /proc (zombies and processes gone
    while reading left out): what the launch tests count agents and their wrappers by, with no wait for an
    agent to write anything."""
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/cmdline", "rb") as read:
                argv = read.read().split(b"\0")
            with open(f"/proc/{name}/stat", "rb") as read:
                fields = read.read().rpartition(b")")[2].split()
            state, parent = fields[0], int(fields[1])
        except (OSError, IndexError, ValueError):
            continue
        if state not in (b"Z", b"X"):
            yield int(name), argv, parent


def ram_temp_root(path: Path = TMPFS, room: int = TMPFS_ROOM, mounts: str = "/proc/self/mounts") -> str | None:
    if os.environ.get("GW_TEST_TMPFS") == "0" or "PYTEST_DEBUG_TEMPROOT" in os.environ:
        return None
    try:
        with open(mounts, encoding="utf-8", errors="replace") as table:
            entries = [line.split() for line in table]
        free = os.statvfs(path)
    except OSError:
        return None
    mount = [e for e in entries if len(e) >= 4 and e[1] == str(path)]
    if not mount or mount[-1][2] != "tmpfs" or "noexec" in mount[-1][3].split(","):
        return None
    if free.f_bavail * free.f_frsize < room or not os.access(path, os.W_OK | os.X_OK):
        return None
    return str(path)


# On a fresh clone nothing is compiled yet, and each of `-n auto`'s workers rewrote the asserts of every
# test module (pytest's rewrite: ~8 s of CPU for ~140 modules) and compiled gitwork, all four at once
# and each for itself: ~35 s of CPU, ~16 s of wall on 2 cores, before the first test (2026-12-02). The
# controller now does it once, in two forked processes, before xdist starts its workers (they start at
# session start, after this hook), and the workers find pytest's cached modules (tests/__pycache__/
# *-pytest-*.pyc) and gitwork's bytecode. Only a speed-up: anything it cannot do, a worker does as before.
def pytest_configure(config: pytest.Config) -> None:
    if hasattr(config, "workerinput"):
        return
    ram = ram_temp_root()
    if ram is not None and config.option.basetemp is None:
        os.environ["PYTEST_DEBUG_TEMPROOT"] = ram  # read when xdist asks for the basetemp, after this hook
        os.environ["TMPDIR"] = ram  # tempfile's folders (the state machines' examples), in the workers too
    if os.environ.get("GW_TEST_NO_WARM"):
        return
    try:
        from _pytest.assertion import rewrite

        state = config.stash[rewrite.assertstate_key]
    except (ImportError, AttributeError, KeyError):
        return  # another pytest, or asserts not rewritten (--assert=plain): the workers do what they do

    here = Path(__file__).parent

    def stale(source: Path, cached: Path) -> bool:
        try:
            return cached.stat().st_mtime < source.stat().st_mtime
        except OSError:
            return True

    modules = [fn for fn in sorted(here.glob("test_*.py"))
               if stale(fn, rewrite.get_cache_dir(fn) / (fn.name[:-3] + rewrite.PYC_TAIL))]
    if not modules:
        return  # a warm tree: nothing to do (the usual case after the first run)
    import compileall

    helpers = [here / "harness", *(fn for fn in here.glob("*.py") if not fn.name.startswith("test_")),
               ROOT / "gitwork"]
    halves = [modules[0::2], modules[1::2]]
    children = []
    for n, half in enumerate(halves):
        pid = os.fork()
        if pid == 0:  # a child: rewrite its half, compile its share of the rest, and leave without cleanup
            code = 1
            try:
                for fn in half:
                    source_hash, co = rewrite._rewrite_test(fn, config)
                    cache = rewrite.get_cache_dir(fn)
                    cache.mkdir(exist_ok=True)
                    rewrite._write_pyc(state, co, source_hash, cache / (fn.name[:-3] + rewrite.PYC_TAIL))
                for target in helpers[n::2]:
                    if target.is_dir():
                        compileall.compile_dir(str(target), quiet=2)
                    else:
                        compileall.compile_file(str(target), quiet=2)
                code = 0
            finally:
                os._exit(code)
        children.append(pid)
    for pid in children:
        os.waitpid(pid, 0)


# Workers per core for `pytest -n auto` (.ci/run, the README): a third of two cores idled with one worker
# per core (2026-12-02: 292 s of CPU in 226 s of wall on 2 idle cores, 128 %), as the tests wait on
# subprocesses, servers and polls. The bound keeps a many-core machine from starting a worker per thread
# of its memory's worth. PYTEST_XDIST_AUTO_NUM_WORKERS (xdist's own setting) still wins.
WORKERS_PER_CORE = 2
MAX_AUTO_WORKERS = 16


def auto_workers(cores: int) -> int:
    return max(1, min(WORKERS_PER_CORE * cores, MAX_AUTO_WORKERS))


def pytest_xdist_auto_num_workers(config: pytest.Config) -> int | None:
    """``-n auto``: ``auto_workers`` of the cores this process may run on; None leaves it to xdist's
    own hook when PYTEST_XDIST_AUTO_NUM_WORKERS is set."""
    if os.environ.get("PYTEST_XDIST_AUTO_NUM_WORKERS"):
        return None
    return auto_workers(len(os.sched_getaffinity(0)))


def first_chunks(count: int, workers: int) -> list[int]:
    """The sizes of the first batches xdist's ``worksteal`` scheduler sends to ``workers`` idle workers
    out of ``count`` tests (``WorkStealingScheduling.check_schedule``: each takes an equal share of what
    is left, in collection order). Stealing later takes from the tails, never from these heads."""
    sizes = []
    for left in range(workers, 0, -1):
        sizes.append(count // left)
        count -= sizes[-1]
    return sizes


# The longest tests, in seconds on an idle 2-core machine (2026-12-02 12:25, main at dac17af, `-n 2`): dealt
# first, each to the worker with the least known work, so they start together at the beginning instead of
# one after the other on one worker. A slow test not named here counts as SLOW_SECONDS. Only the order
# depends on these numbers; tests/test_suite_speed.py checks that each one still names a collected test.
LONGEST = {
    "tests/test_system_harness.py::test_fixed_seed": 24.8,
    "tests/test_system_harness.py::test_fixed_seed_batch": 23.9,
    "tests/test_sync_faults.py::test_sigkill_at_random_moments_of_a_looping_claimer": 13.2,
    "tests/test_readme.py::test_the_install_line_installs_and_runs_the_demo": 6.3,
    "tests/test_lint.py::test_mypy_finds_nothing_in_gitwork_and_its_settings_are_in_force": 6.0,
    "tests/test_add_op_howto.py::test_following_the_howto_adds_an_op_and_a_verb_that_pass_the_tests": 5.4,
}
SLOW_SECONDS = 2.0


def slow_first(items: list[T], seconds: Callable[[T], float | None], workers: int) -> list[T]:
    """``items`` reordered so that each of ``workers`` workers starts with its share of the long tests
    (``seconds`` of a long test, None for the others): longest first, each to the worker with the least
    known work so far, at the head of that worker's first batch (``first_chunks``), the others after
    them in collection order. Without it (all long tests first), worksteal's first batch for one worker
    held every long test and that worker ran them one after the other (~300 s of a 400 s run under
    load) while the others ran the short ones."""
    workers = max(workers, 1)
    costs = [seconds(item) for item in items]
    slow = [(cost, index) for index, cost in enumerate(costs) if cost is not None]
    slow.sort(key=lambda pair: -pair[0])  # stable: equal costs keep collection order, on every worker
    heads: list[list[T]] = [[] for _ in range(workers)]
    loads = [0.0] * workers
    for cost, index in slow:
        least = loads.index(min(loads))
        heads[least].append(items[index])
        loads[least] += cost
    rest = [item for item, cost in zip(items, costs, strict=True) if cost is None]
    ordered: list[T] = []
    for head, size in zip(heads, first_chunks(len(items), workers), strict=True):
        fill = max(size - len(head), 0)
        ordered += head + rest[:fill]
        del rest[:fill]
    return ordered + rest


def expected_seconds(item: pytest.Item) -> float | None:
    if item.get_closest_marker("slow") is None:
        return None
    return LONGEST.get(item.nodeid, SLOW_SECONDS)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Run the long tests (marked ``slow``) first, spread over the workers (``slow_first``): they start
    together at the beginning and the many short tests fill in at the end, instead of one worker
    finishing a 30 s race alone while the other idles. Deterministic: every worker collects the same
    order (xdist checks it), since each sees the same PYTEST_XDIST_WORKER_COUNT."""
    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
    items[:] = slow_first(items, expected_seconds, workers)


def hand_off_old_basetemps(root: Path, keep: int) -> list[Path]:
    """Move the numbered basetemps pytest deletes when a session ends (all but the ``keep`` latest
    ``pytest-N`` under ``root``) to ``root/detached-*``, and delete those in a process of their own that
    the run does not wait for. Returns what it handed off.

    pytest deletes them in the controller before the run's "in N s", and ``/tmp/pytest-of-USER`` holds
    every run of the user: a whole suite's basetemp is ~29,000 files (git repositories), 5 s to delete at
    load 7 and up to 107 s under load (2026-12-02). A folder with a ``.lock`` (a session still running)
    is left to pytest's own rule; ``detached-*`` left by a deleter that was killed are handed off again."""
    from _pytest.pathlib import cleanup_candidates, get_lock_path

    moved: list[Path] = []
    for path in cleanup_candidates(root, "pytest-", keep):
        if path.is_symlink() or get_lock_path(path).exists():
            continue
        target = root / f"detached-{uuid.uuid4().hex}"
        try:
            path.rename(target)  # one rename, however many files: pytest then finds nothing to delete
        except OSError:
            continue  # another session's end took it first
        moved.append(target)
    moved += [path for path in root.glob("detached-*") if path not in moved]
    if moved:
        subprocess.Popen(["rm", "-rf", "--", *map(str, moved)], start_new_session=True, stdin=subprocess.DEVNULL,
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return moved


@pytest.hookimpl(tryfirst=True)
def pytest_sessionfinish(session: pytest.Session) -> None:
    """Before pytest's own clean-up of old basetemps (tmpdir's ``pytest_sessionfinish``), hand them off.
    Only where pytest would delete them: the controller (or a run without xdist) with no ``--basetemp``."""
    factory = getattr(session.config, "_tmp_path_factory", None)
    basetemp = getattr(factory, "_basetemp", None)
    if (hasattr(session.config, "workerinput") or basetemp is None
            or getattr(factory, "_given_basetemp", None) is not None):
        return
    hand_off_old_basetemps(basetemp.parent, getattr(factory, "_retention_count", 3))


def init_state(repo: Path | str) -> None:
    """``gw init`` through the library, for tests where the set-up is not what is under test."""
    with Workplane(str(repo)) as plane:
        plane.do("init")


@pytest.fixture
def remote(tmp_path: Path) -> Path:
    return bare_remote(tmp_path)


@pytest.fixture
def url(remote: Path) -> str:
    return f"file://{remote}"


def second_clone(url: str, where: Path) -> Path:
    """Another machine: a clone of the arbiter at ``url`` in ``where``, with ``gw init --remote origin`` run."""
    subprocess.run(["git", "clone", "-q", url, str(where)], check=True, capture_output=True)
    assert run_gw(where, "init", "--remote", "origin").returncode == 0
    return where


def replace_blob(repo: Path, path: str, data: bytes) -> str:
    """Commit, on top of the state ref, a tree where ``path`` holds ``data``; return the new tip."""
    index = repo / ".git" / "crafted-index"
    env = {**os.environ, "GIT_INDEX_FILE": str(index), "GIT_AUTHOR_NAME": "crafter",
           "GIT_AUTHOR_EMAIL": "c@example.com", "GIT_COMMITTER_NAME": "crafter", "GIT_COMMITTER_EMAIL": "c@example.com"}

    def plumb(*args: str, input: bytes | None = None) -> str:
        done = subprocess.run(["git", *args], cwd=repo, env=env, input=input, capture_output=True, check=True)
        return done.stdout.decode().strip()

    plumb("read-tree", "refs/gitwork/state")
    blob = plumb("hash-object", "-w", "--stdin", input=data)
    plumb("update-index", "--add", "--cacheinfo", f"100644,{blob},{path}")
    tree = plumb("write-tree")
    commit = plumb("commit-tree", tree, "-p", "refs/gitwork/state", "-m", f"crafted {path}")
    plumb("update-ref", "refs/gitwork/state", commit)
    index.unlink()
    return commit


@contextlib.contextmanager
def environment(env: dict[str, str] | None) -> Iterator[None]:
    """Set ``env`` in this process for the block (in-process CLI calls), then restore what was there."""
    saved = {key: os.environ.get(key) for key in env or {}}
    os.environ.update(env or {})
    try:
        yield
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def gw_here(repo: Path | str, *args: str, env: dict[str, str] | None = None,
            input: str | None = None) -> subprocess.CompletedProcess[str]:
    """``gw *args`` in ``repo`` through the CLI's entry point (``gitwork.cli.main.main``, what ``python -m
    gitwork`` runs) in this process: the same parsing, engine, git calls and output as ``run_gw``, with
    its own working directory, environment, stdin, stdout and stderr, without a 0.1-0.3 s interpreter
    start. For set-up and for invariants about what gw does to refs; where the invariant is about the
    process (its exit, signals, kill -9, races between processes, a timeout), use ``run_gw``."""
    from gitwork.cli.main import main

    out, err, cwd, stdin = io.StringIO(), io.StringIO(), os.getcwd(), sys.stdin
    try:
        os.chdir(repo)
        sys.stdin = io.StringIO(input or "")
        with environment(env), contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                code = main(list(args))
            except SystemExit as stop:  # what the interpreter would turn into the exit status
                code = stop.code if isinstance(stop.code, int) else (0 if stop.code is None else 1)
    finally:
        sys.stdin = stdin
        os.chdir(cwd)
    return subprocess.CompletedProcess(["gw", *args], code, out.getvalue(), err.getvalue())
