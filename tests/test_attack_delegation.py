"""The sender's side of delegation attacked: a hostile peer's answer, a kept request file that was damaged.

A real repository with real keys, a real HTTP server on 127.0.0.1 (in a thread: it only has to
answer badly) standing in for a peer that misbehaves.
"""

from __future__ import annotations

import http.server
import json
import threading
from pathlib import Path
from typing import Iterator

import pytest

from conftest import git, make_repo, tip
from gitwork.delegation import client
from gitwork.errors import Corrupt, RemoteError
from gitwork.records import protocol
from gitwork.workplane import Workplane
from test_signing import keygen


class Hostile(http.server.BaseHTTPRequestHandler):
    answer = b"{}"
    asked: list[str] = []

    def do_POST(self) -> None:  # noqa: N802 (http.server's name)
        self.asked.append(self.path)
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(self.answer)))
        self.end_headers()
        self.wfile.write(self.answer)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def sender(tmp_path: Path) -> Iterator[tuple[Path, str]]:
    """A repository with one item, its signing key, and a peer ``evil`` whose server answers :attr:`Hostile.answer`."""
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Hostile)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    repo = make_repo(tmp_path / "laptop")
    own_key, _own_pub = keygen(tmp_path / "laptop-key")
    _evil_key, evil_pub = keygen(tmp_path / "evil-key")
    with Workplane(str(repo), agent="alice") as wp:
        wp.do("init")
        item = wp.do("new", title="delegate me").result["item"]
    for key, value in (("gitwork.signingKey", own_key), ("gitwork.peer.evil.url", f"http://127.0.0.1:{server.server_port}"),
                       ("gitwork.peer.evil.key", evil_pub), ("gitwork.peer.evil.allow", "plan")):
        git(repo, "config", key, value)
    Hostile.asked = []
    try:
        yield repo, item
    finally:
        server.shutdown()
        server.server_close()


def test_a_peer_answering_json_nested_past_the_parser_is_no_answer_and_nothing_is_recorded(
        sender: tuple[Path, str]) -> None:
    repo, item = sender
    before = tip(repo)
    Hostile.answer = b"[" * 200_000 + b"]" * 200_000  # under the 256 KiB read limit, deeper than json goes
    with Workplane(str(repo)) as wp, pytest.raises(RemoteError, match="without a JSON body"):
        client.delegate(wp, item, "evil", "plan")
    assert Hostile.asked == ["/delegation/plan"] and tip(repo) == before


def test_a_damaged_kept_request_is_reported_and_nothing_is_sent(sender: tuple[Path, str]) -> None:
    repo, item = sender
    before = tip(repo)
    request_id = protocol.new_request_id()
    kept = repo / ".git" / "gitwork" / "delegations" / f"{request_id}.json"
    kept.parent.mkdir(parents=True, exist_ok=True)
    for damage in ('{"peer": "evil", "request": ', '["not", "a", "kept", "request"]',
                   '{"peer": "evil", "request": "{}", "signature": "x"}'):
        kept.write_text(damage)
        with Workplane(str(repo)) as wp, pytest.raises(Corrupt, match="unreadable"):
            client.delegate(wp, item, "evil", "plan", request_id=request_id)
    assert Hostile.asked == [] and tip(repo) == before


def test_a_peers_terminal_capture_reaches_this_terminal_without_escapes_or_controls() -> None:
    from gitwork.cli.commands.delegation import printable

    hostile = ("\x1b]52;c;cm0gLXJmIH4=\x07ok \x1b[31mred\x1b[0m\r\n"  # the clipboard, colours, a carriage return
               "\x1b]0;title\x1b\\line\u202etwo\x9b2J\x07\n  indented")
    shown = printable(hostile)
    assert shown.split("\n") == ["ok red", "line two 2J", "  indented"], shown


def test_an_unsigned_refusal_is_outcome_unknown_in_one_clean_line_and_the_request_is_kept(
        sender: tuple[Path, str]) -> None:
    """An unsigned refusal could come from anything on the way (a proxy, a captive portal): it is not the
    peer's word, so not a refusal: exit 12, the request kept for ``--id``; its text shown cleaned, cut."""
    repo, item = sender
    before = tip(repo)
    Hostile.answer = json.dumps({"ok": False, "code": 5, "message": "no\x1b]0;owned\x07 way\n" + "x" * 5000}).encode()
    with Workplane(str(repo)) as wp, pytest.raises(RemoteError) as caught:
        client.delegate(wp, item, "evil", "plan")
    message = caught.value.message
    assert message.startswith("peer evil answered 200 without a signed receipt (no way") and len(message) < 400, message
    assert not any(ch < " " for ch in message), message
    request_id = caught.value.details["delegation"]
    assert (repo / ".git" / "gitwork" / "delegations" / f"{request_id}.json").is_file()
    assert tip(repo) == before
