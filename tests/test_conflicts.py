"""Conflict prediction (issue 29, point 2): ``gw conflicts`` lists live session branches that real
``git merge-tree --write-tree`` cannot merge; ``claim --next`` ranks last an item whose paths cover files a
live session of someone else changed, and ``gw ready --explain`` says why. Real sessions (worktrees made
by ``gw session start``, commits by ``gw session commit``); no worktree is touched by the prediction.
"""

from __future__ import annotations

import json
from pathlib import Path

from conftest import git, run_gw
from gitwork import sessions
from gitwork.workplane import Workplane
from test_sessions import init_project, person_identity  # noqa: F401  (autouse fixture)


def session_changing(repo: Path, who: str, files: dict[str, str], paths: list[str] | None = None) -> tuple[str, dict]:
    with Workplane(str(repo), agent=who) as wp:
        item = wp.do("new", title=f"{who}'s work", **({"paths": paths} if paths else {})).result["item"]
        wp.do("claim", item=item)
        started = sessions.start(wp, item)
        for name, text in files.items():
            Path(started["worktree"], name).write_text(text)
        sessions.commit(wp, list(files), f"{who}'s change", cwd=started["worktree"])
        return item, started


def test_conflicts_lists_live_session_pairs_merge_tree_cannot_merge(repo: Path) -> None:
    init_project(repo)
    with Workplane(str(repo), agent="alice") as wp:
        wp.do("init")
    session_changing(repo, "alice", {"a.txt": "alice\n"})
    session_changing(repo, "bob", {"a.txt": "bob\n"})
    _, carol = session_changing(repo, "carol", {"b.txt": "carol\n"})
    worktrees = {p: git(p, "status", "--porcelain") for p in [carol["worktree"], str(repo)]}
    done = run_gw(repo, "conflicts", "--json")
    assert done.returncode == 0, done.stderr
    found = json.loads(done.stdout)
    assert found["sessions"] == 3
    pairs = [p for p in found["pairs"] if p["kind"] == "session"]
    assert len(pairs) == 1 and pairs[0]["files"] == ["a.txt"]
    assert {pairs[0]["a"]["holder"], pairs[0]["b"]["holder"]} == {"alice", "bob"}
    assert {p: git(p, "status", "--porcelain") for p in worktrees} == worktrees  # nothing touched
    text = run_gw(repo, "conflicts")
    assert text.returncode == 0 and "a.txt" in text.stdout and "alice" in text.stdout


def test_claim_next_ranks_a_predicted_conflict_last_and_ready_explain_says_why(repo: Path) -> None:
    init_project(repo)
    with Workplane(str(repo), agent="alice") as wp:
        wp.do("init")
    _, alice = session_changing(repo, "alice", {"a.txt": "alice\n"})
    with Workplane(str(repo), agent="root") as wp:
        touching = wp.do("new", title="touches a.txt", priority=0, paths=["a.txt"]).result["item"]
        elsewhere = wp.do("new", title="elsewhere", priority=1, paths=["c/**"]).result["item"]
    explained = json.loads(run_gw(repo, "ready", "--explain", "--json", "--as", "dave").stdout)
    entry = next(e for e in explained if e["item"] == touching)
    assert entry["ready"] and entry["conflicts"][0]["kind"] == "session"
    assert entry["conflicts"][0]["files"] == ["a.txt"] and entry["conflicts"][0]["holder"] == "alice"
    text = run_gw(repo, "ready", "--explain", "--as", "dave").stdout
    assert "ranked last" in text and alice["branch"] in text
    # Alice herself is not warned off by her own session.
    own = json.loads(run_gw(repo, "ready", "--explain", "--json", "--as", "alice").stdout)
    assert "conflicts" not in next(e for e in own if e["item"] == touching)
    first = run_gw(repo, "claim", "--next", "--as", "dave", "--json")
    assert first.returncode == 0 and json.loads(first.stdout)["item"] == elsewhere
    second = run_gw(repo, "claim", "--next", "--as", "erin", "--json")  # ranked last, not refused
    assert second.returncode == 0 and json.loads(second.stdout)["item"] == touching


def test_ready_explain_says_an_item_whose_paths_are_held_is_skipped_not_ranked_last(repo: Path) -> None:
    """claim --next skips (and claim refuses, 75) an item whose paths overlap another holder's live path lease:
    ``ready --explain`` must not call it "ranked last" as it does a predicted session conflict."""
    init_project(repo)
    with Workplane(str(repo), agent="alice") as wp:
        wp.do("init")
        held = wp.do("new", title="the API", paths=["src/**"]).result["item"]
        wp.do("claim", item=held)
        overlapping = wp.do("new", title="one file of it", paths=["src/a.py"]).result["item"]
    text = run_gw(repo, "ready", "--explain", "--as", "bob").stdout
    (line,) = [row for row in text.splitlines() if row.startswith(overlapping[:6])]
    assert line.split("\t")[1] == "ready, paths held: claim --next skips it", text
    assert "src/a.py ~ src/**" in text and "alice" in text
