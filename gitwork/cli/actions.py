"""What each CLI command does once its arguments are parsed; shared by the typer app and the fast path.

Every mutation builds a command document and hands it to :meth:`Workplane.submit`; nothing here
touches git or the state directly. Each function prints its result and returns nothing; errors
propagate as :class:`GwError` and :func:`invoke` maps them to exit codes.
"""

from __future__ import annotations

import sys

from ..errors import ExitCode, GwError, Invalid, UsageError
from . import output

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, Callable


def invoke(func: Callable[..., Any], *, as_json: bool, path: str | None = None, agent: str | None = None,
           **kwargs: Any) -> int:
    """Open the work plane, run one action, map any error to its exit code."""
    from ..workplane import Workplane

    wp = None
    try:
        wp = Workplane(path, agent=agent)
        func(wp, as_json=as_json, **kwargs)
        return int(ExitCode.OK)
    except GwError as error:
        return output.fail(error, as_json)
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        return int(ExitCode.OK)
    except Exception as exc:  # a bug: still one line and a documented code
        if "GW_TRACEBACK" in __import__("os").environ:
            raise
        return output.internal(exc, as_json)
    finally:
        _name_left_out()
        if wp is not None:
            wp.close()


def _name_left_out() -> None:
    """Name, on stderr, each corrupt item a whole-state read (list, ready, claim --next, inbox) left out.

    One bad file must not take every listing down: the sound items are listed (exit 0), and each bad
    one is named with its file so a person can repair it; commands that need the bad item exit 8.
    """
    index = sys.modules.get("gitwork.index")  # nothing to say unless a summary was read
    if index is None or not index.NOTED:
        return
    for _item_id, message in sorted(index.NOTED.items()):
        output.info(f"gw: corrupt: {message} (left out; repair or remove that file)")
    index.NOTED.clear()


def _short(all_ids: Any, ids: list[str]) -> dict[str, str]:
    from ..ids import shortest_unique

    table = shortest_unique(all_ids)
    return {i: table.get(i, i) for i in ids}


def _done(applied: Any, as_json: bool, text: str | None = None, data: str | None = None) -> None:
    for entry in applied.result.get("refused") or ():  # offline commands the arbiter's replay refused
        output.info(f"gw: refused on replay: {entry.get('command_id') or entry.get('commit')} "
                    f"({entry.get('op')} {entry.get('item') or ''}): {entry.get('error')}: {entry.get('message')}")
    if as_json:
        output.emit_json(applied.to_json())
        return
    if data is not None:
        output.line(data)
    output.info(text or applied.summary)


def submit(wp: Any, as_json: bool, op: str, data_key: str | None = None, offline: bool = False,
           **args: Any) -> Any:
    applied = wp.do(op, offline=offline, **args)
    data = str(applied.result.get(data_key)) if data_key else None
    _done(applied, as_json, data=data)
    return applied


# --- items -----------------------------------------------------------------------------------------


def init(wp: Any, as_json: bool, remote: str | None = None) -> None:
    if remote:
        # Adopt the arbiter's state when it has one, rather than starting a second history.
        from ..sync import Arbiter, configure_remote

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


def new(wp: Any, as_json: bool, **args: Any) -> None:
    submit(wp, as_json, "new", "item", **args)


def show(wp: Any, as_json: bool, item: str) -> None:
    view = wp.show(item)
    if as_json:
        output.emit_json(show_json(view))
        return
    from ..codec import dump_yaml

    doc = {"item": view["item"]}
    if view["lease"]:
        doc["lease"] = view["lease"]
    sys.stdout.write(dump_yaml(doc).decode())


def show_json(view: dict[str, Any]) -> dict[str, Any]:
    """``show --json``: the item's fields at the top level, its id under ``item`` as in every other
    command's output (never ``id``), and its lease (an object, or null)."""
    fields = dict(view["item"])
    return {"ok": True, "item": fields.pop("id"), **fields, "lease": view["lease"]}


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


def _rows_view(all_rows: dict[str, Any], rows: list[tuple[Any, ...]], as_json: bool, title: str) -> None:
    from ..index import EXPIRES, HOLDER, ID, LABELS, LEASE_STATE, PRIORITY, STATUS, TITLE

    if as_json:
        output.emit_json([
            {"item": r[ID], "title": r[TITLE], "status": r[STATUS], "priority": r[PRIORITY], "labels": list(r[LABELS]),
             "holder": r[HOLDER] if r[LEASE_STATE] == "active" else None,
             "expires_at": r[EXPIRES] if r[LEASE_STATE] == "active" else None}
            for r in rows
        ])
        return
    short = _short(all_rows.keys(), [r[ID] for r in rows])
    output.table(
        ("id", "status", "pri", "holder", "title"),
        [(short[r[ID]], r[STATUS], r[PRIORITY], r[HOLDER] if r[LEASE_STATE] == "active" else "", r[TITLE])
         for r in rows],
        title=title,
    )


