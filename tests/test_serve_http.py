"""``gw serve`` facing hostile HTTP: content types, methods, bytes that are not UTF-8, revoked tokens on
open streams, ``Last-Event-ID``, the error table of docs/serve.md, ambiguous token revocations.

Every test drives a real server (uvicorn on a free port of 127.0.0.1, in a thread) over real sockets;
the repository is a real one, and ``gw`` runs as a child process where the invariant is about it.
"""

from __future__ import annotations

import http.client
import json
import os
import re
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest

pytest.importorskip("fastapi", reason="gw serve needs the serve extra (pip install -e '.[test]')")

import httpx  # noqa: E402

from conftest import ROOT, gw_cmd, let_post, make_repo, scrubbed, tip  # noqa: E402
from gitwork.serve.app import serving_app  # noqa: E402
from gitwork.serve.threaded import Running  # noqa: E402
from gitwork.serve.tokens import Tokens  # noqa: E402
from gitwork.store import Repository  # noqa: E402
from gitwork.workplane import Workplane  # noqa: E402


class Live:
    """A real server over a throwaway repository (a delegation peer configured, so its endpoints exist)."""

    def __init__(self, repo: Path, url: str, tokens: dict[str, str]) -> None:
        self.repo, self.url, self.token = repo, url, tokens
        parts = urlsplit(url)
        self.host, self.port = parts.hostname or "127.0.0.1", parts.port or 80

    def auth(self, who: str = "alice") -> dict[str, str]:
        return {"Authorization": f"Bearer {self.token[who]}"}

    def client(self, who: str = "alice", **kwargs: Any) -> httpx.Client:
        return httpx.Client(base_url=self.url, headers=self.auth(who), timeout=20, **kwargs)

    def connection(self) -> http.client.HTTPConnection:
        return http.client.HTTPConnection(self.host, self.port, timeout=20)

    def new(self, title: str = "task") -> str:
        with Workplane(str(self.repo), agent="root") as wp:
            return wp.do("new", title=title).result["item"]  # type: ignore[no-any-return]


@pytest.fixture(scope="module")
def live(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Live]:
    with scrubbed(tmp_path_factory):
        repo = make_repo(tmp_path_factory.mktemp("http") / "repo")
        with Workplane(str(repo), agent="root") as wp:
            wp.do("init")
        let_post(repo, "alice", "bob", "bot", "carol")  # they post on root's items: these tests are about the faces
        subprocess.run(["git", "config", "gitwork.peer.laptop.allow", "plan"], cwd=repo, check=True)
        tokens = Tokens(Repository.discover(str(repo)).gitwork_dir())
        names = {name: tokens.add(name, role)[0] for name, role in (("alice", "person"), ("bot", "agent"),
                                                                     ("root", "admin"))}
        with Running(serving_app(str(repo))) as url:
            yield Live(repo, url, names)


# --- 1. a JSON body is application/json, on every endpoint that takes one ------------------------------


def json_body_paths(live: Live) -> list[str]:
    doc = httpx.get(f"{live.url}/openapi.json", timeout=20).json()
    found = [path for path, methods in doc["paths"].items() for method, operation in methods.items()
             if "application/json" in operation.get("requestBody", {}).get("content", {})]
    assert "/v1/commands" in found and "/delegation/plan" in found  # the walk below covers both faces
    return found


@pytest.mark.parametrize("content_type", [None, "text/plain", "application/x-www-form-urlencoded",
                                          "multipart/form-data; boundary=x", "application/json-patch+json",
                                          "text/json", "application/json; charset=latin-1"])
def test_a_body_that_is_not_application_json_is_415_and_changes_nothing(live: Live, content_type: str | None) -> None:
    before = tip(live.repo)
    body = json.dumps({"op": "new", "title": "smuggled"}).encode()
    for path in json_body_paths(live):
        conn = live.connection()
        headers = {**live.auth(), "Content-Length": str(len(body))}
        if content_type is not None:
            headers["Content-Type"] = content_type
        conn.request("POST", path, body=body, headers=headers)
        answer = conn.getresponse()
        got = json.loads(answer.read())
        assert answer.status == 415, (path, content_type, got)
        assert (got["ok"], got["error"], got["code"]) == (False, "usage", 2), got
        conn.close()
    assert tip(live.repo) == before


