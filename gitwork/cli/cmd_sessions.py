"""CLI for session branches: ``gw session start|commit|list|drop``, ``gw publish``, ``gw hooks install``.

Thin like the rest of the CLI: each command parses its options and calls one function of
``gitwork.sessions``, ``gitwork.publish`` or ``gitwork.hooks_install``; the state ref is only ever
written through command documents those functions submit.
"""

from __future__ import annotations

import os
from typing import Annotated, Any, Optional

import typer

from ..errors import ExitCode, GwError
from . import output
from .app import As, Fence, ItemArg, Json, Repo, _run, app

session_app = typer.Typer(
    help="Session branches: the holder's own commit-once branch and worktree for an item.", no_args_is_help=True
)
app.add_typer(session_app, name="session")
hooks_app = typer.Typer(help="Git hooks that keep session branches commit-once and fenced.", no_args_is_help=True)
app.add_typer(hooks_app, name="hooks")

SessionArg = Annotated[
    Optional[str], typer.Argument(help="Session id (default: the worktree you are in, or your only open one).",
                                  show_default=False)
]


# --- what the commands do (same shape as cli/actions.py: (wp, as_json, **kwargs)) ----------------------


def _start(wp: Any, as_json: bool, item: str, from_ref: str | None, fence: int | None) -> None:
    from ..sessions import start

    info = start(wp, item, from_ref=from_ref, fence=fence)
    if as_json:
        output.emit_json({"ok": True, **info})
        return
    output.line(info["worktree"])
    target = f", publishes into {info['into']}" if info.get("into") else ""
    output.info(f"session {info['session']} for {info['item']} (fence {info['fence']}) on {info['branch']} "
                f"at {info['base'][:12]}{target}")


def _commit(wp: Any, as_json: bool, session: str | None, files: list[str], message: str, cwd: str) -> None:
    from ..sessions import commit

    info = commit(wp, files, message, session=session, cwd=cwd)
    if as_json:
        output.emit_json({"ok": True, **info})
        return
    output.line(info["commit"])
    output.info(f"committed {len(info['files'])} file(s) on {info['branch']} (session {info['session']}, "
                f"fence {info['fence']}); recorded in {info['item']}'s history")


def _list(wp: Any, as_json: bool) -> None:
    from ..sessions import list_sessions

    rows = list_sessions(wp)
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


def _drop(wp: Any, as_json: bool, session: str, keep_branch: bool, reason: str | None) -> None:
    from ..sessions import drop

    info = drop(wp, session, keep_branch=keep_branch, reason=reason)
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


def _publish(wp: Any, as_json: bool, session: str | None, into: str | None, remote: str | None,
             keep_open: bool = False, force: bool = False, reason: str | None = None) -> None:
    from ..publish import publish

    info = publish(wp, session, into=into, remote=remote, keep_open=keep_open, force=force, reason=reason)
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


# --- commands ------------------------------------------------------------------------------------


@session_app.command("start")
def session_start(
    item: ItemArg,
    from_ref: Annotated[Optional[str], typer.Option("--from", help="Commit to start from (default HEAD).")] = None,
    fence: Fence = None, json: Json = False, agent: As = None, path: Repo = None,
) -> None:
    """Open a session for an item you hold: a session/<id> branch and its worktree; prints the path."""
    _run(_start, json, path, agent, item=item, from_ref=from_ref, fence=fence)


@session_app.command("commit")
def session_commit(
    session: SessionArg = None,
    file: Annotated[Optional[list[str]], typer.Option("--file", "-f", help="A file this commit changes (repeat).")] = None,
    message: Annotated[str, typer.Option("--message", "-m", help="Commit message.")] = "",
    json: Json = False, agent: As = None, path: Repo = None,
) -> None:
    """Commit exactly the declared files on the session branch, once (with Work-Item/Fence/Session trailers)."""
    _run(_commit, json, path, agent, session=session, files=list(file or []), message=message,
         cwd=os.path.abspath(path or os.getcwd()))


@session_app.command("list")
def session_list(json: Json = False, agent: As = None, path: Repo = None) -> None:
    """Sessions of this repository (from their manifests under .worktrees/sessions)."""
    _run(_list, json, path, agent)


DropArg = Annotated[str, typer.Argument(help="Session id (gw session list shows them).", show_default=False)]
KeepBranch = Annotated[bool, typer.Option("--keep-branch", help="Keep the session branch (and its commit).")]
DropReason = Annotated[Optional[str], typer.Option("--reason", help="Why it is dropped (recorded).")]


@session_app.command("drop")
def session_drop(session: DropArg, keep_branch: KeepBranch = False, reason: DropReason = None, json: Json = False,
                 agent: As = None, path: Repo = None) -> None:
    """End a session without publishing it: records the drop, removes its worktree, deletes its branch (alias: abandon)."""
    _run(_drop, json, path, agent, session=session, keep_branch=keep_branch, reason=reason)


# `gw session abandon` is the same command under the word some users reach for first.
session_app.command("abandon", hidden=True, help="Same as `gw session drop`.")(session_drop)


@app.command()
def publish(
    session: SessionArg = None,
    into: Annotated[Optional[str], typer.Option("--into", help="Target branch (default: the branch the session "
                                                               "started from).")] = None,
    remote: Annotated[Optional[str], typer.Option("--remote", help="Publish to this git remote's branch (CAS push).")] = None,
    keep_open: Annotated[bool, typer.Option("--keep-open", help="Keep the lease and the item in progress "
                                                                "(more sessions to come).")] = False,
    force: Annotated[bool, typer.Option("--force", help="Mark done even with unchecked criteria (needs --reason).")] = False,
    reason: Annotated[Optional[str], typer.Option("--reason")] = None,
    json: Json = False, agent: As = None, path: Repo = None,
) -> None:
    """Publish a session's commit (fast-forward, or a clean merge whose gates pass; exit 13 otherwise) and mark the
    item done."""
    _run(_publish, json, path, agent, session=session, into=into, remote=remote, keep_open=keep_open, force=force,
         reason=reason)


@hooks_app.command("install")
def hooks_install(
    server: Annotated[Optional[str], typer.Option("--server", help="Install pre-receive into this bare repository.",
                                                  show_default=False)] = None,
    use_hooks_path: Annotated[bool, typer.Option("--use-hooks-path", help="Install into core.hooksPath when it is set.")] = False,
    json: Json = False, agent: As = None, path: Repo = None,
) -> None:
    """Install the hooks: locally reference-transaction + pre-commit; with --server, pre-receive. Idempotent."""
    from ..hooks_install import install_local, install_server

    try:
        if server:
            report = install_server(server, use_hooks_path=use_hooks_path)
        else:
            report = install_local(path, use_hooks_path=use_hooks_path)
    except GwError as error:
        raise typer.Exit(output.fail(error, json)) from None
    except Exception as exc:  # a bug: still one line and a documented code
        if "GW_TRACEBACK" in os.environ:
            raise
        raise typer.Exit(output.internal(exc, json)) from None
    if json:
        output.emit_json({"ok": True, **report})
        return
    for hook in report["hooks"]:
        chained = f" (chains {hook['legacy']})" if hook["legacy"] else ""
        output.info(f"{hook['status']}: {hook['path']}{chained}")
    raise typer.Exit(int(ExitCode.OK))
