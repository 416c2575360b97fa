"""Path leases: the globs an item declares it will change, and the rules about them that need no I/O.

An item's ``paths`` (item.yaml) are git-style globs relative to the repository root: ``*`` and ``?``
within one path segment, ``[...]`` a character class, ``**`` any number of segments; a glob with no
wildcard names a file or a whole folder (``src/api`` covers ``src/api/x.py``). Claiming the item copies
them into its lease; the live leases' globs are listed in the state's ``paths.yaml`` (item -> globs) so
a claim reads one file, not every lease (docs/leases.md, "Path leases").

Overlap of two globs is decided by their *literal prefixes* (the text before the first wildcard, the
whole glob when it has none): every path a glob matches starts with its prefix, so two globs whose
prefixes are not one a prefix of the other can match no common path. The rule is sound but errs on the
side of "overlap" (``src/a*.py`` and ``src/a*.md`` overlap by it): a refusal too many, never a shared path
missed.

Standard library only, no regex compiled at import: it sits on the claim path and in the code remote's hook.
"""

from __future__ import annotations

import re

from .errors import Invalid
from .lazyre import Lazy

MAX_GLOBS = 32  # globs per item
MAX_GLOB = 200  # characters per glob
WILDCARDS = "*?["
# Segments made of these only (plus the wildcards); no spaces, quotes, backslashes or control characters.
_ALLOWED = Lazy(r"[A-Za-z0-9_.+@=,%~*?!^\[\]-]+\Z")
PATHS_FILE = "paths.yaml"


def glob_problem(glob: object) -> str | None:
    """What is wrong with ``glob`` as a path lease, in words; ``None`` when it is sound."""
    if not isinstance(glob, str):
        return f"a path glob must be text, not {type(glob).__name__}"
    shown = repr(glob[:60])
    if not glob:
        return "a path glob must not be empty"
    if len(glob) > MAX_GLOB:
        return f"path glob {shown}... is longer than {MAX_GLOB} characters"
    if glob.startswith("/"):
        return f"path glob {shown} must be relative to the repository root (no leading /)"
    for segment in glob.split("/"):
        if segment in ("", ".", ".."):
            return f"path glob {shown} has an empty, . or .. segment"
        if not _ALLOWED.match(segment):
            return f"path glob {shown}: letters, digits, _.+@=,%~- and the wildcards * ? [...] only"
        if "**" in segment and segment != "**":
            return f"path glob {shown}: ** must be a whole segment (a/**/b)"
        if not _classes_closed(segment):
            return f"path glob {shown} has an unclosed or empty [ ] class"
    return None


def _classes_closed(segment: str) -> bool:
    depth_open = None
    for index, char in enumerate(segment):
        if depth_open is None and char == "[":
            depth_open = index
        elif depth_open is not None and char == "]":
            if index == depth_open + 1 or (index == depth_open + 2 and segment[depth_open + 1] in "!^"):
                return False  # empty class
            depth_open = None
        elif depth_open is None and char == "]":
            return False
    return depth_open is None


def check_globs(value: object, field: str = "paths") -> list[str]:
    """The globs of a command document or an item file, sorted and unique; Invalid (exit 5) if any is bad."""
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list):
        raise Invalid(f"{field} must be a list of path globs")
    for glob in value:
        found = glob_problem(glob)
        if found:
            raise Invalid(found, field=field)
    globs = sorted(set(value))
    if len(globs) > MAX_GLOBS:
        raise Invalid(f"{field}: at most {MAX_GLOBS} path globs per item, not {len(globs)}", field=field)
    return globs


def sound_globs(value: object) -> bool:
    """The check of ``Item.paths`` and ``Lease.paths`` as stored (model.py)."""
    return (isinstance(value, list) and len(value) <= MAX_GLOBS
            and all(glob_problem(g) is None for g in value))


def prefix(glob: str) -> str:
    """The literal text every path ``glob`` matches starts with."""
    cut = min((i for i in (glob.find(c) for c in WILDCARDS) if i >= 0), default=len(glob))
    return glob[:cut]


def overlap(a: str, b: str) -> bool:
    """``a`` and ``b`` may match a common path (sound, errs on "overlap"; see the module doc)."""
    pa, pb = prefix(a), prefix(b)
    return pa.startswith(pb) or pb.startswith(pa)


def overlaps(mine: list[str], theirs: list[str]) -> list[tuple[str, str]]:
    """Every pair (one of ``mine``, one of ``theirs``) that overlaps."""
    return [(a, b) for a in mine for b in theirs if overlap(a, b)]


_COMPILED: dict[str, re.Pattern[str]] = {}


def _regex(glob: str) -> re.Pattern[str]:
    found = _COMPILED.get(glob)
    if found is not None:
        return found
    parts: list[str] = []
    segments = glob.split("/")
    for index, segment in enumerate(segments):
        last = index == len(segments) - 1
        if segment == "**":
            parts.append(".*" if last else "(?:[^/]+/)*")
            continue
        out, i = [], 0
        while i < len(segment):
            char = segment[i]
            if char == "*":
                out.append("[^/]*")
            elif char == "?":
                out.append("[^/]")
            elif char == "[":
                end = segment.index("]", i + 2 if segment[i + 1:i + 2] in ("!", "^") else i + 1)
                body = segment[i + 1:end]
                if body[:1] in ("!", "^"):
                    body = "^" + body[1:]
                out.append("[" + body.replace("\\", "\\\\") + "]")
                i = end
            else:
                out.append(re.escape(char))
            i += 1
        parts.append("".join(out) + ("" if last else "/"))
    # A glob names a file or a folder: whatever is under a match matches too (git's pathspec rule).
    pattern = re.compile("".join(parts) + "(?:/.*)?\\Z", re.DOTALL)
    _COMPILED[glob] = pattern
    return pattern


def matches(glob: str, path: str) -> bool:
    """``path`` (repository-relative, ``/``-separated) is covered by ``glob``."""
    return _regex(glob).match(path) is not None