def test_application_json_with_a_utf8_charset_is_accepted(live: Live) -> None:
    with live.client() as http:
        answer = http.post("/v1/commands", content=json.dumps({"op": "new", "title": "charset"}).encode(),
                           headers={"Content-Type": "Application/JSON; charset=UTF-8"})
    assert answer.status_code == 200, answer.text


# --- 4. bytes that are not UTF-8, lone surrogates: 422, and the connection lives on --------------------


BAD_BODIES = [
    b'{"op": "new", "title": "\xff\xfe"}',  # not UTF-8 at all
    b'{"op": "new", "title": "\xed\xa0\x80"}',  # a surrogate encoded as UTF-8 bytes (CESU): not UTF-8
    b'{"op": "new", "title": "\\ud800"}',  # a lone high surrogate, escaped
    b'{"op": "new", "title": "ok", "description": "tail \\udfff"}',  # a lone low surrogate
    b'{"op": "new", "title": "ok", "labels": ["\\udc80"]}',  # inside a list
    b'{"op": "new", "title": "ok", "\\ud83d": 1}',  # in a key
    b'{"op": "batch", "commands": [{"op": "new", "title": "\\ud83d"}]}',  # in a nested document
]


def test_invalid_utf8_or_lone_surrogates_are_422_on_a_connection_that_stays_open(live: Live) -> None:
    before = tip(live.repo)
    conn = live.connection()
    conn.connect()
    sock = conn.sock
    for body in BAD_BODIES:
        conn.request("POST", "/v1/commands", body=body,
                     headers={**live.auth(), "Content-Type": "application/json"})
        answer = conn.getresponse()
        raw = answer.read()
        got = json.loads(raw)
        assert answer.status == 422, (body, raw)
        assert (got["error"], got["code"]) == ("invalid", 5), got
        assert not answer.will_close, body
        assert conn.sock is sock, f"the server closed the connection after {body!r}"
    for path in ("/v1/items/%ED%A0%80", "/v1/items/%FF", "/v1/items?holder=%ED%B0%80", "/v1/ready?label=%FF%FE",
                 "/v1/items/w-1/thread?since=%FF"):
        conn.request("GET", path, headers=live.auth())
        answer = conn.getresponse()
        got = json.loads(answer.read())
        assert answer.status in (400, 422) and answer.status != 500, (path, got)
        if answer.status == 422:
            assert (got["error"], got["code"]) == ("invalid", 5), got
        assert conn.sock is sock, f"the server closed the connection after {path}"
    conn.request("GET", "/v1/whoami", headers=live.auth())
    answer = conn.getresponse()
    assert (answer.status, json.loads(answer.read())["who"]) == (200, "alice")
    assert conn.sock is sock
    conn.close()
    assert tip(live.repo) == before


def test_a_lone_surrogate_in_a_path_or_query_is_422(live: Live) -> None:
    with live.client() as http:
        for path in ("/v1/items/%ED%A0%80", "/v1/items?holder=%ED%B0%80", "/v1/items?label=%FF"):
            answer = http.get(path)
            assert (answer.status_code, answer.json()["error"]) == (422, "invalid"), (path, answer.text)


# --- 5. a wrong method on a known path: 405 with Allow ----------------------------------------------


@pytest.mark.parametrize("method,path,allowed", [
    ("GET", "/v1/commands", {"POST"}), ("DELETE", "/v1/commands", {"POST"}), ("PUT", "/v1/commands", {"POST"}),
    ("POST", "/v1/items", {"GET"}), ("DELETE", "/v1/items/w-1", {"GET"}),
    ("POST", "/v1/events", {"GET"}), ("PATCH", "/v1/whoami", {"GET"}),
    ("GET", "/delegation/plan", {"POST"}), ("PUT", "/login", {"GET", "POST"}),
])
def test_a_wrong_method_is_405_with_allow(live: Live, method: str, path: str, allowed: set[str]) -> None:
    with live.client() as http:
        answer = http.request(method, path)
    assert answer.status_code == 405, (method, path, answer.text)
    assert {m.strip() for m in answer.headers["allow"].split(",")} == allowed
    assert (answer.json()["error"], answer.json()["code"]) == ("usage", 2)


# --- 3. a revoked token's open streams end ---------------------------------------------------------------


