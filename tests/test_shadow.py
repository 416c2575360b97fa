"""gw shadow (issue 16): a comparison window against the tracker a team still runs, report only.

A scripted divergence (the other tracker closes an item, gitwork reassigns one, the other tracker
adds a dependency) is reported exactly; the other tracker's files are byte-identical afterwards (and
keep their modification time); a recorded report lands on the state ref and ``--since`` reads the
window's history back.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from pathlib import Path

import pytest

from conftest import Clock, run_gw, tip
from gitwork import importers
from gitwork.errors import NotFound
from gitwork.importers import shadow
from gitwork.workplane import Workplane

FIXTURES = Path(__file__).parent / "fixtures" / "import"


def fingerprint(folder: Path) -> dict[str, tuple[str, int]]:
    return {p.name: (hashlib.sha256(p.read_bytes()).hexdigest(), p.stat().st_mtime_ns) for p in folder.iterdir()}


@pytest.fixture
def tracker(tmp_path: Path, repo: Path) -> tuple[Path, Workplane, Clock]:
    """beads' folder imported into gitwork; then the scripted divergence on both sides."""
    beads = tmp_path / "other" / ".beads"
    beads.mkdir(parents=True)
    shutil.copy(FIXTURES / "beads.jsonl", beads / "issues.jsonl")
    clock = Clock()
    wp = Workplane(str(repo), agent="lead", now=clock)
    wp.do("init")
    importers.run(wp, "beads", str(beads / "issues.jsonl"))
    lines = [json.loads(line) for line in (beads / "issues.jsonl").read_text().splitlines()]
    by_id = {line["id"]: line for line in lines}
    by_id["bd-a4"].update(status="closed", closed_at="2030-01-01T12:00:00Z")  # they close one
    by_id["bd-a1"]["dependencies"] = [{"issue_id": "bd-a1", "depends_on_id": "bd-a3", "type": "blocks"}]  # add a dep
    (beads / "issues.jsonl").write_text("".join(json.dumps(line) + "\n" for line in lines))
    with Workplane(str(repo), agent="carol", now=clock) as carol:  # we reassign one: carol holds alice's item
        carol.do("claim", item=importers.item_id("beads", "bd-a2"), ttl="1h")
    return beads, wp, clock


def test_a_scripted_divergence_is_reported_exactly_and_the_other_side_is_untouched(tracker, tmp_path: Path) -> None:
    beads, wp, clock = tracker
    before = fingerprint(beads)
    shadow.add(wp, "bd", "beads", str(beads / "issues.jsonl"))
    report = shadow.compare(wp, "bd")
    found = sorted((d["aspect"], d["external"]) for d in report["divergences"])
    assert found == [("assignee", "bd-a2"), ("dependencies", "bd-a1"), ("status", "bd-a4")]
    status = next(d for d in report["divergences"] if d["aspect"] == "status")
    assert (status["source"], status["gitwork"]) == ("done", "open")
    assignee = next(d for d in report["divergences"] if d["aspect"] == "assignee")
    assert (assignee["source"], assignee["gitwork"], assignee["holder"]) == ("alice", "carol", "carol")
    assert report["compared"] == 5 and report["agree"] == 2 and report["agreement"] == 0.4
    assert report["counts"] == {"status": 1, "assignee": 1, "dependencies": 1, "closed_at": 0,
                                "only_in_source": 0, "only_in_gitwork": 0}
    assert fingerprint(beads) == before


def test_items_on_one_side_only_and_close_times(tracker, tmp_path: Path) -> None:
    beads, wp, clock = tracker
    source = beads / "issues.jsonl"
    lines = [json.loads(line) for line in source.read_text().splitlines()]
    lines = [line for line in lines if line["id"] != "bd-a6"]  # gone from theirs
    lines.append({"id": "bd-new", "title": "only theirs", "status": "open"})
    store = next(line for line in lines if line["id"] == "bd-a3")
    other = tmp_path / "changed.jsonl"
    other.write_text("".join(json.dumps(line) + "\n" for line in lines))
    # gitwork closed bd-a3 much later than they did
    wp.submit({"op": "import", "item": importers.item_id("beads", "bd-a3"), "source": "beads", "external": "bd-a3",
               "status": "open"})
    clock.advance(86400)
    wp.submit({"op": "import", "item": importers.item_id("beads", "bd-a3"), "source": "beads", "external": "bd-a3",
               "status": "done"})
    assert store["closed_at"] == "2025-01-11T09:00:00Z"
    shadow.add(wp, "bd", "beads", f"cat {other}")  # a command printing the export
    report = shadow.compare(wp, "bd")
    aspects = sorted((d["aspect"], d["external"]) for d in report["divergences"])
    assert ("only_in_source", "bd-new") in aspects and ("only_in_gitwork", "bd-a6") in aspects
    assert ("closed_at", "bd-a3") in aspects


