"""The README's shell examples are run as written (issue 25, point 3).

Each fenced ``sh``/``console`` block of README.md is taken from the file at test time, not copied
here, so an edit to the README is what gets run:

- "A real session" (``console``): every ``$ `` line runs, in order, in one bash process on a fresh
  repository ("What no tracker has", the other ``console`` block, is run by test_readme_notracker.py); the transcript (stdout and stderr as a terminal shows them, ``[exit N]`` after a
  refusal) must equal the README's, once ids, hashes and instants are masked.
- "In a shell loop" (``sh``): run verbatim over a few items, one of them with an unchecked criterion
  (so ``gw done`` is refused, exit 6). It must end by itself (``claim --next`` exit 3) within a
  bounded number of state commits, every other item done, the refused one blocked with its reason.
- The install line (``sh``): run verbatim in a copy of this tree (pip from the local index).
- The test-suite line runs the whole suite, so it is not run from inside the suite: it is checked to
  be valid shell naming files and extras that exist.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import tomllib

from conftest import git, tip

ROOT = Path(__file__).resolve().parent.parent
FENCE = re.compile(r"^```(\w+)\n(.*?)^```$", re.MULTILINE | re.DOTALL)


def blocks(language: str) -> list[str]:
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    return [body for lang, body in FENCE.findall(text) if lang == language]


def shell_block(containing: str) -> str:
    found = [body for body in blocks("sh") if containing in body]
    assert len(found) == 1, f"README.md has {len(found)} sh blocks containing {containing!r}"
    return found[0]


def console_block(containing: str) -> str:
    found = [body for body in blocks("console") if containing in body]
    assert len(found) == 1, f"README.md has {len(found)} console blocks containing {containing!r}"
    return found[0]


def gw_on_path(tmp: Path) -> dict[str, str]:
    """An environment whose ``gw`` is this tree's (the README calls ``gw`` by name)."""
    bin_dir = tmp / "bin"
    bin_dir.mkdir(exist_ok=True)
    wrapper = bin_dir / "gw"
    wrapper.write_text(f'#!/bin/sh\nexec "{sys.executable}" -m gitwork "$@"\n', encoding="utf-8")
    wrapper.chmod(0o755)
    env = dict(os.environ)
    env["PATH"] = f"{bin_dir}{os.pathsep}{env['PATH']}"
    env["PYTHONPATH"] = str(ROOT)
    env["GW_NO_AUTO_GC"] = "1"
    return env


