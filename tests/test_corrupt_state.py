"""Corrupt state (issue 8, point 10): exit 8 naming the file, and one bad item never takes the state down.

Each bad file is committed into the state ref with git plumbing (hash-object, mktree, commit-tree,
update-ref), as another tool or a careless hand would leave it, and the real ``gw`` runs against it.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from conftest import git, run_gw, tip
from gitwork import layout
from gitwork.errors import Corrupt, ExitCode
from gitwork.workplane import Workplane

STATE = "refs/gitwork/state"
CORRUPT = int(ExitCode.CORRUPT)
BAD = "w-bad0000000000001"
GOOD = "w-900d000000000001"
LATER = "w-900d000000000002"


def _tree_with(repo: Path, tree: str, parts: list[str], blob: str) -> str:
    """The id of ``tree`` with the file at ``parts`` replaced by ``blob``, built level by level with mktree."""
    listing = git(repo, "ls-tree", tree).splitlines()
    entries = {}
    for line in listing:
        meta, name = line.split("\t", 1)
        entries[name] = meta
    name = parts[0]
    if len(parts) == 1:
        entries[name] = f"100644 blob {blob}"
    else:
        child = entries[name].split()[2]
        entries[name] = f"040000 tree {_tree_with(repo, child, parts[1:], blob)}"
    text = "".join(f"{meta}\t{entry}\n" for entry, meta in sorted(entries.items()))
    return git(repo, "mktree", input=text.encode())


def commit_file(repo: Path, path: str, data: bytes) -> str:
    """Commit ``data`` at ``path`` on top of the state ref with plumbing; return the new tip."""
    blob = git(repo, "hash-object", "-w", "--stdin", input=data)
    root = git(repo, "rev-parse", f"{STATE}^{{tree}}")
    tree = _tree_with(repo, root, path.split("/"), blob)
    env = {"GIT_AUTHOR_NAME": "hand", "GIT_AUTHOR_EMAIL": "hand@example.invalid", "GIT_COMMITTER_NAME": "hand",
           "GIT_COMMITTER_EMAIL": "hand@example.invalid"}
    commit = subprocess.run(["git", "commit-tree", tree, "-p", STATE, "-m", f"hand edit of {path}"], cwd=repo,
                            capture_output=True, text=True, check=True,
                            env={**__import__("os").environ, **env}).stdout.strip()
    git(repo, "update-ref", STATE, commit, tip(repo) or "")
    return commit


def state_file(repo: Path, path: str) -> str:
    return git(repo, "show", f"{STATE}:{path}")


@pytest.fixture
def state(repo: Path) -> Path:
    with Workplane(str(repo), agent="alice") as wp:
        wp.do("init")
        wp.do("new", title="the bad one", item=BAD, priority=0)
        wp.do("new", title="a sound one", item=GOOD, priority=1)
        wp.do("new", title="another sound one", item=LATER, priority=3, depends_on=[GOOD])
    return repo


def bad_item(repo: Path) -> str:
    path = layout.item_path(BAD, layout.ITEM_FILE)
    text = state_file(repo, path).replace("priority: 0", "priority: high")
    assert "priority: high" in text
    commit_file(repo, path, text.encode() + b"\n")
    return path


def gw_ok(repo: Path, *args: str) -> subprocess.CompletedProcess[str]:
    done = run_gw(repo, *args)
    assert done.returncode == 0, (args, done.returncode, done.stderr)
    assert "Traceback" not in done.stderr
    return done


def refused(repo: Path, *args: str, names: str) -> None:
    before = tip(repo)
    done = run_gw(repo, *args)
    assert done.returncode == CORRUPT, (args, done.returncode, done.stderr)
    lines = done.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("gw: corrupt: ") and names in lines[0], done.stderr
    assert done.stdout == "" and tip(repo) == before


def test_one_bad_priority_leaves_the_rest_of_the_state_readable(state: Path) -> None:
    path = bad_item(state)
    for args in (("list",), ("ready",), ("list", "--all")):
        done = gw_ok(state, *args)
        listed = [line.split("\t")[5] for line in done.stdout.splitlines()]
        assert "a sound one" in listed and "the bad one" not in listed
        assert done.stderr.count("\n") == 1 and path in done.stderr and "priority must be" in done.stderr
    rows = json.loads(gw_ok(state, "list", "--json").stdout)
    assert [r["item"] for r in rows] == [GOOD, LATER]
    # Commands that need the bad item itself refuse with exit 8, naming its file.
    refused(state, "show", BAD, names=path)
    refused(state, "claim", BAD, "--as", "bob", names=path)
    refused(state, "edit", BAD, "--title", "fixed?", names=path)
    refused(state, "new", "depends on the bad one", "--dep", BAD, names=path)
    # The summary cache remembers the bad entry: the second listing names it as well.
    assert path in gw_ok(state, "ready").stderr


def test_claim_next_claims_a_sound_item_and_names_the_bad_one(state: Path) -> None:
    path = bad_item(state)  # the bad item has the best priority: it would be picked first
    done = gw_ok(state, "claim", "--next", "--as", "bob")
    assert done.stdout.strip() == GOOD
    assert path in done.stderr and "claimed" in done.stderr


def test_a_bad_expiry_in_a_lease_is_named_and_only_that_item_refuses(state: Path) -> None:
    with Workplane(str(state), agent="carol") as wp:
        wp.do("claim", item=BAD)
    path = layout.item_path(BAD, layout.LEASE_FILE)
    text = state_file(state, path)
    lines = [('expires_at: "tomorrow"' if line.startswith("expires_at:") else line) for line in text.splitlines()]
    commit_file(state, path, ("\n".join(lines) + "\n").encode())
    done = gw_ok(state, "ready")
    assert [line.split("\t")[5] for line in done.stdout.splitlines()] == ["a sound one"]
    assert path in done.stderr and "expires_at must be an instant" in done.stderr
    refused(state, "show", BAD, names=path)
    refused(state, "claim", BAD, "--as", "bob", names=path)
    refused(state, "release", BAD, "--as", "carol", names=path)
    gw_ok(state, "claim", GOOD, "--as", "bob")


def test_a_bad_fence_counter_refuses_every_grant_naming_counters(state: Path) -> None:
    commit_file(state, layout.COUNTERS, b"fence: many\n")
    refused(state, "claim", GOOD, "--as", "bob", names="counters.yaml")
    refused(state, "claim", "--next", "--as", "bob", names="counters.yaml: fence must be a non-negative integer")
    # Reads do not need the counter.
    assert "a sound one" in gw_ok(state, "list").stdout


@pytest.mark.parametrize("field, value, says", [
    ("status", "finished", "status must be one of"),
    ("labels", '"not-a-list"', "labels must be a list"),
    ("title", "[1, 2]", "title must be text"),
])
def test_other_bad_item_fields_are_named_too(state: Path, field: str, value: str, says: str) -> None:
    path = layout.item_path(BAD, layout.ITEM_FILE)
    text = "\n".join(f"{field}: {value}" if line.startswith(f"{field}:") else line
                     for line in state_file(state, path).splitlines())
    commit_file(state, path, (text + "\n").encode())
    done = gw_ok(state, "list")
    assert "the bad one" not in done.stdout and path in done.stderr and says in done.stderr
    refused(state, "show", BAD, names=says)


def test_the_library_lists_sound_items_and_reports_the_bad_one(state: Path) -> None:
    path = bad_item(state)
    with Workplane(str(state)) as wp:
        assert [row[0] for row in wp.ready()] == [GOOD]
        ctx = wp.context()
        assert set(ctx.index().items()) == {GOOD, LATER}
        assert path in ctx.index().problems()[BAD]
        with pytest.raises(Corrupt, match="priority must be"):
            wp.show(BAD)
    # Repaired by hand, the item is back in every listing, and nothing is named any more.
    text = state_file(state, path).replace("priority: high", "priority: 0")
    commit_file(state, path, text.encode() + b"\n")
    done = gw_ok(state, "ready")
    assert done.stdout.splitlines()[0].split("\t")[5] == "the bad one" and done.stderr == ""


def test_a_command_names_only_what_it_left_out_itself(state: Path, tmp_path: Path) -> None:
    """The corrupt items a library read noted in this process (a server, an MCP session, a test) are
    not named by a later command on another state: each command names what its own reads left out."""
    from conftest import gw_here, make_repo

    bad_item(state)
    with Workplane(str(state)) as wp:
        assert [row[0] for row in wp.ready()] == [GOOD]  # noted BAD, named by no command
    other = make_repo(tmp_path / "other")
    with Workplane(str(other), agent="alice") as wp:
        wp.do("init")
        wp.do("new", title="elsewhere", item=GOOD)
    done = gw_here(other, "ready")
    assert done.returncode == 0 and done.stderr == "", done.stderr
    refused_here = gw_here(other, "release", GOOD, "--as", "mallory\n")
    assert len(refused_here.stderr.splitlines()) == 1, refused_here.stderr
    named = gw_here(state, "ready")  # its own read still names the bad one, once
    assert named.stderr.count(BAD) == 1 and "left out" in named.stderr


def test_the_arbiters_hook_refuses_a_bad_value_before_it_spreads(state: Path, tmp_path: Path) -> None:
    import sys

    bare = tmp_path / "arbiter.git"
    git(tmp_path, "init", "-q", "--bare", str(bare))
    hook = bare / "hooks" / "pre-receive"
    hook.write_text(f'#!/bin/sh\nexec "{sys.executable}" -m gitwork.statecheck\n')
    hook.chmod(0o755)

    def push() -> subprocess.CompletedProcess[str]:
        return subprocess.run(["git", "push", str(bare), f"{STATE}:{STATE}"], cwd=state, capture_output=True,
                              text=True)

    assert push().returncode == 0
    published = tip(bare, STATE)
    for path, data in ((bad_item(state), None), (layout.COUNTERS, b"fence: many\n")):
        if data is not None:
            git(state, "update-ref", STATE, published)
            commit_file(state, path, data)
        refused = push()
        assert refused.returncode != 0 and path in refused.stderr and "must be" in refused.stderr, refused.stderr
        assert tip(bare, STATE) == published
