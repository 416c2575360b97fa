"""Importers: another tracker's export → ``import`` command documents, sent in batches.

Each reader (``beads.py``, ``github.py``, ``csvfile.py``, ``jsonl.py``) turns a file into source
records (plain mappings, :data:`RECORD_KEYS`), reporting malformed input by line number before
anything is sent. :func:`plan` orders them (an item after what it depends on and after its parent),
resolves references between them to gitwork ids and builds one ``import`` document per item;
:func:`run` sends the documents in batches (``batch`` documents, one commit each). The engine decides
every document (``ops/imports.py``): this package never writes the state itself.

An item's gitwork id is derived from the source kind and its external id
(``w-`` + the first 16 hex digits of SHA-256 of ``kind:external``), so a second import finds it.
"""

from __future__ import annotations

import json
import re

from ..commands import MAX_TEXT
from ..errors import GwError, Invalid, UsageError
from . import names
from .source import MAX_FILE, MAX_LINE, Problems, clean, instant, item_id, message_id, read_text  # noqa: F401

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, Callable

    from ..workplane import Workplane

KINDS = ("beads", "github", "csv", "jsonl")
BATCH = 500  # items per batch: one commit each
MAX_BATCH_BYTES = 16 * 1024 * 1024  # a batch document's JSON (it is the commit message's Command: line)

# What a reader produces per item (every key optional except external, title, line).
RECORD_KEYS = ("external", "line", "item", "title", "description", "status", "priority", "labels", "owner",
               "deps", "parent", "links", "criteria", "decisions", "closed_reason", "created_at", "comments",
               "fields", "url", "tombstone")


def read(kind: str, path: str, mapping: str | None = None) -> list[dict[str, Any]]:
    """The source records of an export file of ``kind`` (malformed input: one Invalid, by line)."""
    if kind == "csv":
        from .csvfile import parse as parse_csv

        return parse_csv(read_text(path), path, mapping)
    if mapping is not None:
        raise UsageError("--map is for csv imports")
    if kind == "beads":
        from .beads import parse
    elif kind == "github":
        from .github import parse
    elif kind == "jsonl":
        from .jsonl import parse
    else:
        raise UsageError(f"unknown import kind {kind!r}: one of {', '.join(KINDS)}")
    return parse(read_text(path), path)



# --- from records to documents ---------------------------------------------------------------------


def _source_kind(kind: str) -> str:
    return "gitwork" if kind == "jsonl" else kind


def _order(records: list[dict[str, Any]], path: str) -> list[dict[str, Any]]:
    """Live records, each after the records it depends on and its parent (tombstones last); a cycle in
    the source is refused, naming it."""
    by_external = {r["external"]: r for r in records if not r.get("tombstone")}
    state: dict[str, int] = {}  # 1: on the path, 2: placed
    out: list[dict[str, Any]] = []
    for start in by_external:
        if state.get(start):
            continue
        stack: list[tuple[str, list[str]]] = [(start, _before(by_external[start], by_external))]
        path_names = [start]
        state[start] = 1
        while stack:
            name, pending = stack[-1]
            if pending:
                nxt = pending.pop()
                if state.get(nxt) == 1:
                    cycle = path_names[path_names.index(nxt):] + [nxt]
                    line = by_external[nxt]["line"]
                    raise Invalid(f"{path}:{line}: dependency cycle in the source: {' -> '.join(cycle)}; "
                                  "nothing was imported", cycle=cycle)
                if not state.get(nxt):
                    state[nxt] = 1
                    path_names.append(nxt)
                    stack.append((nxt, _before(by_external[nxt], by_external)))
                continue
            stack.pop()
            path_names.pop()
            state[name] = 2
            out.append(by_external[name])
    return out + [r for r in records if r.get("tombstone")]


def _before(record: dict[str, Any], live: dict[str, dict[str, Any]]) -> list[str]:
    wanted = [*record.get("deps", ()), *([record["parent"]] if record.get("parent") else [])]
    return [name for name in reversed(wanted) if name in live]


