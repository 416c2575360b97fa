"""Sessions and hooks: ``session start|commit|list|drop``, ``publish``, ``hooks install``, and the
multi-step lifecycle ``session create|status|done|stop`` and ``step next|submit|wait|block|resume``.

Each calls one function of ``gitwork.sessions`` (``gitwork.sessions.steps`` for the multi-step
verbs), ``gitwork.publish`` or ``gitwork.hooks_install``;
the state ref is only ever written through command documents those functions submit.
"""

from __future__ import annotations

import os

from ...errors import ExitCode, GwError
from .. import output

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

    from ...workplane import Workplane


def start(wp: Workplane, as_json: bool, item: str, from_ref: str | None, fence: int | None) -> None:
    from ...sessions import start as start_

    info = start_(wp, item, from_ref=from_ref, fence=fence)
    if as_json:
        output.emit_json({"ok": True, **info})
        return
    output.line(info["worktree"])
    target = f", publishes into {info['into']}" if info.get("into") else ""
    output.info(f"session {info['session']} for {info['item']} (fence {info['fence']}) on {info['branch']} "
                f"at {info['base'][:12]}{target}")


def commit(wp: Workplane, as_json: bool, session: str | None, file: list[str] | None, message: str, cwd: str) -> None:
    from ...sessions import commit as commit_

    info = commit_(wp, list(file or []), message, session=session, cwd=cwd)
    if as_json:
        output.emit_json({"ok": True, **info})
        return
    output.line(info["commit"])
    output.info(f"committed {len(info['files'])} file(s) on {info['branch']} (session {info['session']}, "
                f"fence {info['fence']}); recorded in {info['item']}'s history")


def list_sessions(wp: Workplane, as_json: bool) -> None:
    """Commit-once session branches (``kind: branch``) and multi-step sessions (``kind: steps``)."""
    from ...sessions import list_sessions as list_
    from ...sessions.steps import read_sessions

    rows = [{"kind": "branch", **r} for r in list_(wp)]
    rows += [{"kind": "steps", **r, "state": r["status"]} for r in read_sessions(wp)]
    if as_json:
        output.emit_json(rows)
        return
    output.table(("session", "item", "holder", "state", "lease", "commit", "into"),
                 [(r["session"], r["item"], r.get("holder"), r.get("state"), _lease_column(r),
                   str(r.get("commit") or "")[:12], r.get("into") or r.get("chain") or "") for r in rows],
                 title="sessions")


def _lease_column(row: dict[str, Any]) -> str:
    if row.get("kind") == "steps":
        return "" if row.get("state") in ("done", "stopped") else f"step {row.get('current')}"
    if row.get("state") in ("published", "dropped"):
        return ""
    return "live" if row.get("live") else "ended (drop it)"


def drop(wp: Workplane, as_json: bool, session: str, keep_branch: bool, reason: str | None) -> None:
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


def publish(wp: Workplane, as_json: bool, session: str | None, into: str | None, remote: str | None,
             keep_open: bool = False, force: bool = False, reason: str | None = None, queue: bool = False) -> None:
    if queue:
        if keep_open or force or reason:
            from ...errors import UsageError

            raise UsageError("--queue takes --into and --remote only: the publisher marks the item done when it lands")
        from .queue import enqueue

        enqueue(wp, as_json, session, into=into, remote=remote)
        return
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


# --- multi-step sessions (gitwork/sessions/steps.py) ----------------------------------------------


def _steps_report(info: dict[str, Any], as_json: bool, headline: str) -> None:
    if as_json:
        output.emit_json({"ok": True, **info})
        return
    output.line(info["session"])
    made = ", ".join(f"{t['op']}" + (f" {t['branch']}" if t.get("branch") else "") for t in info.get("transitions", []))
    output.info(f"{headline}: session {info['session']} of {info['item']} is {info['status']}"
                + (f"; recorded {made}" if made else "; nothing to record")
                + (f"; open: {', '.join(info['open'])}" if info.get("open") else "")
                + ("; its chain is finished (gw session done)" if info.get("finished") and info["status"] == "running"
                   else ""))


