"""Multi-step sessions: a chain of steps, each done by an operator, some fanned out in parallel.

The session folder is the working area; the state ref is the record. Every lifecycle transition is
one op (``gitwork/ops/sessions.py``: ``session-create``, ``-branch``, ``-submit``, ``-resume``,
``-end``), so one commit carrying the new manifest; after it lands, ``state.json`` in the folder is
rewritten (temporary file, fsync, rename, fsync of the folder) to mirror it. The recorded manifest
is authoritative: whatever a killed command left behind is brought back to it by the next one, and
every procedure here first finishes the transitions that are due (:func:`settle`), so running the
same command again converges instead of repeating work::

    <main worktree>/.worktrees/sessions/<id>/
        state.json                                   the manifest (schemas/state.schema.json)
        step-N/parallel-M/request/request.json       written before the branch is recorded, never rewritten
        step-N/parallel-M/response/                  the operator's only place to write
            response.json  response.md  <other>.md  data/  artifacts/  (changes.md: source steps)
        step-N/parallel-M/<exchange>/request/request.json and <exchange>/response/

The procedures are split by job: ``manifest.py`` (the folder and the record), ``plan.py`` (which
branches are due, their requests, settling), ``gates.py`` (what a submit checks), ``finish.py``
(``done`` and ``stop``); this module holds the verbs and re-exports what the faces use.

A source-writing step also gets a commit-once session ``<id>-sN-pM`` (``gitwork.sessions.start``), a
sibling folder with its own worktree and branch ``session/<id>-sN-pM``.
"""

from __future__ import annotations

import copy
import os
import shutil

from .. import clock
from ..errors import GwError, Held, Illegal, Invalid, NotFound
from ..records.sessions import (
    SESSIONS_TREE,
    canonical,
    check_schema,
    load_json,
    recorded_manifest,
    sha256,
)
from ..store import crash_point
from . import ensure_ignored, main_worktree, new_session_id, slug
from .finish import done, stop, stop_operators
from .gates import (
    _changes_md,
    _check_fields,
    _refuse_plants,
    _response_listing,
    _run_validator,
    _seal,
    _settled_outside_writes,
    _sibling_plants,
    branch_env,
    check_request,
    outside_writes,
    unregistered,
)
from .manifest import (
    STATE,
    Run,
    Where,
    _branch_key,
    _open_run,
    _read,
    _recorded,
    check_id,
    check_key,
    finished,
    is_exchange,
    load,
    round_keys,
    view,
    write_atomic,
)
from .plan import settle
from .rules import load as load_rules

# The faces and the tests reach the whole lifecycle through this module, what lives in the others too.
__all__ = ["Where", "block", "branch_env", "branch_execution", "check_id", "check_key", "create", "done",
           "finished", "is_exchange", "next_step", "outside_writes", "read_session", "read_sessions", "resume",
           "round_keys", "settle_operators", "stop", "stop_operators", "submit", "view", "wait"]

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

    from ..workplane import Workplane

# --- the verbs ---------------------------------------------------------------------------------------


def _unfinished_for(wp: Workplane, item_id: str, chain: str) -> str | None:
    """The item's session of this chain that is on the record and not ended (a re-run of create)."""
    from ..records.sessions import running_step_sessions

    ctx = wp.context()
    for session in running_step_sessions(ctx, item_id):
        manifest = recorded_manifest(ctx, session)
        if manifest is not None and manifest["chainName"] == chain:
            return session
    return None


def _unrecorded_folder(top: str, item_id: str, chain: str, holder: str) -> str | None:
    """A folder a killed create made before its record landed: the same create takes it up again."""
    root = os.path.join(top, ".worktrees", "sessions")
    for name in sorted(os.listdir(root)) if os.path.isdir(root) else []:
        data = _read(os.path.join(root, name, STATE))
        if data is None:
            continue
        try:
            doc = load_json(data, name)
        except GwError:
            continue
        if isinstance(doc, dict) and doc.get("item") == item_id and doc.get("chainName") == chain \
                and doc.get("holder") == holder and not doc.get("chain"):
            return name
    return None


