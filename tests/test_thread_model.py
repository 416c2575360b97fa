"""A hypothesis stateful model of one thread: posts, acknowledgements and epoch changes.

The real engine runs on a real repository; a few lines of Python say what should have happened.
Invariants, checked after every step: replay from any cursor gives exactly the model's messages after
it (no gap, no duplicate), each participant's cursors never move back and responded never exceeds
read, and a refused post or ack (a stale epoch, an expired fence, a future message) leaves the ref
where it was.
"""

from __future__ import annotations

import datetime as _dt
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, event, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from conftest import examples
from gitwork import thread as T
from gitwork.errors import GwError, Held, Invalid, NotFound, Stale
from gitwork.workplane import Workplane

PEOPLE = ("alice", "bob", "carol")
TTL = 900
MARGIN = 30
START = _dt.datetime(2030, 1, 1, tzinfo=_dt.timezone.utc)
who = st.sampled_from(PEOPLE)


class ThreadModel(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.dir = Path(tempfile.mkdtemp(prefix="gw-thread-model-"))
        subprocess.run(["git", "init", "-q", str(self.dir)], check=True)
        # The model is the epoch rule, not who may post: every participant may (docs/leases.md, "Who may post").
        subprocess.run(["git", "config", "gitwork.people", ",".join(PEOPLE)], cwd=self.dir, check=True)
        self.now = START
        self.planes = {p: Workplane(str(self.dir), now=lambda: self.now, agent=p) for p in PEOPLE}
        self.messages: list[dict] = []  # what the thread should hold, in order
        self.cursors: dict[str, tuple[int, int]] = {}
        self.lease: dict | None = None  # {holder, epoch, expires, active}
        self.epoch = 0
        self.seen = {p: 0 for p in PEOPLE}  # the epoch each participant last read
        self.posted_ids: list[tuple[str, str, dict[str, Any]]] = []  # (id, by, the document) for retries
        self.counter = 0

    def teardown(self) -> None:
        for wp in self.planes.values():
            wp.close()
        shutil.rmtree(self.dir, ignore_errors=True)

    @initialize()
    def start(self) -> None:
        wp = self.planes["alice"]
        wp.do("init")
        self.item = wp.do("new", title="modelled thread").result["item"]

    # --- helpers -------------------------------------------------------------------------------

    def tip(self) -> str | None:
        return self.planes["alice"].store.tip()

    def is_holder(self, person: str) -> bool:
        return bool(self.lease and self.lease["active"] and self.lease["holder"] == person)

    def live_for_holder(self) -> bool:
        assert self.lease is not None
        return self.now < self.lease["expires"] - _dt.timedelta(seconds=MARGIN)

    def takeable(self) -> bool:
        if self.lease is None or not self.lease["active"]:
            return True
        return self.now >= self.lease["expires"] + _dt.timedelta(seconds=MARGIN)

    def write_allowed(self, person: str) -> bool:
        """The epoch rule as the model states it."""
        if self.is_holder(person):
            return self.live_for_holder() and self.seen[person] == self.epoch
        return self.seen[person] == self.epoch

    def post_allowed(self, person: str) -> bool:
        """A post by someone not holding the item does not depend on the epoch (it is recorded under
        the epoch its author read, so it replays on any later tip as first applied); the holder's is fenced."""
        return self.write_allowed(person) if self.is_holder(person) else True

    def refused(self, call, error: type[GwError]) -> None:  # type: ignore[no-untyped-def]
        before = self.tip()
        try:
            call()
        except error:
            pass
        else:
            raise AssertionError(f"expected {error.__name__}")
        assert self.tip() == before, "a refusal moved the ref"

    # --- rules: epochs and leases --------------------------------------------------------------

    @rule(person=who)
    def read_epoch(self, person: str) -> None:
        assert self.planes[person].current_epoch(self.item) == self.epoch
        self.seen[person] = self.epoch

    @rule(seconds=st.sampled_from([10, 60, 600, 1000]))
    def clock_moves(self, seconds: int) -> None:
        self.now += _dt.timedelta(seconds=seconds)

    @rule(person=who)
    def claim(self, person: str) -> None:
        wp = self.planes[person]
        if not self.takeable():
            self.refused(lambda: wp.do("claim", item=self.item), Held)
            return
        got = wp.do("claim", item=self.item).result
        self.epoch += 1
        assert got["epoch"] == self.epoch
        self.seen[person] = self.epoch  # a claimant learns its epoch from the grant
        self.lease = {"holder": person, "epoch": self.epoch, "active": True,
                      "expires": self.now + _dt.timedelta(seconds=TTL)}

    @precondition(lambda self: self.lease is not None and self.lease["active"])
    @rule(handoff=st.booleans())
    def holder_lets_go(self, handoff: bool) -> None:
        assert self.lease is not None
        person = self.lease["holder"]
        wp = self.planes[person]
        op = "handoff" if handoff else "release"
        args = {"reason": "blocked", "message": "over to you"} if handoff else {}
        if not self.live_for_holder():
            self.refused(lambda: wp.do(op, item=self.item, **args), Stale)
            return
        got = wp.do(op, item=self.item, **args)
        self.lease["active"] = False
        if handoff:  # a handoff is also a message in the thread, under the holder's epoch
            self.messages.append({"seq": len(self.messages) + 1, "id": got.command["id"], "by": person,
                                  "text": "over to you", "epoch": self.epoch, "kind": "handoff"})
            assert got.result["seq"] == len(self.messages)

    # --- rules: posts and acks ------------------------------------------------------------------

    @rule(person=who, kind=st.sampled_from(["note", "question", "answer"]), reply=st.integers(0, 12))
    def post(self, person: str, kind: str, reply: int) -> None:
        wp = self.planes[person]
        self.counter += 1
        msg_id, text = f"m-{self.counter:05d}", f"{person} says {self.counter}"
        reply_to = reply if 1 <= reply <= len(self.messages) else None
        doc = {"item": self.item, "text": text, "kind": kind, "epoch": self.seen[person], "id": msg_id,
               "reply_to": reply_to}
        if not self.post_allowed(person):
            event("post: stale")
            self.refused(lambda: wp.do("msg", **doc), Stale)
            return
        event("post: landed")
        got = wp.do("msg", **doc).result
        self.messages.append({"seq": len(self.messages) + 1, "id": msg_id, "by": person, "text": text,
                              "epoch": self.epoch if self.is_holder(person) else self.seen[person], "kind": kind,
                              "reply_to": reply_to})
        assert got["seq"] == len(self.messages)
        self.posted_ids.append((msg_id, person, doc))

    @precondition(lambda self: self.posted_ids)
    @rule(data=st.data())
    def retry_a_post(self, data: st.DataObject) -> None:
        """Resending a post that landed changes nothing, whatever happened since. (The very same
        document: a command id names one command, so another body under it would be refused.)"""
        msg_id, person, doc = data.draw(st.sampled_from(self.posted_ids))
        before = self.tip()
        got = self.planes[person].do("msg", **doc).result
        assert got["duplicate"] is True and self.tip() == before
        assert self.messages[got["seq"] - 1]["id"] == msg_id

    @rule(person=who, data=st.data())
    def ack_read(self, person: str, data: st.DataObject) -> None:
        wp = self.planes[person]
        upto = data.draw(st.integers(1, len(self.messages) + 1))  # the last one is a future message
        doc = {"item": self.item, "upto": upto, "read": True, "epoch": self.seen[person]}
        if not self.write_allowed(person):
            self.refused(lambda: wp.do("ack", **doc), Stale)
            return
        if doc["upto"] > len(self.messages):
            self.refused(lambda: wp.do("ack", **doc), NotFound)
            return
        wp.do("ack", **doc)
        read, responded = self.cursors.get(person, (0, 0))
        event("ack read: backwards" if upto < read else "ack read: forwards")
        self.cursors[person] = (max(read, doc["upto"]), responded)

    @precondition(lambda self: self.messages)
    @rule(person=who, data=st.data())
    def ack_responded(self, person: str, data: st.DataObject) -> None:
        wp = self.planes[person]
        mine = [m for m in self.messages if m["by"] == person]
        reply = data.draw(st.sampled_from(mine) if mine and data.draw(st.booleans()) else st.sampled_from(self.messages))
        before_reply = st.integers(1, max(1, reply["seq"] - 1))
        upto = data.draw(before_reply if data.draw(st.booleans()) else st.integers(1, len(self.messages)))
        doc = {"item": self.item, "upto": upto, "responded": True, "reply": reply["seq"], "epoch": self.seen[person]}
        if not self.write_allowed(person):
            self.refused(lambda: wp.do("ack", **doc), Stale)
            return
        answers = (reply["by"] == person and reply["seq"] > upto
                   and (reply.get("reply_to") is None or reply["reply_to"] >= upto))
        if not answers:
            event("ack responded: no answer")
            self.refused(lambda: wp.do("ack", **doc), Invalid)
            return
        wp.do("ack", **doc)
        read, responded = self.cursors.get(person, (0, 0))
        event("ack responded: backwards" if upto < responded else "ack responded: forwards")
        self.cursors[person] = (max(read, upto), max(responded, upto))

    @precondition(lambda self: any(read > 1 for read, _ in self.cursors.values()))
    @rule(data=st.data())
    def ack_behind_the_cursor(self, data: st.DataObject) -> None:
        """Acknowledging less than is already acknowledged moves nothing and writes nothing."""
        person = data.draw(st.sampled_from(sorted(p for p, (read, _) in self.cursors.items() if read > 1)))
        if not self.write_allowed(person):
            return
        read, responded = self.cursors[person]
        upto = data.draw(st.integers(1, read - 1))
        before = self.tip()
        got = self.planes[person].do("ack", item=self.item, upto=upto, read=True, epoch=self.seen[person]).result
        assert got["unchanged"] is True and (got["read"], got["responded"]) == (read, responded)
        assert self.tip() == before

    # --- invariants --------------------------------------------------------------------------------

    @invariant()
    def replay_from_any_cursor_is_exact(self) -> None:
        if not hasattr(self, "item"):
            return
        snapshot = self.planes["alice"].store.snapshot()
        whole = list(T.replay(snapshot, self.item, 0))
        assert [r["seq"] for r in whole] == list(range(1, len(self.messages) + 1))
        assert [(r["id"], r["by"], r["text"], r["epoch"], r["kind"]) for r in whole] == [
            (m["id"], m["by"], m["text"], m["epoch"], m["kind"]) for m in self.messages]
        for since in range(0, len(self.messages) + 2):
            assert list(T.replay(snapshot, self.item, since)) == whole[since:]

    @invariant()
    def cursors_match_and_responded_implies_read(self) -> None:
        if not hasattr(self, "item"):
            return
        stored = T.cursors(self.planes["alice"].store.snapshot(), self.item)
        got = {p: (c["read"], c["responded"]) for p, c in stored.items()}
        assert got == self.cursors
        for read, responded in got.values():
            assert 0 <= responded <= read <= len(self.messages)
        previous = getattr(self, "_previous_cursors", {})
        for p, (read, responded) in got.items():  # monotone: never behind what was seen before
            old = previous.get(p, (0, 0))
            assert read >= old[0] and responded >= old[1]
        self._previous_cursors = got


# 20 runs of 40 steps: 800 steps per test run; posts land and go stale, acks move forwards and backwards (see
# --hypothesis-show-statistics). Raised locally (max_examples) when the model changes.
ThreadModel.TestCase.settings = settings(
    max_examples=examples(quick=8, thorough=20), stateful_step_count=40, deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)
TestThreadModel = pytest.mark.slow(ThreadModel.TestCase)  # long: collected first so xdist spreads it
