"""``gw doctor``: is this repository ready for gitwork, and if not, what to do (issue 25, point 8).

Read-only by construction: it opens the repository, reads refs, git config, hook files and a copy of the
read cache, and never calls anything that builds the cache, makes gitwork's folder
or writes a ref (tests/test_doctor.py compares every ref and file before and after). Each check is
``{"check", "ok", "detail", "fix"}``: ``fix`` says what to do when ``ok`` is false. Optional extras
never fail: they say what is missing and what it would give.
"""

from __future__ import annotations

import importlib.util
import os

from .errors import GwError, NotARepo

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

    from .workplane import Workplane

# extra -> (the module it brings, what it gives)
EXTRAS = {"serve": ("fastapi", "gw serve (REST and the board)"), "mcp": ("mcp", "gw mcp"),
          "sessions": ("fastjsonschema", "gw session / gw step"), "jq": ("jq", "gw --jq")}


def _check(name: str, ok: bool, detail: str, fix: str | None = None) -> dict[str, Any]:
    return {"check": name, "ok": ok, "detail": detail, "fix": None if ok else fix}


def checks(path: str | None = None, agent: str | None = None) -> list[dict[str, Any]]:
    """Every check, in order; a repository that cannot be opened stops the ones that need it."""
    from .workplane import Workplane

    out: list[dict[str, Any]] = []
    try:
        wp = Workplane(path)
    except NotARepo as error:
        out.append(_check("repository", False, error.message, "run gw inside a git repository (or pass -C DIR)"))
        return out + _extras()
    except GwError as error:  # a bad .workplane, gitwork.* setting or GW_* variable: named in the message
        out.append(_check("settings", False, error.message, "fix the value the message names"))
        return out + _extras()
    with wp:
        repo = wp.repo
        out.append(_check("repository", True, repo.toplevel or repo.git_dir))
        out.append(_identity(wp, agent))
        out.append(_state(wp))
        out.append(_remote(wp))
        out.append(_hooks(repo.toplevel or repo.git_dir))
        out.append(_cache(wp))
        out.append(_locks(wp))
    return out + _extras()


def _identity(wp: Workplane, agent: str | None) -> dict[str, Any]:
    from .ids import check_identity

    try:
        who = check_identity(agent, "--as") if agent is not None else wp.settings.identity()
    except GwError as error:
        return _check("identity", False, error.message, "set a valid --as, GW_AGENT or git config gitwork.agent")
    return _check("identity", True, f"{who} ({wp.settings.role(who)})")


def _state(wp: Workplane) -> dict[str, Any]:
    ref = wp.store.ref
    try:
        tip = wp.store.tip()
        if tip is None:
            return _check("state ref", False, f"{ref} does not exist", "run gw init")
        wp.store.snapshot(tip).check_format()
    except GwError as error:
        return _check("state ref", False, error.message, "see docs/format.md on repairing the state")
    return _check("state ref", True, f"{ref} at {tip[:12]}")


def _remote(wp: Workplane) -> dict[str, Any]:
    from . import gitcmd

    name = wp.settings.remote
    if not name:
        return _check("arbiter remote", True, "none set (this clone decides alone; gw remote set NAME for several)")
    url = gitcmd.run(["config", "--get", f"remote.{name}.url"], cwd=wp.repo.git_dir, check=False).out.strip()
    if not url:
        return _check("arbiter remote", False, f"the setting remote is {name!r}, which is not a git remote",
                      f"git remote add {name} URL, or gw remote set to an existing remote")
    return _check("arbiter remote", True, f"{name} ({url}; not contacted)")


def _hooks(where: str) -> dict[str, Any]:
    from .hooks_install import LOCAL_HOOKS, _is_ours, hooks_dir

    try:
        folder = hooks_dir(where, bare=False, use_hooks_path=True)
    except GwError as error:
        return _check("hooks", False, error.message, "gw hooks install")
    missing = [name for name in LOCAL_HOOKS if not _is_ours(os.path.join(folder, name))]
    if missing:
        return _check("hooks", False, f"not installed in {folder}: {', '.join(missing)}", "gw hooks install")
    return _check("hooks", True, f"{', '.join(LOCAL_HOOKS)} in {folder}")


def _cache(wp: Workplane) -> dict[str, Any]:
    import shutil
    import tempfile

    from .cache import NAME, status

    # Not repo.gitwork_dir(): that makes the folder. And not the file itself: even a read-only SQLite
    # reader writes its read marks into the -shm file, so the check reads a copy (the file and its WAL).
    path = os.path.join(wp.repo.common_dir, "gitwork", NAME)
    if not os.path.exists(path):
        return _check("read cache", True, "not built yet (the next read builds it)")
    with tempfile.TemporaryDirectory(prefix="gw-doctor-") as scratch:
        copy = os.path.join(scratch, NAME)
        for suffix in ("", "-wal"):
            if os.path.exists(path + suffix):
                shutil.copyfile(path + suffix, copy + suffix)
        found = status(copy)
    if not found["ok"]:
        return _check("read cache", False, f"{path} is damaged or of another version (or was being written: "
                      "run gw doctor again)", "gw cache rebuild")
    behind = "" if found["commit"] == wp.store.tip() else ", behind the tip (the next read catches up)"
    return _check("read cache", True, f"{found['items']} items{behind}")


def _locks(wp: Workplane) -> dict[str, Any]:
    """git's lock files on the state ref and its tracking ref: one a killed git left stops every write
    (or fetch) until the stale rule removes it (stalelocks.py: the next write or sync does, once it is
    older than STALE_AFTER and nothing may hold it); named here, never removed."""
    import time

    from .stalelocks import STALE_AFTER, lock_holders
    from .sync.transport import tracking_ref

    repo = wp.repo
    refs = [wp.store.ref] + ([tracking_ref(wp.settings.remote, wp.store.ref)] if wp.settings.remote else [])
    young: list[str] = []
    stale: list[str] = []
    for ref in refs:
        try:
            age = time.time() - os.lstat(os.path.join(repo.common_dir, ref + ".lock")).st_mtime
        except OSError:
            continue
        (young if age < STALE_AFTER else stale).append(f"{ref}.lock ({int(age)} s old)")
    if not stale:
        return _check("ref locks", True, f"held now by a writer: {', '.join(young)}" if young else "none")
    holders = lock_holders(repo.common_dir, repo.toplevel)
    if holders:
        return _check("ref locks", False, f"{', '.join(stale)}, and git processes that may hold it run: "
                      f"{'; '.join(holders[:3])}", "wait for them to end (or stop them), then gw sync")
    return _check("ref locks", False, f"{', '.join(stale)}: left by a killed git",
                  "gw sync (or any write) removes it, unless a process holds it by flock")


def _extras() -> list[dict[str, Any]]:
    out = []
    for extra, (module, gives) in EXTRAS.items():
        present = importlib.util.find_spec(module) is not None
        out.append(_check(f"extra {extra}", True, f"installed, for {gives}" if present
                          else f"not installed: pip install 'gitwork[{extra}]' for {gives}"))
    return out
