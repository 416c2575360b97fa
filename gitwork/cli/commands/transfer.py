"""Transfer: ``apply`` (one document, or several as one batch), ``import``, ``export``, ``shadow add|report``.

The work is the library's (``gitwork/importers``, the ``batch``, ``import`` and ``shadow-report`` ops);
these functions read files, submit documents and print.
"""

from __future__ import annotations

import re
import sys

from ...errors import GwError, Invalid, UsageError
from .. import output
from ..actions import done_line

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

    from ...workplane import Workplane

MAX_APPLY_BYTES = 64 * 1024 * 1024  # several documents; each is held to codec's 1 MiB on its own
_YAML_SEPARATOR = re.compile(r"^---[ \t]*(?:#.*)?$", re.M)


def _read(source: str) -> str:
    from ...importers.source import read_text

    return read_text(source, MAX_APPLY_BYTES)


def documents(text: str) -> list[tuple[int, Any]]:
    """``(line, document)`` for each document of ``text``: one JSON or YAML document, JSON lines (one
    object per line), or YAML documents separated by ``---`` lines."""
    from ...codec import load_input_document

    stripped = text.strip()
    if stripped.startswith("{"):
        import json

        try:
            json.loads(stripped)
            return [(1, load_input_document(text))]
        except ValueError:
            pass  # not one JSON value: JSON lines, each its own document
        except RecursionError:
            return [(1, load_input_document(text))]  # the loader says why, within its bounds
        out = []
        for number, line in enumerate(text.split("\n"), 1):
            if line.strip():
                out.append((number, _one(load_input_document, line, number)))
        return out
    parts: list[tuple[int, str]] = []
    start = 0
    first_line = 1
    for match in _YAML_SEPARATOR.finditer(text):
        parts.append((first_line, text[start:match.start()]))
        first_line = text.count("\n", 0, match.end()) + 2
        start = match.end()
    parts.append((first_line, text[start:]))
    return [(number, _one(load_input_document, part, number)) for number, part in parts
            if part.strip() and not all(ln.strip().startswith("#") or not ln.strip() for ln in part.splitlines())]


def _one(load: Any, text: str, line: int) -> Any:
    try:
        return load(text)
    except GwError as error:
        raise type(error)(f"line {line}: {error.message}", **error.details) from error


def apply(wp: Workplane, as_json: bool, source: str) -> None:
    docs = documents(_read(source))
    if not docs:
        raise Invalid(f"a command document must be a mapping with an 'op' ({source} holds none)")
    if len(docs) == 1:
        applied = wp.submit(_mapping(docs[0][1]))
        done_line(applied, as_json)
        return
    lines = [number for number, _ in docs]
    try:
        applied = wp.submit({"op": "batch", "ops": [_mapping(doc) for _, doc in docs]})
    except GwError as error:
        position = error.details.get("position")
        if isinstance(position, int) and 1 <= position <= len(lines):
            raise type(error)(f"{error.message} (line {lines[position - 1]} of {source})",
                              **{**error.details, "line": lines[position - 1]}) from error
        raise
    done_line(applied, as_json)


def _mapping(doc: Any) -> dict[str, Any]:
    if not isinstance(doc, dict):
        raise Invalid("a command document must be a mapping with an 'op'")
    return doc


def _progress(enabled: bool) -> Any:
    """A progress line on stderr, only when stderr is a terminal."""
    if not enabled or not sys.stderr.isatty():
        return None

    def show(done: int, total: int) -> None:
        width = 30
        filled = width * done // total if total else width
        sys.stderr.write(f"\rimporting [{'#' * filled}{'.' * (width - filled)}] {done}/{total}")
        if done >= total:
            sys.stderr.write("\n")
        sys.stderr.flush()

    return show


