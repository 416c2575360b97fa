"""Planning and laying out a session's branches: which branches are due, their requests (handoff by kind,
the source base), and settling the transitions that are due (:func:`settle`)."""

from __future__ import annotations

import copy
import os

from .. import clock
from ..errors import Held, Illegal, Invalid, NotFound
from ..records.sessions import (
    canonical,
    check_schema,
    load_json,
    sha256,
)
from ..store import crash_point
from . import Session, session_dir
from . import start as start_source
from .gates import _recorded_listing_of
from .manifest import Run, _branch_key, _ordered, _read, _recorded_file, is_exchange, round_keys, round_of, write_atomic

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, Callable

    from ..workplane import Workplane

# --- planning: which branches are due ---------------------------------------------------------------


def _request(manifest: dict[str, Any], key: str, operator: str, stage: str, **extra: Any) -> dict[str, Any]:
    return {"session": manifest["id"], "branch": key, "operator": operator, "stage": stage,
            "item": manifest["item"], "inputs": extra.pop("inputs", []), "resume": extra.pop("resume", None), **extra}


def _inputs(wp: Workplane, manifest: dict[str, Any], position: int, needs: list[str] | None = None
            ) -> list[dict[str, Any]]:
    """Handoff by kind: for each field kind registered by the done branches of the steps before
    ``position`` (or only the kinds in ``needs``), the nearest earlier producer's paths: every done
    branch of the latest step that registered that kind (a fan-out hands on all its branches), paths
    from the session root. Ordered by kind, then chain order. Nested exchanges hand nothing on."""
    produced: dict[str, list[tuple[int, str, str]]] = {}
    for key in sorted((k for k, b in manifest["branches"].items()
                       if not is_exchange(k) and b.get("position", 0) < position and b["status"] == "done"),
                      key=lambda k: (round_of(k), int(k.rpartition("-")[2]))):
        data = _recorded_file(wp, manifest["id"], key, "response", "response.json")
        fields = load_json(data, f"the recorded response of {key}").get("fields", {}) if data else {}
        for name, path in fields.items():
            produced.setdefault(name, []).append((manifest["branches"][key].get("position", 0), key, path))
    found = []
    for name in sorted(produced):
        if needs is not None and name not in needs:
            continue
        nearest = max(p for p, _k, _path in produced[name])
        found += [{"name": name, "from": key, "path": f"{key}/{path}"}
                  for p, key, path in produced[name] if p == nearest]
    return found


def planned(wp: Workplane, manifest: dict[str, Any], n: int) -> list[tuple[dict[str, Any], int]]:
    """Round ``n``'s requests (with their chain positions), a function of the rounds before it only, so
    a command killed half-way through a round plans exactly the same round again."""
    stages = manifest["stages"]
    if n == 1:
        position = 0
        inputs: list[dict[str, Any]] = []
    else:
        previous = round_keys(manifest, n - 1)
        if not previous:
            return []
        blocked = [k for k in previous if manifest["branches"][k]["status"] == "blocked"]
        if blocked:  # a resume round: each blocked branch re-entered by its own operator
            out = []
            for index, key in enumerate(blocked, 1):
                data = _recorded_file(wp, manifest["id"], key, "request", "request.json")
                earlier = load_json(data or b"{}", f"the recorded request of {key}")
                new_key = _branch_key(n, index)
                out.append((_request(manifest, new_key, manifest["steps"][key], manifest["branches"][key]["stage"],
                                     inputs=earlier.get("inputs", []), resume=key,
                                     parallel={"index": index, "of": len(blocked)}),
                            manifest["branches"][key]["position"]))
            return out
        position = manifest["branches"][previous[0]]["position"] + 1
        if position >= len(manifest["plan"]):
            return []  # the chain is finished
    stage = manifest["plan"][position]
    rule = stages[stage]
    if n > 1:
        inputs = _inputs(wp, manifest, position, rule.get("needs"))
        if rule.get("seal"):  # a review step: each artifact it is handed, by the hash it was recorded with
            inputs = [{**i, "sha256": _recorded_listing_of(wp, manifest["id"], i["from"]).get(i["path"], "")}
                      for i in inputs]
    return [(_request(manifest, _branch_key(n, m), rule["operator"], stage, inputs=inputs,
                      parallel={"index": m, "of": rule["parallel"]}), position)
            for m in range(1, rule["parallel"] + 1)]


