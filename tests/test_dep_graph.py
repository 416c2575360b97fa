"""``gw dep graph`` (issue 25, point 8): the dependency graph as Mermaid or dot text, whole or around an
item, with hostile titles escaped so they cannot add a node, an edge or a directive. Real repositories
through the real entry point; the dot output is read back by Graphviz itself (tests/system-packages.sh).
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from conftest import run_gw, tip
from test_everyday import ALICE, gw_json, gw_ok, new

# A title written to break out of a label in either format and add an edge of its own.
HOSTILE = 'x"] --> evil["pwned" ]; "evil" -> "x"; # \\n <b>`y`</b> %%{init: {}}%%'


@pytest.fixture
def plane(repo: Path) -> Path:
    gw_ok(repo, "init")
    return repo


def chain(plane: Path) -> tuple[str, str, str, str, str]:
    """base <- mid <- top, side <- top; lone has no edge."""
    base = new(plane, "base")
    mid = new(plane, "mid", "--dep", base)
    side = new(plane, "side")
    top = new(plane, "top", "--dep", mid, "--dep", side)
    lone = new(plane, "lone")
    return base, mid, side, top, lone


def test_the_whole_graph_holds_every_item_with_an_edge(plane: Path) -> None:
    base, mid, side, top, lone = chain(plane)
    doc = gw_json(plane, "dep", "graph")
    assert doc["ok"] is True and doc["format"] == "mermaid"  # type: ignore[index]
    assert [n["item"] for n in doc["nodes"]] == sorted([base, mid, side, top])  # type: ignore[index]
    edges = {(e["from"], e["to"]) for e in doc["edges"]}  # type: ignore[index]
    assert edges == {(base, mid), (mid, top), (side, top)}, "an arrow goes from what to do first"
    text = gw_ok(plane, "dep", "graph")
    assert text == doc["text"]  # type: ignore[index]
    assert text.startswith("flowchart TD\n") and text.count("-->") == 3 and lone not in text


def test_around_an_item_follows_both_directions_transitively(plane: Path) -> None:
    base, mid, side, top, _lone = chain(plane)
    other = new(plane, "other", "--dep", side)  # depends on side, not on mid: not around mid
    doc = gw_json(plane, "dep", "graph", mid[:8], "--format", "dot")
    assert {n["item"] for n in doc["nodes"]} == {base, mid, top}  # type: ignore[index]
    assert {(e["from"], e["to"]) for e in doc["edges"]} == {(base, mid), (mid, top)}  # type: ignore[index]
    around_side = gw_json(plane, "dep", "graph", side)
    assert {n["item"] for n in around_side["nodes"]} == {side, top, other}  # type: ignore[index]
    alone = gw_json(plane, "dep", "graph", _lone)
    assert [n["item"] for n in alone["nodes"]] == [_lone] and alone["edges"] == []  # type: ignore[index]


def test_mermaid_labels_are_escaped(plane: Path) -> None:
    first = new(plane, HOSTILE)
    second = new(plane, "second", "--dep", first)
    text = gw_ok(plane, "dep", "graph")
    lines = text.splitlines()
    assert len(lines) == 4, "one header, two nodes, one edge"
    assert [line for line in lines if "-->" in line] == [lines[3]], "the title adds no edge"
    node = re.compile(r'^  n_[A-Za-z0-9_]+\["[^"<>`]*"\]$')
    assert node.match(lines[1]) and node.match(lines[2]), lines
    assert "#quot;" in text and "#lt;b#gt;" in text and "#35; " in text and "%%{" not in lines[0]
    assert first.replace("-", "_2d_") in lines[3] and second.replace("-", "_2d_") in lines[3]


def test_dot_output_is_read_back_by_graphviz_with_the_title_intact(plane: Path) -> None:
    if shutil.which("dot") is None:  # tests/system-packages.sh installs graphviz
        pytest.fail("graphviz's dot is missing: run tests/system-packages.sh")
    first = new(plane, HOSTILE)
    second = new(plane, "second", "--dep", first)
    text = gw_ok(plane, "dep", "graph", "--format", "dot")
    # Graphviz parses it and prints what it understood: two nodes, one edge, the hostile label whole.
    read = json.loads(subprocess.run(["dot", "-Tjson0"], input=text, capture_output=True, text=True,
                                     check=True).stdout)
    nodes = {o["name"]: o["label"] for o in read["objects"]}
    # A label keeps its escString escapes (drawn later): the title's backslash stays doubled, so its "\\n"
    # draws as a backslash and an n, not as a line break.
    drawn = HOSTILE.replace("\\", "\\\\")
    assert nodes == {first: f"{first} [open] {drawn}", second: f"{second} [open] second"}, nodes
    names = [o["name"] for o in read["objects"]]
    assert [(names[e["tail"]], names[e["head"]]) for e in read["edges"]] == [(first, second)]


def test_refusals_change_nothing(plane: Path) -> None:
    base = new(plane, "base")
    new(plane, "top", "--dep", base)
    before = tip(plane)
    unknown = run_gw(plane, "dep", "graph", "w-0000000000000000", env=ALICE)
    assert unknown.returncode == 3 and unknown.stdout == "" and len(unknown.stderr.splitlines()) == 1
    bad = run_gw(plane, "dep", "graph", "--format", "svg", "--json", env=ALICE)
    assert bad.returncode == 2 and '"error": "usage"' in bad.stdout and "mermaid or dot" in bad.stdout
    assert "Traceback" not in unknown.stderr + bad.stderr
    assert tip(plane) == before
