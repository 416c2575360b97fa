"""Find a repository and read its config: the one way gitwork locates git's files.

:func:`discover` answers where the git directory, the common directory, the work tree and the
object folder are, which object format the repository uses and the few config keys gitwork reads.
For the ordinary layouts (a work tree with a ``.git`` folder, a linked worktree's ``.git`` file,
owned by the user running gw, config files this module can parse exactly as git does) the answer
is a few ``stat`` calls and file reads away: no process. Anything else (GIT_* variables, a bare
repository, ``includeIf`` directives, continuation lines, reftable, a repository owned by another user)
is asked of git itself (``git rev-parse`` and ``git config``), so the answer is always git's.
"""

from __future__ import annotations

import os
import re

from .errors import NotARepo

_ENV_THAT_CHANGES_DISCOVERY = (
    "GIT_DIR", "GIT_WORK_TREE", "GIT_COMMON_DIR", "GIT_CEILING_DIRECTORIES", "GIT_DISCOVERY_ACROSS_FILESYSTEM",
    "GIT_CONFIG", "GIT_CONFIG_GLOBAL", "GIT_CONFIG_SYSTEM", "GIT_CONFIG_COUNT", "GIT_CONFIG_PARAMETERS",
    "GIT_OBJECT_DIRECTORY", "GIT_ALTERNATE_OBJECT_DIRECTORIES", "GIT_NAMESPACE",
)

# The core.* keys gitwork honours when it writes objects itself (see objects.py), and moves the state
# ref itself (store.py: no hooks path, no reflog for every ref).
CORE_KEYS = ("core.sharedrepository", "core.fsync", "core.fsyncobjectfiles", "core.fsyncmethod",
             "core.loosecompression", "core.compression", "core.hookspath", "core.logallrefupdates")
_CONFIG_PATTERN = (r"^(gitwork\.|core\.(sharedrepository|fsync|fsyncobjectfiles|fsyncmethod|loosecompression|compression"
                   r"|hookspath|logallrefupdates)$)")


class Unusual(Exception):
    """Something this module does not read exactly as git would: ask git."""


class Location:
    """Where a repository's git data lives (a plain class: dataclasses cost start-up time)."""

    __slots__ = ("git_dir", "common_dir", "toplevel", "bare", "objects_dir", "algorithm", "config", "fast")

    def __init__(self, git_dir: str, common_dir: str, toplevel: str | None, bare: bool, objects_dir: str,
                 algorithm: str, config: dict[str, str], fast: bool) -> None:
        self.git_dir, self.common_dir, self.toplevel, self.bare = git_dir, common_dir, toplevel, bare
        self.objects_dir, self.algorithm, self.config = objects_dir, algorithm, config
        # fast: found from the files alone, so refs may be read as files too (git's view is the same).
        self.fast = fast


def _read(path: str) -> str:
    with open(path, encoding="utf-8", newline="") as handle:  # a lone CR is whitespace to git, not a line end
        return handle.read()


def _owned(path: str, uid: int | None) -> bool:
    return uid is None or os.stat(path).st_uid == uid


def find(cwd: str) -> tuple[str, str, str] | None:
    """``(git_dir, common_dir, toplevel)`` for a plain work tree, or ``None`` to ask git."""
    if any(key in os.environ for key in _ENV_THAT_CHANGES_DISCOVERY):
        return None
    here = os.path.abspath(cwd)
    uid = os.geteuid() if hasattr(os, "geteuid") else None
    try:
        device = os.stat(here).st_dev
    except OSError:
        return None
    while True:
        dot = os.path.join(here, ".git")
        try:
            if os.path.isdir(dot):
                git_dir = dot
            elif os.path.isfile(dot):
                text = _read(dot).strip()
                if not text.startswith("gitdir: ") or not _owned(dot, uid):
                    return None
                git_dir = os.path.normpath(os.path.join(here, text[len("gitdir: "):]))
            else:
                if os.path.isfile(os.path.join(here, "HEAD")) and os.path.isdir(os.path.join(here, "objects")):
                    return None  # a bare repository or inside a .git folder: let git decide
                parent = os.path.dirname(here)
                if parent == here or os.stat(parent).st_dev != device:
                    return None  # git stops at a file system boundary: let it say so
                here = parent
                continue
            # git's safe.directory rules (the work tree and the git directory must be ours): let git
            # decide, and explain, whenever either is not.
            if not _owned(here, uid) or not _owned(git_dir, uid):
                return None
            common = git_dir
            commondir = os.path.join(git_dir, "commondir")
            if os.path.isfile(commondir):
                common = os.path.normpath(os.path.join(git_dir, _read(commondir).strip()))
            if not os.path.isfile(os.path.join(git_dir, "HEAD")) or not os.path.isdir(os.path.join(common, "objects")):
                return None
            return git_dir, common, here
        except (OSError, UnicodeDecodeError):
            return None


