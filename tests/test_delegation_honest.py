"""Delegation answers stay honest (issue 23, point 4): two real ``gw serve`` peers, real SSH keys, and a
tiny real HTTP proxy on 127.0.0.1 in front of the peer that answers what proxies answer (a 504, an
unsigned 403, garbage, a reset connection).

- an answer that is not a signed receipt is "outcome unknown" (exit 12): the request is kept (listed by
  ``gw delegations`` as sent and unanswered) and ``--id`` re-sends the same signed bytes;
- a refused nonce stays spent, across a restart of the peer, even once the peer's ``allow`` grew;
- ``gw receipts verify`` checks every field of a stored record against the signed documents, and the
  peer acts (observe, cancel) only on signed fields;
- peers come from the repository's local config file only (not ``GIT_CONFIG*``, nor ``-c``);
- ``gw delegations -C DIR`` honours ``-C`` in each of its spellings;
- records signed with a rotated-out key still verify (key history), and only for their time.
"""

from __future__ import annotations

import http.server
import json
import os
import socket
import struct
import subprocess
import sys
import threading
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any, Iterator

import pytest

from conftest import end_executions, git, gw_here, make_repo, scrubbed, tip
from gitwork import codec
from gitwork.delegation import client, peers, signing
from gitwork.launch.run import runs
from gitwork.records import protocol
from gitwork.records.delegations import record_path
from gitwork.store import Repository
from gitwork.workplane import Workplane
from test_delegation import ALL_OPS, World, gw_in, gw_json, post, serve, signed, stop
from test_signing import keygen

ITEMS = ("p504", "p403", "pdrop", "pgarbage", "nonce", "fields", "act-a", "act-b")


class Proxy(http.server.BaseHTTPRequestHandler):
    """A reverse proxy in front of the peer: ``mode`` says what it does with each request."""

    target = ""
    mode = "pass"  # pass | 504 (forwards, answers a gateway timeout) | 403 (answers itself) | drop | garbage
    forwarded: list[str] = []

    def do_POST(self) -> None:  # noqa: N802 (http.server's name)
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        status, answer, kind = 0, b"", "application/json"
        if self.mode != "403":
            self.forwarded.append(self.path)
            request = urllib.request.Request(self.target + self.path, data=body, method="POST",
                                             headers={"Content-Type": "application/json"})
            try:
                with urllib.request.urlopen(request, timeout=60) as response:
                    status, answer = response.status, response.read()
            except urllib.error.HTTPError as error:
                status, answer = error.code, error.read()
        if self.mode == "drop":  # the peer acted; the client sees its connection reset
            self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            self.connection.close()
            self.close_connection = True
            return
        if self.mode == "504":
            status, answer = 504, json.dumps({"message": "upstream timed out", "code": 77}).encode()
        elif self.mode == "403":
            status, answer = 403, json.dumps({"ok": False, "error": "forbidden", "code": 77,
                                              "message": "Forbidden", "details": {"reason": "not-allowed"}}).encode()
        elif self.mode == "garbage":
            status, answer, kind = 200, b"<html>\x00 not a receipt", "text/html"
        self.send_response(status)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(answer)))
        self.end_headers()
        self.wfile.write(answer)

    def finish(self) -> None:
        try:
            super().finish()
        except (OSError, ValueError):
            pass  # the dropped connection

    def log_message(self, *args: object) -> None:
        pass


