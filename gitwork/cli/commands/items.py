"""Items: ``init``, ``new``, ``show``, ``list``, ``ready``, ``edit``, ``check``, ``decision``, ``done``,
``cancel``, ``reopen``, ``history``, ``log`` (``apply`` is in ``transfer.py``)."""

from __future__ import annotations

import sys

from ...errors import Invalid, UsageError
from .. import output
from ..actions import each, submit
from ..listing import check_limit, no_state_hint, pick, plain_lines, rows_view

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

    from ...workplane import Workplane


def init(wp: Workplane, as_json: bool, remote: str | None = None) -> None:
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


def new(wp: Workplane, as_json: bool, title: str | None, description: str | None, priority: int | None,
        label: list[str] | None, dep: list[str] | None, criterion: list[str] | None, owner: str | None,
        source: str | None, description_file: str | None = None, use_editor: bool = False, type: str | None = None,
        parent: str | None = None, lease_path: list[str] | None = None, template: str | None = None) -> None:
    from ..textinput import description as read_description
    from ..textinput import edit_form

    description = read_description(description, description_file)
    fields: dict[str, Any] = dict(description=description, priority=priority, labels=label, criteria=criterion,
                                  type=type)
    if template is not None:  # .workplane's templates (gitwork/templates.py): checked before the editor opens
        from ...templates import expand

        fields = expand(wp.settings, template, {**fields, "title": None})
    if use_editor:
        title, fields["description"] = edit_form(title or "", fields["description"] or "")
    elif title is None:
        raise UsageError("missing the title: gw new TITLE (or gw new -e to write it in your editor)")
    if template is not None:
        from ...templates import prefixed

        title = prefixed(wp.settings, template, title)
    submit(wp, as_json, "new", "item", title=title, description=fields["description"], priority=fields["priority"],
           labels=fields["labels"], depends_on=dep, criteria=fields["criteria"], owner=owner, source=source,
           type=fields["type"], parent=parent, paths=lease_path)


def show(wp: Workplane, as_json: bool, item: list[str], web: bool = False) -> None:
    """One item or several (each its own result); for a person unless ``--json`` (unchanged: the item's
    stored fields and its lease); ``--web`` opens its page on the running ``gw serve`` board."""

    def one(text: str) -> None:
        view = wp.show(text)
        if web:
            from ..showview import web as open_page

            open_page(wp, as_json, view["item"]["id"])
            return
        if as_json:
            from ...reports import show_json

            output.emit_json(show_json(view))
            return
        from ..showview import render

        if shown:
            sys.stdout.write("\n")
        sys.stdout.write(render(wp, view, wp.context().now))
        shown.append(text)

    shown: list[str] = []
    each(wp, as_json, item, one)


def list_items(wp: Workplane, as_json: bool, status: list[str] | None, label: list[str] | None, all: bool,
               holder: str | None, owner: str | None = None, priority: int | None = None, sort: str | None = None,
               limit: int | None = None, text: str | None = None, label_any: list[str] | None = None,
               mine: bool = False, exclude_label: list[str] | None = None, reverse: bool = False,
               type: list[str] | None = None, parent: str | None = None, created_after: str | None = None,
               created_before: str | None = None, updated_after: str | None = None,
               updated_before: str | None = None) -> None:
    picked = pick(wp, status=status, label=label, all=all, holder=holder, owner=owner, priority=priority, sort=sort,
                  limit=limit, text=text, label_any=label_any, mine=mine, exclude_label=exclude_label,
                  reverse=reverse, types=type, parent=parent, created_after=created_after,
                  created_before=created_before, updated_after=updated_after, updated_before=updated_before,
                  lines=plain_lines(as_json))
    rows_view(picked, as_json, "items")
    no_state_hint(wp, picked, "items", as_json)


def children(wp: Workplane, as_json: bool, item: str, type: list[str] | None = None) -> None:
    """``gw children ID``: the items whose parent is ID, in every status (``list --parent ID --all``)."""
    picked = pick(wp, all=True, parent=item, types=type)
    rows_view(picked, as_json, "children")


def ready(wp: Workplane, as_json: bool, limit: int | None, label: list[str] | None = None, owner: str | None = None,
          priority: int | None = None, sort: str | None = None, explain: bool = False,
          label_any: list[str] | None = None, exclude_label: list[str] | None = None, reverse: bool = False,
          created_after: str | None = None, created_before: str | None = None,
          updated_after: str | None = None, updated_before: str | None = None) -> None:
    if explain:  # every open item and why it is not ready (commands/reports.py)
        from .reports import explain_ready

        check_limit(limit)
        return explain_ready(wp, as_json, limit)
    picked = pick(wp, ready=True, label=label, label_any=label_any, owner=owner, priority=priority, sort=sort,
                  limit=limit, exclude_label=exclude_label, reverse=reverse, created_after=created_after,
                  created_before=created_before, updated_after=updated_after, updated_before=updated_before,
                  lines=plain_lines(as_json))
    rows_view(picked, as_json, "ready")
    no_state_hint(wp, picked, "ready items", as_json)


