"""Shadow mode: compare gitwork with the tracker a team still runs, and only report (docs/shadow.md).

A shadow is a name, a kind (``beads``, ``github``, ``csv``, ``jsonl``) and a source: a file (read,
never written) or a command whose standard output is the export (``gh issue list --state all --json
...``). Its definition is kept in this clone only (``<git common dir>/gitwork/shadows.json``): a
command on the shared state ref would run on every teammate's machine. A report reads the source's
current export with the importer's reader, matches items by provenance (source kind and external
id) and lists every divergence; ``--record`` keeps it on the state ref (``shadow-report``), so the
comparison window has a history that ``--since`` reads back.
"""

from __future__ import annotations

import datetime as _dt
import json
import os
import re

from .. import clock, layout
from ..errors import Invalid, NotFound, UsageError
from . import KINDS, read
from .source import MAX_FILE

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

    from ..workplane import Workplane

NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}\Z")
COMMAND_TIMEOUT = 300
CLOSE_TOLERANCE = 3600  # close times further apart than this (seconds) are a divergence
ASPECTS = ("status", "assignee", "dependencies", "closed_at", "only_in_source", "only_in_gitwork")


def _path(wp: Workplane) -> str:
    return os.path.join(wp.repo.gitwork_dir(), "shadows.json")


def shadows(wp: Workplane) -> dict[str, dict[str, Any]]:
    try:
        with open(_path(wp), encoding="utf-8") as handle:
            data = json.load(handle)
    except FileNotFoundError:
        return {}
    except (OSError, ValueError) as exc:
        raise Invalid(f"{_path(wp)} does not read as JSON ({exc}); remove it and add the shadows again") from exc
    return data if isinstance(data, dict) else {}


def add(wp: Workplane, name: str, kind: str, source: str, mapping: str | None = None) -> dict[str, Any]:
    if not NAME.match(name):
        raise Invalid(f"shadow name {name[:40]!r}: letters, digits and _.- only, at most 64")
    if kind not in KINDS:
        raise Invalid(f"shadow kind {kind!r}: one of {', '.join(KINDS)}")
    if not source.strip():
        raise Invalid("--source must name a file or a command")
    if mapping is not None and kind != "csv":
        raise UsageError("--map is for csv shadows")
    if os.path.isfile(source):
        source = os.path.abspath(source)  # a report may run from anywhere (gw -C, cron)
    entry = {"kind": kind, "source": source, **({"map": mapping} if mapping else {})}
    data = shadows(wp)
    data[name] = entry
    path = _path(wp)
    from ..fsutil import write_atomic

    write_atomic(path, json.dumps(data, indent=2, sort_keys=True), fsync=False)
    return {"ok": True, "name": name, **entry}


def _export(entry: dict[str, Any]) -> tuple[str, bool]:
    """The source's current export as a file path to read (the file itself, or a temporary copy of a
    command's output); True when it is a temporary file."""
    source = entry["source"]
    if os.path.isfile(source):
        return source, False
    return _capture(source), True