def list_items(wp: Any, as_json: bool, status: list[str] | None, label: list[str] | None, show_all: bool,
               holder: str | None) -> None:
    from ..index import HOLDER, LABELS, LEASE_STATE, STATUS
    from ..model import CLOSED, STATUSES
    from ..queries import order_key

    unknown = [s for s in status or () if s not in STATUSES]
    if unknown:  # a typo must not look like an empty list
        raise Invalid(f"unknown status {unknown[0]!r}: use {', '.join(STATUSES)}")

    _ctx, rows = wp.rows()
    picked = []
    for row in rows.values():
        if status and row[STATUS] not in status:
            continue
        if not status and not show_all and row[STATUS] in CLOSED:
            continue
        if label and not set(label) <= set(row[LABELS]):
            continue
        if holder and not (row[LEASE_STATE] == "active" and row[HOLDER] == holder):
            continue
        picked.append(row)
    picked.sort(key=order_key)
    _rows_view(rows, picked, as_json, "items")


def ready(wp: Any, as_json: bool, limit: int | None) -> None:
    from ..queries import ready as ready_rows

    _limit(limit)
    ctx, rows = wp.rows()
    picked = ready_rows(ctx.index(), ctx.now, wp.settings.clock_margin)
    _rows_view(rows, picked[:limit] if limit else picked, as_json, "ready")


def _limit(limit: int | None) -> None:
    if limit is not None and limit < 0:
        raise Invalid(f"--limit must be 0 (no limit) or more, not {limit}")


def log(wp: Any, as_json: bool, limit: int | None) -> None:
    _limit(limit)
    entries = list(wp.log(limit or None))
    if as_json:
        output.emit_json(entries)
        return
    output.table(("commit", "at", "summary"), [(e["commit"][:10], e["at"], e["summary"]) for e in entries])


def apply(wp: Any, as_json: bool, source: str) -> None:
    from ..workplane import load_document

    try:
        text = sys.stdin.read() if source == "-" else open(source, encoding="utf-8").read()
    except (OSError, UnicodeDecodeError) as exc:
        raise UsageError(f"cannot read {source}: {exc}") from exc
    applied = wp.submit(load_document(text))
    _done(applied, as_json)


# --- leases ----------------------------------------------------------------------------------------


def claim(wp: Any, as_json: bool, item: str | None, next: bool, ttl: str | None, offline: bool = False) -> None:
    applied = wp.do("claim", item=item, next=next or None, ttl=ttl, offline=offline)
    r = applied.result
    _done(applied, as_json, f"claimed {r['item']} (epoch {r['epoch']}, fence {r['fence']}) until {r['expires_at']}",
          data=r["item"])


def lease_op(wp: Any, as_json: bool, op: str, **args: Any) -> None:
    submit(wp, as_json, op, **args)


# --- several machines ------------------------------------------------------------------------------


def retry(wp: Any, as_json: bool, command_id: str) -> None:
    from ..sync import retry as retry_unknown

    applied = retry_unknown(wp, command_id)
    landed = "had already landed" if applied.result.get("duplicate") else "landed now"
    _done(applied, as_json, f"{applied.command['op']} {command_id} {landed}")


def remote_set(wp: Any, as_json: bool, name: str) -> None:
    from ..sync import configure_remote

    info = configure_remote(wp, name)
    if as_json:
        output.emit_json({"ok": True, **info})
    else:
        output.info(f"arbiter remote: {name} (state ref fetched into {info['tracking']})")


def sync(wp: Any, as_json: bool, push: bool = True) -> None:
    from ..sync import Arbiter

    report = Arbiter(wp).sync(push=push)
    if as_json:
        output.emit_json({"ok": True, **report})
        return
    for entry in report["replayed"]:
        output.info(f"replayed {entry['command_id']} ({entry['op']} {entry.get('item') or ''})")
    for entry in report["refused"]:
        output.info(f"REFUSED {entry.get('command_id')} ({entry.get('op')} {entry.get('item') or ''}): "
                    f"{entry.get('error')}: {entry.get('message')}")
    tip = report["tip"][:12] if report["tip"] else "(none)"
    output.info(f"{'synced with' if push else 'pulled from'} {report['remote']}: state at {tip}"
                f" ({len(report['replayed'])} replayed, {len(report['refused'])} refused)")


def status(wp: Any, as_json: bool) -> None:
    if not wp.settings.remote:
        doc = {"remote": None, "tip": wp.store.tip(), "pending": [], "refused": []}
    else:
        from ..sync import Arbiter

        doc = Arbiter(wp).status()
    if as_json:
        output.emit_json({"ok": True, **doc})
        return
    output.line(f"remote\t{doc['remote'] or '(none: this repository is the arbiter)'}")
    output.line(f"tip\t{doc['tip'] or '(none)'}")
    if doc["remote"]:
        output.line(f"remote tip\t{doc['remote_tip'] or '(unknown: never fetched)'}")
        output.line(f"not on the arbiter\t{len(doc['pending'])}")
        for entry in doc["pending"]:
            output.line(f"  {entry['commit'][:10]}\t{entry['summary']}")
        for entry in doc["refused"]:
            output.line(f"refused\t{entry.get('command_id')}\t{entry.get('op')}\t{entry.get('message')}")
