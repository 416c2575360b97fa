"""Conversations: threads, epochs, acknowledgements, inbox, handoffs, human decisions, follow, sync.

Real git throughout; the CLI is run in child processes where the exit code and the one-line error
are what is being tested, the library where the test is about the rules.
"""

from __future__ import annotations

import datetime as _dt
import json
import os
import subprocess
import time
from pathlib import Path

import pytest
from freezegun import freeze_time

from conftest import git, gw_cmd, gw_here, let_post, make_repo, run_gw, tip
from gitwork import thread as T
from gitwork.errors import Forbidden, Illegal, Invalid, NotFound, Stale
from gitwork.threads_index import LAST, MARKS, SEGMENTS, load_threads
from gitwork.workplane import Workplane

STATE = "refs/gitwork/state"
INVALID, NOT_FOUND, ILLEGAL, STALE, FORBIDDEN = 5, 3, 6, 7, 77


POSTERS = ("alice", "ann", "ben", "bob", "carol", "cat", "dana")  # not "bot": an agent in one test


@pytest.fixture(autouse=True)
def posters(repo: Path) -> None:
    """These tests are about threads, not about who may post: every identity they use may (test_conversation_scope.py)."""
    let_post(repo, *POSTERS)


@pytest.fixture
def item(wp: Workplane) -> str:
    return wp.do("new", title="Talk about it").result["item"]


def plane(repo: Path, who: str, **kw) -> Workplane:  # type: ignore[no-untyped-def]
    return Workplane(str(repo), agent=who, **kw)


def texts(wp: Workplane, item_id: str, since: int = 0) -> list[str]:
    return [m["text"] for m in wp.thread(item_id, since)[1]]


def gw_json(repo: Path, *args: str, code: int = 0, env: dict[str, str] | None = None) -> dict:
    """``gw *args --json`` through the CLI's entry point in this process (``gw_here``)."""
    done = gw_here(repo, *args, "--json", env=env)
    assert done.returncode == code, f"gw {args} -> {done.returncode}: {done.stdout} {done.stderr}"
    return json.loads(done.stdout) if done.stdout.strip() else {}


# --- posting and replay ---------------------------------------------------------------------------


def test_posts_are_numbered_gaplessly_and_replay_exactly_after_a_cursor(repo: Path, wp: Workplane, item: str):
    alice, bob = plane(repo, "alice"), plane(repo, "bob")
    for n in range(1, 8):
        applied = (alice if n % 2 else bob).post(item, f"message {n}", to="bob" if n % 2 else "alice")
        assert applied.result["seq"] == n
    for since in range(0, 9):
        assert texts(wp, item, since) == [f"message {n}" for n in range(since + 1, 8)]
    first = wp.thread(item)[1][0]
    assert (first["seq"], first["by"], first["kind"], first["to"], first["epoch"]) == (1, "alice", "note", "bob", 0)
    assert first["id"].startswith("c-") and first["at"].endswith("Z")


def test_every_message_field_is_recorded_and_the_log_only_grows(repo: Path, wp: Workplane, item: str):
    alice = plane(repo, "alice")
    q = alice.post(item, "Which database?", kind="question", to="bob", msg_id="ask-db-1").result
    a = plane(repo, "bob").post(item, "Postgres.", kind="answer", reply_to=q["seq"]).result
    records = wp.thread(item)[1]
    assert records[0] == {"seq": 1, "id": "ask-db-1", "at": records[0]["at"], "by": "alice", "kind": "question",
                          "epoch": 0, "to": "bob", "text": "Which database?"}
    assert records[1]["reply_to"] == 1 and records[1]["seq"] == a["seq"] == 2
    path = T.segment_path(item, 1)
    # Each commit extended the segment file: earlier contents are a prefix of later ones.
    history = git(repo, "log", "--format=%H", STATE).split()
    blobs = [subprocess.run(["git", "show", f"{c}:{path}"], cwd=repo, capture_output=True).stdout for c in history]
    blobs = [b for b in blobs if b]
    assert len(blobs) == 2 and blobs[0].startswith(blobs[1]) and blobs[0] != blobs[1]


def test_a_retried_post_with_the_same_id_lands_once(repo: Path, wp: Workplane, item: str):
    alice = plane(repo, "alice")
    first = alice.post(item, "deploy at noon", msg_id="m-noon-1")
    before = tip(repo)
    again = alice.post(item, "deploy at noon", msg_id="m-noon-1")
    assert again.result["seq"] == first.result["seq"] == 1 and again.result["duplicate"] is True
    assert tip(repo) == before and texts(wp, item) == ["deploy at noon"]
    # A command id names one command: a different text under a used id is refused (the engine's rule
    # for every repeated command id, see test_trust_engine.py), and nothing is written.
    with pytest.raises(Invalid, match="was used for a different command"):
        alice.post(item, "deploy at one", msg_id="m-noon-1")
    assert tip(repo) == before and texts(wp, item) == ["deploy at noon"]
    # The CLI's --id does the same through a child process.
    done = gw_json(repo, "msg", item, "deploy at noon", "--id", "m-noon-1", "--as", "alice")
    assert done["seq"] == 1 and done["duplicate"] is True and tip(repo) == before


