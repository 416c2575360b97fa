"""The read cache: ``cache status``, ``cache rebuild``, ``cache drop`` (see gitwork/cache.py)."""

from __future__ import annotations

from .. import output

TYPE_CHECKING = False
if TYPE_CHECKING:
    from ...workplane import Workplane


def _path(wp: Workplane) -> str:
    import os

    from ...cache import NAME

    return os.path.join(wp.repo.gitwork_dir(), NAME)


def status(wp: Workplane, as_json: bool) -> None:
    """What the cache file holds and whether it reflects the tip; never builds it."""
    from ...cache import VERSION
    from ...cache import status as read_status

    found = read_status(_path(wp))
    tip = wp.store.tip()
    view = {"ok": True, "path": found["path"], "exists": found["exists"], "commit": found["commit"], "tip": tip,
            "current": found["exists"] and found["commit"] == (tip or None), "items": found["items"],
            "bytes": found["bytes"], "schema": found["schema"], "schema_expected": VERSION,
            "healthy": found["ok"]}
    if as_json:
        output.emit_json(view)
        return
    if not found["exists"]:
        output.line(f"no cache at {found['path']} (the next read builds it)")
        return
    state = "current" if view["current"] else f"at {found['commit'] or 'an unknown commit'} (tip {tip})"
    health = "ok" if found["ok"] else "damaged or another version: the next read rebuilds it"
    output.line(f"{found['path']}: {found['items']} items, {found['bytes']} bytes, {state}, {health}")


def rebuild(wp: Workplane, as_json: bool) -> None:
    """Drop the cache and build it again from every item at the tip, in one transaction."""
    import time

    from ... import cache
    from ...index import rebuild as build

    path = _path(wp)
    cache.drop(path)
    started = time.monotonic()
    commit, items = build(wp.context().snapshot)
    seconds = round(time.monotonic() - started, 3)
    view = {"ok": True, "path": path, "commit": commit, "items": items, "bytes": cache.size(path), "seconds": seconds}
    if as_json:
        output.emit_json(view)
        return
    output.info(f"rebuilt {path}: {items} items at {commit} in {seconds} s")


def drop(wp: Workplane, as_json: bool) -> None:
    """Delete the cache file (derived data: the next read rebuilds it)."""
    from ...cache import drop as drop_file

    path = _path(wp)
    dropped = drop_file(path)
    if as_json:
        output.emit_json({"ok": True, "path": path, "dropped": dropped})
        return
    output.info(f"dropped {path}" if dropped else f"no cache at {path}")
