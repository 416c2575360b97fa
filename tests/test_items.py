"""The work item lifecycle through the Python API and the CLI, and what gw must never touch.

Item fields, provenance, dependencies, criteria, decisions, status transitions and the item's own
append-only history; `ready` ordering; shortest-unique-prefix display; and that every `gw` command
leaves the working tree, the index and HEAD alone, works from a linked worktree and in a bare
repository, and needs no git identity.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
from pathlib import Path
from typing import Any

import pytest

from conftest import Clock, git, gw_here, init_state, make_repo, run_gw, tip
from gitwork import layout
from gitwork.errors import Illegal, Invalid, Stale
from gitwork.workplane import Workplane

T0 = dt.datetime(2030, 1, 1, 12, 0, 0, tzinfo=dt.timezone.utc)




@pytest.fixture
def clock() -> Clock:
    return Clock(T0)


@pytest.fixture
def plane(repo: Path, clock: Clock):  # type: ignore[no-untyped-def]
    wp = Workplane(str(repo), now=clock, agent="alice")
    wp.do("init")
    yield wp
    wp.close()


def new(wp: Workplane, title: str, **args: Any) -> str:
    return wp.do("new", title=title, **args).result["item"]


def gw_json(repo: Path, *args: str, env: dict[str, str] | None = None) -> Any:
    """``gw *args --json`` through the CLI's entry point in this process (``gw_here``)."""
    done = gw_here(repo, *args, "--json", env=env)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def events_blob(repo: Path, item: str) -> bytes:
    done = git(repo, "cat-file", "blob", f"refs/gitwork/state:{layout.item_path(item, layout.EVENTS_FILE)}")
    return done.encode()


# --- creating and reading ------------------------------------------------------------------------


def test_new_records_every_field_and_its_provenance(plane: Workplane, clock: Clock) -> None:
    base = new(plane, "Base")
    item = new(
        plane,
        "  Write the docs  ",
        description="Long\ntext",
        priority=1,
        labels=["docs", "v1", "docs"],
        depends_on=[base[:7]],  # a prefix: stored resolved
        criteria=["README explains it", "format.md exists"],
        owner="bob",
        source="https://example.com/issues/2",
    )
    view = plane.show(item[:8])
    doc = view["item"]
    assert view["lease"] is None
    assert doc["id"] == item and doc["title"] == "Write the docs"
    assert doc["description"] == "Long\ntext"
    assert (doc["priority"], doc["owner"], doc["status"]) == (1, "bob", "open")
    assert doc["labels"] == ["docs", "v1"]
    assert doc["depends_on"] == [base]
    assert doc["criteria"] == [{"text": "README explains it", "checked": False},
                               {"text": "format.md exists", "checked": False}]
    assert doc["provenance"] == {"by": "alice", "at": "2030-01-01T12:00:00Z",
                                 "source": {"kind": "url", "ref": "https://example.com/issues/2"}}
    assert doc["created_at"] == "2030-01-01T12:00:00Z"
    # The file on the ref is plain YAML a person can read with git show.
    shown = git(plane.repo.toplevel, "show", f"refs/gitwork/state:{layout.item_path(item, 'item.yaml')}")
    assert 'title: "Write the docs"' in shown


@pytest.mark.parametrize(
    ("source", "kind", "ref"),
    [
        ("http://x.org/a?b=c", "url", "http://x.org/a?b=c"),
        ("commit:0123abcd", "commit", "0123abcd"),
        ("deadbeefcafe", "commit", "deadbeefcafe"),
        ("file:src/main.py:42", "file", "src/main.py:42"),
        ("a chat with carol", "text", "a chat with carol"),
    ],
)
def test_provenance_kinds(plane: Workplane, source: str, kind: str, ref: str) -> None:
    item = new(plane, "From somewhere", source=source)
    assert plane.item(item).provenance["source"] == {"kind": kind, "ref": ref}


def test_provenance_from_another_item_is_resolved_to_its_full_id(plane: Workplane) -> None:
    parent = new(plane, "Parent")
    by_prefix = new(plane, "Child", source=parent[:6])
    by_tag = new(plane, "Child 2", source="item:" + parent[2:9])
    assert plane.item(by_prefix).provenance["source"] == {"kind": "item", "ref": parent}
    assert plane.item(by_tag).provenance["source"] == {"kind": "item", "ref": parent}