def import_(wp: Workplane, as_json: bool, kind: str, source: str, mapping: str | None = None, batch: int = 500,
            progress: bool = True, prefer: str = "gitwork", dry_run: bool = False) -> None:
    from ... import importers

    if not 1 <= batch <= 1000:
        raise UsageError("--batch must be 1 to 1000 items")
    if dry_run:
        report = importers.dry_run(wp, kind, source, mapping=mapping, prefer=prefer)
        if as_json:
            output.emit_json(report)
            return
        for name in ("created", "updated", "deleted"):
            for item in report["ids"][name][:50]:
                output.line(f"{name}\t{item}")
        output.info(f"import {kind} {source} (dry run, nothing written): {report['created']} created, "
                    f"{report['updated']} updated, {report['unchanged']} unchanged, {report['deleted']} deleted, "
                    f"{report['comments']} comments, {len(report['conflicts'])} conflicts")
        return
    result = importers.run(wp, kind, source, mapping=mapping, size=batch, progress=_progress(progress),
                           prefer=prefer)
    if as_json:
        output.emit_json(result)
        return
    conflicts = result["conflicts"]
    for c in conflicts[:50]:
        kept = "took the source's" if prefer == "source" else "kept gitwork's"
        output.info(f"conflict: {c['external']} ({c['item']}) {c['field']}: gitwork {c['gitwork']!r}, "
                    f"source {c['source']!r}; {kept}")
    more = f" (and {len(conflicts) - 50} more: --json lists them)" if len(conflicts) > 50 else ""
    shown = f", {len(conflicts)} conflict{'' if len(conflicts) == 1 else 's'}{more}" if conflicts else ""
    output.info(f"import {kind} {source}: {result['created']} created, {result['updated']} updated, "
                f"{result['unchanged']} unchanged, {result['comments']} comments{shown}; "
                f"{len(result['commits'])} commit{'' if len(result['commits']) == 1 else 's'}")


def export(wp: Workplane, as_json: bool, format: str = "jsonl", out: str | None = None) -> None:
    from ...importers.export import FORMATS, write

    if format not in FORMATS:
        raise UsageError(f"--format must be one of {', '.join(FORMATS)}")
    if out is None or out == "-":
        if as_json:
            raise UsageError("gw export --json needs --output FILE: the export itself is the data on stdout")
        count = write(wp, format, sys.stdout)
    else:
        try:
            with open(out, "w", encoding="utf-8", newline="") as handle:
                count = write(wp, format, handle)
        except OSError as exc:
            raise UsageError(f"cannot write {out}: {exc.strerror or exc}") from exc
    if as_json:
        output.emit_json({"ok": True, "format": format, "items": count, "file": out})
    elif out not in (None, "-"):
        output.info(f"export {format}: {count} items to {out}")


def shadow_add(wp: Workplane, as_json: bool, name: str, kind: str, source: str, mapping: str | None = None) -> None:
    from ...importers import shadow

    result = shadow.add(wp, name, kind, source, mapping)
    if as_json:
        output.emit_json(result)
    else:
        output.info(f"shadow {name}: {kind} from {source}")


def shadow_report(wp: Workplane, as_json: bool, name: str | None = None, since: str | None = None,
                  record: bool = False) -> None:
    from ...importers import shadow

    known = shadow.shadows(wp)
    if name is None:
        if len(known) != 1:
            raise UsageError("name the shadow to report on" if known else "no shadow yet: gw shadow add NAME ...")
        name = next(iter(known))
    report = shadow.compare(wp, name)
    if record:
        applied = wp.do("shadow-report", shadow=name, report=shadow.summary_of(report))
        report["recorded"] = applied.commit
    report["history"] = shadow.history(wp, name, since) if since else []
    if as_json:
        output.emit_json(report)
        return
    for entry in report["divergences"]:
        shown = {k: v for k, v in entry.items() if k not in ("aspect", "external", "item")}
        output.line(f"{entry['aspect']}\t{entry['external']}\t{entry.get('item') or '-'}\t"
                    + " ".join(f"{k}={v}" for k, v in shown.items()))
    counts = ", ".join(f"{k} {v}" for k, v in report["counts"].items() if v) or "no divergence"
    output.info(f"shadow {name}: {report['agree']}/{report['compared']} agree "
                f"({report['agreement']:.1%}); {counts}")
    for past in report["history"]:
        output.info(f"  {past['at']}: {past['agree']}/{past['compared']} agree ({past['agreement']:.1%})")
