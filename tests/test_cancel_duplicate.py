"""``gw cancel --duplicate-of ID`` (issue 25, point 8): the duplicate's id, resolved from a prefix, is
recorded in the cancel's reason and event; the other item must exist and not be the item itself, and a
refusal changes nothing, on the CLI and through ``gw apply`` (one engine). Real repositories.
"""

from __future__ import annotations

import json
from pathlib import Path

from conftest import run_gw, tip
from test_everyday import ALICE, gw_json, gw_ok, new


def test_the_duplicate_is_recorded_in_the_reason_and_the_event(repo: Path) -> None:
    gw_ok(repo, "init")
    kept = new(repo, "login fails")
    dup = new(repo, "cannot log in")
    done = gw_json(repo, "cancel", dup, "--duplicate-of", kept[:8])
    assert done["status"] == "cancelled" and done["duplicate_of"] == kept  # type: ignore[index]
    assert gw_json(repo, "show", dup)["closed_reason"] == f"duplicate of {kept}"  # type: ignore[index]
    event = gw_json(repo, "history", dup)[-1]  # type: ignore[index]
    assert event["type"] == "cancelled" and event["duplicate_of"] == kept and event["reason"] == f"duplicate of {kept}"
    other = new(repo, "also that")
    gw_ok(repo, "cancel", other, "--duplicate-of", kept, "--reason", "same stack trace")
    event = gw_json(repo, "history", other)[-1]  # type: ignore[index]
    assert event["reason"] == "same stack trace" and event["duplicate_of"] == kept, "a given reason is kept"
    assert gw_json(repo, "show", kept)["status"] == "open"  # type: ignore[index]


def test_an_unknown_or_self_duplicate_is_refused_and_changes_nothing(repo: Path, tmp_path: Path) -> None:
    gw_ok(repo, "init")
    item = new(repo, "one")
    before = tip(repo)
    unknown = run_gw(repo, "cancel", item, "--duplicate-of", "w-0000000000000000", env=ALICE)
    assert unknown.returncode == 3 and len(unknown.stderr.splitlines()) == 1 and "Traceback" not in unknown.stderr
    itself = run_gw(repo, "cancel", item, "--duplicate-of", item, env=ALICE)
    assert itself.returncode == 5 and "duplicate of itself" in itself.stderr
    document = tmp_path / "cancel.json"
    document.write_text(json.dumps({"op": "cancel", "item": item, "duplicate_of": "w-0000000000000000"}))
    applied = run_gw(repo, "apply", str(document), env=ALICE)
    assert applied.returncode == 3, applied.stderr
    document.write_text(json.dumps({"op": "cancel", "item": item, "duplicate_of": "not an id"}))
    assert run_gw(repo, "apply", str(document), env=ALICE).returncode in (3, 5)
    assert tip(repo) == before
    assert gw_json(repo, "show", item)["status"] == "open"  # type: ignore[index]
