"""Declarations of the item verbs (commands/items.py) and the read-only reports (commands/reports.py)."""

# No ``from __future__ import annotations``: typer reads the verbs' annotations on every build of the click
# command, and string ones made it ``eval`` each (tests/test_suite_speed.py).

import sys
from typing import Annotated, Optional

import typer

from .. import helptext
from ..commands import items, reports
from ..commands import plain as plain_verbs
from ..declare import (
    As,
    CreatedAfter,
    CreatedBefore,
    DescriptionFile,
    ExcludeLabel,
    Fence,
    ItemArg,
    ItemsArg,
    Json,
    LabelAny,
    Offline,
    Repo,
    Reverse,
    Since,
    SortBy,
    UpdatedAfter,
    UpdatedBefore,
    UseEditor,
    _complete_items,
    app,
    plain,
    typer_only,
    verb,
)

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
    type: Annotated[Optional[str], typer.Option("-t", "--type", help="bug, feature, task, epic or chore; default task.")] = None,
    parent: Annotated[Optional[str], typer.Option("--parent", help="The item this one is part of (gw children lists them).")] = None,
    lease_path: Annotated[Optional[list[str]], typer.Option("--path", help="A path glob the item will change, e.g. 'src/api/**' (repeatable): claiming it leases them.")] = None,
    template: Annotated[Optional[str], typer.Option("--template", help="Start from this template of .workplane's "
                                                                      "templates: (options given override it; "
                                                                      "-l and -c add to its lists).")] = None,
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
    status: Annotated[Optional[list[str]], typer.Option("--status", "-s", help="Only this status (repeatable, or "
                                                                               "a,b; expired: a lease past its expiry; "
                                                                               "blocked: also waiting on a dependency, "
                                                                               "as gw blocked).")] = None,
    label: Annotated[Optional[list[str]], typer.Option("--label", "-l", help="Only items with this label (repeatable, "
                                                                             "or a,b: all of them).")] = None,
    label_any: LabelAny = None,
    exclude_label: ExcludeLabel = None,
    all: Annotated[bool, typer.Option("--all", "-a", help="Include done and cancelled items.")] = False,
    holder: Annotated[Optional[str], typer.Option("--holder", help="Only items leased by this identity (@me: "
                                                                   "yours).")] = None,
    mine: Annotated[bool, typer.Option("--mine", help="Only the items you hold (--holder @me).")] = False,
    owner: Annotated[Optional[str], typer.Option("--owner", help="Only items owned by this identity.")] = None,
    priority: Annotated[Optional[int], typer.Option("--priority", "-p", help="Only items of this priority.")] = None,
    sort: SortBy = None, reverse: Reverse = False,
    limit: Annotated[Optional[int], typer.Option("--limit", "-n", help="At most this many (says so on stderr when more match).")] = None,
    text: Annotated[Optional[str], typer.Option("--text", help="Only items whose title, description, criteria, "
                                                               "decisions or thread hold this (as gw search).")] = None,
    type: Annotated[Optional[list[str]], typer.Option("-t", "--type", help="Only items of this type (repeatable: any "
                                                                           "of them): bug, feature, task, epic, chore.")] = None,
    parent: Annotated[Optional[str], typer.Option("--parent", help="Only the children of this item.")] = None,
    created_after: CreatedAfter = None, created_before: CreatedBefore = None, updated_after: UpdatedAfter = None,
    updated_before: UpdatedBefore = None,
    json: Json = False, agent: As = None, path: Repo = None,
) -> None:
    """List items, best first (open and active ones unless --all or --status; -s expired: leases past their expiry)."""


@verb(items.children, sample=["{item}"])
def children(
    item: ItemArg,
    type: Annotated[Optional[list[str]], typer.Option("-t", "--type", help="Only children of this type (repeatable).")] = None,
    json: Json = False, agent: As = None, path: Repo = None,
) -> None:
    """List the items whose parent is ITEM, in every status, best first."""