# --- git config, read as git reads it ---------------------------------------------------------------

_SECTION = re.compile(r'\[([A-Za-z0-9.-]+)(?:[ \t]+"((?:[^"\\\n]|\\[^\n])*)")?\][ \t\r]*(?:[#;].*)?\Z')
_KEY = re.compile(r"([A-Za-z][A-Za-z0-9-]*)[ \t]*(?:=(.*))?\Z")
_SPACE = str.maketrans("\t\n\r", "   ")  # git's isspace in a value: each becomes one space


def _value(raw: str) -> str:
    """A value as git's ``parse_value`` (config.c) returns it, from the text after ``=``.

    Outside quotes, ``#`` or ``;`` starts a comment (``agent = alice#laptop`` is ``alice``), leading
    and trailing whitespace goes, and each whitespace character inside becomes one space; quotes
    keep everything literally; ``\\ \" \n \t \b`` are the only escapes. A backslash at the end
    of the line continues the value on the next one: that, an unknown escape or an unclosed quote
    (an error for git) raises :class:`Unusual`, and git is asked.
    """
    if '"' not in raw and "\\" not in raw:  # the usual case: no quoting at all
        cut = len(raw)
        for mark in "#;":
            at = raw.find(mark)
            if 0 <= at < cut:
                cut = at
        return raw[:cut].translate(_SPACE).strip(" ")
    out: list[str] = []
    quote, space, pos, end = False, 0, 0, len(raw)
    while pos < end:
        ch = raw[pos]
        pos += 1
        if ch in " \t\r" and not quote:
            if out:  # only once the value has a character: leading whitespace goes
                space += 1
            continue
        if not quote and ch in "#;":
            break
        if space:
            out.append(" " * space)
            space = 0
        if ch == "\\":
            if pos >= end:
                raise Unusual("continuation line")
            ch = raw[pos]
            pos += 1
            if ch not in _ESCAPES:
                raise Unusual("unknown escape")
            out.append(_ESCAPES[ch])
        elif ch == '"':
            quote = not quote
        else:
            out.append(ch)
    if quote:
        raise Unusual("unclosed quote")
    return "".join(out)


_ESCAPES = {"t": "\t", "b": "\b", "n": "\n", "\\": "\\", '"': '"'}


_MAX_INCLUDE_DEPTH = 10  # git's own limit; deeper is an error for git


def _include(value: str, origin: str | None, into: dict[str, str], depth: int) -> None:
    """``[include] path = ...`` as git's ``handle_path_include``: the file is read in place, a
    ``~/`` path is under $HOME, a relative one beside the including file, a missing one ignored."""
    if origin is None or depth >= _MAX_INCLUDE_DEPTH:
        raise Unusual("include outside a file, or too deep")
    if value.startswith("%(prefix)"):
        raise Unusual("%(prefix) in an include path")
    if value.startswith("~"):
        home = os.environ.get("HOME")
        if not value.startswith("~/") or not home:
            raise Unusual("~user in an include path")
        value = os.path.join(home, value[2:])
    path = value if os.path.isabs(value) else os.path.join(os.path.dirname(origin), value)
    try:
        text = _read(path)
    except FileNotFoundError:
        return
    # Included files count for the config git reads, not for the repository format check (which
    # reads the repository's config file alone): extensions in them are ignored, as git ignores them.
    parse_config(text, into, repository=False, origin=path, depth=depth + 1)


