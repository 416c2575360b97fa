"""Session branches: the holder of an item writes source only on its own, commit-once branch.

``gw session start ITEM`` freezes a head (``--from``, default the current ``HEAD``), creates the branch
``session/<sessionId>`` at it and a git worktree for it under the main worktree::

    <toplevel>/.worktrees/.gitignore                 "*": the whole folder is ignored by git
    <toplevel>/.worktrees/sessions/<sessionId>/
        session.yaml                                 the manifest (below)
        source/                                      the session's worktree (branch session/<id>)

The person's checked-out branch, index and working tree are never touched: ``git worktree add``
writes only the new worktree and ``.git/worktrees/<name>``. ``gw session commit --file PATH... -m MSG``
commits exactly the declared files, once, with ``Work-Item:``, ``Fence:`` and ``Session:`` trailers,
and records each path's blob before and after in the manifest and in the item's history.

Every step that writes the state ref is a command document applied by the engine (ops in
``gitwork/ops/sessions.py``): the session is recorded under the holder's fence, so a holder who lost
the lease can neither start nor commit a session on the record. The manifest is a local convenience
(what ``publish`` needs to find the session); the state ref is the audit trail.
"""

from __future__ import annotations

import os
import re

from .. import clock, codec, gitcmd
from ..errors import GitFailed, GwError, Held, Illegal, Invalid, NotFound, Stale
from ..hookcheck import PUBLISHED
from ..store import identity_signature
from .gitlocks import sweep_git_locks

TYPE_CHECKING = False  # typing costs ~15 ms to import; annotations are strings anyway
if TYPE_CHECKING:
    from typing import Any

    from ..store import Repository
    from ..workplane import Workplane

WORKTREES = ".worktrees"
SESSIONS = "sessions"
MANIFEST = "session.yaml"
SOURCE = "source"
BRANCH_PREFIX = "session/"
_SESSION_BRANCH = re.compile(r"refs/heads/session/([0-9]{8}-[0-9]{6}-[a-z0-9][a-z0-9-]*)\Z")


def git(*args: str, cwd: str | None = None, check: bool = True, input: bytes | None = None,
        env: dict[str, str] | None = None) -> gitcmd.Completed:
    return gitcmd.run(list(args), cwd=cwd, check=check, input=input, env=env)


# --- where things are ------------------------------------------------------------------------------


_MAIN_WORKTREES: dict[str, str] = {}


def main_worktree(repo: Repository) -> str:
    """The repository's main worktree (sessions live there, whichever worktree ``gw`` runs in).

    Asked of git once per process and repository: a multi-step session reads it at every step."""
    known = _MAIN_WORKTREES.get(repo.git_dir)
    if known is not None:
        return known
    listing = git("--git-dir", repo.git_dir, "worktree", "list", "--porcelain").out
    first = listing.split("\n\n", 1)[0].split("\n")
    if not first or not first[0].startswith("worktree ") or "bare" in first[1:]:
        raise Invalid("sessions need a repository with a working tree (this one is bare)")
    _MAIN_WORKTREES[repo.git_dir] = first[0][len("worktree "):]
    return _MAIN_WORKTREES[repo.git_dir]


def sessions_dir(top: str) -> str:
    return os.path.join(top, WORKTREES, SESSIONS)


def session_dir(top: str, session: str) -> str:
    return os.path.join(sessions_dir(top), session)


def ensure_ignored(top: str) -> None:
    """``.worktrees/.gitignore`` holding ``*``: git ignores the folder without any tracked file changing."""
    folder = os.path.join(top, WORKTREES)
    os.makedirs(folder, exist_ok=True)
    path = os.path.join(folder, ".gitignore")
    if not os.path.exists(path):
        with open(path, "w", encoding="utf-8") as handle:
            handle.write("# gitwork session worktrees: never part of the project\n*\n")


def slug(text: str, limit: int = 32) -> str:
    cleaned = re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")
    return cleaned[:limit].strip("-") or "x"


def new_session_id(now: Any, project: str, agent: str, attempt: int) -> str:
    """``<yyyymmdd-HHMMss>-<project>-<agent>``; a ``-N`` suffix when that second is already taken."""
    base = f"{now:%Y%m%d-%H%M%S}-{slug(project)}-{slug(agent)}"
    return base if attempt == 0 else f"{base}-{attempt + 1}"