def test_segments_roll_over_and_replay_crosses_segment_and_group_boundaries(repo, wp, item, monkeypatch):
    monkeypatch.setattr(T, "SEGMENT", 3)
    monkeypatch.setattr(T, "SPAN", 3 * 2)  # two segments per group
    alice = plane(repo, "alice")
    for n in range(1, 15):
        assert alice.post(item, f"m{n}").result["seq"] == n
    names = git(repo, "ls-tree", "-r", "--name-only", STATE, f"items/{item[2:4]}/{item}/thread").split()
    rel = [n.split("/thread/")[1] for n in names]
    assert rel == ["0000000001/0000000001.log", "0000000001/0000000004.log", "0000000007/0000000007.log",
                   "0000000007/0000000010.log", "0000000013/0000000013.log"]
    for since in range(0, 15):
        assert texts(wp, item, since) == [f"m{n}" for n in range(since + 1, 15)]
    assert T.last_seq(wp.store.snapshot(), item) == 14
    # References resolve across segments, by number or by id (ids are found in sealed segments too).
    assert alice.post(item, "late reply", reply_to=2).result["reply_to"] == 2
    second, twelfth = wp.thread(item)[1][1]["id"], wp.thread(item)[1][11]["id"]
    assert T.message_ids(wp.store.snapshot(), item).get(second) == 2
    assert wp.do("msg", item=item, text="by id", reply_to=twelfth, epoch=0).result["reply_to"] == 12


def test_command_documents_name_messages_by_id_so_a_replay_elsewhere_means_the_same(repo, wp, item):
    alice, bob = plane(repo, "alice"), plane(repo, "bob")
    q = alice.post(item, "ok?", kind="question").result
    r = bob.post(item, "yes", reply_to=1).result
    bob.ack(item, 1, responded=True, reply=r["seq"])
    log = list(wp.log())
    assert log[0]["command"]["upto"] == q["id"] and log[0]["command"]["reply"] == r["id"]
    assert log[1]["command"]["reply_to"] == q["id"] and log[1]["trailers"]["Message-Seq"] == "2"
    # A hand-written document may still use numbers (`gw apply`).
    doc = json.dumps({"op": "msg", "item": item, "text": "by number", "reply_to": 2, "epoch": 0})
    done = run_gw(repo, "apply", "-", "--as", "carol", "--json", input=doc)
    assert done.returncode == 0, done.stderr
    assert wp.thread(item, 2)[1][0]["reply_to"] == 2


def test_a_number_in_a_document_is_resolved_by_the_op_and_recorded_as_the_message_id(repo, wp, item):
    """Like an item prefix (``Context.target``), a message number is resolved on the tip the command
    lands on and the commit records the message's id: a replay on another tip names the same message."""
    other = wp.do("new", title="elsewhere").result["item"]
    alice, bob = plane(repo, "alice"), plane(repo, "bob")
    first = alice.post(item, "q1", kind="question").result
    second = alice.post(item, "q2", kind="question").result
    doc = json.dumps({"op": "msg", "item": item[:10], "text": "by number", "reply_to": "#2", "epoch": 0})
    done = run_gw(repo, "apply", "-", "--as", "carol", "--json", input=doc)
    assert done.returncode == 0, done.stderr
    recorded = next(wp.log())["command"]
    assert (recorded["item"], recorded["reply_to"]) == (item, second["id"])
    # ITEM:N names a message of the command's own item; the op records the id.
    bob.ack(item, f"{item[:8]}:1", read=True)
    assert next(wp.log())["command"]["upto"] == first["id"]
    before = tip(repo)
    with pytest.raises(Invalid, match="another thread"):
        bob.post(item, "wrong thread", reply_to=f"{other}:1")
    with pytest.raises(NotFound, match="no message #9"):
        bob.ack(item, 9)
    assert tip(repo) == before