def test_revoking_a_token_ends_its_open_event_streams(live: Live) -> None:
    """Both streams end once their token is revoked, and not before (docs/serve.md: within one poll of
    the token file). Nothing else would end them: no event comes, and the client reads for 30 s. How
    soon they end is a figure, not an assertion here (it was ``< 1.0`` s, a bound a loaded machine can
    miss)."""
    item = live.new("streamed to a revoked token")
    token, entry = Tokens(Repository.discover(str(live.repo)).gitwork_dir()).add("temp", "agent")
    ended: dict[str, float] = {}
    opened = threading.Barrier(3)

    def follow(path: str) -> None:
        with httpx.Client(base_url=live.url, headers={"Authorization": f"Bearer {token}"},
                          timeout=httpx.Timeout(20, read=30)) as client, client.stream("GET", path) as stream:
            lines = stream.iter_lines()
            if path == "/v1/events":
                next(lines)  # the hello event: the stream is open
            opened.wait(20)
            for _line in lines:
                pass
            ended[path] = time.monotonic()

    streams = [threading.Thread(target=follow, args=(path,), daemon=True)
               for path in ("/v1/events", f"/v1/items/{item}/thread/events")]
    for thread in streams:
        thread.start()
    opened.wait(20)
    time.sleep(0.3)  # both streams are waiting in the server
    before = time.monotonic()
    revoked = subprocess.run(gw_cmd("serve", "token", "revoke", entry["id"]), cwd=live.repo, capture_output=True,
                             text=True, timeout=60)
    assert revoked.returncode == 0, revoked.stderr
    for thread in streams:
        thread.join(25)  # a guard against a hang, under the client's 30 s read timeout
    assert set(ended) == {"/v1/events", f"/v1/items/{item}/thread/events"}, "a stream outlived its token"
    assert min(ended.values()) >= before, "a stream ended before its token was revoked"
    with live.client() as http:
        assert httpx.get(f"{live.url}/v1/whoami", headers={"Authorization": f"Bearer {token}"}).status_code == 401
        assert http.get("/v1/whoami").status_code == 200  # nobody else's token was touched


# --- 9. thread streams honour Last-Event-ID; state events say which moves they cover -----------------------


def _sse(lines: Iterator[str]) -> Iterator[tuple[str | None, str, Any]]:
    event_id, event, data = None, "message", ""
    for line in lines:
        if line.startswith("id: "):
            event_id = line[4:]
        elif line.startswith("event: "):
            event = line[7:]
        elif line.startswith("data: "):
            data = line[6:]
        elif not line and data:
            yield event_id, event, json.loads(data)
            event_id, event, data = None, "message", ""


def test_a_thread_stream_reconnecting_with_last_event_id_gets_exactly_the_messages_after_it(live: Live) -> None:
    item = live.new("reconnected")
    with Workplane(str(live.repo), agent="alice") as wp:
        for n in range(1, 6):
            wp.post(item, f"message {n}")
    with live.client() as http:
        with http.stream("GET", f"/v1/items/{item}/thread/events?since=0") as stream:
            events = _sse(stream.iter_lines())
            first = [next(events) for _ in range(2)]
        assert [data["text"] for _id, _event, data in first] == ["message 1", "message 2"]
        last_id = first[-1][0]
        assert last_id is not None
        # What EventSource sends on a reconnect: the same URL (since=0), and the last id it saw.
        with http.stream("GET", f"/v1/items/{item}/thread/events?since=0", headers={"Last-Event-ID": last_id}) as again:
            events = _sse(again.iter_lines())
            rest = [next(events) for _ in range(3)]
        assert [data["text"] for _id, _event, data in rest] == ["message 3", "message 4", "message 5"]
        assert [int(event_id or 0) for event_id, _e, _d in rest] == [data["seq"] for _i, _e, data in rest]
        bad = http.get(f"/v1/items/{item}/thread/events", headers={"Last-Event-ID": "three"})
        assert (bad.status_code, bad.json()["error"]) == (400, "usage")