def identity_env(cwd: str, actor: str) -> dict[str, str]:
    """Author/committer for commits gitwork makes: git's own identity if configured, else the holder's.

    CI machines often have no user.name/user.email; the holder identity keeps commits attributable.
    """
    env: dict[str, str] = {}
    name, _, email = identity_signature(actor).partition(" <")
    for key, fallback in (("user.name", name), ("user.email", email.rstrip(">"))):
        configured = git("config", "--get", key, cwd=cwd, check=False).out.strip()
        if not configured:
            field = "NAME" if key == "user.name" else "EMAIL"
            env[f"GIT_AUTHOR_{field}"] = fallback
            env[f"GIT_COMMITTER_{field}"] = fallback
    return env


# --- the manifest ----------------------------------------------------------------------------------


class Session:
    """One session's manifest (``session.yaml``) and the paths that go with it."""

    def __init__(self, top: str, doc: dict[str, Any]) -> None:
        self.top = top
        self.doc = doc

    @property
    def id(self) -> str:
        return str(self.doc["session"])

    @property
    def folder(self) -> str:
        return session_dir(self.top, self.id)

    @property
    def source(self) -> str:
        return os.path.join(self.folder, SOURCE)

    @property
    def branch(self) -> str:
        return f"{BRANCH_PREFIX}{self.id}"

    @property
    def ref(self) -> str:
        return f"refs/heads/{self.branch}"

    def __getitem__(self, key: str) -> Any:
        return self.doc[key]

    def get(self, key: str, default: Any = None) -> Any:
        return self.doc.get(key, default)

    def save(self) -> None:
        os.makedirs(self.folder, exist_ok=True)
        path = os.path.join(self.folder, MANIFEST)
        from ..fsutil import write_atomic

        write_atomic(path, codec.dump_yaml(self.doc), fsync=False)

    @classmethod
    def load(cls, top: str, session: str) -> Session:
        if not re.fullmatch(r"[0-9]{8}-[0-9]{6}-[a-z0-9][a-z0-9-]*", session):
            raise Invalid(f"malformed session id {session!r}")
        path = os.path.join(session_dir(top, session), MANIFEST)
        try:
            with open(path, "rb") as handle:
                data = handle.read()
        except FileNotFoundError:
            raise NotFound(f"no session {session} (no {path})", session=session) from None
        return cls(top, codec.load_yaml(data, what=f"session {session}"))

    def view(self) -> dict[str, Any]:
        return {**self.doc, "worktree": self.source if os.path.isdir(self.source) else None}


def all_sessions(top: str) -> list[Session]:
    root = sessions_dir(top)
    found = []
    for name in sorted(os.listdir(root)) if os.path.isdir(root) else []:
        if os.path.exists(os.path.join(root, name, MANIFEST)):
            try:
                found.append(Session.load(top, name))
            except GwError:
                continue
    return found


OPEN_STATES = ("started", "committed")  # published and dropped sessions are over


def lease_live(wp: Workplane, record: Session, ctx: Any = None) -> bool:
    """Whether the lease the session was started under is still the holder's, live, by the holder's view.

    A session whose lease ended (done, released, revoked, handed off, expired, taken over) is *dead*:
    its fence can land nowhere any more, so it can only be dropped (``gw session drop``).
    """
    ctx = ctx or wp.context()
    try:
        lease = ctx.lease(record["item"])
    except GwError:
        return False
    return bool(lease is not None and lease.fence == record.get("fence") and lease.holder == record.get("holder")
                and lease.live_for_holder(ctx.now, wp.settings.clock_margin))


