"""The typer application: every command, its options and help. Thin: it only calls ``actions``.

Options every command takes: ``--json`` (machine-readable stdout, errors included), ``--as NAME``
(acting identity; default ``GW_AGENT`` or ``user@host/s<session>``) and ``-C PATH`` (run as if
started in PATH, like ``git -C``).
"""

from __future__ import annotations

import sys
from typing import Annotated, Optional

import typer

from .. import __version__
from . import actions

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


# --- items -----------------------------------------------------------------------------------------


@app.command()
def init(
    remote: Annotated[Optional[str], typer.Option("--remote", help="Also make this git remote the arbiter.")] = None,
    json: Json = False, agent: As = None, path: Repo = None,
) -> None:
    """Prepare this repository: create the state ref (nothing else is touched)."""
    _run(actions.init, json, path, agent, remote=remote)


@app.command()
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
    _run(actions.new, json, path, agent, title=title, description=description, priority=priority, labels=label,
         depends_on=dep, criteria=criterion, owner=owner, source=source)


@app.command()
def show(item: ItemArg, json: Json = False, agent: As = None, path: Repo = None) -> None:
    """Show an item and its lease."""
    _run(actions.show, json, path, agent, item=item)


@app.command("list")
def list_(
    status: Annotated[Optional[list[str]], typer.Option("--status", "-s", help="Only this status (repeatable).")] = None,
    label: Annotated[Optional[list[str]], typer.Option("--label", "-l", help="Only items with this label.")] = None,
    all_: Annotated[bool, typer.Option("--all", "-a", help="Include done and cancelled items.")] = False,
    holder: Annotated[Optional[str], typer.Option("--holder", help="Only items leased by this identity.")] = None,
    json: Json = False, agent: As = None, path: Repo = None,
) -> None:
    """List items, best first (open and active ones unless --all or --status)."""
    _run(actions.list_items, json, path, agent, status=status, label=label, show_all=all_, holder=holder)


@app.command()
def ready(
    limit: Annotated[Optional[int], typer.Option("--limit", "-n", help="At most this many.")] = None,
    json: Json = False, agent: As = None, path: Repo = None,
) -> None:
    """Open, unleased items whose dependencies are done, best first."""
    _run(actions.ready, json, path, agent, limit=limit)


@app.command()
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
    _run(actions.submit, json, path, agent, op="edit", item=item, title=title, description=description,
         priority=priority, add_labels=add_label, remove_labels=remove_label, add_deps=add_dep,
         remove_deps=remove_dep, add_criteria=add_criterion, owner=owner, status=status, reason=reason, fence=fence)


@app.command()
def check(
    item: ItemArg,
    criterion: Annotated[int, typer.Argument(help="Criterion number (1-based, as `gw show` lists them).")],
    uncheck: Annotated[bool, typer.Option("--uncheck", help="Clear the tick instead.")] = False,
    fence: Fence = None, json: Json = False, agent: As = None, path: Repo = None,
) -> None:
    """Tick one acceptance criterion (records who and when)."""
    _run(actions.submit, json, path, agent, op="check", item=item, criterion=criterion, uncheck=uncheck or None,
         fence=fence)


@app.command()
def decision(
    item: ItemArg,
    text: Annotated[str, typer.Argument(help="What was decided.")],
    why: Annotated[str, typer.Option("--why", help="The rationale.")],
    fence: Fence = None, json: Json = False, agent: As = None, path: Repo = None,
) -> None:
    """Record a decision and its rationale on an item (append-only)."""
    _run(actions.submit, json, path, agent, op="decision", item=item, text=text, why=why, fence=fence)


@app.command()
def done(
    item: ItemArg,
    force: Annotated[bool, typer.Option("--force", help="Even with unchecked criteria (needs --reason).")] = False,
    reason: Annotated[Optional[str], typer.Option("--reason")] = None,
    fence: Fence = None, json: Json = False, agent: As = None, path: Repo = None,
) -> None:
    """Mark an item done; releases the holder's lease."""
    _run(actions.submit, json, path, agent, op="done", item=item, force=force or None, reason=reason, fence=fence)


@app.command()
def cancel(
    item: ItemArg, reason: Annotated[Optional[str], typer.Option("--reason")] = None,
    fence: Fence = None, json: Json = False, agent: As = None, path: Repo = None,
) -> None:
    """Cancel an item."""
    _run(actions.submit, json, path, agent, op="cancel", item=item, reason=reason, fence=fence)


@app.command()
def reopen(
    item: ItemArg, reason: Annotated[Optional[str], typer.Option("--reason")] = None,
    json: Json = False, agent: As = None, path: Repo = None,
) -> None:
    """Reopen a done or cancelled item."""
    _run(actions.submit, json, path, agent, op="reopen", item=item, reason=reason)


@app.command()
def history(item: ItemArg, json: Json = False, agent: As = None, path: Repo = None) -> None:
    """An item's own event history (append-only)."""
    _run(actions.history, json, path, agent, item=item)


@app.command()
def log(
    limit: Annotated[Optional[int], typer.Option("-n", "--limit", help="At most this many commits.")] = None,
    json: Json = False, agent: As = None, path: Repo = None,
) -> None:
    """The state ref's history, newest first: one commit per command."""
    _run(actions.log, json, path, agent, limit=limit)