def _schemas() -> None:
    """The multi-step verbs check their documents with fastjsonschema (the sessions extra): without it
    they are refused before anything is written (a lease taken, a request written), naming the extra."""
    import importlib.util

    # Found, not imported: importing it costs ~13 ms of every session verb's start, and only a schema check needs it.
    if importlib.util.find_spec("fastjsonschema") is None:
        from ..actions import missing_extra

        exc = ModuleNotFoundError("No module named 'fastjsonschema'", name="fastjsonschema")
        raise missing_extra(exc) or exc from None


def create(wp: Workplane, as_json: bool, item: str, chain: str, project: str | None, fence: int | None) -> None:
    _schemas()
    from ...sessions.steps import create as create_

    info = create_(wp, item, chain, fence=fence, project=project)
    _steps_report(info, as_json, "continued" if info.get("existing") else "created")
    if not as_json and info.get("folder"):
        output.info(f"folder: {info['folder']}")


def status(wp: Workplane, as_json: bool, session: str) -> None:
    from ...sessions.steps import read_session

    info = read_session(wp, session)
    if as_json:
        output.emit_json({"ok": True, **info})
        return
    manifest = info["manifest"]
    output.table(("branch", "operator", "stage", "status", "request"),
                 [(key, manifest["steps"].get(key), b["stage"], b["status"], manifest["requests"].get(key, "")[:12])
                  for key, b in sorted(manifest["branches"].items())],
                 title=f"session {info['session']} ({manifest['chainName']}, {info['status']})")


def step_next(wp: Workplane, as_json: bool, session: str, launch: bool, backend: str, fence: int | None) -> None:
    _schemas()
    from ...sessions.steps import next_step

    info = next_step(wp, session, launch=launch, backend=backend, fence=fence)
    if as_json:
        output.emit_json({"ok": True, **info})
        return
    for settled in info.get("settled", []):  # operators that ended with their branch open
        output.info(f"{settled['branch']}: {settled['action']}"
                    + (f" ({settled['reason']})" if settled.get("reason") else f" ({settled.get('answer')})"))
    for row in info["branches"]:
        started = f" (execution {row['execution']['execution']})" if row.get("execution") else ""
        output.line(f"{row['branch']}\t{row['operator']}\t{row['kind']}\t{row['path']}{started}")
    _steps_report(info, False, "next")


def _answered(branch: str, info: dict[str, Any]) -> str:
    return f"{branch}: " + ("recorded already" if info.get("already") else str(info.get("answer")))


def step_submit(wp: Workplane, as_json: bool, session: str, branch: str, fence: int | None) -> None:
    _schemas()
    from ...sessions.steps import submit

    info = submit(wp, session, branch, fence=fence)
    _steps_report(info, as_json, _answered(branch, info))


def step_wait(wp: Workplane, as_json: bool, session: str, branch: str, timeout: float, fence: int | None) -> None:
    _schemas()
    from ...sessions.steps import wait

    info = wait(wp, session, branch, timeout=timeout, fence=fence)
    _steps_report(info, as_json, _answered(branch, info))


def step_block(wp: Workplane, as_json: bool, session: str, branch: str, reason: str, fence: int | None) -> None:
    _schemas()
    from ...sessions.steps import block

    info = block(wp, session, branch, reason, fence=fence)
    _steps_report(info, as_json, f"{branch}: blocked")


def step_resume(wp: Workplane, as_json: bool, session: str, fence: int | None) -> None:
    _schemas()
    from ...sessions.steps import resume

    info = resume(wp, session, fence=fence)
    _steps_report(info, as_json, "resumed")


def session_done(wp: Workplane, as_json: bool, session: str, route: str, fence: int | None) -> None:
    _schemas()
    from ...sessions.steps import done

    info = done(wp, session, route=route, fence=fence)
    _steps_report(info, as_json, f"done ({route})")


def session_stop(wp: Workplane, as_json: bool, session: str, reason: str | None, fence: int | None) -> None:
    _schemas()
    from ...sessions.steps import stop

    info = stop(wp, session, reason=reason, fence=fence)
    _steps_report(info, as_json, "stopped")
