"""CI runs exactly the README's test command: a green CI then proves what a newcomer would run."""

from __future__ import annotations

import re

from conftest import ROOT


def readme_commands() -> list[str]:
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    return [block.strip() for block in re.findall(r"```sh\n(.*?)```", text, flags=re.S)]


def test_readme_has_exactly_two_commands_for_a_fresh_machine() -> None:
    section = (ROOT / "README.md").read_text(encoding="utf-8").split("## Two commands for a fresh machine")[1]
    section = section.split("\n## ", 1)[0]
    blocks = re.findall(r"```sh\n(.*?)```", section, flags=re.S)
    assert len(blocks) == 2, blocks
    assert all(len(block.strip().splitlines()) == 1 for block in blocks), blocks


def test_ci_runs_the_readme_test_command_verbatim() -> None:
    test_command = readme_commands()[1]
    assert "pytest" in test_command
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8").splitlines()
    assert test_command in ci, f"{test_command!r} is not a line of .ci/run"
