"""Piped ``gw list`` / ``gw ready`` print lines formatted in SQL (issue 27 point 3): no Python tuple per row.

The invariant: for every filter, sort and limit, the lines are byte for byte what the row path prints
(the rows ``queries.select`` builds, drawn by ``output.table``, which the terminal and ``--json`` still
use), on a fixed repository holding every case a line shows differently: short ids, held, expired and
expiring leases, items waiting on a dependency (done, open, missing) or on a timer (passed or not) or
a ref, a stored ``blocked`` status,
labels written by hand out of order and twice, no labels, non-ASCII titles, every priority.
"""

from __future__ import annotations

import datetime as dt
import os
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import Clock, make_repo, replace_blob
from gitwork import codec, layout
from gitwork.workplane import Workplane

T0 = dt.datetime(2030, 1, 1, 12, 0, 0, tzinfo=dt.timezone.utc)
AGENT = "alice@box/s1"


@pytest.fixture
def world(tmp_path: Path) -> tuple[Path, dict[str, str]]:
    repo = make_repo(tmp_path / "repo")
    clock = Clock(T0)
    made: dict[str, str] = {}
    with Workplane(str(repo), now=clock, agent=AGENT) as wp:
        wp.do("init")

        def new(name: str, **fields: object) -> str:
            clock.advance(7)
            made[name] = wp.do("new", title=name + " ünïcode 構成", **fields).result["item"]
            return made[name]

        # Ids sharing long prefixes, so the shortest forms differ in length.
        for n, item in enumerate(("w-abc0000000000001", "w-abc0000000000002", "w-abd0000000000001")):
            new(f"twin{n}", item=item, priority=n)
        base = new("base", labels=["db"], priority=1)
        new("top", depends_on=[base], labels=["web", "ui"], priority=1)
        done = new("gone", priority=3)
        wp.do("done", item=done)
        new("after-done", depends_on=[done], labels=["ui"], priority=4)
        new("half", depends_on=[done, base], priority=0)
        manual = new("manual", labels=["ui"])
        wp.do("edit", item=manual, status="blocked", reason="waiting for design")
        held = new("held", labels=["area-1"], priority=2)
        wp.do("claim", item=held, ttl=3600)
        stale = new("stale", priority=2)
        wp.do("claim", item=stale, ttl=60)
        gone = new("cancelled", priority=1)
        wp.do("cancel", item=gone, reason="not needed")
        hand = new("hand", priority=2)
        later = new("deferred", labels=["ui"], priority=2)  # a timer not yet passed: shown blocked, not ready
        wp.do("defer", item=later, until="2h")
        passed = new("deferred-passed", priority=3)  # its timer passes below: open and ready again
        wp.do("defer", item=passed, until="60s")
        gated = new("gated", priority=1)  # a ref wait: blocked until a command ends it
        wp.do("wait", item=gated, ref="feature", reachable_from="main")
        clock.advance(120)  # stale's lease is past its expiry: shown expired, and ready again after the margin
    # A hand-written item file: labels out of order and twice, a title with a tab, a missing dependency.
    doc = codec.load_yaml(subprocess.run(["git", "cat-file", "-p", f"refs/gitwork/state:{layout.item_path(hand, layout.ITEM_FILE)}"],
                                         cwd=repo, capture_output=True, check=True).stdout)
    doc.update(labels=["zeta", "alpha", "zeta"], title="hand\twritten «x»")
    replace_blob(repo, layout.item_path(hand, layout.ITEM_FILE), codec.dump_yaml(doc))
    missing_dep = dict(doc, id=made["twin2"], labels=[], title="twin2 waits on nothing there",
                       depends_on=["w-ffffffffffffffff"], priority=2)
    replace_blob(repo, layout.item_path(made["twin2"], layout.ITEM_FILE), codec.dump_yaml(missing_dep))
    return repo, made


CASES = [
    ("list",), ("list", "--all"), ("list", "-s", "blocked"), ("list", "-s", "expired"), ("list", "-s", "open,done"),
    ("list", "--holder", AGENT), ("list", "-l", "ui"), ("list", "--label-any", "db,zeta"),
    ("list", "--exclude-label", "ui"), ("list", "-p", "2"), ("list", "--sort", "title"), ("list", "--sort", "id"),
    ("list", "--sort", "created", "--all"), ("list", "--limit", "3"), ("list", "--limit", "0"),
    ("ready",), ("ready", "--limit", "2"), ("ready", "-l", "ui"), ("ready", "--sort", "title"), ("ready", "-p", "2"),
]


