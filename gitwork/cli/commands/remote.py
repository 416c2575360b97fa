"""Several machines: ``remote set``, ``sync``, ``push``, ``pull``, ``retry``, ``status``."""

from __future__ import annotations

from .. import output
from ..actions import done_line

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

    from ...workplane import Workplane


def remote_set(wp: Workplane, as_json: bool, name: str) -> None:
    from ...sync import configure_remote

    info = configure_remote(wp, name)
    if as_json:
        output.emit_json({"ok": True, **info})
    else:
        output.info(f"arbiter remote: {name} (state ref fetched into {info['tracking']})")


def sync(wp: Workplane, as_json: bool) -> None:
    _sync(wp, as_json, push=True)


def push(wp: Workplane, as_json: bool) -> None:
    """The same as ``sync``: publishing means replaying on the arbiter's tip first."""
    _sync(wp, as_json, push=True)


def pull(wp: Workplane, as_json: bool) -> None:
    _sync(wp, as_json, push=False)


def _sync(wp: Workplane, as_json: bool, push: bool) -> None:
    """Run a sync and report it; exit 15 (``sync-refused``) when this run refused a queued command.

    A shell loop (``gw sync && ...``) must not take work the arbiter turned down for delivered. What
    did land stays landed (the report lists it); each refused command is kept in ``refused.jsonl``
    and reported by this run only: a later sync that refuses nothing new exits 0.
    """
    from ...errors import SyncRefused
    from ...sync import Arbiter
    from ..actions import Failed

    report = Arbiter(wp).sync(push=push)
    refused = report["refused"]
    failure = SyncRefused(_refused_summary(refused, report["remote"])) if refused else None
    if as_json:
        # One object: the error's kind, code and message, and the report (what landed, what not).
        output.emit_json({"ok": failure is None, **(failure.to_json() if failure else {}), **report})
    else:
        for entry in report["replayed"]:
            output.info(f"replayed {entry['command_id']} ({entry['op']} {entry.get('item') or ''})")
        for entry in refused:
            output.info(f"REFUSED {entry.get('command_id')} ({entry.get('op')} {entry.get('item') or ''}): "
                        f"{entry.get('error')}: {entry.get('message')}")
        tip = report["tip"][:12] if report["tip"] else "(none)"
        output.info(f"{'synced with' if push else 'pulled from'} {report['remote']}: state at {tip}"
                    f" ({len(report['replayed'])} replayed, {len(refused)} refused)")
    if failure is not None:
        output.info(f"gw: {failure.kind}: {failure.message}")
        raise Failed(int(failure.code))


def _refused_summary(refused: list[dict[str, Any]], remote: str) -> str:
    ids = ", ".join(f"{entry.get('command_id') or entry.get('commit')} ({entry.get('op')})" for entry in refused[:4])
    more = f" and {len(refused) - 4} more" if len(refused) > 4 else ""
    return (f"{len(refused)} of this clone's commands did not land on {remote}: {ids}{more} "
            "(kept in refused.jsonl, see gw status); everything else landed")


def retry(wp: Workplane, as_json: bool, command_id: str) -> None:
    from ...sync import retry as retry_unknown

    applied = retry_unknown(wp, command_id)
    landed = "had already landed" if applied.result.get("duplicate") else "landed now"
    done_line(applied, as_json, f"{applied.command['op']} {command_id} {landed}")


def status(wp: Workplane, as_json: bool) -> None:
    if not wp.settings.remote:
        doc: dict[str, Any] = {"remote": None, "tip": wp.store.tip(), "pending": [], "refused": []}
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