def build_world(root: Path, items: tuple[str, ...]) -> tuple[World, subprocess.Popen[bytes]]:
    w = World(root)
    with Workplane(str(w.sender), agent="alice") as wp:
        wp.do("init")
        for name in items:
            w.items[name] = wp.do("new", title=f"delegate me: {name}").result["item"]
    git(w.peer, "fetch", "-q", str(w.sender), "refs/gitwork/state:refs/gitwork/state")
    for key, value in (("gitwork.signingKey", w.keys["gpu"][0]), ("gitwork.agent", "gpu-box"),
                       ("gitwork.peer.laptop.key", w.keys["laptop"][1]), ("gitwork.peer.laptop.allow", ALL_OPS),
                       ("gitwork.peer.intern.key", w.keys["stranger"][1]), ("gitwork.peer.intern.allow", "plan"),
                       ("gitwork.delegation.command", "sleep 120"), ("gitwork.delegation.backend", "subprocess")):
        git(w.peer, "config", key, value)
    proc, w.url = serve(w.peer, w.root)
    for key, value in (("gitwork.signingKey", w.keys["laptop"][0]), ("gitwork.agent", "alice"),
                       ("gitwork.peer.gpu.url", w.url), ("gitwork.peer.gpu.key", w.keys["gpu"][1]),
                       ("gitwork.peer.gpu.allow", ALL_OPS),
                       ("gitwork.peer.other.url", w.url), ("gitwork.peer.other.key", w.keys["stranger"][1])):
        git(w.sender, "config", key, value)
    return w, proc


def kill_executions(w: World) -> None:
    end_executions(w.peer)


class Servers:
    def __init__(self, proc: subprocess.Popen[bytes]) -> None:
        self.proc = proc


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[World]:
    with scrubbed(tmp_path_factory):
        w, proc = build_world(tmp_path_factory.mktemp("honest"), ITEMS)
        proxy = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Proxy)
        threading.Thread(target=proxy.serve_forever, daemon=True).start()
        Proxy.target = w.url
        for key, value in (("url", f"http://127.0.0.1:{proxy.server_port}"), ("key", w.keys["gpu"][1]),
                           ("allow", ALL_OPS)):
            git(w.sender, "config", f"gitwork.peer.proxied.{key}", value)
        w.servers = Servers(proc)  # type: ignore[attr-defined]
        try:
            yield w
        finally:
            proxy.shutdown()
            proxy.server_close()
            stop(w.servers.proc)  # type: ignore[attr-defined]
            kill_executions(w)


def executions(w: World, item: str) -> list[str]:
    with w.plane("peer") as wp:
        return [r["execution"] for r in runs(wp, item)]


# --- 1. an answer that is not a signed receipt: outcome unknown, kept, retried with the same bytes -------

@pytest.mark.parametrize(("name", "mode", "op", "forwarded"), [
    ("p504", "504", "start", True),      # the peer launched; the proxy timed out in front of it
    ("p403", "403", "plan", False),      # the proxy refused on its own, unsigned
    ("pdrop", "drop", "test", True),     # the peer answered; the connection was reset on the way back
    ("pgarbage", "garbage", "plan", True),
])
def test_an_answer_that_is_not_a_signed_receipt_is_outcome_unknown_and_the_same_id_retries_it(
        world: World, name: str, mode: str, op: str, forwarded: bool) -> None:
    item = world.items[name]
    request_id = protocol.new_request_id()
    flags = {"plan": ["--plan"], "test": ["--test"], "start": []}[op]
    Proxy.mode, Proxy.forwarded = mode, []
    sender_before, peer_before = tip(world.sender), tip(world.peer)
    code, out, err = gw_in(world.sender, "delegate", item, "--to", "proxied", *flags, "--id", request_id)
    assert code == 12, (code, out, err)
    assert err.count("\n") == 1 and "unknown" in err and request_id in err, err
    assert Proxy.forwarded == ([f"/delegation/{op}"] if forwarded else [])
    assert tip(world.sender) == sender_before  # nothing recorded without a verified receipt
    assert forwarded or tip(world.peer) == peer_before  # the peer was never asked: it wrote nothing either
    kept = world.sender / ".git" / "gitwork" / "delegations" / f"{request_id}.json"
    assert kept.is_file()
    sent_bytes = json.loads(kept.read_text())["request"]
    rc, rows = gw_json(world.sender, "delegations", "--item", item)
    assert rc == 0 and [(r["delegation"], r["side"], r["outcome"], r["op"]) for r in rows] == [
        (request_id, "sent", "unanswered", op)], rows

    Proxy.mode = "pass"
    rc, answer = gw_json(world.sender, "delegate", item, "--to", "proxied", *flags, "--id", request_id)
    assert rc == 0, answer
    assert answer["delegation"] == request_id and answer["duplicate"] is forwarded, answer
    assert not kept.exists()
    with world.plane() as wp:
        from gitwork.records.delegations import find

        recorded = find(wp.context().snapshot, "sent", request_id)
    assert recorded is not None and recorded["request"] == sent_bytes  # the very same signed bytes
    if op == "start":
        assert len(executions(world, item)) == 1  # the retry started nothing new
    rc, rows = gw_json(world.sender, "delegations", "--item", item)
    assert [(r["delegation"], r["outcome"]) for r in rows] == [(request_id, "done")]


