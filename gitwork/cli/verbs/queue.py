"""Declarations of the publish queue's verbs (commands/queue.py; gitwork/pubqueue.py, docs/sessions.md)."""

# No ``from __future__ import annotations``: typer reads the verbs' annotations on every build of the click
# command, and string ones made it ``eval`` each (tests/test_suite_speed.py).

from typing import Annotated, Optional

import typer

from .. import helptext
from ..commands import queue
from ..declare import As, Json, Repo, _run, app, typer_only, verb

queue_app = typer.Typer(help="The publish queue on the arbiter: sessions waiting for the publisher to land them "
                             "on the code remote's branch, gated on its current tip.", epilog=helptext.epilog("queue_"))
app.add_typer(queue_app, name="queue")
QueueRemote = Annotated[Optional[str], typer.Option("--remote", help="The code remote (default: the arbiter remote, "
                                                                     "else origin).")]


@queue_app.callback(invoke_without_command=True)
@typer_only("a group's own callback (gw queue alone lists the queue, as gw queue list does)")
def queue_(ctx: typer.Context, json: Json = False, agent: As = None, path: Repo = None) -> None:
    """The publish queue, head first: position, session, item, holder, fence, commit, target (gw queue list)."""
    if ctx.invoked_subcommand is None:
        _run(queue.queue_list, json, path, agent)


@verb(queue.queue_list, "list", group=queue_app, sample=[])
def queue_list(json: Json = False, agent: As = None, path: Repo = None) -> None:
    """The publish queue, head first: position, session, item, holder, fence, commit, target."""


@verb(queue.work, "work", group=queue_app, sample=["--once"])
def queue_work(
    remote: QueueRemote = None,
    once: Annotated[bool, typer.Option("--once", help="One pass over the queue, then release the publisher lease "
                                                      "(exit 75 if another publisher holds it).")] = False,
    ttl: Annotated[Optional[str], typer.Option("--ttl", help="The publisher lease's length, renewed before each "
                                                             "entry (default 120s).")] = None,
    json: Json = False, agent: As = None, path: Repo = None,
) -> None:
    """Be the publisher: take its lease, gate each queued session on the current tip, land it or send it back."""


@verb(queue.remove, "remove", group=queue_app)
def queue_remove(
    session: Annotated[str, typer.Argument(help="The queued session.", show_default=False)],
    reason: Annotated[Optional[str], typer.Option("--reason", help="Why (recorded in the history).")] = None,
    json: Json = False, agent: As = None, path: Repo = None,
) -> None:
    """Take a session out of the publish queue (its holder, or an admin)."""