def _capture(source: str) -> str:
    """Run the shadow's command with its standard output streamed into a temporary file, never held in
    memory: past ``MAX_FILE`` bytes, or ``COMMAND_TIMEOUT`` seconds, the command and everything it started
    (its own process group) are killed and the report refused. Of its standard error only the last
    4 KiB are kept, for the error line."""
    import selectors
    import signal
    import subprocess
    import tempfile
    import time

    handle, path = tempfile.mkstemp(prefix="gw-shadow-")
    stderr = b""
    written = 0
    try:
        with os.fdopen(handle, "wb") as out, selectors.DefaultSelector() as selector, subprocess.Popen(
                ["sh", "-c", source], stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                start_new_session=True) as proc:
            assert proc.stdout is not None and proc.stderr is not None
            streams = {proc.stdout.fileno(): "out", proc.stderr.fileno(): "err"}
            for stream in (proc.stdout, proc.stderr):
                selector.register(stream, selectors.EVENT_READ)
            deadline = time.monotonic() + COMMAND_TIMEOUT
            why = None
            while selector.get_map() and why is None:
                left = deadline - time.monotonic()
                ready = selector.select(left) if left > 0 else []
                if not ready:
                    why = f"the shadow's command did not finish in {COMMAND_TIMEOUT} s: {source}"
                for key, _events in ready:
                    chunk = os.read(key.fd, 1 << 16)
                    if not chunk:
                        selector.unregister(key.fileobj)
                    elif streams[key.fd] == "err":
                        stderr = (stderr + chunk)[-4096:]
                    elif written + len(chunk) > MAX_FILE:
                        why = f"the shadow's command printed more than {MAX_FILE // (1024 * 1024)} MiB"
                        break
                    else:
                        out.write(chunk)
                        written += len(chunk)
            if why is not None:
                try:
                    os.killpg(proc.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                proc.wait()
                raise Invalid(why)
            try:
                returncode = proc.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
                raise Invalid(f"the shadow's command did not finish in {COMMAND_TIMEOUT} s: {source}") from None
        if returncode != 0:
            lines = stderr.decode("utf-8", "replace").strip().splitlines()
            raise Invalid(f"the shadow's command failed (exit {returncode}): {lines[-1][:200] if lines else source}")
    except BaseException:
        os.unlink(path)
        raise
    return path


def _source_side(entry: dict[str, Any]) -> dict[str, dict[str, Any]]:
    path, temporary = _export(entry)
    try:
        records = read(entry["kind"], path, entry.get("map"))
    finally:
        if temporary:
            os.unlink(path)
    return {r["external"]: r for r in records}


def _coarse(status: str | None) -> str:
    return {"done": "closed", "cancelled": "closed"}.get(status or "open", status or "open")


def _close_time(ctx: Any, item_id: str) -> str | None:
    for event in reversed(ctx.records(item_id)):
        if event.get("type") in ("done", "cancelled"):
            return event.get("at")
        if event.get("type") == "import-updated" and "status" in (event.get("changes") or []):
            return event.get("at")
        if event.get("type") == "imported":
            return None
    return None


def _seconds(text: str) -> float:
    return clock.parse_instant(text).timestamp()


def compare(wp: Workplane, name: str) -> dict[str, Any]:
    """Every divergence between the shadow's current export and gitwork, with counts and agreement."""
    from . import names
    from .source import instant
    from .source import item_id as derived_id

    entry = shadows(wp).get(name)
    if entry is None:
        raise NotFound(f"no shadow {name!r} (gw shadow add {name} --kind KIND --source FILE-OR-COMMAND)")
    if not isinstance(entry, dict) or entry.get("kind") not in KINDS or not isinstance(entry.get("source"), str) \
            or not entry["source"].strip() or not isinstance(entry.get("map", ""), str):
        raise Invalid(f"{_path(wp)}: shadow {name!r} is not a kind, a source and a map; define it again: "
                      f"gw shadow add {name} --kind KIND --source FILE-OR-COMMAND")
    theirs = _source_side(entry)
    kind = "gitwork" if entry["kind"] == "jsonl" else entry["kind"]
    ctx = wp.context()
    ours: dict[Any, tuple[str, Any]] = {}  # by the source's own ref, as the item records it
    for tree_entry in ctx.snapshot.tree(layout.ITEMS).values():
        for item_id in ctx.snapshot.store.read_tree(tree_entry.oid):
            item = ctx.item(item_id)
            source = (item.provenance or {}).get("source") or {}
            if source.get("kind") == kind:
                ours[source.get("ref")] = (item_id, item)
    ids = {ext: full for ext, (full, _) in ours.items()}
    divergences: list[dict[str, Any]] = []
    agree = 0
    for external, record in sorted(theirs.items()):
        mine = ours.get(external)
        if record.get("tombstone"):
            if mine is not None and mine[1].status != "cancelled":
                divergences.append({"aspect": "only_in_gitwork", "external": external, "item": mine[0],
                                    "gitwork": mine[1].status, "source": "deleted"})
            continue
        if mine is None:
            divergences.append({"aspect": "only_in_source", "external": external, "title": record.get("title"),
                                "source": record.get("status", "open")})
            continue
        item_id, item = mine
        found = []
        lease = ctx.lease(item_id)
        holder = lease.holder if lease is not None and not lease.takeable(ctx.now, ctx.settings.clock_margin) else None
        source_status = "in_progress" if (record.get("fields") or {}).get("status") == "in_progress" else record.get("status", "open")
        our_status = "in_progress" if holder else item.status
        if _coarse(source_status) != _coarse(our_status):
            found.append({"aspect": "status", "source": source_status, "gitwork": our_status})
        their_owner = names.identity(record["owner"]) if record.get("owner") else None
        our_owner = holder or item.owner
        if their_owner != our_owner:
            found.append({"aspect": "assignee", "source": record.get("owner"), "gitwork": our_owner,
                          "holder": holder})
        # Only dependencies on live items of theirs count: an import leaves the others unresolved.
        named = sorted(d for d in record.get("deps") or () if d in theirs and not theirs[d].get("tombstone"))
        if sorted(ids.get(d) or derived_id(kind, d) for d in named) != sorted(item.depends_on):
            found.append({"aspect": "dependencies", "source": named,
                          "gitwork": sorted(item.depends_on)})
        their_close = instant((record.get("fields") or {}).get("closed_at") or (record.get("fields") or {}).get("closedAt"))
        our_close = _close_time(ctx, item_id) if item.status in ("done", "cancelled") else None
        if their_close and our_close and abs(_seconds(their_close) - _seconds(our_close)) > CLOSE_TOLERANCE:
            found.append({"aspect": "closed_at", "source": their_close, "gitwork": our_close})
        for each in found:
            divergences.append({**each, "external": external, "item": item_id})
        agree += not found
    for external, (item_id, item) in sorted(ours.items()):
        if external not in theirs and item.status != "cancelled":
            divergences.append({"aspect": "only_in_gitwork", "external": external, "item": item_id,
                                "gitwork": item.status})
    compared = len([r for r in theirs.values() if not r.get("tombstone")]) + len(
        [1 for ext, (_, item) in ours.items() if ext not in theirs and item.status != "cancelled"])
    counts = {aspect: sum(1 for d in divergences if d["aspect"] == aspect) for aspect in ASPECTS}
    return {"ok": True, "name": name, "kind": entry["kind"], "at": clock.format_instant(wp.now()),
            "compared": compared, "agree": agree, "agreement": round(agree / compared, 4) if compared else 1.0,
            "counts": counts, "divergences": divergences}


def history(wp: Workplane, name: str, since: str | None) -> list[dict[str, Any]]:
    """The reports recorded on the state ref for ``name`` (within ``since``: a duration or an instant)."""
    from ..codec import iter_records, parse_duration

    ctx = wp.context()
    data = ctx.file(report_path(name)) or b""
    entries = list(iter_records(data, what=report_path(name)))
    if since:
        try:
            start = clock.parse_instant(since) if "T" in since else None
        except ValueError as exc:
            raise Invalid(f"--since {since[:40]!r}: a duration (7d, 12h) or an instant") from exc
        if start is None:
            start = wp.now() - _dt.timedelta(seconds=parse_duration(since))
        entries = [e for e in entries if clock.parse_instant(e["at"]) >= start]
    return entries


def report_path(name: str) -> str:
    return f"shadow/{name}/reports.log"


def summary_of(report: dict[str, Any]) -> dict[str, Any]:
    """What ``--record`` keeps of a report: the counts, and at most 200 divergences."""
    return {k: report[k] for k in ("kind", "compared", "agree", "agreement", "counts")} | {
        "divergences": report["divergences"][:200]}
