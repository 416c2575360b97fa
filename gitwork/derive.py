"""The arbiter derives the state: every pushed state commit must be exactly what its command produces.

A client's engine decides with the client's settings and writes what it likes: anyone with push access
can run another gitwork, edit ``.workplane``, or write a commit with plain git. So the arbiter's
pre-receive hook (``gitwork.hookcheck``) calls :func:`check_commits` for every new commit on the state
ref, oldest first. For each one it

1. reads the command document from the commit's message (``statecommit``, the one parser);
2. bounds the commit's time (:func:`time_refusal`): never later than the arbiter's clock plus
   ``clock_margin`` (no lower bound: ``gw sync`` honestly replays old commands on newer tips);
3. applies the command with the same engine (``engine.apply``) to the PARENT's tree, at the commit's
   time, with the ARBITER's own settings (its ``gitwork.admins`` / ``gitwork.agents``, margin, ttl);
   a refusal there (``Forbidden`` for the roles, ``Stale`` for a lease, ...) refuses the push;
4. builds the commit ``engine.land`` would write for that outcome (``engine.commit_body``: trees are
   only hashed, nothing is written) and refuses the push unless the pushed commit, its signature
   header aside, is byte-identical: same tree, parent, author and committer (the acting identity as
   gitwork spells it, one time, ``+0000``) and message. With ``signing: ssh`` the signature is then
   checked against the acting identity's key (``hookcheck.check_signatures``).

The one thing of a commit the arbiter cannot derive is the digest of the document as the client first
asked for it (before the op resolved a prefix, a fence, ``--next``): the commit carries only the
resolved document. The command record (``commands/<id>``) keeps that digest to recognise a retry, so
the replay takes it from the pushed record (:func:`_requested`); every other byte is derived.

A root commit is held to the same rule on the empty state: its command applied to nothing (which adds
``format.yaml``, as the first command of any repository does). Merge commits are refused: gitwork
writes a linear history (``sync`` replays, it never merges). See docs/security.md, "What the arbiter
derives and what it trusts".
"""

from __future__ import annotations

import datetime as _dt
import json

from . import clock, engine, layout, statecommit
from .errors import Forbidden, GwError
from .objects import format_tree, parse_commit
from .sshsig import split_signed_commit
from .store import Snapshot, Store

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Mapping

    from .objects import Commit, TreeEntry

# At most this many refusals are reported for one push (the push is refused at the first anyway).
MOST = 20
# The largest command record read from a pushed tree (its JSON holds the command's result: a batch of
# 1,000 members is well under this). A larger one is not read (a gigabyte of zeros is a kilobyte pushed):
# the replay then differs from it and the commit is refused as any other difference.
RECORD_MOST = 16 << 20
# What the records of one push, read at once (``_prefetch``), may add up to; past it they are read one by one.
RECORDS_MOST = 64 << 20


class HashOnly:
    """A writer for ``Store.writer`` that computes object ids and writes nothing, so a refused push
    leaves no object behind. The derived trees stay in the store's tree cache (``Store._build``) and
    the derived blobs in its blob cache: when a commit is accepted its tree is the derived one, so the
    next commit's replay reads its parent from memory, not through ``git cat-file`` (the objects of a
    large push arrive packed)."""

    def __init__(self, store: Store) -> None:
        self.store = store

    def write(self, kind: str, data: bytes) -> str:
        oid = self.store.objects.hash(kind, data)
        if kind == "blob":
            self.store.remember_blob(oid, data)
        return oid

    def write_tree(self, entries: Mapping[str, TreeEntry]) -> str:
        return self.write("tree", format_tree(entries.values()))


def read_many(git_dir: str, names: list[str]) -> dict[str, bytes]:
    """The contents of the objects ``names`` (ids or ``rev:path``) that exist, by one ``git cat-file
    --batch`` fed every name at once: one process for a whole push, where asking one at a time costs a
    round trip each (a push of many commits arrives as a pack, which only git reads)."""
    from . import gitcmd

    return {name: data for name, (_, _, data) in gitcmd.read_batch(git_dir, names).items()}


def time_refusal(when: int, now: _dt.datetime, margin: int) -> str | None:
    """Why a commit made at ``when`` (epoch seconds) may not land; ``None`` if it may.

    The pusher chooses the time its command is decided at. Later than the arbiter's clock plus the
    margin would let anyone make a lease look expired (and take it over) or a renewal last longer:
    refused. Earlier is how honest clients write: ``gw sync`` replays an offline command (``claim
    --offline`` included) at its own time on top of newer commits, so no lower bound holds for every
    honest commit. A back-dated command is applied to the parent's state as it is now: it cannot undo
    a later grant, and a lease looks *less* expired at an earlier time (docs/security.md).
    """
    limit = int(now.timestamp()) + margin
    if when > limit:
        # (the arbiter's own time is said: a clone reads how far ahead its command was, sync/replay.py CLOCK)
        return (f"commit time {clock.format_instant(clock.parse_instant_epoch(when))} is later than the arbiter's "
                f"clock ({clock.format_instant(clock.parse_instant_epoch(int(now.timestamp())))}) plus clock_margin "
                f"({margin}s) allows")
    return None