def test_an_unsigned_refusal_from_the_peer_itself_is_outcome_unknown_too(world: World, tmp_path: Path) -> None:
    """The peer's own unsigned answer (it has no signing key) cannot be told from a proxy's: 12, kept."""
    item = world.items["p403"]
    before = (tip(world.sender), tip(world.peer))
    keyless = make_repo(tmp_path / "keyless")
    with Workplane(str(keyless)) as wp:
        wp.do("init")
    git(keyless, "config", "gitwork.peer.laptop.key", world.keys["laptop"][1])
    proc, url = serve(keyless, tmp_path)
    try:
        git(world.sender, "config", "gitwork.peer.keyless.url", url)
        git(world.sender, "config", "gitwork.peer.keyless.key", world.keys["gpu"][1])
        code, _out, err = gw_in(world.sender, "delegate", item, "--to", "keyless", "--plan")
    finally:
        stop(proc)
        git(world.sender, "config", "--remove-section", "gitwork.peer.keyless")
    assert code == 12 and err.count("\n") == 1 and "without a signed receipt" in err, err
    assert (tip(world.sender), tip(world.peer)) == before


# --- 2. a refused nonce stays spent, across restarts, whatever the allow list says later ---------------

def test_a_refused_nonce_stays_spent_across_a_restart_after_allow_grew(world: World) -> None:
    item = world.items["nonce"]
    body = signed(world, "test", item, key="stranger")  # intern may ask for plan only
    before = world.state()
    got, answer = post(world, "test", body)
    assert got == 403 and answer["details"]["reason"] == "not-allowed", answer
    stop(world.servers.proc)  # type: ignore[attr-defined]
    git(world.peer, "config", "gitwork.peer.intern.allow", "plan,test")
    try:
        world.servers.proc, world.url = serve(world.peer, world.root)  # type: ignore[attr-defined]
        Proxy.target = world.url
        git(world.sender, "config", "gitwork.peer.gpu.url", world.url)
        got, answer = post(world, "test", body)
        assert got == 403 and answer["details"]["reason"] == "replay", answer
        assert world.state() == before
        fresh = signed(world, "test", item, key="stranger")  # a new request is fine now
        assert post(world, "test", fresh)[0] == 200
    finally:
        git(world.peer, "config", "gitwork.peer.intern.allow", "plan")


# --- 3. every field of a record is checked against what was signed; the peer acts only on signed fields --

def rewrite(repo: Path, path: str, change: Any) -> str:
    """Commit, with plain git, the state ref with the YAML file ``path`` changed by ``change(doc)`` (or,
    for a file that is not YAML, its text by ``change(text)``); the previous tip."""
    old = tip(repo)
    assert old is not None
    text = git(repo, "cat-file", "blob", f"{old}:{path}") + "\n"
    if path.endswith(".yaml"):
        doc = codec.load_yaml(text)
        change(doc)
        data = codec.dump_yaml(doc)
    else:
        data = change(text).encode()
    blob = git(repo, "hash-object", "-w", "--stdin", input=data)
    index = repo / ".git" / "edit-index"
    env = {**os.environ, "GIT_INDEX_FILE": str(index)}
    for args in (["read-tree", old], ["update-index", "--cacheinfo", f"100644,{blob},{path}"]):
        subprocess.run(["git", *args], cwd=repo, env=env, check=True)
    tree = subprocess.run(["git", "write-tree"], cwd=repo, env=env, check=True, capture_output=True,
                          text=True).stdout.strip()
    index.unlink()
    commit = git(repo, "-c", "user.name=mallory", "-c", "user.email=m@example.com", "commit-tree", tree, "-p", old, "-m", "edited with plain git")
    git(repo, "update-ref", "refs/gitwork/state", commit, old)
    return old


