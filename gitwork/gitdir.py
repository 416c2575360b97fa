"""Find a repository's git directories and read its config without starting git, when that is safe.

Starting ``git rev-parse`` and ``git config`` costs two process starts on every command. For the
ordinary layouts (a work tree with a ``.git`` folder, a linked worktree's ``.git`` file) the answer is
a few ``stat`` calls away, and the few config keys gitwork reads are in plain files. Anything unusual
(GIT_* variables, a bare repository, ``include`` directives, reftable, a repository owned by another
user) returns ``None`` and the caller asks git itself, so the answer is always git's answer.
"""

from __future__ import annotations

import os

_ENV_THAT_CHANGES_DISCOVERY = (
    "GIT_DIR", "GIT_WORK_TREE", "GIT_COMMON_DIR", "GIT_CEILING_DIRECTORIES", "GIT_DISCOVERY_ACROSS_FILESYSTEM",
    "GIT_CONFIG", "GIT_CONFIG_GLOBAL", "GIT_CONFIG_SYSTEM", "GIT_CONFIG_COUNT", "GIT_CONFIG_PARAMETERS",
    "GIT_OBJECT_DIRECTORY", "GIT_ALTERNATE_OBJECT_DIRECTORIES", "GIT_NAMESPACE",
)


class Unusual(Exception):
    """Something this module does not handle: ask git."""


def _read(path: str) -> str:
    with open(path, encoding="utf-8") as handle:
        return handle.read()


def find(cwd: str) -> tuple[str, str, str] | None:
    """``(git_dir, common_dir, toplevel)`` for a plain work tree, or ``None`` to ask git."""
    if any(key in os.environ for key in _ENV_THAT_CHANGES_DISCOVERY):
        return None
    here = os.path.abspath(cwd)
    uid = os.getuid() if hasattr(os, "getuid") else None
    while True:
        dot = os.path.join(here, ".git")
        try:
            if os.path.isdir(dot):
                git_dir = dot
            elif os.path.isfile(dot):
                text = _read(dot).strip()
                if not text.startswith("gitdir: "):
                    return None
                git_dir = os.path.normpath(os.path.join(here, text[len("gitdir: "):]))
            else:
                if os.path.isfile(os.path.join(here, "HEAD")) and os.path.isdir(os.path.join(here, "objects")):
                    return None  # a bare repository or inside a .git folder: let git decide
                parent = os.path.dirname(here)
                if parent == here:
                    return None
                here = parent
                continue
            if uid is not None and os.stat(here).st_uid != uid:
                return None  # git's safe.directory rules apply: let git decide
            common = git_dir
            commondir = os.path.join(git_dir, "commondir")
            if os.path.isfile(commondir):
                common = os.path.normpath(os.path.join(git_dir, _read(commondir).strip()))
            if not os.path.isfile(os.path.join(git_dir, "HEAD")) or not os.path.isdir(os.path.join(common, "objects")):
                return None
            return git_dir, common, here
        except OSError:
            return None


def _parse_config(text: str, wanted: tuple[str, ...], into: dict[str, str]) -> None:
    """Read ``section.key`` values (sections without subsections only) from git config text."""
    section = ""
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line[0] in "#;":
            continue
        if line.endswith("\\"):
            raise Unusual("line continuation")
        if line.startswith("["):
            header = line[1 : line.index("]")] if "]" in line else ""
            if '"' in header or "." in header:
                section = header.split()[0].lower() if header else ""
                if section in ("include", "includeif"):
                    raise Unusual("include")
                section = "\0"  # a subsection: nothing gitwork reads lives there
                continue
            section = header.strip().lower()
            if section in ("include", "includeif"):
                raise Unusual("include")
            rest = line[line.index("]") + 1 :].strip()
            if rest and rest[0] not in "#;":
                raise Unusual("key on a section line")
            continue
        if section not in wanted:
            continue
        key, eq, value = line.partition("=")
        key = key.strip().lower()
        value = value.strip() if eq else "true"
        if '"' in value or "\\" in value:
            raise Unusual("quoted value")
        for mark in (" #", " ;", "\t#", "\t;"):
            if mark in value:
                value = value[: value.index(mark)].rstrip()
        into[f"{section}.{key}"] = value


def read_config(git_dir: str, common_dir: str) -> dict[str, str] | None:
    """The ``gitwork.*`` and ``extensions.*`` keys, later files winning, or ``None`` to ask git."""
    home = os.environ.get("HOME", "")
    xdg = os.environ.get("XDG_CONFIG_HOME") or os.path.join(home, ".config")
    files = []
    if not os.environ.get("GIT_CONFIG_NOSYSTEM"):
        files.append("/etc/gitconfig")
    files += [os.path.join(xdg, "git", "config"), os.path.join(home, ".gitconfig"), os.path.join(common_dir, "config")]
    values: dict[str, str] = {}
    try:
        for path in files:
            try:
                text = _read(path)
            except FileNotFoundError:
                continue
            _parse_config(text, ("gitwork", "extensions"), values)
        if values.get("extensions.worktreeconfig", "false").lower() in ("true", "yes", "on", "1"):
            worktree = os.path.join(git_dir, "config.worktree")
            if os.path.exists(worktree):
                _parse_config(_read(worktree), ("gitwork", "extensions"), values)
    except (Unusual, OSError, UnicodeDecodeError, ValueError):
        return None
    if "extensions.refstorage" in values:
        return None  # reftable: refs are not files
    return values


def read_ref(common_dir: str, ref: str) -> str | None | bool:
    """A ref's object id from the files backend; ``None`` if absent; ``False`` to ask git."""
    try:
        with open(os.path.join(common_dir, *ref.split("/")), encoding="ascii") as handle:
            value = handle.read().strip()
        if value.startswith("ref:") or len(value) not in (40, 64):
            return False
        return value
    except FileNotFoundError:
        pass
    except (OSError, UnicodeDecodeError):
        return False
    try:
        with open(os.path.join(common_dir, "packed-refs"), encoding="utf-8") as handle:
            suffix = " " + ref
            for line in handle:
                if line.rstrip("\n").endswith(suffix) and not line.startswith(("#", "^")):
                    return line.split(" ", 1)[0]
    except FileNotFoundError:
        return None
    except (OSError, UnicodeDecodeError):
        return False
    return None
