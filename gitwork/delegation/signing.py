"""Signing for delegation: ``gitwork.sshsig`` (``ssh-keygen -Y sign|verify``), and replay protection.

Replay protection (:class:`Nonces`): a signed request carries a random nonce and the instant it was
made; a peer refuses one made more than :data:`WINDOW` seconds from its own clock, and one whose
nonce it has seen (unless it is the very same request again, never answered: a retry after the peer
stopped mid-way, see :meth:`Nonces.remember`). Nonces are remembered in the common git dir for twice
the window, at most :data:`MAX_NONCES` at once (beyond that new requests are refused, never old nonces forgotten early).
"""

from __future__ import annotations

import json
import os

from ..errors import Forbidden, Held
from ..sshsig import public_key, sign, verify

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Callable

__all__ = ["WINDOW", "MAX_NONCES", "Nonces", "public_key", "sign", "verify"]

WINDOW = 300  # seconds a signed request stays acceptable (both ways: clocks differ)
MAX_NONCES = 10_000


class Nonces:
    """The nonces seen in the last two windows, in ``<common git dir>/gitwork/delegation-nonces``."""

    def __init__(self, gitwork_dir: str) -> None:
        self.path = os.path.join(gitwork_dir, "delegation-nonces")

    def check_fresh(self, made_at: float, now: float) -> None:
        if abs(now - made_at) > WINDOW:
            raise Forbidden(f"request made {int(now - made_at)}s from this peer's clock (window {WINDOW}s): "
                            "stale or replayed", reason="replay")

    def remember(self, nonce: str, now: float, digest: str = "", until: float | None = None) -> None:
        """Record ``nonce`` (of the request whose bytes have ``digest``); refused (exit 77) if it was
        seen before, 75 if the store is full.

        The very same bytes again, while their first arrival was never answered (the peer stopped
        while acting: :meth:`settle` was not reached, and no receipt was recorded), are the sender's
        retry under the same id and are let through: the op is done again, and a start settles on the
        execution its request id names instead of launching a second one."""
        def seen(kept: list[dict[str, object]]) -> list[dict[str, object]]:
            same = [entry for entry in kept if entry.get("n") == nonce]
            if same and not (digest and all(e.get("d") == digest and not e.get("a") for e in same)):
                raise Forbidden("this request was seen before (same nonce): replayed", reason="replay")
            if not same and len(kept) >= MAX_NONCES:
                raise Held(f"more than {MAX_NONCES} requests in {2 * WINDOW}s; try again later")
            return kept if same else [*kept, {"n": nonce, "t": max(now, until or now), "d": digest}]

        self._update(now, seen)

    def settle(self, nonce: str, now: float) -> None:
        """The request with ``nonce`` was answered (refused): the same bytes again are a replay."""
        self._update(now, lambda kept: [{**e, "a": 1} if e.get("n") == nonce else e for e in kept])

    def _update(self, now: float, change: Callable[[list[dict[str, object]]], list[dict[str, object]]]) -> None:
        """Apply ``change`` to the entries of the last two windows, under the file's lock."""
        import fcntl

        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o600)
        with os.fdopen(fd, "r+", encoding="utf-8") as handle:
            fcntl.flock(handle, fcntl.LOCK_EX)  # released when the file closes
            kept: list[dict[str, object]] = []
            for line in handle.read().splitlines():
                try:
                    entry = json.loads(line)
                    if now - float(entry["t"]) <= 2 * WINDOW:
                        kept.append(entry)
                except (ValueError, KeyError, TypeError):
                    continue  # a torn line from a crash: dropping it keeps at most one nonce less
            kept = change(kept)
            handle.seek(0)
            handle.truncate()
            handle.write("".join(json.dumps(entry, sort_keys=True) + "\n" for entry in kept))
            handle.flush()
            os.fsync(handle.fileno())