def create(wp: Workplane, item: str, chain: str, fence: int | None = None, project: str | None = None
           ) -> dict[str, Any]:
    """``create``: the manifest written and recorded, the lease taken, before the first operator starts;
    then the first round's branches. Run again after a crash it continues the same session."""
    rules = load_rules(wp.settings)
    plan = rules.chain(chain)
    item_id = wp.resolve(item)
    earlier = _unfinished_for(wp, item_id, chain)
    if earlier:
        run = _open_run(wp, earlier, fence)
        settle(run)
        return run.result(existing=True)
    top = main_worktree(wp.repo)
    ensure_ignored(top)
    actor = wp.settings.identity()
    lease = wp.lease(item_id)
    if not (lease is not None and lease.is_active() and lease.holder == actor
            and lease.live_for_holder(wp.now(), wp.settings.clock_margin)):
        if fence is not None:
            from . import holder_lease

            holder_lease(wp, item_id, fence)  # a stale fence: exit 7, nothing made
        wp.do("claim", item=item_id)
        lease = wp.lease(item_id)
    elif fence is not None and fence != lease.fence:
        from . import holder_lease

        holder_lease(wp, item_id, fence)
    assert lease is not None
    now = wp.now()
    stages: dict[str, dict[str, Any]] = {name: {"operator": rules.steps[name].operator, "parallel": rules.steps[name].parallel,
                     "writesSource": rules.steps[name].writes_source} for name in plan}
    for name in plan:
        if rules.steps[name].needs is not None:
            stages[name]["needs"] = rules.steps[name].needs
        stages[name].update(rules.steps[name].review)
    name = slug(project or os.path.basename(top.rstrip(os.sep)) or "repo")
    taken = _unrecorded_folder(top, item_id, chain, actor)
    for attempt in range(100):
        session = taken or new_session_id(now, name, stages[plan[0]]["operator"], attempt)
        where = Where(top, session)
        if not taken:
            try:
                os.makedirs(where.folder)
            except FileExistsError:
                continue  # another session took this id this second
        manifest = {
            "format": 1, "id": session, "project": name, "item": item_id, "holder": actor, "chainName": chain,
            "plan": plan, "stages": stages, "startedAt": clock.format_instant(now), "status": "running",
            "chain": [], "steps": {}, "current": 0,
            "leases": {actor: {"item": item_id, "fence": lease.fence, "epoch": lease.epoch}},
            "requests": {}, "responses": {}, "branches": {}, "resumes": [], "route": None, "stoppedAt": None,
        }
        if taken:
            manifest = {**load_json(_read(os.path.join(where.folder, STATE)) or b"{}", STATE), "leases":
                        manifest["leases"]}
        check_schema("state", manifest, "the new state.json")
        write_atomic(os.path.join(where.folder, STATE), canonical(manifest))
        crash_point("session-create-written")
        run = Run(wp, where, manifest, lease.fence)
        try:
            run.record("session-create", manifest, chain=chain)
        except Illegal as error:
            if error.details.get("taken"):  # the id is on the record already (its folder deleted since)
                shutil.rmtree(where.folder, ignore_errors=True)
                taken = None
                continue
            raise
        break
    else:
        raise GwError("could not find a free session id")
    settle(run)
    return run.result(existing=False)


def branch_execution(manifest: dict[str, Any], key: str) -> str:
    """The execution id of a branch's operator, for its current entry (a resumed branch is a new entry):
    derived from the session, the branch and its re-entry count, so a branch is never run twice."""
    entries = sum(1 for r in manifest["resumes"] if r["branch"] == key)
    return "s-" + sha256(f"{manifest['id']}/{key}/{entries}".encode())[:24]


