"""The Server-Sent Events streams of ``gw serve``: the state ref's moves and an item's thread.

Both wait on the one :class:`~gitwork.serve.server.RefWatcher` (one read of the ref per poll for all
streams) and both end as soon as the token they were opened with is revoked: the watcher also watches
the token file, and a stream re-checks its token on each change of it (within one poll, 100 ms).
"""

from __future__ import annotations

import asyncio
import functools
import json
from typing import Any, AsyncIterator

from fastapi.responses import StreamingResponse

from .. import gitcmd
from ..errors import GwError, UsageError
from .server import Principal, Server, read_thread

KEEPALIVE = 15.0  # seconds between comments on an idle stream (proxies close silent connections)


def stream(events: AsyncIterator[str]) -> StreamingResponse:
    return StreamingResponse(events, media_type="text/event-stream",
                             headers={"Cache-Control": "no-store", "X-Accel-Buffering": "no"})


def sse(event: str, data: Any, event_id: Any = None) -> str:
    head = f"id: {event_id}\n" if event_id is not None else ""
    return f"{head}event: {event}\ndata: {json.dumps(data, ensure_ascii=False)}\n\n"


@functools.lru_cache(maxsize=256)
def _moves(path: str, previous: str | None, commit: str | None) -> int | None:
    """How many commits (one per command) lie in ``previous..commit``; ``None`` when git cannot say (the
    ref was rewound or the objects are gone). Cached: every open stream asks about the same range."""
    if commit is None:
        return 0
    span = f"{previous}..{commit}" if previous else commit
    try:
        done = gitcmd.run(["rev-list", "--count", span], cwd=path, check=True, timeout=30)
    except GwError:
        return None
    text = done.out.strip()
    return int(text) if text.isdigit() else None


async def follow_ref(server: Server, who: Principal) -> AsyncIterator[str]:
    """``hello`` with the tip, then one ``state`` event per change seen: it covers every move in
    ``previous..commit`` (``range``; ``moves`` counts them), several when they land within one poll."""
    watcher = server.watcher
    await watcher.start()
    version, tokens, seen = watcher.version, watcher.tokens, watcher.tip
    yield sse("hello", {"commit": seen})
    while True:
        now = await watcher.changed_since(version, KEEPALIVE, tokens)
        if watcher.tokens != tokens:
            tokens = watcher.tokens
            if not await asyncio.to_thread(server.live, who):
                return  # the token was revoked: the stream ends
        if now == version:
            if watcher.tokens == tokens:
                yield ": keep-alive\n\n"
            continue
        version, tip = now, watcher.tip
        if tip != seen:
            moves = await asyncio.to_thread(_moves, server.path, seen, tip)
            span = f"{seen}..{tip}" if seen else tip
            yield sse("state", {"commit": tip, "previous": seen, "range": span, "moves": moves}, tip)
            seen = tip


def last_event_id(header: str | None, since: int) -> int:
    """Where a thread stream starts: after ``Last-Event-ID`` (a reconnecting EventSource's last message
    number) when the request carries one, else after ``since``."""
    if header is None or not header.strip():
        return since
    text = header.strip()
    if not text.isdigit() or len(text) > 18:
        raise UsageError(f"Last-Event-ID is a message number, not {text[:40]!r}")
    return int(text)


async def follow_thread(server: Server, who: Principal, item_id: str, since: int) -> AsyncIterator[str]:
    """Every message after ``since``, then each new one as it lands; the SSE id is its number."""
    watcher = server.watcher
    await watcher.start()
    last, tokens = since, watcher.tokens
    while True:
        version = watcher.version  # before the read: a message landing after it wakes the wait
        _item, records = await asyncio.to_thread(read_thread, server, who, item_id, last)
        for record in records:
            yield sse("message", record, record["seq"])
            last = record["seq"]
        while True:
            now = await watcher.changed_since(version, KEEPALIVE, tokens)
            if watcher.tokens != tokens:
                tokens = watcher.tokens
                if not await asyncio.to_thread(server.live, who):
                    return  # the token was revoked: the stream ends
                if now == version:
                    continue  # only the token file changed: keep waiting for the ref
            if now == version:
                yield ": keep-alive\n\n"
            break
