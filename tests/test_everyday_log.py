"""Issue 25, point 10: readable history of one item: ``gw log ITEM`` (its history, old -> new values,
oldest first) and ``--since`` (a duration back from now, or an instant) on ``log`` and ``history``.
Time from ``GW_NOW`` (the one injectable clock), real repositories, the real entry point."""

from __future__ import annotations

import json
from pathlib import Path

from conftest import gw_here

DAY1, DAY2, DAY3 = "2030-01-01T10:00:00Z", "2030-01-02T10:00:00Z", "2030-01-03T10:00:00Z"


def ok(repo: Path, at: str, *args: str) -> str:
    done = gw_here(repo, *args, env={"GW_AGENT": "alice", "GW_NO_AUTO_GC": "1", "GW_NOW": at})
    assert done.returncode == 0, (args, done.stdout, done.stderr)
    return done.stdout


def test_log_of_one_item_and_since(repo: Path) -> None:
    ok(repo, DAY1, "init")
    item = ok(repo, DAY1, "new", "first title").strip()
    other = ok(repo, DAY1, "new", "another").strip()
    ok(repo, DAY2, "edit", item, "--title", "second title", "--add-label", "a")
    ok(repo, DAY3, "edit", item, "--title", "third title")
    ok(repo, DAY3, "edit", other, "-p", "0")

    lines = ok(repo, DAY3, "log", item).splitlines()
    assert [line.split("\t")[3] for line in lines] == ["created", "edited", "edited"], "oldest first, this item only"
    assert lines[2].split("\t")[4] == "title: second title -> third title", "old -> new, never a repr"
    assert ok(repo, DAY3, "log", item, "--json") == ok(repo, DAY3, "history", item, "--json")

    since = ok(repo, DAY3, "log", item, "--since", "1d").splitlines()
    assert len(since) == 2 and since[0].split("\t")[1] == DAY2 and "first title -> second title" in since[0]
    assert [r["at"] for r in json.loads(ok(repo, DAY3, "history", item, "--since", DAY3, "--json"))] == [DAY3]

    commits = json.loads(ok(repo, DAY3, "log", "--since", "12h", "--json"))
    assert [c["at"] for c in commits] == [DAY3, DAY3], "the state ref's commits from then on, newest first"
    assert len(json.loads(ok(repo, DAY3, "log", "--json"))) == 6
    bad = gw_here(repo, "log", "--since", "yesterday-ish", env={"GW_AGENT": "alice"})
    assert bad.returncode == 5 and len(bad.stderr.splitlines()) == 1
