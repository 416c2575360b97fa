"""Issue 25, point 8: date filters on ``gw list``, ``ready`` and ``search``.

``--created-after``, ``--created-before``, ``--updated-after``, ``--updated-before`` take an ISO date or
instant, or a time back from now (``7d``, ``2w``, ``12h``, ``today``, ``yesterday``), read from the one
clock (freezegun here); they are SQL over the read cache (``queries.statement``). A malformed value is
exit 5. Real repository, the real entry point, in this process (so freezegun reaches the clock).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from freezegun import freeze_time

from conftest import gw_here

ENV = {"GW_AGENT": "alice", "GW_NO_AUTO_GC": "1"}


def ok(repo: Path, *args: str) -> str:
    done = gw_here(repo, *args, env=ENV)
    assert done.returncode == 0, (args, done.stdout, done.stderr)
    return done.stdout


@pytest.fixture
def world(repo: Path) -> tuple[Path, dict[str, str]]:
    with freeze_time("2026-11-01T10:00:00Z"):
        ok(repo, "init")
        old = ok(repo, "new", "old item about parsing").strip()
    with freeze_time("2026-11-20T10:00:00Z"):
        mid = ok(repo, "new", "middle item about parsing").strip()
    with freeze_time("2026-12-01T08:00:00Z"):
        new = ok(repo, "new", "new item about parsing").strip()
    with freeze_time("2026-12-01T09:00:00Z"):
        ok(repo, "edit", old, "--title", "old item about parsing, touched")  # updated now, created long ago
    return repo, {"old": old, "mid": mid, "new": new}


def listed(repo: Path, *args: str, verb: str = "list") -> set[str]:
    with freeze_time("2026-12-02T12:00:00Z"):
        rows = json.loads(ok(repo, verb, *args, "--json"))
    return {row["item"] for row in rows}


def test_created_and_updated_windows(world: tuple[Path, dict[str, str]]) -> None:
    repo, item = world
    assert listed(repo, "--created-after", "2026-11-15") == {item["mid"], item["new"]}
    assert listed(repo, "--created-before", "2026-11-15") == {item["old"]}
    assert listed(repo, "--created-after", "7d") == {item["new"]}, "7 days back from the frozen now"
    assert listed(repo, "--created-after", "2w") == {item["mid"], item["new"]}
    assert listed(repo, "--created-after", "yesterday") == {item["new"]}, "from yesterday 00:00 UTC"
    assert listed(repo, "--created-after", "today") == set()
    assert listed(repo, "--updated-after", "2026-12-01") == {item["old"], item["new"]}, "the edit moved its update"
    assert listed(repo, "--updated-after", "2026-12-01T08:30:00Z") == {item["old"]}
    assert listed(repo, "--updated-before", "2026-11-25T00:00:00Z") == {item["mid"]}
    assert listed(repo, "--created-after", "2026-11-10", "--created-before", "2026-11-25") == {item["mid"]}
    assert listed(repo, "--created-after", "2w", verb="ready") == {item["mid"], item["new"]}
    with freeze_time("2026-12-02T12:00:00Z"):
        found = json.loads(ok(repo, "search", "parsing", "--updated-after", "3d", "--json"))
    assert {entry["item"] for entry in found} == {item["old"], item["new"]}


@pytest.mark.parametrize("value", ["soon", "7x", "2026-13-45", "", "-3d", "tomorrow"])
def test_malformed_dates_are_exit_5(repo: Path, value: str) -> None:
    ok(repo, "init")
    done = gw_here(repo, "list", "--created-after", value, env=ENV)
    assert done.returncode == 5 and "--created-after" in done.stderr, (done.stdout, done.stderr)
    assert len(done.stderr.strip().splitlines()) == 1


def test_the_filter_is_sql_over_the_cache() -> None:
    from gitwork.queries import statement

    sql, args = statement(__import__("datetime").datetime(2026, 12, 2, tzinfo=__import__("datetime").timezone.utc),
                          dates=(("created", ">=", "2026-11-01T00:00:00Z"), ("updated", "<", "2026-12-01T00:00:00Z")))
    assert "i.created >= ?" in sql and "i.updated < ?" in sql
    assert "2026-11-01T00:00:00Z" in args and "2026-12-01T00:00:00Z" in args


def test_sort_updated_is_sql_too(world: tuple[Path, dict[str, str]]) -> None:
    import datetime as dt

    from gitwork.queries import statement

    sql, _args = statement(dt.datetime(2026, 12, 2, tzinfo=dt.timezone.utc), sort="updated")
    assert "ORDER BY i.updated DESC" in sql, "no item file is read to sort by the last change"
    repo, item = world
    with freeze_time("2026-12-02T12:00:00Z"):
        rows = json.loads(ok(repo, "list", "--sort", "updated", "--json"))
        assert [r["item"] for r in rows] == [item["old"], item["new"], item["mid"]]
        cut = json.loads(ok(repo, "list", "--sort", "updated", "-n", "1", "--json"))
    assert [r["item"] for r in cut] == [item["old"]]
