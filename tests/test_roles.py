"""Authority: who may make an item wait, revoke, decide, and act on an item (issue 8, points 7 and 8).

Roles come from the settings ``admins`` and ``agents`` (everyone else is a person). The CLI cases run
the real ``gw`` in child processes, where the exit code and the one-line refusal are what is tested;
the library cases drive the rules with an injected clock.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from conftest import Clock, git, gw_here, let_post, run_gw, tip
from gitwork.errors import ExitCode, Forbidden, Invalid, Stale
from gitwork.workplane import Workplane

FORBIDDEN = int(ExitCode.FORBIDDEN)
STATE = "refs/gitwork/state"


@pytest.fixture
def item(wp: Workplane) -> str:
    return wp.do("new", title="Pick a database", criteria=["chosen"]).result["item"]


def plane(repo: Path, who: str, **kw) -> Workplane:  # type: ignore[no-untyped-def]
    return Workplane(str(repo), agent=who, **kw)


def refused(repo: Path, *args: str, code: int, says: tuple[str, ...]) -> str:
    """Run ``gw`` (its entry point, in this process): refused with ``code``, one line on stderr holding
    every phrase of ``says``, nothing written."""
    before = tip(repo)
    done = gw_here(repo, *args)
    assert done.returncode == code, (args, done.returncode, done.stderr)
    lines = done.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("gw: "), done.stderr
    for phrase in says:
        assert phrase in lines[0], (phrase, lines[0])
    assert done.stdout == ""
    assert tip(repo) == before
    return lines[0]


# --- 7: only the holder, under its live fence, may make an item wait ------------------------------


def test_an_outsider_cannot_make_someone_elses_item_wait_but_may_ask_a_question(repo: Path, wp: Workplane,
                                                                                  item: str) -> None:
    assert run_gw(repo, "claim", item, "--as", "alice").returncode == 0
    line = refused(repo, "ask", item, "Postgres or SQLite?", "--as", "mallory", code=FORBIDDEN,
                   says=("forbidden", "holder", "alice", "mallory", "gw msg", "--kind question"))
    assert "decision" in line
    # The same request dressed as a message is the same ask.
    refused(repo, "msg", item, "Postgres?", "--kind", "decision-request", "--as", "mallory", code=FORBIDDEN,
            says=("--kind question",))
    as_json = run_gw(repo, "ask", item, "q?", "--as", "mallory", "--json")
    doc = json.loads(as_json.stdout)
    assert as_json.returncode == FORBIDDEN and (doc["error"], doc["code"]) == ("forbidden", FORBIDDEN)
    shown = wp.show(item)["item"]
    assert shown["status"] == "in_progress" and shown.get("waiting") is None
    # A question blocks nothing; mallory may post one once she may post on the item at all (a person listed in
    # `people`: docs/leases.md, "Who may post"); before that she is refused too.
    refused(repo, "msg", item, "Postgres or SQLite?", "--kind", "question", "--as", "mallory", code=FORBIDDEN,
            says=("may post", "(you are mallory)"))
    let_post(repo, "mallory")
    posted = run_gw(repo, "msg", item, "Postgres or SQLite?", "--kind", "question", "--to", "alice", "--as", "mallory")
    assert posted.returncode == 0, posted.stderr
    shown = wp.show(item)["item"]
    assert shown["status"] == "in_progress" and shown.get("waiting") is None


def test_an_ask_on_an_item_nobody_holds_is_refused_claim_first(repo: Path, wp: Workplane, item: str) -> None:
    refused(repo, "ask", item, "go ahead?", "--as", "alice", code=FORBIDDEN,
            says=("nobody holds", "claim it first", "--kind question"))
    with pytest.raises(Forbidden, match="nobody holds"):
        plane(repo, "alice").ask(item, "go ahead?")
    assert wp.show(item)["item"]["status"] == "open" and item in [r[0] for r in wp.ready()]


def test_the_holder_asks_only_under_its_live_fence(repo: Path, item: str) -> None:
    clock = Clock()
    alice = plane(repo, "alice", now=clock)
    lease = alice.do("claim", item=item, ttl="10m").result
    before = tip(repo)
    with pytest.raises(Stale):
        alice.ask(item, "which one?", fence=lease["fence"] + 1)  # not the fence of the live lease
    clock.advance(600)  # past the holder's own view of its lease
    with pytest.raises(Stale):
        alice.ask(item, "which one?")
    assert tip(repo) == before
    # Once someone else took over, the old holder is an outsider like any other.
    bob = plane(repo, "bob", now=clock)
    clock.advance(31)
    bob.do("takeover", item=item)
    with pytest.raises(Forbidden, match="only the holder"):
        alice.ask(item, "which one?")
    asked = bob.ask(item, "which one?", options=["a", "b"]).result
    shown = bob.show(item)["item"]
    assert shown["status"] == "blocked" and shown["waiting"]["by"] == "bob" == asked["by"]


def test_the_holder_asking_through_the_cli_blocks_the_item(repo: Path, wp: Workplane, item: str) -> None:
    fence = json.loads(run_gw(repo, "claim", item, "--as", "alice", "--json").stdout)["fence"]
    done = run_gw(repo, "ask", item, "ship?", "--fence", str(fence), "--as", "alice")
    assert done.returncode == 0, done.stderr
    assert wp.show(item)["item"]["waiting"]["by"] == "alice"


# --- 8: roles -------------------------------------------------------------------------------------


def test_without_admins_any_person_may_revoke_but_no_agent(repo: Path, wp: Workplane, item: str) -> None:
    git(repo, "config", "gitwork.agents", "bot")
    assert run_gw(repo, "claim", item, "--as", "alice").returncode == 0
    refused(repo, "revoke", item, "--reason", "mine now", "--as", "bot", code=FORBIDDEN,
            says=("agents may not revoke", "you are bot (agent)"))
    done = run_gw(repo, "revoke", item, "--reason", "stuck", "--as", "carol")
    assert done.returncode == 0, done.stderr
    assert wp.lease(item).state == "revoked"  # type: ignore[union-attr]


def test_once_admins_are_set_only_they_revoke(repo: Path, wp: Workplane, item: str) -> None:
    (repo / ".workplane").write_text("admins: [root-admin]\nagents: [bot]\n")
    assert run_gw(repo, "claim", item, "--as", "alice").returncode == 0
    for who, role in (("carol", "person"), ("bot", "agent"), ("alice", "person")):
        refused(repo, "revoke", item, "--reason", "mine", "--as", who, code=FORBIDDEN,
                says=("only an admin", "root-admin", f"you are {who} ({role})"))
    assert wp.lease(item).state == "active"  # type: ignore[union-attr]
    with pytest.raises(Forbidden):
        plane(repo, "carol").do("revoke", item=item, reason="library too")
    done = run_gw(repo, "revoke", item, "--reason", "reassigning", "--as", "root-admin", "--json")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["state"] == "revoked"


def test_git_config_admins_override_the_workplane_file(repo: Path, wp: Workplane, item: str) -> None:
    (repo / ".workplane").write_text("admins: [old-admin]\n")
    git(repo, "config", "gitwork.admins", "new-admin, other-admin")
    assert plane(repo, "x").settings.admins == ("new-admin", "other-admin")
    wp.do("claim", item=item)
    with pytest.raises(Forbidden):
        plane(repo, "old-admin").do("revoke", item=item, reason="r")
    assert plane(repo, "other-admin").do("revoke", item=item, reason="r").result["state"] == "revoked"


def _asked(repo: Path, item: str, to: str | None) -> int:
    alice = plane(repo, "alice")
    alice.do("claim", item=item)
    return alice.ask(item, "postgres or sqlite?", options=["postgres", "sqlite"], to=to).result["seq"]


def test_with_admins_the_addressee_or_an_admin_decides(repo: Path, wp: Workplane, item: str) -> None:
    (repo / ".workplane").write_text("admins: [boss]\nagents: [bot]\n")
    seq = _asked(repo, item, to="dana")
    before = tip(repo)
    refused(repo, "decide", item, str(seq), "--choose", "sqlite", "--why", "small", "--as", "erin",
            code=FORBIDDEN, says=("addressed to dana", "boss", "you are erin (person)"))
    refused(repo, "decide", item, str(seq), "--choose", "sqlite", "--why", "small", "--as", "bot",
            code=FORBIDDEN, says=("agent", "only a person may decide"))
    with pytest.raises(Forbidden, match="addressed to dana"):
        plane(repo, "alice").decide(item, seq, choose="sqlite", why="I asked, I answer")
    assert tip(repo) == before
    decided = run_gw(repo, "decide", item, str(seq), "--choose", "postgres", "--why", "writers", "--as", "dana",
                     "--json")
    assert decided.returncode == 0, decided.stderr
    assert wp.show(item)["item"]["decisions"][0]["by"] == "dana"


def test_with_admins_a_question_to_nobody_is_for_the_admins(repo: Path, wp: Workplane, item: str) -> None:
    git(repo, "config", "gitwork.admins", "boss")
    seq = _asked(repo, item, to=None)
    with pytest.raises(Forbidden, match="addressed to nobody"):
        plane(repo, "dana").decide(item, seq, choose="sqlite", why="small")
    assert plane(repo, "boss").decide(item, seq, choose="sqlite", why="small").result["choice"] == "sqlite"


def test_without_admins_any_person_decides_no_agent(repo: Path, wp: Workplane, item: str) -> None:
    git(repo, "config", "gitwork.agents", "bot")
    seq = _asked(repo, item, to="dana")
    with pytest.raises(Forbidden, match="agent"):
        plane(repo, "bot").decide(item, seq, choose="sqlite", why="small")
    assert plane(repo, "erin").decide(item, seq, choose="sqlite", why="small").result["decision"] == 1


def test_agents_act_only_on_what_they_hold(repo: Path, wp: Workplane, item: str) -> None:
    git(repo, "config", "gitwork.agents", "bot")
    cases = [
        (("edit", item, "--title", "mine now"), "edit"),
        (("check", item, "1"), "check"),
        (("decision", item, "sqlite", "--why", "small"), "decision"),
        (("done", item, "--force", "--reason", "r"), "done"),
        (("cancel", item), "cancel"),
    ]
    for args, _name in cases:
        refused(repo, *args, "--as", "bot", code=FORBIDDEN, says=("agents act only on items they hold", "claim it"))
    # A person may still act on an item nobody holds (the documented rule 3 of fencing) ...
    assert run_gw(repo, "edit", item, "--title", "renamed by a person", "--as", "carol").returncode == 0
    # ... and an agent may claim, and then post and act as the holder (before it holds the item, nobody made it
    # its business: it may not post on it, docs/leases.md "Who may post").
    bot = plane(repo, "bot")
    with pytest.raises(Forbidden, match="you are bot"):
        bot.post(item, "may I?", kind="question")
    bot.do("claim", item=item)
    assert bot.post(item, "on it", kind="question").result["seq"] == 1
    assert bot.do("check", item=item, criterion=1).result["checked"] is True
    bot.do("done", item=item)
    with pytest.raises(Forbidden, match="agents act only"):
        bot.do("reopen", item=item)
    assert plane(repo, "carol").do("reopen", item=item).result["status"] == "open"


def test_an_identity_in_both_roles_is_a_bad_setting(repo: Path, wp: Workplane) -> None:
    (repo / ".workplane").write_text("admins: [sam]\nagents: [sam, bot]\n")
    done = run_gw(repo, "list")
    assert done.returncode == int(ExitCode.INVALID)
    assert done.stderr.count("\n") == 1 and "sam" in done.stderr and "both" in done.stderr
    with pytest.raises(Invalid, match="both"):
        plane(repo, "x")


def test_a_holder_refusal_names_who_you_are_and_the_holder(repo: Path, wp: Workplane, item: str) -> None:
    assert run_gw(repo, "claim", item, "--as", "alice").returncode == 0
    refused(repo, "edit", item, "--title", "x", "--as", "bob", code=int(ExitCode.STALE),
            says=("held by alice", "you are bob"))
    refused(repo, "release", item, "--as", "bob", code=int(ExitCode.STALE), says=("held by alice", "you are bob"))



# --- where the rules are enforced: the arbiter's hook judges each pushed command with its settings -----


def _guarded_arbiter(tmp_path: Path) -> Path:
    import sys

    bare = tmp_path / "arbiter.git"
    git(tmp_path, "init", "-q", "--bare", str(bare))
    hook = bare / "hooks" / "pre-receive"
    hook.write_text(f'#!/bin/sh\nexec "{sys.executable}" -m gitwork.statecheck\n')
    hook.chmod(0o755)
    git(bare, "config", "gitwork.admins", "boss")
    git(bare, "config", "gitwork.agents", "bot")
    return bare


def _push(repo: Path, bare: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["git", "push", "--porcelain", str(bare), f"{STATE}:{STATE}"], cwd=repo,
                          capture_output=True, text=True)


def test_the_arbiters_hook_refuses_what_its_roles_forbid_whatever_the_client_allowed(
        repo: Path, wp: Workplane, item: str, tmp_path: Path) -> None:
    bare = _guarded_arbiter(tmp_path)
    alice = plane(repo, "alice")
    alice.do("claim", item=item)
    assert _push(repo, bare).returncode == 0
    published = tip(bare, STATE)
    # This clone has no admins configured, so its engine lets carol revoke; the arbiter does not.
    plane(repo, "carol").do("revoke", item=item, reason="mine now")
    refused = _push(repo, bare)
    assert refused.returncode != 0 and "only an admin" in refused.stderr and "revoke by carol" in refused.stderr
    assert tip(bare, STATE) == published
    git(repo, "update-ref", STATE, published)
    plane(repo, "boss").do("revoke", item=item, reason="reassigning")
    assert _push(repo, bare).returncode == 0, "an admin's revoke lands"


def test_the_arbiters_hook_refuses_a_forged_ask(repo: Path, wp: Workplane, item: str, tmp_path: Path) -> None:
    bare = _guarded_arbiter(tmp_path)
    alice = plane(repo, "alice")
    alice.do("claim", item=item)
    assert _push(repo, bare).returncode == 0
    base = tip(repo, STATE)
    asked = alice.ask(item, "ship it?").commit
    # The same commit, but its document says mallory asked: what an outsider would push with plain git.
    message = git(repo, "cat-file", "commit", asked).split("\n\n", 1)[1].replace('"as": "alice"', '"as": "mallory"')
    assert '"as": "mallory"' in message
    forged = subprocess.run(["git", "commit-tree", git(repo, "rev-parse", f"{asked}^{{tree}}"), "-p", base],
                            cwd=repo, input=message, capture_output=True, text=True, check=True,
                            env={**os.environ, "GIT_AUTHOR_NAME": "m", "GIT_AUTHOR_EMAIL": "m@x.invalid",
                                 "GIT_COMMITTER_NAME": "m", "GIT_COMMITTER_EMAIL": "m@x.invalid"}).stdout.strip()
    git(repo, "update-ref", STATE, forged)
    refused = _push(repo, bare)
    assert refused.returncode != 0 and "ask by mallory" in refused.stderr and "only the holder" in refused.stderr
    assert tip(bare, STATE) == base
    git(repo, "update-ref", STATE, asked)
    assert _push(repo, bare).returncode == 0, refused.stderr


def test_a_fence_does_not_make_its_bearer_the_holder(repo: Path, wp: Workplane, item: str) -> None:
    fence = plane(repo, "alice").do("claim", item=item).result["fence"]
    refused(repo, "ask", item, "ship?", "--fence", str(fence), "--as", "mallory", code=FORBIDDEN,
            says=("only the holder", "alice", "you are mallory"))