def _requested(store: Store, commit: str, info: Commit, command_id: str,
               records: Mapping[str, bytes] | None = None) -> str | None:
    """The first-asked digest the pushed command record holds (see the module docstring), if any.

    ``records``: the records of this push read at once (``rev:path`` -> content), when prefetched.
    Otherwise read along the commit's tree through the store: the pushed objects are loose (git unpacks
    a small push), so no ``git cat-file`` process is started for them (a push's one or two commands)."""
    path = layout.command_path(command_id)
    try:
        if records is not None and f"{commit}:{path}" in records:
            data = records.get(f"{commit}:{path}")
        else:
            entry = Snapshot(store, commit, info).entry(path)
            data = None
            if entry is not None and not entry.is_tree:
                size = store.object_size(entry.oid)  # a pushed record is hostile: its size before its content
                if size is not None and size[0] == "blob" and size[1] <= RECORD_MOST:
                    data = store.read_blob(entry.oid)
        digests = json.loads(data).get("digests") if data else None
    except (GwError, ValueError, AttributeError, RecursionError):
        return None
    if isinstance(digests, list) and digests and isinstance(digests[0], str) and len(digests) <= 2:
        return digests[0]
    return None


def _tree_difference(store: Store, derived: str, pushed: str, prefix: str = "") -> str:
    """The first path where the pushed tree differs from the derived one."""
    try:
        ours, theirs = store.read_tree(derived), store.read_tree(pushed)
    except GwError:
        return prefix.rstrip("/") or "/"
    for name in sorted(set(ours) | set(theirs)):
        mine, other = ours.get(name), theirs.get(name)
        if mine == other:
            continue
        path = prefix + name
        if mine is not None and other is not None and mine.is_tree and other.is_tree:
            return _tree_difference(store, mine.oid, other.oid, path + "/")
        if mine is None:
            return f"{path} (added)"
        if other is None:
            return f"{path} (removed)"
        return path
    return prefix.rstrip("/") or "/"


def _difference(store: Store, derived: bytes, pushed: bytes) -> str:
    """What differs between the commit gitwork would write and the one pushed, in a few words."""
    ours, theirs = parse_commit(derived), parse_commit(pushed)
    if ours.tree != theirs.tree:
        return f"tree differs from the command's replay at {_tree_difference(store, ours.tree, theirs.tree)}"
    if ours.author != theirs.author:
        return f"author {theirs.author!r} is not the command's acting identity as gw writes it ({ours.author!r})"
    if ours.committer != theirs.committer:
        return f"committer {theirs.committer!r} is not the command's acting identity as gw writes it ({ours.committer!r})"
    if ours.message != theirs.message:
        return "message is not what gw writes for this command"
    return "commit object is not what gw writes for this command (extra headers or encoding)"


def check_commit(store: Store, commit: str, now: _dt.datetime, seen: dict[str, Commit] | None = None,
                 raw: Mapping[str, bytes] | None = None) -> str | None:
    """Why ``commit`` may not land on the state ref; ``None`` if it is exactly its command's replay.

    ``seen``: commits already parsed in this push (a parent is usually the commit checked before);
    ``raw``: commit objects and command records of this push read at once (:func:`read_many`).
    """
    body = raw.get(commit) if raw is not None else None
    payload, _signature = split_signed_commit(body if body is not None else store.read_object(commit, "commit"))
    info = parse_commit(payload)
    if seen is not None:
        seen[commit] = info
    if len(info.parents) > 1:
        return "a merge commit; gitwork writes a linear state history (sync replays, never merges)"
    state = statecommit.parse(commit, info)
    cmd = state.command
    if cmd is None:
        return "carries no command document (line 3 of its message); every state commit is one command"
    if not isinstance(cmd.get("id"), str) or not isinstance(cmd.get("as"), str) or not isinstance(cmd.get("op"), str):
        return "its command document lacks an op, an id or an acting identity ('as')"
    if state.time is None:
        return "its author line carries no time"
    parent = state.parent
    if parent is None:
        base = Snapshot(store, None, None)
    elif seen is not None and parent in seen:
        base = Snapshot(store, parent, seen[parent])
    else:
        base = store.snapshot(parent, at_tip=False)
    settings = store.repo.settings
    who = f"{cmd['op']} by {cmd['as']}"
    late = time_refusal(state.time, now, settings.clock_margin)
    if late:
        return f"{who} refused by the arbiter's clock: {late}"
    at = clock.parse_instant_epoch(state.time)
    try:
        base.check_format()
        clean = engine.validate_command(dict(cmd))
        outcome = engine.apply(base, clean, at, settings, requested=_requested(store, commit, info, cmd["id"], raw))
        if outcome.empty:
            return f"{who} changes nothing on its parent (gitwork writes no commit for it)"
        derived = engine.commit_body(store, base, clean, outcome, at)
    except Forbidden as error:
        return f"{who} refused by the arbiter's roles: {error.message}"
    except GwError as error:
        return f"{who} refused on replay by the arbiter: {error.message}"
    except Exception as error:  # noqa: BLE001 - a hostile document must refuse, never crash the hook
        return f"{who} cannot be replayed ({type(error).__name__})"
    if derived != payload:
        return _difference(store, derived, payload)
    return None


