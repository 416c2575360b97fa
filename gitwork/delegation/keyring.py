"""The history of delegation keys: which public key each peer (and this side) had, and when.

A key in git config is replaced in place when it is rotated, but the records already on the state ref
stay signed by the old one. So each time the delegation configuration is read, the keys it names are
noted in ``<common git dir>/gitwork/delegation-keys.json`` (local, untracked, like the config itself)::

    {"peer:gpu": [{"key": "ssh-ed25519 AAAA...", "from": null, "until": "2026-12-02T01:00:00Z"},
                  {"key": "ssh-ed25519 BBBB...", "from": "2026-12-02T01:00:00Z", "until": null}],
     "self": [...]}

``from``/``until`` are when this side first and last saw the key in its config (``null``: before the
history began, or still current). :func:`valid_at` gives the keys that may have signed a document
dated ``at`` (the signed ``at`` of the request or receipt), with :data:`SKEW` of slack both ways for
two machines' clocks. The date is the signer's own claim: the history stops an old key from
verifying what is dated well after it was rotated out, not a thief of the old key from back-dating.
"""

from __future__ import annotations

import json
import os

from .. import clock
from ..errors import Corrupt

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

FILE = "delegation-keys.json"
SELF = "self"
SKEW = 300  # seconds: the same slack the request window allows between two clocks


def _path(gitwork_dir: str) -> str:
    return os.path.join(gitwork_dir, FILE)


def _load(path: str) -> dict[str, list[dict[str, Any]]]:
    try:
        with open(path, encoding="utf-8") as handle:
            doc = json.load(handle)
    except FileNotFoundError:
        return {}
    except (OSError, ValueError, RecursionError) as error:
        # Never rewritten over: it may hold the only trace of a rotated-out key.
        raise Corrupt(f"the delegation key history {path} is damaged ({error}); repair it or move it away "
                      "(records signed by rotated-out keys then no longer verify)") from None
    if not isinstance(doc, dict):
        raise Corrupt(f"the delegation key history {path} is not a JSON object; repair it or move it away")
    return {k: [e for e in v if isinstance(e, dict) and isinstance(e.get("key"), str)]
            for k, v in doc.items() if isinstance(k, str) and isinstance(v, list)}


def note(gitwork_dir: str, current: dict[str, str], now: Any = None) -> dict[str, list[dict[str, Any]]]:
    """Note the keys configured now (``{"peer:NAME" | "self": "type base64"}``); the whole history.

    A name whose key changed gets its old entry closed (``until`` now) and a new one opened (``from``
    now); a name no longer configured keeps its history (its records still verify). Written only when
    something changed, under a lock, by atomic replacement (a crash leaves the old history whole)."""
    import fcntl

    stamp = clock.format_instant(now or clock.now())
    path = _path(gitwork_dir)
    os.makedirs(gitwork_dir, exist_ok=True)
    history = _load(path)
    if all(history.get(name) and history[name][-1].get("until") is None and history[name][-1]["key"] == key
           for name, key in current.items()):
        return history  # the usual case: nothing rotated, no lock, no write
    fd = os.open(path + ".lock", os.O_RDWR | os.O_CREAT, 0o600)
    with os.fdopen(fd, "r+") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes
        history = _load(path)  # again, under the lock
        for name, key in current.items():
            entries = history.setdefault(name, [])
            if entries and entries[-1].get("until") is None and entries[-1]["key"] == key:
                continue
            if entries and entries[-1].get("until") is None:
                entries[-1]["until"] = stamp
            entries.append({"key": key, "from": stamp if entries else None, "until": None})
        from ..fsutil import write_atomic

        write_atomic(path, json.dumps(history, sort_keys=True, indent=1) + "\n", fsync=True)
    return history


def valid_at(history: dict[str, list[dict[str, Any]]], name: str, at: Any) -> list[str]:
    """The keys ``name`` had around the instant ``at`` (a signed document's ``at``); none if it is no instant."""
    try:
        when = clock.parse_instant(str(at)).timestamp()
    except (ValueError, TypeError):
        return []
    keys = []
    for entry in history.get(name, ()):
        try:
            since = clock.parse_instant(entry["from"]).timestamp() if entry.get("from") else None
            until = clock.parse_instant(entry["until"]).timestamp() if entry.get("until") else None
        except (ValueError, TypeError):
            continue
        if (since is None or when >= since - SKEW) and (until is None or when <= until + SKEW):
            keys.append(entry["key"])
    return keys


def ever(history: dict[str, list[dict[str, Any]]], name: str) -> list[str]:
    """Every key ``name`` ever had here."""
    return [entry["key"] for entry in history.get(name, ())]
