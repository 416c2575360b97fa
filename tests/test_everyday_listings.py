"""Issue 25, point 7: listings carry the state.

A labels column; items waiting on a dependency shown as blocked, and ``list -s blocked`` agreeing with
``gw blocked``; ``--exclude-label``; ``--sort updated``; ``--reverse``; comma lists for ``-l`` and ``-s``;
semantic colour on a terminal only (none when piped or with NO_COLOR); one empty-result message.
Real repositories, the real entry point; the terminal is a real pseudo-terminal.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import gw_here

ALICE = {"GW_AGENT": "alice", "GW_NO_AUTO_GC": "1"}


def ok(repo: Path, *args: str) -> str:
    done = gw_here(repo, *args, env=ALICE)
    assert done.returncode == 0, (args, done.stdout, done.stderr)
    return done.stdout


def ids(repo: Path, *args: str) -> list[str]:
    return [row["item"] for row in json.loads(ok(repo, "list", *args, "--json"))]


@pytest.fixture
def world(repo: Path) -> tuple[Path, dict[str, str]]:
    ok(repo, "init")
    base = ok(repo, "new", "base", "-l", "db").strip()
    top = ok(repo, "new", "top", "--dep", base, "-l", "ui", "-l", "web").strip()
    other = ok(repo, "new", "other", "-l", "docs", "-p", "0").strip()
    manual = ok(repo, "new", "manual", "-l", "ui").strip()
    ok(repo, "edit", manual, "--status", "blocked", "--reason", "waiting for design")
    return repo, {"base": base, "top": top, "other": other, "manual": manual}


def test_labels_column_and_blocked_marking(world: tuple[Path, dict[str, str]]) -> None:
    repo, item = world
    lines = {line.split("\t")[5]: line.split("\t") for line in ok(repo, "list").splitlines()}
    assert lines["top"][1] == "blocked" and lines["top"][4] == "ui,web", "waits on base: shown blocked"
    assert lines["base"][1] == "open" and lines["base"][4] == "db"
    rows = {row["title"]: row for row in json.loads(ok(repo, "list", "--json"))}
    assert rows["top"]["status"] == "open" and rows["top"]["blocked"] is True, "the stored status, and blocked"
    assert rows["manual"]["blocked"] is True and rows["base"]["blocked"] is False


def test_list_status_blocked_agrees_with_gw_blocked(world: tuple[Path, dict[str, str]]) -> None:
    repo, item = world
    blocked = [entry["item"] for entry in json.loads(ok(repo, "blocked", "--json"))]
    assert sorted(ids(repo, "-s", "blocked")) == sorted(blocked) == sorted([item["top"], item["manual"]])
    ok(repo, "done", item["base"])
    assert ids(repo, "-s", "blocked") == [item["manual"]] == [e["item"] for e in json.loads(ok(repo, "blocked", "--json"))]


def test_exclude_label_commas_sort_updated_reverse(world: tuple[Path, dict[str, str]]) -> None:
    repo, item = world
    assert ids(repo, "--exclude-label", "ui,docs") == [item["base"]]
    assert ids(repo, "--exclude-label", "ui", "--exclude-label", "docs") == [item["base"]]
    assert sorted(ids(repo, "-l", "ui,web")) == [item["top"]], "all of them, as repeated -l"
    assert sorted(ids(repo, "-s", "open,blocked", "-l", "ui")) == sorted([item["top"], item["manual"]])
    ranked = ids(repo)
    assert ids(repo, "--reverse") == ranked[::-1]
    assert ids(repo, "--reverse", "-n", "1") == ranked[-1:], "the limit applies after the order"
    later = gw_here(repo, "edit", item["base"], "-p", "3", env={**ALICE, "GW_NOW": "2099-01-01T00:00:00Z"})
    assert later.returncode == 0, later.stderr  # the last change, a clear second later than the others
    assert ids(repo, "--sort", "updated")[0] == item["base"]
    assert ids(repo, "--sort", "updated", "--reverse")[-1] == item["base"]
    assert json.loads(ok(repo, "ready", "--exclude-label", "db", "--json")) == [
        {**row} for row in json.loads(ok(repo, "ready", "--json")) if "db" not in row["labels"]]
    bad = gw_here(repo, "list", "--sort", "nonsense", env=ALICE)
    assert bad.returncode == 5 and "updated" in bad.stderr


def test_one_empty_result_message(world: tuple[Path, dict[str, str]]) -> None:
    repo, _item = world
    for args in (["list", "-l", "nothing"], ["ready", "-l", "nothing"]):
        done = gw_here(repo, *args, env=ALICE)
        assert done.returncode == 0 and done.stdout == "" and done.stderr.startswith("gw: no ") \
            and done.stderr.endswith(" match\n"), (args, done.stderr)
        as_json = gw_here(repo, *args, "--json", env=ALICE)
        assert as_json.stdout == "[]\n" and as_json.stderr == ""


def _on_a_terminal(repo: Path, env: dict[str, str]) -> str:
    """``gw --no-pager list`` with stdout on a real pseudo-terminal; what the terminal received."""
    main, child = os.openpty()
    full = {**os.environ, **ALICE, "TERM": "xterm-256color", "COLUMNS": "120", **env}
    full.pop("NO_COLOR", None) if "NO_COLOR" not in env else None
    process = subprocess.Popen([sys.executable, "-m", "gitwork", "--no-pager", "list"], cwd=repo, stdout=child,
                               stderr=subprocess.PIPE, env=full)
    os.close(child)
    chunks = []
    while True:
        try:
            data = os.read(main, 65536)
        except OSError:
            break
        if not data:
            break
        chunks.append(data)
    process.wait(timeout=60)
    os.close(main)
    return b"".join(chunks).decode()


def test_semantic_colour_on_a_terminal_only(world: tuple[Path, dict[str, str]]) -> None:
    repo, _item = world
    coloured = _on_a_terminal(repo, {})
    assert COLOUR.search(coloured) and "blocked" in coloured and "labels" in coloured, coloured
    plain = _on_a_terminal(repo, {"NO_COLOR": "1"})
    assert "blocked" in plain and not COLOUR.search(plain), "NO_COLOR: bold may stay, colour goes"
    assert "\x1b[" not in ok(repo, "list"), "piped: no escape at all"


# An SGR sequence that sets a foreground colour (30-38, 90-97): what NO_COLOR forbids.
COLOUR = re.compile(r"\x1b\[(?:[0-9]+;)*(?:3[0-8]|9[0-7])[;m]")