def find(wp: Workplane, session: str | None) -> Session:
    """The named session; else the one whose worktree ``gw`` runs in; else the actor's only live open one.

    Dead sessions (their lease ended) never stand in the way of the default: they are named in the
    error only when no live one is left, with the way out (``gw session drop``).
    """
    top = main_worktree(wp.repo)
    if session:
        return Session.load(top, session)
    if wp.repo.toplevel:
        head = git("symbolic-ref", "-q", "HEAD", cwd=wp.repo.toplevel, check=False).out.strip()
        match = _SESSION_BRANCH.match(head)
        if match:
            return Session.load(top, match.group(1))
    actor = wp.settings.identity()
    mine = [s for s in all_sessions(top) if s.get("holder") == actor and s.get("state") in OPEN_STATES]
    ctx = wp.context()
    live = [s for s in mine if lease_live(wp, s, ctx)]
    if len(live) == 1:
        return live[0]
    dead = [s.id for s in mine if s not in live]
    if live:
        raise Invalid(f"name the session: {actor} has {len(live)} open sessions ({', '.join(s.id for s in live)})")
    if dead:
        raise Stale(f"{actor} has no live session: the lease of {', '.join(dead)} ended, so they can no longer be "
                    "committed or published. Drop them (`gw session drop SESSION`), claim again and start a new "
                    "session", sessions=dead)
    raise Invalid("name the session (gw session list shows them), or run this inside its worktree")


# --- the holder check ------------------------------------------------------------------------------


def holder_lease(wp: Workplane, item: str, fence: int | None) -> tuple[str, Any]:
    """A read-only pre-check of the fencing rule, so nothing is created for a holder who lost the lease.

    The authoritative check is the op's own, when its record is applied; this one only stops the git
    side (worktree, commit, merge, push) from starting when the record would be refused anyway.
    """
    view = wp.context()
    item_id = view.resolve(item)
    lease, _fence = view.fenced(item_id, fence)
    if lease is None:
        raise Stale(f"you hold no lease on {item_id}: claim it first", item=item_id)
    return item_id, lease


def resolve_commit(rev: str, cwd: str) -> str:
    done = git("rev-parse", "-q", "--verify", "--end-of-options", f"{rev}^{{commit}}", cwd=cwd, check=False)
    if done.returncode != 0 or not done.out.strip():
        raise NotFound(f"no commit {rev!r}")
    return done.out.strip()


def is_published(commit: str, cwd: str) -> bool:
    """Reachable from a branch, tag or remote-tracking ref that is not a session branch."""
    done = git("rev-list", "-n1", commit, "--not", *PUBLISHED, cwd=cwd, check=False)
    return done.returncode == 0 and not done.out.strip()


# --- session start -----------------------------------------------------------------------------


def start(wp: Workplane, item: str, from_ref: str | None = None, fence: int | None = None,
          session_id: str | None = None, base_commit: str | None = None) -> dict[str, Any]:
    """Start a commit-once session; ``session_id`` names it (a multi-step session's source-writing branch).

    ``base_commit`` (multi-step sessions only, never a face) starts it from that commit instead of
    ``from_ref``: a later source step's base holds the earlier steps' commits, which are not published
    yet (they land together at ``gw session done``); ``from_ref`` still names the publish target."""
    repo = wp.repo
    here = repo.toplevel or repo.git_dir
    top = main_worktree(repo)
    rev = from_ref or "HEAD"
    if rev.startswith("-"):
        raise Invalid(f"--from must name a commit, not an option ({rev!r})")
    base = resolve_commit(base_commit or rev, here)
    full = git("rev-parse", "--symbolic-full-name", rev, cwd=here, check=False).out.strip()
    into = full[len("refs/heads/"):] if full.startswith("refs/heads/") and not full.startswith("refs/heads/session/") \
        else None
    if base_commit is None and not is_published(base, here):
        raise Invalid(f"--from {rev} ({base[:12]}) is on no branch, tag or remote-tracking ref: a session starts "
                      "from published history")
    item_id, lease = holder_lease(wp, item, fence)
    actor = wp.settings.identity()
    ensure_ignored(top)
    now = wp.now()
    project = os.path.basename(top.rstrip(os.sep)) or "repo"
    starting = None
    for attempt in range(1 if session_id else 50):
        session = session_id or new_session_id(now, project, actor, attempt)
        folder = session_dir(top, session)
        if session_id:  # a named session (a multi-step session's source branch): one start of it only
            starting = _start_named(repo, top, session)
        else:
            if os.path.exists(folder):
                continue
            try:
                os.makedirs(folder)
            except FileExistsError:
                continue  # another start picked the same id this second
        source = os.path.join(folder, SOURCE)
        added = git("worktree", "add", "-q", "-b", f"{BRANCH_PREFIX}{session}", source, base, cwd=top, check=False)
        if added.returncode == 0:
            break
        if starting is not None:
            _started_named(folder, starting)
        if not os.listdir(folder):
            os.rmdir(folder)
        if "already exists" not in added.err or session_id:
            raise GitFailed(f"git worktree add failed: {added.err}", stderr=added.err)
    else:
        raise GwError("could not find a free session id")
    doc = {
        "session": session, "item": item_id, "holder": actor, "fence": lease.fence, "epoch": lease.epoch,
        "base": base, "from": rev, "branch": f"{BRANCH_PREFIX}{session}", "into": into,
        "started_at": clock.format_instant(now), "state": "started",
    }
    record = Session(top, {k: v for k, v in doc.items() if v is not None})
    record.save()
    if starting is not None:
        _started_named(folder, starting)
    try:
        applied = wp.record("session-start", item=item_id, session=session, base=base, branch=record.branch, into=into,
                        fence=lease.fence)
    except BaseException:
        # The record was refused (the lease was lost meanwhile): leave nothing behind. The branch is
        # still at its (published) base, so even the commit-once hook lets it go.
        discard(record)
        raise
    record.doc["recorded"] = applied.commit
    record.save()
    return {**record.view(), "state_commit": applied.commit, "command_id": applied.command["id"]}