def settle_operators(wp: Workplane, session: str, fence: int | None = None) -> list[dict[str, Any]]:
    """Branches whose launched operator ended while the branch is still open: the response it left is
    submitted (the driver submits for it), and one that left none, or one the gates refuse, is
    ``blocked`` with the reason (``exited with code N``, ``lost``, ``stopped``), so no branch hangs on
    an operator that is gone. What was done, one entry per branch."""
    from ..launch.run import find
    from ..records.executions import LIVE

    where, manifest = load(wp, session)
    if manifest["status"] not in ("running", "blocked"):
        return []
    ended = []
    for key in sorted(k for k, b in manifest["branches"].items() if b["status"] == "open"):
        record = find(wp, branch_execution(manifest, key))
        if record is not None and record["state"] not in LIVE:
            ended.append((key, record))
    if not ended:
        return []
    done = []
    _where, manifest = load(wp, session)  # read after the executions: a submit lands before its operator exits
    for key, record in ended:
        if manifest["branches"].get(key, {}).get("status") != "open":
            continue
        what = {"exited": f"exited with code {record.get('code')}", "failed": f"could not start ({record.get('reason')})",
                "lost": "was lost (its process is gone)", "stopped": f"was stopped ({record.get('reason')})"
                }.get(record["state"], record["state"])
        why = f"operator {manifest['steps'].get(key)} {what}"
        if _read(where.response(key)) is not None:
            try:
                info = submit(wp, session, key, fence=fence)
                done.append({"branch": key, "action": "submitted", "answer": info.get("answer"),
                             "execution": record["id"]})
                manifest = info["manifest"]
                continue
            except GwError as error:
                if error.code == 7:
                    raise  # the lease is gone: nothing of this session is ours to settle
                why += f" and its response was refused: {error.message}"
        else:
            why += " without a response"
        why = f"{why[:900]} (execution {record['id']})"
        info = block(wp, session, key, why, fence=fence)
        manifest = info["manifest"]
        done.append({"branch": key, "action": "blocked", "reason": why, "execution": record["id"]})
    return done


def next_step(wp: Workplane, session: str, launch: bool = False, backend: str | None = None,
              fence: int | None = None) -> dict[str, Any]:
    """Finish what is due (a branch whose operator ended is submitted or blocked), then list the open
    branches; ``launch`` starts each agent operator's branch through ``gw run``, after the request
    gate: each in its own lane (the branch), so parallel branches run at once under the session's one
    lease, and each at most once (its execution id is the branch's). ``backend``: ``gw run``'s, else
    the rules' ``sessions.backend``, else subprocess."""
    settled = settle_operators(wp, session, fence) if launch else []
    run = _open_run(wp, session, fence)
    settle(run)
    rows = []
    for key in sorted(k for k, b in run.manifest["branches"].items() if b["status"] == "open"):
        check_request(run, key)
        operator = run.rules.operator(run.manifest["steps"][key])
        env = branch_env(run.where, run.manifest, key)
        row: dict[str, Any] = {"branch": key, "operator": operator.name,
                               "kind": "agent" if operator.launched else "person", "path": run.where.branch(key),
                               "request": run.where.request(key), "response": run.where.response_dir(key), "env": env}
        if launch and operator.launched and run.manifest["status"] in ("running", "blocked"):
            from ..launch.run import run as launch_run

            execution = branch_execution(run.manifest, key)
            extra = {k: v for k, v in env.items() if k != "GW_ITEM"}  # gw run sets it, with the lease's
            try:
                started = launch_run(wp, run.manifest["item"], list(operator.command or []),
                                     backend_kind=backend or run.rules.backend, execution=execution, env=extra,
                                     session=session, branch=key)
                # A plain `gw run` of the item excludes every branch: it is what the branch waits for.
                mine = started.get("execution") == execution
                row["execution"], row["waiting_for"] = (started, None) if mine else (None, started.get("execution"))
            except Held as error:  # another driver is launching this very branch now
                row["execution"] = None
                row["waiting_for"] = error.details.get("execution") or execution
        rows.append(row)
    return run.result(branches=rows, settled=settled)