def mask(text: str) -> str:
    """What differs from run to run: ids, command ids, hashes, instants."""
    text = re.sub(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", "<time>", text)
    text = re.sub(r"\bw-[0-9a-f]{6,16}\b", "<item>", text)
    text = re.sub(r"\bc-[0-9a-f]{16}\b", "<command>", text)
    return re.sub(r"\b[0-9a-f]{7,40}\b", "<hash>", text)


def test_the_session_runs_as_the_readme_shows(repo: Path, tmp_path: Path) -> None:
    session = console_block("Design the schema")
    commands = [line[2:] for line in session.splitlines() if line.startswith("$ ")]
    assert len(commands) > 10
    script = ["exec 2>&1"]
    for command in commands:
        script.append(f"printf '%s\\n' {shlex_quote('$ ' + command)}")
        script.append(command)
        script.append('rc=$?; if [ "$rc" -ne 0 ]; then echo "[exit $rc]"; fi')
    env = {**gw_on_path(tmp_path), "GW_AGENT": "root@vm/s1077"}
    done = subprocess.run(["bash", "-c", "\n".join(script)], cwd=repo, env=env, capture_output=True, text=True,
                          timeout=240)
    assert done.returncode == 0, done.stdout
    assert mask(done.stdout).splitlines() == mask(session).splitlines()


def shlex_quote(text: str) -> str:
    import shlex

    return shlex.quote(text)


@pytest.mark.slow
def test_the_shell_loop_ends_when_done_is_refused(repo: Path, tmp_path: Path) -> None:
    loop = shell_block("claim --next")
    env = gw_on_path(tmp_path)

    def gw(*args: str) -> str:
        ran = subprocess.run(["gw", *args], cwd=repo, env={**env, "GW_AGENT": "lead"}, capture_output=True,
                             text=True, timeout=60)
        assert ran.returncode == 0, (args, ran.stderr)
        return ran.stdout.strip()

    gw("init")
    plain = [gw("new", f"plain {n}") for n in range(3)]
    refused = gw("new", "needs a person", "-c", "reviewed by a human")
    (repo / "work").mkdir()
    (repo / "work" / "Makefile").write_text("all:\n\techo $(ITEM) >> made.txt\n", encoding="utf-8")
    before = int(git(repo, "rev-list", "--count", "refs/gitwork/state"))
    try:
        ran = subprocess.run(["sh", "-c", loop], cwd=repo, env=env, capture_output=True, text=True, timeout=120)
    except subprocess.TimeoutExpired as spinning:  # the loop never ended
        raise AssertionError(f"the README loop did not end: {spinning.stderr!r}") from None
    assert ran.returncode == 0, ran.stderr
    commits = int(git(repo, "rev-list", "--count", "refs/gitwork/state")) - before
    # per plain item: claim, done; the refused one: claim, block, release. Nothing claimed twice.
    assert commits <= 2 * len(plain) + 3, f"{commits} state commits for {len(plain) + 1} items"
    made = (repo / "work" / "made.txt").read_text(encoding="utf-8").split()
    assert sorted(made) == sorted([*plain, refused])
    import json

    rows = {row["item"]: row for row in json.loads(gw("list", "--all", "--json"))}
    assert all(rows[item]["status"] == "done" for item in plain)
    assert rows[refused]["status"] == "blocked" and rows[refused]["holder"] in (None, "")
    blocked = json.loads(gw("blocked", "--json"))
    reasons = [reason for row in blocked if row["item"] == refused for reason in row["blocked_by"]]
    assert any(reason.get("kind") == "manual" and "6" in str(reason.get("reason")) for reason in reasons), reasons
    assert tip(repo) is not None


def test_the_suite_line_names_what_exists() -> None:
    line = shell_block("pytest")
    assert subprocess.run(["sh", "-n", "-c", line]).returncode == 0
    assert "tests/system-packages.sh" in line and (ROOT / "tests" / "system-packages.sh").exists()
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]["optional-dependencies"]
    assert "'.[test]'" in line and "test" in extras


@pytest.mark.slow
def test_the_install_line_installs_and_runs_the_demo(tmp_path: Path) -> None:
    line = shell_block("gw demo")
    tree = tmp_path / "tree"
    files = git(ROOT, "ls-files", "-z").split("\0")
    for name in filter(None, files):
        source = ROOT / name
        if source.is_file():
            (tree / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, tree / name)
    env = {key: value for key, value in os.environ.items() if key not in ("PYTHONPATH", "VIRTUAL_ENV")}
    # What the line does is unchanged; pip skips what the demo does not need: byte-compiling every installed
    # module (rich, pygments, typer, ruamel...) and asking the index whether pip is current. pip reads a
    # `no-` option's variable inverted: PIP_NO_COMPILE=0 is --no-compile, =1 compiled everything (2026-12-02,
    # pip 23.2: 8.7 -> 7.4 s of CPU for this test; the demo's own imports still write their bytecode).
    # The venv's own pip is installed by ensurepip, which ignores PIP_* variables.
    env.update(PIP_NO_COMPILE="0", PIP_DISABLE_PIP_VERSION_CHECK="1")
    ran = subprocess.run(["sh", "-c", line], cwd=tree, env=env, capture_output=True, text=True, timeout=600)
    assert ran.returncode == 0, (ran.stdout[-2000:], ran.stderr[-2000:])
    assert "refs/gitwork/state" in ran.stdout + ran.stderr
