"""Webhooks of ``gw serve``: every move of the state ref, and every message, posted to configured URLs.

Configured in git config (docs/serve.md): ``gitwork.webhook.url`` (repeatable) and
``gitwork.webhook.secret``. Each post is a JSON body signed with
``X-Gitwork-Signature: sha256=HEX`` = HMAC-SHA256(secret, timestamp + "." + body) and carries
``X-Gitwork-Timestamp`` (Unix seconds from the injectable clock), so a receiver can check both who sent it
and how old it is.

Nothing here can hold up a command or a request: the feeder is one task on the event loop that waits
on the same :class:`~gitwork.serve.server.RefWatcher` as the SSE streams and reads the new commits in a
worker thread; each URL has its own daemon thread and its own bounded queue (the oldest event is dropped,
with a counted warning on stderr, when a receiver falls behind), so a dead or hanging receiver delays
only its own deliveries. A delivery is retried with exponential back-off a bounded number of times.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import hashlib
import hmac
import json
import sys
import threading
import urllib.error
import urllib.parse
import urllib.request
from typing import Any, Callable, TextIO

from .. import gitcmd
from ..engine import parse_command_from_message
from ..errors import GwError

MESSAGE_OPS = frozenset({"msg", "ask", "decide"})  # the ops that post to an item's thread
QUEUE = 1000  # events kept per URL while its receiver is behind
ATTEMPTS = 6  # tries per event: the first and five retries
BACKOFF = 0.5  # seconds before the first retry, doubled each time
BACKOFF_MOST = 30.0
TIMEOUT = 10.0  # seconds one post may take (connect + answer)
READ_MOST = 500  # commits read per change: a larger jump (a sync after days) posts its newest 500


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    """A redirect is an answer that is not 2xx: the body is never re-sent to another place."""

    def redirect_request(self, *args: Any, **kwargs: Any) -> None:
        return None


_OPENER = urllib.request.build_opener(_NoRedirect)


def sign(secret: bytes, timestamp: str, body: bytes) -> str:
    """The ``X-Gitwork-Signature`` value: ``sha256=`` HMAC-SHA256(secret, timestamp + "." + body)."""
    return "sha256=" + hmac.new(secret, timestamp.encode() + b"." + body, hashlib.sha256).hexdigest()


def valid_url(url: str) -> bool:
    """Whether ``url`` is an http(s) URL with a host (and a port in range, when it names one)."""
    if any(c.isspace() or ord(c) < 32 for c in url):
        return False
    try:
        parts = urllib.parse.urlsplit(url)
        parts.port  # noqa: B018 - raises ValueError for a port that is not a number in 0-65535
    except ValueError:
        return False
    return parts.scheme in ("http", "https") and bool(parts.hostname)


class Sender:
    """One URL's queue and delivery thread."""

    def __init__(self, url: str, secret: bytes, now: Callable[[], Any], *, attempts: int = ATTEMPTS,
                 backoff: float = BACKOFF, queue: int = QUEUE, timeout: float = TIMEOUT,
                 err: TextIO | None = None) -> None:
        self.url, self.secret, self.now = url, secret, now
        self.attempts, self.backoff, self.timeout = attempts, backoff, timeout
        self.err = err
        self.pending: collections.deque[dict[str, Any]] = collections.deque()
        self.most = queue
        self.dropped = 0  # events dropped because the queue was full
        self.failed = 0  # events given up on after every attempt
        self.delivered = 0
        self._cond = threading.Condition()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"gw-webhook {url}", daemon=True)
        self._thread.start()

    def _say(self, text: str) -> None:
        print(f"gw serve: webhook {self.url}: {text}", file=self.err or sys.stderr, flush=True)

    def put(self, event: dict[str, Any]) -> None:
        with self._cond:
            if len(self.pending) >= self.most:
                self.pending.popleft()
                self.dropped += 1
                self._say(f"queue full ({self.most}): dropped the oldest event ({self.dropped} dropped so far)")
            self.pending.append(event)
            self._cond.notify()

    def stop(self) -> None:
        self._stop.set()
        with self._cond:
            self._cond.notify()

    def _run(self) -> None:
        while not self._stop.is_set():
            with self._cond:
                while not self.pending and not self._stop.is_set():
                    self._cond.wait()
                if self._stop.is_set():
                    return
                event = self.pending.popleft()
            self._deliver(event)

    def _deliver(self, event: dict[str, Any]) -> None:
        body = json.dumps(event, ensure_ascii=False, sort_keys=True).encode()
        wait = self.backoff
        last = ""
        for attempt in range(1, self.attempts + 1):
            last = self._post(body, attempt)
            if not last:
                self.delivered += 1
                return
            if attempt < self.attempts and self._stop.wait(wait):
                return  # the server is stopping
            wait = min(wait * 2, BACKOFF_MOST)
        self.failed += 1
        self._say(f"gave up on {event.get('commit', '?')[:12]} after {self.attempts} attempts: {last}")

    def _post(self, body: bytes, attempt: int) -> str:
        """Post once: '' when the receiver answered 2xx, else why not (one line)."""
        timestamp = str(int(self.now().timestamp()))  # per attempt: a receiver may refuse old timestamps
        request = urllib.request.Request(self.url, data=body, method="POST", headers={
            "Content-Type": "application/json", "User-Agent": "gitwork-webhook",
            "X-Gitwork-Timestamp": timestamp, "X-Gitwork-Signature": sign(self.secret, timestamp, body),
            "X-Gitwork-Attempt": str(attempt)})
        try:
            with _OPENER.open(request, timeout=self.timeout) as answer:
                answer.read(65536)
                status = int(answer.status)
        except urllib.error.HTTPError as error:
            status = int(error.code)
        except (OSError, ValueError) as error:  # refused, reset, timed out, unresolvable
            return gitcmd.one_line(str(error)) or type(error).__name__
        return "" if 200 <= status < 300 else f"HTTP {status}"


