"""Build hook (hatchling): stamp the build identity into the package (docs/operations.md, "Build identity").

Every wheel and sdist gets ``gitwork/_build.py`` holding the commit it was built from (``git rev-parse
HEAD`` of this source tree, with ``-dirty`` when tracked files differ from it), so an installed gw
reports the commit it was built from and a coordinator and a worker from different commits refuse to
work together (``gitwork/launch/build.py``). Built from an sdist, which has no ``.git``, the sdist's own
stamp is kept. An editable install is not stamped: it runs the checkout itself, whose commit gw asks git for.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from typing import Any

from hatchling.builders.hooks.plugin.interface import BuildHookInterface

STAMP = "gitwork/_build.py"


def _git(root: str, *args: str) -> str | None:
    try:
        done = subprocess.run(["git", "-C", root, *args], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return done.stdout.strip() if done.returncode == 0 else None


def commit_of(root: str) -> str | None:
    """The commit of the source tree at ``root`` (``-dirty`` when tracked files changed), or None."""
    top = _git(root, "rev-parse", "--show-toplevel")
    if top is None or os.path.realpath(top) != os.path.realpath(root):
        return None  # not gitwork's own checkout (an sdist unpacked inside some other repository)
    commit = _git(root, "rev-parse", "HEAD")
    if commit is None:
        return None
    dirty = _git(root, "status", "--porcelain", "--untracked-files=no")
    return commit + ("-dirty" if dirty else "")


class CustomBuildHook(BuildHookInterface):  # type: ignore[type-arg]
    PLUGIN_NAME = "custom"

    def initialize(self, version: str, build_data: dict[str, Any]) -> None:
        if version == "editable":
            return
        commit = commit_of(self.root)
        if commit is None:
            return  # an sdist's build: its own gitwork/_build.py is packaged as it is
        folder = tempfile.mkdtemp(prefix="gitwork-build-")
        self._stamp_folder = folder  # removed by finalize, once the wheel holds the file
        path = os.path.join(folder, "_build.py")
        with open(path, "w") as out:
            out.write('"""Written at build time by hatch_build.py: the commit this package was built from."""\n\n'
                      f"COMMIT = {commit!r}\n")
        build_data.setdefault("force_include", {})[path] = STAMP

    def finalize(self, version: str, build_data: dict[str, Any], artifact_path: str) -> None:
        folder = getattr(self, "_stamp_folder", None)
        if folder is not None:  # each build left a temporary folder behind (49 in /tmp after a day of tests)
            shutil.rmtree(folder, ignore_errors=True)
