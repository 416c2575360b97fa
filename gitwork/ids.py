"""Item ids: minted without coordination, shown and accepted as the shortest unique prefix.

An id is ``w-`` followed by 16 lowercase hex digits (64 random bits): two machines minting offline
collide with probability ~n²/2⁶⁵. The first two hex digits name the shard folder, so resolving a
prefix of two or more digits reads a single shard tree.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable

from .errors import Ambiguous, Invalid, NotFound

PREFIX = "w-"
HEX_LEN = 16
MIN_SHOWN = 6  # hex digits always shown, like git's minimum abbreviation
_FULL = re.compile(r"w-[0-9a-f]{16}\Z")
_PARTIAL = re.compile(r"(?:w-)?([0-9a-f]{1,16})\Z")


def mint() -> str:
    return PREFIX + os.urandom(HEX_LEN // 2).hex()


def imported(source: str, external: str) -> str:
    """The id an item imported from ``source`` under its ``external`` id takes: derived, so that every
    clone and every re-import of the same source finds the same item, and no document can name it
    otherwise (the import op refuses any other id)."""
    import hashlib  # (only imports need it: off the verbs' start-up)

    return "w-" + hashlib.sha256(f"{source}:{external}".encode("utf-8", "surrogatepass")).hexdigest()[:16]


def imported_as(source: str, external: str) -> str:
    """The id an import document of ``source``/``external`` must name: a gitwork id given as the
    external id is the item's own (a gitwork export, or gitwork's beads export of an item made here),
    any other external id derives one (``imported``)."""
    if source in ("beads", "gitwork") and is_full(external):
        return external
    return imported(source, external)


def is_full(item_id: str) -> bool:
    return bool(_FULL.match(item_id))


def shard(item_id: str) -> str:
    return item_id[len(PREFIX) : len(PREFIX) + 2]


def normalise_prefix(text: str) -> str:
    """Validate user input and return the hex part; refuse anything path-like or malformed."""
    cleaned = text.strip().lower()
    match = _PARTIAL.match(cleaned)
    if not match:
        shown = repr(text[:80]) + ("..." if len(text) > 80 else "")  # a 10 kB word is not echoed whole
        raise Invalid(f"malformed item id {shown}: expected w- followed by hex digits")
    return match.group(1)


def resolve(hex_prefix: str, candidates: Iterable[str], shown: str) -> str:
    """Pick the one id in ``candidates`` that starts with ``w-<hex_prefix>``."""
    want = PREFIX + hex_prefix
    found = [c for c in candidates if c.startswith(want)]
    if not found:
        raise NotFound(f"no item matches {shown!r}", id=shown)
    if len(found) > 1:
        sample = ", ".join(sorted(found)[:4])
        raise Ambiguous(f"{shown!r} is ambiguous: {len(found)} items match ({sample})", id=shown)
    return found[0]


def shortest_unique(ids: Iterable[str]) -> dict[str, str]:
    """Map each id to its shortest unique form (at least MIN_SHOWN hex digits)."""
    ordered = sorted(set(ids))
    return {item_id: item_id[:length] for item_id, length in zip(ordered, shown_lengths(ordered), strict=False)}


def shown_lengths(ordered: list[str]) -> list[int]:
    """:func:`shown_length` of each id of a sorted list of distinct ids, one comparison per neighbour pair.

    (Ids in different shards differ in their first two hex digits, fewer than MIN_SHOWN, so a shard's
    ids alone decide their forms.)"""
    apart = [digits_to_tell_apart(a, b) for a, b in zip(ordered, ordered[1:], strict=False)]
    apart.append(0)
    out, left = [], 0
    for right in apart:
        out.append(len(PREFIX) + min(max(MIN_SHOWN, left, right), HEX_LEN))
        left = right
    return out


def shown_length(item_id: str, before: str | None, after: str | None) -> int:
    """How many characters of ``item_id`` its shortest unique form keeps, given its two neighbours in
    id order (``None`` at either end): enough hex digits to differ from both, at least MIN_SHOWN."""
    need = MIN_SHOWN
    for neighbour in (before, after):
        if neighbour is not None:
            need = max(need, digits_to_tell_apart(item_id, neighbour))
    return len(PREFIX) + min(need, HEX_LEN)


def digits_to_tell_apart(item_id: str, neighbour: str) -> int:
    """How many hex digits of ``item_id`` tell it apart from ``neighbour`` (their common prefix + 1)."""
    common = 0
    for a, b in zip(item_id[len(PREFIX):], neighbour[len(PREFIX):], strict=False):
        if a != b:
            break
        common += 1
    return common + 1


# One rule for every identity (``--as``, ``GW_AGENT``, ``gitwork.agent``, ``.workplane`` ``agent``, a
# document's ``as``, the default, and the names a document gives: ``to``, ``owner``): a plain name that
# cannot carry spaces, quotes, newlines or ``<>`` into a commit message, a signature or a file.
IDENTITY_CHARS = "A-Za-z0-9._@/+-"
IDENTITY_MAX = 64
_IDENTITY = re.compile(r"[A-Za-z0-9_][A-Za-z0-9._@/+-]{0,63}\Z")


def check_identity(value: object, source: str = "identity") -> str:
    """Return ``value`` if it is a valid identity; else refuse (exit 5) saying where it came from."""
    if isinstance(value, str) and _IDENTITY.match(value):
        return value
    shown = repr(value[:40]) + ("..." if len(value) > 40 else "") if isinstance(value, str) else type(value).__name__
    raise Invalid(f"{source} is not a valid identity ({shown}): use 1-{IDENTITY_MAX} letters, digits and ._@/+-, "
                  "starting with a letter, digit or _")


def plain_identity(text: str) -> str:
    """Bring a name from the system (login, host) within the identity rule: ``-`` for anything else."""
    cleaned = re.sub(f"[^{IDENTITY_CHARS}]", "-", text)
    if not cleaned or not re.match(r"[A-Za-z0-9_]", cleaned):
        cleaned = "_" + cleaned
    return cleaned[:IDENTITY_MAX]


def command_id() -> str:
    """A client-chosen id for one command, so a retried submission can be recognised."""
    return "c-" + os.urandom(8).hex()
