"""The turn holder carries the commands its clone's waiting processes left (`gitwork/pushturn.py`).

A process that finds the clone's push turn taken leaves its command document in
`<gitwork dir>/arbiter-queue/` and waits; the holder lays the waiting commands on top of its own, one
commit each, and pushes the chain once. What must hold whatever happens: each command lands once,
as its own commit under its own identity; a command refused on the holder's chain is decided by its
own process on a fresh view; a holder that dies after its push leaves no waiter unanswered; an entry
of a dead process, or of a process with other settings, is never carried.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from conftest import git, gw_cmd, make_repo
from gitwork import engine, pushturn, sync
from gitwork.errors import NotFound
from gitwork.pushturn import Carry, PushTurn
from gitwork.workplane import Workplane

REF = "refs/gitwork/state"


class Plane:
    def __init__(self, bare: Path, clone: Path, items: list[str]) -> None:
        self.bare, self.clone, self.items = bare, clone, items
        self.gitwork_dir = Path(git(clone, "rev-parse", "--git-common-dir"))
        if not self.gitwork_dir.is_absolute():
            self.gitwork_dir = clone / self.gitwork_dir
        self.gitwork_dir = self.gitwork_dir / "gitwork"
        self.queue = self.gitwork_dir / pushturn.QUEUE_DIR

    def turn(self) -> PushTurn:
        self.gitwork_dir.mkdir(exist_ok=True)  # as every gw command makes it
        return PushTurn(str(self.gitwork_dir / pushturn.TURN_FILE))

    def moves(self) -> int:
        """How many pushes moved the arbiter's state ref so far."""
        return len(git(self.bare, "reflog", "show", "--format=%H", REF).split())

    def entries(self) -> list[str]:
        return sorted(p.name for p in self.queue.glob("*.json")) if self.queue.exists() else []

    def start(self, *args: str, env: dict[str, str] | None = None) -> subprocess.Popen[str]:
        return subprocess.Popen(gw_cmd(*args), cwd=self.clone, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                text=True, env={**os.environ, **(env or {})})

    def wait_for_entries(self, count: int, procs: list[subprocess.Popen[str]]) -> None:
        deadline = time.monotonic() + 30
        while len(self.entries()) < count:
            assert time.monotonic() < deadline, f"only {self.entries()} queued"
            for proc in procs:
                assert proc.poll() is None, proc.communicate()
            time.sleep(0.01)

    def waiting(self, count: int, env: dict[str, str] | None = None) -> tuple[PushTurn, list[subprocess.Popen[str]]]:
        """Take the clone's turn, start ``count`` ``gw claim --next`` processes, and return once each of
        them has left its command in the queue (the caller gives the turn back)."""
        turn = self.turn()
        assert turn.try_take() is True
        procs = [self.start("claim", "--next", "--as", f"agent-{k}", "--json", env=env) for k in range(count)]
        try:
            self.wait_for_entries(count, procs)
        except BaseException:
            turn.give()
            raise
        return turn, procs

    def hold(self, turn: PushTurn, doc: dict[str, object]) -> engine.Applied:
        """Submit ``doc`` in this process as the holder of ``turn`` (taken by the test): it carries the queue."""
        with Workplane(str(self.clone), agent=str(doc["as"])) as wp:
            cas = sync.ArbiterRef(sync.Arbiter(wp), seed=f"{doc['as']}-1")
            cas.turn = turn  # already ours: no round waits for it
            return cas.submit(engine.validate_command(doc))

    def claims(self) -> list[tuple[str, str, str]]:
        """(command id, item, author) of every claim on the arbiter, oldest first."""
        out = git(self.bare, "log", "--reverse", "--format=%an%x00%B%x01", REF)
        found = []
        for entry in out.split("\x01"):
            if "\x00" not in entry:
                continue
            author, body = entry.strip().split("\x00", 1)
            line = next((ln for ln in body.splitlines() if ln.startswith("Command: ")), None)
            cmd = json.loads(line[len("Command: "):]) if line else {}
            if cmd.get("op") == "claim":
                found.append((cmd["id"], cmd["item"], author))
        return found


