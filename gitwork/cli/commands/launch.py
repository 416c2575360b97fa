"""Running agents under a lease: ``run``, ``runs``, ``capture``, ``send``, ``stop``, ``detach``, ``attach``.

Each calls one function of ``gitwork.launch.run``; the state ref is only written through the
execution records (``ops/executions.py``) and lease commands that module submits.
"""

from __future__ import annotations

import json
import os
import sys

from .. import output

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

    from ...workplane import Workplane


def _line(info: dict[str, Any]) -> str:
    extra = f" code {info['code']}" if info.get("state") == "exited" else ""
    return (f"execution {info['execution']} of {info['item']}: {info['state']}{extra} ({info.get('backend')} on "
            f"{info.get('host')}, epoch {info.get('epoch')}, fence {info.get('fence')})")


def run(wp: Workplane, as_json: bool, item: str, command: list[str] | None, backend: str, ttl: str | None,
        execution: str | None, env: list[str] | None) -> None:
    from ...launch.run import run as run_

    info = run_(wp, item, command or [], backend, ttl=ttl, execution=execution, env=_environment(env))
    _refused(info)
    if as_json:
        output.emit_json({"ok": True, **info})
        return
    output.line(info["execution"])
    output.info(("already running: " if info["existing"] else "started ") + _line(info))


def _refused(info: dict[str, Any]) -> None:
    """Local commands the launch (or its pull) carried and the arbiter refused, one line each, as a claim's."""
    for entry in info.get("refused") or ():
        output.info(f"gw: refused on replay: {entry.get('command_id') or entry.get('commit')} "
                    f"({entry.get('op')} {entry.get('item') or ''}): {entry.get('error')}: {entry.get('message')}")


def _environment(pairs: list[str] | None) -> dict[str, str] | None:
    """``--env NAME=VALUE`` words as a mapping (the launcher checks the names and values)."""
    from ...errors import Invalid

    if not pairs:
        return None
    env: dict[str, str] = {}
    for pair in pairs:
        name, equals, value = pair.partition("=")
        if not equals or not name:
            raise Invalid(f"--env takes NAME=VALUE, not {pair[:60]!r}")
        env[name] = value
    return env


def runs(wp: Workplane, as_json: bool, item: str | None, state: str | None) -> None:
    from ...launch.run import runs as runs_

    rows = runs_(wp, item, state)
    if as_json:
        output.emit_json(rows)
        return
    output.table(("execution", "item", "state", "backend", "host", "epoch", "fence", "command"),
                 [(r["execution"], r["item"], r["state"] + (f" {r['code']}" if r.get("code") is not None else ""),
                   r.get("backend"), r.get("host"), r.get("epoch", ""), r.get("fence", ""),
                   " ".join(r.get("command") or [])) for r in rows], title="executions")


def capture(wp: Workplane, as_json: bool, execution: str, lines: int | None) -> None:
    from ...launch.run import capture as capture_
    from ...launch.run import get_execution

    text = capture_(wp, execution, lines)
    if as_json:
        record = get_execution(wp, execution)
        output.emit_json({"ok": True, "execution": execution, "item": record["item"], "state": record["state"],
                          "text": text})
        return
    sys.stdout.write(text)


def send(wp: Workplane, as_json: bool, execution: str, text: str, key: list[str] | None, enter: bool,
         wait: bool = False, timeout: float = 60.0) -> None:
    from ...errors import Invalid
    from ...launch.run import get_execution
    from ...launch.run import send as send_

    keys = [*(key or []), *(["Enter"] if enter else [])]
    if wait and key:
        raise Invalid("--wait sends the text as one line (Enter included): no --key with it")
    if not timeout >= 0 or timeout > 86400:
        raise Invalid(f"--timeout must be 0 to 86400 seconds (got {timeout:g})")
    send_(wp, execution, text, [] if wait else keys, wait=wait, timeout=timeout)
    keys = ["Enter"] if wait else keys
    if as_json:
        output.emit_json({"ok": True, "execution": execution, "item": get_execution(wp, execution)["item"],
                          "sent": text, "keys": keys, "waited": wait})
        return
    output.info(f"sent {len(text)} character(s){' and ' + ' '.join(keys) if keys else ''} to {execution}"
                + ("; it is back at its prompt" if wait else ""))


def detach(wp: Workplane, as_json: bool, execution: str, reason: str | None) -> None:
    from ...launch.run import release

    info = release(wp, execution, reason)
    if as_json:
        output.emit_json({"ok": True, **info})
        return
    output.line(info["execution"])
    output.info(_line(info))


