"""``gw hooks install`` (this repository) and ``gw hooks install --server BARE`` (the code remote).

The scripts are the templates in the top-level ``hooks/`` folder (shipped in the wheel as
``gitwork/_hooks``); installing substitutes the absolute path of the Python running ``gw`` (and the
folder gitwork was imported from), so a hook runs the very gitwork that installed it.

- Local: ``reference-transaction`` and ``pre-commit``, written into the *common* git dir's
  ``hooks/`` so every linked worktree (session worktrees included) runs them, whichever worktree
  ``gw hooks install`` was run from.
- Server: ``pre-receive`` in the bare repository.

Idempotent: our own scripts (recognised by the ``gitwork-hook`` marker) are rewritten in place. A
hook that is not ours is chained the way pre-commit (the tool) does it: renamed to ``<hook>.legacy``,
and our script runs it first with the same arguments and input; its refusal stands. If both a foreign
hook and a ``.legacy`` file already exist we refuse rather than overwrite either.

``core.hooksPath``: when it is set, git runs hooks only from there, so a hook in ``.git/hooks`` would
silently never run. We refuse with a clear message unless ``--use-hooks-path`` says to install into
that folder (it is often tracked, or shared with a tool such as husky: that is the person's call).
"""

from __future__ import annotations

import os
import shlex
import sys

from . import gitcmd
from .errors import Invalid

TYPE_CHECKING = False  # typing costs ~15 ms to import; annotations are strings anyway
if TYPE_CHECKING:
    from typing import Any

LOCAL_HOOKS = ("reference-transaction", "pre-commit")
SERVER_HOOKS = ("pre-receive", "post-receive")
MARKER = "gitwork-hook"
LEGACY = ".legacy"


def template(name: str) -> str:
    """The text of a hook template: from the installed package, else from a source checkout."""
    try:
        from importlib.resources import files

        packaged = files("gitwork") / "_hooks" / name
        if packaged.is_file():
            return packaged.read_text(encoding="utf-8")
    except (ModuleNotFoundError, FileNotFoundError, NotADirectoryError):
        pass
    source = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "hooks", name)
    try:
        with open(source, encoding="utf-8") as handle:
            return handle.read()
    except FileNotFoundError:
        raise Invalid(f"hook template {name!r} not found (broken installation?)") from None


def render(name: str) -> str:
    package_root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    return (template(name)
            .replace("@PYTHON@", shlex.quote(sys.executable))
            .replace("@PYTHONPATH@", shlex.quote(package_root)))


def _git(cwd: str, *args: str, check: bool = True) -> gitcmd.Completed:
    return gitcmd.run(list(args), cwd=cwd, check=check)


def hooks_dir(cwd: str, *, bare: bool, use_hooks_path: bool) -> str:
    """Where git will look for this repository's hooks, or a refusal explaining ``core.hooksPath``."""
    if bare:
        # --git-dir, not -C: a plain folder inside some other repository must not be mistaken for it.
        probe = _git(cwd, "--git-dir", cwd, "rev-parse", "--is-bare-repository", check=False)
        if probe.returncode != 0 or probe.out.strip() != "true":
            raise Invalid(f"{cwd} is not a bare git repository (give the code remote's bare repository to --server)")
        common, top, prefix = cwd, None, ["--git-dir", cwd]
    else:
        from .gitdir import discover

        where = discover(cwd)  # the one way gitwork finds a repository (NotARepo with git's reason)
        common, top, prefix = where.common_dir, where.toplevel, []
    configured = _git(cwd, *prefix, "config", "--get", "core.hooksPath", check=False).out.strip()
    if not configured:
        return os.path.join(common, "hooks")
    if not use_hooks_path:
        raise Invalid(
            f"core.hooksPath is set to {configured!r}: git runs hooks only from there, so hooks in "
            f"{os.path.join(common, 'hooks')} would never run. Re-run with --use-hooks-path to install into "
            f"{configured} (a hook already there is chained, not replaced), or unset core.hooksPath.",
            hooks_path=configured)
    # A relative core.hooksPath is taken from where hooks run: the top of the worktree (or GIT_DIR if bare).
    return os.path.normpath(os.path.join(top or common, os.path.expanduser(configured)))


def _is_ours(path: str) -> bool:
    try:
        with open(path, "rb") as handle:
            return MARKER.encode() in handle.read(512)
    except OSError:
        return False


def install_into(folder: str, names: tuple[str, ...]) -> list[dict[str, Any]]:
    """Install each named hook into ``folder``, chaining what was there; returns what was done."""
    os.makedirs(folder, exist_ok=True)
    plan = []
    for name in names:
        path = os.path.join(folder, name)
        legacy = path + LEGACY
        exists = os.path.lexists(path)
        ours = exists and _is_ours(path)
        if exists and not ours and os.path.lexists(legacy):
            raise Invalid(f"{path} is not a gitwork hook and {legacy} already exists: chaining it would overwrite "
                          f"one of them. Merge them by hand, then run gw hooks install again.")
        plan.append((name, path, legacy, exists, ours))
    report = []
    for name, path, legacy, exists, ours in plan:
        text = render(name)
        status = "installed"
        if ours:
            with open(path, encoding="utf-8", errors="replace") as handle:
                status = "unchanged" if handle.read() == text and os.access(path, os.X_OK) else "updated"
        elif exists:
            os.replace(path, legacy)  # kept exactly as it was (mode included): it runs only if executable
            status = "chained"
        if status != "unchanged":
            from .fsutil import write_atomic

            write_atomic(path, text, fsync=False, mode=0o755)
        report.append({"hook": name, "path": path, "status": status,
                       "legacy": legacy if os.path.lexists(legacy) else None})
    return report


def install_local(cwd: str | None = None, *, use_hooks_path: bool = False) -> dict[str, Any]:
    where = os.path.abspath(cwd or os.getcwd())
    folder = hooks_dir(where, bare=False, use_hooks_path=use_hooks_path)
    return {"scope": "local", "hooks_dir": folder, "python": sys.executable,
            "hooks": install_into(folder, LOCAL_HOOKS)}


def install_server(bare: str, *, use_hooks_path: bool = False) -> dict[str, Any]:
    where = os.path.abspath(bare)
    if not os.path.isdir(where):
        raise Invalid(f"{bare} does not exist")
    folder = hooks_dir(where, bare=True, use_hooks_path=use_hooks_path)
    hooks = install_into(folder, SERVER_HOOKS)
    # git's ref packing racing pushes and writers can lose an update whose compare-and-swap succeeded:
    # reproduced with git 2.39.5 alone (tests/test_attack7_arbiter.py, opt-in). `git gc --auto`, which
    # receive-pack starts after pushes (receive.autogc), packs refs unless gc.packRefs says not to; an
    # arbiter has few refs, so it keeps them loose. A value the administrator set is left as it is.
    packing = _git(where, "config", "--get", "gc.packRefs", check=False).out.strip()
    if not packing:
        _git(where, "config", "gc.packRefs", "false")
        packing = "false"
    return {"scope": "server", "repository": where, "hooks_dir": folder, "python": sys.executable,
            "hooks": hooks, "gc.packRefs": packing}