def test_new_through_the_cli_prints_the_id_and_show_reads_it_back(repo: Path) -> None:
    init_state(repo)  # set-up, not under test: through the library
    made = run_gw(repo, "new", "Ship it", "-p", "0", "-l", "release", "-c", "tests pass", "--from", "file:x.py",
                  "--as", "carol")
    assert made.returncode == 0, made.stderr
    item = made.stdout.strip()
    assert item.startswith("w-") and len(item) == 18
    shown = gw_json(repo, "show", item[:8])
    assert shown["title"] == "Ship it"
    assert shown["provenance"]["by"] == "carol"
    assert shown["provenance"]["source"] == {"kind": "file", "ref": "x.py"}
    plain = run_gw(repo, "show", item)
    assert plain.returncode == 0 and plain.stdout.startswith(f"{item}  Ship it\n")


def test_list_filters(repo: Path) -> None:
    wp = Workplane(str(repo), agent="alice")
    wp.do("init")
    a = new(wp, "alpha", labels=["ui"])
    b = new(wp, "beta", labels=["ui", "api"])
    c = new(wp, "gamma", labels=["api"])
    d = new(wp, "delta")
    wp.do("claim", item=b, **{"as": "bob"})
    wp.do("done", item=c)
    wp.do("cancel", item=d)
    wp.close()

    def ids(*args: str) -> set[str]:
        return {row["item"] for row in gw_json(repo, "list", *args)}

    assert ids() == {a, b}  # closed items hidden by default
    assert ids("--all") == {a, b, c, d}
    assert ids("--status", "done") == {c}
    assert ids("--status", "done", "--status", "cancelled") == {c, d}
    assert ids("--label", "ui") == {a, b}
    assert ids("--label", "ui", "--label", "api") == {b}
    assert ids("--all", "--label", "api") == {b, c}
    assert ids("--holder", "bob") == {b}
    assert ids("--holder", "alice") == set()
    rows = {row["item"]: row for row in gw_json(repo, "list")}
    assert rows[b]["holder"] == "bob" and rows[b]["status"] == "in_progress"
    assert rows[a]["holder"] is None


def test_ready_orders_by_priority_then_age_and_skips_what_cannot_start(plane: Workplane, clock: Clock) -> None:
    def make(title: str, **args: Any) -> str:
        clock.advance(10)
        return new(plane, title, **args)

    old_p2 = make("old p2")
    p0 = make("p0", priority=0)
    young_p2 = make("young p2")
    p1 = make("p1", priority=1)
    oldest_p4 = make("p4", priority=4)
    blocked = make("blocked", priority=0)
    held = make("held", priority=0)
    waiting = make("waits on p1", priority=0, depends_on=[p1])
    finished = make("finished", priority=0)
    plane.do("edit", item=blocked, status="blocked")
    plane.do("claim", item=held, **{"as": "bob"})
    plane.do("done", item=finished)

    order = [row[0] for row in plane.ready()]
    assert order == [p0, p1, old_p2, young_p2, oldest_p4]
    cli = [row["item"] for row in gw_json(Path(plane.repo.toplevel), "ready")]
    # The CLI runs with the real clock, years before T0: the claim on `held` is still live for it.
    assert cli == order

    # The dependency done: the waiting item becomes ready, ahead of everything but p0's age.
    plane.do("claim", item=p1)
    plane.do("done", item=p1)
    order = [row[0] for row in plane.ready()]
    assert order == [p0, waiting, old_p2, young_p2, oldest_p4]
    # An open item whose lease is still live (status set back to open by its holder) is not ready.
    plane.do("edit", item=held, status="open", **{"as": "bob"})
    assert held not in [row[0] for row in plane.ready()]
    clock.advance(plane.settings.default_ttl + plane.settings.clock_margin)
    assert held in [row[0] for row in plane.ready()]


def test_an_expired_lease_puts_the_item_back_in_ready(plane: Workplane, clock: Clock) -> None:
    item = new(plane, "abandoned")
    plane.do("claim", item=item, ttl="1m", **{"as": "crashed-worker"})
    assert plane.ready() == []
    clock.advance(60 + plane.settings.clock_margin)
    assert [row[0] for row in plane.ready()] == [item]


def test_edit_changes_fields_and_records_what_changed(plane: Workplane) -> None:
    dep = new(plane, "dep")
    item = new(plane, "first title", labels=["a", "b"])
    applied = plane.do("edit", item=item[:8], title="second title", priority=0, add_labels=["c"],
                       remove_labels=["a"], add_deps=[dep], add_criteria=["works"], reason="triage")
    assert applied.result == {"item": item, "changed": ["criteria_added", "depends_on", "labels", "priority", "title"]}
    got = plane.item(item)
    assert (got.title, got.priority, got.labels, got.depends_on) == ("second title", 0, ["b", "c"], [dep])
    assert got.criteria == [{"text": "works", "checked": False}]
    last = plane.history(item)[-1]
    assert last["type"] == "edited" and last["reason"] == "triage"
    assert last["changes"]["title"] == "second title"
    before = tip(plane.repo.toplevel)
    with pytest.raises(Invalid, match="nothing to change"):
        plane.do("edit", item=item, title="second title")
    assert tip(plane.repo.toplevel) == before
    plane.do("edit", item=item, remove_deps=[dep[:6]])
    assert plane.item(item).depends_on == []


