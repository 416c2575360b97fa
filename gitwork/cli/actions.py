"""Running one verb: :func:`invoke` opens the work plane, calls the verb's plain function
(``cli/commands/<topic>.py``) and maps any error to its exit code; shared by typer and the fast path.

Every mutation builds a command document and hands it to :meth:`Workplane.submit`; nothing here
touches git or the state directly. The verb functions print their result and return nothing; errors
propagate as :class:`GwError`.
"""

from __future__ import annotations

import os
import sys

from ..errors import ExitCode, GwError
from . import output

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, Callable

    from ..workplane import Workplane


def invoke(func: Callable[..., Any], *, as_json: bool, path: str | None = None, agent: str | None = None,
           **kwargs: Any) -> int:
    """Open the work plane, run one action, map any error to its exit code."""
    from ..workplane import Workplane

    wp = None
    index = sys.modules.get("gitwork.index")
    if index is not None:  # what an earlier read in this process left out is not this command's to name
        index.NOTED.clear()
    try:
        if agent is None and "GW_AGENT" in os.environ and not os.environ["GW_AGENT"].strip():
            # Set but empty (`GW_AGENT= gw ...`, an unset variable expanded): an error, as `--as ""` is,
            # never silently the default identity (docs/exit-codes.md, 5).
            from ..ids import check_identity

            check_identity(os.environ["GW_AGENT"], "GW_AGENT")
        wp = Workplane(path, agent=agent)
        func(wp, as_json=as_json, **named(wp, kwargs))
        return int(ExitCode.OK)
    except Failed as failed:  # already reported (several ids: each one's outcome printed)
        return failed.code
    except GwError as error:
        if wp is not None and wp.settings.agent is None:
            _default_identity_hint(error)
        return output.fail(error, as_json)
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        return int(ExitCode.OK)
    except ModuleNotFoundError as exc:  # an optional extra not installed: name it, never an internal error
        missing = missing_extra(exc)
        if missing is None:
            return output.internal(exc, as_json)
        return output.fail(missing, as_json)
    except Exception as exc:  # a bug: still one line and a documented code
        if "GW_TRACEBACK" in os.environ:
            raise
        return output.internal(exc, as_json)
    finally:
        _name_left_out()
        if wp is not None:
            wp.close()


# The options that name items: an imported item's id in its source (bd-a2, #12) stands for it (aliases.py).
ITEM_OPTIONS = ("item", "dep", "add_dep", "remove_dep", "parent", "duplicate_of")


def named(wp: Workplane, kwargs: dict[str, Any]) -> dict[str, Any]:
    """``kwargs`` with each item named by its id in a source replaced by its gitwork id (nothing is read
    unless a value is not a ``w-`` id)."""
    from ..ids import PREFIX

    def plain(value: Any) -> bool:
        return not isinstance(value, str) or value.strip().lower().startswith(PREFIX)

    out = kwargs
    for key in ITEM_OPTIONS:
        value = kwargs.get(key)
        if value is None or (plain(value) if not isinstance(value, list) else all(plain(v) for v in value)):
            continue
        from ..aliases import resolve

        snapshot = wp.context().snapshot
        out = dict(out) if out is kwargs else out
        out[key] = [resolve(snapshot, v) if isinstance(v, str) else v for v in value] if isinstance(value, list) \
            else resolve(snapshot, value)
    return out


# The optional extras (pyproject.toml), by the module each brings, and the code their absence is
# documented with (docs/exit-codes.md: 5 for the sessions' schemas, 2 for the other faces).
EXTRAS = {"fastjsonschema": ("sessions", "INVALID"), "fastapi": ("serve", "USAGE"), "uvicorn": ("serve", "USAGE"),
          "starlette": ("serve", "USAGE"), "mcp": ("mcp", "USAGE"), "jq": ("jq", "USAGE")}


def missing_extra(exc: ModuleNotFoundError) -> GwError | None:
    """The refusal for a module of an optional extra that is not installed, or ``None`` (a real bug)."""
    from ..errors import Invalid, UsageError

    name = (exc.name or "").partition(".")[0]
    if name not in EXTRAS:
        return None
    extra, code = EXTRAS[name]
    kind = Invalid if code == "INVALID" else UsageError
    return kind(f"this command needs the optional {extra} extra (module {name} is missing): "
                f"pip install 'gitwork[{extra}]'", extra=extra, module=name)