def test_the_library_face_reads_the_state_once_per_command(repo, wp, item, monkeypatch):
    """``post``/``ack``/``ask``/``decide`` build a document and submit it: the engine's snapshot is the
    only read (the op resolves the item prefix, message numbers and the epoch it was not given)."""
    from gitwork.store import Store

    alice, bob = plane(repo, "alice"), plane(repo, "bob")
    alice.do("claim", item=item)
    alice.post(item, "first")
    reads: list[str | None] = []
    real = Store.snapshot

    def counted(self, commit=None, **kw):  # type: ignore[no-untyped-def]
        reads.append(commit)
        return real(self, commit, **kw)

    monkeypatch.setattr(Store, "snapshot", counted)
    posted = bob.post(item[:8], "second", reply_to=1)
    assert len(reads) == posted.attempts == 1
    assert (posted.command["item"], posted.command["epoch"]) == (item, 1)  # resolved, recorded as numbers
    reads.clear()
    bob.ack(item[:8], 1, responded=True, reply=2)
    assert len(reads) == 1
    assert next(wp.log())["command"]["epoch"] == 1
    # A document may say so itself: "current" is the epoch on the tip the command is applied to.
    doc = json.dumps({"op": "msg", "item": item, "text": "now", "epoch": "current"})
    done = run_gw(repo, "apply", "-", "--as", "carol", "--json", input=doc)
    assert done.returncode == 0, done.stderr
    assert next(wp.log())["command"]["epoch"] == 1 and wp.thread(item, 2)[1][-1]["epoch"] == 1


def test_conversations_and_the_ops_import_in_one_direction():
    """The thread format sits beside the engine and imports nothing above the store; the read side
    does not import back into the ops or the faces; the op modules do not import each other."""
    import ast

    import gitwork

    root = Path(gitwork.__file__).parent

    def imports(name: str) -> set[str]:
        path = root / (name.replace(".", "/") + ".py")
        package = name.rpartition(".")[0]
        found = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom):
                base = package.split(".") if package else []
                if node.level:
                    base = base[: len(base) - (node.level - 1)] if node.level > 1 else base
                    module = ".".join([*base, node.module] if node.module else base)
                else:
                    module = (node.module or "").removeprefix("gitwork.")
                found.add(module)
                found.update(f"{module}.{a.name}".lstrip(".") for a in node.names)
            elif isinstance(node, ast.Import):
                found.update(a.name.removeprefix("gitwork.") for a in node.names)
        return found

    assert imports("thread") & {"engine", "ops", "workplane", "conversations", "threads_index", "index"} == set()
    assert imports("thread") >= {"codec", "layout", "errors"}
    for reader in ("threads_index", "conversations"):
        assert not {m for m in imports(reader) if m.split(".")[0] in ("ops", "workplane", "cli", "engine")}
    assert "conversations" not in imports("threads_index")
    ops = {"ops.items", "ops.leases", "ops.messages"}
    for module in ops:
        assert imports(module) & (ops - {module}) == set(), module
    for below in ("ops.common", "ops.conversation"):
        assert {m for m in imports(below) if m.startswith("ops.")} == set(), below


# --- the epoch rule -------------------------------------------------------------------------------


def test_an_ack_written_under_an_older_epoch_is_refused_and_a_message_is_recorded_under_it(repo, wp, item):
    alice, bob, carol = plane(repo, "alice"), plane(repo, "bob"), plane(repo, "carol")
    alice.do("claim", item=item)
    seen = bob.current_epoch(item)
    assert seen == 1
    bob.post(item, "are you on it?", epoch=seen)
    alice.do("release", item=item)
    carol.do("claim", item=item)  # epoch 2: the owner changed
    before = tip(repo)
    with pytest.raises(Stale, match="epoch 2"):
        bob.ack(item, 1, epoch=seen)
    assert tip(repo) == before
    # A message by someone not holding the item does not depend on the epoch: it lands recorded under
    # the epoch bob read (so carol sees it was written to alice), and so replays on any later tip
    # (a sync, the arbiter's hook) exactly as it was first applied.
    assert bob.post(item, "then please also do X", epoch=seen).result["epoch"] == 1
    # Reading the epoch again (the CLI's default) lets bob write to the new owner.
    assert bob.post(item, "carol: please also do X", to="carol").result["epoch"] == 2
    with pytest.raises(Invalid, match="does not exist"):
        bob.post(item, "from the future", epoch=9)
    with pytest.raises(Invalid, match="must carry the lease epoch"):
        bob.do("msg", item=item, text="no epoch")


