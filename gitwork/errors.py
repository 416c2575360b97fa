"""One error base and the exit codes every face maps it to.

Each refusal the engine or store can produce is a subclass of :class:`GwError` that carries its exit
code, so the CLI needs no table of its own and the JSON error shape is the same everywhere.
"""

from __future__ import annotations

import enum

TYPE_CHECKING = False  # typing costs ~15 ms to import; annotations are strings anyway
if TYPE_CHECKING:
    from typing import Any


class ExitCode(enum.IntEnum):
    """Process exit codes; documented in docs/exit-codes.md (a test keeps them in step)."""

    OK = 0
    INTERNAL = 1  # a bug or an unexpected failure of git itself
    USAGE = 2  # the command line is malformed (unknown option, missing argument)
    NOT_FOUND = 3  # no item (or message, session) with that id
    AMBIGUOUS = 4  # an id prefix matches more than one item
    INVALID = 5  # the input is well formed but not acceptable (empty title, cycle, bad duration...)
    ILLEGAL = 6  # the transition is not allowed from the item's current state
    STALE = 7  # stale fence (kind stale) or not the holder (kind not-holder): you may not act as holder
    CORRUPT = 8  # the state ref holds something that does not parse
    NEWER_FORMAT = 9  # the state ref was written by a newer gitwork
    NOT_A_REPO = 10  # not inside a git repository
    LOCKED = 11  # a ref lock persists: a crashed writer left it behind
    REMOTE = 12  # the arbiter remote could not be reached: the outcome is unknown (gw retry ID)
    NON_FAST_FORWARD = 13  # publishing needs a merge that cannot be made cleanly
    REMOTE_REFUSED = 14  # the arbiter remote refused the push itself (a hook, permissions): do not retry
    SYNC_REFUSED = 15  # gw sync/push/pull landed, but the replay refused some of this clone's commands
    HELD = 75  # EX_TEMPFAIL: held by someone else, or lost the race; retry later
    FORBIDDEN = 77  # EX_NOPERM: your role (or not holding the item) does not allow this


class GwError(Exception):
    """Base of every error gitwork reports to a user; ``code`` is the exit code."""

    code: ExitCode = ExitCode.INTERNAL
    kind: str = "internal"

    def __init__(self, message: str, **details: Any) -> None:
        super().__init__(message)
        self.message = message
        self.details = details

    def to_json(self) -> dict[str, Any]:
        doc: dict[str, Any] = {"error": self.kind, "code": int(self.code), "message": self.message}
        if self.details:
            doc["details"] = self.details
        return doc


class UsageError(GwError):
    code, kind = ExitCode.USAGE, "usage"


class NotFound(GwError):
    code, kind = ExitCode.NOT_FOUND, "not-found"


class Ambiguous(GwError):
    code, kind = ExitCode.AMBIGUOUS, "ambiguous"


class Invalid(GwError):
    code, kind = ExitCode.INVALID, "invalid"


class Illegal(GwError):
    code, kind = ExitCode.ILLEGAL, "illegal-transition"


class Stale(GwError):
    code, kind = ExitCode.STALE, "stale"


class NotHolder(Stale):
    """Someone else holds the item (or nobody does and you present no lease): you are not its holder.

    Its own kind, so a reader tells it from a lease that ended under you; the same exit code (7), so a
    loop that stops working on the item on 7 still does. A subclass of :class:`Stale`: every place
    that treats "the lease you act under is not there" alike keeps doing so."""

    kind = "not-holder"


class Corrupt(GwError):
    code, kind = ExitCode.CORRUPT, "corrupt"


class NewerFormat(GwError):
    code, kind = ExitCode.NEWER_FORMAT, "newer-format"


class NotARepo(GwError):
    code, kind = ExitCode.NOT_A_REPO, "not-a-repository"


class Locked(GwError):
    code, kind = ExitCode.LOCKED, "locked"


class RemoteError(GwError):
    """The arbiter could not be reached, or stopped answering: what happened there is unknown."""

    code, kind = ExitCode.REMOTE, "remote-unreachable"


class RemoteRefused(GwError):
    """The arbiter answered and refused the push for a reason of its own (its hook said why)."""

    code, kind = ExitCode.REMOTE_REFUSED, "remote-refused"


class SyncRefused(GwError):
    """A sync ran, but the arbiter's view refused some of this clone's queued commands (refused.jsonl)."""

    code, kind = ExitCode.SYNC_REFUSED, "sync-refused"


class NonFastForward(GwError):
    code, kind = ExitCode.NON_FAST_FORWARD, "non-fast-forward"


class Held(GwError):
    code, kind = ExitCode.HELD, "held"


class Forbidden(GwError):
    """Not allowed for this identity: its role (settings ``admins``/``agents``) or not holding the item."""

    code, kind = ExitCode.FORBIDDEN, "forbidden"


class GitFailed(GwError):
    """git itself failed in a way we did not expect; carries the command and its output."""

    code, kind = ExitCode.INTERNAL, "git-failed"


# The refusals a process may hand to another as an answer (``pushturn``: a turn holder answering a
# command it carried): the engine's verdicts on a state, rebuilt from ``to_json`` by their kind.
_VERDICTS = {cls.kind: cls for cls in (NotFound, Ambiguous, Invalid, Illegal, Stale, NotHolder, Held, Forbidden)}


def verdict_from_json(doc: Any) -> GwError | None:
    """The refusal ``doc`` (a :meth:`GwError.to_json`) describes, or None if it is not one of the
    engine's verdicts (a transport failure, a malformed document: the caller asks for itself)."""
    if not isinstance(doc, dict) or not isinstance(doc.get("message"), str):
        return None
    cls = _VERDICTS.get(doc.get("error"))  # type: ignore[arg-type]
    details = doc.get("details", {})
    if cls is None or not isinstance(details, dict) or not all(isinstance(k, str) for k in details):
        return None
    return cls(doc["message"][:4000], **details)
