"""Reports: ``blocked``, ``dep tree``, ``dep graph``, ``stale``, ``summary``, ``prime``, ``onboard`` (read-only;
the logic is in ``gitwork/reports.py``)."""

from __future__ import annotations

from .. import output

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

    from ...workplane import Workplane


def _short(wp: Workplane, ids: list[str]) -> dict[str, str]:
    from ...ids import shortest_unique

    _ctx, rows = wp.rows()
    table = shortest_unique(rows.keys())
    return {i: table.get(i, i) for i in ids}


def blocked(wp: Workplane, as_json: bool) -> None:
    from ...reports import blocked as find

    entries = find(wp)
    if as_json:
        output.emit_json(entries)
        return
    _print_with_reasons(wp, entries, "blocked_by", lambda entry: entry["status"])
    if not entries:
        output.info("nothing is blocked")


def dep_tree(wp: Workplane, as_json: bool, item: str) -> None:
    from ...reports import dep_tree as build
    from ...reports import tree_lines

    tree = build(wp, item)
    if as_json:
        output.emit_json({"ok": True, **tree})
        return
    _ctx, rows = wp.rows()
    from ...ids import shortest_unique

    short = shortest_unique(rows.keys())
    output.line(f"{short.get(tree['item'], tree['item'])} [{tree['status']}] {tree['title']}")
    output.line("depends on:" if tree["depends_on"] else "depends on: nothing")
    for text in tree_lines(tree["depends_on"], "depends_on", short):
        output.line(text)
    output.line("needed by:" if tree["dependents"] else "needed by: nothing")
    for text in tree_lines(tree["dependents"], "dependents", short):
        output.line(text)


def dep_graph(wp: Workplane, as_json: bool, item: str | None, format: str) -> None:
    from ...depgraph import graph, render

    doc = graph(wp, item)
    text = render(doc, format)
    if as_json:
        output.emit_json({"ok": True, "format": format, **doc, "text": text})
        return
    import sys

    sys.stdout.write(text)


def stale(wp: Workplane, as_json: bool, held_for: str | None) -> None:
    from ...reports import age
    from ...reports import stale as find

    entries = find(wp, held_for)
    if as_json:
        output.emit_json(entries)
        return
    short = _short(wp, [e["item"] for e in entries])
    output.table(("id", "holder", "held", "state", "title"),
                 [(short[e["item"]], e["holder"], age(e["held_seconds"]),
                   ("expired, takeable" if e["takeable"] else "expired") if e["expired"] else "held long",
                   e["title"]) for e in entries])
    if not entries:
        output.info("no expired or long-held lease")


def summary(wp: Workplane, as_json: bool) -> None:
    from ...reports import summary as count

    counts = count(wp)
    if as_json:
        output.emit_json(counts)
        return
    statuses = ", ".join(f"{n} {s}" for s, n in counts["by_status"].items() if n)
    output.line(f"{counts['total']} items: {statuses or 'none'}")
    output.line(f"ready {counts['ready']}, blocked {counts['blocked']}, expired leases {counts['expired']}, "
                f"open questions {counts['open_questions']}")


def prime(wp: Workplane, as_json: bool) -> None:
    from ...reports import prime as build

    doc = build(wp)
    if as_json:
        output.emit_json(doc)
        return
    import sys

    sys.stdout.write(doc["text"])


def search(wp: Workplane, as_json: bool, text: str, **filters: Any) -> None:
    """``gw search TEXT``: ``gw list --text TEXT`` printed with where each item matched."""
    from ...index import ID, STATUS, TITLE
    from ..listing import pick, said_cut

    picked = pick(wp, text=text, **filters)
    assert picked.matches is not None
    entries = [{"item": r[ID], "title": r[TITLE], "status": r[STATUS], "matches": picked.matches[r[ID]]}
               for r in picked.rows]
    if as_json:
        output.emit_json(entries)
    else:
        for entry in entries:
            output.line(f"{picked.short[entry['item']]}\t{entry['status']}\t{entry['title']}")
            for match in entry["matches"]:
                output.line(f"\t{match['field']}: {match['text']}")
        if not entries:
            output.info(f"nothing matches {text!r}")
    said_cut(picked, "matches")


def explain_ready(wp: Workplane, as_json: bool, limit: int | None) -> None:
    """``gw ready --explain``: every open item, ready first as usual, and why each other is not."""
    from ...conflicts import describe
    from ...reports import explain_ready as explain

    entries = explain(wp)
    entries = [e for e in entries if e["ready"]][: limit or None] + [e for e in entries if not e["ready"]]
    if as_json:
        output.emit_json(entries)
        return
    for entry in entries:  # predicted conflicts are reasons too: claim --next skips or ranks these last
        if entry.get("conflicts"):
            entry["why_not"] = [{"kind": "other", "reason": describe(c)} for c in entry["conflicts"]]
    _print_with_reasons(wp, entries, "why_not", _explained_state)


def _explained_state(entry: dict[str, Any]) -> str:
    """An item whose paths overlap another holder's live path lease is skipped by ``claim --next`` (and its
    claim refused, 75); one that only touches a live session's files is ranked last."""
    if not entry["ready"]:
        return "not ready"
    kinds = {conflict.get("kind") for conflict in entry.get("conflicts") or ()}
    if "paths" in kinds:
        return "ready, paths held: claim --next skips it"
    return "ready, ranked last" if kinds else "ready"


def _print_with_reasons(wp: Workplane, entries: list[dict[str, Any]], key: str, state: Any) -> None:
    """One line per item (short id, state, title), then one indented line per reason it names."""
    from ...reports import describe_reason

    named = [e["item"] for e in entries] + [r["item"] for e in entries for r in e[key] if "item" in r]
    short = _short(wp, named)
    for entry in entries:
        output.line(f"{short[entry['item']]}\t{state(entry)}\t{entry['title']}")
        for reason in entry[key]:
            output.line(f"\t{describe_reason(reason, short)}")


def whoami(wp: Workplane, as_json: bool) -> None:
    """``gw whoami``: the identity this command acts as (``--as``, ``GW_AGENT``, ``gitwork.agent``, else the
    default), its role (settings ``admins``/``agents``) and the items it holds."""
    from ..listing import pick

    who = wp.settings.identity()
    role = wp.settings.role(who)
    held = [row[0] for row in pick(wp, holder=who).rows]
    if as_json:
        output.emit_json({"ok": True, "item": None, "who": who, "role": role, "holding": held})
        return
    holding = f"holds {', '.join(held)}" if held else "holds nothing"
    output.line(f"{who} ({role}); {holding}")
