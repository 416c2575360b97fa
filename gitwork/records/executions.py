"""Execution and coordinator records (docs/launch.md): their paths, states and how to read them.

What ``ops/executions.py`` writes and the launcher (``gitwork/launch``), ``gw serve`` and multi-step
sessions read. The rules of the transitions are the ops'; this module holds only the formats.
"""

from __future__ import annotations

import datetime as _dt
import re

from .. import codec, hashing
from ..clock import parse_instant
from ..errors import Invalid

TYPE_CHECKING = False  # typing costs ~15 ms to import; annotations are strings anyway
if TYPE_CHECKING:
    from typing import Any

    from ..engine import View

EXECUTIONS = "executions"
# Names a file and a tmux session: no '.', ':' (tmux target syntax) nor '/'.
EXECUTION_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]{3,63}\Z")
LIVE = ("reserved", "launching", "running")
# ``released``: detached without being killed (``gw detach``): its process may go on running, but gitwork
# no longer answers for it, so no coordinator judges it and its lane is free.
TERMINAL = ("exited", "lost", "stopped", "failed", "released")
TRANSITIONS = {
    "reserved": ("launching", "failed", "lost", "stopped"),
    "launching": ("running", "exited", "failed", "lost", "stopped"),
    "running": ("exited", "lost", "stopped", "released"),
}


def never_ran(record: dict[str, Any]) -> bool:
    """Did nothing ever run under this ended execution? Ended before ``launching`` (no fence), or
    ``failed`` with no handle (its launcher died, or its backend refused, before any process started)."""
    return record.get("state") in ("lost", "failed") and (
        record.get("fence") is None or (record.get("state") == "failed" and not record.get("handle")))


def execution_path(execution_id: str) -> str:
    return f"{EXECUTIONS}/{hashing.sha1_hex(execution_id.encode())[:2]}/{execution_id}.yaml"


def check_execution_id(value: str) -> str:
    if not EXECUTION_ID.match(value):
        raise Invalid(f"bad execution id {value[:70]!r}: 4-64 letters, digits, _ and -, starting with a letter or digit")
    return value


def execution_problem(record: dict[str, Any], execution_id: str | None = None) -> str | None:
    """What is wrong with an execution record's fields (None: sound): the ones its readers use as they
    are (``state``, ``item``, the ledger's ``usage`` numbers), so a record forged by hand is corrupt (8),
    never a Python error in ``gw cost`` or ``gw runs``."""
    from .. import money
    from ..errors import Corrupt

    for key in ("id", "item"):
        if not isinstance(record.get(key), str):
            return f"{key} must be a text, not {record.get(key)!r}"[:200]
    if execution_id is not None and record["id"] != execution_id:
        return f"id {record['id'][:70]!r} is not the file's ({execution_id})"
    if record.get("state") not in (*LIVE, *TERMINAL):
        return f"state must be one of {', '.join((*LIVE, *TERMINAL))}, not {record.get('state')!r}"[:200]
    usage = record.get("usage")
    if usage is None:
        return None
    if not isinstance(usage, dict):
        return f"usage must be a mapping of tokens_in, tokens_out, cost, reports, not {usage!r}"[:200]
    for key in ("tokens_in", "tokens_out", "reports"):
        value = usage.get(key)
        if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 0):
            return f"usage.{key} must be a whole number from 0, not {value!r}"[:200]
    try:
        money.stored(usage.get("cost"))
    except Corrupt as error:
        return f"usage.{error.message}"
    return None


def checked(record: dict[str, Any], path: str) -> dict[str, Any]:
    """``record`` (read from ``path``), or ``Corrupt`` naming the file and the problem."""
    from ..errors import Corrupt

    name = path.rsplit("/", 1)[-1].removesuffix(".yaml")
    problem = execution_problem(record, name)
    if problem:
        raise Corrupt(f"{path}: {problem}")
    return record


def load_execution(ctx: View, execution_id: str) -> dict[str, Any] | None:
    data = ctx.file(execution_path(execution_id))
    path = execution_path(execution_id)
    return checked(codec.load_yaml(data, what=path), path) if data else None


ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,127}\Z")
RESERVED_ENV = ("GW_AGENT", "GW_ITEM", "GW_FENCE", "GW_EXECUTION", "GW_CONTEXT", "GW_REPORT")  # the launcher sets these


def lane(record: dict[str, Any]) -> tuple[str, str] | None:
    """The lane of an execution (record or event): its session branch, or None for the whole item."""
    if record.get("session") and record.get("branch"):
        return (str(record["session"]), str(record["branch"]))
    return None


def same_lane(one: tuple[str, str] | None, other: tuple[str, str] | None) -> bool:
    """Do two executions of one item exclude each other? A plain one excludes every other; branches
    of a session exclude only their own branch."""
    return one is None or other is None or one == other


def check_env_names(names: list[str]) -> list[str]:
    for name in names:
        if not ENV_NAME.match(name):
            raise Invalid(f"bad environment variable name {name[:70]!r}: letters, digits and _, not starting "
                          "with a digit")
        if name in RESERVED_ENV:
            raise Invalid(f"{name} is set by gw run itself (the agent's lease): it cannot be given")
    return sorted(set(names))


def item_executions(ctx: View, item_id: str) -> dict[str, dict[str, Any]]:
    """The item's executions, each id mapped to its latest ``execution`` event (oldest id first)."""
    found: dict[str, dict[str, Any]] = {}
    for event in ctx.records(item_id):
        if event.get("type") == "execution":
            found[event["execution"]] = event
    return found


# --- the coordinator's own lease: one `gw coordinate` per host ----------------------------------------

COORDINATORS = "coordinators"
HOST = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]{0,63}\Z")


def check_clone(clone: str) -> str:
    if not HOST.match(clone):
        raise Invalid(f"bad clone id {clone[:70]!r}: letters, digits, _ and -")
    return clone


def coordinator_path(host: str, clone: str | None = None) -> str:
    """``coordinators/<host>.yaml``, or per clone ``coordinators/<host>/<clone>.yaml``: two clones on
    one host each have their own coordinator (each judges only its own executions)."""
    if not HOST.match(host):
        raise Invalid(f"bad host name {host[:70]!r} for a coordinator")
    return f"{COORDINATORS}/{host}/{check_clone(clone)}.yaml" if clone else f"{COORDINATORS}/{host}.yaml"


def load_coordinator(ctx: View, host: str, clone: str | None = None) -> dict[str, Any] | None:
    data = ctx.file(coordinator_path(host, clone))
    return codec.load_yaml(data, what=coordinator_path(host, clone)) if data else None


def coordinator_live(record: dict[str, Any] | None, now: _dt.datetime) -> bool:
    """Does this lease still bind (not released, not expired)?"""
    if record is None or record.get("state") == "released":
        return False
    try:
        return parse_instant(str(record.get("expires_at"))) > now
    except ValueError:
        return False
