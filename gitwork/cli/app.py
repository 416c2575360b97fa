"""The typer application: every verb, its options and help, declared once, here.

Each declaration is a typed signature and a docstring; :func:`verb` registers it so that typer calls
the verb's plain function in ``commands/<topic>.py`` with the parsed options under the same names.
The fast path's table (``fast_table.py``) is generated from these declarations
(``python -m gitwork.cli.fastgen``), so an option is never spelled a second time.

Options every command takes: ``--json`` (machine-readable stdout, errors included), ``--as NAME``
(acting identity; default ``GW_AGENT`` or ``user@host/s<session>``) and ``-C PATH`` (run as if
started in PATH, like ``git -C``).
"""

from __future__ import annotations

import functools
import os
import sys
from typing import Annotated, Any, Callable, Optional

import typer

from .. import __version__
from . import actions
from .commands import cache, items, leases, messages, remote, sessions

app = typer.Typer(
    name="gw",
    help="gitwork: work items, fenced leases and conversations kept on a git ref.",
    no_args_is_help=True,
    add_completion=False,
    context_settings={"help_option_names": ["-h", "--help"]},
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
)

Json = Annotated[bool, typer.Option("--json", help="Print JSON on stdout (errors too).")]
As = Annotated[Optional[str], typer.Option("--as", envvar="GW_AGENT", help="Acting identity.", show_envvar=True)]
Repo = Annotated[Optional[str], typer.Option("-C", help="Run as if gw was started in this directory.")]
Fence = Annotated[
    Optional[int], typer.Option("--fence", envvar="GW_FENCE", help="Fencing token of the lease you act under.")
]
ItemArg = Annotated[str, typer.Argument(help="Item id or unique prefix.", show_default=False)]
Offline = Annotated[
    bool, typer.Option("--offline", help="Tentative: do not ask the arbiter remote now (gw sync decides later).")
]
Ttl = Annotated[Optional[str], typer.Option("--ttl", help="Lease duration, e.g. 90s, 15m, 1h (default: the default_ttl setting, 15m).")]


def _run(func, as_json: bool, path: Optional[str], agent: Optional[str], **kwargs) -> None:  # type: ignore[no-untyped-def]
    code = actions.invoke(func, as_json=as_json, path=path, agent=agent, **kwargs)
    if code:
        raise typer.Exit(code)


def verb(action: Callable[..., Any], name: Optional[str] = None, group: Optional[typer.Typer] = None,
         **settings: Any) -> Callable[[Callable[..., None]], Callable[..., None]]:
    """Register a declaration (signature + docstring, empty body) as the command that runs ``action``.

    typer reads the declaration's signature (``functools.wraps`` keeps it) and calls the wrapper with
    every option under its parameter name; ``json``, ``agent`` and ``path`` go to ``actions.invoke``
    and the rest to ``action`` unchanged. ``gw_action`` names the action for ``fastgen``.
    """

    def register(declaration: Callable[..., None]) -> Callable[..., None]:
        @functools.wraps(declaration)
        def command(json: bool = False, agent: Optional[str] = None, path: Optional[str] = None,
                    **options: Any) -> None:
            _run(action, json, path, agent, **options)

        command.gw_action = f"{action.__module__.rpartition('.')[2]}:{action.__name__}"  # type: ignore[attr-defined]
        (group or app).command(name, **settings)(command)
        return command

    return register


def _version(value: bool) -> None:
    if value:
        print(f"gw {__version__}")
        raise typer.Exit()


@app.callback()
def main(
    version: Annotated[
        bool, typer.Option("--version", callback=_version, is_eager=True, help="Print the version and exit.")
    ] = False,
) -> None:
    """gitwork: work items, fenced leases and conversations kept on a git ref."""


# --- items (commands/items.py) -------------------------------------------------------------------


@verb(items.init)
def init(
    remote: Annotated[Optional[str], typer.Option("--remote", help="Also make this git remote the arbiter.")] = None,
    json: Json = False, agent: As = None, path: Repo = None,
) -> None:
    """Prepare this repository: create the state ref (nothing else is touched)."""


