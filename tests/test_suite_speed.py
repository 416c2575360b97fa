"""What keeps the suite near 3 minutes on 2 cores (issue 26) without weakening a test: the CLI builds its
click command once per process, the property tests' budget is chosen by ``GW_HYPOTHESIS``, and the tests
wait with one ``poll`` helper, ``-n auto`` starts two workers per core, and each worker starts with its share of
the long tests. Each check here fails if its mechanism is removed."""

from __future__ import annotations

import os
import time
from pathlib import Path
from types import SimpleNamespace

import pytest
import typer
from hypothesis import settings

from conftest import (
    LONGEST,
    ROOT,
    auto_workers,
    examples,
    gw_here,
    hand_off_old_basetemps,
    load_hypothesis_profile,
    poll,
    pytest_xdist_auto_num_workers,
    ram_temp_root,
    slow_first,
)
from gitwork.cli import app as cli_app


def test_the_click_command_is_built_once_per_process(repo: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Building it reads every verb's signature and type hints (~0.13 s): a process that runs several
    typer-path commands through ``main`` pays that once, not once per command."""
    builds: list[object] = []
    real = typer.main.get_command

    def counted(app: typer.Typer) -> object:
        builds.append(app)
        return real(app)

    monkeypatch.setattr(typer.main, "get_command", counted)
    cache_clear = getattr(getattr(cli_app, "_command", None), "cache_clear", None)
    if cache_clear is not None:
        cache_clear()  # the first call below builds it, whatever the tests before it ran
    for argv in (["init"], ["new", "--help"], ["remote", "--help"], ["new", "--bogus"]):
        gw_here(repo, *argv)
        cli_app.run_app([*argv, "-C", str(repo)])
    assert len(builds) == 1, f"the click command was built {len(builds)} times for 8 commands"


def test_the_hypothesis_budget_follows_gw_hypothesis(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("GW_HYPOTHESIS", raising=False)
    assert examples(quick=5, thorough=40) == 5
    monkeypatch.setenv("GW_HYPOTHESIS", "thorough")
    assert examples(quick=5, thorough=40) == 40
    monkeypatch.setenv("GW_HYPOTHESIS", "thorugh")  # a typo is refused, not silently the quick run
    with pytest.raises(pytest.UsageError, match="thorugh"):
        examples(quick=5, thorough=40)


def test_a_thorough_run_loads_the_thorough_profile(monkeypatch: pytest.MonkeyPatch) -> None:
    """In a thorough run, a property without its own count takes 500 examples; by default hypothesis' 100.
    Neither has a per-example deadline."""
    monkeypatch.setenv("GW_HYPOTHESIS", "thorough")
    try:
        load_hypothesis_profile()
        assert (settings.default.max_examples, settings.default.deadline) == (500, None)
    finally:
        monkeypatch.delenv("GW_HYPOTHESIS")
        load_hypothesis_profile()
    assert (settings.default.max_examples, settings.default.deadline) == (100, None)


def test_poll_returns_the_first_answer_and_fails_after_its_timeout() -> None:
    calls: list[float] = []

    def third_time() -> str:
        calls.append(time.monotonic())
        return "ready" if len(calls) == 3 else ""  # false until the third call

    assert poll(third_time, timeout=5, interval=0.01) == "ready"
    assert len(calls) == 3 and calls[-1] - calls[0] < 1  # a short interval: no waiting for a slow tick
    started = time.monotonic()
    with pytest.raises(pytest.fail.Exception, match="the server did not happen within 0.2 s"):
        poll(lambda: False, timeout=0.2, interval=0.05, what="the server")
    assert 0.2 <= time.monotonic() - started < 2


def test_the_verbs_annotations_are_objects_not_strings_typer_must_evaluate() -> None:
    """typer reads every verb's parameters on each build of the click command; string annotations (``from
    __future__ import annotations`` in gitwork/cli/app.py) made it ``eval`` each one again, about 70 % of
    the build (0.117 s against 0.034 s of CPU measured on 2026-12-02): every typer-path ``gw`` pays the build."""
    import inspect

    from gitwork.cli.app import peer_app

    commands = [*cli_app.app.registered_commands, *peer_app().registered_commands]
    for group in cli_app.app.registered_groups:
        assert group.typer_instance is not None
        commands += group.typer_instance.registered_commands
    assert len(commands) > 50
    for command in commands:
        assert command.callback is not None
        annotations = inspect.get_annotations(inspect.unwrap(command.callback))
        strings = {name: value for name, value in annotations.items() if isinstance(value, str)}
        assert not strings, f"{command.callback.__name__}: string annotations {strings}"


class FakeNode:
    """What xdist's scheduler needs of a worker: whether it is shutting down, and a way to send it tests."""

    def __init__(self, name: str) -> None:
        self.gateway = SimpleNamespace(id=name)
        self.shutting_down, self.sent = False, []  # type: bool, list[int]

    def send_runtest_some(self, indices: list[int]) -> None:
        self.sent += indices


