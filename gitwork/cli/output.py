"""Printing for the CLI: data on stdout, diagnostics on stderr, JSON on request, colour only on a tty.

rich is imported only when a table goes to a terminal, so piped output and ``--json`` stay cheap.
NO_COLOR is honoured (rich reads it too; plain output never has colour).
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Sequence

from ..errors import ExitCode, GwError

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any


# Output goes into a pager on a terminal (cli/pager.py): laid out for the terminal, this wide (0: not
# paged), colours kept (less -R).
PAGED = 0


def width() -> int:
    """The columns text for a person may use: the pager's, else ``COLUMNS``, else the terminal's, else 80
    (piped); never under 40."""
    if PAGED:
        return PAGED
    try:
        columns = int(os.environ.get("COLUMNS", ""))
    except ValueError:
        columns = 0
    if columns <= 0:
        try:
            columns = os.get_terminal_size(sys.stdout.fileno()).columns if sys.stdout.isatty() else 80
        except (OSError, ValueError, AttributeError):
            columns = 80
    return max(40, columns)


def _tty() -> bool:
    return bool(PAGED) or (sys.stdout.isatty() and os.environ.get("TERM") != "dumb")


def tty() -> bool:
    """Whether :func:`table` draws for a terminal (else it prints tab-separated lines)."""
    return _tty()


# ``--json=FIELDS`` (parsed in main.py): keep only these keys of each printed object, in this order, a
# missing one as null; ``ok`` stays on a single result, and an error object is printed whole.
FIELDS: list[str] | None = None


def select(doc: Any) -> Any:
    """``doc`` cut down to :data:`FIELDS` (unchanged when no fields were asked for)."""
    if FIELDS is None:
        return doc
    if isinstance(doc, list):  # a listing, or several ids' results (each kept as a single result is)
        return [select(row) for row in doc]
    if isinstance(doc, dict) and doc.get("ok") is False:
        return doc
    if isinstance(doc, dict) and "ok" in doc:
        return {"ok": doc["ok"], **pick(doc)}
    return pick(doc)


def pick(row: Any) -> Any:
    return {key: row.get(key) for key in FIELDS} if FIELDS is not None and isinstance(row, dict) else row


def emit_json(doc: Any) -> None:
    """Print one JSON value (the convention: docs/exit-codes.md, "Output with --json").

    An object is indented; an array prints one compact element per line (json's C encoder only runs
    without ``indent``, and long listings print ~5x faster this way). Layout is for people reading it;
    the contract is one JSON value on stdout.
    """
    doc = select(doc)
    if isinstance(doc, list):
        sys.stdout.write(json_array(doc) + "\n")
        return
    sys.stdout.write(json.dumps(doc, ensure_ascii=False, indent=2, sort_keys=False) + "\n")


def json_array(records: list[Any]) -> str:
    """A JSON array with one compact element per line."""
    if not records:
        return "[]"
    return "[\n" + ",\n".join(json.dumps(r, ensure_ascii=False) for r in records) + "\n]"


def info(message: str) -> None:
    """A diagnostic line for people; never part of the data."""
    sys.stderr.write(message + "\n")


def line(text: str) -> None:
    sys.stdout.write(text + "\n")


def table(headers: Sequence[str], rows: Sequence[Sequence[Any]], *, title: str | None = None,
          colours: dict[int, dict[str, str]] | None = None) -> None:
    """Rows as a rich table on a terminal (``colours``: column -> value -> style, semantic colour; none with
    NO_COLOR), else as tab-separated lines (no colour, ever)."""
    if _tty() and rows:
        from rich.console import Console
        from rich.table import Table
        from rich.text import Text

        view = Table(title=title, header_style="bold", box=None, pad_edge=False)
        for header in headers:
            view.add_column(header, overflow="fold")
        styles = colours or {}
        for row in rows:
            cells = ["" if v is None else str(v) for v in row]
            view.add_row(*(Text(cell, style=styles[n].get(cell, "")) if n in styles else cell
                           for n, cell in enumerate(cells)))
        Console(no_color=bool(os.environ.get("NO_COLOR")) or None, force_terminal=bool(PAGED) or None,
                width=PAGED or None).print(view)
        return
    # One write per 4,096 rows, not one per row: a full listing at 100,000 items is 75,000 lines.
    for start in range(0, len(rows), 4096):
        sys.stdout.write("".join("\t".join("" if v is None else str(v) for v in row) + "\n"
                                 for row in rows[start:start + 4096]))


def lines(texts: list[str]) -> None:
    """Lines already formatted (``table``'s tab-separated form), in writes of 8,192 lines."""
    for start in range(0, len(texts), 8192):
        part = texts[start:start + 8192]
        sys.stdout.write("\n".join(part) + "\n")


def fail(error: GwError, as_json: bool) -> int:
    if as_json:
        emit_json({"ok": False, **error.to_json()})
    info(f"gw: {error.kind}: {error.message}")
    return int(error.code)


def internal(exc: BaseException, as_json: bool) -> int:
    message = f"{type(exc).__name__}: {exc}".splitlines()[0]
    if as_json:
        emit_json({"ok": False, "error": "internal", "code": int(ExitCode.INTERNAL), "message": message})
    info(f"gw: internal error: {message}")
    return int(ExitCode.INTERNAL)
