"""Several machines: ``remote set``, ``sync``, ``push``, ``pull``, ``retry``, ``status``."""

from __future__ import annotations

from .. import output
from ..actions import done_line

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any


def remote_set(wp: Any, as_json: bool, name: str) -> None:
    from ...sync import configure_remote

    info = configure_remote(wp, name)
    if as_json:
        output.emit_json({"ok": True, **info})
    else:
        output.info(f"arbiter remote: {name} (state ref fetched into {info['tracking']})")


def sync(wp: Any, as_json: bool) -> None:
    _sync(wp, as_json, push=True)


def push(wp: Any, as_json: bool) -> None:
    """The same as ``sync``: publishing means replaying on the arbiter's tip first."""
    _sync(wp, as_json, push=True)


def pull(wp: Any, as_json: bool) -> None:
    _sync(wp, as_json, push=False)


def _sync(wp: Any, as_json: bool, push: bool) -> None:
    from ...sync import Arbiter

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


def retry(wp: Any, as_json: bool, command_id: str) -> None:
    from ...sync import retry as retry_unknown

    applied = retry_unknown(wp, command_id)
    landed = "had already landed" if applied.result.get("duplicate") else "landed now"
    done_line(applied, as_json, f"{applied.command['op']} {command_id} {landed}")


def status(wp: Any, as_json: bool) -> None:
    if not wp.settings.remote:
        doc = {"remote": None, "tip": wp.store.tip(), "pending": [], "refused": []}
    else:
        from ...sync import Arbiter

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