def test_the_holder_is_fenced_and_a_taken_over_holder_cannot_post(repo, item):
    start = _dt.datetime(2030, 1, 1, tzinfo=_dt.timezone.utc)
    with freeze_time(start) as frozen:
        alice, bob = plane(repo, "alice"), plane(repo, "bob")
        fence = alice.do("claim", item=item, ttl="1m").result["fence"]
        assert alice.post(item, "starting", fence=fence).result["epoch"] == 1
        assert alice.post(item, "by name works too").result["epoch"] == 1
        frozen.move_to(start + _dt.timedelta(minutes=5))
        bob.do("takeover", item=item)
        before = tip(repo)
        with pytest.raises(Stale):
            alice.post(item, "still mine?", fence=fence)
        with pytest.raises(Stale):
            alice.ack(item, 1, fence=fence)
        assert tip(repo) == before
        assert bob.post(item, "taking it from here").result["epoch"] == 2


def test_a_takeover_that_lands_during_the_post_leaves_the_retried_post_under_the_epoch_read(repo, wp, item):
    """The epoch is read before the document is built; the takeover wins the CAS; the retry lands as built."""
    wp.do("claim", item=item, ttl="1m", **{"as": "alice"})
    later = _dt.datetime.now(_dt.timezone.utc).replace(microsecond=0) + _dt.timedelta(minutes=10)
    taker = plane(repo, "carol", now=lambda: later)
    calls: list[int] = []
    armed = []

    def racing_clock():  # runs between bob's snapshot and bob's CAS: carol's takeover lands first
        if armed:
            if not calls:
                taker.do("takeover", item=item)
            calls.append(1)
        return later

    bob = plane(repo, "bob", now=racing_clock)
    epoch = bob.current_epoch(item)  # read before the document is built, as the CLI does
    assert epoch == 1
    armed.append(1)
    # bob is not the holder: his message lands on the retry, recorded under the epoch he read (1)
    assert bob.do("msg", item=item, text="answering alice", epoch=epoch).result["epoch"] == 1
    assert len(calls) == 2  # it was applied twice: the first attempt lost the CAS
    assert [m["epoch"] for m in wp.thread(item)[1]] == [1]


# --- acknowledgements ------------------------------------------------------------------------------


def test_cursors_are_monotone_and_responded_implies_read(repo, wp, item):
    alice, bob = plane(repo, "alice"), plane(repo, "bob")
    for n in range(3):
        alice.post(item, f"q{n}", kind="question", to="bob")
    bob.ack(item, 2, read=True)
    assert T.cursors(wp.store.snapshot(), item)["bob"]["read"] == 2
    before = tip(repo)
    back = bob.ack(item, 1, read=True)
    assert back.result["unchanged"] is True and back.result["read"] == 2 and tip(repo) == before
    reply = bob.post(item, "answers to all three", reply_to=3).result["seq"]
    bob.ack(item, 3, responded=True, reply=reply)
    marks = T.cursors(wp.store.snapshot(), item)["bob"]
    assert (marks["read"], marks["responded"], marks["reply"]) == (3, 3, reply)
    bob.ack(item, 1, responded=True, reply=reply)  # behind the cursor: nothing moves
    assert T.cursors(wp.store.snapshot(), item)["bob"]["responded"] == 3
    text = git(repo, "show", f"{STATE}:items/{item[2:4]}/{item}/cursors.yaml")
    assert "who: bob" in text and "responded: 3" in text


def test_responded_needs_the_participants_own_later_reply(repo, wp, item):
    alice, bob = plane(repo, "alice"), plane(repo, "bob")
    alice.post(item, "q1", kind="question")  # 1
    alice.post(item, "q2", kind="question")  # 2
    bob.post(item, "a1", reply_to=1)  # 3
    bob.post(item, "a2", reply_to=2)  # 4
    before = tip(repo)
    with pytest.raises(Invalid, match="needs the reply"):
        bob.do("ack", item=item, upto=1, responded=True, epoch=0)
    with pytest.raises(Invalid, match="written by alice"):
        bob.ack(item, 1, responded=True, reply=2)
    with pytest.raises(Invalid, match="does not come after"):
        bob.ack(item, 3, responded=True, reply=3)
    with pytest.raises(Invalid, match="answers #1, which is before #2"):
        bob.ack(item, 2, responded=True, reply=3)
    with pytest.raises(NotFound, match="last is #4"):
        bob.ack(item, 5)
    with pytest.raises(NotFound):
        bob.do("ack", item=item, upto="no-such-id", epoch=0)
    assert tip(repo) == before


# --- inbox ---------------------------------------------------------------------------------------