@verb(items.new)
def new(
    title: Annotated[str, typer.Argument(help="One-line title.", show_default=False)],
    description: Annotated[Optional[str], typer.Option("-d", "--description", help="Longer description.")] = None,
    priority: Annotated[Optional[int], typer.Option("-p", "--priority", help="0 (highest) to 4 (lowest); default 2.")] = None,
    label: Annotated[Optional[list[str]], typer.Option("-l", "--label", help="Label (repeatable).")] = None,
    dep: Annotated[Optional[list[str]], typer.Option("--dep", help="Item this one depends on (repeatable).")] = None,
    criterion: Annotated[Optional[list[str]], typer.Option("-c", "--criterion", help="Acceptance criterion (repeatable).")] = None,
    owner: Annotated[Optional[str], typer.Option("--owner", help="Who owns the item.")] = None,
    source: Annotated[Optional[str], typer.Option("--from", help="Provenance: URL, commit:SHA, file:PATH, an item id or text.")] = None,
    json: Json = False, agent: As = None, path: Repo = None,
) -> None:
    """Create a work item; prints its id."""


@verb(items.show)
def show(item: ItemArg, json: Json = False, agent: As = None, path: Repo = None) -> None:
    """Show an item and its lease."""


@verb(items.list_items, "list")
def list_(
    status: Annotated[Optional[list[str]], typer.Option("--status", "-s", help="Only this status (repeatable).")] = None,
    label: Annotated[Optional[list[str]], typer.Option("--label", "-l", help="Only items with this label.")] = None,
    all: Annotated[bool, typer.Option("--all", "-a", help="Include done and cancelled items.")] = False,
    holder: Annotated[Optional[str], typer.Option("--holder", help="Only items leased by this identity.")] = None,
    owner: Annotated[Optional[str], typer.Option("--owner", help="Only items owned by this identity.")] = None,
    priority: Annotated[Optional[int], typer.Option("--priority", "-p", help="Only items of this priority.")] = None,
    sort: Annotated[Optional[str], typer.Option("--sort", help="rank (default: best first), created, id or title.")] = None,
    limit: Annotated[Optional[int], typer.Option("--limit", "-n", help="At most this many (says so on stderr when more match).")] = None,
    json: Json = False, agent: As = None, path: Repo = None,
) -> None:
    """List items, best first (open and active ones unless --all or --status)."""


@verb(items.ready)
def ready(
    limit: Annotated[Optional[int], typer.Option("--limit", "-n", help="At most this many (says so on stderr when more match).")] = None,
    label: Annotated[Optional[list[str]], typer.Option("--label", "-l", help="Only items with this label (repeatable: all of them).")] = None,
    owner: Annotated[Optional[str], typer.Option("--owner", help="Only items owned by this identity.")] = None,
    priority: Annotated[Optional[int], typer.Option("--priority", "-p", help="Only items of this priority.")] = None,
    sort: Annotated[Optional[str], typer.Option("--sort", help="rank (default: best first), created, id or title.")] = None,
    json: Json = False, agent: As = None, path: Repo = None,
) -> None:
    """Open, unleased items whose dependencies are done, best first."""


@verb(items.edit)
def edit(
    item: ItemArg,
    title: Annotated[Optional[str], typer.Option("--title")] = None,
    description: Annotated[Optional[str], typer.Option("-d", "--description")] = None,
    priority: Annotated[Optional[int], typer.Option("-p", "--priority")] = None,
    add_label: Annotated[Optional[list[str]], typer.Option("--add-label")] = None,
    remove_label: Annotated[Optional[list[str]], typer.Option("--remove-label")] = None,
    add_dep: Annotated[Optional[list[str]], typer.Option("--add-dep")] = None,
    remove_dep: Annotated[Optional[list[str]], typer.Option("--remove-dep")] = None,
    add_criterion: Annotated[Optional[list[str]], typer.Option("--add-criterion")] = None,
    owner: Annotated[Optional[str], typer.Option("--owner")] = None,
    status: Annotated[Optional[str], typer.Option("--status", help="open or blocked.")] = None,
    reason: Annotated[Optional[str], typer.Option("--reason")] = None,
    fence: Fence = None, json: Json = False, agent: As = None, path: Repo = None,
) -> None:
    """Change an item's fields (the holder only, while it is leased)."""


@verb(items.check)
def check(
    item: ItemArg,
    criterion: Annotated[int, typer.Argument(help="Criterion number (1-based, as `gw show` lists them).")],
    uncheck: Annotated[bool, typer.Option("--uncheck", help="Clear the tick instead.")] = False,
    fence: Fence = None, json: Json = False, agent: As = None, path: Repo = None,
) -> None:
    """Tick one acceptance criterion (records who and when)."""


@verb(items.decision)
def decision(
    item: ItemArg,
    text: Annotated[str, typer.Argument(help="What was decided.")],
    why: Annotated[str, typer.Option("--why", help="The rationale.")],
    fence: Fence = None, json: Json = False, agent: As = None, path: Repo = None,
) -> None:
    """Record a decision and its rationale on an item (append-only)."""


