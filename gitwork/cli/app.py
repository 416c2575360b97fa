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
from .commands import cache, items, launch, leases, messages, remote, reports, sessions, transfer
from .commands import plain as plain_verbs
from .commands import serve as serving

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


def _complete_items(ctx: typer.Context, incomplete: str) -> list[str]:
    """Shell completion of item ids: the open items' full ids that start with what was typed."""
    try:
        from ..reports import item_ids
        from ..workplane import Workplane

        with Workplane(ctx.params.get("path")) as plane:
            return item_ids(plane, incomplete)
    except Exception:  # completion must never print a traceback into the user's shell
        return []


ItemArg = Annotated[str, typer.Argument(help="Item id or unique prefix.", show_default=False,
                                        autocompletion=_complete_items)]
# Several ids: one command each, each reported; the exit code is the first failure's.
ItemsArg = Annotated[list[str], typer.Argument(help="Item ids or unique prefixes (each its own command).",
                                               show_default=False, autocompletion=_complete_items)]
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


def plain(function: Callable[..., int], name: Optional[str] = None, group: Optional[typer.Typer] = None,
          **settings: Any) -> Callable[[Callable[..., None]], Callable[..., None]]:
    """Register a declaration as the command that runs ``function`` (cli/commands/plain.py) with every
    option under its parameter name, without a work plane; its return value is the exit code."""

    def register(declaration: Callable[..., None]) -> Callable[..., None]:
        @functools.wraps(declaration)
        def command(**options: Any) -> None:
            # Looked up when called, as the fast path does (cli/fast.py), so both run the same function.
            code = getattr(sys.modules[function.__module__], function.__name__)(**options)
            if code:
                raise typer.Exit(code)

        command.gw_plain = f"{function.__module__.rpartition('.')[2]}:{function.__name__}"  # type: ignore[attr-defined]
        (group or app).command(name, **settings)(command)
        return command

    return register