def test_inbox_splits_unread_from_read_but_unanswered_oldest_first(repo, wp):
    start = _dt.datetime(2030, 1, 1, tzinfo=_dt.timezone.utc)
    with freeze_time(start) as frozen:
        alice, bob, carol = plane(repo, "alice"), plane(repo, "bob"), plane(repo, "carol")
        held = alice.do("new", title="held by bob").result["item"]
        other = alice.do("new", title="someone else's").result["item"]
        quiet = alice.do("new", title="nothing for bob").result["item"]
        bob.do("claim", item=held, ttl="1h")
        frozen.tick(10)
        alice.post(other, "bob, a question", kind="question", to="bob")  # other #1, t+10
        frozen.tick(10)
        carol.post(held, "fyi", kind="note")  # held #1 (bob holds it), t+20
        frozen.tick(10)
        carol.post(held, "when?", kind="question", to="bob")  # held #2, t+30: held AND addressed, listed once
        bob.post(held, "my own note")  # held #3: never in bob's own inbox
        alice.post(quiet, "to carol", to="carol")
        alice.post(other, "to alice herself", to="alice")
        box = bob.inbox()
        assert [(m["item"], m["seq"]) for m in box["unread"]] == [(other, 1), (held, 1), (held, 2)]
        assert box["unanswered"] == []
        assert box["unread"][0]["why"] == "to you" and box["unread"][1]["why"] == "you hold it"
        assert box["unread"][1]["title"] == "held by bob" and box["unread"][2]["text"] == "when?"
        assert box["unread"][2]["why"] == "you hold it"
        bob.ack(held, 2)  # read both, answered neither: the note drops out, the question stays
        box = bob.inbox()
        assert [(m["item"], m["seq"]) for m in box["unread"]] == [(other, 1)]
        assert [(m["item"], m["seq"]) for m in box["unanswered"]] == [(held, 2)]
        reply = bob.post(held, "tomorrow", reply_to=2).result["seq"]
        bob.ack(held, 2, responded=True, reply=reply)
        assert [(m["item"], m["seq"]) for m in bob.inbox()["unanswered"]] == []
        # The CLI gives the same answer for --as, as JSON for agents.
        cli = gw_json(repo, "inbox", "--as", "bob")
        assert cli["who"] == "bob" and [(m["item"], m["seq"]) for m in cli["unread"]] == [(other, 1)]


def test_the_inbox_cache_follows_each_commit_incrementally(repo, wp):
    alice = plane(repo, "alice")
    items = [alice.do("new", title=f"t{n}").result["item"] for n in range(5)]
    for n, item_id in enumerate(items):
        alice.post(item_id, f"hello {n}", to="bob")
    snap = wp.store.snapshot()
    cached = load_threads(snap)
    assert cached.items() == load_threads(snap, use_cache=False).items()
    alice.post(items[2], "one more", to="bob")
    plane(repo, "bob").ack(items[0], 1)
    snap = wp.store.snapshot()
    fresh = load_threads(snap, use_cache=False).items()
    assert load_threads(snap).items() == fresh
    assert [b[0] for _oid, briefs in fresh[items[2]][SEGMENTS] for b in briefs] == [1, 2]
    assert json.loads(fresh[items[2]][SEGMENTS][0][1][1][4])["text"] == "one more"
    assert fresh[items[2]][LAST] == 2
    assert fresh[items[0]][MARKS] == {"bob": (1, 0)}


# --- ask and decide --------------------------------------------------------------------------------


def test_ask_marks_the_item_waiting_and_a_person_decides(repo, wp, item):
    git(repo, "config", "gitwork.agents", "bot-1,bot-2")
    bot, human = plane(repo, "bot-1"), plane(repo, "dana")
    bot.do("claim", item=item)
    asked = bot.ask(item, "Postgres or SQLite?", options=["postgres", "sqlite"], to="dana").result
    shown = wp.show(item)["item"]
    assert shown["status"] == "blocked" and shown["waiting"]["seq"] == asked["seq"] == 1
    assert shown["waiting"]["options"] == ["postgres", "sqlite"]
    assert [m["seq"] for m in human.inbox()["unread"]] == [1]
    before = tip(repo)
    with pytest.raises(Forbidden, match="agent"):
        plane(repo, "bot-2").decide(item, 1, choose="sqlite", why="smaller")
    with pytest.raises(Invalid, match="choose one of"):
        human.decide(item, 1, choose="mysql", why="habit")
    with pytest.raises(Illegal, match="already waits"):
        bot.ask(item, "another question?")
    assert tip(repo) == before
    decided = human.decide(item, 1, choose="postgres", why="we need concurrent writers").result
    assert decided["choice"] == "postgres" and decided["decision"] == 1 and decided["status"] == "in_progress"
    shown = wp.show(item)["item"]
    assert shown.get("waiting") is None and shown["status"] == "in_progress"
    assert shown["decisions"][0]["text"] == "postgres" and shown["decisions"][0]["by"] == "dana"
    assert shown["decisions"][0]["rationale"] == "we need concurrent writers" and shown["decisions"][0]["question"] == 1
    last = wp.thread(item)[1][-1]
    assert (last["kind"], last["reply_to"], last["to"], last["choice"]) == ("decision", 1, "bot-1", "postgres")
    with pytest.raises(Illegal, match="already decided"):
        human.decide(item, 1, choose="sqlite", why="changed my mind")
    with pytest.raises(Invalid, match="not a decision request"):
        human.decide(item, 2, choose="x", why="y")


