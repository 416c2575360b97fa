"""Items: ``init``, ``new``, ``show``, ``list``, ``ready``, ``edit``, ``check``, ``decision``, ``done``,
``cancel``, ``reopen``, ``history``, ``log``, ``apply``."""

from __future__ import annotations

import sys

from ...errors import Invalid, UsageError
from .. import output
from ..actions import done_line, each, submit

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any


def init(wp: Any, as_json: bool, remote: str | None = None) -> None:
    if remote:
        # Adopt the arbiter's state when it has one, rather than starting a second history.
        from ...sync import Arbiter, configure_remote

        configure_remote(wp, remote)
        arbiter = Arbiter(wp)
        remote_tip = arbiter.fetch()
        if remote_tip and wp.store.tip() is None:
            wp.store.set_if_equals(None, remote_tip)
    applied = wp.do("init")
    if as_json:
        output.emit_json({**applied.to_json(), "ref": wp.store.ref, "remote": remote})
    else:
        output.info(f"gitwork state on {wp.store.ref} at {applied.commit[:12] if applied.commit else '(none)'}")


def new(wp: Any, as_json: bool, title: str | None, description: str | None, priority: int | None,
        label: list[str] | None, dep: list[str] | None, criterion: list[str] | None, owner: str | None,
        source: str | None, description_file: str | None = None, use_editor: bool = False) -> None:
    from ..textinput import description as read_description, edit_form

    description = read_description(description, description_file)
    if use_editor:
        title, description = edit_form(title or "", description or "")
    elif title is None:
        raise UsageError("missing the title: gw new TITLE (or gw new -e to write it in your editor)")
    submit(wp, as_json, "new", "item", title=title, description=description, priority=priority, labels=label,
           depends_on=dep, criteria=criterion, owner=owner, source=source)


def show(wp: Any, as_json: bool, item: str) -> None:
    view = wp.show(item)
    if as_json:
        from ...reports import show_json

        output.emit_json(show_json(view))
        return
    from ...codec import dump_yaml

    doc = {"item": view["item"]}
    if view["lease"]:
        doc["lease"] = view["lease"]
    sys.stdout.write(dump_yaml(doc).decode())


def list_items(wp: Any, as_json: bool, status: list[str] | None, label: list[str] | None, all: bool,
               holder: str | None, owner: str | None = None, priority: int | None = None, sort: str | None = None,
               limit: int | None = None) -> None:
    from ...model import STATUSES

    unknown = [s for s in status or () if s not in STATUSES]
    if unknown:  # a typo must not look like an empty list
        raise Invalid(f"unknown status {unknown[0]!r}: use {', '.join(STATUSES)}")
    _select(wp, as_json, "items", statuses=status, closed=all, labels=label, holder=holder, owner=owner,
            priority=priority, sort=sort, limit=limit)


def ready(wp: Any, as_json: bool, limit: int | None, label: list[str] | None = None, owner: str | None = None,
          priority: int | None = None, sort: str | None = None, explain: bool = False) -> None:
    if explain:  # every open item and why it is not ready (commands/reports.py)
        from .reports import explain_ready

        _limit(limit)
        return explain_ready(wp, as_json, limit)
    _select(wp, as_json, "ready", ready=True, labels=label, owner=owner, priority=priority, sort=sort, limit=limit)


def _select(wp: Any, as_json: bool, title: str, *, sort: str | None, limit: int | None, priority: int | None,
            **filters: Any) -> None:
    """One listing as SQL over the read cache (``queries.select``); a cut listing says so on stderr."""
    from ...queries import SORTS, select

    _limit(limit)
    if sort is not None and sort not in SORTS:
        raise Invalid(f"unknown --sort {sort!r}: use {', '.join(SORTS)}")
    if priority is not None and priority < 0:
        raise Invalid(f"--priority must be 0 or more, not {priority}")
    ctx = wp.context()
    picked = select(ctx.snapshot, ctx.now, wp.settings.clock_margin, sort=sort or "rank", limit=limit,
                    priority=priority, **filters)
    _rows_view(picked.short, picked.rows, as_json, title)
    if picked.cut:
        output.info(f"showing the first {limit} {title}; more match (raise --limit, or 0 for all)")


def _rows_view(short: dict[str, str], rows: list[tuple[Any, ...]], as_json: bool, title: str) -> None:
    from ...index import HOLDER, ID, LEASE_STATE, PRIORITY, STATUS, TITLE

    if as_json:
        from ...reports import listing_json

        output.emit_json(listing_json(rows))
        return
    output.table(
        ("id", "status", "pri", "holder", "title"),
        [(short[r[ID]], r[STATUS], r[PRIORITY], r[HOLDER] if r[LEASE_STATE] == "active" else "", r[TITLE])
         for r in rows],
        title=title,
    )


