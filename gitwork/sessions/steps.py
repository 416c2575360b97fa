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

A source-writing step also gets a commit-once session ``<id>-sN-pM`` (``gitwork.sessions.start``), a
sibling folder with its own worktree and branch ``session/<id>-sN-pM``.
"""

from __future__ import annotations

import copy
import os
import re
import shutil
import subprocess

from .. import clock
from ..errors import GwError, Held, Illegal, Invalid, NonFastForward, NotFound
from ..ops.session_records import (
    MAX_DOCUMENT_BYTES,
    SESSIONS_TREE,
    branch_path,
    canonical,
    check_schema,
    load_json,
    recorded_manifest,
    sha256,
)
from ..store import crash_point
from . import Session, ensure_ignored, main_worktree, new_session_id, session_dir, slug
from . import drop as drop_source
from . import start as start_source
from .rules import Operator, Rules
from .rules import load as load_rules

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

    from ..workplane import Workplane

STATE = "state.json"
SESSION_ID = re.compile(r"[0-9]{8}-[0-9]{6}-[a-z0-9][a-z0-9-]{0,120}\Z")
_KEY = re.compile(r"step-([1-9][0-9]{0,3})/parallel-([1-9][0-9]{0,2})(/[a-z0-9][a-z0-9-]{0,39})?\Z")
MAX_RESPONSE_FILES = 1000
VALIDATOR_TIMEOUT = 300.0


# --- files -----------------------------------------------------------------------------------------


def write_atomic(path: str, data: bytes) -> None:
    """Write ``path`` whole or not at all: a temporary file beside it, fsync, rename, fsync of the folder."""
    folder = os.path.dirname(path)
    os.makedirs(folder, exist_ok=True)
    temp = os.path.join(folder, f".{os.path.basename(path)}.{os.getpid()}.tmp")
    with open(temp, "wb") as handle:
        handle.write(data)
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(temp, path)
    descriptor = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(descriptor)
    finally:
        os.close(descriptor)


def _read(path: str, limit: int = MAX_DOCUMENT_BYTES) -> bytes | None:
    try:
        with open(path, "rb") as handle:
            return handle.read(limit + 1)
    except (FileNotFoundError, IsADirectoryError, NotADirectoryError):
        return None


def _hash_file(path: str) -> str:
    import hashlib

    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 16), b""):
            digest.update(block)
    return digest.hexdigest()


def check_key(key: str) -> str:
    if not isinstance(key, str) or not _KEY.match(key):
        raise Invalid(f"bad branch key {str(key)[:60]!r}: step-N/parallel-M, or step-N/parallel-M/EXCHANGE")
    return key


def check_id(session: str) -> str:
    if not isinstance(session, str) or not SESSION_ID.match(session):
        raise Invalid(f"malformed session id {str(session)[:60]!r}")
    return session


def round_of(key: str) -> int:
    return int(key.split("/", 1)[0][len("step-"):])


def is_exchange(key: str) -> bool:
    return key.count("/") == 2


def _branch_key(n: int, m: int) -> str:
    return f"step-{n}/parallel-{m}"


class Where:
    """The folders of one session."""

    def __init__(self, top: str, session: str) -> None:
        self.top, self.session = top, session
        self.folder = session_dir(top, session)

    def branch(self, key: str) -> str:
        return os.path.join(self.folder, *key.split("/"))

    def request(self, key: str) -> str:
        return os.path.join(self.branch(key), "request", "request.json")

    def response_dir(self, key: str) -> str:
        return os.path.join(self.branch(key), "response")

    def response(self, key: str) -> str:
        return os.path.join(self.response_dir(key), "response.json")


# --- the record ------------------------------------------------------------------------------------


def _recorded(wp: Workplane, session: str) -> dict[str, Any] | None:
    return recorded_manifest(wp.context(), session)


def _recorded_file(wp: Workplane, session: str, key: str, *rest: str) -> bytes | None:
    return wp.context().file(branch_path(session, key, *rest))


def mirror(where: Where, manifest: dict[str, Any]) -> None:
    """Make the folder's ``state.json`` the recorded manifest (a published session's folder stays gone)."""
    if manifest["status"] == "done" and not os.path.isdir(where.folder):
        return  # a done session's folder stays gone
    path = os.path.join(where.folder, STATE)
    data = canonical(manifest)
    if _read(path, 1 << 20) != data:
        write_atomic(path, data)


def load(wp: Workplane, session: str) -> tuple[Where, dict[str, Any]]:
    """The session's folders and its recorded manifest, with the folder's copy brought in step."""
    check_id(session)
    manifest = _recorded(wp, session)
    if manifest is None:
        raise NotFound(f"no session {session} on the record (gw session list shows them)", session=session)
    where = Where(main_worktree(wp.repo), session)
    mirror(where, manifest)
    return where, manifest


class Run:
    """One procedure's progress: the session, its manifest as last recorded, and the transitions made."""

    def __init__(self, wp: Workplane, where: Where, manifest: dict[str, Any], fence: int | None) -> None:
        self.wp, self.where, self.manifest, self.fence = wp, where, manifest, fence
        self.transitions: list[dict[str, Any]] = []
        self._rules: Rules | None = None

    @property
    def rules(self) -> Rules:
        if self._rules is None:
            self._rules = load_rules(self.wp.settings)
        return self._rules

    def record(self, op: str, new: dict[str, Any], **fields: Any) -> None:
        """One transition: one op, one commit; then the folder's manifest mirrors it."""
        holder = new["holder"]
        lease = self.wp.lease(new["item"])
        if lease is not None and lease.is_active() and lease.holder == holder \
                and not new["leases"].get(holder, {}).get("released"):
            # The lease the holder acts under now (a new grant after a release and claim shows here).
            new["leases"][holder] = {"item": new["item"], "fence": lease.fence, "epoch": lease.epoch}
        applied = self.wp.record(op, item=new["item"], session=new["id"], manifest=canonical(new).decode("utf-8"),
                                 fence=self.fence, **fields)
        self.manifest = new
        self.transitions.append({"op": op, "branch": fields.get("key"), "commit": applied.commit,
                                 "command_id": applied.command["id"]})
        crash_point(f"{op}-recorded")
        mirror(self.where, new)

    def refresh(self) -> bool:
        """Take up what another process recorded meanwhile (``False``: nothing new, so a refusal stands)."""
        fresh = _recorded(self.wp, self.manifest["id"])
        if fresh is None or fresh == self.manifest:
            return False
        self.manifest = fresh
        mirror(self.where, fresh)
        return True

    def result(self, **extra: Any) -> dict[str, Any]:
        return {**view(self.where, self.manifest), "transitions": self.transitions, **extra}


