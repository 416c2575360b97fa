"""Refusals that say who you are and what to do (issue 25, point 6), through the real ``gw`` in child
processes on real repositories: an empty ``GW_AGENT`` is exit 5; listings with no state ref say how to
get one; ``--holder @me`` / ``--mine``; a missing optional extra is named, never an internal error.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from conftest import git, make_repo, run_gw, tip
from gitwork.errors import ExitCode

ALICE = {"GW_AGENT": "alice", "GW_NO_AUTO_GC": "1"}


def ok(repo: Path, *args: str, env: dict[str, str] | None = None) -> str:
    done = run_gw(repo, *args, env={**ALICE, **(env or {})})
    assert done.returncode == 0, (args, done.stderr)
    return done.stdout


def test_an_empty_gw_agent_is_refused_not_the_default(repo: Path) -> None:
    ok(repo, "init")
    before = tip(repo)
    for value in ("", "  "):
        for args in (("new", "x"), ("list",), ("claim", "--next"), ("list", "--json")):
            done = run_gw(repo, *args, env={"GW_AGENT": value})
            assert done.returncode == ExitCode.INVALID, (value, args, done.stderr)
            assert "GW_AGENT" in done.stderr and done.stderr.count("\n") == 1
    assert tip(repo) == before
    assert ok(repo, "list", "--as", "bob", env={"GW_AGENT": ""}) == ""  # --as wins over an empty variable


def test_listings_without_a_state_ref_say_how_to_get_one(tmp_path: Path) -> None:
    plain = make_repo(tmp_path / "plain")
    bare = make_repo(tmp_path / "bare.git", bare=True)
    git(tmp_path, "clone", "-q", str(bare), str(tmp_path / "clone"))
    for where, hint in ((plain, "gw init starts one"), (bare, "gw init starts one"),
                        (tmp_path / "clone", "gw init --remote origin")):
        for args in (("list",), ("ready",), ("list", "--json")):
            done = run_gw(where, *args, env=ALICE)
            assert done.returncode == 0, done.stderr
            assert done.stdout in ("", "[]\n")
            assert "no gitwork state" in done.stderr and hint in done.stderr, (where, done.stderr)
        assert tip(where) is None  # a listing creates nothing
    ok(plain, "init")
    # An empty listing of a real state says so in the one style of every empty listing (issue 25, point 7).
    assert run_gw(plain, "list", env=ALICE).stderr == "gw: no items match\n"


def test_holder_at_me_and_mine(repo: Path) -> None:
    ok(repo, "init")
    mine = ok(repo, "new", "mine").strip()
    theirs = ok(repo, "new", "theirs").strip()
    ok(repo, "new", "nobody's")
    ok(repo, "claim", mine)
    ok(repo, "claim", theirs, env={"GW_AGENT": "bob"})
    for args in (("list", "--mine"), ("list", "--holder", "@me"), ("search", "i", "--mine")):
        rows = json.loads(ok(repo, *args, "--json"))
        assert [row["item"] for row in rows] == [mine], args
    assert [r["item"] for r in json.loads(ok(repo, "list", "--mine", "--json", env={"GW_AGENT": "bob"}))] == [theirs]
    done = run_gw(repo, "list", "--mine", "--holder", "bob", env=ALICE)
    assert done.returncode == ExitCode.INVALID and "--mine" in done.stderr


RULES = """sessions:
  operators:
    planner: {command: [python3, plan.py]}
  steps:
    plan: {operator: planner}
  chains:
    solo: [plan]
"""


def test_a_missing_optional_extra_is_named(repo: Path) -> None:
    git(repo, "-c", "user.name=P", "-c", "user.email=p@x", "commit", "-q", "--allow-empty", "-m", "start")
    (repo / ".workplane").write_text(RULES, encoding="utf-8")
    ok(repo, "init")
    item = ok(repo, "new", "steps").strip()
    before = tip(repo)
    # The module missing as an uninstalled one is: the import itself fails (ModuleNotFoundError).
    script = ("import sys; sys.modules['fastjsonschema'] = None\n"
              "from gitwork.cli.main import main; sys.exit(main())")
    for extra in ([], ["--json"]):
        done = subprocess.run([sys.executable, "-c", script, "session", "create", item, "--chain", "solo", *extra],
                              cwd=repo, capture_output=True, text=True, env={**__import__("os").environ, **ALICE},
                              timeout=60)
        assert done.returncode == ExitCode.INVALID, done.stderr
        assert "pip install 'gitwork[sessions]'" in done.stderr and "internal" not in done.stderr
        if extra:
            assert json.loads(done.stdout)["details"] == {"extra": "sessions", "module": "fastjsonschema"}
    assert tip(repo) == before


def test_every_holder_verb_says_who_you_are(repo: Path) -> None:
    """Refused as not the holder (someone else holds it, or nobody does), every verb names who you are."""
    ok(repo, "init")
    held = ok(repo, "new", "bob's", "-c", "one").strip()
    free = ok(repo, "new", "nobody's").strip()
    ok(repo, "claim", held, env={"GW_AGENT": "bob"})
    before = tip(repo)
    verbs = [("renew",), ("release",), ("handoff", "--reason", "blocked"), ("edit", "-p", "0"), ("check", "1"),
             ("decision", "d", "--why", "w"), ("done",), ("cancel",)]
    for verb, *rest in verbs:
        for item in (held, free):
            if item == free and verb in ("edit", "check", "decision", "done", "cancel"):
                continue  # nobody holds it: anyone may (no holder to be)
            done = run_gw(repo, verb, item, *rest, env=ALICE)
            assert done.returncode == ExitCode.STALE, (verb, item, done.stderr)
            assert "(you are alice)" in done.stderr, (verb, item, done.stderr)
    assert tip(repo) == before
