"""A multi-step session's folder and its recorded manifest: where the files are, reading and writing them
whole, the record on the state ref and one procedure's progress through it (:class:`Run`).

The lifecycle is in ``steps.py`` (docs/sessions.md, "Multi-step sessions").
"""

from __future__ import annotations

import os
import re

from .. import fsutil
from ..commands import SESSION_ID  # the one pattern (the session kind)
from ..errors import Invalid, NotFound
from ..records.sessions import (
    MAX_DOCUMENT_BYTES,
    branch_path,
    canonical,
    recorded_manifest,
)
from ..store import crash_point
from . import main_worktree, session_dir
from .rules import Rules
from .rules import load as load_rules

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

    from ..workplane import Workplane

STATE = "state.json"
_KEY = re.compile(r"step-([1-9][0-9]{0,3})/parallel-([1-9][0-9]{0,2})(/[a-z0-9][a-z0-9-]{0,39})?\Z")
MAX_RESPONSE_FILES = 1000
VALIDATOR_TIMEOUT = 300.0


# --- files -----------------------------------------------------------------------------------------


def write_atomic(path: str, data: bytes) -> None:
    """Write ``path`` whole or not at all, durably (:func:`gitwork.fsutil.write_atomic`), its folder made."""
    os.makedirs(os.path.dirname(path), exist_ok=True)
    fsutil.write_atomic(path, data, fsync=True)


def _read(path: str, limit: int = MAX_DOCUMENT_BYTES) -> bytes | None:
    try:
        with open(path, "rb") as handle:
            return handle.read(limit + 1)
    except (FileNotFoundError, IsADirectoryError, NotADirectoryError):
        return None


def _hash_file(path: str) -> str:
    import hashlib

    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 16), b""):
            digest.update(block)
    return digest.hexdigest()


def check_key(key: str) -> str:
    if not isinstance(key, str) or not _KEY.match(key):
        raise Invalid(f"bad branch key {str(key)[:60]!r}: step-N/parallel-M, or step-N/parallel-M/EXCHANGE")
    return key


def check_id(session: str) -> str:
    if not isinstance(session, str) or not SESSION_ID.match(session):
        raise Invalid(f"malformed session id {str(session)[:60]!r}")
    return session


def round_of(key: str) -> int:
    return int(key.split("/", 1)[0][len("step-"):])


def is_exchange(key: str) -> bool:
    return key.count("/") == 2


def _branch_key(n: int, m: int) -> str:
    return f"step-{n}/parallel-{m}"


class Where:
    """The folders of one session."""

    def __init__(self, top: str, session: str) -> None:
        self.top, self.session = top, session
        self.folder = session_dir(top, session)

    def branch(self, key: str) -> str:
        return os.path.join(self.folder, *key.split("/"))

    def request(self, key: str) -> str:
        return os.path.join(self.branch(key), "request", "request.json")

    def response_dir(self, key: str) -> str:
        return os.path.join(self.branch(key), "response")

    def response(self, key: str) -> str:
        return os.path.join(self.response_dir(key), "response.json")


# --- the record ------------------------------------------------------------------------------------


def _recorded(wp: Workplane, session: str) -> dict[str, Any] | None:
    return recorded_manifest(wp.context(), session)


def _recorded_file(wp: Workplane, session: str, key: str, *rest: str) -> bytes | None:
    return wp.context().file(branch_path(session, key, *rest))


def mirror(where: Where, manifest: dict[str, Any]) -> None:
    """Make the folder's ``state.json`` the recorded manifest (a published session's folder stays gone)."""
    if manifest["status"] == "done" and not os.path.isdir(where.folder):
        return  # a done session's folder stays gone
    path = os.path.join(where.folder, STATE)
    data = canonical(manifest)
    if _read(path, 1 << 20) != data:
        write_atomic(path, data)


def load(wp: Workplane, session: str) -> tuple[Where, dict[str, Any]]:
    """The session's folders and its recorded manifest, with the folder's copy brought in step."""
    check_id(session)
    manifest = _recorded(wp, session)
    if manifest is None:
        raise NotFound(f"no session {session} on the record (gw session list shows them)", session=session)
    where = Where(main_worktree(wp.repo), session)
    mirror(where, manifest)
    return where, manifest


class Run:
    """One procedure's progress: the session, its manifest as last recorded, and the transitions made."""

    def __init__(self, wp: Workplane, where: Where, manifest: dict[str, Any], fence: int | None) -> None:
        self.wp, self.where, self.manifest, self.fence = wp, where, manifest, fence
        self.transitions: list[dict[str, Any]] = []
        self._rules: Rules | None = None

    @property
    def rules(self) -> Rules:
        if self._rules is None:
            self._rules = load_rules(self.wp.settings)
        return self._rules

    def record(self, op: str, new: dict[str, Any], **fields: Any) -> None:
        """One transition: one op, one commit; then the folder's manifest mirrors it."""
        holder = new["holder"]
        lease = self.wp.lease(new["item"])
        if lease is not None and lease.is_active() and lease.holder == holder \
                and not new["leases"].get(holder, {}).get("released"):
            # The lease the holder acts under now (a new grant after a release and claim shows here).
            new["leases"][holder] = {"item": new["item"], "fence": lease.fence, "epoch": lease.epoch}
        applied = self.wp.record(op, item=new["item"], session=new["id"], manifest=canonical(new).decode("utf-8"),
                                 fence=self.fence, **fields)
        self.manifest = new
        self.transitions.append({"op": op, "branch": fields.get("key"), "commit": applied.commit,
                                 "command_id": applied.command["id"]})
        crash_point(f"{op}-recorded")
        mirror(self.where, new)

    def refresh(self) -> bool:
        """Take up what another process recorded meanwhile (``False``: nothing new, so a refusal stands)."""
        fresh = _recorded(self.wp, self.manifest["id"])
        if fresh is None or fresh == self.manifest:
            return False
        self.manifest = fresh
        mirror(self.where, fresh)
        return True

    def result(self, **extra: Any) -> dict[str, Any]:
        return {**view(self.where, self.manifest), "transitions": self.transitions, **extra}


def view(where: Where, manifest: dict[str, Any]) -> dict[str, Any]:
    """A session as the faces show it: the manifest, its folder, and what is open now."""
    open_ = sorted(k for k, b in manifest["branches"].items() if b["status"] == "open")
    return {"session": manifest["id"], "item": manifest["item"], "status": manifest["status"],
            "folder": where.folder if os.path.isdir(where.folder) else None, "open": open_,
            "finished": finished(manifest), "manifest": manifest}



def round_keys(manifest: dict[str, Any], n: int) -> list[str]:
    keys = [k for k in manifest["branches"] if not is_exchange(k) and round_of(k) == n]
    return sorted(keys, key=lambda k: int(k.rpartition("-")[2]))


def finished(manifest: dict[str, Any]) -> bool:
    """Every branch settled, the last round done, and it ran the chain's last step."""
    n = manifest["current"]
    keys = round_keys(manifest, n)
    if not keys or any(manifest["branches"][k]["status"] != "done" for k in keys):
        return False
    if any(b["status"] in ("open", "waiting") for b in manifest["branches"].values()):
        return False
    return manifest["branches"][keys[0]].get("position") == len(manifest["plan"]) - 1



def _ordered(keys: Any) -> list[str]:
    return sorted(keys, key=lambda k: (round_of(k), int(k.split("/")[1].rpartition("-")[2])))


def _open_run(wp: Workplane, session: str, fence: int | None) -> Run:
    where, manifest = load(wp, session)
    return Run(wp, where, manifest, fence)