def _prefetch(store: Store, commits: list[str]) -> dict[str, bytes] | None:
    """Read at once what a push of many commits needs: every commit object, the command record each
    one's tree holds, and the parts of the state before the push that its commands touch (the items
    their ``Work-Item`` trailers name, the command-record shards, the top-level files). Each of those
    is otherwise one ``cat-file`` round trip, and under load a round trip costs milliseconds."""
    if len(commits) < 4:
        return None  # one or two commands (every ordinary push): the long-lived reader is as quick
    git_dir = store.repo.git_dir
    raw = read_many(git_dir, commits)
    names, paths = [], {layout.COUNTERS, "format.yaml"}
    pushed = set(commits)
    before: str | None = None
    for commit in commits:
        body = raw.get(commit)
        if body is None:
            return None  # not read at once: fall back on reading one at a time
        info = parse_commit(split_signed_commit(body)[0])
        if before is None and info.parents and info.parents[0] not in pushed:
            before = info.parents[0]
        cmd = engine.parse_command_from_message(info.message)
        if cmd is not None and isinstance(cmd.get("id"), str):
            names.append(f"{commit}:{layout.command_path(cmd['id'])}")
            paths.add(layout.command_path(cmd["id"]))
        item = statecommit.trailers_of(info.message).get("Work-Item", "")
        if item.startswith("w-") and "/" not in item and ".." not in item:
            paths.add(layout.item_dir(item) + "/")
    from . import gitcmd

    sizes = gitcmd.read_sizes(git_dir, names)  # a pushed record is hostile: its size before its content
    small = [name for name in names if name in sizes and sizes[name][1] <= RECORD_MOST]
    if sum(sizes[name][1] for name in small) <= RECORDS_MOST:
        raw.update(read_many(git_dir, small))  # the others are read one by one, bounded (``_requested``)
    if before is not None:
        _prime(store, git_dir, before, sorted(paths))
    return raw


def _prime(store: Store, git_dir: str, commit: str, paths: list[str]) -> None:
    """Put the trees and blobs of ``commit`` along ``paths`` into ``store``'s caches, in two reads."""
    from . import gitcmd

    head = read_many(git_dir, [commit]).get(commit)
    if head is None:
        return
    listing = gitcmd.run(["--git-dir", git_dir, "ls-tree", "-r", "-t", "-z", commit, "--", *paths], check=False)
    wanted = {parse_commit(head).tree: "tree"}
    for record in listing.stdout.split(b"\0"):
        meta, _, _path = record.partition(b"\t")
        fields = meta.split()
        if len(fields) == 3 and fields[1] in (b"tree", b"blob"):
            wanted[fields[2].decode()] = fields[1].decode()
    for oid, data in read_many(git_dir, list(wanted)).items():
        if wanted[oid] == "tree":
            store.remember_tree(oid, data)
        else:
            store.remember_blob(oid, data)


def refusals(store: Store, commits: list[str], now: _dt.datetime | None = None) -> list[tuple[str, str]]:
    """``(commit, why)`` for each commit of ``commits`` (oldest first) that is not its command's replay.

    ``store`` reads the arbiter's repository (the push's quarantined objects included); its writer is
    swapped for :class:`HashOnly` while checking, so nothing is written.
    """
    moment = now or clock.now()
    raw = _prefetch(store, commits)
    writer = store.writer
    store.writer = HashOnly(store)  # type: ignore[assignment]  # the writer's two methods, hashing only
    seen: dict[str, Commit] = {}
    found: list[tuple[str, str]] = []
    try:
        for commit in commits:
            why = check_commit(store, commit, moment, seen, raw)
            if why:
                found.append((commit, why))
                if len(found) >= MOST:
                    break
    finally:
        store.writer = writer
    return found


def check_commits(store: Store, commits: list[str], now: _dt.datetime | None = None) -> list[str]:
    """One refusal line per commit of ``commits`` (oldest first) that is not its command's replay."""
    return [f"{commit[:12]}: {why}" for commit, why in refusals(store, commits, now)]