def first_batches(collection: list[str], workers: int) -> list[list[str]]:
    """The tests xdist's own ``worksteal`` scheduler (``--dist worksteal``, pyproject.toml) first sends each
    of ``workers`` workers that collected ``collection``."""
    from xdist.scheduler.worksteal import WorkStealingScheduling

    config = SimpleNamespace(getvalue=lambda name: [f"{workers}*popen"] if name == "tx" else None)
    sched = WorkStealingScheduling(config)  # type: ignore[arg-type]
    nodes = [FakeNode(f"gw{i}") for i in range(workers)]
    for node in nodes:
        sched.add_node(node)  # type: ignore[arg-type]
        sched.add_node_collection(node, collection)  # type: ignore[arg-type]
    sched.schedule()
    return [[collection[i] for i in node.sent] for node in nodes]


@pytest.mark.parametrize("workers", [1, 2, 3, 4, 7])
def test_each_worker_starts_with_its_share_of_the_long_tests(workers: int) -> None:
    """Sorting the long tests to the front made worksteal's first batch for one worker hold all of them:
    that worker ran them one after the other (~300 s of a 400 s run) while the others ran the short ones.
    Dealt by ``slow_first``, each worker's first batch begins with its share, longest first, and the
    shares differ by at most one long test's time."""
    collection = [f"t{i}" for i in range(3000)]
    cost = {name: 2.0 for name in collection[7::61]} | {"t1500": 25.0, "t1501": 24.0, "t2999": 13.0}
    ordered = slow_first(collection, cost.get, workers)
    assert sorted(ordered) == sorted(collection)  # the same tests, each once
    batches = first_batches(ordered, workers)
    assert sorted(sum(batches, [])) == sorted(collection)  # the first batches hand out every test
    shares = [[name for name in batch if name in cost] for batch in batches]
    assert sorted(sum(shares, [])) == sorted(cost)
    for batch, share in zip(batches, shares, strict=True):
        assert batch[:len(share)] == share  # its long tests first, before any short one
        assert [cost[name] for name in share] == sorted((cost[name] for name in share), reverse=True)
    loads = [sum(cost[name] for name in share) for share in shares]
    assert max(loads) - min(loads) <= 25.0
    if workers >= 3:  # the three longest (one file's two 24 s seeds, a 13 s kill -9 race) start at once
        assert {"t1500", "t1501", "t2999"} <= {share[0] for share in shares}


def test_the_longest_tests_named_for_the_order_exist_and_are_marked_slow() -> None:
    """A renamed or deleted test in LONGEST would silently lose its place at the start of the run."""
    import importlib

    for nodeid in LONGEST:
        path, name = nodeid.split("::")
        assert (ROOT / path).is_file(), f"LONGEST names {nodeid}: no such file"
        module = importlib.import_module(Path(path).stem)
        test = getattr(module, name, None)
        assert callable(test), f"LONGEST names {nodeid}, which is not a test"
        on_module = getattr(module, "pytestmark", [])  # one mark or a list of them
        marks = [*getattr(test, "pytestmark", []), *(on_module if isinstance(on_module, list) else [on_module])]
        assert any(mark.name == "slow" for mark in marks), f"{nodeid} is not marked slow: it would not go first"


