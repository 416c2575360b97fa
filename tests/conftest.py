"""Shared fixtures: real git repositories in a scrubbed environment, and ways to run ``gw``.

Tests never mock git. HOME and every GIT_* variable are replaced so a developer's own git
configuration cannot change what a test sees, and no user.name/user.email is configured (as on a CI
machine): gitwork must work without them.
"""

from __future__ import annotations

import datetime as dt
import os
import subprocess
import sys
from pathlib import Path

import freezegun
import pytest

from gitwork.workplane import Workplane

ROOT = Path(__file__).resolve().parent.parent

# freezegun patches the clocks of every loaded module, pytest's own timing module included, so
# `pytest --durations` reported frozen (nonsense) durations for the tests that freeze time.
freezegun.configure(extend_ignore_list=["_pytest.timing"])


@pytest.fixture(autouse=True)
def clean_env(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    home = tmp_path_factory.mktemp("home")
    for key in list(os.environ):
        if key.startswith(("GIT_", "GW_")):
            monkeypatch.delenv(key, raising=False)
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(home / ".config"))
    monkeypatch.setenv("GIT_CONFIG_NOSYSTEM", "1")
    monkeypatch.setenv("NO_COLOR", "1")
    monkeypatch.delenv("PYTHONDONTWRITEBYTECODE", raising=False)


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


def tip(repo: Path | str, ref: str = "refs/gitwork/state") -> str | None:
    done = subprocess.run(["git", "rev-parse", "-q", "--verify", ref], cwd=repo, capture_output=True)
    return done.stdout.decode().strip() or None


def gw_cmd(*args: str) -> list[str]:
    return [sys.executable, "-m", "gitwork", *args]


def run_gw(repo: Path | str, *args: str, env: dict[str, str] | None = None, input: str | None = None,
           timeout: float = 60) -> subprocess.CompletedProcess[str]:
    """Run the real ``gw`` in a child process in ``repo``."""
    full_env = dict(os.environ)
    if env:
        full_env.update(env)
    return subprocess.run(gw_cmd(*args), cwd=repo, capture_output=True, text=True, env=full_env, input=input,
                          timeout=timeout)


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


def bare_remote(tmp_path: Path) -> Path:
    """A bare repository to serve as the arbiter remote."""
    return make_repo(tmp_path / "remote.git", bare=True)