def _default_identity_hint(error: GwError) -> None:
    """A refusal naming who you are and someone else as the holder, while you run under the default
    identity (``user@host/s<session>``): a new terminal is a new identity, so say how to be the holder."""
    holder, who = error.details.get("holder"), error.details.get("who")
    if holder and who and holder != who:
        error.message += (f"; you run under the default identity, new in each terminal: if you are {holder}, "
                          f"export GW_AGENT={holder} (or pass --as {holder})")
        error.args = (error.message,)


def _name_left_out() -> None:
    """Name, on stderr, each corrupt item a whole-state read (list, ready, claim --next, inbox) left out.

    One bad file must not take every listing down: the sound items are listed (exit 0), and each bad
    one is named with its file so a person can repair it; commands that need the bad item exit 8.
    """
    index = sys.modules.get("gitwork.index")  # nothing to say unless a summary was read
    if index is None or not index.NOTED:
        return
    for _item_id, message in sorted(index.NOTED.items()):
        output.info(f"gw: corrupt: {message} (left out; repair or remove that file)")
    index.NOTED.clear()


def done_line(applied: Any, as_json: bool, text: str | None = None, data: str | None = None) -> None:
    for entry in applied.result.get("refused") or ():  # offline commands the arbiter's replay refused
        output.info(f"gw: refused on replay: {entry.get('command_id') or entry.get('commit')} "
                    f"({entry.get('op')} {entry.get('item') or ''}): {entry.get('error')}: {entry.get('message')}")
    if as_json:
        output.emit_json(applied.to_json())
        return
    if data is not None:
        output.line(data)
    output.info(text or applied.summary)


def submit(wp: Workplane, as_json: bool, op: str, data_key: str | None = None, offline: bool = False,
           **args: Any) -> Any:
    applied = wp.do(op, offline=offline, **args)
    data = str(applied.result.get(data_key)) if data_key else None
    done_line(applied, as_json, data=data)
    return applied


def _distinct(wp: Workplane, items: list[str]) -> list[str]:
    """The ids each naming another item (first mention kept): ``gw release A A`` or an id and its own
    prefix is one command, not a second that fails because the first did its job. An id that does not
    resolve is kept, for its command to report."""
    seen: set[str] = set()
    kept: list[str] = []
    for item in items:
        try:
            key = wp.resolve(item)
        except GwError:
            key = item
        if key not in seen:
            seen.add(key)
            kept.append(item)
    return kept


class Failed(Exception):
    """Exit with ``code``: the failure has been reported already (see :func:`each`)."""

    def __init__(self, code: int) -> None:
        super().__init__(code)
        self.code = code


def each(wp: Workplane, as_json: bool, items: list[str], one: Callable[[str], None]) -> None:
    """Run ``one(item)`` for each of several ids, one command each, reporting every outcome.

    One id: exactly the single command (its errors propagate as usual). Several: each distinct item
    (an id repeated, or given again by a prefix, counts once) is tried in
    order whatever happened to the ones before; with ``--json`` stdout holds one array, one result or
    error object per id, in order; the exit code is the first failure's (0 if none failed).
    """
    if len(items) == 1:
        one(items[0])
        return
    items = _distinct(wp, items)  # still several ids: --json prints an array, however many are left
    import contextlib
    import io
    import json

    results: list[Any] = []
    first = 0
    for item in items:
        captured = io.StringIO()
        try:
            with contextlib.redirect_stdout(captured if as_json else sys.stdout):
                one(item)
            if as_json:
                results.append(json.loads(captured.getvalue()))
        except GwError as error:
            first = first or int(error.code)
            output.info(f"gw: {error.kind}: {item}: {error.message}")
            if as_json:
                results.append({"ok": False, **error.to_json(), "argument": item})
    if as_json:
        output.emit_json(results)
    if first:
        raise Failed(first)
