"""Build identity stamped at build time (issue 28 point 7): real wheels built by hatchling with
``hatch_build.py`` from two commits of a copy of this source tree, unpacked side by side. Each reports
the commit it was built from (before the stamp both said ``{0.1.0, "release"}`` and passed the check),
and a ``gw run`` of one beside a live ``gw coordinate`` of the other is refused (exit 9, build-mismatch).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
import zipfile
from pathlib import Path

import pytest

from conftest import git, tip
from gitwork.workplane import Workplane

SOURCE = Path(__file__).resolve().parent.parent
pytest.importorskip("hatchling")


def build(src: Path, out: Path) -> Path:
    """A wheel of ``src`` (hatchling's own backend, as pip would call it), unpacked into ``out``."""
    temp = out / "temp"  # the build's temporary folders, to see that it leaves none behind
    temp.mkdir(parents=True)
    made = subprocess.run([sys.executable, "-c", "import hatchling.build as b, sys; print(b.build_wheel(sys.argv[1]))",
                           str(out / "dist")], cwd=src, capture_output=True, text=True, timeout=120,
                          env={**os.environ, "TMPDIR": str(temp)})
    assert made.returncode == 0, made.stderr
    assert list(temp.iterdir()) == []
    with zipfile.ZipFile(out / "dist" / made.stdout.strip().splitlines()[-1]) as wheel:
        wheel.extractall(out / "site")
    return out / "site"


def installed(site: Path, *args: str, cwd: Path, **env: str) -> subprocess.CompletedProcess[str]:
    """``python -m gitwork ARGS`` running the unpacked wheel (not this checkout)."""
    full = {**os.environ, "PYTHONPATH": str(site), **env}
    return subprocess.run([sys.executable, "-m", "gitwork", *args], cwd=cwd, env=full, capture_output=True,
                          text=True, timeout=120)


def build_of(site: Path, cwd: Path) -> dict[str, str]:
    done = subprocess.run([sys.executable, "-c", "import json, gitwork, gitwork.launch.build as b; "
                           "print(json.dumps([gitwork.__file__, b.current()]))"],
                          cwd=cwd, env={**os.environ, "PYTHONPATH": str(site)}, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    where, current = json.loads(done.stdout)
    assert where.startswith(str(site))  # the wheel's gitwork, not this checkout
    return dict(current)


@pytest.mark.slow
def test_wheels_carry_their_commit_and_a_coordinator_and_worker_of_two_commits_refuse(tmp_path: Path) -> None:
    src = tmp_path / "src"
    shutil.copytree(SOURCE, src, ignore=shutil.ignore_patterns(".git", ".venv", "__pycache__", "*.pyc", "_build.py",
                                                                ".worktrees", "*_cache", "benchmarks", "tests"))
    git(src, "init", "-q")
    git(src, "add", "-A")
    git(src, "-c", "user.name=b", "-c", "user.email=b@b", "commit", "-q", "-m", "one")
    first = git(src, "rev-parse", "HEAD")
    one = build(src, tmp_path / "one")
    # The wheel's `gw` is gitwork/cli/script.py as a script (the installer writes its interpreter into
    # `#!python`; pip keeps the mode the wheel gives it, so executable there), and no console-script
    # wrapper of pip's is asked for beside it.
    [script] = one.glob("gitwork-*.data/scripts/gw")
    assert script.read_bytes().startswith(b"#!python\n") and b"from gitwork.cli.main import main" in script.read_bytes()
    assert not list(one.glob("gitwork-*.dist-info/entry_points.txt"))
    [wheel] = (tmp_path / "one" / "dist").glob("*.whl")
    with zipfile.ZipFile(wheel) as read:
        assert read.getinfo(script.relative_to(one).as_posix()).external_attr >> 16 & 0o111 == 0o111
    (src / "README.md").write_text((src / "README.md").read_text() + "\nA second commit.\n")
    git(src, "-c", "user.name=b", "-c", "user.email=b@b", "commit", "-q", "-am", "two")
    second = git(src, "rev-parse", "HEAD")
    two = build(src, tmp_path / "two")
    repo = tmp_path / "repo"
    repo.mkdir()
    git(repo, "init", "-q")
    assert build_of(one, repo)["commit"] == first and build_of(two, repo)["commit"] == second
    # A wheel built from a tree with uncommitted changes says so.
    (src / "README.md").write_text("changed, not committed\n")
    assert build_of(build(src, tmp_path / "dirty"), repo)["commit"] == f"{second}-dirty"

    with Workplane(str(repo), agent="setup") as plane:
        plane.do("init")
        item = plane.do("new", title="run me").result["item"]
    coordinator = subprocess.Popen([sys.executable, "-m", "gitwork", "coordinate", "--interval", "1s"], cwd=repo,
                                   env={**os.environ, "PYTHONPATH": str(one), "GW_AGENT": "coord"},
                                   stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True)
    try:
        deadline = time.monotonic() + 60
        while "coord-lease" not in git(repo, "log", "--format=%s", "refs/gitwork/state"):
            assert coordinator.poll() is None and time.monotonic() < deadline, "the coordinator never took its lease"
            time.sleep(0.1)
        before = tip(repo)
        done = installed(two, "run", item, "--backend", "subprocess", "--as", "alice", "--", "cat", cwd=repo)
        assert done.returncode == 9 and "build-mismatch" in done.stderr, done.stderr
        assert first[:12] in done.stderr and second[:12] in done.stderr and "same build" in done.stderr
        assert len(done.stderr.strip().splitlines()) == 1
        assert tip(repo) == before  # nothing reserved, nothing claimed
    finally:
        os.killpg(coordinator.pid, signal.SIGTERM)
        coordinator.wait(timeout=30)