def test_a_waiting_item_whose_holder_let_go_leaves_ready_and_returns_once_decided(repo, wp, item):
    alice = plane(repo, "alice")
    alice.do("claim", item=item)
    alice.ask(item, "go ahead?")
    alice.do("release", item=item)  # the question still stands: the item waits for it, leased or not
    assert item not in [r[0] for r in wp.ready()]
    plane(repo, "bob").decide(item, 1, choose="yes", why="fine")
    assert wp.show(item)["item"]["status"] == "open" and item in [r[0] for r in wp.ready()]


# --- handoff ---------------------------------------------------------------------------------------


def test_a_handoff_posts_its_reason_into_the_thread_and_the_next_claimant_takes_over(repo, wp, item):
    alice, bob = plane(repo, "alice"), plane(repo, "bob")
    alice.do("claim", item=item)
    done = alice.do("handoff", item=item, reason="needs-human", message="stuck on credentials", to="bob").result
    assert done["state"] == "handed-off" and done["seq"] == 1
    note = wp.thread(item)[1][0]
    assert (note["kind"], note["text"], note["to"], note["reason"], note["epoch"]) == (
        "handoff", "stuck on credentials", "bob", "needs-human", 1)
    assert [m["seq"] for m in bob.inbox()["unread"]] == [1]
    assert bob.do("takeover", item=item).result["epoch"] == 2  # at once, no waiting for expiry
    before = tip(repo)
    with pytest.raises(Stale):
        alice.do("handoff", item=item, reason="done")
    assert tip(repo) == before and len(wp.thread(item)[1]) == 1


# --- bad input through the CLI: a clear one-line error, its exit code, nothing written --------------


def test_bad_input_is_refused_with_a_clear_error_and_nothing_written(repo, wp, item):
    other = wp.do("new", title="another thread").result["item"]
    plane(repo, "alice").post(other, "over there")
    plane(repo, "alice").post(item, "here", kind="question")
    git(repo, "config", "gitwork.agents", "bot")
    plane(repo, "alice").do("claim", item=item)
    plane(repo, "alice").ask(item, "pick", options=["a", "b"])  # #2
    cases = [
        (("msg", item, "", "--as", "bob"), INVALID, "must not be empty"),
        (("msg", item, "   \n ", "--as", "bob"), INVALID, "must not be empty"),
        (("msg", item, "bin\x01ary", "--as", "bob"), INVALID, "binary"),
        (("msg", item, "x", "--kind", "shout", "--as", "bob"), INVALID, "kind must be one of"),
        (("msg", item, "x", "--reply-to", "99", "--as", "bob"), NOT_FOUND, "no message #99"),
        (("msg", item, "x", "--reply-to", f"{other}:1", "--as", "bob"), INVALID, "another"),
        (("ack", item, "0", "--as", "bob"), INVALID, "from 1"),
        (("ack", item, "7", "--as", "bob"), NOT_FOUND, "no message #7"),
        (("ack", item, "1", "--responded", "--as", "bob"), INVALID, "needs --by"),
        (("ack", item, "1", "--read", "--epoch", "0", "--as", "bob"), STALE, "epoch 1"),
        (("decide", item, "2", "--choose", "a", "--why", "because", "--as", "bot"), FORBIDDEN, "agent"),
        (("decide", item, "1", "--choose", "a", "--why", "because", "--as", "dana"), INVALID, "not a decision"),
        (("handoff", item, "--reason", "done", "--as", "bob"), STALE, "held by alice"),
        (("msg", "w-zz", "x", "--as", "bob"), INVALID, "malformed item id"),
        (("thread", item, "--since", "-1"), INVALID, "--since"),
    ]
    before = tip(repo)
    for args, code, words in cases:  # in this process; test_cli_round_trip and the follows start children
        done = gw_here(repo, *args)
        assert done.returncode == code, (args, done.returncode, done.stderr)
        lines = done.stderr.strip().splitlines()
        assert len(lines) == 1 and words in lines[0], (args, done.stderr)
        assert done.stdout == ""
        as_json = gw_here(repo, *args, "--json")
        assert as_json.returncode == code and json.loads(as_json.stdout)["code"] == code
        assert tip(repo) == before, args


# --- the CLI, following --------------------------------------------------------------------------


