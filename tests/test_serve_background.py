"""What ``gw serve`` runs beside its requests: the ref watcher behind every open board page
(``serve.server.RefWatcher``), which a stream whose browser went away must never stop from waking the
others; and the read cache's warm-up at start (``Server.warm``).

Starlette cancels the stream of a page that is closed or navigated away from through an anyio cancel
scope, which delivers the cancellation again on each turn of the loop until the task is gone. With the
watcher's former ``asyncio.Condition`` under ``asyncio.wait_for``, one such cancellation landing a few
steps after a change left the condition's lock held by a finished task: the watcher blocked on its next
change, and every open page stopped updating (the board test that waits for a stopped execution timed
out). The watcher here looks at the ref on every turn of the loop (poll 0), so each interleaving below
is the same on every run; the sweep covers the steps around a change where the lock was lost.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest

anyio = pytest.importorskip("anyio", reason="gw serve needs the serve extra (pip install -e '.[test]')")

from conftest import make_repo  # noqa: E402
from gitwork import cache  # noqa: E402
from gitwork.serve.server import RefWatcher  # noqa: E402
from gitwork.workplane import Workplane  # noqa: E402

GUARD = 20.0  # seconds: only a watcher that hangs for good reaches it (a failure, not a measurement)


def test_a_stream_cancelled_around_a_change_leaves_the_watcher_waking_the_others(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "repo")
    wp = Workplane(str(repo), agent="root")
    wp.do("init")

    async def main() -> list[tuple[int, int]]:
        watcher = RefWatcher(str(repo), 0)
        await watcher.start()
        woken = []
        try:
            for before in range(4):  # turns of the loop between the stream's wait and the change
                for after in range(8):  # turns between the change and the cancellation
                    other = asyncio.ensure_future(watcher.changed_since(watcher.version, GUARD))
                    seen = watcher.version
                    async with anyio.create_task_group() as group:  # how Starlette ends a stream whose client left
                        group.start_soon(watcher.changed_since, watcher.version, GUARD)
                        for _ in range(before):
                            await asyncio.sleep(0)
                        wp.do("new", title=f"change {before}.{after}")  # the state ref moves (a real commit)
                        for _ in range(after):
                            await asyncio.sleep(0)
                        group.cancel_scope.cancel()
                    # The other open stream wakes for this change, and the next stream for the next one.
                    assert await asyncio.wait_for(other, GUARD) > seen, (before, after)
                    woken.append((before, after))
            last = watcher.version
            wp.do("new", title="one more")
            assert await asyncio.wait_for(watcher.changed_since(last, GUARD), GUARD) == last + 1
        finally:
            await watcher.stop()
        return woken

    try:
        assert len(asyncio.run(main())) == 32
    finally:
        wp.close()


def test_a_waiter_times_out_unchanged_and_a_token_file_change_wakes_it(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "repo")
    with Workplane(str(repo), agent="root") as wp:
        wp.do("init")
    tokens = tmp_path / "tokens"
    tokens.write_text("a\n")

    async def main() -> None:
        watcher = RefWatcher(str(repo), 0.01, str(tokens))
        await watcher.start()
        try:
            version, count = watcher.version, watcher.tokens
            assert await watcher.changed_since(version, 0.05, count) == version  # nothing moved: its version
            waiting = asyncio.ensure_future(watcher.changed_since(version, GUARD, count))
            await asyncio.sleep(0)
            tokens.write_text("a\nb\n")  # a token added or revoked: open streams re-check theirs
            assert await asyncio.wait_for(waiting, GUARD) == version
            assert watcher.tokens == count + 1
        finally:
            await watcher.stop()

    asyncio.run(main())


def test_the_server_builds_the_read_cache_at_start_without_a_request(tmp_path: Path) -> None:
    pytest.importorskip("fastapi", reason="gw serve needs the serve extra (pip install -e '.[test]')")
    from gitwork.serve.app import create_app
    from gitwork.serve.threaded import Running

    repo = make_repo(tmp_path / "repo")
    with Workplane(str(repo), agent="root") as wp:
        wp.do("init")
        wp.do("batch", ops=[{"op": "new", "title": f"item {n}"} for n in range(20)])
        path = cache.path_for(wp.context().snapshot)
        tip = wp.store.tip()
    cache.drop(path)
    assert cache.status(path)["commit"] is None
    with Running(create_app(str(repo))):
        deadline = time.monotonic() + GUARD  # a guard against a hang, not a measurement
        while cache.status(path)["commit"] != tip:
            assert time.monotonic() < deadline, "gw serve did not build the read cache"
            time.sleep(0.02)
    assert cache.status(path)["items"] == 20
