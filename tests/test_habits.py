"""bd and gh habits (issue 25, point 5): their verbs as aliases, hints for their options, "did you
mean" by meaning, completion of ids for every verb that takes one. Real ``gw`` processes, real repos."""

from __future__ import annotations

import json
from pathlib import Path

from conftest import run_gw, tip
from gitwork.cli.fast_table import GROUPS, TYPER_ONLY, VERBS
from gitwork.cli.main import ALIASES, MEANINGS
from gitwork.errors import ExitCode

ALICE = {"GW_AGENT": "alice", "GW_NO_AUTO_GC": "1"}


def ok(repo: Path, *args: str) -> str:
    done = run_gw(repo, *args, env=ALICE)
    assert done.returncode == 0, (args, done.stderr)
    return done.stdout


def test_bd_and_gh_verbs_are_aliases(repo: Path) -> None:
    ok(repo, "init")
    item = ok(repo, "create", "from bd", "-c", "works").strip()
    assert ok(repo, "view", item).startswith(f"{item}  from bd\n")
    ok(repo, "comment", item, "looks fine")
    assert [m["text"] for m in json.loads(ok(repo, "thread", item, "--json"))] == ["looks fine"]
    ok(repo, "update", item, "--title", "renamed")
    ok(repo, "claim", item)
    ok(repo, "check", item, "1")
    ok(repo, "close", item)
    assert json.loads(ok(repo, "view", item, "--json"))["status"] == "done"
    assert set(ALIASES.values()) <= set(VERBS) and not set(ALIASES) & set(VERBS)


def test_hints_for_gh_options_and_words_that_are_not_verbs(repo: Path) -> None:
    ok(repo, "init")
    before = tip(repo)
    for args, says in ((("list", "--json", "item,title"), "--json=item,title"),
                       (("list", "--assignee", "bob"), "--holder NAME"),
                       (("list", "--assignee=bob"), "--holder NAME"),
                       (("assign", "w-1"), "gw claim ID"),
                       (("finish", "w-1"), "gw done ID"),
                       (("ls",), "gw list")):
        done = run_gw(repo, *args, env=ALICE)
        assert done.returncode == ExitCode.USAGE, (args, done.stderr)
        assert says in done.stderr and done.stderr.count("\n") == 1, (args, done.stderr)
    assert tip(repo) == before
    # a message text after --json is not a field list
    item = ok(repo, "new", "x").strip()
    ok(repo, "msg", item, "--json", "yes, ship it")
    # no meaning shadows a verb; every meaning names one
    verbs = set(VERBS) | {group.split()[0] for group in GROUPS} | set(TYPER_ONLY)
    assert not set(MEANINGS) & verbs
    assert all(meaning.split()[0] in verbs for meaning in MEANINGS.values())


def test_claim_completes_item_ids(repo: Path) -> None:
    ok(repo, "init")
    item = ok(repo, "new", "complete me").strip()
    env = {**ALICE, "_GW_COMPLETE": "complete_bash", "COMP_WORDS": "gw claim w-", "COMP_CWORD": "2"}
    done = run_gw(repo, env=env)
    assert done.returncode == 0, done.stderr
    assert item in done.stdout


def test_id_completion_answers_without_the_framework_as_typer_does(repo: Path) -> None:
    import os
    import subprocess
    import sys

    ok(repo, "init")
    items = sorted(ok(repo, "new", f"item {n}").strip() for n in range(3))
    fast = ("import sys\nfrom gitwork.cli.main import main\ncode = main([])\n"
            "print(sorted(m for m in sys.modules if m.split('.')[0] in ('typer', 'click', 'rich')), file=sys.stderr)\n"
            "sys.exit(code)")
    typer = "import sys\nfrom gitwork.cli.app import run_app\nsys.exit(run_app([]))"
    for words, cword in (("gw show w-", 2), ("gw claim ", 2), (f"gw release {items[0]} w-", 3),
                         ("gw done -C . w-", 4), ("gw show --json w-", 3)):
        env = {**os.environ, **ALICE, "_GW_COMPLETE": "complete_bash", "COMP_WORDS": words, "COMP_CWORD": str(cword)}
        got = subprocess.run([sys.executable, "-c", fast], cwd=repo, env=env, capture_output=True, text=True)
        want = subprocess.run([sys.executable, "-c", typer], cwd=repo, env=env, capture_output=True, text=True)
        assert got.returncode == want.returncode == 0, (got.stderr, want.stderr)
        assert got.stdout == want.stdout and sorted(got.stdout.split()) == items, (words, got.stdout, want.stdout)
        assert got.stderr.strip().splitlines()[-1] == "[]", (words, got.stderr)
