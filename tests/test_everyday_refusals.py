"""Issue 25, point 6: refusals that say who you are and what to do.

"Not the holder" is its own error kind (``not-holder``, exit 7 like ``stale``: docs/exit-codes.md), named on
every verb that acts as the holder, with "(you are X)"; the item's owner (or creator) and admins may still
edit the title, labels and dependencies of an item someone else holds; claiming or finishing an item whose
dependencies are not done is refused (exit 6) unless ``--force``. Real repositories, the real CLI entry point
(``gw_here``: in this process), nothing written by a refusal.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from conftest import gw_here, tip

ALICE = {"GW_AGENT": "alice", "GW_NO_AUTO_GC": "1"}
BOB = {"GW_AGENT": "bob", "GW_NO_AUTO_GC": "1"}
CAROL = {"GW_AGENT": "carol", "GW_NO_AUTO_GC": "1"}


def ok(repo: Path, *args: str, env: dict[str, str] = ALICE) -> dict:  # type: ignore[type-arg]
    done = gw_here(repo, *args, "--json", env=env)
    assert done.returncode == 0, (args, done.stdout, done.stderr)
    return json.loads(done.stdout)  # type: ignore[no-any-return]


def refused(repo: Path, *args: str, env: dict[str, str], code: int) -> dict:  # type: ignore[type-arg]
    before = tip(repo)
    done = gw_here(repo, *args, "--json", env=env)
    assert done.returncode == code, (args, done.returncode, done.stdout, done.stderr)
    assert len(done.stderr.splitlines()) == 1 and "Traceback" not in done.stderr, done.stderr
    assert tip(repo) == before, f"{args}: a refusal writes nothing"
    return json.loads(done.stdout)  # type: ignore[no-any-return]


@pytest.fixture
def plane(repo: Path) -> Path:
    ok(repo, "init")
    return repo


def test_not_the_holder_is_its_own_kind_on_every_verb(plane: Path) -> None:
    item = ok(plane, "new", "held", "-c", "one")["item"]
    ok(plane, "claim", item, env=BOB)
    for args in (["renew", item], ["release", item], ["handoff", item, "--reason", "blocked"],
                 ["edit", item, "-p", "1"], ["check", item, "1"], ["decision", item, "d", "--why", "w"],
                 ["done", item, "--force", "--reason", "r"], ["cancel", item], ["reopen", item]):
        error = refused(plane, *args, env=CAROL, code=7)
        assert error["error"] == "not-holder", (args, error)
        assert "(you are carol)" in error["message"] and "bob" in error["message"], (args, error["message"])
    # Your own lease that ended is still `stale`: you held it, it is gone.
    ok(plane, "release", item, env=BOB)
    assert refused(plane, "renew", item, env=BOB, code=7)["error"] == "stale"
    # Never held by you, held by nobody: not the holder either.
    assert refused(plane, "renew", item, env=CAROL, code=7)["error"] == "not-holder"


def test_owner_and_admins_may_edit_title_labels_deps_of_a_leased_item(plane: Path) -> None:
    base = ok(plane, "new", "base")["item"]
    item = ok(plane, "new", "leased", "--owner", "alice")["item"]
    mine = ok(plane, "new", "created by alice")["item"]  # the creator owns it when no owner is named
    ok(plane, "claim", item, env=BOB)
    ok(plane, "claim", mine, env=BOB)
    changed = ok(plane, "edit", item, "--title", "renamed", "--add-label", "ui", "--add-dep", base)
    assert changed["changed"] == ["depends_on", "labels", "title"]
    ok(plane, "edit", mine, "--add-label", "x")
    shown = ok(plane, "show", item)
    assert shown["title"] == "renamed" and shown["labels"] == ["ui"] and shown["depends_on"] == [base]
    assert shown["lease"]["holder"] == "bob", "the lease is untouched"
    # Only those fields: the rest stays the holder's.
    for args in (["-p", "0"], ["-d", "other"], ["--status", "blocked"], ["--add-criterion", "c"]):
        error = refused(plane, "edit", item, *args, env=ALICE, code=7)
        assert error["error"] == "not-holder" and "(you are alice)" in error["message"], error
        assert "title, labels and dependencies" in error["message"], error["message"]
    # Someone who neither owns the item nor is an admin: refused.
    assert refused(plane, "edit", item, "--add-label", "y", env=CAROL, code=7)["error"] == "not-holder"
    (plane / ".workplane").write_text("admins: [carol]\n")
    ok(plane, "edit", item, "--add-label", "y", env=CAROL)
    assert ok(plane, "show", item)["labels"] == ["ui", "y"]


def test_claim_and_done_refuse_open_dependencies_unless_forced(plane: Path) -> None:
    base = ok(plane, "new", "base")["item"]
    top = ok(plane, "new", "top", "--dep", base)["item"]
    error = refused(plane, "claim", top, env=ALICE, code=6)
    assert error["error"] == "illegal-transition" and base in error["message"] and "--force" in error["message"]
    assert error["details"]["open"] == [base]
    ok(plane, "claim", top, "--force")
    error = refused(plane, "done", top, env=ALICE, code=6)
    assert base in error["message"] and "--force" in error["message"]
    ok(plane, "done", top, "--force", "--reason", "base is not needed after all")
    # Done dependencies: no refusal, no --force needed.
    after = ok(plane, "new", "after", "--dep", base)["item"]
    ok(plane, "done", base)
    ok(plane, "claim", after)
    ok(plane, "done", after)


def test_whoami_names_the_identity_its_role_and_what_it_holds(plane: Path) -> None:
    item = ok(plane, "new", "held")["item"]
    ok(plane, "claim", item, env=BOB)
    (plane / ".workplane").write_text("admins: [carol]\n")
    assert ok(plane, "whoami", env=BOB) == {"ok": True, "item": None, "who": "bob", "role": "person",
                                            "holding": [item]}
    assert ok(plane, "whoami", env=CAROL)["role"] == "admin"
    text = gw_here(plane, "whoami", "--as", "dave", env=BOB)
    assert text.returncode == 0 and text.stdout == "dave (person); holds nothing\n", text