def events_between(git_dir: str, previous: str | None, tip: str) -> list[dict[str, Any]]:
    """The events of the commits in ``previous..tip``, oldest first (the tip alone when git cannot list
    the range: the ref was rewound). Ids come from ``rev-list`` and each commit is read whole with
    ``cat-file``, never by splitting formatted output: a message may hold any byte a forger chose."""
    span = f"{previous}..{tip}" if previous else tip
    try:
        done = gitcmd.run(["--git-dir", git_dir, "rev-list", f"--max-count={READ_MOST}", span], check=True,
                          timeout=30)
        ids = done.out.split()
    except GwError:
        ids = [tip]
    found = gitcmd.read_batch(git_dir, ids)
    out = []
    for commit in reversed(ids):
        kind_content = found.get(commit)
        if kind_content is None or kind_content[1] != "commit":
            continue
        head, _, message = kind_content[2].partition(b"\n\n")
        parents = [line[7:].decode("ascii", "replace") for line in head.split(b"\n") if line.startswith(b"parent ")]
        out.append(event_of(commit, parents[0] if parents else None, message.decode("utf-8", "replace")))
    return out


def event_of(commit: str, previous: str | None, message: str) -> dict[str, Any]:
    """The body posted for one state commit: its command's op, item and actor, and the commit ids; a
    message's also its kind and text."""
    cmd = parse_command_from_message(message) or {}
    op = cmd.get("op")
    event: dict[str, Any] = {"event": "message" if op in MESSAGE_OPS else "state", "commit": commit,
                             "previous": previous, "op": op, "item": cmd.get("item"), "actor": cmd.get("as"),
                             "command_id": cmd.get("id"), "summary": message.partition("\n")[0]}
    if event["event"] == "message":
        event.update(kind=cmd.get("kind", "decision-request" if op == "ask" else "note"), text=cmd.get("text"))
    return event


class Webhooks:
    """The configured receivers and the feeder that fills their queues from the ref watcher."""

    def __init__(self, senders: list[Sender]) -> None:
        self.senders = senders
        self._task: asyncio.Task[None] | None = None

    @classmethod
    def configured(cls, path: str, now: Callable[[], Any], err: TextIO | None = None) -> Webhooks | None:
        """The webhooks git config asks for, or ``None``. A URL that is not http(s)://HOST... is reported
        once on stderr and ignored; URLs without ``gitwork.webhook.secret`` are all ignored (never sent
        unsigned)."""
        def config(*args: str) -> list[str]:
            done = gitcmd.run(["config", *args], cwd=path, check=False, timeout=30)
            return [line for line in done.out.splitlines() if line.strip()] if done.returncode == 0 else []

        err = err or sys.stderr
        urls = config("--get-all", "gitwork.webhook.url")
        if not urls:
            return None
        secret = config("--get", "gitwork.webhook.secret")
        if not secret:
            print("gw serve: gitwork.webhook.url is set but gitwork.webhook.secret is not: webhooks are off",
                  file=err, flush=True)
            return None
        good = []
        for url in dict.fromkeys(u.strip() for u in urls):
            if valid_url(url):
                good.append(url)
            else:
                print(f"gw serve: ignoring webhook URL {url[:200]!r}: not an http(s)://HOST URL", file=err, flush=True)
        if not good:
            return None
        return cls([Sender(url, secret[0].encode(), now, err=err) for url in good])

    def post(self, event: dict[str, Any]) -> None:
        for sender in self.senders:
            sender.put(event)

    async def feed(self, watcher: Any, git_dir: str, version: int, seen: str | None) -> None:
        """Post every commit the watcher sees land after ``seen`` (its tip at ``version``), in order."""
        while True:
            version = await watcher.changed_since(version, 3600.0)
            tip = watcher.tip
            if tip is None or tip == seen:
                continue
            try:
                for event in await asyncio.to_thread(events_between, git_dir, seen, tip):
                    self.post(event)
            except (GwError, OSError) as error:  # a feeder that died would end every later post
                print(f"gw serve: webhooks: could not read {tip[:12]}: {error}", file=sys.stderr, flush=True)
            seen = tip

    async def start(self, watcher: Any, path: str) -> None:
        """Start following ``watcher`` from its first look: everything that lands once the server answers
        is posted (the application's startup waits for this)."""
        from ..store import Repository

        git_dir = Repository.discover(path).git_dir
        await watcher.start()
        self._task = asyncio.get_running_loop().create_task(self.feed(watcher, git_dir, watcher.version, watcher.tip))

    async def stop(self) -> None:
        for sender in self.senders:
            sender.stop()
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._task
            self._task = None
