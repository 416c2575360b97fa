"""README.md, "Cost and budgets": its shell example runs as written (issue 29, point 4)."""

from __future__ import annotations

import subprocess
from pathlib import Path

from conftest import end_executions, make_repo
from test_readme import gw_on_path, shell_block


def test_the_cost_and_budgets_example_runs_as_written(tmp_path: Path) -> None:
    block = shell_block("gw cost")
    repo = make_repo(tmp_path / "repo")
    env = gw_on_path(tmp_path)
    assert subprocess.run(["bash", "-c", "gw init"], cwd=repo, env=env, capture_output=True).returncode == 0
    # bounded: the example's wait loop ends when the first agent's exit is recorded
    script = f"ulimit -t 120\n{block}"
    try:
        done = subprocess.run(["bash", "-c", script], cwd=repo, env=env, capture_output=True, text=True, timeout=120)
    finally:
        end_executions(repo)
    out = done.stdout + done.stderr
    assert done.returncode == 0, out
    total = next(line for line in done.stdout.splitlines() if line.startswith("total\t"))
    assert total.split("\t")[1:6] == ["1", "2", "160000", "10000", "2.55"], out  # the report and report.json
    assert "exit 6: budget spent" in done.stdout and "budget spent: " in done.stderr, out
    assert done.stderr.count("started execution") == 2, out