def due(wp: Workplane, manifest: dict[str, Any]) -> list[tuple[dict[str, Any], int]]:
    """The branches that should exist now and do not (none while a branch of the round is unfinished)."""
    if manifest["status"] != "running":
        return []
    n = manifest["current"]
    if n >= 1:
        missing = [p for p in planned(wp, manifest, n) if p[0]["branch"] not in manifest["requests"]]
        if missing:
            return missing
        if any(manifest["branches"][k]["status"] in ("open", "waiting") for k in round_keys(manifest, n)):
            return []  # the join: the next round waits for every branch of this one
    # (blocked branches in a running session: it was resumed, so the next round re-enters them)
    return planned(wp, manifest, n + 1)



# --- transitions -----------------------------------------------------------------------------------


def _earlier_sources(run: Run, position: int) -> list[tuple[str, Session]]:
    """The done source-writing branches of the steps before ``position``, in chain order, with their
    commit-once sessions (each committed: a done source branch has its one commit)."""
    found = []
    for key in _ordered(k for k, b in run.manifest["branches"].items()
                        if b.get("source") and b["status"] == "done" and b.get("position", 0) < position
                        and not is_exchange(k)):
        found.append((key, Session.load(run.where.top, run.manifest["branches"][key]["source"])))
    return found


def _frozen_head(run: Run) -> str | None:
    """The commit the session's first source step started from (later ones build on it)."""
    for key in _ordered(k for k, b in run.manifest["branches"].items() if b.get("base")):
        return str(run.manifest["branches"][key]["base"])
    return None


def _source_base(run: Run, position: int) -> tuple[str | None, list[dict[str, str]]]:
    """Where a source step at ``position`` starts: the frozen head with every earlier step's committed
    source on it (``None``: no earlier source step, start from the main worktree's HEAD), and the pins:
    each earlier commit it was made against."""
    earlier = _earlier_sources(run, position)
    head = _frozen_head(run)
    if not earlier or head is None:
        return None, []
    pins = [{"from": key, "commit": record["commit"]} for key, record in earlier]
    from .combine import combine

    made = combine(run.where.top, head, [p["commit"] for p in pins], actor=run.manifest["holder"],
                   trailers=f"Work-Item: {run.manifest['item']}\nSession: {run.manifest['id']}\n",
                   title=f"Base of session {run.manifest['id']} at step {position + 1}")
    if made["conflicts"]:
        raise Illegal(f"the earlier source steps of session {run.manifest['id']} conflict in "
                      f"{', '.join(made['conflicts'])}: no base for step {position + 1}", conflicts=made["conflicts"])
    return made["commit"], pins


def _started(top: str, session: str, wait: float = 30.0, start: Callable[[], object] | None = None) -> Session:
    """The record of a source session, waiting (``wait`` seconds at most) while another process that
    took its folder first is still starting it; ``Held`` (75) when it never appears. With ``start``, the
    start is tried again every half second meanwhile: a start killed half way is cleared and made again
    once its folder is older than ``STALE_AFTER`` (``sessions._start_named``)."""
    import time

    deadline = time.monotonic() + wait
    again = time.monotonic() + 0.5
    while True:
        try:
            return Session.load(top, session)
        except NotFound:
            if start is not None and time.monotonic() >= again:
                again = time.monotonic() + 0.5
                try:
                    start()
                    continue
                except Held:
                    pass
            if time.monotonic() >= deadline:
                raise Held(f"session {session} was started but has no record after {wait:.0f}s: another process "
                           f"still holds its start ({session_dir(top, session)})", session=session) from None
            time.sleep(0.05)


