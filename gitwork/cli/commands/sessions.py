"""Session branches and hooks: ``session start|commit|list|drop``, ``publish``, ``hooks install``.

Each calls one function of ``gitwork.sessions``, ``gitwork.publish`` or ``gitwork.hooks_install``;
the state ref is only ever written through command documents those functions submit.
"""

from __future__ import annotations

import os

from ...errors import ExitCode, GwError
from .. import output

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any


def start(wp: Any, as_json: bool, item: str, from_ref: str | None, fence: int | None) -> None:
    from ...sessions import start as start_

    info = start_(wp, item, from_ref=from_ref, fence=fence)
    if as_json:
        output.emit_json({"ok": True, **info})
        return
    output.line(info["worktree"])
    target = f", publishes into {info['into']}" if info.get("into") else ""
    output.info(f"session {info['session']} for {info['item']} (fence {info['fence']}) on {info['branch']} "
                f"at {info['base'][:12]}{target}")


def commit(wp: Any, as_json: bool, session: str | None, file: list[str] | None, message: str, cwd: str) -> None:
    from ...sessions import commit as commit_

    info = commit_(wp, list(file or []), message, session=session, cwd=cwd)
    if as_json:
        output.emit_json({"ok": True, **info})
        return
    output.line(info["commit"])
    output.info(f"committed {len(info['files'])} file(s) on {info['branch']} (session {info['session']}, "
                f"fence {info['fence']}); recorded in {info['item']}'s history")


def list_sessions(wp: Any, as_json: bool) -> None:
    from ...sessions import list_sessions as list_

    rows = list_(wp)
    if as_json:
        output.emit_json(rows)
        return
    output.table(("session", "item", "holder", "state", "lease", "commit", "into"),
                 [(r["session"], r["item"], r.get("holder"), r.get("state"), _lease_column(r),
                   str(r.get("commit") or "")[:12], r.get("into") or "") for r in rows], title="sessions")


def _lease_column(row: dict[str, Any]) -> str:
    if row.get("state") in ("published", "dropped"):
        return ""
    return "live" if row.get("live") else "ended (drop it)"


def drop(wp: Any, as_json: bool, session: str, keep_branch: bool, reason: str | None) -> None:
    from ...sessions import drop as drop_

    info = drop_(wp, session, keep_branch=keep_branch, reason=reason)
    if as_json:
        output.emit_json({"ok": True, **info})
        return
    output.line(info["session"])
    if info["commit"]:
        kept = (f"kept on {info['branch_name']}" if info["branch"] == "kept"
                else f"branch {info['branch_name']} deleted; `git branch NAME {info['commit'][:12]}` recovers it "
                     "until git prunes it")
        output.info(f"dropped session {info['session']} of {info['item']}: threw away commit {info['commit'][:12]} "
                    f"({', '.join(info['files']) or 'no files'}); {kept}")
    else:
        output.info(f"dropped session {info['session']} of {info['item']} (it had no commit)")
    if info["uncommitted"]:
        output.info(f"threw away uncommitted files in its worktree: {', '.join(info['uncommitted'])}")
    for warning in info.get("warnings", []):
        output.info(f"warning: {warning}")


def publish(wp: Any, as_json: bool, session: str | None, into: str | None, remote: str | None,
             keep_open: bool = False, force: bool = False, reason: str | None = None) -> None:
    from ...publish import publish as publish_

    info = publish_(wp, session, into=into, remote=remote, keep_open=keep_open, force=force, reason=reason)
    if as_json:
        output.emit_json({"ok": True, **info})
        return
    output.line(info["commit"])
    where = info["into"] + (f" on {info['remote']}" if info["remote"] else "")
    moved = f"; updated the checkout at {info['worktree_updated']}" if info.get("worktree_updated") else ""
    output.info(f"published session {info['session']} into {where} by {info['mode']} "
                f"({info['previous'][:12]} → {info['commit'][:12]}){moved}; "
                + ("lease kept, item still in progress" if keep_open else f"{info['item']} done, lease released"))
    for warning in info.get("warnings", []):
        output.info(f"warning: {warning}")


def hooks_install(as_json: bool, path: str | None, server: str | None, use_hooks_path: bool) -> int:
    """``gw hooks install`` opens no work plane (a bare server repository has no state to read), so it
    is run directly rather than through ``actions.invoke``; it returns the exit code."""
    from ...hooks_install import install_local, install_server

    try:
        if server:
            report = install_server(server, use_hooks_path=use_hooks_path)
        else:
            report = install_local(path, use_hooks_path=use_hooks_path)
    except GwError as error:
        return output.fail(error, as_json)
    except Exception as exc:  # a bug: still one line and a documented code
        if "GW_TRACEBACK" in os.environ:
            raise
        return output.internal(exc, as_json)
    if as_json:
        output.emit_json({"ok": True, **report})
        return int(ExitCode.OK)
    for hook in report["hooks"]:
        chained = f" (chains {hook['legacy']})" if hook["legacy"] else ""
        output.info(f"{hook['status']}: {hook['path']}{chained}")
    return int(ExitCode.OK)
