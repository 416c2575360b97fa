"""Declarations of delegation to peers (commands/delegation.py): present only when a peer is configured."""

# No ``from __future__ import annotations``: typer reads the verbs' annotations on every build of the click
# command, and string ones made it ``eval`` each (tests/test_suite_speed.py).

from typing import Annotated, Optional

import typer

from ..declare import (
    As,
    ItemArg,
    Json,
    Repo,
    Ttl,
    verb,
)

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
    from ..commands import delegation

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


def _peer_target(argv: list[str]) -> bool:
    """Whether ``argv`` is a delegation verb in a repository with a peer configured (then ``peer_app()`` runs
    it): one git config read, and only when the verb is a delegation one."""
    if not argv or argv[0] not in PEER_VERBS:
        return False
    from ...delegation.peers import configured_at

    where = None  # the command's -C, spelt "-C DIR" or "-CDIR" (the last one wins, as for the parser)
    for index, arg in enumerate(argv):
        if arg == "--":
            break
        if arg == "-C" and index + 1 < len(argv):
            where = argv[index + 1]
        elif arg.startswith("-C") and len(arg) > 2 and (index == 0 or argv[index - 1] != "-C"):
            where = arg[2:]
    return configured_at(where)
