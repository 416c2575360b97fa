"""The command service at the arbiter (docs/deploy.md): ``gw serve`` on the arbiter's own bare repository,
behind the nginx that serves git, deciding REST commands in-process on the state ref that clones push to.

One deployment per module (tests/webserver.py: ``CommandService`` and ``WebServer(api=...)``): a bare
arbiter with gw's server hooks and ``gitwork.arbiter batch``, nginx proxying ``/v1/`` to gw serve.
What is checked is what the arbiter's ref holds: REST agents and clones pushing through git (by
compare-and-swap and through the batch inbox) race for the same items and every item is granted once,
the fences go 1, 2, 3... along the history, every acknowledged command is on it, and the whole history
passes the server's own derive check; hostile requests through nginx move nothing.
"""

from __future__ import annotations

import http.client
import json
import os
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("fastapi", reason="gw serve needs the serve extra (pip install -e '.[test]')")

from conftest import git, run_gw, scrubbed, tip  # noqa: E402
from gitwork import clock  # noqa: E402
from gitwork.serve.server import Principal, Server  # noqa: E402
from gitwork.workplane import Chain, Workplane  # noqa: E402
from test_sync import STATE, assert_sound, gw_ok, machine  # noqa: E402
from test_transports import assert_grants_linear  # noqa: E402
from webserver import CommandService, WebServer, require, served_repo  # noqa: E402

OK, NONE_READY, HELD = 0, 3, 75


class Deployment:
    def __init__(self, root: Path, arbiter: Path, service: CommandService, web: WebServer) -> None:
        self.root, self.arbiter, self.service, self.web = root, arbiter, service, web
        self.url = web.url("arbiter")
        self.seed = machine(root, "seed", self.url, publish=True)
        self.tokens: dict[str, str] = {}

    def token(self, name: str) -> str:
        if name not in self.tokens:
            self.tokens[name] = self.service.token(name, "agent")
        return self.tokens[name]

    def connect(self) -> http.client.HTTPConnection:
        assert self.web.port is not None
        return http.client.HTTPConnection("127.0.0.1", self.web.port, timeout=60)

    def items(self, n: int, label: str) -> list[str]:
        """``n`` ready items labelled ``label``, published from the seed clone through git."""
        made = [gw_ok(self.seed, "new", f"{label} {k}", "--label", label)["item"] for k in range(n)]
        gw_ok(self.seed, "sync")
        return made


def post(conn: http.client.HTTPConnection, token: str | None, body: bytes | str,
         content_type: str = "application/json") -> tuple[int, dict[str, Any], bytes]:
    headers = {"Content-Type": content_type}
    if token is not None:
        headers["Authorization"] = f"Bearer {token}"
    conn.request("POST", "/v1/commands", body, headers)
    response = conn.getresponse()
    raw = response.read()
    return response.status, json.loads(raw), raw


@pytest.fixture(scope="module")
def deployment(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Deployment]:
    require()
    with scrubbed(tmp_path_factory):
        root = tmp_path_factory.mktemp("cmdsvc")
        arbiter = served_repo(root, "arbiter")
        git(arbiter, "config", "gitwork.arbiter", "batch")  # the inbox too: three writers on one ref
        with CommandService(arbiter) as service:
            assert service.address is not None
            with WebServer(root, api=service.address) as web:
                yield Deployment(root, arbiter, service, web)


