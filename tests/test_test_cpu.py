"""``GW_TEST_CPU=PATH`` (tests/conftest.py, issue 26): one JSON line per test with the CPU of its set-up, call
and teardown, counting what the test's own process spent, the children it reaped, and the ``gw`` children of
its fork server (tests/gwfork.py: grandchildren, which RUSAGE_CHILDREN sees only when the server ends), and its
start and end on the machine's monotonic clock. Off by default. Each check fails if its part of the record is lost."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from conftest import ROOT

INNER = '''
import subprocess, sys, time
from pathlib import Path

import gwfork
from conftest import make_repo, run_gw

SPIN = "import time\\nend = time.process_time() + 0.2\\nwhile time.process_time() < end: pass"


def test_spins_here() -> None:
    exec(SPIN)


def test_spins_in_a_child() -> None:
    subprocess.run([sys.executable, "-c", SPIN], check=True)


def test_runs_gw_through_the_fork_server(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "repo")
    before = gwfork.SERVER_OF_THIS_PROCESS.child_cpu
    for args in (("init",), ("new", "one"), ("list",)):
        assert run_gw(repo, *args).returncode == 0
    spent = gwfork.SERVER_OF_THIS_PROCESS.child_cpu - before
    # the fork server's share, for the outer test to compare with the record
    (Path(__file__).parent / "forked.txt").write_text(repr(spent))
'''


def inner_run(tmp_path: Path, log: Path | None, *select: str) -> subprocess.CompletedProcess[str]:
    (tmp_path / "test_inner.py").write_text(INNER)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "tests"), str(ROOT)])}
    env.pop("GW_TEST_CPU", None)
    if log is not None:
        env["GW_TEST_CPU"] = str(log)
    # conftest loaded as a plugin: the folder is outside tests/, so pyproject's options and the suite's
    # collection order stay out of it.
    return subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-p", "conftest", "-q",
                           "-p", "no:schemathesis", str(tmp_path / "test_inner.py"), *select],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)  # a bound for a stuck run, not a speed


def test_each_test_gets_one_line_with_its_own_and_its_childrens_cpu(tmp_path: Path) -> None:
    log = tmp_path / "cpu.jsonl"
    done = inner_run(tmp_path, log)
    assert done.returncode == 0, done.stdout + done.stderr
    lines = [json.loads(line) for line in log.read_text().splitlines()]
    by_name = {line["test"].rpartition("::")[2]: line for line in lines}
    assert len(lines) == 3 and set(by_name) == {
        "test_spins_here", "test_spins_in_a_child", "test_runs_gw_through_the_fork_server"}
    for line in lines:
        assert {"setup", "call", "teardown", "cpu", "worker", "start", "end"} <= set(line), line
        assert abs(line["cpu"] - (line["setup"] + line["call"] + line["teardown"])) < 0.01, line
        # start and end on one clock (bench_suite's idle tail): they span the three phases
        walls = line["setup_wall"] + line["call_wall"] + line["teardown_wall"]
        assert line["end"] - line["start"] >= walls - 0.01, line
    ordered = sorted(lines, key=lambda line: line["start"])  # one process: one test after the other
    assert all(a["end"] <= b["start"] + 0.001 for a, b in zip(ordered, ordered[1:], strict=False)), ordered
    assert by_name["test_spins_here"]["call"] >= 0.2  # this process's own CPU
    assert by_name["test_spins_in_a_child"]["call"] >= 0.2  # a child it reaped
    forked = float((tmp_path / "forked.txt").read_text())
    assert forked > 0  # gwfork reports each gw child's CPU with its exit status
    assert by_name["test_runs_gw_through_the_fork_server"]["call"] >= forked  # and the record counts it


def test_nothing_is_written_without_the_variable(tmp_path: Path) -> None:
    """The inner test that runs gw through the fork server (every hook of the record would fire for any
    test; the two that spin 0.4 s of CPU between them add nothing here)."""
    done = inner_run(tmp_path, None, "-k", "test_runs_gw_through_the_fork_server")
    assert done.returncode == 0 and "1 passed" in done.stdout, done.stdout + done.stderr
    assert not list(tmp_path.glob("*.jsonl"))
