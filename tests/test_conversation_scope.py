"""Conversation scope (issue 28 point 6): who may post on an item's thread, and what ``gw inbox`` shows.

The sources of authority to post are pinned here with their order, as the work-plane spec's boot test
pins the sources its start-up binds to: a new source, or a reordering, fails
``test_the_sources_of_authority_and_their_order``. Every source is shown to grant alone and everyone
else is refused (exit 77, "(you are X)", nothing written) on the real ``gw``; the arbiter's derive
re-applies the rule with its own settings, so a clone that lies about ``people`` cannot land a post.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from conftest import git, make_repo, run_gw, tip
from gitwork.cli.main import main
from gitwork.engine import Context
from gitwork.errors import ExitCode, Forbidden
from gitwork.hooks_install import install_server
from gitwork.ops import messages
from gitwork.workplane import Workplane

FORBIDDEN = int(ExitCode.FORBIDDEN)


def as_(repo: Path, who: str) -> Workplane:
    return Workplane(str(repo), agent=who)


@pytest.fixture
def world(repo: Path) -> tuple[Path, str]:
    """An item created by carol, owned by olga (so carol is not its owner), held by hank, whose thread addresses dora; ada is an
    admin, pat is listed in ``people``, agent1 and agent2 are agents."""
    (repo / ".workplane").write_text("admins: [ada]\npeople: [pat]\nagents: [agent1, agent2]\n")
    with as_(repo, "carol") as wp:
        wp.do("init")
        item = wp.do("new", title="Pick a database", owner="olga").result["item"]
    with as_(repo, "hank") as wp:
        wp.do("claim", item=item, ttl="1h")
        wp.do("msg", item=item, text="dora, which one?", to="dora", kind="question")
    return repo, item


def authority(repo: Path, item: str, who: str) -> str | None:
    with as_(repo, who) as wp:
        ctx = Context(wp.context().snapshot, {"op": "msg", "item": item, "as": who}, wp.now(), wp.settings)
        return messages.post_authority(ctx, item)


def test_the_sources_of_authority_and_their_order(world: tuple[Path, str]) -> None:
    """The boot test of the spec, for posting: exactly these sources, asked in this order (cheapest first:
    the thread is read only when nothing else granted). Changing either is a decision: change docs/leases.md
    ("Who may post") with it."""
    repo, item = world
    assert messages.POST_AUTHORITY == ("holder", "owner", "admin", "people", "addressee")
    granted = {who: authority(repo, item, who) for who in ("hank", "olga", "carol", "ada", "pat", "dora", "eve",
                                                           "agent1")}
    assert granted == {"hank": "holder", "olga": "owner", "carol": None, "ada": "admin", "pat": "people",
                       "dora": "addressee", "eve": None, "agent1": None}
    with as_(repo, "carol") as wp:  # the creator is the owner while the item names none
        unowned = wp.do("new", title="carol's own").result["item"]
    assert authority(repo, unowned, "carol") == "owner" and authority(repo, unowned, "olga") is None
    # Order: one identity with several sources is granted by the first. hank addressed and olga the
    # holder after a handoff would say "holder"; here ada, addressed too, stays "admin".
    with as_(repo, "hank") as wp:
        wp.do("msg", item=item, text="ada, a look?", to="ada")
    assert authority(repo, item, "ada") == "admin"
    # Each source alone: eve gains each in turn and is granted by exactly it.
    with as_(repo, "hank") as wp:
        wp.do("msg", item=item, text="eve, your view?", to="eve")
    assert authority(repo, item, "eve") == "addressee"


@pytest.mark.parametrize("who", ["hank", "olga", "ada", "pat", "dora"])
def test_each_source_lets_its_identity_post(world: tuple[Path, str], who: str) -> None:
    repo, item = world
    done = run_gw(repo, "msg", item, f"a word from {who}", "--as", who)
    assert done.returncode == 0, done.stderr


@pytest.mark.parametrize("who", ["eve", "agent1", "carol"])
def test_anyone_else_is_refused_with_77_naming_them_and_nothing_changes(world: tuple[Path, str], who: str) -> None:
    repo, item = world
    before = tip(repo)
    for args in (["msg", item, "may I?", "--as", who], ["msg", item, "?", "--kind", "question", "--as", who]):
        done = run_gw(repo, *args)
        assert done.returncode == FORBIDDEN, done.stderr
        lines = done.stderr.splitlines()
        assert len(lines) == 1 and f"(you are {who})" in lines[0] and item in lines[0], done.stderr
    assert tip(repo) == before
    with as_(repo, who) as wp, pytest.raises(Forbidden, match=f"you are {who}"):
        wp.do("msg", item=item, text="through the library", epoch="current")
    assert tip(repo) == before


def test_an_agent_may_not_post_on_another_agents_held_item(repo: Path) -> None:
    """The issue's case: agent2 posted on the item agent1 holds, exit 0. Now 77; agent1 still may."""
    (repo / ".workplane").write_text("agents: [agent1, agent2]\n")
    with as_(repo, "person") as wp:
        wp.do("init")
        item = wp.do("new", title="agent1's job").result["item"]
    assert run_gw(repo, "claim", item, "--as", "agent1").returncode == 0
    before = tip(repo)
    done = run_gw(repo, "msg", item, "let me help", "--as", "agent2")
    assert done.returncode == FORBIDDEN and "(you are agent2)" in done.stderr
    assert tip(repo) == before
    assert run_gw(repo, "msg", item, "on it", "--as", "agent1").returncode == 0


