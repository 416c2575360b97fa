"""``gw publish SESSION [--into BRANCH] [--remote NAME]``: fast-forward or clean merge; never rebase, never force.

The target's tip ``T`` (the local branch, or the remote's branch fetched just now) decides:

- ``T`` is an ancestor of the session commit ``C`` (the target has not moved since the frozen head):
  the target fast-forwards to ``C``.
- otherwise a merge commit ``M`` (parents ``T``, ``C``) is made with ``git merge-tree --write-tree``,
  only if the merge has no conflict and every gate in ``settings.gates`` passes when run on ``M`` in a
  scratch worktree (``.worktrees/sessions/<id>/merge``, removed afterwards). A conflict or a failing
  gate is :class:`NonFastForward` (exit 13): nothing changed, and the message names the conflicting
  files or the gate and its output. Gates are not run for a fast-forward: the result is the
  session's own commit, already checked by whoever made it.

The new tip always descends from ``T``, so the target only ever moves forward. Locally the move is
``git update-ref <ref> <new> <T>`` (a compare-and-swap); on a remote it is ``git push --atomic
--porcelain --force-with-lease=<ref>:<T>``: the lease only adds "the remote is still at T" to what is
a fast-forward anyway, so it can never rewrite remote history. A target that moved meanwhile is
re-read and the decision made again.

A target branch checked out in some worktree (the person's, typically) is never left silently out of
date and never loses uncommitted work: if that worktree is clean, it is moved with
``git -C <worktree> merge --ff-only <new>``, which updates its index and files with the branch
(git itself refuses if an untracked file would be overwritten); if it has uncommitted changes the
publish is refused (exit 13) and nothing is touched. Any other worktree is not touched at all.

On success the publish is recorded under the holder's fence (op ``publish``, which marks the item
``done`` and releases the lease, unless ``keep_open``), the session worktree is removed (kept, with a
warning, if it has uncommitted leftovers) and the session branch deleted (its commit is now reachable
from the target).

Before anything moves, the record is tried on the state it will extend (:func:`_precheck`): with an
arbiter remote configured that is the arbiter's state, fetched just now, so a lease revoked, released
or taken over on the arbiter is exit 7 with nothing moved, locally or on the code remote. When the
code remote is the arbiter, the branch and the record then go in one atomic push
(:func:`_publish_with_record`), so an end of the lease that lands after the check cannot leave code
published without its record; with two different remotes that window remains (docs/leases.md).

:func:`finish` is ``gw done``: the one safe finish. It publishes the holder's one open session of the
item (which marks it done), or marks the item done when it has none, or refuses naming the session
when publishing is not possible (no commit yet, several sessions, a conflict, a failing gate).
"""

from __future__ import annotations

import os
import shutil
import subprocess

from . import clock
from .errors import GitFailed, GwError, Illegal, Invalid, NonFastForward, RemoteError, Stale
from .sessions import Session, find, git, identity_env, resolve_commit

TYPE_CHECKING = False  # typing costs ~15 ms to import; annotations are strings anyway
if TYPE_CHECKING:
    from typing import Any

    from .workplane import Workplane

MAX_ROUNDS = 5  # the target moved under us this many times in a row: give up and say so
MERGE_DIR = "merge"
_GATE_TAIL = 20  # lines of a failing gate's output quoted in the refusal


def _checked_out(top: str, ref: str) -> str | None:
    """The worktree that has ``ref`` checked out, if any."""
    listing = git("worktree", "list", "--porcelain", cwd=top).out
    for block in listing.split("\n\n"):
        lines = block.split("\n")
        if f"branch {ref}" in lines and lines[0].startswith("worktree "):
            return lines[0][len("worktree "):]
    return None


def _dirty(worktree: str) -> list[str]:
    out = git("status", "--porcelain=v1", "-z", "--untracked-files=no", cwd=worktree).out
    return [entry[3:] for entry in out.split("\0") if len(entry) > 3]


def _is_ancestor(older: str, newer: str, cwd: str) -> bool:
    return git("merge-base", "--is-ancestor", older, newer, cwd=cwd, check=False).returncode == 0


