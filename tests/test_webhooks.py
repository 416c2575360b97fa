"""Webhooks of ``gw serve`` (docs/serve.md, "Webhooks"; issue 29 point 6).

One real ``gw serve`` per module, configured (git config) with four URLs: one that is not a URL, a
receiver that answers 200, one that answers 500 to the first post of each commit, and one that never
answers until the module ends. The receivers are real HTTP servers on 127.0.0.1:0.
"""

from __future__ import annotations

import hashlib
import hmac
import http.server
import io
import json
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("fastapi", reason="gw serve needs the serve extra (pip install -e '.[test]')")

import httpx  # noqa: E402

from conftest import gw_cmd, let_post, make_repo, poll, run_gw, scrubbed  # noqa: E402
from gitwork.serve.app import create_app  # noqa: E402
from gitwork.serve.threaded import Running  # noqa: E402
from gitwork.serve.tokens import Tokens  # noqa: E402
from gitwork.serve.webhooks import Sender, sign, valid_url  # noqa: E402
from gitwork.store import Repository  # noqa: E402
from gitwork.workplane import Workplane  # noqa: E402

SECRET = "s3cret-for-tests"


class Receiver:
    """A real HTTP server on a free port: records every post (headers, raw body); ``mode`` says how it
    answers: ``ok`` (200), ``flaky`` (500 to the first post of each commit of an ``(item, op)`` in
    :attr:`refuse`, then 200; 200 to everything else), ``hang`` (holds the request until :attr:`release` is
    set). ``flaky`` refuses only what a test names: refusing every commit of the module would queue a
    back-off (0.5 s, doubled per retry) per earlier commit ahead of the one a test waits for."""

    def __init__(self, mode: str) -> None:
        self.mode = mode
        self.posts: list[tuple[dict[str, str], bytes, int]] = []
        self.refuse: set[tuple[str, str]] = set()
        self.release = threading.Event()
        self.arrived = threading.Event()
        outer = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 - the http.server API
                body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
                outer.arrived.set()
                status = 200
                if outer.mode == "hang":
                    outer.release.wait(60)
                elif outer.mode == "flaky":
                    event = json.loads(body)
                    refused = (event.get("item"), event.get("op")) in outer.refuse and not any(
                        json.loads(b)["commit"] == event["commit"] for _h, b, _s in outer.posts)
                    status = 500 if refused else 200
                outer.posts.append(({k.lower(): v for k, v in self.headers.items()}, body, status))
                self.send_response(status)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                pass

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/hook"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def bodies(self, status: int | None = 200) -> list[dict[str, Any]]:
        return [json.loads(body) for _h, body, s in list(self.posts) if status is None or s == status]

    def close(self) -> None:
        self.release.set()
        self.httpd.shutdown()
        self.httpd.server_close()


