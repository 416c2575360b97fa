"""Issue 25, point 8: ``gw new --template NAME``, templates declared in ``.workplane``.

A template gives a title prefix, labels, priority, type, criteria and a description skeleton; the command
line overrides its scalars and adds to its lists. An unknown template, or a template with an unknown key
or a bad value, is exit 5 and writes nothing. Real repository, the real entry point, the fast path.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from conftest import gw_here, tip

ENV = {"GW_AGENT": "alice", "GW_NO_AUTO_GC": "1"}

TEMPLATES = """\
admins: [alice]
templates:
  bug:
    title: "Bug: "
    labels: [bug, triage]
    priority: 1
    type: bug
    criteria: [a test reproduces it, the test passes]
    description: |
      Steps to reproduce:

      Expected:
  chore:
    type: chore
"""


def ok(repo: Path, *args: str) -> str:
    done = gw_here(repo, *args, env=ENV)
    assert done.returncode == 0, (args, done.stdout, done.stderr)
    return done.stdout


def show(repo: Path, item: str) -> dict:  # type: ignore[type-arg]
    return json.loads(ok(repo, "show", item, "--json"))  # type: ignore[no-any-return]


@pytest.fixture
def world(repo: Path) -> Path:
    (repo / ".workplane").write_text(TEMPLATES)
    ok(repo, "init")
    return repo


def test_template_fills_the_item_and_options_override(world: Path) -> None:
    item = show(world, ok(world, "new", "login fails on Safari", "--template", "bug").strip())
    assert item["title"] == "Bug: login fails on Safari"
    assert item["labels"] == ["bug", "triage"] and item["priority"] == 1 and item["type"] == "bug"
    assert [c["text"] for c in item["criteria"]] == ["a test reproduces it", "the test passes"]
    assert item["description"].startswith("Steps to reproduce:")
    other = show(world, ok(world, "new", "crash", "--template", "bug", "-p", "0", "-t", "task", "-l", "ios",
                           "-d", "it crashes", "-c", "no crash log").strip())
    assert other["priority"] == 0 and other["type"] == "task" and other["description"] == "it crashes"
    assert other["labels"] == ["bug", "ios", "triage"], "labels given are added to the template's"
    assert [c["text"] for c in other["criteria"]][-1] == "no crash log"
    plain = show(world, ok(world, "new", "tidy", "--template", "chore").strip())
    assert plain["type"] == "chore" and plain["title"] == "tidy" and plain["priority"] == 2
    doc = json.loads(ok(world, "new", "as json", "--template", "bug", "--json"))
    assert doc["ok"] is True and show(world, doc["item"])["title"] == "Bug: as json"


@pytest.mark.parametrize(("workplane", "template", "says"), [
    (TEMPLATES, "nope", "unknown template 'nope'"),
    ("admins: [alice]\n", "bug", "unknown template 'bug'"),
    ("templates:\n  bug:\n    colour: red\n", "bug", "colour"),
    ("templates:\n  bug:\n    priority: 9\n", "bug", "priority"),
    ("templates:\n  bug:\n    labels: [has space]\n", "bug", "label"),
    ("templates:\n  bug: [a]\n", "bug", "mapping"),
    ("templates: [bug]\n", "bug", "mapping"),
])
def test_bad_templates_are_exit_5_and_write_nothing(repo: Path, workplane: str, template: str, says: str) -> None:
    (repo / ".workplane").write_text("admins: [alice]\n")
    ok(repo, "init")
    (repo / ".workplane").write_text(workplane)
    before = tip(repo)
    done = gw_here(repo, "new", "x", "--template", template, env=ENV)
    assert done.returncode == 5, (done.stdout, done.stderr)
    assert says in done.stderr and len(done.stderr.strip().splitlines()) == 1
    assert tip(repo) == before
    assert json.loads(gw_here(repo, "new", "x", "--template", template, "--json", env=ENV).stdout)["code"] == 5
    assert tip(repo) == before