STARTING = ".starting"  # a named session's start holds its flock from its folder to its manifest


def _start_named(repo: Repository, top: str, session: str) -> int:
    """Take the start of the named session ``session``: its folder, and the ``flock`` of the folder's
    ``STARTING`` file, held until the manifest is written (``_started_named``); the descriptor.

    ``Held`` when another start holds it, or finished it (the manifest is there), or made the folder
    under ``STALE_AFTER`` ago (it may not have taken the lock yet). A folder older than that with no
    manifest and nobody holding the lock is what a start killed half way left (kill -9 during ``git
    worktree add``, say): its worktree, branch and git's locks are removed, said on stderr, and the
    start is made again. Before, every later step of the multi-step session waited and then failed
    (exit 75, "a start died half way; remove <folder>") until a person removed it."""
    import fcntl
    import time

    from ..stalelocks import STALE_AFTER

    folder = session_dir(top, session)
    taken = f"session {session} is being started already ({folder} exists)"
    try:
        os.makedirs(folder)
        age = 0.0
        made = True
    except FileExistsError:
        made = False
        try:
            age = time.time() - os.lstat(folder).st_mtime  # (before this start adds its lock file to it)
        except FileNotFoundError:
            raise Held(taken, session=session) from None
    try:
        fd = os.open(os.path.join(folder, STARTING), os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o666)
    except FileNotFoundError:
        raise Held(taken, session=session) from None  # (its start failed and removed it meanwhile)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        os.close(fd)
        raise Held(taken, session=session) from None  # (its start is under way)
    if os.path.exists(os.path.join(folder, MANIFEST)):
        _started_named(folder, fd)  # (started: the lock file is nobody's now)
        raise Held(taken, session=session)
    if not made and age < STALE_AFTER:
        os.close(fd)  # (the file stays for the start that made the folder and comes to lock it)
        raise Held(taken, session=session)
    if not made:
        try:
            _clear_dead_start(repo, top, session)
        except BaseException:
            os.close(fd)
            raise
    return fd


def _started_named(folder: str, fd: int) -> None:
    """Let go of a named session's start (``_start_named``): its lock file goes first, while still held."""
    try:
        os.unlink(os.path.join(folder, STARTING))
    except FileNotFoundError:
        pass
    os.close(fd)


def _clear_dead_start(repo: Repository, top: str, session: str) -> None:
    """Remove what a killed start of ``session`` left in its folder: its worktree (even one git still
    marks "initializing"), its branch (at its base: no commit is made without a manifest) and any lock
    its git left on them; said on stderr."""
    import shutil
    import sys

    folder = session_dir(top, session)
    source = os.path.join(folder, SOURCE)
    ref = f"refs/heads/{BRANCH_PREFIX}{session}"
    sweep_git_locks(repo, top, source if os.path.isdir(source) else None, ref)
    git("worktree", "remove", "--force", "--force", source, cwd=top, check=False)
    shutil.rmtree(source, ignore_errors=True)
    git("worktree", "prune", cwd=top, check=False)
    git("update-ref", "-d", ref, cwd=top, check=False)
    sys.stderr.write(f"gitwork: removed what a killed start of session {session} left ({folder}): nobody "
                     "holds its start and it has no manifest\n")