def test_edit_by_someone_else_while_leased_is_refused(plane: Workplane) -> None:
    item = new(plane, "leased")
    plane.do("claim", item=item, **{"as": "bob"})
    before = tip(plane.repo.toplevel)
    with pytest.raises(Stale, match="held by bob"):  # the creator may curate its title, not its priority
        plane.do("edit", item=item, priority=0)
    assert tip(plane.repo.toplevel) == before
    plane.do("edit", item=item, title="bob's edit", **{"as": "bob"})
    assert plane.item(item).title == "bob's edit"


def test_check_records_who_and_when_and_can_be_undone(plane: Workplane, clock: Clock) -> None:
    item = new(plane, "criteria", criteria=["one", "two"])
    clock.advance(60)
    plane.do("check", item=item, criterion=2, **{"as": "bob"})
    assert plane.item(item).criteria == [
        {"text": "one", "checked": False},
        {"text": "two", "checked": True, "by": "bob", "at": "2030-01-01T12:01:00Z"},
    ]
    with pytest.raises(Invalid, match="already checked"):
        plane.do("check", item=item, criterion=2)
    with pytest.raises(Invalid, match="no #3"):
        plane.do("check", item=item, criterion=3)
    plane.do("check", item=item, criterion=2, uncheck=True)
    assert plane.item(item).criteria[1] == {"text": "two", "checked": False}
    assert [e["type"] for e in plane.history(item)] == ["created", "checked", "unchecked"]
    assert plane.history(item)[1]["by"] == "bob"


def test_decisions_are_append_only_with_rationale_and_author(plane: Workplane, clock: Clock) -> None:
    item = new(plane, "decide")
    plane.do("decision", item=item, text="Use YAML", why="people read it")
    clock.advance(5)
    plane.do("decision", item=item, text="Shard by two hex digits", why="170 ms vs 6 ms", **{"as": "bob"})
    decisions = plane.item(item).decisions
    assert decisions == [
        {"number": 1, "text": "Use YAML", "rationale": "people read it", "by": "alice", "at": "2030-01-01T12:00:00Z"},
        {"number": 2, "text": "Shard by two hex digits", "rationale": "170 ms vs 6 ms", "by": "bob",
         "at": "2030-01-01T12:00:05Z"},
    ]
    with pytest.raises(Invalid):
        plane.do("decision", item=item, text="no rationale")  # why is required


def test_done_cancel_reopen_and_their_rules(plane: Workplane) -> None:
    item = new(plane, "lifecycle", criteria=["tested"])
    plane.do("claim", item=item)
    assert plane.item(item).status == "in_progress"
    with pytest.raises(Illegal, match="unchecked criteria"):
        plane.do("done", item=item)
    with pytest.raises(Invalid, match="needs a --reason"):
        plane.do("done", item=item, force=True)
    plane.do("check", item=item, criterion=1)
    applied = plane.do("done", item=item)
    assert applied.result == {"item": item, "status": "done"}
    assert plane.item(item).status == "done"
    lease = plane.lease(item)
    assert lease is not None and lease.state == "released"  # done releases the holder's lease
    with pytest.raises(Illegal, match="done to done"):
        plane.do("done", item=item)
    plane.do("reopen", item=item, reason="regressed")
    assert plane.item(item).status == "open"
    with pytest.raises(Illegal, match="only done or cancelled"):
        plane.do("reopen", item=item)
    plane.do("cancel", item=item, reason="not needed")
    got = plane.item(item)
    assert (got.status, got.closed_reason) == ("cancelled", "not needed")
    with pytest.raises(Illegal):
        plane.do("claim", item=item)
    plane.do("reopen", item=item)
    forced = new(plane, "forced", criteria=["never"])
    plane.do("done", item=forced, force=True, reason="obsolete criterion")
    assert plane.item(forced).closed_reason == "obsolete criterion"
    assert plane.history(forced)[-1]["forced"] is True
    types = [e["type"] for e in plane.history(item)]
    assert types == ["created", "claim", "checked", "done", "released", "reopened", "cancelled", "reopened"]