def typer_only(reason: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Mark a command the fast path leaves to typer, saying why (fastgen lists it in ``TYPER_ONLY``)."""

    def mark(command: Callable[..., Any]) -> Callable[..., Any]:
        command.gw_typer_only = reason  # type: ignore[attr-defined]
        return command

    return mark


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


LabelAny = Annotated[Optional[list[str]], typer.Option("--label-any", help="Only items with at least one of these "
                                                                          "labels (repeatable; with --label: both).")]


DescriptionFile = Annotated[
    Optional[str], typer.Option("--description-file", help="Read the description from this file ('-': stdin).")
]
UseEditor = Annotated[bool, typer.Option("-e", "--edit", help="Write the title and description in $VISUAL/$EDITOR.")]


# --- items (commands/items.py) -------------------------------------------------------------------


@verb(items.init)
def init(
    remote: Annotated[Optional[str], typer.Option("--remote", help="Also make this git remote the arbiter.")] = None,
    json: Json = False, agent: As = None, path: Repo = None,
) -> None:
    """Prepare this repository: create the state ref (nothing else is touched)."""


@verb(items.new)
def new(
    title: Annotated[Optional[str], typer.Argument(help="One-line title (with -e: the form's first line).",
                                                   show_default=False)] = None,
    description: Annotated[Optional[str], typer.Option("-d", "--description", help="Longer description ('-' reads "
                                                                                   "it from stdin).")] = None,
    description_file: DescriptionFile = None,
    use_editor: UseEditor = False,
    priority: Annotated[Optional[int], typer.Option("-p", "--priority", help="0 (highest) to 4 (lowest); default 2.")] = None,
    label: Annotated[Optional[list[str]], typer.Option("-l", "--label", help="Label (repeatable).")] = None,
    dep: Annotated[Optional[list[str]], typer.Option("--dep", help="Item this one depends on (repeatable).")] = None,
    criterion: Annotated[Optional[list[str]], typer.Option("-c", "--criterion", help="Acceptance criterion (repeatable).")] = None,
    owner: Annotated[Optional[str], typer.Option("--owner", help="Who owns the item.")] = None,
    source: Annotated[Optional[str], typer.Option("--from", help="Provenance: URL, commit:SHA, file:PATH, an item id or text.")] = None,
    json: Json = False, agent: As = None, path: Repo = None,
) -> None:
    """Create a work item; prints its id. With -e, write its title and description in your editor."""


@verb(items.show)
def show(
    item: ItemsArg,
    web: Annotated[bool, typer.Option("--web", help="Open the item's page on the running gw serve board "
                                                    "(prints the URL when no browser).")] = False,
    json: Json = False, agent: As = None, path: Repo = None,
) -> None:
    """Show items for a person: status, holder and lease time left, numbered criteria, dependencies and
    dependents, decisions, the thread's last messages (--json: the stored fields and the lease)."""


@verb(items.list_items, "list")
def list_(
    status: Annotated[Optional[list[str]], typer.Option("--status", "-s", help="Only this status (repeatable; "
                                                                               "expired: a lease past its expiry).")] = None,
    label: Annotated[Optional[list[str]], typer.Option("--label", "-l", help="Only items with this label (repeatable: all of them).")] = None,
    label_any: LabelAny = None,
    all: Annotated[bool, typer.Option("--all", "-a", help="Include done and cancelled items.")] = False,
    holder: Annotated[Optional[str], typer.Option("--holder", help="Only items leased by this identity (@me: "
                                                                   "yours).")] = None,
    mine: Annotated[bool, typer.Option("--mine", help="Only the items you hold (--holder @me).")] = False,
    owner: Annotated[Optional[str], typer.Option("--owner", help="Only items owned by this identity.")] = None,
    priority: Annotated[Optional[int], typer.Option("--priority", "-p", help="Only items of this priority.")] = None,
    sort: Annotated[Optional[str], typer.Option("--sort", help="rank (default: best first), created, id or title.")] = None,
    limit: Annotated[Optional[int], typer.Option("--limit", "-n", help="At most this many (says so on stderr when more match).")] = None,
    text: Annotated[Optional[str], typer.Option("--text", help="Only items whose title, description, criteria, "
                                                               "decisions or thread hold this (as gw search).")] = None,
    json: Json = False, agent: As = None, path: Repo = None,
) -> None:
    """List items, best first (open and active ones unless --all or --status; -s expired: leases past their expiry)."""


@verb(items.ready)
def ready(
    limit: Annotated[Optional[int], typer.Option("--limit", "-n", help="At most this many (says so on stderr when more match).")] = None,
    label: Annotated[Optional[list[str]], typer.Option("--label", "-l", help="Only items with this label (repeatable: all of them).")] = None,
    label_any: LabelAny = None,
    owner: Annotated[Optional[str], typer.Option("--owner", help="Only items owned by this identity.")] = None,
    priority: Annotated[Optional[int], typer.Option("--priority", "-p", help="Only items of this priority.")] = None,
    sort: Annotated[Optional[str], typer.Option("--sort", help="rank (default: best first), created, id or title.")] = None,
    explain: Annotated[bool, typer.Option("--explain", help="Every open item: ready, or why not.")] = False,
    json: Json = False, agent: As = None, path: Repo = None,
) -> None:
    """Open, unleased items whose dependencies are done, best first."""


@verb(items.edit)
def edit(
    item: ItemsArg,
    title: Annotated[Optional[str], typer.Option("--title")] = None,
    description: Annotated[Optional[str], typer.Option("-d", "--description", help="'-' reads it from stdin.")] = None,
    description_file: DescriptionFile = None,
    use_editor: UseEditor = False,
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
    """Change items' fields (the holder only, while it is leased). -e edits the title and description in your
    editor (one item). Several ids: one command each (e.g. --add-label on many); exit code of the first failure."""


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
    item: ItemsArg,
    force: Annotated[bool, typer.Option("--force", help="Even with unchecked criteria (needs --reason) or "
                                                        "dependencies not done.")] = False,
    reason: Annotated[Optional[str], typer.Option("--reason")] = None,
    into: Annotated[Optional[str], typer.Option("--into", help="Where to publish an open session.")] = None,
    remote: Annotated[Optional[str], typer.Option("--remote", help="Publish an open session to this remote.")] = None,
    fence: Fence = None, offline: Offline = False, json: Json = False, agent: As = None, path: Repo = None,
) -> None:
    """Mark items done; publishes your open session of each first, and releases your lease (several ids: one
    command each; exit code of the first failure)."""


@verb(items.cancel)
def cancel(
    item: ItemsArg, reason: Annotated[Optional[str], typer.Option("--reason")] = None,
    fence: Fence = None, offline: Offline = False, json: Json = False, agent: As = None, path: Repo = None,
) -> None:
    """Cancel items (several ids: one command each; exit code of the first failure)."""


@verb(items.reopen)
def reopen(
    item: ItemsArg, reason: Annotated[Optional[str], typer.Option("--reason")] = None,
    json: Json = False, agent: As = None, path: Repo = None,
) -> None:
    """Reopen done or cancelled items (several ids: one command each; exit code of the first failure)."""


@verb(items.history)
def history(item: ItemArg, json: Json = False, agent: As = None, path: Repo = None) -> None:
    """An item's own event history (append-only)."""


@verb(items.log)
def log(
    limit: Annotated[Optional[int], typer.Option("-n", "--limit", help="At most this many commits.")] = None,
    json: Json = False, agent: As = None, path: Repo = None,
) -> None:
    """The state ref's history, newest first: one commit per command."""


# --- reports (commands/reports.py; read-only) ----------------------------------------------------


@verb(reports.blocked)
def blocked(json: Json = False, agent: As = None, path: Repo = None) -> None:
    """Items that cannot start, each with why: dependencies not done (named), a decision awaited, blocked by hand."""


@verb(reports.search)
def search(
    text: Annotated[str, typer.Argument(help="Text to find (case-insensitive).", show_default=False)],
    status: Annotated[Optional[list[str]], typer.Option("--status", "-s", help="Only this status (repeatable).")] = None,
    label: Annotated[Optional[list[str]], typer.Option("--label", "-l", help="Only items with this label (repeatable: all of them).")] = None,
    label_any: LabelAny = None,
    all: Annotated[bool, typer.Option("--all", "-a", help="Include done and cancelled items.")] = False,
    holder: Annotated[Optional[str], typer.Option("--holder", help="Only items leased by this identity (@me: "
                                                                   "yours).")] = None,
    mine: Annotated[bool, typer.Option("--mine", help="Only the items you hold (--holder @me).")] = False,
    owner: Annotated[Optional[str], typer.Option("--owner", help="Only items owned by this identity.")] = None,
    priority: Annotated[Optional[int], typer.Option("--priority", "-p", help="Only items of this priority.")] = None,
    sort: Annotated[Optional[str], typer.Option("--sort", help="rank (default: best first), created, id or title.")] = None,
    limit: Annotated[Optional[int], typer.Option("--limit", "-n", help="At most this many (says so on stderr when more match).")] = None,
    json: Json = False, agent: As = None, path: Repo = None,
) -> None:
    """Items whose title, description, criteria, decisions or thread hold TEXT, with where it matched (the filters of
    gw list)."""


dep_app = typer.Typer(help="Dependencies between items.", no_args_is_help=True)
app.add_typer(dep_app, name="dep")


@verb(reports.dep_tree, "tree", group=dep_app)
def dep_tree(item: ItemArg, json: Json = False, agent: As = None, path: Repo = None) -> None:
    """What an item depends on and what depends on it, recursively (both directions)."""


@verb(reports.stale)
def stale(
    held_for: Annotated[Optional[str], typer.Option("--for", help="Also list leases held longer than this "
                                                                  "(e.g. 30m, 2h; default 1h).")] = None,
    json: Json = False, agent: As = None, path: Repo = None,
) -> None:
    """Leases past their expiry, and leases held longer than --for; with whether they can be taken over."""


@verb(reports.summary)
def summary(json: Json = False, agent: As = None, path: Repo = None) -> None:
    """Counts: items by status, ready, blocked, expired leases, open questions (items awaiting a decision)."""


@verb(reports.prime)
def prime(json: Json = False, agent: As = None, path: Repo = None) -> None:
    """What an agent needs in its context: its identity, the work loop, exit codes, and the items it holds."""


@plain(plain_verbs.onboard)
def onboard(json: Json = False, path: Repo = None) -> None:
    """Print a snippet for AGENTS.md / CLAUDE.md that points agents at `gw prime`."""


@app.command()
@typer_only("prints typer's own completion script")
def completion(
    shell: Annotated[str, typer.Argument(help="bash, zsh or fish.", show_default=False)],
    json: Json = False, path: Repo = None,
) -> None:
    """Print the shell completion script (commands, options, item ids): eval "$(gw completion bash)"."""
    # Not through verb(): it reads no repository.
    from typer._completion_shared import get_completion_script

    from ..errors import UsageError
    from .output import emit_json, fail

    if shell not in ("bash", "zsh", "fish"):
        raise typer.Exit(fail(UsageError(f"no completion for shell {shell!r}: use bash, zsh or fish"), json))
    script = get_completion_script(prog_name="gw", complete_var="_GW_COMPLETE", shell=shell) + "\n"
    if json:
        emit_json({"ok": True, "item": None, "shell": shell, "script": script})
    else:
        sys.stdout.write(script)


# --- leases (commands/leases.py) ------------------------------------------------------------------


@verb(leases.claim)
def claim(
    item: Annotated[Optional[str], typer.Argument(help="Item id or prefix (or use --next).", show_default=False,
                                                  autocompletion=_complete_items)] = None,
    next: Annotated[bool, typer.Option("--next", help="Claim the best ready item; prints its id.")] = False,
    label: Annotated[Optional[list[str]], typer.Option("--label", "-l", help="With --next: only items with this label (repeatable: all of them).")] = None,
    label_any: LabelAny = None,
    owner: Annotated[Optional[str], typer.Option("--owner", help="With --next: only items owned by this identity.")] = None,
    priority: Annotated[Optional[int], typer.Option("--priority", "-p", help="With --next: only items of this priority.")] = None,
    force: Annotated[bool, typer.Option("--force", help="Even when its dependencies are not done (exit 6 "
                                                        "without).")] = False,
    ttl: Ttl = None, offline: Offline = False, json: Json = False, agent: As = None, path: Repo = None,
) -> None:
    """Acquire the lease on an item. Exit 75 if someone else holds it (retry later); exit 6 if its
    dependencies are not done (--force to claim it anyway)."""


@verb(leases.renew)
def renew(item: ItemArg, ttl: Ttl = None, fence: Fence = None, offline: Offline = False, json: Json = False,
          agent: As = None, path: Repo = None) -> None:
    """Extend your lease."""


@verb(leases.release)
def release(item: ItemsArg, fence: Fence = None, offline: Offline = False, json: Json = False, agent: As = None,
            path: Repo = None) -> None:
    """Give your leases up (several ids: one command each; exit code of the first failure)."""


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


@plain(plain_verbs.demo)
def demo(
    what: Annotated[Optional[str], typer.Argument(metavar="[run]", help="run: the launch demo (two shells race gw "
                                                                       "run on one item).", show_default=False)] = None,
    keep: Annotated[bool, typer.Option("--keep", help="Keep the demo repository.")] = False,
    json: Json = False,
) -> None:
    """Run the demo on a throwaway repository: items, a two-process claim race, release, the log. `gw demo run`:
    two shells race `gw run` on one item; one agent starts, the other is told which execution runs."""


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
    """Messages to you or on items you hold: unread, then read but unanswered; oldest first. Your reply with
    `gw msg --reply-to SEQ` answers a message (a decision request is answered by `gw decide`)."""


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


@plain(plain_verbs.session_commit, "commit", group=session_app)
def session_commit(
    session: SessionArg = None,
    file: Annotated[Optional[list[str]], typer.Option("--file", "-f", help="A file this commit changes (repeat).")] = None,
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
    reason: Annotated[Optional[str], typer.Option("--reason")] = None,
    json: Json = False, agent: As = None, path: Repo = None,
) -> None:
    """Publish a session's commit (fast-forward, or a clean merge whose gates pass; exit 13 otherwise) and mark the
    item done."""


@plain(plain_verbs.hooks_install, "install", group=hooks_app)
def hooks_install(
    server: Annotated[Optional[str], typer.Option("--server", help="Install pre-receive into this bare repository.",
                                                  show_default=False)] = None,
    use_hooks_path: Annotated[bool, typer.Option("--use-hooks-path", help="Install into core.hooksPath when it is set.")] = False,
    json: Json = False, agent: As = None, path: Repo = None,
) -> None:
    """Install the hooks: locally reference-transaction + pre-commit; with --server, pre-receive. Idempotent."""


# --- running agents under a lease (commands/launch.py) ---------------------------------------------

ExecArg = Annotated[str, typer.Argument(metavar="EXEC", help="Execution id (gw runs lists them).", show_default=False)]


@verb(launch.run)
def run(
    item: ItemArg,
    command: Annotated[Optional[list[str]], typer.Argument(metavar="-- CMD ARGS...", help="The agent's command line.",
                                                          show_default=False)] = None,
    backend: Annotated[str, typer.Option("--backend", help="Where it runs: tmux or subprocess.")] = "tmux",
    ttl: Ttl = None,
    execution: Annotated[Optional[str], typer.Option("--id", help="Execution id (default: minted); a retry with the "
                                                                  "same id never starts a second run.")] = None,
    env: Annotated[Optional[list[str]], typer.Option("--env", help="NAME=VALUE for the agent's environment "
                                                                   "(repeatable); only the names are recorded, so pass "
                                                                   "secrets here, never in the command.")] = None,
    json: Json = False, agent: As = None, path: Repo = None,
) -> None:
    """Run an agent on an item under its lease: reserve, claim (or use your live lease), record, launch; prints the
    execution id. A live execution of the item is reported instead (exit 0, or 75 while its launch is in progress)."""


@verb(launch.runs)
def runs(
    item: Annotated[Optional[str], typer.Option("--item", help="Only this item's executions.")] = None,
    state: Annotated[Optional[str], typer.Option("--state", help="Only executions in this state.")] = None,
    json: Json = False, agent: As = None, path: Repo = None,
) -> None:
    """Executions recorded on the state ref (gw run), oldest first."""


@verb(launch.capture)
def capture(
    execution: ExecArg,
    lines: Annotated[Optional[int], typer.Option("--lines", "-n", help="Only the last N lines.")] = None,
    json: Json = False, agent: As = None, path: Repo = None,
) -> None:
    """Print what an execution's terminal shows (tmux) or what it wrote (subprocess)."""


@verb(launch.send)
def send(
    execution: ExecArg,
    text: Annotated[str, typer.Argument(help="Text to type into the execution's terminal.", show_default=False)],
    key: Annotated[Optional[list[str]], typer.Option("--key", help="A key to press after the text, e.g. Enter (repeatable).")] = None,
    enter: Annotated[bool, typer.Option("--enter", help="Press Enter after the text.")] = False,
    json: Json = False, agent: As = None, path: Repo = None,
) -> None:
    """Type text (and keys) into a running execution."""


@verb(launch.stop)
def stop(
    execution: ExecArg,
    reason: Annotated[Optional[str], typer.Option("--reason", help="Why it is stopped (recorded).")] = None,
    json: Json = False, agent: As = None, path: Repo = None,
) -> None:
    """Stop an execution: kill its process (group or tmux session) and record it stopped."""


@verb(launch.attach)
def attach(execution: ExecArg, json: Json = False, agent: As = None, path: Repo = None) -> None:
    """Attach to an execution's tmux session on gitwork's own tmux server (--json: print the command instead)."""


@verb(launch.coordinate)
def coordinate(
    once: Annotated[bool, typer.Option("--once", help="One pass, then exit.")] = False,
    interval: Annotated[str, typer.Option("--interval", help="Time between passes, e.g. 5s.")] = "5s",
    failures: Annotated[int, typer.Option("--failures", help="Hand an item off (reason reconcile-failure) after this "
                                                            "many failed passes in a row.", min=1)] = 3,
    ttl: Annotated[Optional[str], typer.Option("--ttl", help="The coordinator's own lease on this host (default: "
                                                             "six intervals, at least 30s).")] = None,
    json: Json = False, agent: As = None, path: Repo = None,
) -> None:
    """Keep this host's executions in step: record exits and lost ones, renew the leases of running ones, kill an
    execution whose lease ended (taken over, revoked, expired), and hand off an item that cannot be reconciled.
    One per host (a lease on coordinators/HOST): a second one exits 75."""


@verb(launch.context)
def context(item: ItemArg, json: Json = False, agent: As = None, path: Repo = None) -> None:
    """What an agent is told at launch (launch.md): the item, its criteria and decisions, the unread thread, the lease,
    and how to renew, report, ask, hand off and finish."""


# --- the MCP server (commands/mcp.py; issue 17) ------------------------------------------------------


from .commands import mcp as mcp_server  # noqa: E402  (kept in this block; it imports nothing of the SDK)


@verb(mcp_server.mcp, "mcp")
def mcp(
    tools: Annotated[bool, typer.Option("--tools", help="Print the tool list an agent is given, and its size; "
                                                      "serve nothing.")] = False,
    json: Json = False, agent: As = None,
    path: Annotated[Optional[str], typer.Option("-C", "--repo", help="The repository to serve (default: here).")] = None,
) -> None:
    """Serve this work plane to an MCP client over stdio, as one identity (--as, GW_AGENT or the default):
    tools for the agent loop (ready, claim, check, msg, done ...), resources gitwork://item/ID. See docs/mcp.md."""

# --- delegation to peers (commands/delegation.py): these commands exist only when a peer is configured ---

PEER_VERBS = frozenset(("delegate", "delegations", "delegation", "receipts"))
Peer = Annotated[str, typer.Option("--to", help="The peer (git config gitwork.peer.<name>.*).", show_default=False)]
RequestId = Annotated[Optional[str], typer.Option("--id", help="Request id (d-...): the same id again re-sends the same "
                                                               "signed request, answered by its original receipt.")]
DelegationArg = Annotated[str, typer.Argument(metavar="DELEGATION", help="The delegated start (gw delegations).",
                                              show_default=False)]


def peer_app() -> typer.Typer:
    """The delegation commands, on an app of their own: ``run_app`` uses it only for a delegation verb in a
    repository with a peer configured (``delegation.peers.configured_at``); without one the verbs are unknown."""
    from .commands import delegation

    peers = typer.Typer(name="gw", no_args_is_help=True, add_completion=False, pretty_exceptions_enable=False,
                        context_settings={"help_option_names": ["-h", "--help"]}, rich_markup_mode=None)
    delegation_app = typer.Typer(help="A delegated start on a peer: observe it, cancel it.", no_args_is_help=True)
    peers.add_typer(delegation_app, name="delegation")
    receipts_app = typer.Typer(help="Signed delegation receipts on the state ref.", no_args_is_help=True)
    peers.add_typer(receipts_app, name="receipts")

    @verb(delegation.delegate, group=peers)
    def delegate(
        item: ItemArg, to: Peer,
        plan: Annotated[bool, typer.Option("--plan", help="Only ask what would run there (dry).")] = False,
        test: Annotated[bool, typer.Option("--test", help="Only ask whether it could run there (backend, repository, build).")] = False,
        ttl: Ttl = None, request_id: RequestId = None, json: Json = False, agent: As = None, path: Repo = None,
    ) -> None:
        """Delegate an item to a peer: a signed request; the peer reserves, leases and launches, and answers a signed
        receipt, recorded here and there. --plan or --test only ask."""

    @verb(delegation.delegations, group=peers)
    def delegations(
        item: Annotated[Optional[str], typer.Option("--item", help="Only this item's delegations.")] = None,
        json: Json = False, agent: As = None, path: Repo = None,
    ) -> None:
        """Delegations recorded on the state ref (sent and received), oldest first, and requests kept here without a
        signed answer yet (outcome unanswered: send them again with gw delegate --id)."""

    @verb(delegation.observe, "observe", group=delegation_app)
    def delegation_observe(delegation_id: DelegationArg, request_id: RequestId = None, json: Json = False,
                           agent: As = None, path: Repo = None) -> None:
        """Ask the peer how a delegated start is doing: state, exit, terminal capture, thread (a signed receipt)."""

    @verb(delegation.cancel, "cancel", group=delegation_app)
    def delegation_cancel(
        delegation_id: DelegationArg,
        reason: Annotated[Optional[str], typer.Option("--reason", help="Why (recorded on the peer).")] = None,
        request_id: RequestId = None, json: Json = False, agent: As = None, path: Repo = None,
    ) -> None:
        """Ask the peer to stop a delegated start (a signed receipt)."""

    @verb(delegation.receipts_verify, "verify", group=receipts_app)
    def receipts_verify(
        item: Annotated[Optional[str], typer.Argument(help="Only this item's delegations.", show_default=False)] = None,
        json: Json = False, agent: As = None, path: Repo = None,
    ) -> None:
        """Check every stored delegation record: both signatures and the chain request -> receipt (exit 8 if one fails)."""

    return peers


def _peer_target(argv: list[str]) -> typer.Typer | None:
    """``peer_app()`` for a delegation verb in a repository with a peer configured, else ``None``: one git config
    read, and only when the verb is a delegation one."""
    if not argv or argv[0] not in PEER_VERBS:
        return None
    from ..delegation.peers import configured_at

    where = None  # the command's -C, spelt "-C DIR" or "-CDIR" (the last one wins, as for the parser)
    for index, arg in enumerate(argv):
        if arg == "--":
            break
        if arg == "-C" and index + 1 < len(argv):
            where = argv[index + 1]
        elif arg.startswith("-C") and len(arg) > 2 and (index == 0 or argv[index - 1] != "-C"):
            where = arg[2:]
    return peer_app() if configured_at(where) else None
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


# --- transfer (commands/transfer.py): apply, import, export, shadow (issue 16) ---------------------


@verb(transfer.apply, "apply")
def apply_(
    source: Annotated[str, typer.Argument(help="A file holding a command document (YAML or JSON), JSON lines or "
                                               "YAML documents separated by --- (several: one batch, one commit, "
                                               "all or nothing), or - for stdin.")],
    json: Json = False, agent: As = None, path: Repo = None,
) -> None:
    """Apply command documents directly (the same documents every face submits); several are one batch."""


@verb(transfer.import_, "import")
def import_(
    kind: Annotated[str, typer.Argument(help="beads, github, csv or jsonl (gitwork's own export).", show_default=False)],
    source: Annotated[str, typer.Argument(help="The export file, or - for stdin.", show_default=False)],
    mapping: Annotated[Optional[str], typer.Option("--map", help="csv: field=Column pairs (external=Key,title=Summary,"
                                                                 "...) or a JSON/YAML file of them.")] = None,
    batch: Annotated[int, typer.Option("--batch", help="Items per batch (one commit each).")] = 500,
    progress: Annotated[bool, typer.Option("--progress/--no-progress", help="A progress bar on stderr when it is "
                                                                            "a terminal.")] = True,
    prefer: Annotated[str, typer.Option("--prefer", help="A field changed on both sides since the last import: "
                                                         "gitwork (keep gitwork's value, report the conflict) or "
                                                         "source (take the source's).")] = "gitwork",
    json: Json = False, agent: As = None, path: Repo = None,
) -> None:
    """Import another tracker's export: a re-import takes only what the source changed since the last one."""


@verb(transfer.export)
def export(
    format: Annotated[str, typer.Option("--format", "-f", help="jsonl (gitwork's own), beads or csv.")] = "jsonl",
    out: Annotated[Optional[str], typer.Option("--output", "-o", help="Write to this file (default: stdout).")] = None,
    json: Json = False, agent: As = None, path: Repo = None,
) -> None:
    """Export every item (with its thread) in a format gw import reads back."""


shadow_app = typer.Typer(help="Shadow mode: compare gitwork with the tracker you still run, report only.",
                         no_args_is_help=True)
app.add_typer(shadow_app, name="shadow")


@verb(transfer.shadow_add, "add", group=shadow_app)
def shadow_add(
    name: Annotated[str, typer.Argument(help="A name for this comparison.", show_default=False)],
    kind: Annotated[str, typer.Option("--kind", help="beads, github, csv or jsonl.")],
    source: Annotated[str, typer.Option("--source", help="The other tracker's export file, or a command printing it.")],
    mapping: Annotated[Optional[str], typer.Option("--map", help="csv: field=Column pairs or a file of them.")] = None,
    json: Json = False, agent: As = None, path: Repo = None,
) -> None:
    """Define a shadow comparison (kept in this clone only: its command never travels)."""


@verb(transfer.shadow_report, "report", group=shadow_app)
def shadow_report(
    name: Annotated[Optional[str], typer.Argument(help="The shadow (optional when there is one).", show_default=False)] = None,
    since: Annotated[Optional[str], typer.Option("--since", help="Also show the reports recorded in this window "
                                                                 "(e.g. 7d, or an instant).")] = None,
    record: Annotated[bool, typer.Option("--record", help="Keep this report on the state ref.")] = False,
    json: Json = False, agent: As = None, path: Repo = None,
) -> None:
    """Compare the other tracker's current export with gitwork: every divergence, counts, agreement rate."""


# --- gw serve: the REST API and the board (commands/serve.py; issue 14) -----------------------------

serve_app = typer.Typer(help="The REST API (OpenAPI at /docs) and the web board over this repository; "
                             "`gw serve token` manages who may use it.")
app.add_typer(serve_app, name="serve")
token_app = typer.Typer(help="Bearer tokens of gw serve (stored hashed in the common git dir).", no_args_is_help=True)
serve_app.add_typer(token_app, name="token")


@serve_app.callback(invoke_without_command=True)
@typer_only("starts FastAPI and uvicorn, which cost more than typer")
def serve(
    ctx: typer.Context,
    bind: Annotated[Optional[str], typer.Option("--bind", help="HOST:PORT to listen on (default 127.0.0.1:8765; "
                                                               "port 0: any free port).")] = None,
    repo: Annotated[Optional[str], typer.Option("--repo", help="The repository to serve (default: this one).")] = None,
    public: Annotated[bool, typer.Option("--public", help="Allow a HOST that is not loopback (prints a warning).")] = False,
    cors: Annotated[Optional[list[str]], typer.Option("--cors", help="Allow this browser origin (repeatable; "
                                                                     "default: no CORS).")] = None,
    json: Json = False, agent: As = None, path: Repo = None,
) -> None:
    """Run the REST API and the board until interrupted: every request needs a token (gw serve token add)."""
    if ctx.invoked_subcommand is None:
        _run(serving.serve, json, repo or path, agent, bind=bind, repo=repo, public=public, cors=cors)


@verb(serving.token_add, "add", group=token_app)
def serve_token_add(
    name: Annotated[str, typer.Argument(help="The identity the token acts as.", show_default=False)],
    role: Annotated[str, typer.Option("--role", help="agent, person or admin (replaces the settings' role for "
                                                     "this identity in the server).")] = "agent",
    json: Json = False, agent: As = None, path: Repo = None,
) -> None:
    """Create a token for NAME; prints it once (only its hash is stored)."""


@verb(serving.token_list, "list", group=token_app)
def serve_token_list(json: Json = False, agent: As = None, path: Repo = None) -> None:
    """Tokens: id, identity, role, created, revoked (never the token itself)."""


@verb(serving.token_revoke, "revoke", group=token_app)
def serve_token_revoke(
    which: Annotated[str, typer.Argument(metavar="NAME|ID", help="A token id (or a prefix of one), or an identity "
                                         "with one live token; naming several is refused (exit 4).",
                                         show_default=False)],
    json: Json = False, agent: As = None, path: Repo = None,
) -> None:
    """Revoke one token: the server refuses it from the next request and ends its open event streams."""


def run_app(argv: list[str]) -> int:
    """Run the typer app. A usage error is reported like every other error (docs/exit-codes.md): one
    line on stderr and, with --json, one JSON error object on stdout; exit 2."""
    if os.environ.get("_GW_COMPLETE"):  # a shell asking for completions (gw completion SHELL)
        from typer._completion_classes import completion_init

        completion_init()
    try:
        result = (_peer_target(argv) or app)(args=argv, prog_name="gw", standalone_mode=False)
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
        message = exc.format_message()  # type: ignore[attr-defined]  # click's, by the hasattr test above
        return fail(UsageError(" ".join(str(message).split()) + hint), "--json" in argv)
    except KeyboardInterrupt:
        return 130
    return result if isinstance(result, int) else 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(run_app(sys.argv[1:]))