@pytest.fixture
def plane(tmp_path: Path) -> Iterator[Plane]:
    bare = make_repo(tmp_path / "arbiter.git", bare=True)
    git(bare, "config", "core.logAllRefUpdates", "always")
    clone = make_repo(tmp_path / "clone")
    git(clone, "remote", "add", "origin", str(bare))
    with Workplane(str(clone), agent="admin") as wp:
        sync.configure_remote(wp, "origin")
        wp.do("init")
        items = [wp.do("new", title=f"item {n}").result["item"] for n in range(6)]
        sync.Arbiter(wp).sync()
    yield Plane(bare, clone, items)


def finish(procs: list[subprocess.Popen[str]], timeout: float = 60) -> list[tuple[int, str, str]]:
    outputs = [proc.communicate(timeout=timeout) for proc in procs]
    return [(proc.returncode, out, err) for proc, (out, err) in zip(procs, outputs, strict=True)]


def test_commands_left_while_the_turn_is_taken_land_in_one_push_one_commit_each(plane: Plane) -> None:
    turn, procs = plane.waiting(3)
    before = plane.moves()
    turn.give()
    done = finish(procs)
    assert [code for code, _, _ in done] == [0, 0, 0], done
    granted = {json.loads(out)["item"] for _, out, _ in done}
    assert len(granted) == 3
    # The first process to get the turn pushed its own claim and carried the other two: one push.
    assert plane.moves() == before + 1
    claims = plane.claims()
    assert sorted(author for _, _, author in claims) == ["agent-0", "agent-1", "agent-2"]  # each under its own name
    assert {item for _, item, _ in claims} == granted and len({cid for cid, _, _ in claims}) == 3
    assert os.listdir(plane.queue) == []  # nothing left behind: entries and answers are gone