def view(where: Where, manifest: dict[str, Any]) -> dict[str, Any]:
    """A session as the faces show it: the manifest, its folder, and what is open now."""
    open_ = sorted(k for k, b in manifest["branches"].items() if b["status"] == "open")
    return {"session": manifest["id"], "item": manifest["item"], "status": manifest["status"],
            "folder": where.folder if os.path.isdir(where.folder) else None, "open": open_,
            "finished": finished(manifest), "manifest": manifest}


# --- planning: which branches are due ---------------------------------------------------------------


def round_keys(manifest: dict[str, Any], n: int) -> list[str]:
    keys = [k for k in manifest["branches"] if not is_exchange(k) and round_of(k) == n]
    return sorted(keys, key=lambda k: int(k.rpartition("-")[2]))


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


def finished(manifest: dict[str, Any]) -> bool:
    """Every branch settled, the last round done, and it ran the chain's last step."""
    n = manifest["current"]
    keys = round_keys(manifest, n)
    if not keys or any(manifest["branches"][k]["status"] != "done" for k in keys):
        return False
    if any(b["status"] in ("open", "waiting") for b in manifest["branches"].values()):
        return False
    return manifest["branches"][keys[0]].get("position") == len(manifest["plan"]) - 1


# --- transitions -----------------------------------------------------------------------------------


def _ordered(keys: Any) -> list[str]:
    return sorted(keys, key=lambda k: (round_of(k), int(k.split("/")[1].rpartition("-")[2])))


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


def _source_for(run: Run, key: str, position: int) -> dict[str, Any]:
    """The commit-once session a source-writing branch writes through (started once, then reused), from
    a base holding every earlier source step's commit; the request pins those commits."""
    source_id = f"{run.manifest['id']}-s{round_of(key)}-p{key.rpartition('-')[2]}"
    base, pins = _source_base(run, position)
    try:
        record = Session.load(run.where.top, source_id)
    except NotFound:
        start_source(run.wp, run.manifest["item"], fence=run.fence, session_id=source_id, base_commit=base)
        record = Session.load(run.where.top, source_id)
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


