"""Declarations of session branches, hooks and multi-step sessions (commands/sessions.py)."""

# No ``from __future__ import annotations``: typer reads the verbs' annotations on every build of the click
# command, and string ones made it ``eval`` each (tests/test_suite_speed.py).

from typing import Annotated, Optional

import typer

from ..commands import plain as plain_verbs
from ..commands import sessions
from ..declare import (
    As,
    Fence,
    ItemArg,
    Json,
    Repo,
    app,
    plain,
    verb,
)

# --- session branches and hooks (commands/sessions.py) --------------------------------------------

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


@verb(sessions.start, "start", group=session_app)
def session_start(
    item: ItemArg,
    from_ref: Annotated[Optional[str], typer.Option("--from", help="Commit to start from (default HEAD).")] = None,
    fence: Fence = None, json: Json = False, agent: As = None, path: Repo = None,
) -> None:
    """Open a session for an item you hold: a session/<id> branch and its worktree; prints the path."""


@plain(plain_verbs.session_commit, "commit", group=session_app)
def session_commit(
    session: SessionArg = None,
    file: Annotated[Optional[list[str]], typer.Option("--file", help="A file this commit changes (repeat).")] = None,
    message: Annotated[str, typer.Option("--message", "-m", help="Commit message.")] = "",
    json: Json = False, agent: As = None, path: Repo = None,
) -> None:
    """Commit exactly the declared files on the session branch, once (with Work-Item/Fence/Session trailers)."""


@verb(sessions.list_sessions, "list", group=session_app)
def session_list(json: Json = False, agent: As = None, path: Repo = None) -> None:
    """Sessions of this repository (from their manifests under .worktrees/sessions)."""


DropArg = Annotated[str, typer.Argument(help="Session id (gw session list shows them).", show_default=False)]
KeepBranch = Annotated[bool, typer.Option("--keep-branch", help="Keep the session branch (and its commit).")]
DropReason = Annotated[Optional[str], typer.Option("--reason", help="Why it is dropped (recorded).")]


@verb(sessions.drop, "drop", group=session_app)
def session_drop(session: DropArg, keep_branch: KeepBranch = False, reason: DropReason = None, json: Json = False,
                 agent: As = None, path: Repo = None) -> None:
    """End a session without publishing it: records the drop, removes its worktree, deletes its branch (alias: abandon)."""


# `gw session abandon` is the same command under the word some users reach for first.
session_app.command("abandon", hidden=True, help="Same as `gw session drop`.")(session_drop)


@verb(sessions.publish)
def publish(
    session: SessionArg = None,
    into: Annotated[Optional[str], typer.Option("--into", help="Target branch (default: the branch the session "
                                                               "started from).")] = None,
    remote: Annotated[Optional[str], typer.Option("--remote", help="Publish to this git remote's branch (CAS push).")] = None,
    keep_open: Annotated[bool, typer.Option("--keep-open", help="Keep the lease and the item in progress "
                                                                "(more sessions to come).")] = False,
    force: Annotated[bool, typer.Option("--force", help="Mark done even with unchecked criteria (needs --reason).")] = False,
    reason: Annotated[Optional[str], typer.Option("--reason", help="Why (recorded in the history).")] = None,
    queue: Annotated[bool, typer.Option("--queue", help="Queue it for the publisher (gw queue work) instead: pushes "
                                                        "the session branch, records queue-add.")] = False,
    json: Json = False, agent: As = None, path: Repo = None,
) -> None:
    """Publish a session's commit (fast-forward, or a clean merge whose gates pass; exit 13 otherwise) and mark the
    item done."""


@plain(plain_verbs.hooks_install, "install", group=hooks_app)
def hooks_install(
    server: Annotated[Optional[str], typer.Option("--server", help="Install pre-receive and post-receive into this bare repository.",
                                                  show_default=False)] = None,
    use_hooks_path: Annotated[bool, typer.Option("--use-hooks-path", help="Install into core.hooksPath when it is set.")] = False,
    json: Json = False, agent: As = None, path: Repo = None,
) -> None:
    """Install the hooks: locally reference-transaction + pre-commit; with --server, pre-receive + post-receive. Idempotent."""

