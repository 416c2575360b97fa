"""Path leases in the state: which live leases hold which globs, and the claim's overlap rule.

The state's ``paths.yaml`` maps each item whose lease was granted with paths to those globs (the lease
itself carries them too, in ``lease.yaml``). A claim reads that one file and, for the entries whose globs
overlap its own (``paths.overlap``), the leases: only a live one (``Lease.takeable`` is false) held by
someone else refuses. Entries are added at a grant with paths and dropped when the lease ends
(``ops/common.end_lease``) or when a claim finds them dead, so the file holds about the live path leases.

Below ``ops/`` (it takes an ``engine.View``/``Context``, never imports an op module), beside ``records/``.
"""

from __future__ import annotations

from . import codec
from .paths import PATHS_FILE, overlaps

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

    from .engine import Context, View


def index(view: View) -> dict[str, list[str]]:
    """``paths.yaml``: item -> globs of its path lease (empty when no lease ever held paths)."""
    data = view.file(PATHS_FILE)
    if not data:
        return {}
    doc = codec.load_yaml(data, what=PATHS_FILE)
    return {str(k): [str(g) for g in v] for k, v in doc.items() if isinstance(v, list)}


def holders(view: View, item_id: str, globs: list[str], actor: str) -> tuple[list[dict[str, Any]], list[str]]:
    """The live path leases of others that ``globs`` (for ``item_id``) overlap, and the dead entries seen.

    Each conflict is ``{"item", "holder", "expires_at", "overlap": [[mine, theirs], ...]}``; a lease of the
    same holder does not conflict (one holder's two items are one agent's business)."""
    found: list[dict[str, Any]] = []
    dead: list[str] = []
    if not globs:
        return found, dead
    for other, theirs in sorted(index(view).items()):
        if other == item_id:
            continue
        pairs = overlaps(globs, theirs)
        if not pairs:
            continue
        lease = view.lease(other)
        if lease is None or lease.takeable(view.now, view.settings.clock_margin):
            dead.append(other)
            continue
        if lease.holder == actor:
            continue
        found.append({"item": other, "holder": lease.holder, "expires_at": lease.expires_at,
                      "overlap": [list(p) for p in pairs]})
    return found, dead


def describe(conflicts: list[dict[str, Any]]) -> str:
    """One line naming each holder and the overlapping globs."""
    parts = []
    for c in conflicts[:5]:
        pairs = ", ".join(f"{a} ~ {b}" for a, b in c["overlap"][:3])
        parts.append(f"{c['holder']} holds {c['item']} until {c['expires_at']} ({pairs})")
    more = f"; and {len(conflicts) - 5} more" if len(conflicts) > 5 else ""
    return "; ".join(parts) + more


def take(ctx: Context, item_id: str, globs: list[str], dead: list[str]) -> None:
    """Record ``item_id``'s grant in ``paths.yaml`` (or its absence), dropping the ``dead`` entries seen."""
    current = index(ctx)
    wanted = dict(current)
    for other in dead:
        wanted.pop(other, None)
    if globs:
        wanted[item_id] = list(globs)
    else:
        wanted.pop(item_id, None)
    _save(ctx, current, wanted)


def drop(ctx: Context, item_id: str) -> None:
    """The lease of ``item_id`` ended: its globs are free."""
    current = index(ctx)
    if item_id in current:
        wanted = dict(current)
        del wanted[item_id]
        _save(ctx, current, wanted)


def _save(ctx: Context, current: dict[str, list[str]], wanted: dict[str, list[str]]) -> None:
    if wanted == current:
        return
    ctx.outcome.changes[PATHS_FILE] = codec.dump_yaml(dict(sorted(wanted.items()))) if wanted else None
