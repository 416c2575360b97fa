"""Webhooks under the harness (issue 29 point 6): a receiver the REST clone's ``gw serve`` posts to, and IW.

The receiver is a plain HTTP server in the harness process. Every fifth post is answered 503, so the
server's retries run too. IW, checked once the world is quiet: every post it received is signed with
the shared secret over its timestamp and raw body, and names a commit that exists in the clone that
served it, whose recorded command is the op the post says. No post is invented, garbled or unsigned,
whatever the faults did to the server meanwhile. A post may come twice (a retry), or not at all (a
server killed with posts pending: docs/serve.md says delivery is not durable), so neither is a
violation.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import subprocess
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from gitwork import engine

from .ledger import Ledger

SECRET = "harness-webhook-secret-0123456789abcdef"


class Receiver:
    """Records ``(headers, raw body)`` of every post; answers 503 to every fifth."""

    def __init__(self) -> None:
        self.posts: list[tuple[dict[str, str], bytes]] = []
        self.lock = threading.Lock()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 (http.server's name)
                length = min(int(self.headers.get("Content-Length") or 0), 1 << 20)
                body = self.rfile.read(length)
                with receiver.lock:
                    receiver.posts.append(({k.lower(): v for k, v in self.headers.items()}, body))
                    refuse = len(receiver.posts) % 5 == 0
                self.send_response(503 if refuse else 200)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/hook"
        self.thread = threading.Thread(target=self.server.serve_forever, name="webhook-receiver", daemon=True)
        self.thread.start()

    def configure(self, clone: Path) -> None:
        """Point the clone's ``gw serve`` at this receiver (read when the server starts)."""
        for key, value in (("gitwork.webhook.url", self.url), ("gitwork.webhook.secret", SECRET)):
            subprocess.run(["git", "config", key, value], cwd=clone, check=True, capture_output=True)

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def signed(headers: dict[str, str], body: bytes, secret: str = SECRET) -> bool:
    expected = "sha256=" + hmac.new(secret.encode(), f"{headers.get('x-gitwork-timestamp', '')}.".encode() + body,
                                    hashlib.sha256).hexdigest()
    return hmac.compare_digest(expected, headers.get("x-gitwork-signature", ""))


def check(posts: list[tuple[dict[str, str], bytes]], clone: Path, ledger: Ledger) -> int:
    """IW over ``posts`` served by ``clone``; returns how many were checked."""
    for headers, body in posts:
        if not signed(headers, body):
            ledger.violate("IW", f"a webhook post not signed with the shared secret: {body[:200]!r}")
            continue
        try:
            event = json.loads(body)
            commit, op = str(event["commit"]), event.get("op")
        except (ValueError, KeyError, TypeError):
            ledger.violate("IW", f"a signed webhook post that is no event: {body[:200]!r}")
            continue
        message = subprocess.run(["git", "log", "-1", "--format=%B", f"{commit}^{{commit}}", "--"], cwd=clone,
                                 capture_output=True, text=True)
        if message.returncode != 0:
            ledger.violate("IW", f"a webhook post names commit {commit[:12]}, which the clone does not have")
            continue
        command = engine.parse_command_from_message(message.stdout)
        if command is not None and command.get("op") != op:
            ledger.violate("IW", f"a webhook post says op {op!r} for commit {commit[:12]}, whose command is "
                                 f"{command.get('op')!r}")
    ledger.count("IW:posts", len(posts))
    return len(posts)