# --- gates -----------------------------------------------------------------------------------------


def check_request(run: Run, key: str) -> dict[str, Any]:
    """The gate before an operator starts: the request on disk is the one recorded, it satisfies the
    schema, and a ``resume`` names a branch the manifest recorded for the same operator."""
    path = run.where.request(key)
    data = _read(path)
    if data is None or sha256(data) != run.manifest["requests"].get(key):
        raise Invalid(f"the request of {key} is missing or changed on disk ({path}): it no longer matches the "
                      "hash in the manifest", branch=key)
    request = check_schema("request", load_json(data, f"the request of {key}"), f"the request of {key}")
    resume = request.get("resume")
    if resume is not None and run.manifest["steps"].get(resume) != request["operator"]:
        raise Invalid(f"the request of {key} resumes {resume}, which is not a branch of {request['operator']}",
                      branch=key)
    return request


def _recorded_listing(run: Run, key: str) -> dict[str, str]:
    return _recorded_listing_of(run.wp, run.manifest["id"], key)


def _recorded_listing_of(wp: Workplane, session: str, key: str) -> dict[str, str]:
    data = _recorded_file(wp, session, key, "response", "files.sha256") or b""
    listing = {}
    for line in data.decode("utf-8", "replace").splitlines():
        digest, _, path = line.partition(" ")
        listing[f"{key}/{path}"] = digest
    return listing


def outside_writes(run: Run, writer: str | None = None) -> list[str]:
    """Paths in the session folder that differ from the record, outside the ``response/`` folders of the
    branches that are open now (where their operators write): a write anywhere else is detected here."""
    manifest = run.manifest
    expected = {STATE: sha256(canonical(manifest))}
    expected.update({f"{key}/request/request.json": digest for key, digest in manifest["requests"].items()})
    for key, state in manifest["branches"].items():
        if state["status"] != "open" and key in manifest["responses"]:
            expected.update(_recorded_listing(run, key))
    writable = tuple(f"{k}/response/" for k, b in manifest["branches"].items() if b["status"] == "open")
    changed = []
    seen = set()
    for root, dirs, files in os.walk(run.where.folder):
        dirs.sort()
        for name in sorted(files):
            full = os.path.join(root, name)
            rel = os.path.relpath(full, run.where.folder).replace(os.sep, "/")
            if rel.startswith(writable) or (name.startswith(".") and name.endswith(".tmp")):
                continue
            seen.add(rel)
            digest = "symlink" if os.path.islink(full) else _hash_file(full)
            if expected.get(rel) != digest:
                changed.append(rel)
    changed += [p for p in expected if p not in seen and not p.startswith(writable)]
    return sorted(set(changed))


def _settled_outside_writes(wp: Workplane, session: str, fence: int | None, run: Run) -> tuple[Run, list[str]]:
    """:func:`outside_writes`, judged on a settled record: a sibling branch's submit that lands while this
    one checks rewrites ``state.json`` (and may lay out the next step) just after its record moves, so a
    difference is only believed once it is still there on the newest record a moment later. A real write
    outside the open ``response/`` folders stays and is refused; only the refusal comes later."""
    import time

    outside = outside_writes(run)
    for attempt in range(1, 9):  # at most ~1.8 s in all, only when something differs
        if not outside:
            break
        time.sleep(0.05 * attempt)
        run = _open_run(wp, session, fence)
        outside = outside_writes(run)
    return run, outside


def _response_listing(folder: str) -> list[str]:
    """``<sha256> response/<path>`` for every file an operator left in its ``response/`` folder."""
    lines = []
    for root, dirs, files in os.walk(folder):
        dirs.sort()
        for name in sorted(files):
            full = os.path.join(root, name)
            rel = "response/" + os.path.relpath(full, folder).replace(os.sep, "/")
            if os.path.islink(full):
                raise Invalid(f"{rel} is a symbolic link: a response holds files only")
            lines.append(f"{_hash_file(full)} {rel}")
            if len(lines) > MAX_RESPONSE_FILES:
                raise Invalid(f"the response holds more than {MAX_RESPONSE_FILES} files")
    return lines