def test_cli_round_trip_msg_thread_ack_ask_decide(repo, wp, item):
    assert run_gw(repo, "msg", item[:8], "hello", "--to", "bob", "--as", "alice").stdout.strip() == "1"
    assert run_gw(repo, "claim", item[:8], "--as", "alice").returncode == 0  # only the holder may ask
    question = gw_json(repo, "ask", item[:8], "Ship it?", "-o", "yes", "-o", "no", "--as", "alice")
    assert question["seq"] == 2 and question["kind"] == "decision-request"
    plain = run_gw(repo, "thread", item[:8]).stdout
    assert "#1 " in plain and "    hello" in plain and "options: yes | no" in plain
    assert [m["seq"] for m in gw_json(repo, "thread", item, "--since", "1")] == [2]
    assert gw_json(repo, "ack", item, "2", "--as", "bob")["read"] == 2
    assert gw_json(repo, "ack", item, "1", "--as", "bob")["unchanged"] is True
    decided = gw_json(repo, "decide", item, "2", "--choose", "yes", "--why", "tests pass", "--as", "bob")
    assert decided["decision"] == 1 and decided["status"] == "in_progress"  # alice still holds it
    multi = run_gw(repo, "msg", item, "-", "--as", "carol", input="line one\nline two\n")
    assert multi.returncode == 0 and texts(wp, item, 3) == ["line one\nline two\n"]