def discard(record: Session) -> None:
    git("worktree", "remove", "--force", record.source, cwd=record.top, check=False)
    git("update-ref", "-d", record.ref, record["base"], cwd=record.top, check=False)
    manifest = os.path.join(record.folder, MANIFEST)
    if os.path.exists(manifest):
        os.remove(manifest)
    if os.path.isdir(record.folder) and not os.listdir(record.folder):
        os.rmdir(record.folder)


# --- session commit ------------------------------------------------------------------------------


def _changed_paths(source: str) -> list[str]:
    """Every path whose index or working-tree state differs from HEAD (untracked files included)."""
    out = git("status", "--porcelain=v1", "-z", "--untracked-files=all", "--no-renames", "--ignore-submodules=none",
              cwd=source).out
    return sorted({entry[3:] for entry in out.split("\0") if len(entry) > 3})


def _declared(paths: list[str], source: str, cwd: str) -> list[str]:
    """Paths as the session worktree's root sees them; relative ones are taken from ``cwd`` when it is
    inside the worktree (like git), else from the worktree's root."""
    root = os.path.realpath(source)
    here = os.path.realpath(cwd)
    inside = here == root or here.startswith(root + os.sep)
    result = []
    for path in paths:
        joined = os.path.normpath(os.path.join(here if inside else root, path))
        # Resolve the folders but not the file itself: a symlink is a file of the commit.
        absolute = os.path.join(os.path.realpath(os.path.dirname(joined)), os.path.basename(joined))
        rel = os.path.relpath(absolute, root)
        if rel == "." or rel.startswith(".." + os.sep) or rel == "..":
            raise Invalid(f"{path} is not inside the session worktree {source}")
        rel = rel.replace(os.sep, "/")
        if rel not in result:
            result.append(rel)
    return result


def _blobs(listing: str) -> dict[str, str]:
    """``<mode> <type|stage> <oid>\t<path>`` records (ls-tree / ls-files -s, ``-z``) → path: blob."""
    blobs = {}
    for record in listing.split("\0"):
        meta, sep, path = record.partition("\t")
        if sep:
            fields = meta.split()
            oid = fields[2] if fields[1] == "blob" else fields[1]
            blobs[path] = oid
    return blobs


def commit(wp: Workplane, files: list[str], message: str, session: str | None = None,
           cwd: str | None = None) -> dict[str, Any]:
    if not files:
        raise Invalid("declare the files this commit changes with --file (one per file)")
    if not message.strip():
        raise Invalid("a session commit needs a message (-m)")
    record = find(wp, session)
    if record.get("state") != "started":
        raise Illegal(f"session {record.id} already has its commit ({str(record.get('commit', ''))[:12]}): "
                      "a session is commit-once; start a new session for more work")
    if not os.path.isdir(record.source):
        raise Invalid(f"the worktree of session {record.id} is gone ({record.source})")
    tip = resolve_commit(record.ref, record.top)
    item_id, lease = holder_lease(wp, record["item"], record["fence"])
    trailers = f"Work-Item: {item_id}\nFence: {lease.fence}\nSession: {record.id}\n"
    if tip != record["base"]:
        if not _made_by_a_killed_commit(record, tip, trailers):
            raise Illegal(f"{record.branch} moved from its base {record['base'][:12]} to {tip[:12]} outside gw: "
                          "its one commit is used up")
        return _record_commit(wp, record, tip, _declared(files, record.source, cwd or os.getcwd()), item_id, lease)
    source = record.source
    declared = _declared(files, source, cwd or os.getcwd())
    changed = _changed_paths(source)
    if not changed:
        raise Invalid(f"nothing changed in {source}")
    undeclared = [p for p in changed if p not in declared]
    if undeclared:
        raise Invalid(f"undeclared files changed: {', '.join(undeclared)} (declare them with --file, or revert them)",
                      undeclared=undeclared)
    unchanged = [p for p in declared if p not in changed]
    if unchanged:
        raise Invalid(f"declared files did not change: {', '.join(unchanged)}", unchanged=unchanged)
    literal = {"GIT_LITERAL_PATHSPECS": "1"}
    sweep_git_locks(wp.repo, record.top, source, record.ref)
    git("add", "-A", "--", *declared, cwd=source, env=literal)
    before = _blobs(git("ls-tree", "-z", "--full-tree", record["base"], "--", *declared, cwd=source, env=literal).out)
    after = _blobs(git("ls-files", "-s", "-z", "--", *declared, cwd=source, env=literal).out)
    changes: list[dict[str, Any]] = [{"path": p, "before": before.get(p), "after": after.get(p)} for p in declared]
    text = message.rstrip("\n") + "\n\n" + trailers
    env = {**identity_env(source, wp.settings.identity()), **literal}
    done = git("commit", "-q", "--cleanup=whitespace", "-F", "-", cwd=source, input=text.encode(), env=env,
               check=False)
    if done.returncode != 0:
        raise Invalid(f"git commit refused in {source}: {done.err or done.out.strip()}")
    new = resolve_commit(record.ref, source)
    parents = git("rev-list", "--parents", "-n1", new, cwd=source).out.split()
    if parents[1:] != [record["base"]]:
        raise Illegal(f"{record.branch} is at {new[:12]}, not one commit on its base {record['base'][:12]}")
    return _recorded(wp, record, new, changes, item_id, lease)