class World:
    def __init__(self, repo: Path, url: str, token: dict[str, str], receivers: dict[str, Receiver],
                 stderr: list[str]) -> None:
        self.repo, self.url, self.token, self.receivers, self.stderr = repo, url, token, receivers, stderr

    def new(self, title: str) -> str:
        with Workplane(str(self.repo), agent="root") as wp:
            return wp.do("new", title=title).result["item"]  # type: ignore[no-any-return]

    def delivered(self, mode: str, commit: str) -> dict[str, Any]:
        def found() -> dict[str, Any] | None:
            return next((b for b in self.receivers[mode].bodies() if b["commit"] == commit), None)

        return poll(found, 30, what=f"the {mode} receiver getting {commit[:12]}")


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[World]:
    with scrubbed(tmp_path_factory):
        repo = make_repo(tmp_path_factory.mktemp("webhooks") / "repo")
        with Workplane(str(repo), agent="root") as wp:
            wp.do("init")
        let_post(repo, "alice", "bob")
        tokens = Tokens(Repository.discover(str(repo)).gitwork_dir())
        token = {name: tokens.add(name, "person")[0] for name in ("alice", "bob")}
        receivers = {mode: Receiver(mode) for mode in ("ok", "flaky", "hang")}
        subprocess.run(["git", "config", "--add", "gitwork.webhook.url", "not a url"], cwd=repo, check=True)
        for receiver in receivers.values():
            subprocess.run(["git", "config", "--add", "gitwork.webhook.url", receiver.url], cwd=repo, check=True)
        subprocess.run(["git", "config", "gitwork.webhook.secret", SECRET], cwd=repo, check=True)
        proc = subprocess.Popen(gw_cmd("serve", "--bind", "127.0.0.1:0", "--json"), cwd=repo,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        stderr: list[str] = []
        try:
            assert proc.stdout is not None and proc.stderr is not None
            threading.Thread(target=lambda: stderr.extend(proc.stderr or ()), daemon=True).start()
            lines = []
            for line in proc.stdout:  # the JSON object ends with a line "}"
                lines.append(line)
                if line.startswith("}"):
                    break
            url = json.loads("".join(lines))["url"]
            poll(lambda: httpx.get(f"{url}/v1/whoami", headers={"Authorization": f"Bearer {token['alice']}"},
                                   timeout=10).status_code == 200, 30, what="gw serve answering")
            yield World(repo, url, token, receivers, stderr)
        finally:
            proc.terminate()
            proc.wait(20)
            for receiver in receivers.values():
                receiver.close()


def test_a_claim_made_with_gw_is_posted_signed(world: World) -> None:
    item = world.new("claimed by a gw process")
    done = run_gw(world.repo, "claim", item, "--as", "bob", "--json")
    assert done.returncode == 0, done.stderr
    commit = json.loads(done.stdout)["commit"]
    body = world.delivered("ok", commit)
    assert body["event"] == "state" and body["op"] == "claim" and body["item"] == item
    assert body["actor"].startswith("bob") and body["previous"]
    headers, raw, _status = next(p for p in world.receivers["ok"].posts if json.loads(p[1])["commit"] == commit)
    stamp = headers["x-gitwork-timestamp"]
    expected = "sha256=" + hmac.new(SECRET.encode(), stamp.encode() + b"." + raw, hashlib.sha256).hexdigest()
    assert hmac.compare_digest(headers["x-gitwork-signature"], expected)
    assert abs(int(stamp) - time.time()) < 600
    forged = "sha256=" + hmac.new(b"another secret", stamp.encode() + b"." + raw, hashlib.sha256).hexdigest()
    assert headers["x-gitwork-signature"] != forged


def test_a_message_is_posted_with_its_text(world: World) -> None:
    item = world.new("talked about")
    assert run_gw(world.repo, "claim", item, "--as", "alice").returncode == 0
    done = run_gw(world.repo, "msg", item, "the build is green", "--as", "alice", "--json")
    assert done.returncode == 0, done.stderr
    body = world.delivered("ok", json.loads(done.stdout)["commit"])
    assert (body["event"], body["op"], body["item"], body["text"]) == ("message", "msg", item, "the build is green")


def test_a_receiver_answering_500_gets_the_move_on_retry(world: World) -> None:
    item = world.new("retried")
    world.receivers["flaky"].refuse.add((item, "claim"))
    done = run_gw(world.repo, "claim", item, "--as", "bob", "--json")
    commit = json.loads(done.stdout)["commit"]
    world.delivered("flaky", commit)
    tries = [(h["x-gitwork-attempt"], s) for h, b, s in world.receivers["flaky"].posts
             if json.loads(b)["commit"] == commit]
    assert tries == [("1", 500), ("2", 200)]


def test_a_receiver_that_never_answers_does_not_slow_the_api_nor_the_others(world: World) -> None:
    hang = world.receivers["hang"]
    world.new("something for the hanging receiver to hold")
    poll(hang.arrived.is_set, 30, what="a post reaching the hanging receiver")
    item = world.new("claimed over REST")
    answer = httpx.post(f"{world.url}/v1/commands", json={"op": "claim", "item": item},
                        headers={"Authorization": f"Bearer {world.token['alice']}"}, timeout=20)
    assert answer.status_code == 200, answer.text
    assert not hang.release.is_set() and hang.posts == []  # the REST answer came while the receiver still hung
    world.delivered("ok", answer.json()["commit"])  # and the other receivers were not held up either


def test_a_bad_url_is_reported_once_and_ignored(world: World) -> None:
    world.delivered("ok", json.loads(run_gw(world.repo, "new", "one more", "--json").stdout)["commit"])
    said = [line for line in list(world.stderr) if "not a url" in line]
    assert len(said) == 1 and "ignoring webhook URL" in said[0], world.stderr


def test_a_full_queue_drops_the_oldest_with_a_counted_warning() -> None:
    hang = Receiver("hang")
    err = io.StringIO()
    sender = Sender(hang.url, b"k", lambda: __import__("datetime").datetime.now(), queue=2, err=err)
    try:
        sender.put({"commit": "e1"})
        poll(hang.arrived.is_set, 10, what="the first post in flight")
        for n in range(2, 6):
            sender.put({"commit": f"e{n}"})
        assert sender.dropped == 2 and list(e["commit"] for e in sender.pending) == ["e4", "e5"]
        assert "2 dropped so far" in err.getvalue() and err.getvalue().count("dropped the oldest") == 2
        hang.release.set()
        poll(lambda: len(hang.posts) == 3, 10, what="the kept events delivered")
        assert [json.loads(b)["commit"] for _h, b, _s in hang.posts] == ["e1", "e4", "e5"]
    finally:
        sender.stop()
        hang.close()


def test_the_signature_is_over_timestamp_dot_body() -> None:
    body = b'{"commit": "x"}'
    assert sign(b"key", "1700000000", body) == "sha256=" + hmac.new(
        b"key", b"1700000000." + body, hashlib.sha256).hexdigest()
    assert sign(b"key", "1700000001", body) != sign(b"key", "1700000000", body)


@pytest.mark.parametrize("url", ["not a url", "ftp://h/x", "http://", "http://[::1/x", "http://h:99999/x",
                                 "http://h:port/x", "http://h /x", "file:///etc/passwd", "http://h/\nx"])
def test_a_hostile_url_is_not_valid_and_does_not_raise(url: str) -> None:
    assert not valid_url(url)


def test_a_plain_url_is_valid() -> None:
    assert valid_url("http://127.0.0.1:8080/hook") and valid_url("https://ci.example/gitwork?x=1")


def test_a_forged_state_commit_is_posted_as_what_it_is_and_later_moves_still_flow(world: World) -> None:
    """A commit put on the state ref with plain git, its message built to look like a record separator
    and another commit: it is posted under its own id with no op, and the next real command still is."""
    before = subprocess.run(["git", "rev-parse", "refs/gitwork/state"], cwd=world.repo, capture_output=True,
                            text=True, check=True).stdout.strip()
    tree = subprocess.run(["git", "rev-parse", f"{before}^{{tree}}"], cwd=world.repo, capture_output=True,
                          text=True, check=True).stdout.strip()
    message = f"forged\x1e{'f' * 40}\x00{before}\x00claim\n\nCommand: not json\n"
    raw = (f"tree {tree}\nparent {before}\nauthor M <m@x> 1700000000 +0000\n"
           f"committer M <m@x> 1700000000 +0000\n\n{message}").encode()
    forged = subprocess.run(["git", "hash-object", "-t", "commit", "-w", "--stdin", "--literally"], cwd=world.repo,
                            input=raw, capture_output=True, check=True).stdout.decode().strip()
    subprocess.run(["git", "update-ref", "refs/gitwork/state", forged, before], cwd=world.repo, check=True)
    body = world.delivered("ok", forged)
    assert (body["op"], body["item"], body["previous"]) == (None, None, before)
    assert not any(b["commit"] == "f" * 40 for b in world.receivers["ok"].bodies(None))
    done = run_gw(world.repo, "new", "after the forgery", "--json")
    assert done.returncode == 0, done.stderr
    world.delivered("ok", json.loads(done.stdout)["commit"])


def test_moves_brought_by_gw_sync_from_another_machine_are_posted_in_order(machine_a: Path, url: str,
                                                                            tmp_path: Path) -> None:
    receiver = Receiver("ok")
    try:
        subprocess.run(["git", "config", "--add", "gitwork.webhook.url", receiver.url], cwd=machine_a, check=True)
        subprocess.run(["git", "config", "gitwork.webhook.secret", SECRET], cwd=machine_a, check=True)
        b = make_repo(tmp_path / "b")
        subprocess.run(["git", "remote", "add", "origin", url], cwd=b, check=True)
        let_post(b, "bob")
        assert run_gw(b, "init", "--remote", "origin", "--as", "bob").returncode == 0
        item = json.loads(run_gw(b, "new", "made on machine b", "--as", "bob", "--json").stdout)["item"]
        assert run_gw(b, "msg", item, "from b", "--as", "bob").returncode == 0
        assert run_gw(b, "sync", "--as", "bob").returncode == 0
        with Running(create_app(str(machine_a))):
            done = run_gw(machine_a, "sync", "--as", "alice")  # adopts b's two commits from the arbiter
            assert done.returncode == 0, done.stderr
            poll(lambda: len(receiver.bodies()) >= 2, 30, what="both of b's commits posted")
        ops = [(body["op"], body["item"]) for body in receiver.bodies()]
        assert ops[:2] == [("new", item), ("msg", item)] and receiver.bodies()[1]["text"] == "from b", ops
    finally:
        receiver.close()