def _check_fields(folder: str, response: dict[str, Any], key: str) -> None:
    root = os.path.realpath(folder)
    for name, path in response.get("fields", {}).items():
        parts = path.split("/")
        if ".." in parts or "" in parts[1:] or path.startswith("/"):
            raise Invalid(f"field {name} of {key}: {path!r} is not a plain path inside response/")
        full = os.path.realpath(os.path.join(os.path.dirname(folder), path))
        if not (full == root or full.startswith(root + os.sep)) or not os.path.exists(full):
            raise Invalid(f"field {name} of {key}: {path} does not exist in its response/", branch=key)


GW_WRITTEN = ("response/response.json", "response/response.md", "response/changes.md", "response/sealed.sha256")


def unregistered(folder: str, response: dict[str, Any]) -> list[str]:
    """The files of a branch's ``response/`` that its ``response.json`` does not account for: not
    ``response.json``/``response.md``, not written by gitwork (``changes.md``, ``sealed.sha256``), not a
    ``fields`` path nor inside a folder a field names. Paths relative to the branch (``response/...``).

    Branches open at the same time share a filesystem and gitwork cannot tell which process wrote a file:
    the branch's own registry is what says a file is its own, and a file nobody registered was written
    from outside the branch (a sibling planting it, say)."""
    claimed = set(GW_WRITTEN)
    prefixes = []
    for path in (response.get("fields") or {}).values():
        if isinstance(path, str):
            claimed.add(path.rstrip("/"))
            prefixes.append(path.rstrip("/") + "/")
    found = []
    for line in _response_listing(folder):
        rel = line.partition(" ")[2]
        if rel not in claimed and not rel.startswith(tuple(prefixes)):
            found.append(rel)
    return found


def _sibling_plants(run: Run, key: str) -> list[str]:
    """Files in another open branch's ``response/`` that its already written ``response.json`` does not
    register (``response.json`` is written last: once it is there, that branch has said what is its own).
    Found at any branch's submit, so a plant is refused whichever of the two branches submits first."""
    found = []
    for other in _ordered(k for k, b in run.manifest["branches"].items() if k != key and b["status"] == "open"):
        data = _read(run.where.response(other))
        if data is None:
            continue
        try:
            doc = load_json(data, f"{other}/response/response.json")
        except GwError:
            continue  # its own submit judges it
        if isinstance(doc, dict) and isinstance(doc.get("fields", {}), dict):
            try:
                found += [f"{other}/{rel}" for rel in unregistered(run.where.response_dir(other), doc)]
            except Invalid:
                continue
    return found


def _refuse_plants(key: str, paths: list[str], whose: str) -> None:
    if paths:
        raise Invalid(f"refused {key}: {', '.join(paths[:5])}" + (f" and {len(paths) - 5} more" if len(paths) > 5
                                                                    else "")
                      + f" in {whose} response/ but not registered in its response.json fields: a branch writes only"
                      " its own response/ (a file written from outside the branch, by a sibling say)",
                      branch=key, paths=paths)


def _run_validator(operator: Operator, env: dict[str, str], cwd: str, key: str) -> None:
    """The operator's own gate, after the shared schema: ``sh -c VALIDATE`` in the branch folder."""
    if not operator.validate:
        return
    try:
        done = subprocess.run(["sh", "-c", operator.validate], cwd=cwd, env={**os.environ, **env},
                              capture_output=True, timeout=VALIDATOR_TIMEOUT)
    except subprocess.TimeoutExpired:
        raise Invalid(f"the {operator.name} validator did not finish in {VALIDATOR_TIMEOUT:.0f}s", branch=key) from None
    if done.returncode != 0:
        said = (done.stderr or done.stdout).decode("utf-8", "replace").strip().splitlines()
        raise Invalid(f"the {operator.name} validator refused {key} (exit {done.returncode})"
                      + (f": {said[-1][:200]}" if said else ""), branch=key)


