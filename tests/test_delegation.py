"""Delegation to peers end to end: two repositories, two peer servers on 127.0.0.1, real SSH keys.

``serve`` is the one place a peer's server is started: a real ``gw serve``, which carries the
delegation endpoints because a peer is configured there. The world (keys, the two
repositories, the peer's server) is built once per module; each test uses its own items.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import select
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Iterator

import pytest

from conftest import end_executions, git, make_repo, run_gw, scrubbed, tip
from gitwork.cli.main import main
from gitwork.delegation import client, peers, signing
from gitwork.errors import Forbidden, Invalid, NotFound, RemoteError
from gitwork.launch.run import runs
from gitwork.records import protocol
from gitwork.workplane import Workplane
from test_signing import keygen

ITEMS = ("e2e", "retry", "refused", "limited", "forged", "missing-on-peer", "crash-mid-start")
ALL_OPS = "plan,test,start,observe,cancel"


def serve(repo: Path, folder: Path, env: dict[str, str] | None = None) -> tuple[subprocess.Popen[bytes], str]:
    """Start ``gw serve`` for ``repo`` on 127.0.0.1, on a free port; ``(process, base URL)`` (its ``--json``
    announcement names the URL once it listens)."""
    proc = subprocess.Popen([sys.executable, "-m", "gitwork", "serve", "--bind", "127.0.0.1:0", "--repo", str(repo),
                             "--json"], cwd=folder, env={**os.environ, **(env or {})},
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert proc.stdout is not None
    deadline, said = time.monotonic() + 30, b""
    while True:
        assert proc.poll() is None, f"gw serve exited: {proc.stderr.read().decode() if proc.stderr else ''}"
        assert time.monotonic() < deadline, "gw serve did not start"
        if select.select([proc.stdout], [], [], 0.05)[0]:
            said += os.read(proc.stdout.fileno(), 65536)  # not readline: select cannot see Python's buffer
            with contextlib.suppress(ValueError):
                return proc, str(json.loads(said)["url"])


def stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


class World:
    def __init__(self, root: Path) -> None:
        self.root = root
        self.sender = make_repo(root / "laptop")
        self.peer = make_repo(root / "gpu")
        self.keys = {name: keygen(root / f"{name}-key") for name in ("laptop", "gpu", "stranger")}
        self.items: dict[str, str] = {}
        self.url = self.back_url = ""

    def plane(self, side: str = "sender") -> Workplane:
        return Workplane(str(getattr(self, side)))

    def state(self) -> tuple[str | None, str | None, list[str]]:
        """Both state refs and the peer's executions: what a refusal must leave as it was."""
        with self.plane("peer") as wp:
            executions = sorted(r["execution"] for r in runs(wp))
        return tip(self.sender), tip(self.peer), executions


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[World]:
    with scrubbed(tmp_path_factory):
        w = World(tmp_path_factory.mktemp("delegation"))
        with Workplane(str(w.sender), agent="alice") as wp:
            wp.do("init")
            for name in ITEMS:
                w.items[name] = wp.do("new", title=f"delegate me: {name}").result["item"]
        git(w.peer, "fetch", "-q", str(w.sender), "refs/gitwork/state:refs/gitwork/state")
        with Workplane(str(w.sender), agent="alice") as wp:  # created after the peer fetched: unknown there
            w.items["sender-only"] = wp.do("new", title="only on the laptop").result["item"]
        laptop_key, laptop_pub = w.keys["laptop"]
        gpu_key, gpu_pub = w.keys["gpu"]
        _stranger_key, stranger_pub = w.keys["stranger"]
        for key, value in (("gitwork.signingKey", gpu_key), ("gitwork.agent", "gpu-box"),
                           ("gitwork.peer.laptop.key", laptop_pub), ("gitwork.peer.laptop.allow", ALL_OPS),
                           ("gitwork.peer.intern.key", stranger_pub), ("gitwork.peer.intern.allow", "plan"),
                           ("gitwork.delegation.command", "sleep 120"), ("gitwork.delegation.backend", "subprocess")):
            git(w.peer, "config", key, value)
        proc, w.url = serve(w.peer, w.root)
        for key, value in (("gitwork.signingKey", laptop_key), ("gitwork.agent", "alice"),
                           ("gitwork.peer.gpu.url", w.url), ("gitwork.peer.gpu.key", gpu_pub),
                           ("gitwork.peer.gpu.allow", ALL_OPS),
                           # the same server, but its key here is not the one it signs with
                           ("gitwork.peer.impostor.url", w.url), ("gitwork.peer.impostor.key", stranger_pub),
                           ("gitwork.peer.impostor.allow", "plan"),
                           ("gitwork.peer.readonly.url", w.url), ("gitwork.peer.readonly.key", gpu_pub),
                           ("gitwork.peer.readonly.allow", "plan")):
            git(w.sender, "config", key, value)
        back, w.back_url = serve(w.sender, w.root)  # the laptop serves too: the same configuration, both ways
        git(w.peer, "config", "gitwork.peer.laptop.url", w.back_url)
        try:
            yield w
        finally:
            stop(proc)
            stop(back)
            end_executions(w.peer)