def test_receipts_verify_names_every_unsigned_field_edited_with_plain_git(world: World) -> None:
    item = world.items["fields"]
    with world.plane() as wp:
        started = client.delegate(wp, item, "gpu", "start")
    request_id = started["delegation"]
    edits: dict[str, Any] = {"outcome": "refused", "item": world.items["nonce"], "execution": "x-0000000000000000",
                             "at": "2020-01-01T00:00:00Z", "op": "plan", "epoch": 9, "fence": 999,
                             "request_id": "d-00000000000000ff", "side": "received", "peer": "other",
                             "unsigned_note": "trust me"}
    for repo, side in ((world.sender, "sent"), (world.peer, "received")):
        assert gw_json(repo, "receipts", "verify", item)[0] == 0
        path = record_path(side, request_id)
        for field, value in edits.items():
            if side == "received" and field in ("peer", "side"):
                value = {"peer": "intern", "side": "sent"}[field]
            old = rewrite(repo, path, lambda doc, field=field, value=value: doc.__setitem__(field, value))
            rc, rows = gw_json(repo, "receipts", "verify", item)
            git(repo, "update-ref", "refs/gitwork/state", old)
            assert rc == 8, (side, field, rows)
            problems = [p for row in rows if not row["ok"] for p in row["problems"]]
            assert any(p.startswith(f"{field}:") for p in problems), (side, field, problems)
        # the item's own copy of the outcome, in its events.log, edited the same way
        events = f"items/{item[2:4]}/{item}/events.log"
        assert f'"delegation":"{request_id}","side":"{side}"' in git(repo, "cat-file", "blob", f"refs/gitwork/state:{events}")
        old = rewrite(repo, events, lambda text, side=side: text.replace(
            f'"delegation":"{request_id}","side":"{side}"', f'"delegation":"{request_id}","side":"{side}","x":1').replace(
            '"outcome":"done"', '"outcome":"refused"'))
        rc, rows = gw_json(repo, "receipts", "verify", item)
        git(repo, "update-ref", "refs/gitwork/state", old)
        assert rc == 8 and any(p.startswith("event outcome:") for row in rows for p in row["problems"]), rows
        assert gw_json(repo, "receipts", "verify", item)[0] == 0


def test_the_peer_observes_and_cancels_only_what_the_signed_receipt_names(world: World) -> None:
    with world.plane() as wp:
        first = client.delegate(wp, world.items["act-a"], "gpu", "start")
        second = client.delegate(wp, world.items["act-b"], "gpu", "start")
    a, b = first["receipt"]["execution"], second["receipt"]["execution"]
    path = record_path("received", first["delegation"])
    old = rewrite(world.peer, path, lambda doc: doc.__setitem__("execution", b))  # point A's record at B
    try:
        with world.plane() as wp:
            observed = client.follow_up(wp, "observe", first["delegation"])["receipt"]["result"]
            assert observed["execution"] == a, observed
            cancelled = client.follow_up(wp, "cancel", first["delegation"])["receipt"]["result"]
            assert cancelled["execution"] == a, cancelled
        with world.plane("peer") as wp:
            states = {r["execution"]: r["state"] for r in runs(wp)}
        assert states[a] == "stopped" and states[b] == "running", states
    finally:
        rewrite(world.peer, path, lambda doc: doc.__setitem__("execution", a))
    assert old  # the edit was made

    # A's record given B's (validly signed) receipt, or a request signature that is not the asker's:
    # the peer finds no start of A it signed for, and refuses (3), changing and stopping nothing.
    other = codec.load_yaml(git(world.peer, "cat-file", "blob",
                                f"refs/gitwork/state:{record_path('received', second['delegation'])}") + "\n")
    for name, change in (("B's receipt", lambda doc: doc.update(receipt=other["receipt"],
                                                                receipt_signature=other["receipt_signature"])),
                         ("B's request signature", lambda doc: doc.update(
                             request_signature=other["request_signature"]))):
        old = rewrite(world.peer, path, change)
        before = world.state()
        code, _out, err = gw_in(world.sender, "delegation", "cancel", first["delegation"])
        assert code == 3 and err.count("\n") == 1 and "no start" in err, (name, err)
        assert world.state() == before, name
        git(world.peer, "update-ref", "refs/gitwork/state", old)
    with world.plane("peer") as wp:
        assert {r["execution"]: r["state"] for r in runs(wp)}[b] == "running"


