"""The verbs that open no work plane, for both parsers: ``onboard``, ``doctor``, ``demo``, ``hooks install``,
``session commit``. Each takes the parsed keywords (``json``, ``path``... as declared in app.py) and
returns the exit code; app.py declares them with ``plain()`` and the fast path calls them directly.
"""

from __future__ import annotations

import os
import sys

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

from ...errors import UsageError
from .. import output


def help_(words: list[str] | None = None, json: bool = False, path: str | None = None) -> int:
    """``gw help [VERB...]``: the stored help of that command (``fast_help.py``), as ``gw VERB --help`` prints it
    (reads no repository: -C is accepted and unused)."""
    from ..fast_help import HELP

    command = " ".join(words or ())
    text = HELP.get(command)
    if text is None:
        return output.fail(UsageError(f"no command {command!r}: gw help lists them"), json)
    if json:
        output.emit_json({"ok": True, "item": None, "command": command, "help": text})
    else:
        sys.stdout.write(text)
    return 0


def onboard(json: bool = False, path: str | None = None) -> int:
    """It reads no repository (it can be run anywhere; -C is accepted and unused)."""
    from ...reports import ONBOARD

    if json:
        output.emit_json({"ok": True, "item": None, "snippet": ONBOARD})
    else:
        sys.stdout.write(ONBOARD)
    return 0


def doctor(json: bool = False, agent: str | None = None, path: str | None = None) -> int:
    """``gw doctor``: one line per check (gitwork/doctor.py); exit 1 when one fails. No work plane is opened
    first, so outside a repository it still reports, as a failed check."""
    from ...doctor import checks

    found = checks(path, agent)
    failed = [c for c in found if not c["ok"]]
    if json:
        output.emit_json(found)
    else:
        for c in found:
            output.line(f"{c['check']}: ok, {c['detail']}" if c["ok"] else
                        f"{c['check']}: {c['detail']}; fix: {c['fix']}")
    return 1 if failed else 0


def demo(what: str | None = None, keep: bool = False, json: bool = False) -> int:
    from ...demo import run, run_launch

    if what not in (None, "run"):
        return output.fail(UsageError(f"unknown demo {what!r}; known: run"), json)
    return run_launch(keep=keep, as_json=json) if what == "run" else run(keep=keep, as_json=json)


def hooks_install(server: str | None = None, use_hooks_path: bool = False, json: bool = False,
                  agent: str | None = None, path: str | None = None) -> int:
    """No work plane: a bare server repository has no state to read."""
    from .sessions import hooks_install as install

    return install(json, path, server=server, use_hooks_path=use_hooks_path)


def session_commit(session: str | None = None, file: list[str] | None = None, message: str = "",
                   json: bool = False, agent: str | None = None, path: str | None = None) -> int:
    """The files are named relative to -C (or the current directory), which the work plane does not
    keep, so the directory is passed along."""
    from ..actions import invoke
    from .sessions import commit

    return invoke(commit, as_json=json, path=path, agent=agent, session=session, file=file, message=message,
                  cwd=os.path.abspath(path or os.getcwd()))


def _config(json: bool, work: Any) -> int:
    from ...errors import GwError

    try:
        work()
    except GwError as error:
        return output.fail(error, json)
    return 0


def _plain_value(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, list):
        return ",".join(str(v) for v in value)
    if isinstance(value, dict):
        import json as _json

        return _json.dumps(value, ensure_ascii=False)
    return str(value)


def config_get(key: str, json: bool = False, path: str | None = None) -> int:
    """``gw config get KEY``: the value in force (nothing printed for an unset one)."""
    from ...settings_edit import get

    def work() -> None:
        found = get(path, key)
        if json:
            output.emit_json({"ok": True, "item": None, **found})
        else:
            sys.stdout.write(_plain_value(found["value"]) + "\n")

    return _config(json, work)


def config_set(key: str, value: str, shared: bool = False, json: bool = False, path: str | None = None) -> int:
    from ...settings_edit import set_value

    def work() -> None:
        done = set_value(path, key, value, shared)
        if json:
            output.emit_json({"ok": True, "item": None, **done})
            return
        output.info(f"{done['key']} = {_plain_value(done['value'])} (wrote {done['wrote']})")
        if done["source"] != done["wrote"] and not (done["source"] == "default"):
            output.info(f"note: {done['source']} overrides it here")
        if done["enforced_by_arbiter"]:
            output.info(f"note: with an arbiter remote, its own setting of {done['key']} is the one enforced")

    return _config(json, work)


def config_list(json: bool = False, path: str | None = None) -> int:
    from ...settings_edit import entries

    def work() -> None:
        found = entries(path)
        if json:
            output.emit_json({"ok": True, "item": None, "settings": found})
            return
        sys.stdout.write("".join(f"{e['key']} = {_plain_value(e['value'])}  ({e['source']})"
                                 f"{'  [arbiter]' if e['enforced_by_arbiter'] else ''}\n" for e in found))
        output.info("[arbiter]: with an arbiter remote, the one enforced is the remote's own setting")

    return _config(json, work)