def test_a_holder_that_dies_after_its_push_leaves_no_waiter_unanswered(plane: Plane,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    turn, procs = plane.waiting(2)
    before = plane.moves()
    try:
        # This process is the holder: it carries both, pushes, and "dies" before writing any answer.
        monkeypatch.setattr(Carry, "answer", lambda self, carried, answer: None)
        mine = plane.hold(turn, {"op": "claim", "next": True, "as": "holder"})
    finally:
        turn.give()
    done = finish(procs)
    assert [code for code, _, _ in done] == [0, 0], done
    theirs = [json.loads(out)["item"] for _, out, _ in done]
    assert plane.moves() == before + 1  # the waiters found their commands on the arbiter: nothing pushed again
    claims = plane.claims()
    assert len(claims) == 3 and len({cid for cid, _, _ in claims}) == 3
    assert sorted(item for _, item, _ in claims) == sorted([mine.result["item"], *theirs])


def test_a_carried_command_refused_on_the_chain_is_decided_by_its_own_process(plane: Plane) -> None:
    item = plane.items[0]
    turn = plane.turn()
    assert turn.try_take() is True
    proc = plane.start("claim", item, "--as", "bob", "--json")
    try:
        plane.wait_for_entries(1, [proc])
        mine = plane.hold(turn, {"op": "claim", "item": item, "as": "alice"})
    finally:
        turn.give()
    [(code, out, err)] = finish([proc])
    assert mine.result["item"] == item
    assert code == 75, (code, out, err)  # held: bob's own process asked the arbiter and was told so
    assert "alice" in err
    assert [(it, who) for _, it, who in plane.claims()] == [(item, "alice")]


def test_entries_of_dead_processes_or_other_settings_are_not_carried(plane: Plane) -> None:
    dead = subprocess.Popen(["true"])
    dead.wait()
    with Workplane(str(plane.clone), agent="alice") as wp:
        key = sync._carry_key(wp.settings)
        plane.queue.mkdir(parents=True, exist_ok=True)
        for name, pid, entry_key in (("c-dead", dead.pid, key), ("c-other", os.getpid(), "something else")):
            doc = {"op": "claim", "next": True, "as": "mallory", "id": name}
            host_key = f"{os.uname().nodename} {entry_key}"
            (plane.queue / f"{name}.json").write_text(json.dumps({"key": host_key, "pid": pid, "at": None, "cmd": doc}))
        before = plane.moves()
        wp.do("claim", item=plane.items[0])
    assert plane.moves() == before + 1
    assert [who for _, _, who in plane.claims()] == ["alice"]
    assert plane.entries() == ["c-other.json"]  # another key's entry waits for its own kind; the dead one is gone


def test_a_lone_claim_leaves_no_queue(plane: Plane) -> None:
    with Workplane(str(plane.clone), agent="alice") as wp:
        wp.do("claim", item=plane.items[0])
    assert not plane.queue.exists()  # the turn was free: nothing written besides the push


@pytest.mark.slow
def test_holders_killed_after_their_push_lose_no_grant_and_grant_nothing_twice(plane: Plane) -> None:
    turn, procs = plane.waiting(4, env={"GW_CRASH_AT": "after-push"})  # whoever pushes dies right after
    turn.give()
    done = finish(procs)
    assert {code for code, _, _ in done} <= {0, -signal.SIGKILL}, done
    assert any(code == -signal.SIGKILL for code, _, _ in done)
    answered = {json.loads(out)["item"]: f"agent-{k}" for k, (code, out, _) in enumerate(done) if code == 0}
    claims = plane.claims()
    assert len({cid for cid, _, _ in claims}) == len(claims)  # no command twice
    assert len({item for _, item, _ in claims}) == len(claims)  # no item granted twice
    on_arbiter = {item: who for _, item, who in claims}
    assert all(on_arbiter.get(item) == who for item, who in answered.items())  # every answer is the arbiter's
    with Workplane(str(plane.clone), agent="admin") as wp:
        sync.Arbiter(wp).sync()
    assert git(plane.clone, "fsck", "--no-progress", "--strict") == ""
    assert re.fullmatch(r"[0-9a-f]{40}", git(plane.bare, "rev-parse", REF))


def test_hostile_queue_entries_are_dropped_or_handed_back_and_write_nothing_elsewhere(plane: Plane) -> None:
    with Workplane(str(plane.clone), agent="alice") as wp:
        key = f"{os.uname().nodename} {sync._carry_key(wp.settings)}"
        plane.queue.mkdir(parents=True, exist_ok=True)

        def entry(cmd: object) -> str:
            return json.dumps({"key": key, "pid": os.getpid(), "at": None, "cmd": cmd})

        (plane.queue / "c-aaaa.json").write_text(entry({"op": "claim", "next": True, "id": "../../escaped"}))
        (plane.queue / "c-bbbb.json").write_text("[" * 200_000 + "]" * 200_000)  # deeper than json can go
        (plane.queue / "c-cccc.json").write_text(entry({"op": "no-such-op", "id": "c-cccc"}))
        (plane.queue / "c-dddd.json").write_text(entry({"op": "claim", "item": "w-none", "id": "c-dddd", "as": "x y"}))
        before = plane.moves()
        wp.do("claim", item=plane.items[0])
    assert plane.moves() == before + 1
    assert [who for _, _, who in plane.claims()] == ["alice"]
    # the mismatched id and the garbage are gone; the two bad documents get the engine's verdict
    assert sorted(os.listdir(plane.queue)) == ["c-cccc.answer", "c-dddd.answer"]
    assert json.loads((plane.queue / "c-cccc.answer").read_text())["error"]["error"] == "invalid"
    assert json.loads((plane.queue / "c-dddd.answer").read_text())["error"]["error"] == "invalid"
    assert not (plane.gitwork_dir.parent.parent / "escaped.answer").exists()
    assert not list(plane.gitwork_dir.parent.rglob("escaped*"))


def test_a_forged_answer_is_not_believed(plane: Plane) -> None:
    turn = plane.turn()
    assert turn.try_take() is True
    proc = plane.start("claim", "--next", "--as", "bob", "--json")
    try:
        plane.wait_for_entries(1, [proc])
        [name] = plane.entries()
        cmd = json.loads((plane.queue / name).read_text())["cmd"]
        forged = {"command": cmd, "commit": git(plane.clone, "rev-parse", REF), "summary": "claimed",
                  "result": {"item": "w-forged", "fence": 99}}
        (plane.queue / f"{cmd['id']}.answer").write_text(json.dumps(forged))
        deadline = time.monotonic() + 20
        while (plane.queue / f"{cmd['id']}.answer").exists():  # it read the answer, and did not believe it
            assert time.monotonic() < deadline
            time.sleep(0.01)
        assert proc.poll() is None
    finally:
        turn.give()
    [(code, out, err)] = finish([proc])
    assert code == 0, err
    assert json.loads(out)["item"] in plane.items
    assert [(item, who) for _, item, who in plane.claims()] == [(json.loads(out)["item"], "bob")]


def test_a_carried_command_is_decided_at_its_own_process_s_pinned_clock(plane: Plane) -> None:
    turn, [proc] = plane.waiting(1, env={"GW_NOW": "2030-01-01T00:00:00Z"})
    try:
        plane.hold(turn, {"op": "claim", "next": True, "as": "holder"})  # on the real clock
    finally:
        turn.give()
    [(code, out, err)] = finish([proc])
    assert code == 0, err
    assert json.loads(out)["expires_at"] == "2030-01-01T00:15:00Z", out  # GW_NOW + the default 15 minutes


def test_a_refusal_on_the_chain_that_landed_is_the_answer_the_waiter_prints(plane: Plane,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    item = plane.items[1]
    turn = plane.turn()
    assert turn.try_take() is True
    proc = plane.start("claim", item, "--as", "bob")
    try:
        plane.wait_for_entries(1, [proc])
        monkeypatch.setattr(turn, "give", lambda: None)  # the holder keeps the turn after it landed...
        plane.hold(turn, {"op": "claim", "item": item, "as": "alice"})
        # ...so bob can only finish on the answer it left: going alone it would first wait TURN_WAIT.
        [(code, _, err)] = finish([proc], timeout=pushturn.TURN_WAIT - 0.5)
    finally:
        PushTurn.give(turn)
    assert code == 75 and "held by alice" in err, err


def test_at_the_end_of_a_herd_the_holder_answers_every_waiter_s_no_ready_item(plane: Plane) -> None:
    with Workplane(str(plane.clone), agent="admin") as wp:
        for item in plane.items:
            wp.do("claim", item=item)  # nothing left ready
    turn, procs = plane.waiting(3)
    before = plane.moves()
    try:
        with pytest.raises(NotFound):
            plane.hold(turn, {"op": "claim", "next": True, "as": "holder"})  # refused after a fetch
        # Still holding the turn: the waiters can only finish on the answers the holder left (going
        # alone, each would first wait TURN_WAIT for the turn).
        done = finish(procs, timeout=pushturn.TURN_WAIT - 0.5)
    finally:
        turn.give()
    assert [code for code, _, _ in done] == [3, 3, 3], done
    assert all("no ready item" in err or "ready" in err for _, _, err in done), done
    assert plane.moves() == before


def test_threads_of_one_process_carry_each_other_like_processes(plane: Plane) -> None:
    """`gw serve` and `gw mcp` submit from threads of one process: the turn is a flock per open file,
    so threads wait for it as processes do, and a thread holding it carries its siblings' commands."""
    import threading

    results: dict[int, object] = {}

    def claim(k: int) -> None:
        try:
            with Workplane(str(plane.clone), agent=f"thread-{k}") as wp:
                results[k] = wp.do("claim", next=True).result["item"]
        except BaseException as error:  # noqa: BLE001 - reported by the assertion below
            results[k] = error

    turn = plane.turn()
    assert turn.try_take() is True
    threads = [threading.Thread(target=claim, args=(k,)) for k in range(3)]
    try:
        for thread in threads:
            thread.start()
        plane.wait_for_entries(3, [])
        before = plane.moves()
    finally:
        turn.give()
    for thread in threads:
        thread.join(60)
    assert all(isinstance(item, str) for item in results.values()) and len(set(results.values())) == 3, results
    assert plane.moves() == before + 1
    assert sorted(who for _, _, who in plane.claims()) == ["thread-0", "thread-1", "thread-2"]