@verb(items.ready)
def ready(
    limit: Annotated[Optional[int], typer.Option("--limit", "-n", help="At most this many (says so on stderr when more match).")] = None,
    label: Annotated[Optional[list[str]], typer.Option("--label", "-l", help="Only items with this label (repeatable, "
                                                                             "or a,b: all of them).")] = None,
    label_any: LabelAny = None,
    exclude_label: ExcludeLabel = None,
    owner: Annotated[Optional[str], typer.Option("--owner", help="Only items owned by this identity.")] = None,
    priority: Annotated[Optional[int], typer.Option("--priority", "-p", help="Only items of this priority.")] = None,
    sort: SortBy = None, reverse: Reverse = False,
    explain: Annotated[bool, typer.Option("--explain", help="Every open item: ready, or why not.")] = False,
    created_after: CreatedAfter = None, created_before: CreatedBefore = None, updated_after: UpdatedAfter = None,
    updated_before: UpdatedBefore = None,
    json: Json = False, agent: As = None, path: Repo = None,
) -> None:
    """Open, unleased items whose dependencies are done, best first."""


@verb(items.edit)
def edit(
    item: ItemsArg,
    title: Annotated[Optional[str], typer.Option("--title", help="The new one-line title.")] = None,
    description: Annotated[Optional[str], typer.Option("-d", "--description", help="'-' reads it from stdin.")] = None,
    description_file: DescriptionFile = None,
    use_editor: UseEditor = False,
    priority: Annotated[Optional[int], typer.Option("-p", "--priority", help="0 (highest) to 4 (lowest).")] = None,
    add_label: Annotated[Optional[list[str]], typer.Option("--add-label", help="Add this label (repeatable).")] = None,
    remove_label: Annotated[Optional[list[str]], typer.Option("--remove-label", help="Remove this label (repeatable).")] = None,
    add_dep: Annotated[Optional[list[str]], typer.Option("--add-dep", help="Depend on this item too (repeatable).")] = None,
    remove_dep: Annotated[Optional[list[str]], typer.Option("--remove-dep", help="No longer depend on this item (repeatable).")] = None,
    add_criterion: Annotated[Optional[list[str]], typer.Option("--add-criterion", help="Add an acceptance criterion (repeatable).")] = None,
    owner: Annotated[Optional[str], typer.Option("--owner", help="The new owner.")] = None,
    status: Annotated[Optional[str], typer.Option("--status", help="open or blocked.")] = None,
    reason: Annotated[Optional[str], typer.Option("--reason", help="Why (recorded in the history).")] = None,
    type: Annotated[Optional[str], typer.Option("-t", "--type", help="bug, feature, task, epic or chore.")] = None,
    parent: Annotated[Optional[str], typer.Option("--parent", help="The item this one is part of (not itself nor "
                                                                   "one of its descendants).")] = None,
    lease_path: Annotated[Optional[list[str]], typer.Option("--path", help="Add a path glob the item will change (repeatable).")] = None,
    remove_path: Annotated[Optional[list[str]], typer.Option("--remove-path", help="Remove a path glob (repeatable).")] = None,
    budget: Annotated[Optional[str], typer.Option("--budget", help="What its executions may cost in all, USD (owner "
                                                                   "or admin; gw run refuses once spent).")] = None,
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
    reason: Annotated[Optional[str], typer.Option("--reason", help="Why (recorded in the history).")] = None,
    into: Annotated[Optional[str], typer.Option("--into", help="Where to publish an open session.")] = None,
    remote: Annotated[Optional[str], typer.Option("--remote", help="Publish an open session to this remote.")] = None,
    fence: Fence = None, offline: Offline = False, json: Json = False, agent: As = None, path: Repo = None,
) -> None:
    """Mark items done; publishes your open session of each first, and releases your lease (several ids: one
    command each; exit code of the first failure)."""


