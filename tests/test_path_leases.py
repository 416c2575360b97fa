"""Path leases (issue 29, point 1): an item declares the paths it will change; a claim takes them under
its fenced lease and is refused (75) while another holder's live lease holds an overlapping glob;
``claim --next`` skips such items; the arbiter re-derives the rule (a forged grant pushed with plain git
is refused); bad globs change nothing on any face. The code remote's hook: tests/test_path_hook.py.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from conftest import git, gw_here, make_repo, run_gw, tip
from gitwork import paths
from gitwork.hooks_install import install_server
from gitwork.workplane import Workplane
from test_sync import gw_ok, machine, new_item

STATE = "refs/gitwork/state"


# --- the glob rules -----------------------------------------------------------------------------


@pytest.mark.parametrize(("a", "b", "expected"), [
    ("src/api/**", "src/**", True),
    ("src/api/**", "src/api/v1.py", True),
    ("src/api", "src/api/x.py", True),
    ("src/a*.py", "src/b*.py", False),
    ("docs/**", "src/**", False),
    ("**/*.py", "src/x.py", True),  # a leading wildcard overlaps everything: the rule errs on "overlap"
    ("src/api/*.py", "src/web/*.py", False),
])
def test_overlap_is_by_literal_prefix(a: str, b: str, expected: bool) -> None:
    assert paths.overlap(a, b) is expected and paths.overlap(b, a) is expected


@pytest.mark.parametrize(("glob", "path", "expected"), [
    ("src/api/**", "src/api/v1/x.py", True),
    ("src/api/**", "src/apiv2/x.py", False),
    ("src/api", "src/api/x.py", True),
    ("src/api", "src/api", True),
    ("src/*.py", "src/a.py", True),
    ("src/*.py", "src/sub/a.py", False),
    ("**/test_*.py", "a/b/test_x.py", True),
    ("**/test_*.py", "test_x.py", True),
    ("src/[ab].py", "src/b.py", True),
    ("src/[!ab].py", "src/b.py", False),
    ("src/?.py", "src/ab.py", False),
])
def test_a_glob_covers_a_path_as_git_pathspecs_do(glob: str, path: str, expected: bool) -> None:
    assert paths.matches(glob, path) is expected


def test_overlap_is_sound_for_every_path_both_match() -> None:
    """Whenever some path matches two globs, the rule says they overlap (never a shared path missed)."""
    globs = ["src/**", "src/api/**", "src/api", "src/a*.py", "src/b*.py", "docs/*.md", "docs", "**/x.py", "s?c/*",
             "src/[ab]*", "lib/**/x.py"]
    candidates = ["src/api/x.py", "src/a1.py", "src/b.py", "docs/r.md", "docs/a/b.md", "x.py", "lib/x.py",
                  "lib/a/x.py", "sac/q", "src/api"]
    for a in globs:
        for b in globs:
            if any(paths.matches(a, p) and paths.matches(b, p) for p in candidates):
                assert paths.overlap(a, b), (a, b)


@pytest.mark.parametrize("bad", ["/abs/**", "a/../b", "a//b", "./a", "", "a b", "a\\b", "x[", "x[]", "a**b/c",
                                 "é", "a" * 201, "a\nb"])
def test_bad_globs_are_named(bad: str) -> None:
    assert paths.glob_problem(bad)


# --- claims ---------------------------------------------------------------------------------------


def test_overlapping_claim_refused_75_naming_holder_and_globs_and_changes_nothing(repo: Path) -> None:
    alice, bob = Workplane(str(repo), agent="alice"), Workplane(str(repo), agent="bob")
    alice.do("init")
    api = alice.do("new", title="api", paths=["src/api/**"]).result["item"]
    src = alice.do("new", title="all of src", paths=["src/**", "docs"]).result["item"]
    lib = alice.do("new", title="lib", paths=["lib/**"]).result["item"]
    granted = alice.do("claim", item=api).result
    assert granted["paths"] == ["src/api/**"]
    before = tip(repo)
    done = run_gw(repo, "claim", src, "--as", "bob")
    assert done.returncode == 75, done.stderr
    assert "alice" in done.stderr and "src/** ~ src/api/**" in done.stderr and api in done.stderr
    assert tip(repo) == before
    # The same holder's own leases never conflict; a disjoint glob never does.
    assert alice.do("claim", item=src).result["holder"] == "alice"
    alice.do("release", item=src)
    assert bob.do("claim", item=lib).result["holder"] == "bob"
    # Released: the globs are free again.
    alice.do("release", item=api)
    assert bob.do("claim", item=src).result["holder"] == "bob"
    index = git(repo, "show", f"{STATE}:paths.yaml")
    assert src in index and lib in index and api not in index


def test_an_expired_path_lease_frees_its_globs(repo: Path) -> None:
    import datetime as dt

    from test_sessions import Clock

    clock = Clock(dt.datetime(2030, 1, 1, 12, tzinfo=dt.timezone.utc))
    alice, bob = (Workplane(str(repo), agent=who, now=clock) for who in ("alice", "bob"))
    alice.do("init")
    one = alice.do("new", title="one", paths=["src/**"]).result["item"]
    two = alice.do("new", title="two", paths=["src/x.py"]).result["item"]
    alice.do("claim", item=one, ttl="5m")
    with pytest.raises(Exception, match="overlap"):
        bob.do("claim", item=two)
    clock.advance(5 * 60 + 31)  # past expiry plus the clock margin
    assert bob.do("claim", item=two).result["holder"] == "bob"
    assert one not in git(repo, "show", f"{STATE}:paths.yaml")  # the dead entry was dropped on the way


def test_claim_next_skips_items_whose_paths_are_held(repo: Path) -> None:
    alice, bob = Workplane(str(repo), agent="alice"), Workplane(str(repo), agent="bob")
    alice.do("init")
    held = alice.do("new", title="held", priority=3, paths=["src/**"]).result["item"]
    blocked = alice.do("new", title="best but overlapping", priority=0, paths=["src/api/**"]).result["item"]
    free = alice.do("new", title="free", priority=1, paths=["docs/**"]).result["item"]
    alice.do("claim", item=held)
    assert bob.do("claim", next=True).result["item"] == free
    before = tip(repo)
    done = run_gw(repo, "claim", "--next", "--as", "carol")
    assert done.returncode == 3 and "1 skipped" in done.stderr and tip(repo) == before
    assert alice.do("claim", next=True).result["item"] == blocked  # the holder of src/** itself may


def test_edit_paths_add_remove_and_bounds(repo: Path) -> None:
    wp = Workplane(str(repo), agent="alice")
    wp.do("init")
    item = wp.do("new", title="t", paths=["a/**"]).result["item"]
    wp.do("edit", item=item, add_paths=["b/*.py", "a/**"], remove_paths=["a/**"])
    assert wp.item(item).paths == ["b/*.py"]
    wp.do("edit", item=item, remove_paths=["b/*.py"])
    assert wp.item(item).paths is None
    before = tip(repo)
    many = [f"d{n}/**" for n in range(paths.MAX_GLOBS + 1)]
    done = run_gw(repo, "edit", item, *[arg for glob in many for arg in ("--path", glob)])
    assert done.returncode == 5 and "at most 32" in done.stderr and tip(repo) == before


def test_bad_globs_change_nothing_on_every_face(repo: Path) -> None:
    wp = Workplane(str(repo), agent="alice")
    wp.do("init")
    item = wp.do("new", title="t").result["item"]
    before = tip(repo)
    faces = [run_gw(repo, "new", "x", "--path", "/etc/**")]  # one real process; the rest in this one
    for bad in ("/etc/**", "src/../x", "src/[", "a b"):
        faces += [gw_here(repo, "new", "x", "--path", bad), gw_here(repo, "edit", item, "--path", bad),
                  gw_here(repo, "apply", "-", input=json.dumps({"op": "new", "title": "x", "paths": [bad]}))]
    for done in faces:
        assert done.returncode == 5 and "path glob" in done.stderr and "Traceback" not in done.stderr, done.stderr
    assert tip(repo) == before
    bad = "src/../x"
    # REST: the same op path (POST /v1/commands), an error document with the code, never a 500.
    from fastapi.testclient import TestClient

    from gitwork.serve.app import create_app
    from gitwork.serve.tokens import Tokens
    from gitwork.store import Repository

    token = Tokens(Repository.discover(str(repo)).gitwork_dir()).add("alice", "person")[0]
    with TestClient(create_app(str(repo)), headers={"Authorization": f"Bearer {token}"}) as http:
        answer = http.post("/v1/commands", json={"op": "edit", "item": item, "add_paths": [bad]})
    assert answer.status_code in (400, 422), answer.text
    assert answer.json()["code"] == 5 and "path glob" in answer.json()["message"], answer.text
    assert tip(repo) == before


# --- the arbiter: derive re-applies the rule --------------------------------------------------------


def test_a_forged_overlapping_grant_pushed_with_plain_git_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    bare = make_repo(tmp_path / "arbiter.git", bare=True)
    install_server(str(bare))
    work = make_repo(tmp_path / "work")
    git(work, "remote", "add", "origin", str(bare))
    alice = Workplane(str(work), agent="alice")
    alice.do("init")
    mine = alice.do("new", title="mine", paths=["src/**"]).result["item"]
    theirs = alice.do("new", title="theirs", paths=["src/api/x.py"]).result["item"]
    alice.do("claim", item=mine)
    git(work, "push", "-q", "origin", f"{STATE}:{STATE}")
    accepted = tip(bare)
    # A modified client that skips the rule grants the overlapping claim and pushes it with plain git.
    from gitwork import pathleases

    monkeypatch.setattr(pathleases, "holders", lambda *args, **kwargs: ([], []))
    Workplane(str(work), agent="bob").do("claim", item=theirs)
    monkeypatch.undo()
    forged = subprocess.run(["git", "push", "origin", f"{STATE}:{STATE}"], cwd=work, capture_output=True, text=True)
    assert forged.returncode != 0, forged.stderr
    assert "claim" in forged.stderr and tip(bare) == accepted


# --- the race: 8 claimants on 2 clones, overlapping globs ---------------------------------------------


def test_eight_claimants_on_two_clones_at_most_one_winner_per_overlapping_set(tmp_path: Path, url: str,
                                                                             machine_a: Path) -> None:
    a = machine_a
    groups = {"src": ["src/**", "src/api/**", "src/api/v1.py", "src/*.py"],
              "docs": ["docs", "docs/*.md", "docs/a/**", "docs/a/b.md"]}
    items = {glob: new_item(a, f"touch {glob}", "--path", glob) for globs in groups.values() for glob in globs}
    gw_ok(a, "sync")
    b = machine(tmp_path, "b", url)
    gw_ok(b, "sync")
    procs = []
    for n, (glob, item) in enumerate(items.items()):
        clone = a if n % 2 else b
        procs.append((glob, subprocess.Popen(
            [*__import__("conftest").gw_cmd("claim", item, "--as", f"agent{n}", "--json")], cwd=clone,
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)))
    outcome = {}
    for glob, proc in procs:
        out, err = proc.communicate(timeout=120)
        assert proc.returncode in (0, 75), err
        if proc.returncode == 75:
            assert "overlap" in err or "held" in err, err
        outcome[glob] = proc.returncode
    for globs in groups.values():
        winners = [g for g in globs if outcome[g] == 0]
        assert len(winners) <= 1, winners
    # The arbiter's own state agrees: per set, at most one live lease.
    gw_ok(a, "sync")
    with Workplane(str(a)) as wp:
        for globs in groups.values():
            live = [g for g in globs if (lease := wp.context().lease(items[g])) is not None and lease.is_active()]
            assert len(live) <= 1 and live == [g for g in globs if outcome[g] == 0]
