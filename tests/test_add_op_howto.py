"""docs/architecture.md's "How to add an op", followed literally (issue 26, point 2).

The test copies the tree to a temporary folder, applies the blocks the how-to marks with
``<!-- howto: ACTION -->`` (append to a file, insert before a line, create a file), runs its
regeneration commands and then its test command there, restricted to the tests of the registry, the
generated files, the one-path rules and the faces' derived lists. The doc and the test cannot drift:
a step the doc forgets (a hand list somewhere) fails the tests it names, and the count of
hand-edited files is checked against what the doc says.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from conftest import ROOT

DOC = ROOT / "docs" / "architecture.md"
MARK = re.compile(r"<!-- howto: (?P<action>[^>]*?) -->\n\s*```\w*\n(?P<body>.*?)\n\s*```", re.S)
# The tests the how-to names, cut to the ones that check what an op and its verb add (the rest of those
# files drive real processes for minutes, and run in the suite anyway). A test named in the doc that
# does not exist fails with "no tests ran". `every_op_` (test_every_op_appears, ..._that_asks_who_acts...), not
# `every_op`: that also matched the ~1,360 cases of test_fast_path_matches_typer_for_every_option of the verbs
# that were already there (which the suite runs anyway); the toy verb's own cases are matched by `nudge`.
SELECTED = ("nudge or registry or table or roles or who or every_op_ or reference_is_current or openapi or "
            "has_a_case or sample or input_schemas or tools_as_they_are")


def howto() -> list[tuple[str, str]]:
    """``(action, block)`` of every marked block of the section, in order."""
    section = DOC.read_text(encoding="utf-8").split("## How to add an op\n", 1)[1].split("\n## ", 1)[0]
    # A block inside a list item is indented: its first line lost its indent to the pattern, the rest keep it.
    return [(m["action"].strip(), textwrap.dedent("   " + m["body"]) if m["body"][:1] != " " else
             textwrap.dedent(m["body"])) for m in MARK.finditer(section)]


def follow(action: str, block: str, tree: Path) -> list[str]:
    """Apply one file step; returns the path it edited."""
    words = action.split(maxsplit=3)
    kind, path = words[0], tree / words[1]
    if kind == "append":
        path.write_text(path.read_text(encoding="utf-8").rstrip("\n") + "\n\n\n" + block + "\n", encoding="utf-8")
    elif kind == "insert":
        assert words[2] == "before", action
        text = path.read_text(encoding="utf-8")
        assert text.count(f"\n{words[3]}") == 1, f"{action}: the line to insert before is not there once"
        path.write_text(text.replace(f"\n{words[3]}", f"\n{block}\n\n\n{words[3]}", 1), encoding="utf-8")
    elif kind == "create":
        assert not path.exists(), action
        path.write_text(block + "\n", encoding="utf-8")
    else:
        raise AssertionError(f"unknown how-to action {action!r}")
    return [words[1]]


def commands(block: str) -> list[list[str]]:
    """The shell lines of a block, comments dropped, ``python`` as this interpreter."""
    lines = [shlex.split(line, comments=True) for line in block.splitlines()]
    return [[sys.executable if words[0] == "python" else words[0], *words[1:]] for words in lines if words]


def test_the_steps_are_marked_and_name_at_most_four_hand_edited_files() -> None:
    steps = howto()
    edited = [action.split()[1] for action, _ in steps if action.split()[0] in ("append", "insert", "create")]
    assert 1 <= len(edited) <= 4 and len(set(edited)) == len(edited), edited
    assert [action for action, _ in steps if action.split()[0] not in ("append", "insert", "create")] == ["run", "test"]
    assert "four hand-edited files" in DOC.read_text(encoding="utf-8")


@pytest.mark.slow
def test_following_the_howto_adds_an_op_and_a_verb_that_pass_the_tests(tmp_path: Path) -> None:
    tree = tmp_path / "tree"
    # The bytecode is copied too (copytree keeps each file's mtime, which a .pyc is checked against): the
    # copy's run compiles only what the steps edit, not all of gitwork and the tests again (~5 s of CPU).
    ignore = shutil.ignore_patterns(".pytest_cache", ".mypy_cache", ".ruff_cache")
    for folder in ("gitwork", "tests", "docs"):
        shutil.copytree(ROOT / folder, tree / folder, ignore=ignore)
    for name in ("pyproject.toml", "README.md"):
        shutil.copy2(ROOT / name, tree / name)
    env = {**os.environ, "PYTHONPATH": str(tree), "PYTHONDONTWRITEBYTECODE": "1"}
    env.pop("PYTEST_XDIST_WORKER", None)
    env.pop("PYTEST_ADDOPTS", None)
    ran_tests = False
    for action, block in howto():
        if action == "run":
            for argv in commands(block):
                done = subprocess.run(argv, cwd=tree, env=env, capture_output=True, text=True, timeout=120)
                assert done.returncode == 0, (argv, done.stderr[-2000:])
        elif action == "test":
            (argv,) = commands(block)
            argv += ["-k", SELECTED, "-p", "no:cacheprovider", "-n", "0"]
            done = subprocess.run(argv, cwd=tree, env=env, capture_output=True, text=True, timeout=300)
            assert done.returncode == 0, done.stdout[-4000:]
            assert " passed" in done.stdout and "nudge" not in done.stdout.split("short test summary")[-1]
            ran_tests = True
        else:
            follow(action, block, tree)
    assert ran_tests
    # What the steps produced: the op is declared, documented, on REST and MCP, and its verb on the fast path.
    api = (tree / "docs" / "api.md").read_text(encoding="utf-8")
    assert "#### `nudge`" in api and "| `nudge` | `nudge` |" in api
    assert '"Command_nudge"' in (tree / "docs" / "openapi.json").read_text(encoding="utf-8")
    assert "gw nudge" in (tree / "docs" / "cli.md").read_text(encoding="utf-8")
    assert "'nudge': (" in (tree / "gitwork" / "cli" / "fast_table.py").read_text(encoding="utf-8")
    assert "'nudge': 'items'" in (tree / "gitwork" / "ops" / "table.py").read_text(encoding="utf-8")