@app.command("apply")
def apply_(
    source: Annotated[str, typer.Argument(help="A file holding one command document (YAML or JSON), or - for stdin.")],
    json: Json = False, agent: As = None, path: Repo = None,
) -> None:
    """Apply a command document directly (the same documents every face submits)."""
    _run(actions.apply, json, path, agent, source=source)


# --- leases ----------------------------------------------------------------------------------------


@app.command()
def claim(
    item: Annotated[Optional[str], typer.Argument(help="Item id or prefix (or use --next).", show_default=False)] = None,
    next_: Annotated[bool, typer.Option("--next", help="Claim the best ready item; prints its id.")] = False,
    ttl: Ttl = None, offline: Offline = False, json: Json = False, agent: As = None, path: Repo = None,
) -> None:
    """Acquire the lease on an item. Exit 75 if someone else holds it (retry later)."""
    _run(actions.claim, json, path, agent, item=item, next=next_, ttl=ttl, offline=offline)


@app.command()
def renew(item: ItemArg, ttl: Ttl = None, fence: Fence = None, offline: Offline = False, json: Json = False,
          agent: As = None, path: Repo = None) -> None:
    """Extend your lease."""
    _run(actions.lease_op, json, path, agent, op="renew", item=item, ttl=ttl, fence=fence, offline=offline)


@app.command()
def release(item: ItemArg, fence: Fence = None, offline: Offline = False, json: Json = False, agent: As = None,
            path: Repo = None) -> None:
    """Give your lease up."""
    _run(actions.lease_op, json, path, agent, op="release", item=item, fence=fence, offline=offline)


@app.command()
def takeover(item: ItemArg, ttl: Ttl = None, offline: Offline = False, json: Json = False, agent: As = None,
             path: Repo = None) -> None:
    """Take a lease that has expired (by your clock plus the margin) or was handed off."""
    _run(actions.lease_op, json, path, agent, op="takeover", item=item, ttl=ttl, offline=offline)


@app.command()
def revoke(
    item: ItemArg, reason: Annotated[str, typer.Option("--reason", help="Why (recorded).")],
    offline: Offline = False, json: Json = False, agent: As = None, path: Repo = None,
) -> None:
    """End someone's lease administratively (admins; any person while no admins are set)."""
    _run(actions.lease_op, json, path, agent, op="revoke", item=item, reason=reason, offline=offline)


@app.command()
def handoff(
    item: ItemArg,
    reason: Annotated[str, typer.Option("--reason", help="done, blocked, needs-human, timeout, reconcile-failure or reassign.")],
    message: Annotated[Optional[str], typer.Option("--message", "-m")] = None,
    to: Annotated[Optional[str], typer.Option("--to", help="Who should pick it up.")] = None,
    fence: Fence = None, offline: Offline = False, json: Json = False, agent: As = None, path: Repo = None,
) -> None:
    """Hand your lease over: the next claimant may take over at once."""
    _run(actions.lease_op, json, path, agent, op="handoff", item=item, reason=reason, message=message, to=to,
         fence=fence, offline=offline)


# --- several machines ------------------------------------------------------------------------------

remote_app = typer.Typer(help="The arbiter remote that decides leases across machines.", no_args_is_help=True)
app.add_typer(remote_app, name="remote")


@remote_app.command("set")
def remote_set(
    name: Annotated[str, typer.Argument(help="An existing git remote.")],
    json: Json = False, agent: As = None, path: Repo = None,
) -> None:
    """Make NAME the arbiter: adds a fetch refspec for the state ref; your branches' push is untouched."""
    _run(actions.remote_set, json, path, agent, name=name)


@app.command()
def sync(json: Json = False, agent: As = None, path: Repo = None) -> None:
    """Fetch the arbiter's state, replay local commands it has not seen (each re-validated), push."""
    _run(actions.sync, json, path, agent, push=True)


@app.command()
def push(json: Json = False, agent: As = None, path: Repo = None) -> None:
    """Same as sync: publish local commands to the arbiter (after replaying them on its tip)."""
    _run(actions.sync, json, path, agent, push=True)


@app.command()
def pull(json: Json = False, agent: As = None, path: Repo = None) -> None:
    """Fetch the arbiter's state and replay local commands on it, without pushing."""
    _run(actions.sync, json, path, agent, push=False)


@app.command()
def retry(
    command_id: Annotated[str, typer.Argument(metavar="ID", help="The command id an exit 12 named.", show_default=False)],
    json: Json = False, agent: As = None, path: Repo = None,
) -> None:
    """Send again a command whose outcome was unknown (exit 12), under its own id: answers its result."""
    _run(actions.retry, json, path, agent, command_id=command_id)


@app.command()
def status(json: Json = False, agent: As = None, path: Repo = None) -> None:
    """What is not yet on the arbiter, and which replayed commands it refused."""
    _run(actions.status, json, path, agent)


@app.command()
def demo(
    keep: Annotated[bool, typer.Option("--keep", help="Keep the demo repository.")] = False,
    json: Json = False,
) -> None:
    """Run the demo on a throwaway repository: items, a two-process claim race, release, the log."""
    from ..demo import run

    raise typer.Exit(run(keep=keep, as_json=json))


from . import cmd_messages  # noqa: E402,F401
from . import cmd_sessions  # noqa: E402,F401


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
