"""Conversations: ``msg``, ``thread``, ``ack``, ``inbox``, ``ask``, ``decide``.

Each calls the library face (``Workplane.post`` and kin, in ``gitwork/workplane_messages.py``, which
build the command document and submit it) and prints the result.
"""

from __future__ import annotations

import json as _json
import sys

from ...errors import UsageError
from .. import output

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

    from ...workplane import Workplane


def _text_arg(text: str) -> str:
    if text != "-":
        return text
    try:
        return sys.stdin.read()
    except UnicodeDecodeError as exc:
        raise UsageError(f"stdin is not UTF-8 text: {exc}") from exc


def _posted(applied: Any, as_json: bool) -> None:
    if as_json:
        output.emit_json(applied.to_json())
        return
    output.line(str(applied.result.get("seq", "")))
    output.info(applied.summary)


def msg(wp: Workplane, as_json: bool, item: str, text: str, **args: Any) -> None:
    _posted(wp.post(item, _text_arg(text), **args), as_json)


def ask(wp: Workplane, as_json: bool, item: str, question: str, option: list[str] | None, **args: Any) -> None:
    _posted(wp.ask(item, _text_arg(question), options=option, **args), as_json)


def decide(wp: Workplane, as_json: bool, item: str, seq: str, **args: Any) -> None:
    _posted(wp.decide(item, seq, **args), as_json)


def ack(wp: Workplane, as_json: bool, item: str, seq: str, by: str | None, **args: Any) -> None:
    applied = wp.ack(item, seq, reply=by, **args)
    if as_json:
        output.emit_json(applied.to_json())
        return
    r = applied.result
    output.info(f"ack {r['item']} by {r['who']}: unchanged (read #{r['read']}, responded #{r['responded']})"
                if r.get("unchanged") else applied.summary)


_array = output.json_array  # one compact record per line: long threads and inboxes print fast


def written(record: dict[str, Any]) -> str:
    """When a message was written, for people: an imported comment's own date (``written_at``), marked, not
    the import's; else when it was posted."""
    if record.get("written_at"):
        return f"{record['written_at']} (imported {str(record.get('at', ''))[:10]})"
    return str(record.get("at", ""))


def render(record: dict[str, Any]) -> str:
    """A message for people: a header line, then the text indented."""
    head = [f"#{record['seq']}", written(record), str(record.get("by", "")), str(record.get("kind", ""))]
    if record.get("to"):
        head.append(f"to {record['to']}")
    if record.get("reply_to"):
        head.append(f"re #{record['reply_to']}")
    if record.get("options"):
        head.append("options: " + " | ".join(record["options"]))
    if record.get("choice"):
        head.append(f"chose {record['choice']}")
    head.append(f"(epoch {record.get('epoch', 0)})")
    body = "\n".join("    " + line for line in str(record.get("text", "")).split("\n"))
    return " ".join(head) + "\n" + body


def thread(wp: Workplane, as_json: bool, item: str, since: int, follow: bool, timeout: float | None,
           poll: float, pull: float = 2.0) -> None:
    if not pull > 0:  # also NaN: a follow that pulled in a loop would hammer the arbiter
        from ...errors import Invalid

        raise Invalid(f"--pull must be a number of seconds above 0, not {pull}")
    item_id, records = wp.thread(item, since)
    if not follow:
        if as_json:
            sys.stdout.write(_array(output.select(records)) + "\n")
        else:
            for record in records:
                output.line(render(record))
        return

    # Following prints one message at a time as it lands: JSON lines with --json, flushed each time.
    def emit(record: dict[str, Any]) -> None:
        sys.stdout.write((_json.dumps(output.pick(record), ensure_ascii=False) if as_json else render(record)) + "\n")
        sys.stdout.flush()

    wp.follow(item_id, since, emit, timeout=timeout, poll=poll, refresh=_puller(wp), refresh_every=pull)


def _puller(wp: Workplane) -> Any:
    """With an arbiter remote, following pulls now and then, so messages from other machines show up."""
    if not wp.settings.remote:
        return None
    from ...errors import GwError
    from ...sync import Arbiter

    arbiter = Arbiter(wp)
    warned: list[str] = []

    def pull() -> None:
        try:
            arbiter.sync(push=False)
        except GwError as error:  # an unreachable remote must not stop a local follow
            if error.message not in warned:
                warned.append(error.message)
                output.info(f"gw: {error.kind}: {error.message} (still following the local ref)")

    return pull


def inbox(wp: Workplane, as_json: bool) -> None:
    from ...ids import shortest_unique
    from ...reports import drop_answered

    box = drop_answered(wp, wp.inbox())
    if as_json and output.FIELDS is not None:
        output.emit_json({"ok": True, **box})
        return
    if as_json:
        # One object, as every single result (see output.emit_json), its two lists one message a line.
        sys.stdout.write(f'{{"ok": true,\n"who": {_json.dumps(box["who"], ensure_ascii=False)},\n'
                         f'"unread": {_array(box["unread"])},\n"unanswered": {_array(box["unanswered"])}}}\n')
        return
    rows = [("unread", m) for m in box["unread"]] + [("unanswered", m) for m in box["unanswered"]]
    short = shortest_unique([m["item"] for _, m in rows]) if rows else {}
    if rows:
        sys.stdout.write(inbox_text(box["who"], rows, short, output.width()))
    if not rows:
        output.info(f"inbox of {box['who']}: nothing unread or unanswered")


def fit(text: str, width: int) -> str:
    """``text`` cut to ``width`` characters, the cut marked with ``...``."""
    return text if len(text) <= width else text[: max(0, width - 3)] + "..."


def inbox_text(who: str, rows: list[tuple[str, dict[str, Any]]], short: dict[str, str], width: int) -> str:
    """The inbox for a person, no line wider than ``width``: per message a header (state, item, ``#seq``,
    kind, who, when, why) and the first line of its text, indented; names, reasons and text are cut."""
    unread = sum(1 for state, _ in rows if state == "unread")
    out = [fit(f"inbox of {who}: {unread} unread, {len(rows) - unread} unanswered", width)]
    for state, m in rows:
        at = str(m.get("written_at") or m.get("at") or "").replace("T", " ").removesuffix("Z")[:16]
        head = (f"{state:<10} {short.get(m['item'], m['item'])} #{m['seq']} {m.get('kind') or 'note'} "
                f"from {m.get('by')}  {at}  ({m['why']})")
        first = str(m.get("text", "")).strip().split("\n")[0]
        out += [fit(head, width), fit("    " + first, width)]
    return "\n".join(out) + "\n"
