"""The gates of a submit: the request unchanged, the response's shape, its fields, what was written where
(outside the open ``response/`` folders, or into another branch's), the operator's own validator, and for
source steps the commit, its pinned base and its siblings' files."""

from __future__ import annotations

import os

from .. import fsutil
from ..errors import GwError, Invalid
from ..records.sessions import (
    canonical,
    check_schema,
    load_json,
    sha256,
)
from . import Session, session_dir
from .manifest import (
    MAX_RESPONSE_FILES,
    STATE,
    VALIDATOR_TIMEOUT,
    Run,
    Where,
    _hash_file,
    _open_run,
    _ordered,
    _read,
    _recorded_file,
    is_exchange,
    write_atomic,
)
from .rules import Operator

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

    from ..workplane import Workplane

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
            if rel.startswith(writable) or fsutil.is_temp(name):
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
    import subprocess  # only for a validator: not on every session verb's start

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