def test_each_state_event_says_which_moves_it_covers(live: Live) -> None:
    """Moves that land within one poll come as one event whose range (previous..commit) lists them all:
    `git rev-list previous..commit` is every commit in between, and `moves` counts them."""
    with live.client() as http, http.stream("GET", "/v1/events") as stream:
        events = _sse(stream.iter_lines())
        _id, hello, data = next(events)
        assert hello == "hello"
        start = data["commit"]
        with Workplane(str(live.repo), agent="root") as wp:
            for n in range(6):  # quicker than the 100 ms poll: several moves per event
                wp.do("new", title=f"burst {n}")
        end = tip(live.repo)
        covered: list[str] = []
        previous = start
        while previous != end:
            _id, event, data = next(events)
            if event != "state":
                continue
            assert data["previous"] == previous and data["range"] == f"{previous}..{data['commit']}"
            commits = subprocess.run(["git", "rev-list", data["range"]], cwd=live.repo, capture_output=True,
                                     text=True, check=True).stdout.split()
            assert data["moves"] == len(commits) >= 1
            covered += reversed(commits)
            previous = data["commit"]
    every = subprocess.run(["git", "rev-list", "--reverse", f"{start}..{end}"], cwd=live.repo, capture_output=True,
                           text=True, check=True).stdout.split()
    assert covered == every  # every move covered once, in order


# --- 7. an ambiguous revocation refuses and changes nothing -----------------------------------------------