def parse_config(text: str, into: dict[str, str], *, repository: bool, origin: str | None = None,
                 depth: int = 0) -> None:
    """Add the keys gitwork reads from one config file to ``into`` (later wins, as in git).

    ``repository``: this is the repository's own config (or its ``config.worktree``); git reads
    ``extensions.*`` and ``core.repositoryformatversion`` from there only, so elsewhere they are
    ignored, as git ignores them. ``origin``: the file's path (``include.path`` is relative to it).
    Raises :class:`Unusual` for anything not handled exactly here (``includeIf`` conditions among them).
    """
    if text.startswith("\ufeff"):
        text = text[1:]  # git skips a UTF-8 byte order mark
    section: str | None = ""  # "": before the first section header (a key there is an error for git)
    for raw in text.split("\n"):
        line = raw.lstrip(" \t\r")
        if not line or line[0] in "#;":
            continue
        if line[0] == "[":
            match = _SECTION.match(line)
            if match is None:
                raise Unusual("section header")
            name = match.group(1).lower()
            if name.split(".")[0] == "includeif":
                raise Unusual("includeIf")  # conditions (gitdir:, onbranch:, hasconfig:) are git's to judge
            # A subsection (`[x "y"]`, or the old `[x.y]`): nothing gitwork reads lives there.
            section = None if match.group(2) is not None or "." in name else name
            continue
        match = _KEY.match(line)
        if match is None:
            raise Unusual("not a key = value line")
        if section == "":
            raise Unusual("key before any section")
        key = f"{section}.{match.group(1).lower()}"
        wanted = section is not None and section == "gitwork" or key in CORE_KEYS
        if repository:
            wanted = wanted or section == "extensions" or key in ("core.repositoryformatversion", "core.worktree",
                                                                 "core.bare")
        raw_value = match.group(2)
        if raw_value is None:
            if key == "include.path":
                raise Unusual("include.path without a value")  # an error for git
            if wanted:
                into[key] = "true"  # a key with no "=" is a boolean true for git
            continue
        value = _value(raw_value)  # also for keys gw ignores: a continuation line must not be misread
        if wanted:
            into[key] = value
        elif key == "include.path":
            _include(value, origin, into, depth)


# Extensions git accepts in a version-0 repository; none changes where gw finds refs, config or objects
# (a partial clone's missing objects come through cat-file, which fetches them).
_V0_EXTENSIONS = {"extensions.worktreeconfig", "extensions.partialclone", "extensions.preciousobjects",
                  "extensions.noop"}


def _truthy(value: str | None) -> bool:
    return (value or "").strip().lower() in ("true", "yes", "on", "1")


def config_paths(git_dir: str, common_dir: str) -> list[tuple[str, str]] | None:
    """The config files git reads for the repository, in git's order (a later file wins), each with
    its scope: ``system``, ``global``, ``local`` or ``worktree``; ``None`` when git refuses the
    environment (a ``GIT_CONFIG_NOSYSTEM`` that is no boolean: git dies on it).

    As git's ``do_git_config_sequence``: ``$GIT_CONFIG_SYSTEM`` (else ``/etc/gitconfig``) unless
    ``GIT_CONFIG_NOSYSTEM`` is true; ``$GIT_CONFIG_GLOBAL`` alone when it is set, else
    ``$XDG_CONFIG_HOME/git/config`` (``~/.config/git/config``) and ``~/.gitconfig``; the common
    directory's ``config``; the git directory's ``config.worktree``, which git reads only when
    ``extensions.worktreeConfig`` is on (the caller checks: it is set in the files before it).
    The one list :func:`read_config` reads and the server's writer watches (serve/writer.py): two
    copies of it differed once, and a change the reader saw went unnoticed by the watcher."""
    from .objects import parse_bool

    files: list[tuple[str, str]] = []
    nosystem = os.environ.get("GIT_CONFIG_NOSYSTEM")
    flag = False if nosystem is None else parse_bool(nosystem)
    if flag is None:
        return None
    if not flag:
        files.append((os.environ.get("GIT_CONFIG_SYSTEM", "/etc/gitconfig"), "system"))
    user = os.environ.get("GIT_CONFIG_GLOBAL")
    if user is not None:
        files.append((user, "global"))  # instead of both below (an empty one: no global file at all)
    else:
        home = os.environ.get("HOME")
        xdg = os.environ.get("XDG_CONFIG_HOME") or (os.path.join(home, ".config") if home else None)
        if xdg:
            files.append((os.path.join(xdg, "git", "config"), "global"))
        if home:
            files.append((os.path.join(home, ".gitconfig"), "global"))
    files.append((os.path.join(common_dir, "config"), "local"))
    files.append((os.path.join(git_dir, "config.worktree"), "worktree"))
    return files


def read_config(git_dir: str, common_dir: str) -> dict[str, str] | None:
    """The ``gitwork.*``, ``core.*`` and ``extensions.*`` keys gitwork reads, or ``None`` to ask git."""
    files = config_paths(git_dir, common_dir)
    if files is None:
        return None  # git dies on the environment: let git say so
    values: dict[str, str] = {}
    try:
        for path, scope in files:
            if scope == "worktree" and not _truthy(values.get("extensions.worktreeconfig")):
                continue
            if not path:
                continue  # an empty GIT_CONFIG_GLOBAL / GIT_CONFIG_SYSTEM names no file
            try:
                text = _read(path)
            except FileNotFoundError:
                continue
            # git reads extensions.* and the repository format from the repository's own files only.
            parse_config(text, values, repository=scope in ("local", "worktree"), origin=path)
    except (Unusual, OSError, UnicodeDecodeError, ValueError):
        return None
    version = values.pop("core.repositoryformatversion", "0")
    extensions = {k for k in values if k.startswith("extensions.")}
    if version not in ("0", "1") or (version == "0" and extensions - _V0_EXTENSIONS):
        return None  # git's own rules for repository format versions: let git decide
    if extensions - _V0_EXTENSIONS - {"extensions.objectformat"}:
        return None  # reftable, and whatever git adds later: git decides
    if "core.worktree" in values or _truthy(values.get("core.bare")):
        return None
    return values


