"""The documents that are derived from code stay in step with it.

docs/cli.md is generated (``python -m gitwork.cli.docgen``); docs/exit-codes.md and
.workplane.example are written by hand but must cover every exit code and every setting.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from gitwork import config
from gitwork.cli import docgen
from gitwork.errors import ExitCode

ROOT = Path(__file__).resolve().parent.parent


def test_cli_reference_is_current() -> None:
    current = (ROOT / "docs" / "cli.md").read_text(encoding="utf-8")
    assert current == docgen.render(), "docs/cli.md is stale: run python -m gitwork.cli.docgen"


def test_cli_reference_covers_every_command() -> None:
    import typer.main

    from gitwork.cli.app import app

    group = typer.main.get_command(app)
    names = [name for name, cmd in group.commands.items() if not cmd.hidden]  # type: ignore[attr-defined]
    assert names, "the app has no commands"
    text = docgen.render()
    for name in names:
        assert f"\n## gw {name}\n" in text, f"gw {name} missing from the rendered reference"
        assert f"Usage: gw {name} " in text


def test_render_does_not_depend_on_the_terminal(monkeypatch: pytest.MonkeyPatch) -> None:
    before = docgen.render()
    monkeypatch.setenv("COLUMNS", "40")
    monkeypatch.setenv("TERMINAL_WIDTH", "40")
    monkeypatch.setenv("FORCE_COLOR", "1")
    monkeypatch.delenv("NO_COLOR", raising=False)
    assert docgen.render() == before


def test_docgen_check_detects_a_stale_file(tmp_path: Path) -> None:
    target = tmp_path / "cli.md"
    command = [sys.executable, "-m", "gitwork.cli.docgen"]
    assert subprocess.run([*command, "--check", str(target)], capture_output=True).returncode == 1  # missing
    assert subprocess.run([*command, str(target)], capture_output=True).returncode == 0
    assert target.read_text(encoding="utf-8") == docgen.render()
    assert subprocess.run([*command, "--check", str(target)], capture_output=True).returncode == 0
    target.write_text(target.read_text(encoding="utf-8") + "edited by hand\n", encoding="utf-8")
    done = subprocess.run([*command, "--check", str(target)], capture_output=True, text=True)
    assert done.returncode == 1 and "stale" in done.stderr


def _table_rows(text: str) -> list[list[str]]:
    rows = []
    for line in text.splitlines():
        if line.startswith("|"):
            rows.append([cell.strip().strip("`") for cell in line.strip().strip("|").split("|")])
    return rows


def test_exit_codes_document_lists_every_code() -> None:
    text = (ROOT / "docs" / "exit-codes.md").read_text(encoding="utf-8")
    rows = _table_rows(text)
    for code in ExitCode:
        matching = [row for row in rows if len(row) >= 4 and row[0] == str(int(code)) and row[1] == code.name]
        assert matching, f"docs/exit-codes.md has no table row for {code.name} ({int(code)})"
        assert matching[0][3], f"{code.name} has no meaning in docs/exit-codes.md"
    documented = {(row[0], row[1]) for row in rows if row and row[0].isdigit()}
    actual = {(str(int(code)), code.name) for code in ExitCode}
    assert documented <= actual, f"docs/exit-codes.md lists codes that do not exist: {sorted(documented - actual)}"


def test_exit_codes_document_shows_the_json_error_shape() -> None:
    text = (ROOT / "docs" / "exit-codes.md").read_text(encoding="utf-8")
    for key in ('"ok": false', '"error"', '"code"', '"message"', '"details"'):
        assert key in text


def test_workplane_example_mentions_every_setting() -> None:
    text = (ROOT / ".workplane.example").read_text(encoding="utf-8")
    for name in config.DEFAULTS:
        assert re.search(rf"^#?\s*{re.escape(name)}:", text, re.MULTILINE), f".workplane.example lacks {name}"


def test_workplane_example_is_valid_and_changes_nothing(tmp_path: Path) -> None:
    from ruamel.yaml import YAML

    text = (ROOT / ".workplane.example").read_text(encoding="utf-8")
    doc = YAML(typ="safe", pure=True).load(text)
    assert doc is None or isinstance(doc, dict)
    if doc:
        unknown = {key.replace("-", "_") for key in doc} - set(config.DEFAULTS)
        assert not unknown, f".workplane.example sets unknown settings {sorted(unknown)}"
    (tmp_path / ".workplane").write_text(text, encoding="utf-8")
    loaded = config.load(str(tmp_path), {})
    defaults = config.Settings()
    for name in config.DEFAULTS:
        assert getattr(loaded, name) == getattr(defaults, name), f"{name} in .workplane.example is not its default"
    assert loaded.extra == {}