@verb(items.done)
def done(
    item: ItemArg,
    force: Annotated[bool, typer.Option("--force", help="Even with unchecked criteria (needs --reason).")] = False,
    reason: Annotated[Optional[str], typer.Option("--reason")] = None,
    into: Annotated[Optional[str], typer.Option("--into", help="Where to publish an open session.")] = None,
    remote: Annotated[Optional[str], typer.Option("--remote", help="Publish an open session to this remote.")] = None,
    fence: Fence = None, json: Json = False, agent: As = None, path: Repo = None,
) -> None:
    """Mark an item done; publishes your open session of it first, and releases your lease."""


@verb(items.cancel)
def cancel(
    item: ItemArg, reason: Annotated[Optional[str], typer.Option("--reason")] = None,
    fence: Fence = None, json: Json = False, agent: As = None, path: Repo = None,
) -> None:
    """Cancel an item."""


@verb(items.reopen)
def reopen(
    item: ItemArg, reason: Annotated[Optional[str], typer.Option("--reason")] = None,
    json: Json = False, agent: As = None, path: Repo = None,
) -> None:
    """Reopen a done or cancelled item."""


@verb(items.history)
def history(item: ItemArg, json: Json = False, agent: As = None, path: Repo = None) -> None:
    """An item's own event history (append-only)."""


@verb(items.log)
def log(
    limit: Annotated[Optional[int], typer.Option("-n", "--limit", help="At most this many commits.")] = None,
    json: Json = False, agent: As = None, path: Repo = None,
) -> None:
    """The state ref's history, newest first: one commit per command."""


@verb(items.apply, "apply")
def apply_(
    source: Annotated[str, typer.Argument(help="A file holding one command document (YAML or JSON), or - for stdin.")],
    json: Json = False, agent: As = None, path: Repo = None,
) -> None:
    """Apply a command document directly (the same documents every face submits)."""


# --- leases (commands/leases.py) ------------------------------------------------------------------


@verb(leases.claim)
def claim(
    item: Annotated[Optional[str], typer.Argument(help="Item id or prefix (or use --next).", show_default=False)] = None,
    next: Annotated[bool, typer.Option("--next", help="Claim the best ready item; prints its id.")] = False,
    label: Annotated[Optional[list[str]], typer.Option("--label", "-l", help="With --next: only items with this label (repeatable: all of them).")] = None,
    owner: Annotated[Optional[str], typer.Option("--owner", help="With --next: only items owned by this identity.")] = None,
    priority: Annotated[Optional[int], typer.Option("--priority", "-p", help="With --next: only items of this priority.")] = None,
    ttl: Ttl = None, offline: Offline = False, json: Json = False, agent: As = None, path: Repo = None,
) -> None:
    """Acquire the lease on an item. Exit 75 if someone else holds it (retry later)."""


@verb(leases.renew)
def renew(item: ItemArg, ttl: Ttl = None, fence: Fence = None, offline: Offline = False, json: Json = False,
          agent: As = None, path: Repo = None) -> None:
    """Extend your lease."""


@verb(leases.release)
def release(item: ItemArg, fence: Fence = None, offline: Offline = False, json: Json = False, agent: As = None,
            path: Repo = None) -> None:
    """Give your lease up."""


@verb(leases.takeover)
def takeover(item: ItemArg, ttl: Ttl = None, offline: Offline = False, json: Json = False, agent: As = None,
             path: Repo = None) -> None:
    """Take a lease that has expired (by your clock plus the margin) or was handed off."""


@verb(leases.revoke)
def revoke(
    item: ItemArg, reason: Annotated[str, typer.Option("--reason", help="Why (recorded).")],
    offline: Offline = False, json: Json = False, agent: As = None, path: Repo = None,
) -> None:
    """End someone's lease administratively (admins; any person while no admins are set)."""


@verb(leases.handoff)
def handoff(
    item: ItemArg,
    reason: Annotated[str, typer.Option("--reason", help="done, blocked, needs-human, timeout, reconcile-failure or reassign.")],
    message: Annotated[Optional[str], typer.Option("--message", "-m")] = None,
    to: Annotated[Optional[str], typer.Option("--to", help="Who should pick it up.")] = None,
    fence: Fence = None, offline: Offline = False, json: Json = False, agent: As = None, path: Repo = None,
) -> None:
    """Hand your lease over: the next claimant may take over at once."""


# --- the read cache (commands/cache.py) ------------------------------------------------------------

cache_app = typer.Typer(help="The local read cache (derived data: dropping it changes no answer).", no_args_is_help=True)
app.add_typer(cache_app, name="cache")