def test_a_recorded_report_is_on_the_state_ref_and_since_reads_the_window(tracker) -> None:
    beads, wp, clock = tracker
    shadow.add(wp, "bd", "beads", str(beads / "issues.jsonl"))
    first = tip(wp.repo.toplevel)
    wp.do("shadow-report", shadow="bd", report=shadow.summary_of(shadow.compare(wp, "bd")))
    assert tip(wp.repo.toplevel) != first
    clock.advance(3 * 86400)
    wp.do("shadow-report", shadow="bd", report=shadow.summary_of(shadow.compare(wp, "bd")))
    assert [e["seq"] for e in shadow.history(wp, "bd", "1d")] == [2]
    # Three days on, carol's one-hour lease has expired: bd-a2 is alice's again on both sides.
    assert [e["agree"] for e in shadow.history(wp, "bd", "7d")] == [2, 3]


def test_the_cli_reports_records_and_refuses_unknown_shadows(tracker, repo: Path) -> None:
    beads, wp, clock = tracker
    env = {"GW_NOW": "2030-01-01T12:00:00Z"}
    done = run_gw(repo, "shadow", "add", "bd", "--kind", "beads", "--source", str(beads / "issues.jsonl"), env=env)
    assert done.returncode == 0, done.stderr
    before = tip(repo)
    done = run_gw(repo, "shadow", "report", env=env)
    assert done.returncode == 0, done.stderr
    assert "2/5 agree (40.0%)" in done.stderr and done.stdout.count("\n") == 3
    assert tip(repo) == before  # a report is read-only unless --record
    done = run_gw(repo, "shadow", "report", "bd", "--record", "--since", "1d", "--json", env=env)
    report = json.loads(done.stdout)
    assert report["recorded"] == tip(repo) != before and len(report["history"]) == 1
    missing = run_gw(repo, "shadow", "report", "nope")
    assert missing.returncode == 3 and "no shadow 'nope'" in missing.stderr
    with pytest.raises(NotFound):
        shadow.compare(wp, "nope")
    assert os.path.exists(os.path.join(wp.repo.common_dir, "gitwork", "shadows.json"))


@pytest.fixture
def temp_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """tempfile's folder for this test alone, to see what a report leaves behind."""
    import tempfile

    folder = tmp_path / "temp"
    folder.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(folder))
    return folder


def test_a_command_printing_past_the_bound_is_refused_without_holding_its_output(
        tracker, temp_folder: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A shadow's command's output goes to a file as it comes: past the bound (256 MiB; 1 MiB here, so the
    test does not write 256 MiB) the command is killed and the report refused, with at most a few chunks
    in memory. It was read whole, then measured: this command's 64 MiB were held."""
    import tracemalloc

    _beads, wp, _clock = tracker
    monkeypatch.setattr(shadow, "MAX_FILE", 1 << 20)
    shadow.add(wp, "big", "beads", f"head -c {64 << 20} /dev/zero")
    tracemalloc.start()
    try:
        with pytest.raises(shadow.Invalid, match="printed more than 1 MiB"):
            shadow.compare(wp, "big")
        _now, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 8 << 20, f"{peak >> 20} MiB held at the peak"
    assert list(temp_folder.iterdir()) == []  # the partial copy is removed


def test_a_command_past_its_time_is_killed_with_what_it_started(
        tracker, temp_folder: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from conftest import poll

    _beads, wp, _clock = tracker
    pids = tmp_path / "pids"
    monkeypatch.setattr(shadow, "COMMAND_TIMEOUT", 0.5)
    shadow.add(wp, "slow", "beads", f"sleep 60 & echo $! > {pids}; sleep 60")
    with pytest.raises(shadow.Invalid, match="did not finish in 0.5 s"):
        shadow.compare(wp, "slow")
    child = int(pids.read_text())

    def gone() -> bool:
        try:
            os.kill(child, 0)
        except ProcessLookupError:
            return True
        return False

    poll(gone, timeout=10, what="the command's own child to be killed")
    assert list(temp_folder.iterdir()) == []


def test_a_failing_command_says_its_last_error_line(tracker, temp_folder: Path) -> None:
    _beads, wp, _clock = tracker
    shadow.add(wp, "bad", "beads", "yes noise | head -c 99996 >&2; echo 'gh: not logged in' >&2; exit 4")
    with pytest.raises(shadow.Invalid, match=r"failed \(exit 4\): gh: not logged in$"):
        shadow.compare(wp, "bad")
    assert list(temp_folder.iterdir()) == []