def test_auto_starts_two_workers_per_core_within_a_bound(monkeypatch: pytest.MonkeyPatch) -> None:
    assert [auto_workers(cores) for cores in (1, 2, 4, 8, 64)] == [2, 4, 8, 16, 16]
    monkeypatch.delenv("PYTEST_XDIST_AUTO_NUM_WORKERS", raising=False)
    assert pytest_xdist_auto_num_workers(None) == auto_workers(len(os.sched_getaffinity(0)))  # type: ignore[arg-type]
    monkeypatch.setenv("PYTEST_XDIST_AUTO_NUM_WORKERS", "3")  # xdist's own setting: its hook reads it
    assert pytest_xdist_auto_num_workers(None) is None  # type: ignore[arg-type]


def test_the_rewritten_test_modules_are_cached_whatever_pythondontwritebytecode_says() -> None:
    """Each worker collects every test module; from a cached rewrite that is ~2.5 s of CPU, rewriting them
    all again ~6.5 s (2026-12-02). This module was imported in this run, so its cache entry was written."""
    import sys

    from _pytest.assertion.rewrite import PYC_TAIL

    assert not sys.dont_write_bytecode
    here = Path(__file__)
    assert (here.parent / "__pycache__" / (here.name[:-3] + PYC_TAIL)).is_file()


def test_old_basetemps_are_handed_off_to_a_deleter_the_run_does_not_wait_for(tmp_path: Path) -> None:
    """What pytest would delete at the end of the session (all but the 3 latest ``pytest-N``) is moved
    aside at once and deleted by a process of its own; a locked one (a session still running), the 3
    latest and the ``pytest-current`` link stay."""
    root = tmp_path / "pytest-of-someone"
    for n in range(1, 7):
        (root / f"pytest-{n}" / "repo" / ".git").mkdir(parents=True)
        (root / f"pytest-{n}" / "repo" / ".git" / "HEAD").write_text("ref: refs/heads/main\n")
    (root / "pytest-2" / ".lock").write_text("")
    (root / "pytest-current").symlink_to(root / "pytest-6")
    moved = hand_off_old_basetemps(root, keep=3)
    assert len(moved) == 2 and all(path.name.startswith("detached-") for path in moved)
    assert sorted(path.name for path in root.glob("pytest-*")) == [
        "pytest-2", "pytest-4", "pytest-5", "pytest-6", "pytest-current"]
    poll(lambda: not any(path.exists() for path in moved), timeout=30, what="the deleter to finish")
    assert hand_off_old_basetemps(root, keep=3) == []  # nothing left to hand off


@pytest.mark.parametrize(("line", "room", "chosen"), [
    ("tmpfs {path} tmpfs rw,nosuid,nodev 0 0", 1, True),
    ("tmpfs {path} tmpfs rw,nosuid,nodev,noexec 0 0", 1, False),  # the tests run hooks and agents they write
    ("/dev/vda {path} ext4 rw,relatime 0 0", 1, False),  # a disk: nothing to gain
    ("tmpfs /elsewhere tmpfs rw 0 0", 1, False),  # not mounted at the folder asked about
    ("tmpfs {path} tmpfs rw 0 0", 1 << 62, False),  # no room for a run
])
def test_the_basetemp_goes_to_a_tmpfs_only_where_it_can_run_the_suite(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, line: str, room: int, chosen: bool) -> None:
    mounts = tmp_path / "mounts"
    mounts.write_text(f"proc /proc proc rw 0 0\n{line.format(path=tmp_path)}\n")
    monkeypatch.delenv("PYTEST_DEBUG_TEMPROOT", raising=False)
    monkeypatch.delenv("GW_TEST_TMPFS", raising=False)
    assert ram_temp_root(tmp_path, room, str(mounts)) == (str(tmp_path) if chosen else None)
    if chosen:
        monkeypatch.setenv("GW_TEST_TMPFS", "0")
        assert ram_temp_root(tmp_path, room, str(mounts)) is None
        monkeypatch.delenv("GW_TEST_TMPFS")
        monkeypatch.setenv("PYTEST_DEBUG_TEMPROOT", "/somewhere")  # the user's own choice wins
        assert ram_temp_root(tmp_path, room, str(mounts)) is None