def plan(kind: str, records: list[dict[str, Any]], path: str) -> list[dict[str, Any]]:
    """One ``import`` document per record (and a second, links only, for links that point forward)."""
    source = _source_kind(kind)
    seen: dict[str, int] = {}
    for record in records:
        first = seen.setdefault(record["external"], record["line"])
        if first != record["line"]:
            raise Invalid(f"{path}:{record['line']}: id {record['external']!r} already appears on line "
                          f"{first}; nothing was imported", external=record["external"])
    ordered = _order(records, path)
    ids = {r["external"]: r.get("item") or item_id(source, r["external"]) for r in records if not r.get("tombstone")}
    position = {ids[r["external"]]: n for n, r in enumerate(ordered) if not r.get("tombstone")}
    docs: list[dict[str, Any]] = []
    later: list[dict[str, Any]] = []
    for record in ordered:
        doc, links = _document(source, record, ids, path)
        if links is not None:
            here = position[doc["item"]]
            if all(position[link["item"]] < here for link in links):
                doc["links"] = links
            else:  # a link to an item placed later: set once every item exists
                later.append({"op": "import", "item": doc["item"], "source": source,
                              "external": record["external"], "links": links})
        docs.append(doc)
    return docs + later


def _document(source: str, record: dict[str, Any], ids: dict[str, str], path: str
              ) -> tuple[dict[str, Any], list | None]:
    external = record["external"]
    full = record.get("item") or item_id(source, external)
    doc: dict[str, Any] = {"op": "import", "item": full, "source": source, "external": external}
    fields = dict(record.get("fields") or {})
    original: dict[str, Any] = {}
    if record.get("tombstone"):
        doc["tombstone"] = True
        if fields:
            doc["fields"] = fields
        return doc, None
    for key in ("title", "description", "status", "priority", "closed_reason", "url", "created_at"):
        if record.get(key) is not None:
            doc[key] = record[key]
    doc.setdefault("description", "")
    doc.setdefault("status", "open")
    labels = []
    for text in record.get("labels") or ():
        mapped = names.label(text)
        if mapped != text:
            original.setdefault("labels", {})[mapped] = text
        labels.append(mapped)
    doc["labels"] = labels
    owner = record.get("owner")
    if owner:
        doc["owner"] = names.identity(owner)
        if doc["owner"] != owner:
            original["owner"] = owner
    deps: list[str] = []
    unresolved: list[str] = []
    for name in record.get("deps") or ():
        (deps if name in ids else unresolved).append(name)
    doc["depends_on"] = [ids[name] for name in deps]
    if record.get("parent"):
        if record["parent"] in ids:
            doc["parent"] = ids[record["parent"]]
        else:
            unresolved.append(record["parent"])
    links = []
    for kind_, name in record.get("links") or ():
        if name in ids and ids[name] != full:
            links.append({"kind": kind_, "item": ids[name]})
        elif name not in ids:
            unresolved.append(name)
    if unresolved:
        fields["unresolved"] = sorted(set(unresolved))
    doc["criteria"] = record.get("criteria") or []
    if record.get("decisions") is not None:
        doc["decisions"] = record["decisions"]
    comments = []
    for number, comment in enumerate(record.get("comments") or (), 1):
        if len(str(comment.get("text") or "").encode("utf-8", "surrogatepass")) > MAX_TEXT:
            raise Invalid(f"{path}:{record['line']}: comment {number} is longer than {MAX_TEXT // 1024} KiB; "
                          "nothing was imported")
        author = str(comment.get("author") or "unknown")
        entry = {k: v for k, v in comment.items() if k not in ("author", "at") and v is not None}
        if instant(comment.get("at")):
            entry["at"] = instant(comment["at"])
        if isinstance(entry.get("text"), str):
            entry["text"] = clean(entry["text"])
        entry["by"] = names.identity(author)
        if entry["by"] != author:
            entry["author"] = author
        comments.append(entry)
    if comments:
        doc["comments"] = comments
    doc["fields"] = fields
    doc["original"] = original
    return doc, links


def batches(docs: list[dict[str, Any]], size: int = BATCH) -> list[list[dict[str, Any]]]:
    """Consecutive runs of at most ``size`` documents (and about MAX_BATCH_BYTES of JSON)."""
    out: list[list[dict[str, Any]]] = []
    current: list[dict[str, Any]] = []
    weight = 0
    for doc in docs:
        cost = len(json.dumps(doc, ensure_ascii=False))
        if current and (len(current) >= size or weight + cost > MAX_BATCH_BYTES):
            out.append(current)
            current, weight = [], 0
        current.append(doc)
        weight += cost
    if current:
        out.append(current)
    return out


PREFER = ("gitwork", "source")