def _limit(limit: int | None) -> None:
    if limit is not None and limit < 0:
        raise Invalid(f"--limit must be 0 (no limit) or more, not {limit}")


def edit(wp: Any, as_json: bool, item: str, title: str | None, description: str | None, priority: int | None,
         add_label: list[str] | None, remove_label: list[str] | None, add_dep: list[str] | None,
         remove_dep: list[str] | None, add_criterion: list[str] | None, owner: str | None, status: str | None,
         reason: str | None, fence: int | None, description_file: str | None = None,
         use_editor: bool = False) -> None:
    from ..textinput import description as read_description, edit_form

    description = read_description(description, description_file)
    if use_editor:
        current = wp.item(item)
        wrote_title, wrote = edit_form(title or current.title, current.description if description is None
                                       else description)
        # Only what the form changed is sent: an unchanged field is not an edit.
        title = wrote_title if wrote_title != current.title else None
        description = wrote if wrote != current.description else None
    submit(wp, as_json, "edit", item=item, title=title, description=description, priority=priority,
           add_labels=add_label, remove_labels=remove_label, add_deps=add_dep, remove_deps=remove_dep,
           add_criteria=add_criterion, owner=owner, status=status, reason=reason, fence=fence)


def check(wp: Any, as_json: bool, item: str, criterion: int, uncheck: bool, fence: int | None) -> None:
    submit(wp, as_json, "check", item=item, criterion=criterion, uncheck=uncheck or None, fence=fence)


def decision(wp: Any, as_json: bool, item: str, text: str, why: str, fence: int | None) -> None:
    submit(wp, as_json, "decision", item=item, text=text, why=why, fence=fence)


def done(wp: Any, as_json: bool, item: list[str], **args: Any) -> None:
    """``gw done ID...``: each id as its own command (see ``actions.each``)."""
    each(wp, as_json, item, lambda one: _done(wp, as_json, one, **args))


def _done(wp: Any, as_json: bool, item: str, **args: Any) -> None:
    """``gw done``: the safe finish (``publish.finish``): publishes the holder's open session first."""
    from ...publish import finish

    result = finish(wp, item, **args)
    if as_json:
        output.emit_json(result)
        return
    published = result.get("published")
    if published:
        where = published["into"] + (f" on {published['remote']}" if published["remote"] else "")
        output.info(f"published session {published['session']} into {where} ({published['mode']}, "
                    f"{published['commit'][:12]})")
    output.info(f"done {result['item']} by {wp.settings.identity()}")
    for dead in result.get("dead_sessions", []):
        held = f"holds commit {dead['commit'][:12]}" if dead["commit"] else "has no commit"
        output.info(f"warning: session {dead['session']} ({dead['by']}; its lease ended) {held} that will not be "
                    f"published: gw session drop {dead['session']}")


def cancel(wp: Any, as_json: bool, item: list[str], reason: str | None, fence: int | None) -> None:
    each(wp, as_json, item, lambda one: submit(wp, as_json, "cancel", item=one, reason=reason, fence=fence))


def reopen(wp: Any, as_json: bool, item: list[str], reason: str | None) -> None:
    each(wp, as_json, item, lambda one: submit(wp, as_json, "reopen", item=one, reason=reason))


def history(wp: Any, as_json: bool, item: str) -> None:
    records = wp.history(item)
    if as_json:
        output.emit_json(records)
        return
    rows = []
    for record in records:
        extra = {k: v for k, v in record.items() if k not in ("seq", "at", "by", "type", "cmd")}
        rows.append((record["seq"], record["at"], record["by"], record["type"],
                     " ".join(f"{k}={v}" for k, v in extra.items())))
    output.table(("seq", "at", "by", "event", "details"), rows)


def log(wp: Any, as_json: bool, limit: int | None) -> None:
    _limit(limit)
    entries = list(wp.log(limit or None))
    if as_json:
        output.emit_json(entries)
        return
    output.table(("commit", "at", "summary"), [(e["commit"][:10], e["at"], e["summary"]) for e in entries])


def apply(wp: Any, as_json: bool, source: str) -> None:
    from ...workplane import load_document

    try:
        text = sys.stdin.read() if source == "-" else open(source, encoding="utf-8").read()
    except (OSError, UnicodeDecodeError) as exc:
        raise UsageError(f"cannot read {source}: {exc}") from exc
    applied = wp.submit(load_document(text))
    done_line(applied, as_json)
