"""``gw config get|set|list``: the settings in force, where each comes from, and changing one.

As git does: ``set`` writes this clone's git config (``gitwork.<key>``, ``--local``, the default); with
``--shared`` it writes the tracked ``.workplane`` at the top of the working tree (commit it to share it).
Precedence stays ``config.py``'s (defaults < ``.workplane`` < git config < ``GW_*``), so ``get`` names
the source that won. A new value is checked by loading the settings as they would be after the write
(every rule of ``config.load``, the one-role rule included) before anything is written: a refusal
writes nothing. The ``.workplane`` is edited as text (the key's line, or its block, replaced; else one
line appended): its comments and other keys stay as they are, and no YAML emitter is imported.

Standard library and ``config``/``gitdir``/``gitcmd`` only: the verb stays on the fast path.
"""

from __future__ import annotations

import json
import os
import re

from .config import ARBITER, DEFAULTS, load
from .errors import Invalid, UsageError

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

    from .gitdir import Location

_LISTS = ("admins", "agents", "people", "gates")
_MAPPINGS = ("sessions",)  # set by editing .workplane: a mapping is no one-word value


def _where(path: str | None) -> Location:
    from .gitdir import discover

    return discover(os.path.abspath(path or os.getcwd()))


def _gitwork_config(where: Location) -> dict[str, str]:
    return {k: v for k, v in where.config.items() if k.startswith("gitwork.")}


def key_name(key: str) -> str:
    """The setting a key names (dashes or underscores, any case, as ``.workplane`` and git config take
    them); an unknown key is exit 5 naming the known ones."""
    name = key.strip().replace("-", "_").lower()
    for known in DEFAULTS:
        if known.replace("_", "") == name.replace("_", ""):
            return known
    raise Invalid(f"unknown setting {key[:40]!r}: one of {', '.join(DEFAULTS)}")


def _shown(value: Any) -> Any:
    return list(value) if isinstance(value, tuple) else value


def entries(path: str | None) -> list[dict[str, Any]]:
    """Every setting: its value in force, where it comes from, and whether the arbiter decides with its own."""
    where = _where(path)
    origins: dict[str, str] = {}
    settings = load(where.toplevel, _gitwork_config(where), origins)
    return [{"key": name, "value": _shown(getattr(settings, name)), "source": origins.get(name, "default"),
             "enforced_by_arbiter": name in ARBITER} for name in DEFAULTS]


def get(path: str | None, key: str) -> dict[str, Any]:
    name = key_name(key)
    return next(e for e in entries(path) if e["key"] == name)


def _yaml_value(name: str, value: str) -> str:
    """The command line's VALUE as a YAML flow value (JSON is YAML): lists from ``a,b``, the rest as text."""
    if name in _LISTS:
        text = json.dumps([v.strip() for v in value.split(",") if v.strip()], ensure_ascii=False)
    else:
        text = json.dumps(value, ensure_ascii=False)
    # The breaks JSON leaves raw but YAML 1.1 readers and str.splitlines take as the end of a line.
    return re.sub("[\x85\u2028\u2029]", lambda m: f"\\u{ord(m.group()):04x}", text)


def edited(text: str, name: str, line: str) -> str:
    """``text`` (a ``.workplane``) with ``name``'s top-level entry (any spelling, its block of indented or
    ``- `` lines included) replaced by ``line``, or ``line`` appended when there is none."""
    spellings = "|".join(re.escape(s) for s in {name, name.replace("_", "-")})
    lines = re.findall(r"[^\n]*\n|[^\n]+\Z", text)  # "\n" only: not splitlines' U+2028 or \x85
    head = re.compile(rf"^(?:{spellings})\s*:")
    for number, current in enumerate(lines):
        if head.match(current):
            end = number + 1
            while end < len(lines) and lines[end][:1] in (" ", "\t", "-") and lines[end].strip():
                end += 1
            return "".join(lines[:number]) + line + "".join(lines[end:])
    if text and not text.endswith("\n"):
        text += "\n"
    return text + line