def test_people_and_agents_are_one_role_each(repo: Path) -> None:
    (repo / ".workplane").write_text("people: [sam]\nagents: [sam]\n")
    done = run_gw(repo, "init")
    assert done.returncode == int(ExitCode.INVALID) and "'people' and 'agents'" in done.stderr


def test_inbox_shows_what_is_addressed_to_me_or_on_items_i_hold_or_own(repo: Path) -> None:
    with as_(repo, "carol") as wp:
        wp.do("init")
        mine = wp.do("new", title="carol created it").result["item"]
        owned = wp.do("new", title="olga owns it", owner="olga").result["item"]
    with as_(repo, "hank") as wp:
        other = wp.do("new", title="nobody's business of olga").result["item"]
        for item in (mine, owned, other):
            wp.do("claim", item=item, ttl="1h")
        wp.do("msg", item=mine, text="to the creator")
        wp.do("msg", item=owned, text="to the owner")
        wp.do("msg", item=other, text="not for olga nor carol")
        wp.do("msg", item=other, text="olga, one thing", to="olga")
    with as_(repo, "olga") as wp:
        rows = wp.inbox()["unread"]
    # Posted within one second: the inbox orders same-instant messages by item id (random here), so the set.
    assert sorted((r["item"], r["text"], r["why"]) for r in rows) == sorted([(owned, "to the owner", "you own it"),
                                                                          (other, "olga, one thing", "to you")])
    with as_(repo, "carol") as wp:
        rows = wp.inbox()["unread"]
    assert [(r["item"], r["text"], r["why"]) for r in rows] == [(mine, "to the creator", "you own it")]


def test_the_arbiter_refuses_a_post_by_a_clone_that_lies_about_people(tmp_path: Path) -> None:
    """eve lists herself in ``people`` in her own clone's settings and posts: her clone takes it, the
    arbiter's derive (its own settings: no eve) refuses it, and its state does not move. The refusal is
    that command's (15, kept in refused.jsonl: attack11), so her clone is not wedged: the next sync is clean
    and still lands nothing of it."""
    bare = make_repo(tmp_path / "arbiter.git", bare=True)
    install_server(str(bare))
    alice = make_repo(tmp_path / "alice")
    git(alice, "remote", "add", "origin", f"file://{bare}")
    git(alice, "config", "gitwork.agent", "alice")
    assert main(["init", "--remote", "origin", "-C", str(alice)]) == 0
    with Workplane(str(alice)) as wp:
        item = wp.do("new", title="alice's").result["item"]
    assert main(["sync", "-C", str(alice)]) == 0
    eve = make_repo(tmp_path / "eve")
    git(eve, "remote", "add", "origin", f"file://{bare}")
    git(eve, "config", "gitwork.agent", "eve")
    assert main(["init", "--remote", "origin", "-C", str(eve)]) == 0
    git(eve, "config", "gitwork.people", "eve")  # the lie: only her clone believes it
    before = tip(bare)
    assert run_gw(eve, "msg", item, "trust me", "--epoch", "0").returncode == 0
    assert tip(eve) != before
    done = run_gw(eve, "sync")
    assert done.returncode == int(ExitCode.SYNC_REFUSED) and "origin's roles refuse it" in done.stderr, done.stderr
    assert tip(bare) == before
    again = run_gw(eve, "sync")
    assert again.returncode == 0, again.stderr
    assert tip(bare) == before