def gw_in(repo: Path, *args: str) -> tuple[int, str, str]:
    """``gw ARGS -C REPO`` in this process (cheap): exit code, stdout, stderr."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main([*args, "-C", str(repo)])
    return code, out.getvalue(), err.getvalue()


def gw_json(repo: Path, *args: str) -> tuple[int, Any]:
    code, out, err = gw_in(repo, *args, "--json")
    return code, json.loads(out) if out.strip() else err


def test_plan_test_start_observe_cancel_end_to_end_and_receipts_verify_on_both_refs(world: World) -> None:
    item = world.items["e2e"]
    with world.plane() as wp:
        plan = client.delegate(wp, item, "gpu", "plan")
        assert plan["receipt"]["outcome"] == "done"
        assert plan["receipt"]["result"]["would_run"] == ["sleep", "120"] and plan["receipt"]["result"]["startable"]
        tested = client.delegate(wp, item, "gpu", "test")["receipt"]["result"]
        assert tested["ok"] and tested["same_build"] and tested["checks"]["backend"] == "ok"
    assert world.state()[2] == []  # plan and test start nothing

    done = run_gw(world.sender, "delegate", item, "--to", "gpu", "--json")  # the CLI, in its own process
    assert done.returncode == 0, done.stderr
    started = json.loads(done.stdout)
    receipt = started["receipt"]
    assert receipt["result"]["state"] == "running" and receipt["epoch"] == 1 and receipt["fence"] >= 1
    with world.plane("peer") as wp:
        lease = wp.lease(item)
        assert lease is not None and lease.holder == "gpu-box" and lease.fence == receipt["fence"]
        assert [r["state"] for r in runs(wp, item)] == ["running"]

    code, out, err = gw_in(world.sender, "delegation", "observe", started["delegation"])  # text: id, then capture
    assert code == 0 and out.split("\n")[0] == out.split()[0] and "running" in err, (out, err)
    with world.plane() as wp:
        observed = client.follow_up(wp, "observe", started["delegation"])["receipt"]["result"]
        assert observed["state"] == "running" and observed["execution"] == receipt["execution"]
        cancelled = client.follow_up(wp, "cancel", started["delegation"], "changed my mind")["receipt"]["result"]
        assert cancelled["state"] == "stopped"
    with world.plane("peer") as wp:
        assert [r["state"] for r in runs(wp, item)] == ["stopped"]

    with world.plane("peer") as wp:  # and the other way: the gpu asks the laptop, which knows its key
        back = client.delegate(wp, item, "laptop", "plan")
        assert back["receipt"]["result"]["as"] == "alice"
    ops = ("plan", "test", "start", "observe", "observe", "cancel")
    for repo, side, back_side in ((world.sender, "sent", "received"), (world.peer, "received", "sent")):
        rc, rows = gw_json(repo, "delegations", "--item", item)
        assert rc == 0 and sorted((r["op"], r["side"]) for r in rows) == sorted(
            [(op, side) for op in ops] + [("plan", back_side)])  # ordered by time: one second ties
        rc, checked = gw_json(repo, "receipts", "verify", item)
        assert rc == 0 and len(checked) == 7 and all(row["ok"] for row in checked), checked
    with world.plane() as wp:
        assert [e["delegated"] for e in wp.history(item) if e["type"] == "delegation"] == [*ops, "plan"]


def signed(world: World, op: str, item: str | None, key: str = "laptop", namespace: str = peers.NAMESPACE,
           at: str | None = None, args: dict[str, Any] | None = None, to: str = "gpu") -> dict[str, str]:
    """A request signed with ``key``'s key, meant for the peer whose key is ``to``'s."""
    from gitwork import __version__, clock

    text = protocol.request(protocol.new_request_id(), op, item, args or {}, at or clock.format_instant(clock.now()),
                            __version__, world.keys[to][1])
    return {"request": text, "signature": signing.sign(text.encode(), world.keys[key][0], namespace)}


def post(world: World, op: str, body: dict[str, str]) -> tuple[int, dict[str, Any]]:
    return client._post(f"{world.url}/delegation/{op}", body)


def test_refused_requests_write_nothing_and_start_nothing(world: World) -> None:
    item = world.items["refused"]
    before = world.state()
    gpu = peers.Peer("gpu", world.url, world.keys["gpu"][1], frozenset(protocol.OPS))
    honest = signed(world, "start", item)
    nonce = json.loads(honest["request"])["nonce"]
    one_byte = nonce.replace(nonce[0], "a" if nonce[0] != "a" else "b", 1)
    tampered = dict(honest, request=honest["request"].replace(nonce, one_byte))
    cases = {
        "unknown key": ("start", signed(world, "start", item, key="gpu"), 401, "unknown-key"),
        "tampered request (one byte)": ("start", tampered, 401, "bad-signature"),
        "wrong namespace": ("start", signed(world, "start", item, namespace="git"), 401, "wrong-namespace"),
        "stale request": ("start", signed(world, "start", item, at="2020-01-01T00:00:00Z"), 403, "replay"),
        "op not allowed for the signer": ("start", signed(world, "start", item, key="stranger"), 403, "not-allowed"),
        # signed by a sender the peer trusts, but meant for another peer (the one whose key is "stranger")
        "request meant for another peer": ("start", signed(world, "start", item, to="stranger"), 403, "wrong-peer"),
        "request sent to another op's endpoint": ("cancel", honest, 400, None),
    }
    for name, (op, body, status, reason) in cases.items():
        got, answer = post(world, op, body)
        assert got == status, (name, answer)
        assert answer["ok"] is False and (reason is None or answer["details"]["reason"] == reason), (name, answer)
        # a refusal is a receipt too, signed by the peer, answering exactly that request
        refusal = client.verify_receipt(body["request"], answer["receipt"], answer["signature"], gpu)
        assert refusal["outcome"] == "refused" and refusal["error"]["code"] == answer["code"]
        assert world.state() == before, f"{name}: something was written or started"

    # Refused once after verification (the item is unknown there): the very same bytes again are a replay.
    missing = signed(world, "start", world.items["sender-only"])
    assert post(world, "start", missing)[0] == 404
    got, answer = post(world, "start", missing)
    assert got == 403 and answer["details"]["reason"] == "replay", answer
    assert world.state() == before

    with world.plane() as wp:  # refused on the sender's side, before anything is sent
        with pytest.raises(NotFound):
            client.delegate(wp, item, "nobody", "start")  # a peer not in the configuration
        with pytest.raises(Forbidden):
            client.delegate(wp, item, "readonly", "start")  # an op this peer is not to be asked for
    assert world.state() == before


def test_a_receipt_that_does_not_verify_is_refused_and_not_recorded(world: World) -> None:
    item = world.items["forged"]
    sender_before = tip(world.sender)
    with world.plane() as wp:
        with pytest.raises(Forbidden) as caught:  # the peer signs with its key; "impostor" is configured with another
            client.delegate(wp, item, "impostor", "plan")
        assert "does not verify" in caught.value.message
    assert tip(world.sender) == sender_before
    # A receipt that answers another request (its request digest differs) is refused as well.
    body = signed(world, "plan", item)
    got, answer = post(world, "plan", body)
    assert got == 200
    other = signed(world, "plan", item)["request"]
    config_peer = peers.Peer("gpu", world.url, world.keys["gpu"][1], frozenset(("plan",)))
    assert client.verify_receipt(body["request"], answer["receipt"], answer["signature"], config_peer)["outcome"] == "done"
    with pytest.raises(Forbidden, match="answers another request"):
        client.verify_receipt(other, answer["receipt"], answer["signature"], config_peer)
    with world.plane() as wp:  # nor can such a pair be recorded
        with pytest.raises(Invalid, match="does not answer"):
            wp.record("delegation-sent", peer="gpu", request=other, request_signature=body["signature"],
                      receipt=answer["receipt"], receipt_signature=answer["signature"])
    assert tip(world.sender) == sender_before


def test_receipts_verify_fails_on_a_record_whose_receipt_signature_is_not_the_peers(world: World,
                                                                                   tmp_path: Path) -> None:
    # A copy of the sender, so the forged record stays out of the other tests' world.
    copy = make_repo(tmp_path / "copy")
    git(copy, "fetch", "-q", str(world.sender), "refs/gitwork/state:refs/gitwork/state")
    for key in ("gitwork.signingKey", "gitwork.peer.gpu.url", "gitwork.peer.gpu.key"):
        git(copy, "config", key, git(world.sender, "config", key))
    item = world.items["forged"]
    body = signed(world, "plan", item)
    receipt = protocol.receipt(protocol.parse_request(body["request"]), body["request"], "done",
                               "2026-01-01T00:00:00Z", result={"forged": True})
    forged = signing.sign(receipt.encode(), world.keys["stranger"][0], peers.NAMESPACE)
    with Workplane(str(copy)) as wp:
        wp.record("delegation-sent", peer="gpu", request=body["request"], request_signature=body["signature"],
                  receipt=receipt, receipt_signature=forged)
    rc, rows = gw_json(copy, "receipts", "verify")
    assert rc == 8, rows
    bad = [row for row in rows if not row["ok"]]
    assert [row["delegation"] for row in bad] == [json.loads(body["request"])["id"]]
    assert "receipt" in bad[0]["problems"][0]


def crashed_start(world: World, item: str, peer_name: str, crash_at: str) -> tuple[str, list[str], dict[str, Any]]:
    """A start of ``item`` sent to a peer server killed (-9) at ``crash_at``, then sent again under the
    same request id once the peer is back: ``(request id, the peer's executions, the retry's answer)``.
    Checks on the way that nothing was recorded without a receipt and that the retry started nothing new."""
    crashy, crashy_url = serve(world.peer, world.root, {"GW_CRASH_AT": crash_at})
    try:
        for key, value in (("url", crashy_url), ("key", world.keys["gpu"][1]), ("allow", ALL_OPS)):
            git(world.sender, "config", f"gitwork.peer.{peer_name}.{key}", value)
        request_id = protocol.new_request_id()
        sender_before = tip(world.sender)
        with world.plane() as wp:
            with pytest.raises(RemoteError):  # the peer died before it answered
                client.delegate(wp, item, peer_name, "start", request_id=request_id)
        assert crashy.wait(timeout=30) == -signal.SIGKILL
        assert tip(world.sender) == sender_before  # nothing recorded without a receipt
    finally:
        stop(crashy)
    with world.plane("peer") as wp:
        first = [r["execution"] for r in runs(wp, item)]
    assert len(first) == 1
    git(world.sender, "config", f"gitwork.peer.{peer_name}.url", world.url)  # the peer is back
    with world.plane() as wp:
        again = client.delegate(wp, item, peer_name, "start", request_id=request_id)
    with world.plane("peer") as wp:
        assert [r["execution"] for r in runs(wp, item)] == first  # nothing new started
    return request_id, first, again


def test_a_lost_answer_is_retried_under_the_same_id_and_starts_nothing_new(world: World) -> None:
    # the peer launched, recorded, and died before it answered
    request_id, _first, again = crashed_start(world, world.items["retry"], "flaky", "delegation-before-answer")
    assert again["duplicate"] and again["delegation"] == request_id
    with world.plane("peer") as wp:
        from gitwork.records.delegations import find

        recorded = find(wp.context().snapshot, "received", request_id)
    assert recorded is not None and json.loads(recorded["receipt"]) == again["receipt"]
    with world.plane() as wp:  # and a third time: answered already, here
        with pytest.raises(Invalid, match="answered already"):
            client.delegate(wp, world.items["retry"], "flaky", "start", request_id=request_id)


def test_a_peer_killed_after_it_launched_but_before_it_recorded_answers_the_retry_and_starts_nothing_new(
        world: World) -> None:
    """The nonce was spent, the execution runs, no receipt was recorded: the same bytes again are the
    sender's retry (not a replay), and the start settles on the execution its request id names."""
    _request_id, first, again = crashed_start(world, world.items["crash-mid-start"], "midway", "after-start")
    assert again["receipt"]["outcome"] == "done" and again["receipt"]["execution"] == first[0], again