def test_a_damaged_key_history_is_reported_by_verify_never_overwritten_and_stops_no_work(world: World) -> None:
    history = world.sender / ".git" / "gitwork" / "delegation-keys.json"
    kept = history.read_text()
    history.write_text('{"peer:gpu": [')
    try:
        with world.plane() as wp:
            assert client.delegate(wp, world.items["nonce"], "gpu", "plan")["receipt"]["outcome"] == "done"
        code, _out, err = gw_in(world.sender, "receipts", "verify")
        assert code == 8 and err.count("\n") == 1 and "key history" in err and "damaged" in err, err
        assert history.read_text() == '{"peer:gpu": ['  # never rewritten over
    finally:
        history.write_text(kept)
    assert gw_json(world.sender, "receipts", "verify")[0] == 0


# --- 4. peers from the repository's local config file only --------------------------------------------

EVIL = ("gitwork.peer.evil.url", "http://127.0.0.1:9")


def injections(tmp_path: Path) -> dict[str, dict[str, str]]:
    evil_file = tmp_path / "evil.config"
    evil_file.write_text("[gitwork \"peer.evil\"]\n\turl = http://127.0.0.1:9\n"
                         "[gitwork \"delegation\"]\n\tcommand = rm -rf /\n")
    return {
        "GIT_CONFIG_COUNT": {"GIT_CONFIG_COUNT": "2", "GIT_CONFIG_KEY_0": EVIL[0], "GIT_CONFIG_VALUE_0": EVIL[1],
                             "GIT_CONFIG_KEY_1": "gitwork.delegation.command", "GIT_CONFIG_VALUE_1": "rm -rf /"},
        "GIT_CONFIG": {"GIT_CONFIG": str(evil_file)},
        "-c (GIT_CONFIG_PARAMETERS)": {"GIT_CONFIG_PARAMETERS": f"'{EVIL[0]}'='{EVIL[1]}' "
                                                               "'gitwork.delegation.command'='rm -rf /'"},
    }


@pytest.mark.parametrize("how", ["GIT_CONFIG_COUNT", "GIT_CONFIG", "-c (GIT_CONFIG_PARAMETERS)"])
def test_peers_come_only_from_the_local_config_file_not_from_the_environment_or_the_command_line(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, how: str) -> None:
    plain, local = make_repo(tmp_path / "plain"), make_repo(tmp_path / "local")
    git(local, "config", "gitwork.peer.gpu.url", "http://127.0.0.1:8")
    git(local, "config", "gitwork.delegation.command", "sleep 1")
    env = injections(tmp_path)[how]
    with Workplane(str(plain)) as wp:
        wp.do("init")
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    assert not peers.configured_at(str(plain)) and peers.load(Repository.discover(plain)).peers == {}
    config = peers.load(Repository.discover(local))
    assert list(config.peers) == ["gpu"] and config.command == ["sleep", "1"]
    done = subprocess.run([sys.executable, "-m", "gitwork", "delegations", "-C", str(plain)], capture_output=True,
                          text=True, env={**os.environ, **env}, check=False)
    assert done.returncode == 2 and "No such command" in done.stderr, done.stderr