@verb(cache.status, "status", group=cache_app)
def cache_status(json: Json = False, agent: As = None, path: Repo = None) -> None:
    """Where the cache is, how big, which commit it reflects and whether that is the tip."""


@verb(cache.rebuild, "rebuild", group=cache_app)
def cache_rebuild(json: Json = False, agent: As = None, path: Repo = None) -> None:
    """Drop the cache and build it again from every item at the tip."""


@verb(cache.drop, "drop", group=cache_app)
def cache_drop(json: Json = False, agent: As = None, path: Repo = None) -> None:
    """Delete the cache; the next read rebuilds it."""


# --- several machines (commands/remote.py) --------------------------------------------------------

remote_app = typer.Typer(help="The arbiter remote that decides leases across machines.", no_args_is_help=True)
app.add_typer(remote_app, name="remote")


@verb(remote.remote_set, "set", group=remote_app)
def remote_set(
    name: Annotated[str, typer.Argument(help="An existing git remote.")],
    json: Json = False, agent: As = None, path: Repo = None,
) -> None:
    """Make NAME the arbiter: adds a fetch refspec for the state ref; your branches' push is untouched."""


@verb(remote.sync)
def sync(json: Json = False, agent: As = None, path: Repo = None) -> None:
    """Fetch the arbiter's state, replay local commands it has not seen (each re-validated), push."""


@verb(remote.push)
def push(json: Json = False, agent: As = None, path: Repo = None) -> None:
    """Same as sync: publish local commands to the arbiter (after replaying them on its tip)."""


@verb(remote.pull)
def pull(json: Json = False, agent: As = None, path: Repo = None) -> None:
    """Fetch the arbiter's state and replay local commands on it, without pushing."""


@verb(remote.retry)
def retry(
    command_id: Annotated[str, typer.Argument(metavar="ID", help="The command id an exit 12 named.", show_default=False)],
    json: Json = False, agent: As = None, path: Repo = None,
) -> None:
    """Send again a command whose outcome was unknown (exit 12), under its own id: answers its result."""


@verb(remote.status)
def status(json: Json = False, agent: As = None, path: Repo = None) -> None:
    """What is not yet on the arbiter, and which replayed commands it refused."""


@app.command()
def demo(
    keep: Annotated[bool, typer.Option("--keep", help="Keep the demo repository.")] = False,
    json: Json = False,
) -> None:
    """Run the demo on a throwaway repository: items, a two-process claim race, release, the log."""
    from ..demo import run

    raise typer.Exit(run(keep=keep, as_json=json))


# --- conversations (commands/messages.py) ---------------------------------------------------------

Epoch = Annotated[
    Optional[int],
    typer.Option("--epoch", help="The lease epoch you read the thread at (default: read it now, before posting)."),
]
MsgId = Annotated[
    Optional[str], typer.Option("--id", help="Client-chosen message id: a retried post with the same id lands once.")
]
To = Annotated[Optional[str], typer.Option("--to", help="Who the message is addressed to.")]


@verb(messages.msg)
def msg(
    item: ItemArg,
    text: Annotated[str, typer.Argument(help="The message ('-' reads it from stdin).", show_default=False)],
    kind: Annotated[
        Optional[str], typer.Option("--kind", "-k", help="note (default), question, answer, handoff or decision-request.")
    ] = None,
    reply_to: Annotated[Optional[str], typer.Option("--reply-to", help="The message this answers: SEQ.")] = None,
    to: To = None, epoch: Epoch = None, msg_id: MsgId = None,
    fence: Fence = None, json: Json = False, agent: As = None, path: Repo = None,
) -> None:
    """Post a message to an item's thread; prints its sequence number."""


@verb(messages.thread)
def thread(
    item: ItemArg,
    since: Annotated[int, typer.Option("--since", help="Only messages after this sequence number.")] = 0,
    follow: Annotated[bool, typer.Option("--follow", "-f", help="Keep printing new messages as they land.")] = False,
    timeout: Annotated[
        Optional[float], typer.Option("--timeout", help="With --follow: stop after this many seconds.")
    ] = None,
    poll: Annotated[float, typer.Option("--poll", help="With --follow: seconds between looks at the ref.")] = 0.2,
    json: Json = False, agent: As = None, path: Repo = None,
) -> None:
    """Replay an item's thread in order (JSON lines with --follow --json)."""