def test_history_is_append_only_and_gapless(plane: Workplane) -> None:
    item = new(plane, "history", criteria=["a", "b"])
    repo = Path(plane.repo.toplevel)
    previous = events_blob(repo, item)
    steps: list[tuple[str, dict[str, Any]]] = [
        ("claim", {}), ("check", {"criterion": 1}), ("decision", {"text": "x", "why": "y"}),
        ("renew", {}), ("edit", {"title": "renamed"}), ("check", {"criterion": 2}), ("release", {}),
        ("done", {}), ("reopen", {}), ("cancel", {}),
    ]
    for op, args in steps:
        plane.do(op, item=item, **args)
        now = events_blob(repo, item)
        assert now.startswith(previous), f"{op} rewrote the event log"
        previous = now
    records = plane.history(item)
    assert [r["seq"] for r in records] == list(range(1, len(records) + 1))
    # renew is recorded by its commit only; every other step added records.
    assert len(records) >= len(steps)
    assert all({"seq", "at", "by", "type", "cmd"} <= set(r) for r in records)
    cli = gw_json(repo, "history", item[:9])
    assert cli == records
    # Every record names the command that wrote it, and that command is in the ref's history.
    trailers = git(repo, "log", "--format=%(trailers:key=Command-Id,valueonly)", "refs/gitwork/state").split()
    assert {r["cmd"] for r in records} <= set(trailers)


def test_shortest_unique_prefix_is_shown_and_accepted(plane: Workplane) -> None:
    near = ["w-abcdef0123456789", "w-abcdef0123999999", "w-1234567890abcdef"]
    for item in near:
        new(plane, "prefix " + item, item=item)
    repo = Path(plane.repo.toplevel)
    shown = run_gw(repo, "list")
    assert shown.returncode == 0
    first = {line.split("\t")[0] for line in shown.stdout.splitlines()}
    # Shared prefix "abcdef0123" (10 digits) needs 11 to tell apart; the loner gets the minimum of 6.
    assert first == {"w-abcdef01234", "w-abcdef01239", "w-123456"}
    for short, full in (("w-abcdef01234", near[0]), ("w-abcdef01239", near[1]), ("w-123456", near[2]),
                        ("123", near[2]), ("W-ABCDEF01239", near[1])):
        assert plane.resolve(short) == full
        assert gw_json(repo, "show", short)["item"] == full


# --- what gw must not touch, and where it must work --------------------------------------------------


def _commit_something(repo: Path) -> None:
    (repo / "tracked.txt").write_text("v1\n")
    git(repo, "add", "tracked.txt")
    git(repo, "-c", "user.name=Dev", "-c", "user.email=dev@example.com", "commit", "-q", "-m", "first")


def _workspace_fingerprint(repo: Path) -> tuple[str, str, str, str, str]:
    index = (repo / ".git" / "index").read_bytes()
    return (
        git(repo, "status", "--porcelain", "--untracked-files=all"),
        git(repo, "rev-parse", "HEAD"),
        git(repo, "symbolic-ref", "HEAD"),
        hashlib.sha256(index).hexdigest(),
        git(repo, "for-each-ref", "--format=%(refname) %(objectname)", "refs/heads", "refs/tags"),
    )


def test_no_command_touches_the_working_tree_index_or_head(repo: Path) -> None:
    _commit_something(repo)
    # A messy workspace: a staged change, an unstaged change, an untracked file.
    (repo / "tracked.txt").write_text("v2 staged\n")
    git(repo, "add", "tracked.txt")
    (repo / "tracked.txt").write_text("v3 unstaged\n")
    (repo / "scratch.txt").write_text("untracked\n")
    before = _workspace_fingerprint(repo)
    env = {"GW_AGENT": "alice"}
    assert gw_here(repo, "init", env=env).returncode == 0
    item = gw_here(repo, "new", "touch nothing", "-c", "crit", env=env).stdout.strip()
    commands = [
        ("claim", item), ("renew", item), ("check", item, "1"), ("decision", item, "d", "--why", "w"),
        ("edit", item, "--title", "renamed"), ("show", item), ("list",), ("ready",), ("history", item),
        ("log",), ("done", item), ("reopen", item), ("claim", "--next"), ("release", item),
    ]
    for args in commands:
        done = gw_here(repo, *args, env=env)
        assert done.returncode == 0, (args, done.stderr)
        assert _workspace_fingerprint(repo) == before, f"gw {args[0]} touched the workspace"
    assert int(git(repo, "rev-list", "--count", "refs/gitwork/state")) == 2 + len(commands) - 5


