"""``gw serve`` and ``gw serve token add|list|revoke`` (docs/serve.md).

The server itself (``gitwork.serve.app``: FastAPI, uvicorn) is imported only inside :func:`serve`,
so the rest of ``gw`` never pays for it; the token verbs use ``gitwork.serve.tokens``, which is
standard library only.
"""

from __future__ import annotations

import sys

from ...errors import Invalid, UsageError
from .. import output

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

    from ...workplane import Workplane

DEFAULT_BIND = "127.0.0.1:8765"
LOOPBACK = ("127.0.0.1", "::1", "localhost")


def parse_bind(bind: str) -> tuple[str, int]:
    """``HOST:PORT`` (``[::1]:PORT`` for IPv6) → ``(host, port)``; port 0 picks a free one."""
    host, sep, port = bind.rpartition(":")
    if not sep or not port.isdigit() or int(port) > 65535 or not host:
        raise UsageError(f"--bind takes HOST:PORT, e.g. 127.0.0.1:8765 (got {bind!r})")
    return host.strip("[]"), int(port)


def serve(wp: Workplane, as_json: bool, bind: str | None, repo: str | None, public: bool,
          cors: list[str] | None) -> None:
    host, port = parse_bind(bind or DEFAULT_BIND)
    if host not in LOOPBACK and not public:
        raise Invalid(f"{host} is not a loopback address: anyone who can reach it may try tokens; "
                      "say --public to bind it anyway")
    try:
        from ...serve.app import serve as run
    except ImportError as exc:  # the extra is not installed
        raise UsageError(f"gw serve needs the serve extra: pip install 'gitwork[serve]' ({exc})") from exc
    path = repo or wp.repo.toplevel or wp.repo.git_dir
    if host not in LOOPBACK:
        output.info(f"gw serve: warning: listening on {host}, not only on this machine; use TLS in front of it")

    def ready(where: str, bound: int) -> None:
        url = f"http://{'[' + where + ']' if ':' in where else where}:{bound}"
        # Recorded before it is said: whoever reads the line below may run `gw show --web` at once,
        # and that command reads the record (it once came last, and a quick caller found no server).
        _record(wp, url)
        if as_json:
            output.emit_json({"ok": True, "item": None, "url": url, "repo": path})
            sys.stdout.flush()
        output.info(f"gw serve: {path} on {url} (board: {url}/, API: {url}/docs); Ctrl-C stops")
        sys.stderr.flush()

    try:
        run(path, host, port, cors_origins=cors or (), ready=ready)
    finally:
        _record(wp, None)


def _record(wp: Workplane, url: str | None) -> None:
    """Where this server listens, for ``gw show --web`` (cli/showview.py): written once it listens,
    removed when it stops (a record left by a killed server names a pid that is gone, and is ignored)."""
    import json
    import os

    from ...fsutil import write_atomic
    from ..showview import SERVE_FILE

    where = os.path.join(wp.repo.gitwork_dir(), SERVE_FILE)
    try:
        if url is None:
            os.unlink(where)
        else:  # whole or not at all: `gw show --web` may read it while it is written
            write_atomic(where, json.dumps({"url": url, "pid": os.getpid()}), fsync=False)
    except OSError:
        pass  # --web then says no server runs: nothing else depends on this file


def _tokens(wp: Workplane) -> Any:
    from ...serve.tokens import Tokens

    return Tokens(wp.repo.gitwork_dir())


def token_add(wp: Workplane, as_json: bool, name: str, role: str) -> None:
    token, entry = _tokens(wp).add(name, role)
    if as_json:
        output.emit_json({"ok": True, "item": None, "token": token, **{k: v for k, v in entry.items() if k != "sha256"}})
        return
    output.line(token)
    output.info(f"token {entry['id']} for {name} ({role}); shown once, stored hashed: keep it now")


def token_list(wp: Workplane, as_json: bool) -> None:
    rows = _tokens(wp).listing()
    if as_json:
        output.emit_json(rows)
        return
    output.table(("id", "name", "role", "created", "revoked"),
                 [(r["id"], r["name"], r["role"], r["created_at"], r.get("revoked_at") or "") for r in rows],
                 title="tokens")


def token_revoke(wp: Workplane, as_json: bool, which: str) -> None:
    revoked = _tokens(wp).revoke(which)
    if as_json:
        output.emit_json({"ok": True, "item": None, "revoked": revoked})
        return
    for entry in revoked:
        output.info(f"revoked token {entry['id']} of {entry['name']}")
