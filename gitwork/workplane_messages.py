"""The conversation verbs of the library face: ``wp.post``, ``ack``, ``ask``, ``decide``, ``thread``,
``follow``, ``inbox`` (mixed into :class:`gitwork.workplane.Workplane`).

The write verbs build one command document and submit it, nothing else: they read no state. The op
resolves, on the tip it is applied to, the item prefix, any message number (``3``, ``#3``,
``ITEM:3``) and, when no epoch is given, the lease epoch (``epoch: current``), and records what it
resolved in the document, so the commit (and a replay of it on another tip) names the same item,
messages and epoch. The read verbs resolve the item and the reader, then call the read side
(``conversations.py``).
"""

from __future__ import annotations

TYPE_CHECKING = False  # typing costs ~15 ms to import; annotations are strings anyway
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any

    from .engine import View
    from .store import Store
    from .workplane import Applied


def _epoch(epoch: int | None) -> int | str:
    """No epoch given: the op reads it on the tip the command is applied to (and records it)."""
    return "current" if epoch is None else epoch


class Conversations:
    """The conversation verbs: each write builds one command document (``msg``, ``ack``, ``ask``,
    ``decide``) and submits it with ``do``; without ``epoch`` the op reads the item's lease epoch on
    the tip it lands on. Mixed into ``Workplane``, which provides ``context``, ``do``, ``store`` and
    ``settings``."""

    if TYPE_CHECKING:
        store: Store
        settings: Any

        def context(self) -> View: ...
        def do(self, op: str, *, offline: bool = False, **args: Any) -> Applied: ...

    # --- writing --------------------------------------------------------------------------------

    def current_epoch(self, item: str) -> int:
        """The item's lease epoch as this client sees it now (0 if it was never leased): what to pass
        as ``epoch`` to write under the epoch read now, so a later takeover makes the write stale."""
        ctx = self.context()
        lease = ctx.lease(ctx.resolve(item))
        return lease.epoch if lease is not None else 0

    def post(self, item: str, text: str, *, kind: str | None = None, reply_to: str | int | None = None,
             to: str | None = None, epoch: int | None = None, fence: int | None = None,
             msg_id: str | None = None) -> Applied:
        """Post a message (``reply_to``: a message number, ``#N``, ``ITEM:N`` or a message id)."""
        return self.do("msg", item=item, text=text, kind=kind, reply_to=reply_to, to=to, epoch=_epoch(epoch),
                       fence=fence, id=msg_id)

    def ack(self, item: str, seq: str | int, *, read: bool = False, responded: bool = False,
            reply: str | int | None = None, epoch: int | None = None, fence: int | None = None) -> Applied:
        """Move this reader's cursor to ``seq``: read, or (with ``reply``, its own answer) responded."""
        return self.do("ack", item=item, upto=seq, read=read or None, responded=responded or None, reply=reply,
                       epoch=_epoch(epoch), fence=fence)

    def ask(self, item: str, question: str, *, options: list[str] | None = None, to: str | None = None,
            epoch: int | None = None, fence: int | None = None, msg_id: str | None = None) -> Applied:
        """Ask for a decision (the holder only): posts a decision request and marks the item waiting."""
        return self.do("ask", item=item, text=question, options=options or None, to=to, epoch=_epoch(epoch),
                       fence=fence, id=msg_id)

    def decide(self, item: str, seq: str | int, *, choose: str, why: str, epoch: int | None = None,
               fence: int | None = None, msg_id: str | None = None) -> Applied:
        """Answer the decision request ``seq``: records a decision on the item and unblocks it."""
        return self.do("decide", item=item, question=seq, choose=choose, why=why, epoch=_epoch(epoch), fence=fence,
                       id=msg_id)

    # --- reading --------------------------------------------------------------------------------

    def thread(self, item: str, since: int = 0) -> tuple[str, list[dict[str, Any]]]:
        """``(full item id, messages)``: the item's thread messages numbered after ``since``, oldest first,
        each a mapping as ``gw thread --json`` prints it (``seq``, ``id``, ``kind``, ``by``, ``text``, ...)."""
        from .conversations import messages

        ctx = self.context()
        item_id = ctx.resolve(item)
        return item_id, messages(ctx.snapshot, item_id, since)

    def follow(self, item_id: str, since: int, emit: Callable[[dict[str, Any]], None], **options: Any) -> int:
        """Call ``emit`` with every message after ``since``, then with each new one as it lands; returns the
        last number seen. ``options``: ``timeout`` (seconds; none: follow until interrupted), ``poll``,
        ``refresh`` and ``refresh_every`` (see ``conversations.follow``). ``item_id`` must be a full id."""
        from .conversations import follow

        return follow(self.store, item_id, since, emit, **options)

    def inbox(self, who: str | None = None) -> dict[str, Any]:
        """``{who, unread, unanswered}`` for ``who`` (default: the acting identity): messages addressed to it or
        on items it holds or owns (docs/leases.md, "Who may post"), not its own, split into unread and read-but-not-responded-to, oldest first."""
        from .conversations import inbox

        return inbox(self.context().snapshot, who or self.settings.identity())