def submit(wp: Workplane, session: str, key: str, fence: int | None = None) -> dict[str, Any]:
    """``advance``/``wait``/``block`` from a branch's response: both gates, then one ``session-submit``."""
    check_key(key)
    run = _open_run(wp, session, fence)
    manifest = run.manifest
    state = manifest["branches"].get(key)
    if state is None:
        raise NotFound(f"no branch {key} in session {session}", session=session, branch=key)
    folder = run.where.response_dir(key)
    path = run.where.response(key)
    if state["status"] != "open":
        data = _read(path)
        if data is not None and sha256(data) == manifest["responses"].get(key):
            settle(run)  # this very response was recorded: finish what a killed submit left due
            return run.result(already=True)
        raise Illegal(f"branch {key} is {state['status']}: it takes no response now", branch=key)
    if manifest["status"] not in ("running", "blocked"):
        raise Illegal(f"session {session} is {manifest['status']}: it takes no more transitions", session=session)
    check_request(run, key)
    run, outside = _settled_outside_writes(wp, session, fence, run)
    manifest = run.manifest
    if outside:
        raise Invalid(f"refused {key}: files outside the open branches' response/ changed: {', '.join(outside[:5])}"
                      + (f" and {len(outside) - 5} more" if len(outside) > 5 else ""), branch=key, paths=outside)
    data = _read(path)
    if data is None:
        raise Invalid(f"{key} has no response yet: its operator writes {path}", branch=key)
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise Invalid(f"{path} is not UTF-8 text") from None
    response = check_schema("response", load_json(data, f"{key}/response/response.json"),
                            f"{key}/response/response.json")
    _check_fields(folder, response, key)
    _refuse_plants(key, [f"{key}/{rel}" for rel in unregistered(folder, response)], "its")
    _refuse_plants(key, _sibling_plants(run, key), "a sibling's")
    if response["status"] == "waiting":
        if is_exchange(key):
            raise Invalid(f"{key} is a nested exchange: it answers done or blocked")
        exchange = f"{key}/{response['awaiting']['exchange']}"
        if exchange in manifest["branches"]:
            raise Invalid(f"{key} already had the exchange {exchange}: name a new one", branch=key)
        run.rules.operator(response["awaiting"]["operator"])
        limit = manifest["stages"].get(state["stage"], {}).get("maxRounds")
        asked = [k for k in manifest["branches"] if k.startswith(key + "/")]
        if limit is not None and len(asked) >= limit:
            raise Invalid(f"{key} has had {len(asked)} question/answer round(s), its step's max_rounds: answer done "
                          "or blocked", branch=key)
    _changes_md(run, key, folder, response)
    if response["status"] == "done" and manifest["stages"].get(state["stage"], {}).get("seal") \
            and not is_exchange(key):
        _seal(run, key, folder)
    if response["status"] == "done":  # the operator's own gate judges what it produced
        operator = run.rules.operator(manifest["steps"][key])
        _run_validator(operator, branch_env(run.where, manifest, key), run.where.branch(key), key)
    listing = _response_listing(folder)
    crash_point("session-submit-checked")
    for _attempt in range(10):
        if run.manifest["branches"][key]["status"] != "open":
            raise Illegal(f"branch {key} was answered meanwhile ({run.manifest['branches'][key]['status']})",
                          branch=key)
        new = copy.deepcopy(run.manifest)
        new["branches"][key]["status"] = response["status"]
        new["responses"][key] = sha256(data)
        if response["status"] == "blocked":
            new["status"] = "blocked"
            if is_exchange(key):
                new["branches"][key.rpartition("/")[0]]["status"] = "blocked"
        try:
            run.record("session-submit", new, key=key, response=text, files=listing)
            break
        except (Illegal, Invalid):
            if not run.refresh():  # a parallel branch was recorded meanwhile: submit on top of it
                raise
    settle(run)
    return run.result(already=False, answer=response["status"])


def _whole(data: bytes | None) -> bool:
    """Does ``data`` parse as a JSON document (a response written in place may be seen half written:
    a prefix of an object never parses)?"""
    if data is None:
        return False
    try:
        load_json(data, "response.json")
    except GwError:
        return False
    return True


def wait(wp: Workplane, session: str, key: str, timeout: float = 60.0, fence: int | None = None) -> dict[str, Any]:
    """Wait (bounded) for a branch's operator — a person, say — to write its response, then submit it.

    The response counts once it parses: a person's editor (or ``echo ... >``) writes the file in place,
    and one seen empty or cut short is still being written. One that does not parse by the deadline
    is submitted as it is, and refused for what it is."""
    import time

    check_key(key)
    where, manifest = load(wp, session)
    deadline = time.monotonic() + max(0.0, timeout)
    delay = 0.05
    while manifest["branches"].get(key, {}).get("status") == "open" and not _whole(data := _read(where.response(key))):
        if time.monotonic() >= deadline:
            if data is not None:
                break  # there, but broken: the submit says why
            raise Held(f"no response from {key} after {timeout:g}s ({where.response(key)})", branch=key)
        time.sleep(delay)
        delay = min(delay * 2, 0.5)
    return submit(wp, session, key, fence=fence)