def edit(wp: Workplane, as_json: bool, item: list[str], title: str | None, description: str | None, priority: int | None,
         add_label: list[str] | None, remove_label: list[str] | None, add_dep: list[str] | None,
         remove_dep: list[str] | None, add_criterion: list[str] | None, owner: str | None, status: str | None,
         reason: str | None, fence: int | None, description_file: str | None = None,
         use_editor: bool = False, type: str | None = None, parent: str | None = None,
         lease_path: list[str] | None = None, remove_path: list[str] | None = None, budget: str | None = None) -> None:
    """``gw edit ID... [changes]``: the same changes to each item, one command each (``actions.each``)."""
    from ..textinput import description as read_description

    if use_editor and len(item) > 1:
        raise UsageError("-e edits one item at a time; name one id, or give the changes as options")
    description = read_description(description, description_file)  # read once (stdin), sent to each
    changes: dict[str, Any] = dict(title=title, description=description, priority=priority, add_label=add_label,
                   remove_label=remove_label, add_dep=add_dep, remove_dep=remove_dep, add_criterion=add_criterion,
                   owner=owner, status=status, reason=reason, fence=fence, use_editor=use_editor, type=type,
                   parent=parent, lease_path=lease_path, remove_path=remove_path, budget=budget)
    each(wp, as_json, item, lambda one: _edit(wp, as_json, one, **changes))


def _edit(wp: Workplane, as_json: bool, item: str, title: str | None, description: str | None, priority: int | None,
          add_label: list[str] | None, remove_label: list[str] | None, add_dep: list[str] | None,
          remove_dep: list[str] | None, add_criterion: list[str] | None, owner: str | None, status: str | None,
          reason: str | None, fence: int | None, use_editor: bool, type: str | None = None,
          parent: str | None = None, lease_path: list[str] | None = None, remove_path: list[str] | None = None,
          budget: str | None = None) -> None:
    from ..textinput import edit_form

    if use_editor:
        current = wp.item(item)
        wrote_title, wrote = edit_form(title or current.title, current.description if description is None
                                       else description)
        # Only what the form changed is sent: an unchanged field is not an edit.
        title = wrote_title if wrote_title != current.title else None
        description = wrote if wrote != current.description else None
    submit(wp, as_json, "edit", item=item, title=title, description=description, priority=priority,
           add_labels=add_label, remove_labels=remove_label, add_deps=add_dep, remove_deps=remove_dep,
           add_criteria=add_criterion, owner=owner, status=status, reason=reason, fence=fence, type=type,
           parent=parent, add_paths=lease_path, remove_paths=remove_path, budget=budget)


def check(wp: Workplane, as_json: bool, item: str, criterion: int, uncheck: bool, fence: int | None) -> None:
    submit(wp, as_json, "check", item=item, criterion=criterion, uncheck=uncheck or None, fence=fence)


def decision(wp: Workplane, as_json: bool, item: str, text: str, why: str, fence: int | None) -> None:
    submit(wp, as_json, "decision", item=item, text=text, why=why, fence=fence)


def done(wp: Workplane, as_json: bool, item: list[str], **args: Any) -> None:
    """``gw done ID...``: each id as its own command (see ``actions.each``)."""
    each(wp, as_json, item, lambda one: _done(wp, as_json, one, **args))


def _done(wp: Workplane, as_json: bool, item: str, **args: Any) -> None:
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


def cancel(wp: Workplane, as_json: bool, item: list[str], reason: str | None, fence: int | None,
           offline: bool = False, duplicate_of: str | None = None) -> None:
    each(wp, as_json, item, lambda one: submit(wp, as_json, "cancel", item=one, reason=reason, fence=fence,
                                               offline=offline, duplicate_of=duplicate_of))


def reopen(wp: Workplane, as_json: bool, item: list[str], reason: str | None) -> None:
    each(wp, as_json, item, lambda one: submit(wp, as_json, "reopen", item=one, reason=reason))


def since_instant(wp: Workplane, since: str | None) -> str | None:
    """``--since``: a duration back from now (``7d``, ``12h``) or an instant, as the canonical instant text
    (which sorts as time does); ``None`` without it."""
    if not since:
        return None
    import datetime as _dt

    from ... import clock
    from ...codec import parse_duration

    if "T" in since:
        try:
            return clock.format_instant(clock.parse_instant(since))
        except ValueError as exc:
            raise Invalid(f"--since {since[:40]!r}: a duration (7d, 12h) or an instant") from exc
    return clock.format_instant(wp.now() - _dt.timedelta(seconds=parse_duration(since)))