def _documents(kind: str, path: str, mapping: str | None, prefer: str) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """The file read and planned into ``import`` documents (``prefer`` set on each), and each external
    id's line in the file (a refusal names it): what ``run`` sends and ``dry_run`` decides in memory."""
    if prefer not in PREFER:
        raise UsageError(f"--prefer must be one of {', '.join(PREFER)}")
    records = read(kind, path, mapping)
    docs = plan(kind, records, path)
    if prefer == "source":
        for doc in docs:
            doc["prefer"] = "source"
    return docs, {r["external"]: r["line"] for r in records}  # one per record: plan refuses an external id twice


def run(wp: Workplane, kind: str, path: str, *, mapping: str | None = None, size: int = BATCH,
        progress: Callable[[int, int], None] | None = None, prefer: str = "gitwork") -> dict[str, Any]:
    """Import ``path`` (an export of ``kind``) into the work plane: read, plan, check, send in batches.

    All or nothing over the whole file: the batches are decided once, in order, and land by one move
    of the state ref (a refusal names the file's line and nothing lands). After a lost race the file
    is decided again on the new tip and the changing documents are sent batch by batch; a batch
    refused after another race midway leaves the batches before it landed, and the import is
    idempotent, so running it again finishes it (docs/shadow.md, "Re-importing")."""
    docs, lines = _documents(kind, path, mapping, prefer)
    chunks = batches(docs, size)
    actions: dict[str, str] = {}
    conflicts: dict[tuple[str, str], dict[str, Any]] = {}
    comments = 0
    commits: list[str] = []
    done = 0
    if progress:
        progress(done, len(docs))
    decided = _decide_once(wp, chunks, lines, path, progress, len(docs)) if len(chunks) > 1 else None
    if decided is not None:
        # Every batch decided once, on the tree the ones before it left, and landed by one move of
        # the ref: nothing was decided twice, and a refusal anywhere landed nothing.
        for applied in decided:
            for result in applied.result.get("ops", ()):
                comments += _tally(result, actions, conflicts)
            if applied.result.get("changed") and applied.commit is not None and applied.commit not in commits:
                commits.append(applied.commit)
    elif len(chunks) > 1:
        # Another writer moved the state while the file was being decided: decide it all again on
        # the new tip (nothing landed yet), then send only what changes something, batch by batch.
        # A document the check finds changes nothing (the item is as the merge leaves it, no new
        # comment) is not sent: it would change nothing in a batch either.
        results = _check(wp, docs, lines, path)
        needed = [doc for doc, result in zip(docs, results, strict=False)
                  if result.get("action", "unchanged") != "unchanged"]
        for _doc, result in zip(docs, results, strict=False):
            if result.get("action", "unchanged") == "unchanged":
                _tally(result, actions, conflicts)
        done = len(docs) - len(needed)
        chunks = batches(needed, size)
    for number, chunk in enumerate(chunks if decided is None else [], 1):
        try:
            applied = wp.submit({"op": "batch", "ops": chunk})
        except GwError as error:
            landed = "" if number == 1 else (
                f" ({number - 1} of {len(chunks)} batches landed before another writer moved the state; "
                "the import is idempotent: run it again to finish)")
            raise _at_line(error, chunk, lines, path, landed) from error
        for result in applied.result.get("ops", ()):
            comments += _tally(result, actions, conflicts)
        if applied.result.get("changed") and applied.commit is not None and applied.commit not in commits:
            commits.append(applied.commit)
        done += len(chunk)
        if progress:
            progress(done, len(docs))
    counts = {name: sum(1 for a in actions.values() if a == name) for name in _RANK}
    return {"ok": True, "source": kind, "file": path, "items": len(lines), "documents": len(docs),
            "batches": len(chunks), "commits": commits, **counts, "comments": comments,
            "conflicts": list(conflicts.values())}


def dry_run(wp: Workplane, kind: str, path: str, *, mapping: str | None = None,
            prefer: str = "gitwork") -> dict[str, Any]:
    """What ``run`` would change, decided on the current tip in memory (``_check``: the same decisions,
    the same refusals naming the file's line), writing nothing: counts and ids of the items that would be
    created, updated, left unchanged or deleted (cancelled by a tombstone), and the conflicts."""
    docs, lines = _documents(kind, path, mapping, prefer)
    actions: dict[str, str] = {}
    conflicts: dict[tuple[str, str], dict[str, Any]] = {}
    comments = 0
    for result in _check(wp, docs, lines, path) if docs else []:
        if "item" in result:
            comments += _tally(result, actions, conflicts)
    tombstones = {doc["item"] for doc in docs if doc.get("tombstone")}
    ids: dict[str, list[str]] = {name: [] for name in ("created", "updated", "unchanged", "deleted")}
    for item, action in actions.items():
        ids["deleted" if item in tombstones and action == "updated" else action].append(item)
    return {"ok": True, "dry_run": True, "source": kind, "file": path, "items": len(lines),
            "documents": len(docs), **{name: len(found) for name, found in ids.items()}, "comments": comments,
            "ids": {name: sorted(found) for name, found in ids.items()}, "conflicts": list(conflicts.values())}