def test_rest_at_the_arbiter_and_clones_pushing_through_git_grant_every_item_once(deployment: Deployment) -> None:
    d = deployment
    items = d.items(12, "race")
    a = machine(d.root, "a", d.url)  # pushes state commits by compare-and-swap
    b = machine(d.root, "b", d.url)  # sends its commands to the arbiter's inbox
    acknowledged: list[str] = []
    granted: list[str] = []
    errors: list[str] = []
    lock = threading.Lock()

    def cli(clone: Path, name: str, mode: str) -> None:
        while True:
            done = run_gw(clone, "claim", "--next", "--label", "race", "--ttl", "1h", "--as", name, "--json",
                          env={"GW_ARBITER": mode}, timeout=120)
            if done.returncode == OK:
                answer = json.loads(done.stdout)
                with lock:
                    acknowledged.append(answer["command_id"])
                    granted.append(answer["item"])
            elif done.returncode == NONE_READY:
                return
            elif done.returncode != HELD:
                with lock:
                    errors.append(f"{name}: exit {done.returncode}: {done.stderr.strip()}")
                return

    def rest(name: str) -> None:
        conn, token = d.connect(), d.token(name)
        while True:
            status, answer, _raw = post(conn, token, json.dumps({"op": "claim", "next": True, "labels": ["race"],
                                                                 "ttl": "1h"}))
            if status == 200:
                with lock:
                    acknowledged.append(answer["command_id"])
                    granted.append(answer["item"])
                time.sleep(0.15)  # an agent works between claims: the clones' pushes get their chance
            elif status == 404:
                return
            elif status != 409:
                with lock:
                    errors.append(f"{name}: {status} {answer}")
                return

    threads = [threading.Thread(target=cli, args=(a, f"cli-a{k}", "cas")) for k in range(2)]
    threads += [threading.Thread(target=cli, args=(b, "cli-b0", "batch"))]
    threads += [threading.Thread(target=rest, args=(f"rest-{k}",)) for k in range(3)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    assert sorted(granted) == sorted(items)  # every item granted, each once, to whoever asked first
    history = assert_grants_linear(d.arbiter)  # one grant per item and epoch; fences 1, 2, 3... in order
    landed = {c["Command-Id"] for c in history}
    assert set(acknowledged) <= landed  # no acknowledged command lost
    for clone in (a, b):
        gw_ok(clone, "sync")
        assert tip(clone) == tip(d.arbiter)

    # A clone deciding on a view the command service has moved since: its push loses the ref's CAS, it
    # fetches, and the claim is decided again on the new tip (held); nothing of it lands.
    solo = d.items(2, "solo")
    gw_ok(a, "sync")
    conn, token = d.connect(), d.token("rest-0")
    status, answer, _raw = post(conn, token, json.dumps({"op": "claim", "item": solo[0]}))
    assert status == 200 and answer["item"] == solo[0]
    before = tip(d.arbiter)
    assert run_gw(a, "claim", solo[0], "--as", "cli-a0").returncode == HELD
    assert tip(d.arbiter) == before
    # ... and the other way round: what a clone pushed through git, the service sees at once.
    mine = gw_ok(a, "claim", "--next", "--label", "solo", "--as", "cli-a0")
    assert mine["item"] == solo[1]
    status, answer, _raw = post(conn, token, json.dumps({"op": "claim", "item": solo[1]}))
    assert status == 409 and answer["error"] == "held" and tip(d.arbiter) == tip(a)
    assert_grants_linear(d.arbiter)
    assert_sound(d.arbiter)  # every commit, the service's included, passes the server hook's derive check


def test_hostile_requests_through_the_web_server_move_nothing(deployment: Deployment) -> None:
    d = deployment
    [item] = d.items(1, "hostile")
    conn, token = d.connect(), d.token("mallory")
    before = git(d.arbiter, "for-each-ref")

    def refused(status: int, kind: str, body: bytes | str, who: str | None = token,
                content_type: str = "application/json") -> None:
        got, answer, raw = post(conn, who, body, content_type)
        assert (got, answer["ok"], answer["error"]) == (status, False, kind), (got, answer)
        assert raw.decode().strip().count("\n") == 0 and isinstance(answer["code"], int)  # one JSON line
        assert git(d.arbiter, "for-each-ref") == before

    refused(400, "usage", b"{not json")
    refused(401, "unauthorized", json.dumps({"op": "claim", "item": item}), who=None)
    refused(401, "unauthorized", json.dumps({"op": "claim", "item": item}), who="gwt_not-a-token")
    refused(403, "forbidden", json.dumps({"op": "claim", "item": item, "as": "alice"}))
    refused(415, "usage", json.dumps({"op": "claim", "item": item}), content_type="text/plain")
    # Past the API's 256 KiB gw serve answers; past nginx's 1 MiB nginx answers, in the same shape.
    refused(413, "too-large", json.dumps({"op": "new", "title": "x" * (300 * 1024)}))
    refused(413, "too-large", json.dumps({"op": "new", "title": "x" * (2 * 1024 * 1024)}))
    # The same connection still works (kept alive through every refusal).
    conn = d.connect()
    status, answer, _raw = post(conn, token, json.dumps({"op": "claim", "item": item}))
    assert status == 200 and answer["holder"] == "mallory"


def test_writes_waiting_for_the_turn_land_as_one_chain_and_one_ref_move(tmp_path: Path) -> None:
    """Requests run in a thread pool; the one holding the server's turn decides every request waiting by
    then as one chain (one commit each) and moves the ref once: six claims queued behind a held turn
    land with one ref move, each item once, fences 1..6 in order, each at its first attempt. The
    settings are the repository's, read again once they change."""
    arbiter = tmp_path / "arbiter.git"
    git(tmp_path, "init", "-q", "--bare", str(arbiter))
    git(arbiter, "config", "core.logAllRefUpdates", "always")
    with Workplane(str(arbiter), agent="admin") as wp:
        wp.do("init")
        for n in range(6):
            wp.do("new", title=f"item {n}")
    moves = len(git(arbiter, "reflog", "show", "--format=%H", STATE).split())
    server = Server(str(arbiter), now=clock.now, poll=0.1)
    answers: list[Any] = []
    with server.writer.lock:  # the turn, held: every request queues behind it
        threads = [threading.Thread(target=lambda k=k: answers.append(server.write(
            Principal(f"agent-{k}", "agent", f"t-{k}"), {"op": "claim", "next": True}))) for k in range(6)]
        for thread in threads:
            thread.start()
        deadline = time.monotonic() + 30
        while len(server.writer._queue) < 6:  # noqa: SLF001 - waiting for all six to queue
            assert time.monotonic() < deadline, "the requests did not queue"
            time.sleep(0.01)
    for thread in threads:
        thread.join()
    assert len(git(arbiter, "reflog", "show", "--format=%H", STATE).split()) == moves + 1  # one move
    assert [a.attempts for a in answers] == [1] * 6
    assert len({a.result["item"] for a in answers}) == 6
    assert [int(c["Fence"]) for c in assert_grants_linear(arbiter)] == [1, 2, 3, 4, 5, 6]
    who = Principal("agent-0", "agent", "t-0")
    with Workplane(str(arbiter), agent="admin") as wp:
        spare = wp.do("new", title="spare").result["item"]
    git(arbiter, "config", "gitwork.defaultTtl", "2h")
    lease = server.write(who, {"op": "claim", "item": spare}).result
    server.writer.close()
    assert lease["holder"] == "agent-0"
    with Workplane(str(arbiter)) as wp:
        granted = wp.lease(spare)
        assert granted is not None and granted.ttl == 7200  # the arbiter's default_ttl as changed


def test_a_chain_that_loses_the_ref_to_another_writer_lands_nothing(tmp_path: Path) -> None:
    """Nothing of a chain is on the ref before its one compare-and-swap; when a push (here a gw process)
    moved the ref meanwhile, the swap fails and the ref keeps the other writer's commit."""
    arbiter = tmp_path / "arbiter.git"
    git(tmp_path, "init", "-q", "--bare", str(arbiter))
    with Workplane(str(arbiter), agent="admin") as wp:
        wp.do("init")
        item = wp.do("new", title="one").result["item"]
        chain = Chain(wp.store)
        chain.reset()
        laid = wp.submit({"op": "claim", "item": item, "as": "chained"}, chain=chain)
        assert laid.commit == chain.top.commit != tip(arbiter)  # laid on the chain, not on the ref
        assert run_gw(arbiter, "claim", item, "--as", "outside").returncode == OK
        outside = tip(arbiter)
        assert chain.land() is False and tip(arbiter) == outside
        assert wp.lease(item).holder == "outside"  # type: ignore[union-attr]


def test_a_chain_just_built_stands_on_the_tip_and_lands_there(tmp_path: Path) -> None:
    """``Chain(store)`` reads the tip itself: its first round needs no ``reset`` (its first snapshot was
    once an empty state nothing read, and a command laid on it before a reset found no item)."""
    arbiter = tmp_path / "arbiter.git"
    git(tmp_path, "init", "-q", "--bare", str(arbiter))
    with Workplane(str(arbiter), agent="admin") as wp:
        wp.do("init")
        item = wp.do("new", title="one").result["item"]
        before = tip(arbiter)
        chain = Chain(wp.store)
        assert (chain.start, chain.top.commit) == (before, before)
        laid = wp.submit({"op": "claim", "item": item, "as": "chained"}, chain=chain)
        assert tip(arbiter) == before and laid.commit == chain.top.commit  # laid, not landed
        assert chain.land() is True and tip(arbiter) == laid.commit
        assert wp.lease(item).holder == "chained"  # type: ignore[union-attr]


def test_a_ref_lock_left_by_a_killed_write_is_swept_by_the_next_one(tmp_path: Path) -> None:
    """kill -9 of the command service while its ``git update-ref`` holds the state ref's lock leaves the
    lock; the next write removes it by the arbiter hook's rule (old enough, no git that could hold it)."""
    arbiter = tmp_path / "arbiter.git"
    git(tmp_path, "init", "-q", "--bare", str(arbiter))
    with Workplane(str(arbiter), agent="admin") as wp:
        wp.do("init")
        item = wp.do("new", title="one").result["item"]
    lock = arbiter / "refs" / "gitwork" / "state.lock"
    lock.write_text(tip(arbiter) + "\n")
    os.utime(lock, (time.time() - 10, time.time() - 10))  # left by a killed git 10 s ago
    server = Server(str(arbiter), now=clock.now, poll=0.1)
    assert server.write(Principal("agent-0", "agent", "t-0"), {"op": "claim", "item": item}).attempts == 1
    server.writer.close()
    assert not lock.exists()


def test_tokens_added_at_once_are_all_kept(tmp_path: Path) -> None:
    """A team's script adds its agents' tokens in parallel: each ``gw serve token add`` reads the file,
    adds one and writes it back, under one lock, so none is written without another's token (401)."""
    arbiter = tmp_path / "arbiter.git"
    git(tmp_path, "init", "-q", "--bare", str(arbiter))
    names = [f"agent-{k}" for k in range(8)]
    done: list[int] = []
    threads = [threading.Thread(target=lambda n=name: done.append(
        run_gw(arbiter, "serve", "token", "add", n).returncode)) for name in names]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert done == [OK] * len(names)
    listed = json.loads(run_gw(arbiter, "serve", "token", "list", "--json").stdout)
    assert sorted(t["name"] for t in listed) == names


def test_the_deployment_page_shows_the_configuration_the_tests_run() -> None:
    """docs/deploy.md's command-service configuration is what tests/webserver.py writes (comments aside)."""
    from conftest import ROOT
    from webserver import api_conf

    page = (ROOT / "docs" / "deploy.md").read_text(encoding="utf-8")
    section = page.split("## The command service (REST at the arbiter)", 1)[1].split("\n## ", 1)[0]
    shown = {line.split("#", 1)[0].strip() for line in section.splitlines()}
    upstream, location = api_conf("127.0.0.1:8765")
    written = {line.split("#", 1)[0].strip() for line in (upstream + location).splitlines()}
    assert written - {""} <= shown, sorted(written - shown)