def history(wp: Workplane, as_json: bool, item: str, since: str | None = None) -> None:
    start = since_instant(wp, since)
    records = wp.history(item)
    if start is not None:  # the old -> new values still come from the whole log, only the rows are cut
        shown = {id(r) for r in records if str(r.get("at") or "") >= start}
    if as_json:
        records = records if start is None else [r for r in records if id(r) in shown]
        output.emit_json(records)
        return
    rows = []
    known: dict[str, Any] = {}  # each field's value as the log last set it: the "old" of the next change
    for record in records:
        extra = {k: v for k, v in record.items() if k not in ("seq", "at", "by", "type", "cmd")}
        details = _details(extra, known)
        if start is None or id(record) in shown:
            rows.append((record["seq"], record["at"], record["by"], record["type"], details))
    output.table(("seq", "at", "by", "event", "details"), rows)


def _value(value: Any) -> str:
    """A recorded value for people: lists as ``a, b``, nothing as ``-``, mappings as ``k=v``; never a repr."""
    if value is None or value == [] or value == "":
        return "-"
    if isinstance(value, list):
        return ", ".join(_value(v) for v in value)
    if isinstance(value, dict):
        return " ".join(f"{k}={_value(v)}" for k, v in value.items())
    return str(value)


def _details(extra: dict[str, Any], known: dict[str, Any]) -> str:
    """``title: old -> new`` for each change (the old value when the log holds it), then the rest as k=v."""
    parts = []
    for key, value in (extra.get("changes") or {}).items():
        before = f"{_value(known[key])} -> " if key in known else "-> "
        parts.append(f"{key}: {before}{_value(value)}")
        known[key] = value
    if "title" in extra and "changes" not in extra:
        known.setdefault("title", extra["title"])
    rest = [f"{key}={_value(value)}" for key, value in extra.items() if key != "changes" and value is not None]
    return " ".join(filter(None, ["; ".join(parts), *rest]))


def log(wp: Workplane, as_json: bool, limit: int | None, item: str | None = None, since: str | None = None) -> None:
    """``gw log``: the state ref's commits, newest first; ``gw log ITEM``: that item's history (``gw history``,
    old -> new values, oldest first); ``--since`` keeps what happened from then on."""
    check_limit(limit)
    if item is not None:
        history(wp, as_json, item, since)
        return
    start = since_instant(wp, since)
    entries = []
    for entry in wp.log(None if start is not None else limit or None):
        if start is not None and (entry["at"] or "") < start:
            break  # newest first (first parent): the rest is older
        entries.append(entry)
    entries = entries[:limit or None]
    if as_json:
        output.emit_json(entries)
        return
    output.table(("commit", "at", "summary"), [(e["commit"][:10], e["at"], e["summary"]) for e in entries])


def defer(wp: Workplane, as_json: bool, item: str, until: str, fence: int | None = None) -> None:
    """``gw defer ID --until WHEN``: the op resolves WHEN against the clock and records the instant."""
    submit(wp, as_json, "defer", "until", item=item, until=until, fence=fence)


def undefer(wp: Workplane, as_json: bool, item: str, fence: int | None = None) -> None:
    submit(wp, as_json, "undefer", item=item, fence=fence)


def wait(wp: Workplane, as_json: bool, item: str, ref: str | None = None, reachable_from: str | None = None,
         remote: str | None = None, command: str | None = None, every: str | None = None,
         timeout: str | None = None, fence: int | None = None) -> None:
    submit(wp, as_json, "wait", "what", item=item, ref=ref, reachable_from=reachable_from, remote=remote,
           command=command, every=every, timeout=timeout, fence=fence)


def unwait(wp: Workplane, as_json: bool, item: str, wait: str) -> None:
    """``gw unwait ID N``: end one wait by hand (op ``wait-end``, outcome ``cancelled``)."""
    submit(wp, as_json, "wait-end", item=item, wait=wait, outcome="cancelled")


def waits_check(wp: Workplane, as_json: bool) -> None:
    """``gw waits check``: one pass of the coordinator's check of ref and command waits (gitwork/gates.py)."""
    from ...gates import check

    done = check(wp, now=True)  # asked by hand: now, whatever the coordinator's back-off says
    if as_json:
        output.emit_json({"ok": True, "checked": done})
        return
    if not done:
        output.info("no ref or command wait is open")
    for entry in done:
        why = entry.get("reason") or entry.get("message") or entry.get("commit") or ""
        output.line(f"{entry['item']} wait {entry.get('wait', '?')} ({entry.get('kind', '?')}): {entry['action']}"
                    + (f": {why}" if why else ""))