def test_token_revoke_of_an_ambiguous_name_or_prefix_refuses_and_changes_nothing(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "r")
    tokens = Tokens(Repository.discover(str(repo)).gitwork_dir())
    _a, first = tokens.add("twin", "agent")
    _b, second = tokens.add("twin", "person")
    stored = Path(tokens.path)
    before = stored.read_bytes()
    common = ""
    while first["id"].startswith(common + first["id"][len(common)]) and second["id"].startswith(
            common + first["id"][len(common)]):
        common += first["id"][len(common)]  # "t-" at least: a prefix of both ids
    for which in ("twin", common):
        done = subprocess.run(gw_cmd("serve", "token", "revoke", which), cwd=repo, capture_output=True, text=True,
                              timeout=60)
        assert done.returncode == 4, (which, done.returncode, done.stderr)
        assert len(done.stderr.strip().splitlines()) == 1 and "Traceback" not in done.stderr
        assert first["id"] in done.stderr and second["id"] in done.stderr  # it names both
        assert stored.read_bytes() == before, "an ambiguous revocation changed the token file"
    done = subprocess.run(gw_cmd("serve", "token", "revoke", second["id"], "--json"), cwd=repo, capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert [entry["id"] for entry in json.loads(done.stdout)["revoked"]] == [second["id"]]
    live_now = [e["id"] for e in Tokens(str(stored.parent)).listing() if e.get("revoked_at") is None]
    assert live_now == [first["id"]]
    done = subprocess.run(gw_cmd("serve", "token", "revoke", "twin"), cwd=repo, capture_output=True, text=True,
                          timeout=60)  # one live token left by that name: no longer ambiguous
    assert done.returncode == 0, done.stderr


# --- 6. every error code of docs/serve.md, triggered -----------------------------------------------------


def doc_table() -> list[tuple[int | None, str, int]]:
    """``(exit code, kind, HTTP status)`` of each row of docs/serve.md's tables of statuses."""
    text = (ROOT / "docs" / "serve.md").read_text(encoding="utf-8")
    rows = []
    for line in text.splitlines():
        found = re.match(r"^\| (\d+|-) \| ([a-z, `-]+) \| (\d{3}) \|", line)
        if found:
            code = None if found[1] == "-" else int(found[1])
            for kind in found[2].replace("`", "").split(","):
                rows.append((code, kind.strip(), int(found[3])))
    return rows


# --- 2. the board's cookie: this origin only, and the session's CSRF token for writes --------------------


def test_the_boards_cookie_acts_only_from_this_origin_with_the_sessions_csrf_token(live: Live) -> None:
    here = f"http://{live.host}:{live.port}"
    elsewhere = f"http://{live.host}:{live.port + 1 if live.port < 65535 else live.port - 1}"
    with httpx.Client(base_url=live.url, timeout=20, follow_redirects=False) as browser:
        signed = browser.post("/login", content=f"token={live.token['alice']}".encode(),
                              headers={"Content-Type": "application/x-www-form-urlencoded", "Origin": here})
        assert signed.status_code == 303
        page = browser.get("/", headers={"Sec-Fetch-Site": "same-origin", "Sec-Fetch-Mode": "navigate"}).text
        csrf = re.search(r'<meta name="gw-csrf" content="([0-9a-f]{64})">', page)
        assert csrf is not None, "the page carries no CSRF token"
        before = tip(live.repo)
        doc = {"op": "new", "title": "by cookie"}
        refused = [
            browser.post("/v1/commands", json=doc),  # no Origin: a browser always sends one on a POST
            browser.post("/v1/commands", json=doc, headers={"Origin": elsewhere, "X-CSRF-Token": csrf[1]}),
            browser.post("/v1/commands", json=doc, headers={"Sec-Fetch-Site": "same-site", "X-CSRF-Token": csrf[1]}),
            browser.post("/v1/commands", json=doc, headers={"Origin": here}),  # no CSRF token
            browser.post("/v1/commands", json=doc, headers={"Origin": here, "X-CSRF-Token": "0" * 64}),
            browser.get("/v1/whoami", headers={"Origin": elsewhere}),
            browser.get("/v1/whoami", headers={"Sec-Fetch-Site": "cross-site"}),
            browser.post("/logout", headers={"Origin": elsewhere}),
            browser.post("/logout", headers={"Origin": here}),  # without the form's CSRF field
            browser.post("/login", content=f"token={live.token['root']}".encode(),
                         headers={"Content-Type": "application/x-www-form-urlencoded", "Origin": elsewhere}),
        ]
        assert [r.status_code for r in refused] == [403] * len(refused), [r.text for r in refused]
        assert all(r.json()["error"] == "forbidden" and r.json()["code"] == 77 for r in refused)
        assert "set-cookie" not in refused[-1].headers and "set-cookie" not in refused[-2].headers
        assert tip(live.repo) == before
        fine = [browser.post("/v1/commands", json=doc, headers={"Origin": here, "X-CSRF-Token": csrf[1]}),
                browser.post("/v1/commands", json=doc, headers={"Sec-Fetch-Site": "same-origin", "X-CSRF-Token": csrf[1]}),
                browser.get("/v1/whoami", headers={"Sec-Fetch-Site": "same-origin"})]
        assert [r.status_code for r in fine] == [200, 200, 200], [r.text for r in fine]
        out = browser.post("/logout", content=f"csrf={csrf[1]}".encode(),
                           headers={"Content-Type": "application/x-www-form-urlencoded", "Origin": here})
        assert out.status_code == 303 and "gw_token=" in out.headers["set-cookie"]
    # A token in the Authorization header is not the browser's to attach: no origin rule applies.
    with live.client("alice") as api:
        assert api.post("/v1/commands", json=doc, headers={"Origin": elsewhere}).status_code == 200


def _item_path(repo: Path, item: str) -> str:
    names = subprocess.run(["git", "ls-tree", "-r", "--name-only", "refs/gitwork/state"], cwd=repo,
                           capture_output=True, text=True, check=True).stdout.split()
    return next(name for name in names if f"/{item}/" in name and name.endswith("item.yaml"))


def _served(repo: Path, token: str) -> Iterator[httpx.Client]:
    with Running(serving_app(str(repo))) as url, httpx.Client(
            base_url=url, headers={"Authorization": f"Bearer {token}"}, timeout=60) as client:
        yield client


def _own_repo(tmp_path: Path, name: str) -> tuple[Path, str]:
    repo = make_repo(tmp_path / name)
    with Workplane(str(repo), agent="root") as wp:
        wp.do("init")
    return repo, Tokens(Repository.discover(str(repo)).gitwork_dir()).add("root", "admin")[0]


def test_every_status_docs_serve_md_lists_is_answered_with_its_documented_code(
        live: Live, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Each row of docs/serve.md's two tables, triggered: over the live server where the state allows it,
    over a repository broken for the purpose (corrupt, newer format, gone, locked, an arbiter that refuses
    or is gone, a HEAD git cannot read) otherwise. Three kinds have no trigger a client can pull (a publish whose merge conflicts,
    a sync's queued refusals, a bug): a mounted router (create_app's extension point) raises the
    library's own error there, and the app maps it like any other."""
    import shutil

    from fastapi import APIRouter

    from gitwork import errors
    from gitwork.serve.app import create_app

    rows = doc_table()
    assert len(rows) >= 25, rows
    got: dict[tuple[int | None, str, int], httpx.Response] = {}

    def record(response: httpx.Response) -> None:
        body = response.json()
        got[(body.get("code"), body.get("error"), response.status_code)] = response

    a, b = live.new("documented a"), live.new("documented b")
    with live.client("alice") as alice, live.client("bot") as bot, live.client("root") as root:
        record(alice.post("/v1/commands", content=b"{op: claim", headers={"Content-Type": "application/json"}))
        record(alice.get("/v1/items/w-0000000000000000"))
        ids = [row["item"] for row in root.get("/v1/items", params={"all": True}).json()]
        while True:  # a one-digit prefix two items share
            firsts = [i[2] for i in ids]
            shared = next((d for d in set(firsts) if firsts.count(d) > 1), None)
            if shared is not None:
                break
            ids.append(live.new("one more"))
        record(alice.get(f"/v1/items/w-{shared}"))
        record(alice.post("/v1/commands", json={"op": "new", "title": "x", "priority": 9}))
        record(alice.post("/v1/commands", json={"op": "reopen", "item": a}))
        assert alice.post("/v1/commands", json={"op": "claim", "item": a}).status_code == 200
        record(alice.post("/v1/commands", json={"op": "renew", "item": a, "fence": 999_999}))
        record(bot.post("/v1/commands", json={"op": "claim", "item": a}))
        record(bot.post("/v1/commands", json={"op": "msg", "item": b, "text": "hi", "as": "alice"}))
        record(httpx.get(f"{live.url}/v1/whoami", headers={"Authorization": "Bearer gwt_nope"}))
        record(alice.get("/no/such/path"))
        record(alice.delete("/v1/commands"))
        record(alice.post("/v1/commands", content=b"x" * (300 * 1024), headers={"Content-Type": "application/json"}))
        record(alice.post("/v1/commands", content=b'{"op": "new"}', headers={"Content-Type": "text/plain"}))
        record(alice.post("/v1/commands", content=b'{"op": "new", "title": "\\ud800"}',
                          headers={"Content-Type": "application/json"}))
    with httpx.Client(base_url=live.url, timeout=20, cookies={"gw_token": live.token["alice"]}) as cookie:
        record(cookie.post("/v1/commands", json={"op": "new", "title": "x"}, headers={"Origin": "http://evil.example"}))

    corrupt, token = _own_repo(tmp_path, "corrupt")
    with Workplane(str(corrupt), agent="root") as wp:
        bad = wp.do("new", title="to break").result["item"]
    from conftest import replace_blob

    replace_blob(corrupt, _item_path(corrupt, bad), b"priority: [high\n")
    for client in _served(corrupt, token):
        record(client.get(f"/v1/items/{bad}"))

    newer, token = _own_repo(tmp_path, "newer")
    replace_blob(newer, "format.yaml", b"format: 999\n")
    for client in _served(newer, token):
        record(client.get("/v1/items"))

    gone, token = _own_repo(tmp_path, "gone")
    for client in _served(gone, token):
        shutil.rmtree(gone / ".git" / "objects")  # no longer a repository (the token file stays)
        record(client.get("/v1/items"))

    headless, token = _own_repo(tmp_path, "headless")
    for client in _served(headless, token):
        (headless / ".git" / "HEAD").write_text("garbage\n")  # git itself now fails on it
        record(client.post("/v1/commands", json={"op": "new", "title": "on a broken repository"}))

    locked, token = _own_repo(tmp_path, "locked")
    monkeypatch.setenv("GW_LOCK_TIMEOUT", "0.3")
    lock = locked / ".git" / "refs" / "gitwork" / "state.lock"
    lock.write_text("")
    # A lock in use: older than the writer's sweep waits for (gitwork/stalelocks.STALE_AFTER), with a git of
    # this repository running that may hold it (here one waiting on its stdin), so the sweep leaves it
    # whatever the load. (A bare lock aged past STALE_AFTER while the server started under load: swept,
    # the write landed, and this test failed on the lock it expected to remove.)
    os.utime(lock, (time.time() - 60, time.time() - 60))
    holder = subprocess.Popen(["git", "update-ref", "--stdin"], cwd=locked / ".git", stdin=subprocess.PIPE,
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        for client in _served(locked, token):
            record(client.post("/v1/commands", json={"op": "new", "title": "behind a lock"}))
    finally:
        holder.kill()
        holder.wait()
    lock.unlink()
    monkeypatch.delenv("GW_LOCK_TIMEOUT")

    arbiter = make_repo(tmp_path / "arbiter.git", bare=True)
    clone, token = _own_repo(tmp_path, "clone")
    subprocess.run(["git", "remote", "add", "origin", str(arbiter)], cwd=clone, check=True)
    pushed = subprocess.run(gw_cmd("remote", "set", "origin"), cwd=clone, capture_output=True, text=True, timeout=60)
    assert pushed.returncode == 0, pushed.stderr
    synced = subprocess.run(gw_cmd("sync"), cwd=clone, capture_output=True, text=True, timeout=60)
    assert synced.returncode == 0, synced.stderr
    with Workplane(str(clone), agent="root") as wp:
        item = wp.do("new", title="decided by the arbiter").result["item"]
    hook = arbiter / "hooks" / "pre-receive"
    hook.write_text("#!/bin/sh\necho 'closed for the night' >&2\nexit 1\n")
    hook.chmod(0o755)
    for client in _served(clone, token):
        record(client.post("/v1/commands", json={"op": "claim", "item": item}))
        subprocess.run(["git", "remote", "set-url", "origin", str(tmp_path / "nowhere.git")], cwd=clone, check=True)
        record(client.post("/v1/commands", json={"op": "claim", "item": item}))

    router = APIRouter(prefix="/raise")
    for kind, cls in {"non-fast-forward": errors.NonFastForward, "sync-refused": errors.SyncRefused}.items():
        def raising(cls: type[errors.GwError] = cls) -> None:
            raise cls(f"raised as the library raises {cls.kind}")
        router.add_api_route(f"/{kind}", raising, methods=["GET"])

    def bug() -> None:
        raise ZeroDivisionError("a bug")

    router.add_api_route("/internal", bug, methods=["GET"])
    with Running(create_app(str(live.repo), extra_routers=[router])) as url:
        for kind in ("non-fast-forward", "sync-refused", "internal"):
            record(httpx.get(f"{url}/raise/{kind}", timeout=20))

    missing = [row for row in rows if row not in got]
    assert not missing, f"documented but not answered so: {missing}; answered: {sorted(got, key=str)}"
    unlisted = [key for key in got if key not in rows]
    assert not unlisted, f"answered but not documented: {unlisted}"


def test_a_batch_member_naming_another_identity_is_refused(live: Live) -> None:
    """The token's identity holds inside a batch too: a member's `as` is the token's or absent."""
    item = live.new("impersonated in a batch")
    before = tip(live.repo)
    member = {"op": "msg", "item": item, "text": "I am alice", "epoch": "current"}
    with live.client("bot") as bot:
        refused = [bot.post("/v1/commands", json={"op": "batch", "ops": [{**member, "as": "alice"}]}),
                   bot.post("/v1/commands", json={"op": "batch", "ops": [member, {**member, "as": "root"}]})]
        assert [(r.status_code, r.json()["error"]) for r in refused] == [(403, "forbidden")] * 2, [r.text for r in refused]
        assert tip(live.repo) == before
        fine = bot.post("/v1/commands", json={"op": "batch", "ops": [member, {**member, "as": "bot"}]})
        assert fine.status_code == 200, fine.text
    with Workplane(str(live.repo)) as wp:
        assert {m["by"] for m in wp.thread(item, 0)[1]} == {"bot"}


def test_numbers_are_jsons_integral_numbers_are_integers_and_nan_is_not_json(live: Live) -> None:
    """The schema's `integer` is JSON Schema's (3.0 is one), so the server takes 3.0 as 3; NaN and
    Infinity, which Python's json reads but JSON does not have, are malformed (400)."""
    before = tip(live.repo)
    with live.client() as http:
        for body in (b'{"op": "new", "title": "x", "priority": NaN}', b'{"op": "new", "title": "x", "priority": Infinity}',
                     b'{"op": "new", "title": "x", "priority": -Infinity}'):
            answer = http.post("/v1/commands", content=body, headers={"Content-Type": "application/json"})
            assert (answer.status_code, answer.json()["error"]) == (400, "usage"), answer.text
        assert tip(live.repo) == before
        for body in (b'{"op": "new", "title": "two", "priority": 2.0}', b'{"op": "new", "title": "two", "priority": 2e0}'):
            answer = http.post("/v1/commands", content=body, headers={"Content-Type": "application/json"})
            assert answer.status_code == 200, answer.text
            assert http.get(f"/v1/items/{answer.json()['item']}").json()["priority"] == 2
        half = http.post("/v1/commands", content=b'{"op": "new", "title": "x", "priority": 2.5}',
                         headers={"Content-Type": "application/json"})
        assert (half.status_code, half.json()["error"]) == (422, "invalid")