def _merge(record: Session, target: str, into: str, source: str, wp: Workplane) -> str:
    """A merge commit of ``source`` into ``target``, or :class:`NonFastForward` naming the conflicts."""
    top = record.top
    done = git("merge-tree", "--write-tree", "--name-only", "-z", "--no-messages", target, source, cwd=top,
               check=False)
    parts = done.out.split("\0")
    if done.returncode == 1:
        conflicts = sorted({p.strip() for p in parts[1:] if p.strip()})
        raise NonFastForward(
            f"{into} has moved since session {record.id} started ({record['base'][:12]} → {target[:12]}) and merging "
            f"it conflicts in: {', '.join(conflicts) or '(see git merge-tree)'}. Nothing was changed. Resolve by "
            f"starting a new session from the current {into} and redoing the change there.",
            conflicts=conflicts, target=target)
    if done.returncode != 0:
        raise GitFailed(f"git merge-tree failed: {done.err}", stderr=done.err)
    tree = parts[0].strip()
    trailers = f"Work-Item: {record['item']}\nFence: {record['fence']}\nSession: {record.id}\n"
    message = f"Merge session {record.id} into {into}\n\n{trailers}"
    env = identity_env(top, wp.settings.identity())
    return git("commit-tree", tree, "-p", target, "-p", source, "-F", "-", cwd=top, input=message.encode(),
               env=env).out.strip()