def test_without_a_peer_the_delegation_face_does_not_exist(tmp_path: Path) -> None:
    from gitwork.serve.app import serving_app

    repo = make_repo(tmp_path / "plain")
    with Workplane(str(repo)) as wp:
        wp.do("init")
    for argv in (["delegate", "x", "--to", "gpu"], ["delegations"], ["delegation", "observe", "d-0"],
                 ["receipts", "verify"]):
        code, _out, err = gw_in(repo, *argv)
        assert code == 2 and "No such command" in err, (argv, err)
    paths = serving_app(str(repo)).openapi()["paths"]
    assert not any(path.startswith("/delegation") for path in paths)
    git(repo, "config", "gitwork.peer.gpu.url", "http://127.0.0.1:9")  # configured: they exist
    assert set(serving_app(str(repo)).openapi()["paths"]) >= {f"/delegation/{op}" for op in protocol.OPS}
    assert gw_json(repo, "delegations") == (0, [])


def test_other_commands_never_look_for_peers(tmp_path: Path) -> None:
    """The hot path stays as it was: only a delegation verb reads the git config for peers."""
    repo = make_repo(tmp_path / "plain")
    git(repo, "config", "gitwork.peer.gpu.url", "http://127.0.0.1:9")
    probe = ("import sys; from gitwork.cli.main import main; codes = [main(['init', '-C', sys.argv[1]]), "
             "main(['blocked', '-C', sys.argv[1]]), main(['ready', '-C', sys.argv[1]])]; "
             "print(codes, sorted(m for m in sys.modules if m.startswith('gitwork.delegation')))")
    done = subprocess.run([sys.executable, "-c", probe, str(repo)], capture_output=True, text=True)
    assert done.stdout.split("\n")[-2] == "[0, 0, 0] []", done.stdout + done.stderr
    # A well-formed id: a word that is neither an id nor an imported item's name is refused (5) first.
    code, _out, err = gw_in(repo, "delegate", "w-1", "--to", "gpu", "--plan", "--test")
    assert code == 2 and "exclude each other" in err


def test_a_malformed_or_oversized_body_is_refused_unread(world: World) -> None:
    import urllib.error
    import urllib.request

    before = world.state()
    for data, status in ((b"{not json", 400), (b"x" * (70 * 1024), 413), (b'{"request": 1}', 400)):
        request = urllib.request.Request(f"{world.url}/delegation/start", data=data, method="POST",
                                         headers={"Content-Type": "application/json"})  # else 415 (docs/serve.md)
        with pytest.raises(urllib.error.HTTPError) as caught:
            urllib.request.urlopen(request, timeout=30)
        assert caught.value.code == status, data[:20]
        assert json.loads(caught.value.read())["ok"] is False
    assert world.state() == before