def _source_for(run: Run, key: str, position: int) -> dict[str, Any]:
    """The commit-once session a source-writing branch writes through (started once, then reused), from
    a base holding every earlier source step's commit; the request pins those commits."""
    source_id = f"{run.manifest['id']}-s{round_of(key)}-p{key.rpartition('-')[2]}"
    base, pins = _source_base(run, position)
    try:
        record = Session.load(run.where.top, source_id)
    except NotFound:
        def start() -> object:
            return start_source(run.wp, run.manifest["item"], fence=run.fence, session_id=source_id, base_commit=base)

        try:
            start()
        except Held:
            pass  # another process starts this very source branch: its record is awaited below
        record = _started(run.where.top, source_id, start=start)
    out = {"session": source_id, "branch": record.branch, "base": record["base"], "worktree": record.source}
    return {**out, "pins": pins} if pins else out


def branch(run: Run, request: dict[str, Any], position: int) -> None:
    """The ``branch`` transition: the request written (never rewritten), then hashed into the manifest."""
    key = request["branch"]
    if run.manifest["stages"].get(request["stage"], {}).get("writesSource") and not is_exchange(key):
        request["source"] = _source_for(run, key, position)
    data = canonical(check_schema("request", request, f"the request of {key}"))
    path = run.where.request(key)
    existing = _read(path)
    if existing is None:
        write_atomic(path, data)
    elif existing != data:
        raise Illegal(f"{path} already holds another request: a request is never rewritten", branch=key)
    for folder in ("data", "artifacts"):
        os.makedirs(os.path.join(run.where.response_dir(key), folder), exist_ok=True)
    crash_point("session-request-written")
    new = copy.deepcopy(run.manifest)
    new["chain"].append(key)
    new["steps"][key] = request["operator"]
    new["requests"][key] = sha256(data)
    new["branches"][key] = {"stage": request["stage"], "status": "open", "position": position}
    if "source" in request:
        new["branches"][key]["source"] = request["source"]["session"]
        new["branches"][key]["base"] = request["source"]["base"]
    if not is_exchange(key):
        new["current"] = max(new["current"], round_of(key))
    run.record("session-branch", new, key=key, request=data.decode("utf-8"))


def _exchange_request(run: Run, key: str) -> tuple[str, dict[str, Any]] | None:
    """The nested exchange a waiting branch asked for: its key and request (``None``: recorded already)."""
    data = _recorded_file(run.wp, run.manifest["id"], key, "response", "response.json")
    awaiting = load_json(data or b"{}", f"the recorded response of {key}").get("awaiting") or {}
    exchange = f"{key}/{awaiting.get('exchange')}"
    if exchange in run.manifest["requests"]:
        return None
    parent = run.manifest["branches"][key]
    return exchange, _request(run.manifest, exchange, awaiting["operator"], parent["stage"], ask=awaiting.get("ask"))


def settle(run: Run) -> None:
    """Make every transition that is due now: nested exchanges asked for, waiting branches whose exchange
    is done resumed, and the next round's branches (a fan-out after a join, or the next step)."""
    for _round in range(1000):
        try:
            if not _settle_one(run):
                return
        except (Illegal, Invalid):
            if not run.refresh():  # another process made this transition first: plan again on its record
                raise


def _settle_one(run: Run) -> bool:
    """Make one due transition; ``False`` when none is due."""
    manifest = run.manifest
    if manifest["status"] not in ("running", "blocked"):
        return False
    for key, state in sorted(manifest["branches"].items()):
        if state["status"] != "waiting":
            continue  # (a waiting branch's exchange runs even while another branch blocks the session)
        asked = _exchange_request(run, key)
        if asked is not None:
            branch(run, asked[1], state.get("position", 0))
            return True
        exchanges = [k for k in manifest["branches"] if k.startswith(key + "/")]
        done = [k for k in exchanges if manifest["branches"][k]["status"] == "done"
                and not any(r["from"] == k for r in manifest["resumes"])]
        if done:
            new = copy.deepcopy(manifest)
            new["branches"][key]["status"] = "open"
            new["resumes"].append({"branch": key, "from": done[0], "reason": "wait",
                                   "at": clock.format_instant(run.wp.now())})
            run.record("session-resume", new, key=key, reason="wait")
            return True
    pending = due(run.wp, manifest)
    if not pending:
        return False
    request, position = pending[0]
    branch(run, request, position)
    return True