def _run_gates(record: Session, merged: str, gates: tuple[str, ...], into: str) -> list[dict[str, Any]]:
    """Run each gate on ``merged`` in a scratch worktree; :class:`NonFastForward` on the first failure."""
    if not gates:
        return []
    scratch = os.path.join(record.folder, MERGE_DIR)
    # Twice forced: a publish killed inside its `git worktree add` left the scratch marked "initializing"
    # (locked), which one --force and prune leave, and every later publish failed on it ("a missing but
    # locked worktree") until a person unlocked it.
    git("worktree", "remove", "--force", "--force", scratch, cwd=record.top, check=False)
    shutil.rmtree(scratch, ignore_errors=True)
    git("worktree", "prune", cwd=record.top, check=False)
    git("worktree", "add", "-q", "--detach", scratch, merged, cwd=record.top)
    results = []
    try:
        env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
        env.update(GW_SESSION=record.id, GW_MERGE=merged)
        for gate in gates:
            proc = subprocess.run(["/bin/sh", "-c", gate], cwd=scratch, env=env, stdout=subprocess.PIPE,
                                  stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
            results.append({"gate": gate, "exit": proc.returncode})
            if proc.returncode != 0:
                tail = "\n".join(proc.stdout.decode("utf-8", "replace").rstrip().splitlines()[-_GATE_TAIL:])
                raise NonFastForward(
                    f"gate `{gate}` failed (exit {proc.returncode}) on the merge of session {record.id} into {into}; "
                    f"nothing was changed. Fix it in a new session from the current {into}."
                    + (f"\n{tail}" if tail else ""),
                    gate=gate, exit=proc.returncode)
    finally:
        git("worktree", "remove", "--force", "--force", scratch, cwd=record.top, check=False)
        shutil.rmtree(scratch, ignore_errors=True)
        git("worktree", "prune", cwd=record.top, check=False)
    return results


def _decide(record: Session, target: str, into: str, wp: Workplane) -> tuple[str, str, list[dict[str, Any]]]:
    """(new tip, mode, gate results) for publishing the session commit onto ``target``."""
    source = record["commit"]
    if _is_ancestor(target, source, record.top):
        return source, "fast-forward", []
    merged = _merge(record, target, into, source, wp)
    return merged, "merge", _run_gates(record, merged, tuple(wp.settings.gates), into)


def _refuse_dirty_checkout(top: str, ref: str, into: str, new: str | None = None) -> str | None:
    worktree = _checked_out(top, ref)
    if worktree is not None:
        dirty = _dirty(worktree)
        if dirty and not (new is not None and _interrupted_fast_forward(top, worktree, ref, new)):
            raise NonFastForward(
                f"{into} is checked out at {worktree} with uncommitted changes ({', '.join(dirty[:5])}"
                f"{'...' if len(dirty) > 5 else ''}); publishing would leave it out of date. Commit or stash them "
                f"there, or switch that worktree to another branch, then publish again. Nothing was changed.",
                worktree=worktree, dirty=dirty)
    return worktree


def _interrupted_fast_forward(top: str, worktree: str, ref: str, new: str) -> bool:
    """Whether the checkout's changes are exactly the fast-forward to ``new`` that a killed ``gw publish``
    began (kill -9 of its group inside ``git merge --ff-only``, after the index and files were written,
    before the branch moved): the branch is an ancestor of ``new``, the index holds ``new``'s tree and the
    files the index. The locks that ``git merge`` left (``HEAD.lock``, the branch's, ``index.lock``) are
    removed by the stale-lock rule (``stalelocks.py``), said on stderr, so that the publish finishes the
    move. Before, every later publish refused the checkout as dirty (exit 13), for good. Moving the branch
    to ``new`` loses nothing there: what is in the index and the files is ``new``'s."""
    from .stalelocks import sweep_and_say

    if not _is_ancestor(resolve_commit(ref, top), new, top):
        return False
    if git("diff", "--quiet", cwd=worktree, check=False).returncode != 0:
        return False  # (files that differ from the index: the person's own work)
    if git("diff-index", "--cached", "--quiet", new, "--", cwd=worktree, check=False).returncode != 0:
        return False
    where = git("rev-parse", "--absolute-git-dir", "--git-common-dir", cwd=worktree).out.split("\n")
    own, common = where[0], os.path.join(worktree, where[1])
    sweep_and_say(own, ["HEAD", "index"], under="", work_tree=worktree)
    sweep_and_say(common, [ref], under="refs/heads/", work_tree=top)
    return True


def _move_local(top: str, ref: str, into: str, new: str, target: str) -> tuple[bool, str | None]:
    """Move the local branch from ``target`` to ``new``; ``(False, _)`` if it moved meanwhile."""
    worktree = _refuse_dirty_checkout(top, ref, into, new)
    if worktree is None:
        done = git("update-ref", "-m", f"gw publish: {new[:12]}", ref, new, target, cwd=top, check=False)
        if "cannot lock ref" in done.err and _swept(top, ref):
            done = git("update-ref", "-m", f"gw publish: {new[:12]}", ref, new, target, cwd=top, check=False)
        if done.returncode == 0:
            return True, None
        if "but expected" in done.err or "cannot lock ref" in done.err:
            return False, None
        raise GitFailed(f"git update-ref {ref} failed: {done.err}", stderr=done.err)
    head = git("rev-parse", "HEAD", cwd=worktree).out.strip()
    if head != target:
        return False, worktree
    done = git("merge", "--ff-only", "-q", new, cwd=worktree, check=False)
    if done.returncode != 0:
        if resolve_commit(ref, top) != target:
            return False, worktree
        raise NonFastForward(f"{into} is checked out at {worktree} and git could not fast-forward it: "
                             f"{done.err or done.out.strip()}. Nothing was changed.", worktree=worktree)
    return True, worktree


def _swept(top: str, ref: str) -> bool:
    """Whether a lock of the local branch ``ref`` that a killed git left was removed (the stale-lock rule,
    ``stalelocks.py``: older than ``STALE_AFTER``, no git of the repository or in its work tree running),
    said on stderr. A ``gw publish`` killed with its process group while its ``git update-ref`` held the
    target's lock left it, and every later publish failed (exit 13, "kept moving") until a person removed it."""
    from .stalelocks import sweep_and_say

    common = git("rev-parse", "--git-common-dir", cwd=top).out.strip()
    return sweep_and_say(os.path.join(top, common), [ref], under="refs/heads/", work_tree=top)


def _remote_tip(wp: Workplane, top: str, remote: str, into: str) -> str | None:
    return fetch_into(wp.repo.common_dir, top, remote, f"refs/heads/{into}", f"refs/remotes/{remote}/{into}", into)


def fetch_into(common_dir: str, top: str, remote: str, ref: str, tracking: str, what: str) -> str | None:
    """Fetch ``remote``'s ``ref`` into the local ``tracking``: its commit, None when the remote has no ``ref``.

    A lock of ``tracking`` that a fetch killed outright left (kill -9 of a ``gw publish`` or of a publisher
    with its process group) is removed by the stale-lock rule (``stalelocks.py``: older than
    ``STALE_AFTER``, no git of the repository or in its work tree running), said on stderr, and the fetch
    tried again. Before, every later fetch failed: a publish with exit 12 until a person removed it, and
    the publish queue's publisher read a session branch's as "not on the remote" and sent the entry back,
    again after each ``gw publish --queue``."""
    for attempt in (1, 2):
        done = git("fetch", "-q", "--no-tags", "--no-write-fetch-head", remote, f"+{ref}:{tracking}", cwd=top,
                   check=False)
        if done.returncode == 0:
            return resolve_commit(tracking, top)
        if "couldn't find remote ref" in done.err:
            return None
        if attempt == 1 and ".lock" in done.err:
            from .stalelocks import sweep_and_say

            if sweep_and_say(common_dir, [tracking], under="refs/", work_tree=top):
                continue
        break
    raise RemoteError(f"cannot fetch {what} from {remote}: {done.err}", remote=remote)


def _push(top: str, remote: str, into: str, new: str, target: str) -> bool:
    """CAS push; ``False`` when the remote's branch is no longer at ``target``."""
    ref = f"refs/heads/{into}"
    done = git("push", "--atomic", "--porcelain", f"--force-with-lease={ref}:{target}", remote, f"{new}:{ref}",
               cwd=top, check=False)
    for line in done.out.splitlines():
        fields = line.split("\t")  # flag, from:to, summary (git push --porcelain)
        if len(fields) < 3 or not fields[1].endswith(f":{ref}"):
            continue
        flag, summary = fields[0], fields[2]
        if flag in (" ", "+", "*", "=", "-"):
            git("update-ref", f"refs/remotes/{remote}/{into}", new, cwd=top, check=False)
            return True
        if any(reason in summary for reason in ("(stale info)", "(fetch first)", "(non-fast-forward)")):
            return False
        remote_says = "\n".join(x for x in done.err.splitlines() if x.startswith("remote:"))
        if "stale fence" in remote_says:
            raise Stale(f"{remote} refused the publish: {remote_says}", remote=remote)
        raise NonFastForward(f"{remote} refused {into}: {summary}. Nothing was changed.\n{remote_says}".rstrip(),
                             remote=remote)
    if done.returncode != 0:
        raise RemoteError(f"cannot push to {remote}: {done.err}", remote=remote)
    return True


def _precheck(wp: Workplane, document: dict[str, Any]) -> None:
    """Try the publish record on the state it would extend, and change nothing: refusals surface here.

    Without an arbiter that is the local state. With one (setting ``remote``), the arbiter's state
    ref is fetched first and the local commands it has not seen are replayed on it (as its submit
    will do), so a lease that ended there (revoked, released, taken over) is seen before any branch
    moves. The real record is decided again when it is submitted.
    """
    from . import engine
    from .store import Snapshot

    cmd = engine.validate_command(document)
    cmd.setdefault("as", wp.settings.identity())
    if wp.settings.remote:
        from .sync import Arbiter

        arbiter = Arbiter(wp)
        base, _replayed, _refused = arbiter.rebuild(wp.store.tip(), arbiter.fetch())
        snapshot = wp.store.snapshot(base) if base else Snapshot(wp.store, None, None)
    else:
        snapshot = wp.store.snapshot()
    snapshot.check_format()
    engine.apply(snapshot, cmd, wp.now(), wp.settings)


def code_remote_is_arbiter(top: str, remote: str, arbiter: str | None) -> bool:
    """Whether the code remote is the arbiter: the same remote, or one that pushes to the same URL."""
    if not arbiter:
        return False
    if remote == arbiter:
        return True
    urls = [git("remote", "get-url", "--push", "--", name, cwd=top, check=False).out.strip() for name in (remote, arbiter)]
    return bool(urls[0]) and urls[0] == urls[1]


def _publish_with_record(wp: Workplane, record: Session, remote: str, into: str,
                         closing: dict[str, Any]) -> dict[str, Any]:
    """Publish onto the arbiter, which is also the code remote: the branch and the publish record in
    one ``git push --atomic`` (the branch CAS'd on the tip the decision was made on, the state ref on
    the arbiter's tip the record was applied to). Either both land or neither: a revoke (or any end of
    the lease) that reaches the arbiter first makes the state ref's CAS fail, the record is decided
    again on the new tip and refused (exit 7), and the branch has not moved. A branch that moved
    meanwhile is fetched and the decision made again; a state ref that moved is the arbiter's usual
    lost race (fetch, re-decide the record, push both again).
    """
    from . import engine
    from .errors import RemoteRefused
    from .sync import Arbiter, Rider, RiderMoved

    top, ref, source, item_id = record.top, f"refs/heads/{into}", record["commit"], record["item"]
    arbiter = Arbiter(wp)
    for _round in range(MAX_ROUNDS):
        target = _remote_tip(wp, top, remote, into)
        if target is None:
            raise Invalid(f"{remote} has no branch {into}")
        new, mode, gates = _decide(record, target, into, wp)
        args = {"item": item_id, "session": record.id, "source": source, "commit": new, "previous": target,
                "into": into, "remote": remote, "mode": mode, "fence": record["fence"], **closing}
        cmd = engine.validate_command({"op": "publish", **{k: v for k, v in args.items() if v is not None}},
                                      internal=True)
        cmd.setdefault("as", wp.settings.identity())
        try:
            applied = arbiter.submit(cmd, (Rider(ref, target, new),))
        except RiderMoved:
            continue  # someone else's push moved the branch: decide again on its new tip
        except RemoteRefused as error:
            said = "; ".join(error.details.get("said") or [])
            if "stale fence" in said:
                raise Stale(f"{remote} refused the publish: {said}", remote=remote) from error
            raise
        break
    else:
        raise NonFastForward(f"{into} kept moving while publishing session {record.id}; try again")
    git("update-ref", f"refs/remotes/{remote}/{into}", new, cwd=top, check=False)
    record.doc.update(state="published", published={
        "into": into, "remote": remote, "mode": mode, "commit": new, "previous": target,
        "at": clock.format_instant(wp.now()), "recorded": applied.commit})
    record.save()
    return _published(record, applied, new, mode, target, gates, None, closing)


def _published(record: Session, applied: Any, new: str, mode: str, target: str, gates: list[dict[str, Any]],
               worktree: str | None, closing: dict[str, Any]) -> dict[str, Any]:
    """What ``publish`` answers once the branch moved and the record landed (the session cleaned up)."""
    published = record.doc["published"]
    warnings = _clean_up(record, record["commit"])
    return {"session": record.id, "item": record["item"], "into": published["into"], "remote": published["remote"],
            "mode": mode, "commit": new, "previous": target, "source": record["commit"], "gates": gates,
            "worktree_updated": worktree, "released": not closing.get("keep_open"),
            "status": applied.result.get("status"), "state_commit": applied.commit,
            "command_id": applied.command["id"], "warnings": warnings}


def publish(wp: Workplane, session: str | None, into: str | None = None, remote: str | None = None, *,
            keep_open: bool = False, force: bool = False, reason: str | None = None) -> dict[str, Any]:
    """Publish a session's commit into ``into`` (locally, or on ``remote``); record it, marking the item
    done and releasing the lease unless ``keep_open``. ``force``/``reason`` as for ``gw done``."""
    record = find(wp, session)
    actor = wp.settings.identity()
    if record.get("holder") != actor:
        raise Stale(f"session {record.id} is {record.get('holder')}'s, and you are {actor}: only its holder publishes "
                    "it", item=record.get("item"), holder=record.get("holder"))
    if remote and git("remote", "get-url", "--", remote, cwd=record.top, check=False).returncode != 0:
        raise Invalid(f"no git remote named {remote!r} (git remote add {remote} URL)")
    state = record.get("state")
    if state == "published":
        raise Invalid(f"session {record.id} is already published into {record.get('published', {}).get('into')}")
    if state != "committed" or not record.get("commit"):
        raise Invalid(f"session {record.id} has no commit yet: gw session commit --file PATH... -m MSG first")
    into = into or record.get("into")
    if not into:
        raise Invalid(f"session {record.id} started from a detached head: say where to publish with --into BRANCH")
    if into.startswith("refs/heads/"):
        into = into[len("refs/heads/"):]
    if into.startswith("session/"):
        raise Invalid("a session cannot be published into a session branch")
    top = record.top
    ref = f"refs/heads/{into}"
    source = record["commit"]
    if resolve_commit(record.ref, top) != source:
        raise Invalid(f"{record.branch} no longer points at the session commit {source[:12]}")
    closing: dict[str, Any] = {"keep_open": keep_open or None, "force": force or None, "reason": reason}
    item_id = record["item"]
    _precheck(wp, {"op": "publish", "item": item_id, "session": record.id, "source": source, "commit": source,
                   "into": into, "remote": remote, "mode": "fast-forward", "fence": record["fence"], **closing})

    if remote and code_remote_is_arbiter(top, remote, wp.settings.remote):
        return _publish_with_record(wp, record, remote, into, closing)
    worktree = None
    for _round in range(MAX_ROUNDS):
        if remote:
            target = _remote_tip(wp, top, remote, into)
            if target is None:
                raise Invalid(f"{remote} has no branch {into}")
        else:
            target = resolve_commit(ref, top)
            worktree = _refuse_dirty_checkout(top, ref, into, record["commit"])  # refuse before any work
        new, mode, gates = _decide(record, target, into, wp)
        if remote:
            moved = _push(top, remote, into, new, target)
        else:
            moved, worktree = _move_local(top, ref, into, new, target)
        if moved:
            break
    else:
        raise NonFastForward(f"{into} kept moving while publishing session {record.id}; try again")

    record.doc.update(state="published", published={
        "into": into, "remote": remote, "mode": mode, "commit": new, "previous": target,
        "at": clock.format_instant(wp.now())})
    record.save()
    try:
        applied = wp.record("publish", item=item_id, session=record.id, source=source, commit=new, previous=target,
                            into=into, remote=remote, mode=mode, fence=record["fence"], **closing)
    except GwError as error:
        raise type(error)(f"published {new[:12]} into {into}, but the publish could not be recorded: {error.message}",
                          **error.details) from error
    record.doc["published"]["recorded"] = applied.commit
    record.save()
    return _published(record, applied, new, mode, target, gates, worktree, closing)


def finish(wp: Workplane, item: str, *, force: bool = False, reason: str | None = None, fence: int | None = None,
           into: str | None = None, remote: str | None = None, offline: bool = False) -> dict[str, Any]:
    """``gw done``: publish the holder's open session of ``item`` (marking it done), or just mark it done.

    The open sessions are read from the state ref (those started under the current lease and neither
    published nor dropped). One committed session: it is published, and the publish marks the item
    done. None: the ``done`` op. Otherwise refused, naming the session(s), nothing changed: a session
    without its commit (commit it, or drop it), several sessions, or a publish refusal (exit 13 for a
    conflict or a failing gate, 7 for a lost lease), re-raised with the session named.
    """
    from .records.sessions import describe, open_sessions

    ctx = wp.context()
    item_id = ctx.resolve(item)
    lease = ctx.lease(item_id)
    actor = wp.settings.identity()
    rows = []
    if lease is not None and lease.is_active() and lease.holder == actor and fence in (None, lease.fence):
        rows = open_sessions(ctx, item_id, lease)
    closing = {"force": force or None, "reason": reason, "fence": fence}
    if not rows:
        applied = wp.do("done", item=item_id, offline=offline, **closing)
        return {**applied.to_json(), "published": None, "dead_sessions": _dead_sessions(wp, item_id)}
    if len(rows) > 1:
        raise Illegal(f"{item_id} has {len(rows)} open sessions, {describe(rows)}: publish them one by one "
                      "(`gw publish SESSION --keep-open`, the last without it) or drop the ones to throw away "
                      "(`gw session drop SESSION`); nothing was changed", item=item_id,
                      sessions=[r["session"] for r in rows])
    row = rows[0]
    if offline:  # publishing moves a branch and needs the arbiter's word: it cannot be tentative
        raise Illegal(f"{item_id} has the open session {row['session']}: done publishes it first, which cannot be "
                      f"done --offline; run done online, or drop it (`gw session drop {row['session']}`); "
                      "nothing was changed", item=item_id, sessions=[row["session"]])
    if not row["commit"]:
        raise Illegal(f"{item_id} has the open session {row['session']} with no commit yet: commit it "
                      f"(`gw session commit --file PATH... -m MSG`) and run done again, or drop it "
                      f"(`gw session drop {row['session']}`); nothing was changed", item=item_id,
                      sessions=[row["session"]])
    try:
        result = publish(wp, row["session"], into=into, remote=remote, force=force, reason=reason)
    except GwError as error:
        raise type(error)(f"done publishes session {row['session']} of {item_id} first, and could not: "
                          f"{error.message}", **{**error.details, "session": row["session"]}) from error
    return {"ok": True, "op": "done", "item": item_id, "status": result["status"], "published": result,
            "command_id": result["command_id"], "commit": result["state_commit"],
            "dead_sessions": _dead_sessions(wp, item_id)}


def _dead_sessions(wp: Workplane, item_id: str) -> list[dict[str, Any]]:
    """Sessions of the item still open on the record after the finish: dead ones, named so none is left
    behind silently (``gw done`` warns about each; ``gw session drop`` ends it)."""
    from .records.sessions import open_sessions

    return [{"session": r["session"], "commit": r["commit"], "by": r["by"]}
            for r in open_sessions(wp.context(), item_id)]


def _clean_up(record: Session, source: str) -> list[str]:
    warnings = []
    if os.path.isdir(record.source):
        done = git("worktree", "remove", record.source, cwd=record.top, check=False)
        if done.returncode != 0:
            warnings.append(f"kept the session worktree {record.source}: {done.err} (remove it with "
                            f"`git worktree remove --force {record.source}` once nothing there is needed)")
            return warnings
    done = git("update-ref", "-d", record.ref, source, cwd=record.top, check=False)
    if done.returncode != 0:
        warnings.append(f"kept {record.branch}: {done.err}")
    return warnings
