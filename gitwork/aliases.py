"""An imported item found by the id it had in its source (``bd-a2``, ``#12``, ``J-1``): issue 25, point 9.

The read cache keeps, per item, the names of ``provenance.source.ref`` (``rows.aliases``) in its
``alias`` table, keyed by name: a lookup is one probe of that index at the snapshot, never a scan of
the items. The faces translate a name into the gitwork id before a command document is built, so the
documents (and the state commits) only ever carry gitwork ids.
"""

from __future__ import annotations

from .errors import Ambiguous, Invalid

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

    from .store import Snapshot


def lookup(snapshot: Snapshot, name: str) -> list[str]:
    """The ids of the items imported under ``name`` (sorted; several when two sources used it)."""
    from . import cache
    from .rows import item_summary, thread_entry

    def read(db: Any) -> list[str]:
        return [r[0] for r in db.execute("SELECT item FROM alias WHERE name = ? ORDER BY item", (name,))]

    return cache.at(snapshot, read, item_summary, thread_entry)  # type: ignore[no-any-return]


def resolve(snapshot: Snapshot, text: str) -> str:
    """The gitwork id of the one item imported under the name ``text``, else ``text`` itself when it is an
    item id or prefix (resolved as ever, later). ``w-...`` is never looked up; a bare hex prefix that is
    also a name (``12``: a GitHub issue's number) is the imported item (``w-12`` is the prefix). Two
    items under the name: exit 4 naming both; none, and no id either: the malformed-id refusal (exit 5),
    saying it is no imported item's name either."""
    from .ids import PREFIX, normalise_prefix

    if text.strip().lower().startswith(PREFIX):
        return text
    name = text.strip()
    found = lookup(snapshot, name) if name and len(name) <= 256 and snapshot.commit is not None else []
    if len(found) == 1:
        return found[0]
    if found:
        raise Ambiguous(f"{name!r} names {len(found)} imported items: {', '.join(found[:4])} (use the gitwork id)",
                        id=name, candidates=found)
    try:
        normalise_prefix(text)
    except Invalid as error:
        raise Invalid(f"{error.message.rstrip('.')}; nor is it an imported item's id in its source", id=name) from None
    return text