def branch_env(where: Where, manifest: dict[str, Any], key: str) -> dict[str, str]:
    """What an operator is told: the path of its own branch (it never reads the session folder itself)."""
    env = {"GW_SESSION": manifest["id"], "GW_SESSION_KEY": key, "GW_SESSION_ROOT": where.folder,
           "GW_SESSION_BRANCH": where.branch(key), "GW_SESSION_REQUEST": where.request(key),
           "GW_SESSION_RESPONSE": where.response_dir(key), "GW_ITEM": manifest["item"]}
    resumed = [r for r in manifest["resumes"] if r["branch"] == key and r["reason"] == "wait"]
    if resumed:
        env["GW_SESSION_EXCHANGE"] = where.response_dir(resumed[-1]["from"])
    source = manifest["branches"].get(key, {}).get("source")
    if source:
        env["GW_SESSION_SOURCE"] = os.path.join(session_dir(where.top, source), "source")
    return env


def _changes_md(run: Run, key: str, folder: str, response: dict[str, Any]) -> None:
    """A source-writing branch: its ``commits`` must be its commit-once session's commit, and
    ``changes.md`` names every path with its blob before and after, and the commit."""
    source = run.manifest["branches"][key].get("source")
    commits = response.get("commits") or []
    if not source:
        if commits:
            raise Invalid(f"{key} does not write source: its response names no commits", branch=key)
        return
    record = Session.load(run.where.top, source)
    if record.get("state") == "started":
        if commits or response["status"] == "done":
            raise Invalid(f"{key} writes source: commit it first (gw session commit {source} --file ... -m ...)",
                          branch=key)
        return
    if commits != [record["commit"]]:
        raise Invalid(f"{key}: response.json commits must be [{record['commit']}], its session's one commit",
                      branch=key)
    _check_pinned(run, key, record)
    _check_siblings(run, key, record)
    lines = [f"# Changes of {key}", "", f"Commit: {record['commit']}", f"Base: {record['base']}",
             f"Session branch: {record.branch}", "", "| path | before | after |", "|---|---|---|"]
    lines += [f"| {c['path']} | {c.get('before') or '-'} | {c.get('after') or '-'} |"
              for c in record.get("changes", [])]
    data = ("\n".join(lines) + "\n").encode("utf-8")
    if _read(os.path.join(folder, "changes.md")) != data:
        write_atomic(os.path.join(folder, "changes.md"), data)


def _seal(run: Run, key: str, folder: str) -> None:
    """A review step's seal: each artifact it was handed, with the sha256 its request pinned and the one on
    disk now (they must agree: it reviewed exactly that), written to ``response/sealed.sha256`` and so
    recorded with the response's files."""
    request = load_json(_read(run.where.request(key)) or b"{}", f"the request of {key}")
    lines = []
    for entry in request.get("inputs") or []:
        full = os.path.join(run.where.folder, *entry["path"].split("/"))
        now = _hash_file(full) if os.path.isfile(full) else "missing"
        if entry.get("sha256") and now != entry["sha256"]:
            raise Invalid(f"{key}: the artifact {entry['path']} it reviewed is not the one handed to it "
                          f"({now[:12]} on disk, {entry['sha256'][:12]} pinned)", branch=key)
        lines.append(f"{now} {entry['path']}\n")
    data = "".join(lines).encode("utf-8")
    if _read(os.path.join(folder, "sealed.sha256")) != data:
        write_atomic(os.path.join(folder, "sealed.sha256"), data)


def _check_pinned(run: Run, key: str, record: Session) -> None:
    """The gate on what a source response was made against: its commit's one parent is the base its
    request pinned, and every commit the request pins is in it (a response made on another checkout, or
    a session re-pointed at another base, is refused)."""
    from . import git
    from .combine import is_ancestor

    request = load_json(_read(run.where.request(key)) or b"{}", f"the request of {key}")
    pinned = (request.get("source") or {}).get("base")
    parents = git("rev-list", "--parents", "-n1", record["commit"], cwd=run.where.top).out.split()[1:]
    if pinned and (parents != [pinned] or record["base"] != pinned):
        raise Invalid(f"{key}: commit {record['commit'][:12]} was made against {(parents or ['nothing'])[0][:12]}, "
                      f"not the base {pinned[:12]} its request pinned", branch=key)
    missing = [p["from"] for p in (request.get("source") or {}).get("pins") or []
               if not is_ancestor(p["commit"], record["commit"], run.where.top)]
    if missing:
        raise Invalid(f"{key}: commit {record['commit'][:12]} lacks the pinned source of {', '.join(missing)}",
                      branch=key)