def _usable(settings: Any) -> None:
    """Refuse settings every claim would then refuse: a default lease no longer than the clock margin
    is granted already over by its holder's view (model.usable_ttl, exit 5 at each claim without --ttl)."""
    if settings.default_ttl <= settings.clock_margin:
        raise Invalid(f"default_ttl ({settings.default_ttl}s) must be longer than clock_margin "
                      f"({settings.clock_margin}s): every claim without --ttl would be refused as unusable")


def set_value(path: str | None, key: str, value: str, shared: bool = False) -> dict[str, Any]:
    """Write ``key = value`` to this clone's git config, or with ``shared`` to ``.workplane``, once the
    settings it leaves are known to load; what is in force afterwards, and what wrote it."""
    name = key_name(key)
    if name in _MAPPINGS:
        raise Invalid(f"{name} is a mapping: edit it in .workplane (gitwork/sessions/rules.py describes it)")
    if "\n" in value or "\r" in value or "\0" in value:
        raise Invalid(f"a value for {name} is one line")
    try:  # a byte that is no UTF-8 on the command line reaches Python as a lone surrogate
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise Invalid(f"a value for {name} is not UTF-8 text") from None
    if name in ("admins", "agents", "people"):  # names of identities: each passes the identity rule
        from .ids import check_identity

        for who in value.split(","):
            if who.strip():
                check_identity(who.strip(), f"{name} entry")
    where = _where(path)
    config = _gitwork_config(where)
    if shared:
        if not where.toplevel:
            raise UsageError("no working tree here, so no .workplane: set it with --local (git config)")
        file = os.path.join(where.toplevel, ".workplane")
        try:
            with open(file, encoding="utf-8") as handle:
                text = handle.read()
        except FileNotFoundError:
            text = ""
        except (OSError, UnicodeDecodeError) as exc:
            raise Invalid(f"cannot read .workplane: {exc}") from exc
        new = edited(text, name, f"{name}: {_yaml_value(name, value)}\n")
        _usable(load(where.toplevel, config, workplane=new.encode("utf-8")))  # refused here: nothing written
        from .fsutil import write_atomic

        write_atomic(file, new, fsync=True)
        wrote = ".workplane"
    else:
        git_key = "gitwork." + name.split("_")[0] + "".join(w.title() for w in name.split("_")[1:])
        trial = {k: v for k, v in config.items() if key_name_or_none(k) != name}
        trial[git_key.lower()] = value
        _usable(load(where.toplevel, trial))  # refused here: nothing written
        for old in [k for k in config if key_name_or_none(k) == name and k != git_key.lower()]:
            write_git_config(where.git_dir, where.common_dir, where.toplevel, "--unset-all", old)  # one spelling, not two
        write_git_config(where.git_dir, where.common_dir, where.toplevel, git_key, value)
        wrote = f"git config {git_key}"
    now = get(path, name)
    return {**now, "wrote": wrote}


def write_git_config(git_dir: str, common_dir: str, toplevel: str | None, *args: str) -> None:
    """``git config ARGS`` in the repository (``--git-dir GIT_DIR``). A ``config.lock`` that a ``git config`` killed outright left
    (kill -9 of a ``gw config set`` with its process group) failed every later write until a person
    removed it: removed by the stale-lock rule (``stalelocks.py``: older than ``STALE_AFTER``, no git of
    the repository running), said on stderr, and the write tried once more; a young one is refused."""
    from . import gitcmd
    from .errors import GitFailed

    command = ["--git-dir", git_dir, "config", *args]
    try:
        gitcmd.run(command)
    except GitFailed as failed:
        from .stalelocks import sweep_and_say

        if "could not lock config file" not in str(failed.details.get("stderr", "")) or \
                not sweep_and_say(common_dir, ["config"], under="config", work_tree=toplevel):
            raise
        gitcmd.run(command)


def key_name_or_none(git_key: str) -> str | None:
    try:
        return key_name(git_key.removeprefix("gitwork."))
    except Invalid:
        return None