def test_a_linked_worktree_shares_the_one_state(repo: Path, tmp_path: Path) -> None:
    _commit_something(repo)
    linked = tmp_path / "linked"
    git(repo, "worktree", "add", "-q", "-b", "side", str(linked))
    init_state(repo)  # set-up, not under test: through the library
    item = gw_here(linked, "new", "made in the worktree", "--as", "bob").stdout.strip()
    assert item.startswith("w-")
    assert tip(repo) == tip(linked)
    assert gw_json(repo, "show", item)["title"] == "made in the worktree"
    claimed = gw_here(repo, "claim", item, "--as", "alice")
    assert claimed.returncode == 0, claimed.stderr
    lost = gw_here(linked, "claim", item, "--as", "bob")
    assert lost.returncode == 75  # one state per repository, not per worktree
    assert git(linked, "rev-parse", "--abbrev-ref", "HEAD") == "side"
    assert git(repo, "rev-parse", "--abbrev-ref", "HEAD") in ("master", "main")
    assert git(linked, "status", "--porcelain") == ""


def test_works_in_a_bare_repository(tmp_path: Path) -> None:
    bare = make_repo(tmp_path / "bare.git", bare=True)
    assert gw_here(bare, "init").returncode == 0
    item = gw_here(bare, "new", "bare item", "--as", "alice").stdout.strip()
    assert gw_json(bare, "claim", item, "--as", "alice")["fence"] == 1
    assert [row["item"] for row in gw_json(bare, "list")] == [item]
    assert gw_json(bare, "release", item, "--as", "alice")["state"] == "released"
    assert int(git(bare, "rev-list", "--count", "refs/gitwork/state")) == 4
    # -C from elsewhere reaches the same repository.
    assert gw_json(tmp_path, "show", item, "-C", str(bare))["title"] == "bare item"
    with Workplane(str(bare)) as wp:
        assert wp.item(item).title == "bare item"


def test_no_git_identity_needed_and_commits_carry_the_holder(repo: Path) -> None:
    # conftest scrubs HOME and GIT_*: git has no user.name/user.email here, as on a CI machine.
    assert git(repo, "config", "user.name", check=False) == ""
    assert gw_here(repo, "init", "--as", "ci-bot@example.org").returncode == 0
    item = gw_here(repo, "new", "identity", env={"GW_AGENT": "agent-7"}).stdout.strip()
    assert gw_here(repo, "claim", item, "--as", "worker/3").returncode == 0
    authors = git(repo, "log", "--format=%an|%ae|%cn", "refs/gitwork/state").splitlines()
    assert authors == [
        "worker/3|worker-3@gitwork.invalid|worker/3",
        "agent-7|agent-7@gitwork.invalid|agent-7",
        "ci-bot@example.org|ci-bot@example.org|ci-bot@example.org",
    ]
    assert gw_json(repo, "show", item)["lease"]["holder"] == "worker/3"


def test_default_identity_keeps_two_sessions_apart(repo: Path) -> None:
    # Without --as or GW_AGENT, the identity includes the session id: two processes started in their
    # own sessions (two terminals, two agents) are two holders.
    import subprocess
    import sys

    init_state(repo)  # set-up, not under test: through the library
    item = run_gw(repo, "new", "whose").stdout.strip()

    def claim_in_new_session() -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "gitwork", "claim", item, "--json"], cwd=repo,
                              capture_output=True, text=True, start_new_session=True)

    first = claim_in_new_session()
    assert first.returncode == 0, first.stderr
    second = claim_in_new_session()
    assert second.returncode == 75, second.stderr
    holder = json.loads(first.stdout)["holder"]
    assert "/s" in holder


def test_stored_commands_name_full_ids_not_the_prefixes_typed(plane: Workplane) -> None:
    import json as _json
    import subprocess as _sp

    a = new(plane, "a")
    b = plane.do("new", title="b", depends_on=[a[:6]], source=a[:6]).result["item"]
    c = new(plane, "c")
    plane.do("edit", item=b[:6], add_deps=[c[:6]], remove_deps=[a[:6]])
    bodies = _sp.run(["git", "log", "--format=%B%x00", "refs/gitwork/state"], cwd=plane.repo.toplevel,
                     capture_output=True, text=True).stdout.split("\0")
    docs = [_json.loads(line[len("Command: "):]) for body in bodies for line in body.splitlines()
            if line.startswith("Command: ")]
    edit = next(d for d in docs if d["op"] == "edit")
    created = next(d for d in docs if d["op"] == "new" and d["item"] == b)
    assert (edit["item"], edit["add_deps"], edit["remove_deps"]) == (b, [c], [a])
    assert (created["depends_on"], created["source"]) == ([a], f"item:{a}")
