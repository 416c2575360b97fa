"""Lint and types are part of the test run (issue 26, point 5): ``ruff check`` on gitwork/, tests/ and
benchmarks/, ``mypy`` on gitwork/, with the settings in pyproject.toml ([tool.ruff], [tool.mypy]).

Both run as child processes of the test venv's Python (ruff and mypy are in the ``test`` extra), from
the project root so they read pyproject.toml. mypy keeps its cache in .mypy_cache/ (ignored by git):
a cold run analyses gitwork and the ~940 modules it imports from the typeshed and the installed
packages (10.5 s of CPU measured on 2026-12-02, 2-core machine), a warm one about 1 s. Marked
``slow`` so that under xdist it starts first instead of ending the run alone.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from conftest import ROOT

pytestmark = pytest.mark.slow

MYPY_CACHE = ROOT / ".mypy_cache"


def tool(*args: str, timeout: float = 240) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", *args], cwd=ROOT, capture_output=True, text=True, timeout=timeout)


def ruff(*args: str) -> subprocess.CompletedProcess[str]:
    return tool("ruff", "check", "--no-cache", "--output-format", "concise",
                "--config", str(ROOT / "pyproject.toml"), *args)


def mypy(*args: str, cache: Path = MYPY_CACHE) -> subprocess.CompletedProcess[str]:
    return tool("mypy", "--config-file", str(ROOT / "pyproject.toml"), "--cache-dir", str(cache),
                "--no-error-summary", "--hide-error-context", *args)


def test_ruff_finds_nothing_in_the_code_the_tests_or_the_benchmarks() -> None:
    done = ruff("gitwork", "tests", "benchmarks")
    assert done.returncode == 0, f"ruff check (fix, or `ruff check --fix` for imports):\n{done.stdout}{done.stderr}"


BAD = ("import sys\nimport os\n\n\ndef pairs(a, b):\n    return list(zip(a, b))\n\n\n"
       "def untyped():\n    x: int = 'text'\n    return x\n")  # one finding of each kind the settings select


def test_mypy_finds_nothing_in_gitwork_and_its_settings_are_in_force(tmp_path: Path) -> None:
    done = mypy()  # the files are pyproject.toml's ([tool.mypy] files)
    assert done.returncode == 0, f"mypy:\n{done.stdout}{done.stderr}"
    # The settings are in force (a lost [tool.mypy] section, or check_untyped_defs dropped from it, fails
    # here): the body of a function without annotations is checked too. After the run above and with its
    # cache, so the typeshed is not analysed a second time (a cache of its own made it a cold run).
    bad = tmp_path / "bad.py"
    bad.write_text(BAD)
    typed = mypy(str(bad))
    assert typed.returncode == 1 and "bad.py:10: error: Incompatible types in assignment" in typed.stdout, typed.stdout


def test_the_ruff_rules_are_the_configured_ones(tmp_path: Path) -> None:
    """A file with one finding of each rule is refused with each one (so a lost [tool.ruff] section, or a
    rule dropped from it, fails here)."""
    bad = tmp_path / "bad.py"
    bad.write_text(BAD)
    found = ruff(str(bad)).stdout
    for code in ("F401", "B905", "I001"):
        assert code in found, (code, found)


GENERATED = {"cli/fast_table.py", "cli/fast_help.py", "ops/table.py"}  # written by python -m gitwork.cli.fastgen


def test_no_hand_written_module_is_over_700_lines() -> None:
    """Issue 26: small modules with one job; only generated tables may be long."""
    long = {str(path.relative_to(ROOT / "gitwork")): n for path in (ROOT / "gitwork").rglob("*.py")
            if (n := len(path.read_text(encoding="utf-8").splitlines())) > 700}
    assert set(long) <= GENERATED, {name: n for name, n in long.items() if name not in GENERATED}


def test_a_work_plane_parameter_is_typed() -> None:
    """Issue 26: ``wp: Workplane`` (under TYPE_CHECKING), never ``wp: Any``: mypy then checks every seam."""
    untyped = [f"{path.relative_to(ROOT)}:{number}" for path in (ROOT / "gitwork").rglob("*.py")
               for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1) if "wp: Any" in line]
    assert untyped == []
