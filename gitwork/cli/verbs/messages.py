"""Declarations of the conversation verbs (commands/messages.py)."""

# No ``from __future__ import annotations``: typer reads the verbs' annotations on every build of the click
# command, and string ones made it ``eval`` each (tests/test_suite_speed.py).

from typing import Annotated, Optional

import typer

from ..commands import messages
from ..declare import (
    As,
    Fence,
    ItemArg,
    Json,
    Repo,
    verb,
)

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
    pull: Annotated[float, typer.Option(
        "--pull", help="With --follow and an arbiter remote: seconds between pulls from it (other machines' posts)."
    )] = 2.0,
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
    """Messages to you or on items you hold or own: unread, then read but unanswered; oldest first. Your reply with
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
