"""Item types and parents (issue 26, point 3), through a real repository and the real ``gw``.

- ``gw new -t bug|feature|task|epic|chore`` (default task), ``gw edit -t``, ``gw list -t`` (repeatable);
- ``gw new --parent ID``, ``gw edit --parent ID``, ``gw children ID``, ``gw list --parent ID``;
- a parent may not be the item itself nor one of its descendants: refused (5, like a dependency
  cycle), nothing written, on every face (CLI, ``gw apply``, the library).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from conftest import run_gw, tip
from gitwork.errors import Invalid, NotFound
from gitwork.workplane import Workplane


def listed(repo: Path, *args: str) -> list[str]:
    done = run_gw(repo, *args, "--json")
    assert done.returncode == 0, done.stderr
    return [row["item"] for row in json.loads(done.stdout)]


def test_types_default_to_task_and_list_filters_by_them(repo: Path, wp: Workplane) -> None:
    bug = wp.do("new", title="crash", type="bug").result["item"]
    plain = wp.do("new", title="chore-less").result["item"]
    epic = wp.do("new", title="big", type="epic").result["item"]
    assert wp.item(bug).type == "bug" and wp.item(plain).type is None  # stored only when given
    assert listed(repo, "list", "-t", "bug") == [bug]
    assert listed(repo, "list", "-t", "task") == [plain]  # no type: a task
    assert sorted(listed(repo, "list", "-t", "bug", "--type", "epic")) == sorted([bug, epic])
    wp.do("edit", item=plain, type="chore")
    assert listed(repo, "list", "-t", "chore") == [plain] and listed(repo, "list", "-t", "task") == []
    before = tip(repo)
    for argv in (["new", "x", "-t", "story"], ["edit", bug, "--type", "story"]):
        done = run_gw(repo, *argv)
        assert done.returncode == 5 and "bug, feature, task, epic, chore" in done.stderr, argv
    unknown = run_gw(repo, "list", "-t", "story")
    assert unknown.returncode == 5 and unknown.stdout == ""
    assert tip(repo) == before


def test_parents_children_and_a_limit_applied_after_the_filter(repo: Path, wp: Workplane) -> None:
    epic = run_gw(repo, "new", "epic", "-t", "epic").stdout.strip()
    kids = [run_gw(repo, "new", f"part {n}", "--parent", epic[:8]).stdout.strip() for n in range(3)]
    other = wp.do("new", title="elsewhere").result["item"]
    assert wp.item(kids[0]).parent == epic  # the prefix was resolved and recorded in full
    assert sorted(listed(repo, "children", epic)) == sorted(kids)
    assert sorted(listed(repo, "list", "--parent", epic)) == sorted(kids)
    assert len(listed(repo, "list", "--parent", epic, "-n", "2")) == 2
    wp.do("done", item=kids[0])
    assert kids[0] in listed(repo, "children", epic)  # children lists every status
    assert kids[0] not in listed(repo, "list", "--parent", epic)  # list keeps its own status rule
    wp.do("edit", item=other, parent=kids[1])
    assert listed(repo, "children", kids[1]) == [other] and other not in listed(repo, "children", epic)
    assert listed(repo, "children", other) == []
    missing = run_gw(repo, "children", "w-ffff")
    assert missing.returncode == 3


def test_a_parent_may_not_be_the_item_or_a_descendant_on_any_face(repo: Path, wp: Workplane,
                                                                  tmp_path: Path) -> None:
    top = wp.do("new", title="top").result["item"]
    middle = wp.do("new", title="middle", parent=top).result["item"]
    bottom = wp.do("new", title="bottom", parent=middle).result["item"]
    before = tip(repo)
    for parent in (top, middle, bottom):  # itself, its child, its grandchild
        done = run_gw(repo, "edit", top, "--parent", parent, "--json")
        assert done.returncode == 5, done.stdout
        assert json.loads(done.stdout)["error"] == "invalid" and done.stderr.count("\n") == 1
    document = tmp_path / "cycle.json"
    document.write_text(json.dumps({"op": "edit", "item": top, "parent": bottom}))
    assert run_gw(repo, "apply", str(document)).returncode == 5
    with pytest.raises(Invalid, match="descendant"):
        wp.do("edit", item=middle, parent=bottom)
    with pytest.raises(NotFound):
        wp.do("new", title="orphan", parent="w-ffff")
    assert tip(repo) == before
    assert wp.item(top).parent is None