@verb(messages.ack)
def ack(
    item: ItemArg,
    seq: Annotated[str, typer.Argument(help="Acknowledge the thread up to this message (SEQ).", show_default=False)],
    read: Annotated[bool, typer.Option("--read", help="I have read up to SEQ (the default).")] = False,
    responded: Annotated[
        bool, typer.Option("--responded", help="I have answered up to SEQ (needs --by; implies --read).")
    ] = False,
    by: Annotated[Optional[str], typer.Option("--by", help="With --responded: my reply (SEQ).")] = None,
    epoch: Epoch = None, fence: Fence = None, json: Json = False, agent: As = None, path: Repo = None,
) -> None:
    """Move your read or responded cursor on a thread (cursors never move back)."""


@verb(messages.inbox)
def inbox(json: Json = False, agent: As = None, path: Repo = None) -> None:
    """Messages to you or on items you hold: unread, then read but unanswered; oldest first."""


@verb(messages.ask)
def ask(
    item: ItemArg,
    question: Annotated[str, typer.Argument(help="The question ('-' reads it from stdin).", show_default=False)],
    option: Annotated[Optional[list[str]], typer.Option("--option", "-o", help="A possible answer (repeatable).")] = None,
    to: To = None, epoch: Epoch = None, msg_id: MsgId = None,
    fence: Fence = None, json: Json = False, agent: As = None, path: Repo = None,
) -> None:
    """Ask for a human decision (the holder only): posts a decision request, marks the item waiting."""


@verb(messages.decide)
def decide(
    item: ItemArg,
    seq: Annotated[str, typer.Argument(help="The decision request (SEQ).", show_default=False)],
    choose: Annotated[str, typer.Option("--choose", help="The chosen option.")],
    why: Annotated[str, typer.Option("--why", help="The rationale (recorded with the decision).")],
    epoch: Epoch = None, msg_id: MsgId = None,
    fence: Fence = None, json: Json = False, agent: As = None, path: Repo = None,
) -> None:
    """Answer a decision request: records a decision, unblocks the item (admins or the addressee)."""


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


@session_app.command("commit")
def session_commit(
    session: SessionArg = None,
    file: Annotated[Optional[list[str]], typer.Option("--file", "-f", help="A file this commit changes (repeat).")] = None,
    message: Annotated[str, typer.Option("--message", "-m", help="Commit message.")] = "",
    json: Json = False, agent: As = None, path: Repo = None,
) -> None:
    """Commit exactly the declared files on the session branch, once (with Work-Item/Fence/Session trailers)."""
    # Not through verb(): the files are named relative to -C (or the current directory), which the
    # work plane does not keep, so the directory is passed along.
    _run(sessions.commit, json, path, agent, session=session, file=file, message=message,
         cwd=os.path.abspath(path or os.getcwd()))


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
    reason: Annotated[Optional[str], typer.Option("--reason")] = None,
    json: Json = False, agent: As = None, path: Repo = None,
) -> None:
    """Publish a session's commit (fast-forward, or a clean merge whose gates pass; exit 13 otherwise) and mark the
    item done."""


@hooks_app.command("install")
def hooks_install(
    server: Annotated[Optional[str], typer.Option("--server", help="Install pre-receive into this bare repository.",
                                                  show_default=False)] = None,
    use_hooks_path: Annotated[bool, typer.Option("--use-hooks-path", help="Install into core.hooksPath when it is set.")] = False,
    json: Json = False, agent: As = None, path: Repo = None,
) -> None:
    """Install the hooks: locally reference-transaction + pre-commit; with --server, pre-receive. Idempotent."""
    # Not through verb(): it opens no work plane (a bare server repository has no state to read).
    raise typer.Exit(sessions.hooks_install(json, path, server=server, use_hooks_path=use_hooks_path))


def run_app(argv: list[str]) -> int:
    """Run the typer app. A usage error is reported like every other error (docs/exit-codes.md): one
    line on stderr and, with --json, one JSON error object on stdout; exit 2."""
    try:
        result = app(args=argv, prog_name="gw", standalone_mode=False)
    except SystemExit as exit_:
        code = exit_.code
        return code if isinstance(code, int) else (0 if code is None else 1)
    except Exception as exc:
        # click's ClickException family (UsageError, BadParameter, NoSuchOption...), vendored or not.
        if not (hasattr(exc, "exit_code") and hasattr(exc, "show")):
            raise
        if type(exc).__name__ == "NoArgsIsHelpError":  # `gw` or `gw session` alone: the help is the answer
            exc.show()
            return int(exc.exit_code)
        from ..errors import UsageError
        from .output import fail

        ctx = getattr(exc, "ctx", None)
        hint = f" (see '{ctx.command_path} -h')" if ctx is not None else ""
        return fail(UsageError(" ".join(str(exc.format_message()).split()) + hint), "--json" in argv)
    except KeyboardInterrupt:
        return 130
    return result if isinstance(result, int) else 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(run_app(sys.argv[1:]))