def _check_siblings(run: Run, key: str, record: Session) -> None:
    """Parallel source branches (the same step, a re-entered one included) may not touch the same file: the
    second to submit is refused, naming the files and the sibling (so a conflict between them is never found as late as ``gw session done``)."""
    mine = {c["path"] for c in record.get("changes") or []}
    for other in _ordered(k for k, b in run.manifest["branches"].items()
                          if k != key and not is_exchange(k) and b.get("source") and b["status"] == "done"
                          and b.get("position") == run.manifest["branches"][key].get("position")):
        theirs = Session.load(run.where.top, run.manifest["branches"][other]["source"])
        both = sorted(mine & {c["path"] for c in theirs.get("changes") or []})
        if both:
            raise Invalid(f"refused {key}: {', '.join(both)} also changed by its parallel sibling {other}: parallel "
                          "branches may not touch the same file (block this branch, or redo it without them)",
                          branch=key, paths=both, sibling=other)


# --- the verbs ---------------------------------------------------------------------------------------


def _open_run(wp: Workplane, session: str, fence: int | None) -> Run:
    where, manifest = load(wp, session)
    return Run(wp, where, manifest, fence)


def _unfinished_for(wp: Workplane, item_id: str, chain: str) -> str | None:
    """The item's session of this chain that is on the record and not ended (a re-run of create)."""
    from ..ops.session_records import running_step_sessions

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
    from ..ops.executions import LIVE

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


def stop_operators(wp: Workplane, session: str, reason: str) -> list[str]:
    """Stop every live execution of the session's branches on this host (a session stopped, or done):
    its operators must not go on writing into a session that has ended. The ids stopped."""
    from ..launch.run import host, runs
    from ..launch.run import stop as stop_execution
    from ..ops.executions import LIVE

    stopped = []
    for row in runs(wp):
        if row.get("session") == session and row["state"] in LIVE and row.get("host") == host():
            stop_execution(wp, row["execution"], reason=reason)
            stopped.append(row["execution"])
    return stopped


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


def wait(wp: Workplane, session: str, key: str, timeout: float = 60.0, fence: int | None = None) -> dict[str, Any]:
    """Wait (bounded) for a branch's operator — a person, say — to write its response, then submit it."""
    import time

    check_key(key)
    where, manifest = load(wp, session)
    deadline = time.monotonic() + max(0.0, timeout)
    delay = 0.05
    while manifest["branches"].get(key, {}).get("status") == "open" and _read(where.response(key)) is None:
        if time.monotonic() >= deadline:
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


def _lease_held(wp: Workplane, item_id: str) -> Any:
    lease = wp.lease(item_id)
    if lease is not None and lease.is_active() and lease.holder == wp.settings.identity():
        return lease
    return None


def _sources(run: Run) -> list[Session]:
    """The commit-once sessions of the source-writing branches, in chain order."""
    found = []
    for key in _ordered(run.manifest["branches"]):
        state = run.manifest["branches"][key]
        if state.get("source"):
            try:
                found.append(Session.load(run.where.top, state["source"]))
            except NotFound:
                continue
    return found


def done(wp: Workplane, session: str, route: str = "publish", fence: int | None = None) -> dict[str, Any]:
    """``done`` on every route (docs/sessions.md, "The lifecycle"): ``publish`` lands every source step's
    commit (all or none); ``user`` or ``external`` publishes nothing and drops the unpublished source
    sessions. Then, on every route, the manifest is recorded as the audit record, the item marked done
    (its lease released), the folder and the session branches deleted: only published commits and the
    audit record survive. Run again after a crash it finishes the rest."""
    if route not in ("user", "external", "publish"):
        raise Invalid(f"route must be user, external or publish (got {route[:40]!r})")
    run = _open_run(wp, session, fence)
    manifest = run.manifest
    if manifest["status"] == "done":
        return _finish(run)
    if manifest["status"] != "running" or not finished(manifest):
        raise Illegal(f"session {session} is {manifest['status']} and "
                      + ("has finished its chain" if finished(manifest) else "has not finished its chain")
                      + ": it cannot be done yet", session=session)
    item = wp.item(manifest["item"])
    unchecked = [n for n, c in enumerate(item.criteria, 1) if not c.get("checked")]
    if unchecked:  # every route marks the item done
        raise Illegal(f"{item.id} has unchecked criteria {unchecked}: check them before the session is done")
    if route == "publish":
        from .land import land

        landed = land(wp, session, manifest["item"], [r for r in _sources(run) if r.get("state") == "committed"])
        if landed["conflicts"]:
            _block_on_conflicts(run, landed)
    new = copy.deepcopy(manifest)
    new.update(status="done", route=route, stoppedAt=clock.format_instant(wp.now()))
    for lease in new["leases"].values():
        lease["released"] = True
    run.record("session-end", new, to="done", route=route)
    return _finish(run)