# --- multi-step sessions (commands/sessions.py; gitwork/sessions/steps.py, docs/sessions.md) ---------

step_app = typer.Typer(help="The branches of a multi-step session: what is open, submitting, waiting, blocking, "
                            "resuming.", no_args_is_help=True)
app.add_typer(step_app, name="step")
StepSession = Annotated[str, typer.Argument(help="Multi-step session id (gw session list shows them).",
                                            show_default=False)]
StepBranch = Annotated[str, typer.Argument(help="Branch key: step-N/parallel-M, or step-N/parallel-M/EXCHANGE.",
                                           show_default=False)]


@verb(sessions.create, "create", group=session_app)
def session_create(
    item: ItemArg,
    chain: Annotated[str, typer.Option("--chain", help="The chain to run (sessions.chains in .workplane).")],
    project: Annotated[Optional[str], typer.Option("--project", help="Project name in the session id (default: "
                                                                     "the main worktree's folder name).")] = None,
    fence: Fence = None, json: Json = False, agent: As = None, path: Repo = None,
) -> None:
    """Create a multi-step session for an item: record its manifest, take the lease, write the first requests."""


@verb(sessions.status, "status", group=session_app)
def session_status(session: StepSession, json: Json = False, agent: As = None, path: Repo = None) -> None:
    """A multi-step session as recorded: its manifest, branches and their status."""


@verb(sessions.session_done, "done", group=session_app)
def session_done(
    session: StepSession,
    route: Annotated[str, typer.Option("--route", help="publish (default: publish source steps, mark the item done, "
                                                       "delete the folder), user or external (hand it on).")] = "publish",
    fence: Fence = None, json: Json = False, agent: As = None, path: Repo = None,
) -> None:
    """End a finished multi-step session: record the audit, then publish or route it; releases the lease."""


@verb(sessions.session_stop, "stop", group=session_app)
def session_stop(
    session: StepSession,
    reason: Annotated[Optional[str], typer.Option("--reason", help="Why it stops (recorded).")] = None,
    fence: Fence = None, json: Json = False, agent: As = None, path: Repo = None,
) -> None:
    """Stop a multi-step session unfinished: recorded, lease released, folder kept."""


@verb(sessions.step_next, "next", group=step_app)
def step_next(
    session: StepSession,
    launch: Annotated[bool, typer.Option("--launch", help="Start each open agent branch with gw run (once).")] = False,
    backend: Annotated[str, typer.Option("--backend", help="gw run backend for --launch: subprocess or tmux.")] = "subprocess",
    fence: Fence = None, json: Json = False, agent: As = None, path: Repo = None,
) -> None:
    """Record what is due (next requests, exchanges, resumes) and list the open branches with their paths."""


@verb(sessions.step_submit, "submit", group=step_app)
def step_submit(session: StepSession, branch: StepBranch, fence: Fence = None, json: Json = False, agent: As = None,
                path: Repo = None) -> None:
    """Submit a branch's response/response.json through both gates and the operator's validator; advances."""


@verb(sessions.step_wait, "wait", group=step_app)
def step_wait(
    session: StepSession, branch: StepBranch,
    timeout: Annotated[float, typer.Option("--timeout", help="Seconds to wait for the response (exit 75 after).")] = 60.0,
    fence: Fence = None, json: Json = False, agent: As = None, path: Repo = None,
) -> None:
    """Wait (bounded) for a branch's operator to write its response, then submit it."""


@verb(sessions.step_block, "block", group=step_app)
def step_block(
    session: StepSession, branch: StepBranch,
    reason: Annotated[str, typer.Option("--reason", help="Why the branch is blocked (recorded).")],
    fence: Fence = None, json: Json = False, agent: As = None, path: Repo = None,
) -> None:
    """Block an open branch (a blocked response with the reason): the session waits for gw step resume."""


@verb(sessions.step_resume, "resume", group=step_app)
def step_resume(session: StepSession, fence: Fence = None, json: Json = False, agent: As = None,
                path: Repo = None) -> None:
    """Resume a blocked session: each blocked operator re-enters at step-(N+1) with resume set."""