def block(wp: Workplane, session: str, key: str, reason: str, fence: int | None = None) -> dict[str, Any]:
    """A person (or the driver) stops an open branch: a ``blocked`` response with ``reason``, submitted."""
    check_key(key)
    if not reason or not reason.strip():
        raise Invalid("say why the branch is blocked (--reason)")
    where, manifest = load(wp, session)
    if manifest["status"] not in ("running", "blocked"):
        raise Illegal(f"session {session} is {manifest['status']}: it takes no more transitions", session=session)
    if manifest["branches"].get(key, {}).get("status") == "open":
        doc = {"status": "blocked", "stop": {"reason": reason.strip()[:1024]}, "fields": {}}
        data = canonical(doc)
        if _read(where.response(key)) != data:
            write_atomic(where.response(key), data)
    return submit(wp, session, key, fence=fence)


def resume(wp: Workplane, session: str, fence: int | None = None) -> dict[str, Any]:
    """``block`` → ``resume``: each blocked branch's operator re-enters at step-(N+1)/parallel-M with
    ``resume`` naming it. Run again after a crash it finishes the re-entry."""
    run = _open_run(wp, session, fence)
    manifest = run.manifest
    if manifest["status"] == "running" and manifest["resumes"] and manifest["resumes"][-1]["reason"] == "block" \
            and manifest["resumes"][-1]["branch"] not in manifest["requests"]:
        settle(run)
        return run.result(already=True)
    if manifest["status"] != "blocked":
        raise Illegal(f"session {session} is {manifest['status']}: only a blocked session is resumed", session=session)
    if manifest.get("conflicts"):  # blocked at publish: running again, gw session done tries again
        new = copy.deepcopy(manifest)
        new["status"] = "running"
        new.pop("conflicts")
        new["reason"] = None
        run.record("session-resume", new, reason="block")
        return run.result(already=False)
    n = manifest["current"]
    keys = round_keys(manifest, n)
    busy = [k for k in manifest["branches"] if manifest["branches"][k]["status"] in ("open", "waiting")]
    if busy:
        raise Illegal(f"session {session}: {', '.join(sorted(busy))} still running; submit or block them first",
                      session=session)
    blocked = [k for k in keys if manifest["branches"][k]["status"] == "blocked"]
    new = copy.deepcopy(manifest)
    new["status"] = "running"
    at = clock.format_instant(wp.now())
    new["resumes"] += [{"branch": _branch_key(n + 1, i), "from": k, "reason": "block", "at": at}
                       for i, k in enumerate(blocked, 1)]
    run.record("session-resume", new, reason="block")
    settle(run)
    return run.result(already=False)


# --- reading (for the faces and gw serve) -------------------------------------------------------------


def read_session(wp: Workplane, session: str) -> dict[str, Any]:
    """One session as recorded, JSON-able: its manifest, folder, open branches and whether it finished."""
    check_id(session)
    manifest = _recorded(wp, session)
    if manifest is None:
        raise NotFound(f"no session {session} on the record", session=session)
    return view(Where(main_worktree(wp.repo), session), manifest)


def read_sessions(wp: Workplane) -> list[dict[str, Any]]:
    """Every multi-step session on the record (ended ones too, their folders gone), oldest first."""
    snapshot = wp.context().snapshot
    rows = []
    top = main_worktree(wp.repo)
    for name in sorted(snapshot.tree(SESSIONS_TREE)):
        data = snapshot.blob(f"{SESSIONS_TREE}/{name}/{STATE}")
        if data is None:
            continue
        manifest = load_json(data, f"{SESSIONS_TREE}/{name}/{STATE}", 1 << 20)
        row = view(Where(top, name), manifest)
        row.pop("manifest")
        rows.append({**row, "chain": manifest["chainName"], "startedAt": manifest["startedAt"],
                     "stoppedAt": manifest["stoppedAt"], "holder": manifest["holder"], "route": manifest.get("route"),
                     "current": manifest["current"]})
    return rows