# --- discovery -----------------------------------------------------------------------------------------


def _not_a_repo(cwd: str, err: str) -> NotARepo:
    """git's reason in one line, with git's own fix when it gives one (safe.directory)."""
    lines = [line.strip() for line in err.splitlines() if line.strip()]
    first = lines[0].removeprefix("fatal: ") if lines else ""
    if "dubious ownership" in first:
        fix = next((line for line in lines if line.startswith("git config")), None)
        message = f"{first} (git's safe.directory check)"
        if fix:
            message += f"; if you trust it: {fix}"
        return NotARepo(message, git=first)
    return NotARepo(f"not a git repository: {cwd}")


def discover(cwd: str) -> Location:
    """Where the repository around ``cwd`` keeps its files, and the config keys gitwork reads."""
    if not os.path.isdir(cwd):
        raise NotARepo(f"not a git repository: {cwd} does not exist")
    found = find(cwd)
    config = read_config(found[0], found[1]) if found else None
    if found and config is not None:
        git_dir, common_dir, toplevel = found
        algorithm = config.pop("extensions.objectformat", "sha1").lower()
        for key in [k for k in config if k.startswith("extensions.") or k in ("core.bare", "core.worktree")]:
            del config[key]
        return Location(git_dir, common_dir, toplevel, False, os.path.join(common_dir, "objects"), algorithm,
                        config, True)
    return _ask_git(cwd)


def _ask_git(cwd: str) -> Location:
    from . import gitcmd

    # --show-cdup last: outside a work tree it prints no line at all.
    probe = gitcmd.run(
        ["rev-parse", "--absolute-git-dir", "--git-common-dir", "--is-bare-repository", "--is-inside-work-tree",
         "--show-object-format", "--git-path", "objects", "--show-cdup"],
        cwd=cwd, check=False,
    )
    if probe.returncode != 0:
        raise _not_a_repo(cwd, probe.err)
    lines = probe.out.split("\n")
    git_dir, bare, inside = lines[0], lines[2] == "true", lines[3] == "true"
    common_dir = os.path.normpath(os.path.join(cwd, lines[1]))
    algorithm = lines[4].strip() or "sha1"
    objects_dir = os.path.normpath(os.path.join(cwd, lines[5]))
    toplevel = os.path.normpath(os.path.join(cwd, lines[6])) if inside and len(lines) > 6 else None
    conf = gitcmd.run(["config", "-z", "--get-regexp", _CONFIG_PATTERN], cwd=cwd, check=False)
    config: dict[str, str] = {}
    for entry in conf.out.split("\0"):
        if entry:
            key, newline, value = entry.partition("\n")
            config[key.lower()] = value if newline else "true"  # no "=": a boolean true
    return Location(git_dir, common_dir, toplevel, bare, objects_dir, algorithm, config, False)


# --- refs and shallow boundaries, from files -------------------------------------------------------------


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


def read_shallow(common_dir: str) -> frozenset[str]:
    """The commits git treats as having no parents (``<common dir>/shallow``; empty when not shallow)."""
    try:
        with open(os.path.join(common_dir, "shallow"), encoding="ascii") as handle:
            return frozenset(line.strip() for line in handle if line.strip())
    except FileNotFoundError:
        return frozenset()


def has_replace_refs(common_dir: str) -> bool:
    """Whether git may read some object through a replacement (``git replace``): then every object
    read must go through git, which applies them (and ``core.useReplaceRefs``) itself."""
    if "GIT_NO_REPLACE_OBJECTS" in os.environ:
        return False
    if "GIT_REPLACE_REF_BASE" in os.environ:
        return True
    try:
        if os.listdir(os.path.join(common_dir, "refs", "replace")):
            return True
    except OSError:
        pass
    try:
        with open(os.path.join(common_dir, "packed-refs"), "rb") as handle:
            return b" refs/replace/" in handle.read()
    except FileNotFoundError:
        return False
    except OSError:
        return True
