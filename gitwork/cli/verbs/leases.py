"""Declarations of the lease verbs (commands/leases.py), the read cache (commands/cache.py) and several
machines (commands/remote.py)."""

# No ``from __future__ import annotations``: typer reads the verbs' annotations on every build of the click
# command, and string ones made it ``eval`` each (tests/test_suite_speed.py).

from typing import Annotated, Optional

import typer

from ..commands import cache, leases, remote
from ..commands import plain as plain_verbs
from ..declare import (
    As,
    Fence,
    ItemArg,
    ItemsArg,
    Json,
    LabelAny,
    Offline,
    Repo,
    Ttl,
    _complete_items,
    app,
    plain,
    verb,
)

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


@verb(leases.conflicts, sample=[])
def conflicts(json: Json = False, agent: As = None, path: Repo = None) -> None:
    """Live pairs that would conflict if both published now: path leases of different holders whose globs
    overlap, and live session branches that git merge-tree cannot merge cleanly."""


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
    message: Annotated[Optional[str], typer.Option("--message", "-m", help="A note for the next holder (posted to the thread).")] = None,
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


# --- settings (gw config; gitwork/settings_edit.py, commands/plain.py) ------------------------------

config_app = typer.Typer(help="Settings: the value in force and where it comes from; set in this clone's git "
                              "config or, with --shared, in the tracked .workplane.", no_args_is_help=True)
app.add_typer(config_app, name="config")
ConfigKey = Annotated[str, typer.Argument(help="A setting (default_ttl or default-ttl; gw config list names them).",
                                          show_default=False)]


@plain(plain_verbs.config_get, "get", group=config_app)
def config_get(key: ConfigKey, json: Json = False, path: Repo = None) -> None:
    """Print a setting's value in force (--json: and its source: default, .workplane, git config, GW_*)."""


@plain(plain_verbs.config_set, "set", group=config_app)
def config_set(
    key: ConfigKey,
    value: Annotated[str, typer.Argument(help="The value (a list: a,b; a duration: 30m).", show_default=False)],
    shared: Annotated[bool, typer.Option("--shared/--local", help="Write the tracked .workplane (commit it to "
                                                                  "share) instead of this clone's git config "
                                                                  "(--local, the default).")] = False,
    json: Json = False, path: Repo = None,
) -> None:
    """Set a setting, checked first (a bad key or value: exit 5, nothing written)."""


@plain(plain_verbs.config_list, "list", group=config_app)
def config_list(json: Json = False, path: Repo = None) -> None:
    """Every setting: its value in force and where it comes from; those the arbiter remote decides marked."""


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