@verb(items.cancel)
def cancel(
    item: ItemsArg, reason: Annotated[Optional[str], typer.Option("--reason", help="Why (recorded in the history).")] = None,
    duplicate_of: Annotated[Optional[str], typer.Option("--duplicate-of", help="The item this one duplicates (must "
                                                                               "exist; recorded in the reason and "
                                                                               "the event).")] = None,
    fence: Fence = None, offline: Offline = False, json: Json = False, agent: As = None, path: Repo = None,
) -> None:
    """Cancel items (several ids: one command each; exit code of the first failure)."""


@verb(items.reopen)
def reopen(
    item: ItemsArg, reason: Annotated[Optional[str], typer.Option("--reason", help="Why (recorded in the history).")] = None,
    json: Json = False, agent: As = None, path: Repo = None,
) -> None:
    """Reopen done or cancelled items (several ids: one command each; exit code of the first failure)."""


@verb(items.defer, sample=["{item}", "--until", "2h"])
def defer(
    item: ItemArg,
    until: Annotated[str, typer.Option("--until", help="When it may start: 2h, 3d, tomorrow (next UTC midnight), "
                                                       "2030-01-31 or 2030-01-31T09:00:00Z.")],
    fence: Fence = None, json: Json = False, agent: As = None, path: Repo = None,
) -> None:
    """Make an item wait until a time: not ready, not offered by claim --next, until then (no commit when
    it passes)."""


@verb(items.undefer)
def undefer(item: ItemArg, fence: Fence = None, json: Json = False, agent: As = None, path: Repo = None) -> None:
    """End an item's timer (gw defer): ready again now, unless something else holds it."""


@verb(items.wait, sample=["{item}", "--ref", "feature"])
def wait(
    item: ItemArg,
    ref: Annotated[Optional[str], typer.Option("--ref", help="Wait until this ref (or commit) is reachable from "
                                                             "--reachable-from, e.g. refs/pull/12/head.")] = None,
    reachable_from: Annotated[Optional[str], typer.Option("--reachable-from", help="The ref it must reach "
                                                                                   "(default main).")] = None,
    remote: Annotated[Optional[str], typer.Option("--remote", help="Fetch both refs from this git remote "
                                                                   "before each check.")] = None,
    command: Annotated[Optional[str], typer.Option("--command", help="Wait until this command exits 0 (run by "
                                                                     "the coordinator, without a shell; admins "
                                                                     "and the owner only).")] = None,
    every: Annotated[Optional[str], typer.Option("--every", help="Poll the command this often (default 30s), "
                                                                 "backing off up to 8x.")] = None,
    timeout: Annotated[Optional[str], typer.Option("--timeout", help="Give up (outcome timeout: the item is "
                                                                     "blocked) after this long (default 2h).")] = None,
    fence: Fence = None, json: Json = False, agent: As = None, path: Repo = None,
) -> None:
    """Make an item wait on a ref reachable from another (a PR merged) or on a command's exit (a CI check)."""


@verb(items.unwait)
def unwait(
    item: ItemArg,
    wait: Annotated[str, typer.Argument(help="The wait's number (gw show, gw blocked).")],
    json: Json = False, agent: As = None, path: Repo = None,
) -> None:
    """End one of an item's waits by hand (recorded as outcome cancelled)."""


waits_app = typer.Typer(help="What items wait on: refs and commands (gw defer, gw wait).", no_args_is_help=True)
app.add_typer(waits_app, name="waits")


@verb(items.waits_check, "check", group=waits_app)
def waits_check(json: Json = False, agent: As = None, path: Repo = None) -> None:
    """Check every open ref and command wait now, as the coordinator does each pass, recording outcomes."""


@verb(items.history)
def history(item: ItemArg, since: Since = None, json: Json = False, agent: As = None, path: Repo = None) -> None:
    """An item's own event history, oldest first, each change as old -> new (append-only)."""