def _block_on_conflicts(run: Run, landed: dict[str, Any]) -> None:
    """Nothing landed: the session is ``blocked`` with the conflicting paths named (``gw step resume``
    takes it up again once they are resolved on the target), then exit 13."""
    conflicts = landed["conflicts"]
    new = copy.deepcopy(run.manifest)
    new.update(status="blocked", conflicts=conflicts,
               reason=f"publishing conflicts with {landed['target'][:12]} in {', '.join(conflicts)}"[:1024])
    run.record("session-end", new, to="blocked", route="publish", reason=new["reason"])
    raise NonFastForward(f"session {run.manifest['id']} was not published: its source conflicts with "
                         f"{landed['target'][:12]} in {', '.join(conflicts)}. Nothing landed; the session is "
                         "blocked. Resolve it on the target, then gw step resume and gw session done again.",
                         session=run.manifest["id"], conflicts=conflicts, target=landed["target"])


def _end_sources(run: Run) -> None:
    """A session that ended leaves no commit-once session open: those without a commit are dropped, and so
    are committed ones a done session did not publish (a person's route): only published commits survive."""
    manifest = run.manifest
    unpublished = ("started", "committed") if manifest["status"] == "done" else ("started",)
    for record in _sources(run):
        if record.get("state") in unpublished:
            drop_source(run.wp, record.id, reason=f"session {run.manifest['id']} ended")
        elif record.get("state") == "published":
            from . import git, is_published

            if os.path.isdir(record.folder):
                git("worktree", "remove", "--force", record.source, cwd=run.where.top, check=False)
                shutil.rmtree(record.folder, ignore_errors=True)
            # Its commit is on the target now: the session branch only pointed at it. Deleted only while it
            # still points there and that commit is reachable from a branch that is not a session branch.
            if record.get("commit") and is_published(record["commit"], run.where.top):
                git("update-ref", "-d", record.ref, record["commit"], cwd=run.where.top, check=False)


def _finish(run: Run) -> dict[str, Any]:
    manifest = run.manifest
    if manifest["status"] == "stopped":  # before the lease goes: its operators stop with the session
        stop_operators(run.wp, manifest["id"], f"session {manifest['id']} stopped")
    _end_sources(run)
    lease = _lease_held(run.wp, manifest["item"])
    if lease is not None:
        if manifest["status"] == "done":  # every route: the session finished its chain, the item is done
            run.wp.do("done", item=manifest["item"], fence=lease.fence,
                      reason=f"session {manifest['id']} done ({manifest.get('route')})")
        else:
            run.wp.do("release", item=manifest["item"], fence=lease.fence)
    crash_point("session-end-released")
    if manifest["status"] == "done":  # the spec: release the lease, delete the folder (the audit is on the ref)
        shutil.rmtree(run.where.folder, ignore_errors=True)
    return run.result()


def stop(wp: Workplane, session: str, reason: str | None = None, fence: int | None = None) -> dict[str, Any]:
    """``stop``: the session ends without finishing (recorded, lease released, folder kept for a person)."""
    run = _open_run(wp, session, fence)
    if run.manifest["status"] == "stopped":
        return _finish(run)
    if run.manifest["status"] == "done":
        raise Illegal(f"session {session} is done already", session=session)
    new = copy.deepcopy(run.manifest)
    new.update(status="stopped", stoppedAt=clock.format_instant(wp.now()), reason=reason)
    for lease in new["leases"].values():
        lease["released"] = True
    run.record("session-end", new, to="stopped", reason=reason)
    return _finish(run)


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