# --- 5. gw delegations -C DIR, from another directory ---------------------------------------------------

def test_delegations_and_receipts_verify_honour_dash_c_from_another_cwd(world: World, tmp_path: Path) -> None:
    with world.plane() as wp:  # something to list
        client.delegate(wp, world.items["fields"], "gpu", "plan")
    expected = run(world.sender, ["delegations", "--json"])
    assert expected and {r["side"] for r in expected} == {"sent"}
    for cwd in (world.peer, tmp_path):  # a repository with other delegations, and no repository at all
        for argv in (["delegations", "-C", str(world.sender), "--json"],
                     ["delegations", f"-C{world.sender}", "--json"],
                     ["-C", str(world.sender), "delegations", "--json"],
                     [f"-C{world.sender}", "--json", "delegations"]):
            assert run(cwd, argv, in_process=True) == expected, (cwd, argv)
        assert len(run(cwd, ["receipts", "verify", f"-C{world.sender}", "--json"], in_process=True)) == len(
            [r for r in expected if r["outcome"] != "unanswered"])


def run(cwd: Path, argv: list[str], in_process: bool = False) -> Any:
    """``gw argv`` in ``cwd``: a real process, or the CLI's entry point in this process (``gw_here``: the same
    parsing of ``-C`` wherever it stands, from the same working directory, without an interpreter start)."""
    if in_process:
        done = gw_here(cwd, *argv)
    else:
        done = subprocess.run([sys.executable, "-m", "gitwork", *argv], cwd=cwd, capture_output=True, text=True,
                              check=False)
    assert done.returncode == 0, (argv, done.stderr)
    return json.loads(done.stdout)


# --- 6. a rotated-out key: old records verify with the key valid when they were signed -------------------

def test_records_signed_with_a_rotated_out_key_still_verify_and_only_for_their_time(
        tmp_path_factory: pytest.TempPathFactory) -> None:
    with scrubbed(tmp_path_factory):
        root = tmp_path_factory.mktemp("rotation")
        w, proc = build_world(root, ("rotate",))
        item = w.items["rotate"]
        try:
            with w.plane() as wp:
                client.delegate(wp, item, "gpu", "plan")  # signed with the old keys, both ways
            new_gpu, new_gpu_pub = keygen(root / "gpu-key-2")
            new_laptop, new_laptop_pub = keygen(root / "laptop-key-2")
            git(w.peer, "config", "gitwork.signingKey", new_gpu)  # both rotate their own key ...
            git(w.peer, "config", "gitwork.peer.laptop.key", new_laptop_pub)  # ... and learn the other's
            git(w.sender, "config", "gitwork.signingKey", new_laptop)
            git(w.sender, "config", "gitwork.peer.gpu.key", new_gpu_pub)
            with w.plane() as wp:
                client.delegate(wp, item, "gpu", "plan")  # signed with the new keys
            for repo in (w.sender, w.peer):
                rc, rows = gw_json(repo, "receipts", "verify")
                assert rc == 0 and len(rows) == 2 and all(r["ok"] for r in rows), rows
            # The old key signs nothing dated after it was rotated out: a forged receipt of a real request.
            request = signed(w, "plan", item)
            late = "2099-01-01T00:00:00Z"
            forged = protocol.receipt(protocol.parse_request(request["request"]), request["request"], "done", late,
                                      result={})
            forged_signature = signing.sign(forged.encode(), w.keys["gpu"][0], peers.NAMESPACE)
            with w.plane() as wp:
                wp.record("delegation-sent", peer="gpu", request=request["request"],
                          request_signature=request["signature"], receipt=forged, receipt_signature=forged_signature)
            rc, rows = gw_json(w.sender, "receipts", "verify")
            assert rc == 8 and [r["ok"] for r in rows].count(False) == 1, rows
            bad = next(r for r in rows if not r["ok"])
            assert any(p.startswith("receipt:") for p in bad["problems"]), bad
        finally:
            stop(proc)
