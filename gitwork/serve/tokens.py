"""Bearer tokens of ``gw serve``: created by ``gw serve token add``, stored hashed in the common git dir.

The file is ``<git common dir>/gitwork/serve-tokens.json`` (mode 0600), one entry per token::

    {"tokens": [{"id": "t-3fa9c2d1", "name": "alice", "role": "person", "sha256": "...",
                 "created_at": "...", "revoked_at": null}]}

Only the SHA-256 of a token is kept: a token is 32 random bytes, so a fast hash is as good as a slow
one (nothing to guess), and the server can look a token up in one dictionary access. The server
re-reads the file when its modification time changes, so a ``gw serve token revoke`` takes effect on
the next request without a restart. Pure standard library: ``gw serve token ...`` imports no server.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import secrets

from ..clock import format_instant, now
from ..errors import Ambiguous, Corrupt, Invalid, NotFound
from ..fsutil import stamp
from ..ids import check_identity

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Iterator
    from typing import Any

ROLES = ("agent", "person", "admin")
FILE = "serve-tokens.json"
PREFIX = "gwt_"  # recognisable in logs and secret scanners


def digest(token: str) -> str:
    return hashlib.sha256(token.encode("utf-8", "surrogatepass")).hexdigest()


class Tokens:
    """The token file of one repository (``gitwork_dir``: ``Repository.gitwork_dir()``)."""

    def __init__(self, gitwork_dir: str) -> None:
        self.path = os.path.join(gitwork_dir, FILE)
        self._seen: tuple[int, int, int] | None = None  # (mtime_ns, size, inode) of the file last read
        self._by_hash: dict[str, dict[str, Any]] = {}

    # --- the file ---------------------------------------------------------------------------------

    def entries(self) -> list[dict[str, Any]]:
        try:
            with open(self.path, encoding="utf-8") as handle:
                doc = json.load(handle)
        except FileNotFoundError:
            return []
        except (OSError, ValueError) as exc:
            raise Corrupt(f"{self.path}: not a token file ({exc})") from exc
        tokens = doc.get("tokens") if isinstance(doc, dict) else None
        if not isinstance(tokens, list):
            raise Corrupt(f"{self.path}: not a token file (no 'tokens' list)")
        return tokens

    @contextlib.contextmanager
    def _changing(self) -> Iterator[None]:
        """Held while a verb reads, changes and writes the file back: two ``gw serve token add`` at once
        (a team's script adding its agents' tokens) must not each write the file without the other's
        token (a lost token answers 401 for good). A ``flock`` on a file beside it: a killed holder
        holds nothing."""
        handle = os.open(self.path + ".lock", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        try:
            fcntl.flock(handle, fcntl.LOCK_EX)
            yield
        finally:
            os.close(handle)

    def _write(self, entries: list[dict[str, Any]]) -> None:
        # Temporary file + rename: a reader never sees half a file; 0600: hashes are nobody else's business.
        from ..fsutil import write_atomic

        write_atomic(self.path, json.dumps({"tokens": entries}, indent=1) + "\n", fsync=True, mode=0o600)

    # --- the verbs ------------------------------------------------------------------------------

    def add(self, name: str, role: str = "agent") -> tuple[str, dict[str, Any]]:
        """A new token for ``name``: ``(the token, its entry)``. The token is shown once, never stored."""
        check_identity(name, "token name")
        if role not in ROLES:
            raise Invalid(f"unknown role {role!r}: use {', '.join(ROLES)}")
        token = PREFIX + secrets.token_urlsafe(32)
        entry = {"id": "t-" + secrets.token_hex(4), "name": name, "role": role, "sha256": digest(token),
                 "created_at": format_instant(now()), "revoked_at": None}
        with self._changing():
            entries = self.entries()
            entries.append(entry)
            self._write(entries)
        return token, entry

    def revoke(self, which: str) -> list[dict[str, Any]]:
        """Revoke the one live token whose id is ``which`` (or starts with it), or the one live token of the
        identity ``which``. Refused, nothing written: no such token (3), or ``which`` names several (4)."""
        with self._changing():
            return self._revoke(which)

    def _revoke(self, which: str) -> list[dict[str, Any]]:
        entries = self.entries()
        hit = [e for e in entries if e.get("revoked_at") is None and isinstance(e.get("id"), str)
               and (e["id"].startswith(which) or which == e.get("name"))] if which else []
        if not hit:
            raise NotFound(f"no live token named or numbered {which!r} (gw serve token list)", token=which)
        if len(hit) > 1:
            ids = ", ".join(f"{e['id']} ({e.get('name')})" for e in hit)
            raise Ambiguous(f"{which!r} names {len(hit)} live tokens: {ids}; revoke one by its id",
                            token=which, matches=[e["id"] for e in hit])
        hit[0]["revoked_at"] = format_instant(now())
        self._write(entries)
        return [public(e) for e in hit]

    def listing(self) -> list[dict[str, Any]]:
        return [public(e) for e in self.entries()]

    # --- the server's side ----------------------------------------------------------------------

    def _refresh(self) -> None:
        seen = stamp(self.path)
        if seen != self._seen:
            self._by_hash = {e["sha256"]: e for e in self.entries() if isinstance(e, dict) and "sha256" in e}
            self._seen = seen

    def live(self, token_id: str) -> bool:
        """Whether the token with id ``token_id`` is live now (re-reads a changed file)."""
        self._refresh()
        return any(e.get("id") == token_id and e.get("revoked_at") is None and e.get("role") in ROLES
                   for e in self._by_hash.values())

    def lookup(self, token: str) -> dict[str, Any] | None:
        """The live entry of ``token`` (``None``: unknown or revoked); re-reads a changed file."""
        self._refresh()
        entry = self._by_hash.get(digest(token))
        if entry is None or entry.get("revoked_at") is not None or entry.get("role") not in ROLES:
            return None
        return entry


def public(entry: dict[str, Any]) -> dict[str, Any]:
    """An entry without its hash (what ``gw serve token list`` shows)."""
    return {key: value for key, value in entry.items() if key != "sha256"}