def _made_by_a_killed_commit(record: Session, tip: str, trailers: str) -> bool:
    """Whether the session branch's tip is the commit a ``gw session commit`` of this session made and was
    killed before it recorded (kill -9 after ``git commit`` moved the branch): one commit on the base,
    ending with this session's trailers (item, fence, session). Before, every later commit of the session
    was refused (exit 6, "moved outside gw") and the work could never be published."""
    parents = git("rev-list", "--parents", "-n1", tip, cwd=record.top).out.split()
    if parents[1:] != [record["base"]]:
        return False
    body = git("log", "-1", "--format=%B", tip, cwd=record.top).out
    return body.rstrip("\n").endswith("\n\n" + trailers.rstrip("\n"))


def _record_commit(wp: Workplane, record: Session, new: str, declared: list[str], item_id: str,
                   lease: Any) -> dict[str, Any]:
    """Record the commit a killed ``gw session commit`` made (``_made_by_a_killed_commit``): the files it
    changed must be the ones declared again, as they would have had to be the first time."""
    literal = {"GIT_LITERAL_PATHSPECS": "1"}
    made = git("diff-tree", "-r", "-z", "--no-renames", "--name-only", "--no-commit-id", record["base"], new,
               cwd=record.top).out
    changed = sorted(p for p in made.split("\0") if p)
    if sorted(declared) != changed:
        raise Invalid(f"{record.branch} holds the commit {new[:12]} of an interrupted gw session commit, which "
                      f"changed {', '.join(changed) or 'nothing'}: declare exactly those files to record it",
                      changed=changed)
    before = _blobs(git("ls-tree", "-z", "--full-tree", record["base"], "--", *declared, cwd=record.top, env=literal).out)
    after = _blobs(git("ls-tree", "-z", "--full-tree", new, "--", *declared, cwd=record.top, env=literal).out)
    changes = [{"path": p, "before": before.get(p), "after": after.get(p)} for p in declared]
    return _recorded(wp, record, new, changes, item_id, lease)


def _recorded(wp: Workplane, record: Session, new: str, changes: list[dict[str, Any]], item_id: str,
              lease: Any) -> dict[str, Any]:
    record.doc.update(state="committed", commit=new, committed_at=clock.format_instant(wp.now()), changes=changes)
    record.save()
    from ..records.sessions import format_change

    try:
        applied = wp.record("session-commit", item=item_id, session=record.id, commit=new, base=record["base"],
                        files=[format_change(c["path"], c["before"], c["after"]) for c in changes],
                        fence=lease.fence)
    except Stale as error:
        raise Stale(f"committed {new[:12]} on {record.branch}, but it could not be recorded: {error.message}. "
                    "Its fence is stale: the code remote will refuse it.", **error.details) from error
    record.doc["recorded"] = applied.commit
    record.save()
    return {"session": record.id, "item": item_id, "commit": new, "branch": record.branch, "files": changes,
            "fence": lease.fence, "state_commit": applied.commit, "command_id": applied.command["id"]}


