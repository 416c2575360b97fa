"""Signing for delegation: ``gitwork.sshsig`` (``ssh-keygen -Y sign|verify``), and replay protection.

Replay protection (:class:`Nonces`): a signed request carries a random nonce and the instant it was
made; a peer refuses one made more than :data:`WINDOW` seconds from its own clock, and one whose
nonce it has seen. Nonces are remembered in the common git dir for twice the window, at most
:data:`MAX_NONCES` at once (beyond that new requests are refused, never old nonces forgotten early).
"""

from __future__ import annotations

import json
import os

from ..errors import Forbidden, Held
from ..sshsig import public_key, sign, verify

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

    def remember(self, nonce: str, now: float) -> None:
        """Record ``nonce``; refused (exit 77) if it was seen before, 75 if the store is full."""
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
            if any(entry.get("n") == nonce for entry in kept):
                raise Forbidden("this request was seen before (same nonce): replayed", reason="replay")
            if len(kept) >= MAX_NONCES:
                raise Held(f"more than {MAX_NONCES} requests in {2 * WINDOW}s; try again later")
            kept.append({"n": nonce, "t": now})
            handle.seek(0)
            handle.truncate()
            handle.write("".join(json.dumps(entry, sort_keys=True) + "\n" for entry in kept))
            handle.flush()
            os.fsync(handle.fileno())