def pick_args(case: tuple[str, ...]) -> tuple[bool, dict[str, object]]:
    """The keyword arguments of ``listing.pick`` for one CLI case (the CLI's own option names)."""
    ready = case[0] == "ready"
    args: dict[str, object] = {}
    rest = list(case[1:])
    names = {"-s": "status", "--holder": "holder", "-l": "label", "--label-any": "label_any",
             "--exclude-label": "exclude_label", "-p": "priority", "--sort": "sort", "--limit": "limit"}
    while rest:
        flag = rest.pop(0)
        if flag == "--all":
            args["all"] = True
            continue
        value = rest.pop(0)
        key = names[flag]
        args[key] = int(value) if key in ("priority", "limit") else [value] if key in (
            "status", "label", "label_any", "exclude_label") else value
    return ready, args


def row_path(wp: Workplane, case: tuple[str, ...], capsys: pytest.CaptureFixture[str]) -> tuple[str, str]:
    from gitwork.cli.listing import pick, rows_view

    ready, args = pick_args(case)
    capsys.readouterr()
    rows_view(pick(wp, ready=ready, **args), False, "ready" if ready else "items")  # type: ignore[arg-type]
    return capsys.readouterr()


def test_lines_are_the_row_path_byte_for_byte(world: tuple[Path, dict[str, str]],
                                               capsys: pytest.CaptureFixture[str]) -> None:
    repo, made = world
    now = T0 + dt.timedelta(seconds=7 * 14 + 200)
    from gitwork.cli.listing import pick, rows_view

    with Workplane(str(repo), now=lambda: now, agent=AGENT) as wp:
        seen = set()
        for case in CASES:
            expected = row_path(wp, case, capsys)
            ready, args = pick_args(case)
            picked = pick(wp, ready=ready, lines=True, **args)  # type: ignore[arg-type]
            assert picked.lines is not None, f"{case}: the SQL-formatted lines were not used"
            rows_view(picked, False, "ready" if ready else "items")
            assert capsys.readouterr() == expected, case
            seen.update(line.split("\t")[1] for line in expected[0].splitlines())
    # The fixed repository shows every status a line can carry, so the comparison covers each one.
    assert seen >= {"open", "blocked", "in_progress", "expired", "done", "cancelled"}, seen
    cli_prints_the_sql_lines(repo, made)


def cli_prints_the_sql_lines(repo: Path, made: dict[str, str]) -> None:
    """The real entry point, piped, prints what the fixed repository holds (one world for both: its
    building is most of this file's time)."""
    env = {**os.environ, "GW_NOW": "2030-01-01T12:05:00Z", "GW_AGENT": AGENT}
    done = subprocess.run([sys.executable, "-m", "gitwork", "list", "--all"], cwd=repo, capture_output=True,
                          text=True, env=env)
    assert done.returncode == 0, done.stderr
    lines = {line.split("\t")[5]: line.split("\t") for line in done.stdout.splitlines()}
    hand = lines["hand\twritten «x»".split("\t")[0]]  # the title's tab splits it: the line holds it as written
    assert hand[4] == "zeta,alpha,zeta" and hand[5] == "hand" and hand[6] == "written «x»", hand
    assert lines["top ünïcode 構成"][1:5] == ["blocked", "1", "", "web,ui"] or \
        lines["top ünïcode 構成"][1:5] == ["blocked", "1", "", "ui,web"]
    assert lines["held ünïcode 構成"][1:4] == ["in_progress", "2", AGENT]
    assert lines["stale ünïcode 構成"][1:4] == ["expired", "2", AGENT]
    assert lines["twin2 waits on nothing there"][1] == "blocked"
    assert lines["twin0 ünïcode 構成"][0] == made["twin0"], "ids alike to the last digit are shown whole"
    assert lines["base ünïcode 構成"][0] != made["base"] and made["base"].startswith(lines["base ünïcode 構成"][0])
    ready = subprocess.run([sys.executable, "-m", "gitwork", "ready"], cwd=repo, capture_output=True, text=True,
                           env=env)
    titles = [line.split("\t")[5] for line in ready.stdout.splitlines()]
    assert "top ünïcode 構成" not in titles and "after-done ünïcode 構成" in titles and "base ünïcode 構成" in titles