def list_sessions(wp: Workplane) -> list[dict[str, Any]]:
    """Every session with ``live``: whether an open session's lease is still the holder's (else it is dead)."""
    top = main_worktree(wp.repo)
    ctx = wp.context()
    rows = []
    for record in all_sessions(top):
        row = {**record.view(), "live": record.get("state") in OPEN_STATES and lease_live(wp, record, ctx)}
        if row.get("state") == "committed" and _published_on_record(ctx, record):
            row.update(state="published", live=False)  # landed by the publish queue's publisher (pubqueue.py)
        rows.append(row)
    return rows


def _published_on_record(ctx: Any, record: Session) -> bool:
    """Whether the state records this session's publish (a publisher of the publish queue landed it; the
    holder's manifest, a local convenience, still says ``committed``)."""
    try:
        events = ctx.records(record["item"])
    except GwError:
        return False
    return any(e.get("type") == "publish" and e.get("session") == record.id for e in events)


# --- session drop --------------------------------------------------------------------------------


def _drop_on_record(wp: Workplane, record: Session) -> bool:
    try:
        events = wp.history(record["item"])
    except GwError:
        return False
    return any(e.get("type") == "session-drop" and e.get("session") == record.id for e in events)


def drop(wp: Workplane, session: str, keep_branch: bool = False, reason: str | None = None) -> dict[str, Any]:
    """End a session without publishing it: record ``session-drop``, remove its worktree, delete its branch.

    The record comes first: the local reference-transaction hook lets an unpublished session branch
    be deleted only once its drop is on the state ref. Running it again after a crash finishes the
    clean-up. Returns what was thrown away: the commit and its files, and uncommitted files found in
    the worktree. With ``keep_branch`` the branch (and so the commit) stays, e.g. to redo the change.
    """
    if not session:
        raise Invalid("name the session to drop (gw session list shows them)")
    record = Session.load(main_worktree(wp.repo), session)
    state = record.get("state")
    if state == "published":
        raise Illegal(f"session {record.id} is already published into {record.get('published', {}).get('into')}: "
                      "nothing to drop")
    leftovers = _changed_paths(record.source) if os.path.isdir(record.source) else []
    commit = record.get("commit")
    files = [c["path"] for c in record.get("changes") or []]
    recorded = record.get("dropped", {}).get("recorded")
    command_id = None
    warnings = []
    if state != "dropped":
        if not _drop_on_record(wp, record):  # else: recorded, then interrupted before the manifest said so
            try:
                applied = wp.record("session-drop", item=record["item"], session=record.id,
                                    keep_branch=keep_branch or None, reason=reason)
                recorded, command_id = applied.commit, applied.command["id"]
            except Invalid as refused:
                # The state (the arbiter's, when there is one) never recorded its start: a `gw session
                # start` killed after its manifest, before its record. Nothing to end on the record, and
                # before, the session could be neither dropped nor published: its worktree and branch
                # stayed, and `gw session list` showed it live, for good.
                if refused.message != f"{record['item']} has no session {record.id}":
                    raise
                warnings.append(f"session {record.id} was never recorded (its start was interrupted): "
                                "removed here only")
        record.doc.update(state="dropped", dropped={"at": clock.format_instant(wp.now()), "recorded": recorded,
                                                    "branch": "kept" if keep_branch else "deleted",
                                                    "uncommitted": leftovers})
        record.save()
    if os.path.isdir(record.source):
        done = git("worktree", "remove", "--force", record.source, cwd=record.top, check=False)
        if done.returncode != 0:
            warnings.append(f"could not remove the worktree {record.source}: {done.err}")
    git("worktree", "prune", cwd=record.top, check=False)
    branch = "kept"
    if not record.get("dropped", {}).get("branch") == "kept":
        tip = git("rev-parse", "-q", "--verify", record.ref, cwd=record.top, check=False).out.strip()
        if tip:
            sweep_git_locks(wp.repo, record.top, ref=record.ref)
            done = git("update-ref", "-d", record.ref, tip, cwd=record.top, check=False)
            if done.returncode != 0:
                warnings.append(f"kept {record.branch}: {done.err}")
        branch = "deleted" if not git("rev-parse", "-q", "--verify", record.ref, cwd=record.top,
                                      check=False).out.strip() else "kept"
    return {"session": record.id, "item": record["item"], "commit": commit, "files": files,
            "uncommitted": leftovers, "branch": branch, "branch_name": record.branch, "state_commit": recorded,
            "command_id": command_id, "warnings": warnings}