def test_follow_prints_messages_as_they_land(repo, wp, item):
    plane(repo, "alice").post(item, "before the follow")
    env = dict(os.environ)
    proc = subprocess.Popen(gw_cmd("thread", item, "--follow", "--json", "--timeout", "60", "--poll", "0.05"),
                            cwd=repo, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    try:
        assert proc.stdout is not None
        first = json.loads(proc.stdout.readline())
        assert first["seq"] == 1 and first["text"] == "before the follow"
        bob = plane(repo, "bob")
        for n in range(2, 5):
            bob.post(item, f"live {n}")
            line = proc.stdout.readline()
            record = json.loads(line)
            assert (record["seq"], record["text"]) == (n, f"live {n}")
        bob.ack(item, 4)  # a commit that adds no message prints nothing
        bob.post(item, "after an ack")
        assert json.loads(proc.stdout.readline())["seq"] == 5
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def test_follow_stops_at_its_timeout(repo, item):
    started = time.monotonic()
    done = run_gw(repo, "thread", item, "--follow", "--timeout", "1", "--poll", "0.1")
    assert done.returncode == 0 and done.stdout == "" and time.monotonic() - started >= 1


# --- several machines ---------------------------------------------------------------------------------


def _machine(tmp: Path, name: str, url: str) -> Path:
    path = make_repo(tmp / name)
    git(path, "remote", "add", "origin", url)
    let_post(path, *POSTERS)
    assert gw_here(path, "init", "--remote", "origin").returncode == 0
    return path


def thread_on_two_machines(tmp_path: Path, title: str, first: str) -> tuple[Path, Path, Path, str]:
    """An arbiter, machine one with an item whose first post (by ann) is synced, and machine two cloned
    after it: (arbiter, one, two, item id)."""
    arbiter = make_repo(tmp_path / "arbiter.git", bare=True)
    one = _machine(tmp_path, "one", str(arbiter))
    item_id = gw_json(one, "new", title)["item"]
    gw_json(one, "msg", item_id, first, "--as", "ann")
    gw_json(one, "sync")
    return arbiter, one, _machine(tmp_path, "two", str(arbiter)), item_id


def test_messages_posted_on_two_machines_both_land_once_in_arbiter_order(tmp_path: Path):
    arbiter, one, two, item_id = thread_on_two_machines(tmp_path, "shared thread", "first, from one")
    # Both post offline at the same time: each numbers its post #2 on its own tip.
    a = gw_json(one, "msg", item_id, "from one", "--as", "ann")
    b = gw_json(two, "msg", item_id, "from two", "--as", "ben", "--reply-to", "1")
    assert a["seq"] == b["seq"] == 2
    gw_json(two, "sync")
    gw_json(one, "sync")  # one's post is replayed on the arbiter's tip: it becomes #3
    gw_json(two, "pull")
    for machine in (one, two):
        records = gw_json(machine, "thread", item_id)
        assert [(m["seq"], m["text"]) for m in records] == [(1, "first, from one"), (2, "from two"), (3, "from one")]
        assert [m["id"] for m in records].count(a["id"]) == 1 and records[1]["reply_to"] == 1
    remote = subprocess.run(["git", "show", f"{STATE}:{T.segment_path(item_id, 1)}"], cwd=arbiter,
                            capture_output=True, text=True).stdout
    assert [json.loads(line)["seq"] for line in remote.splitlines()] == [1, 2, 3]
    # A sync that runs again adds nothing (the posts are recognised by id).
    assert gw_json(one, "sync")["replayed"] == []


def test_a_number_resolved_offline_still_names_the_same_message_after_sync_renumbers(tmp_path: Path):
    """The op records the id a number named on its own tip, so ``sync`` replays the reference, not
    the number: here #2 on the offline machine is #3 on the arbiter."""
    arbiter, one, two, item_id = thread_on_two_machines(tmp_path, "renumbered", "first")
    ben = gw_json(two, "msg", item_id, "from two", "--as", "ben")  # #2 on two's tip
    gw_json(one, "msg", item_id, "from one", "--as", "ann")
    gw_json(one, "sync")  # one's post is #2 on the arbiter
    doc = json.dumps({"op": "ack", "item": item_id, "upto": 2, "read": True, "epoch": 0})
    done = run_gw(two, "apply", "-", "--as", "cat", "--json", input=doc)  # #2 here is ben's post
    assert done.returncode == 0, done.stderr
    gw_json(two, "sync")  # ben's post is replayed as #3, then the ack
    with Workplane(str(two)) as there:
        records = there.thread(item_id)[1]
        assert [(m["seq"], m["id"]) for m in records][2] == (3, ben["id"])
        assert T.cursors(there.store.snapshot(), item_id)["cat"]["read"] == 3


def test_follow_pulls_from_the_arbiter_once_per_pull_seconds_and_refuses_a_pull_that_is_no_wait(tmp_path: Path):
    """``--pull SECONDS``: a follow pulls when it starts and then every SECONDS; with an hour, a post that lands
    on the arbiter after the start is not seen before the follow ends (its --timeout). ``--pull 0`` (or less,
    or nan) would fetch in a loop: refused, exit 5, one line, nothing followed."""
    arbiter, one, two, item_id = thread_on_two_machines(tmp_path, "watched thread", "before the follow")
    proc = subprocess.Popen(gw_cmd("thread", item_id, "--follow", "--json", "--timeout", "1", "--poll", "0.05",
                                   "--pull", "3600"), cwd=two, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    first = json.loads(proc.stdout.readline())  # pulled when the follow started
    assert first["text"] == "before the follow"
    gw_json(one, "msg", item_id, "after the start", "--as", "ann")
    gw_json(one, "sync")
    rest, err = proc.communicate(timeout=60)
    assert proc.returncode == 0 and rest == "", (rest, err)  # no second pull within the hour
    for bad in ("0", "-1", "nan"):
        done = run_gw(two, "thread", item_id, "--follow", "--pull", bad)
        assert done.returncode == 5 and done.stdout == "", (bad, done.stdout, done.stderr)
        assert done.stderr.count("\n") == 1 and "--pull" in done.stderr, done.stderr


def test_follow_with_an_arbiter_prints_other_machines_posts_once_even_when_renumbered(tmp_path: Path):
    arbiter, one, two, item_id = thread_on_two_machines(tmp_path, "watched thread", "hello from one")
    local = gw_json(two, "msg", item_id, "two, not yet synced", "--as", "ben")  # #2 on two only
    # --pull 0.1: the arbiter's posts come within a tenth of a second, not the default 2 s (each pull is a fetch)
    proc = subprocess.Popen(gw_cmd("thread", item_id, "--follow", "--json", "--timeout", "120", "--poll", "0.1",
                                   "--pull", "0.1"), cwd=two, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        seen = [json.loads(proc.stdout.readline()) for _ in range(2)]
        assert [(m["seq"], m["text"]) for m in seen] == [(1, "hello from one"), (2, "two, not yet synced")]
        remote = gw_json(one, "msg", item_id, "one again", "--as", "ann")  # #2 on the arbiter
        gw_json(one, "sync")
        # The follower pulls: one's post arrives; two's own post is renumbered #3 and not printed again.
        arrived = json.loads(proc.stdout.readline())
        assert (arrived["id"], arrived["text"]) == (remote["id"], "one again")
        gw_json(one, "msg", item_id, "and a third", "--as", "ann")
        gw_json(one, "sync")
        last = json.loads(proc.stdout.readline())
        assert last["text"] == "and a third" and last["id"] != local["id"]
    finally:
        proc.terminate()
        proc.wait(timeout=30)
    records = gw_json(two, "thread", item_id)
    ours = [m for m in records if m["id"] == local["id"]]
    # Not yet on the arbiter, two's post is replayed after everything the arbiter has: now #4.
    assert len(ours) == 1 and ours[0]["seq"] == len(records) == 4