@verb(items.log)
def log(
    item: Annotated[Optional[str], typer.Argument(help="Only this item: its history, as gw history shows it.",
                                                  show_default=False, autocompletion=_complete_items)] = None,
    limit: Annotated[Optional[int], typer.Option("-n", "--limit", help="At most this many commits.")] = None,
    since: Since = None,
    json: Json = False, agent: As = None, path: Repo = None,
) -> None:
    """The state ref's history, newest first: one commit per command (gw log ITEM: that item's history)."""


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
    sort: SortBy = None, reverse: Reverse = False, exclude_label: ExcludeLabel = None,
    limit: Annotated[Optional[int], typer.Option("--limit", "-n", help="At most this many (says so on stderr when more match).")] = None,
    created_after: CreatedAfter = None, created_before: CreatedBefore = None, updated_after: UpdatedAfter = None,
    updated_before: UpdatedBefore = None,
    json: Json = False, agent: As = None, path: Repo = None,
) -> None:
    """Items whose title, description, criteria, decisions or thread hold TEXT, with where it matched (the filters of
    gw list)."""


dep_app = typer.Typer(help="Dependencies between items.", no_args_is_help=True)
app.add_typer(dep_app, name="dep")


@verb(reports.dep_tree, "tree", group=dep_app)
def dep_tree(item: ItemArg, json: Json = False, agent: As = None, path: Repo = None) -> None:
    """What an item depends on and what depends on it, recursively (both directions)."""


@verb(reports.dep_graph, "graph", group=dep_app, sample=["{item}", "--format", "dot"])
def dep_graph(
    item: Annotated[Optional[str], typer.Argument(help="Only the graph around this item (what it depends on and "
                                                       "what depends on it).", show_default=False,
                                                  autocompletion=_complete_items)] = None,
    format: Annotated[str, typer.Option("--format", help="mermaid (default) or dot.")] = "mermaid",
    json: Json = False, agent: As = None, path: Repo = None,
) -> None:
    """The dependency graph as Mermaid or dot text (an arrow: do this first), whole or around ITEM."""


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


@verb(reports.whoami)
def whoami(json: Json = False, agent: As = None, path: Repo = None) -> None:
    """Who you act as here (--as, GW_AGENT, gitwork.agent or the default), your role, and the items you hold."""


@verb(reports.prime)
def prime(json: Json = False, agent: As = None, path: Repo = None) -> None:
    """What an agent needs in its context: its identity, the work loop, exit codes, and the items it holds."""


@plain(plain_verbs.onboard)
def onboard(json: Json = False, path: Repo = None) -> None:
    """Print a snippet for AGENTS.md / CLAUDE.md that points agents at `gw prime`."""


@plain(plain_verbs.doctor)
def doctor(json: Json = False, agent: As = None, path: Repo = None) -> None:
    """Check the repository, state ref, arbiter remote, hooks, read cache, identity and optional extras: one line
    each, ok or what to do; exit 1 when one fails. Reads only."""


@app.command(epilog=helptext.epilog("completion"))
@typer_only("prints typer's own completion script")
def completion(
    shell: Annotated[str, typer.Argument(help="bash, zsh or fish.", show_default=False)],
    json: Json = False, path: Repo = None,
) -> None:
    """Print the shell completion script (commands, options, item ids): eval "$(gw completion bash)"."""
    # Not through verb(): it reads no repository.
    from typer._completion_shared import get_completion_script

    from ...errors import UsageError
    from ..output import emit_json, fail

    if shell not in ("bash", "zsh", "fish"):
        raise typer.Exit(fail(UsageError(f"no completion for shell {shell!r}: use bash, zsh or fish"), json))
    script = get_completion_script(prog_name="gw", complete_var="_GW_COMPLETE", shell=shell) + "\n"
    if json:
        emit_json({"ok": True, "item": None, "shell": shell, "script": script})
    else:
        sys.stdout.write(script)


@plain(plain_verbs.help_, "help")
def help(
    words: Annotated[Optional[list[str]], typer.Argument(help="The verb (two words for a group's: session create).",
                                                         show_default=False)] = None,
    json: Json = False, path: Repo = None,
) -> None:
    """Show a verb's help: its options and examples (gw help alone: every verb, by topic)."""