def _tally(result: dict[str, Any], actions: dict[str, str], conflicts: dict[tuple[str, str], dict[str, Any]]) -> int:
    """Count one document's result; how many comments it posted."""
    # An item sent twice (its forward links in a second document) counts once, as its strongest
    # action: created over updated over unchanged.
    action = result.get("action", "unchanged")
    before = actions.get(result["item"], "unchanged")
    actions[result["item"]] = action if _RANK[action] > _RANK[before] else before
    for conflict in result.get("conflicts", ()):
        conflicts[(result["item"], conflict["field"])] = {"item": result["item"], "external": result["external"],
                                                           **conflict}
    return int(result.get("comments", 0))


def _decide_once(wp: Workplane, chunks: list[list[dict[str, Any]]], lines: dict[str, int], path: str,
                 progress: Callable[[int, int], None] | None, total: int) -> list[Any] | None:
    """Decide the batches in order, each on the tree the ones before it left, write each as its
    own commit (its recorded document replays to its tree on its parent, as any batch's does), and
    move the state ref once, from the tip the first was decided on to the last: all or nothing over
    the whole file, one decision per document. The batches as landed; ``None`` when another writer
    moved the ref meanwhile (nothing landed: the caller decides again). A refusal names its line."""
    from .. import engine
    from ..workplane import LocalRef

    store = wp.store
    start = store.snapshot()
    start.check_format()
    base = start
    landed = []
    done = 0
    for chunk in chunks:
        cmd = engine.validate_command({"op": "batch", "ops": chunk}, internal=False)
        cmd.setdefault("as", wp.settings.identity())
        at = wp.now()
        try:
            outcome = engine.apply(base, cmd, at, wp.settings)
        except GwError as error:
            raise _at_line(error, chunk, lines, path, "") from error
        new = engine.land(store, base, cmd, outcome, at)
        if new is not None:
            base = store.snapshot(new)
        landed.append(engine.Applied(cmd, new or base.commit, outcome.result, outcome.summary, 1))
        done += len(chunk)
        if progress:
            progress(done, total)
    if base.commit == start.commit:
        return landed  # nothing changed anywhere: nothing to move
    ref = LocalRef(store)
    if store.tip() != start.commit or not ref.swap(start.commit, base.commit):  # type: ignore[arg-type]
        return None
    ref.landed(landed[-1], True)
    return landed


def _check(wp: Workplane, docs: list[dict[str, Any]], lines: dict[str, int], path: str) -> list[dict[str, Any]]:
    """Decide every document on the current tip as one batch, in memory, committing nothing: the
    first refusal anywhere in the file is raised (naming its line) before any batch is sent. The
    result of each document, in order."""
    from .. import engine, ids

    snapshot = wp.store.snapshot()
    snapshot.check_format()
    cmd = {"op": "batch", "id": ids.command_id(), "as": wp.settings.identity(), "ops": docs}
    try:
        outcome = engine.apply(snapshot, cmd, wp.now(), wp.settings)
    except GwError as error:
        raise _at_line(error, docs, lines, path, "") from error
    results = outcome.result.get("ops", [])
    return results if len(results) == len(docs) else [{"action": "created"} for _ in docs]


_MEMBER = re.compile(r"#\d+ \([^)]*\): ")


def _at_line(error: GwError, docs: list[dict[str, Any]], lines: dict[str, int], path: str, more: str) -> GwError:
    """The same refusal (same class: the same exit code), naming the file's line instead of the
    batch member: ``issues.jsonl:205: ...``."""
    position = error.details.get("position")
    if type(position) is not int or not 1 <= position <= len(docs):
        return error
    line = lines.get(str(docs[position - 1].get("external")))
    if line is None:
        return error
    message = _MEMBER.sub("", error.message, count=1)
    details = {k: v for k, v in error.details.items() if k != "position"}
    return type(error)(f"{path}:{line}: {message}; nothing was imported{more}" if not more
                       else f"{path}:{line}: {message}{more}", **details, line=line)


_RANK = {"unchanged": 0, "updated": 1, "created": 2}