def stop(wp: Workplane, as_json: bool, execution: str, reason: str | None, lost: bool = False) -> None:
    from ...launch.run import stop as stop_

    info = stop_(wp, execution, reason, lost)
    _refused(info)
    if as_json:
        output.emit_json({"ok": True, **info})
        return
    output.line(info["execution"])
    output.info(_line(info))


def attach(wp: Workplane, as_json: bool, execution: str) -> None:
    """With --json: how to attach (the command line), without attaching; else become that command."""
    from ...launch.run import attach_argv, get_execution

    argv = attach_argv(wp, execution)
    if as_json:
        output.emit_json({"ok": True, "execution": execution, "item": get_execution(wp, execution)["item"],
                          "argv": argv})
        return
    wp.close()
    os.execvp(argv[0], argv)


def coordinate(wp: Workplane, as_json: bool, once: bool, interval: str, failures: int, ttl: str | None = None) -> None:
    """One tick (``--once``: one JSON object), or a tick every interval (``--json``: one line per tick),
    each under this host's coordinator lease."""
    import signal

    from ...codec import parse_duration
    from ...errors import Invalid
    from ...launch.coordinate import default_ttl, loop
    from ...launch.coordinate import once as once_
    from ...launch.run import host

    seconds = parse_duration(interval)  # Invalid (exit 5) for a malformed one
    lease_ttl = parse_duration(ttl) if ttl else default_ttl(seconds)
    if lease_ttl < 2 * seconds:  # renewed once half is gone, at a pass: a shorter one lapses between passes
        raise Invalid(f"--ttl {ttl} is shorter than two intervals ({2 * seconds}s): the lease would lapse between passes")

    def report(actions: list[dict[str, Any]], stream: bool = True) -> None:
        if as_json:
            doc = {"ok": True, "host": host(), "actions": actions}
            if stream:  # JSON lines, one per pass, like `thread --follow --json`
                sys.stdout.write(json.dumps(doc, ensure_ascii=False) + "\n")
                sys.stdout.flush()
            else:
                output.emit_json(doc)
            return
        for a in actions:
            if a["action"] != "running":
                what = " ".join(str(a[k]) for k in ("session", "branch", "execution") if a.get(k)) or "coordinator"
                output.info(f"{what} ({a.get('item', '-')}): {a['action']}"
                            + "".join(f" {k}={a[k]}" for k in ("code", "reason", "message", "streak")
                                      if a.get(k) is not None))

    if once:
        report(once_(wp, failures, lease_ttl), stream=False)
        return
    # SIGTERM ends the loop like Ctrl-C: the lease is released on the way out (kill -9 leaves it to
    # the next coordinator, which takes over a dead holder's lease at once).
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    loop(wp, max(1, seconds), report, failures, lease_ttl)


def launcher(wp: Workplane, as_json: bool, status: bool = False) -> None:
    """Listen on this clone's launcher socket and serve each ``gw run`` handed to it, until SIGTERM/Ctrl-C
    (``status``: say whether one listens, and exit)."""
    from ...errors import Invalid
    from ...launch.resident import Launcher, launcher_common_dir, listening

    common = launcher_common_dir(wp.repo.toplevel or os.getcwd())
    if common != os.path.realpath(wp.repo.common_dir):
        raise Invalid(f"gw launcher serves the clone of its work tree ({common}), not {wp.repo.common_dir}")
    if status:
        from ...launch.client import socket_path

        pid = listening(socket_path(common))
        if as_json:
            output.emit_json({"ok": True, "running": pid is not None, "pid": pid, "socket": socket_path(common)})
        else:
            output.line(f"gw launcher {pid} listens on {socket_path(common)}" if pid is not None
                        else f"no gw launcher listens for {common}")
        return
    from ..fast import run as fast_run  # the same parsing and call as `gw run`'s own (main's fast path)

    resident = Launcher(common, fast_run)
    server = resident.bind()

    def ready() -> None:
        if as_json:
            sys.stdout.write(json.dumps({"ok": True, "socket": resident.path, "pid": os.getpid()}) + "\n")
        else:
            output.info(f"gw launcher {os.getpid()} serves gw run for {common} on {resident.path}")
        sys.stdout.flush()
        sys.stderr.flush()

    resident.serve(server, ready)
    output.info(f"gw launcher {os.getpid()} stopped after {resident.served} request(s)")


def context(wp: Workplane, as_json: bool, item: str) -> None:
    """The launch context of an item: the same text ``gw run`` gives an agent in launch.md."""
    from ...launch.context import build, render

    doc = build(wp, item)
    if as_json:
        output.emit_json({"ok": True, **doc})
        return
    sys.stdout.write(render(doc))
