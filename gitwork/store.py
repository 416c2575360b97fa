"""The state ref: read a snapshot at a commit, write changes as one commit, move the ref by CAS.

Vocabulary after dulwich: :meth:`Store.set_if_equals` moves the ref from an expected old commit to a
new one (``None`` means "must not exist yet") and returns ``False`` when another writer moved first.
A lost race is a value, not an exception; a lock that will not go away is :class:`~.errors.Locked`.

The ref moves only through ``git update-ref <ref> <new> <old>``, which takes git's own lock file and
compares under it, so gitwork, plain git and other tools all serialise on the same lock.
"""

from __future__ import annotations

import os
import re
import time

from . import fsutil, gitcmd
from .config import Settings, load
from .errors import Corrupt, GitFailed, Invalid, Locked, NewerFormat
from .objects import (
    MODE_BLOB,
    MODE_TREE,
    Commit,
    LooseObjects,
    TreeEntry,
    adjust_shared_perm,
    format_commit,
    fsync_loose_objects,
    loose_compression,
    parse_commit,
    parse_tree,
    shared_perm,
)

TYPE_CHECKING = False  # typing costs ~15 ms to import on the fast path; annotations are strings anyway
if TYPE_CHECKING:
    from .gitdir import Location

FORMAT_FILE = "format.yaml"
APPEND_ONLY_SUFFIX = ".log"


def keeps_append_only(path: str, old: bytes | None, new: bytes | None) -> bool:
    """The one append-only rule: a ``.log`` file of the state may be created and may grow, nothing
    else (no rewrite, no truncation, no deletion). ``None`` is an absent file. Checked where commits
    are written (:meth:`Store.write_commit`) and where the arbiter receives them (``statecheck``)."""
    if old is None or not path.endswith(APPEND_ONLY_SUFFIX):
        return True
    return new is not None and new.startswith(old)


def jitter(low: float, high: float) -> float:
    """A uniform draw in ``[low, high)`` for back-off sleeps (``os.urandom``: ``random`` costs every
    command a few ms of start-up for these rare draws)."""
    return low + (high - low) * int.from_bytes(os.urandom(4), "big") / 2**32


def crash_point(name: str) -> None:
    """Die like ``kill -9`` at a named step when ``GW_CRASH_AT`` names it (crash tests only)."""
    if os.environ.get("GW_CRASH_AT") == name:
        import signal  # (not at the top: signal builds enums, 1 ms of every command's start-up)

        os.kill(os.getpid(), signal.SIGKILL)


class Repository:
    """Where a repository's git data lives, and its settings (found by :func:`gitdir.discover`)."""

    def __init__(self, git_dir: str, common_dir: str, toplevel: str | None, bare: bool, algorithm: str,
                 git_config: dict[str, str], settings: Settings, *, objects_dir: str | None = None,
                 core: dict[str, str] | None = None) -> None:
        self.git_dir, self.common_dir, self.toplevel, self.bare = git_dir, common_dir, toplevel, bare
        self.algorithm, self.git_config, self.settings = algorithm, git_config, settings
        self.objects_dir = objects_dir or os.path.join(common_dir, "objects")
        # git's core.* settings for the files gitwork writes itself (sharedRepository, fsync).
        self.core = core or {}
        # Refs may be read as files unless git's own view could differ (bare/GIT_DIR set-ups,
        # reftable); then every read goes through git.
        self.fast_refs = False

    @classmethod
    def discover(cls, path: str | os.PathLike[str] | None = None) -> Repository:
        from . import gitdir

        return cls.from_location(gitdir.discover(os.fspath(path) if path is not None else os.getcwd()))

    @classmethod
    def from_location(cls, where: Location) -> Repository:
        """The repository a ``gitdir.discover`` answer describes (the server hook has one already)."""
        git_config = {k: v for k, v in where.config.items() if k.startswith("gitwork.")}
        core = {k: v for k, v in where.config.items() if k.startswith("core.")}
        repo = cls(where.git_dir, where.common_dir, where.toplevel, where.bare, where.algorithm, git_config,
                   load(where.toplevel, git_config), objects_dir=where.objects_dir, core=core)
        repo.fast_refs = where.fast
        return repo

    def objects(self) -> LooseObjects:
        """The object folder, written with git's permissions (core.sharedRepository) and fsync settings."""
        try:
            shared = shared_perm(self.core.get("core.sharedrepository"))
            level = loose_compression(self.core)
        except ValueError as exc:
            raise Invalid(f"bad git config: {exc}") from None
        return LooseObjects(self.objects_dir, self.algorithm, shared=shared, fsync=fsync_loose_objects(self.core),
                            level=level)

    def shallow(self) -> frozenset[str]:
        """Commits git treats as parentless (the boundary of a shallow clone)."""
        from .gitdir import read_shallow

        return read_shallow(self.common_dir)

    def gitwork_dir(self) -> str:
        """Private working files (read cache); one per repository, shared by its worktrees."""
        path = os.path.join(self.common_dir, "gitwork")
        try:
            os.mkdir(path, 0o777)
        except FileExistsError:
            return path
        # Like every folder git makes in a shared repository: the group may write here too.
        try:
            adjust_shared_perm(path, shared_perm(self.core.get("core.sharedrepository")))
        except ValueError:
            pass
        return path


class Snapshot:
    """A read-only view of the state at one commit (``commit is None``: the ref does not exist)."""

    def __init__(self, store: Store, commit: str | None, info: Commit | None) -> None:
        self.store = store
        self.commit = commit
        self.info = info
        self.root = info.tree if info else None

    def tree(self, path: str = "") -> dict[str, TreeEntry]:
        oid = self.root
        if oid is None:
            return {}
        for part in [p for p in path.split("/") if p]:
            entry = self.store.read_tree(oid).get(part)
            if entry is None or not entry.is_tree:
                return {}
            oid = entry.oid
        return self.store.read_tree(oid)

    def entry(self, path: str) -> TreeEntry | None:
        head, _, name = path.rpartition("/")
        return self.tree(head).get(name)

    def blob(self, path: str) -> bytes | None:
        entry = self.entry(path)
        if entry is None or entry.is_tree:
            return None
        return self.store.read_blob(entry.oid)

    def format_version(self) -> int:
        from .codec import load_yaml

        data = self.blob(FORMAT_FILE)
        if data is None:
            return 0 if self.commit is None else -1
        doc = load_yaml(data, what=FORMAT_FILE)
        version = doc.get("format")
        if not isinstance(version, int):
            raise Corrupt(f"{FORMAT_FILE} on {self.store.ref} has no integer 'format'")
        return version

    def check_format(self) -> None:
        from . import FORMAT_VERSION

        if self.commit is None:
            return
        version = self.format_version()
        if version == -1:
            raise Corrupt(f"{self.store.ref} has no {FORMAT_FILE}: it was not written by gitwork")
        if version > FORMAT_VERSION:
            raise NewerFormat(
                f"{self.store.ref} uses format {version}; this gitwork reads up to {FORMAT_VERSION}: upgrade gitwork"
            )


class Store:
    def __init__(self, repo: Repository, ref: str | None = None) -> None:
        self.repo = repo
        self.ref = ref or repo.settings.ref
        self.cat = gitcmd.CatFile(repo.git_dir)
        self.objects = self.writer = repo.objects()
        self._shallow: tuple[object, frozenset[str]] | None = None
        self._loose_ok: bool | None = None
        self._trees: dict[str, dict[str, TreeEntry]] = {}
        self._blobs: dict[str, bytes] = {}
        self._hexlen = 64 if repo.algorithm == "sha256" else 40

    def close(self) -> None:
        self.cat.close()

    def forget(self) -> None:
        """Drop the trees and blobs read so far. A short-lived ``gw`` never needs to; a long-lived
        process (``gw mcp``) calls it between commands, or every commit it ever read stays in memory."""
        self._trees.clear()
        self._blobs.clear()

    # --- reading ------------------------------------------------------------------------------

    def _reads_loose(self) -> bool:
        """Loose objects are read directly unless ``git replace`` refs could make git see others."""
        if self._loose_ok is None:
            from .gitdir import has_replace_refs

            self._loose_ok = not has_replace_refs(self.repo.common_dir)
        return self._loose_ok

    def _object(self, name: str, kind: str) -> bytes:
        if len(name) == self._hexlen and self._reads_loose():
            # Most recent state objects are loose: read them directly, no process needed.
            loose = self.objects.read(name)
            if loose is not None:
                if loose[0] != kind:
                    raise Corrupt(f"object {name} is a {loose[0]}, expected a {kind}")
                return loose[1]
        got = self.cat.get(name)
        if got is None:
            raise Corrupt(f"object {name} is missing from the repository")
        if got[1] != kind:
            raise Corrupt(f"object {name} is a {got[1]}, expected a {kind}")
        return got[2]

    def object_size(self, oid: str) -> tuple[str, int] | None:
        """``(kind, size)`` of object ``oid`` without reading its content (``None``: missing): what a reader
        of hostile objects (the arbiter's hook) asks before reading one whole."""
        if len(oid) == self._hexlen and self._reads_loose():
            head = self.objects.header(oid)
            if head is not None:
                return head
        return gitcmd.read_sizes(self.repo.git_dir, [oid]).get(oid)

    def read_object(self, oid: str, kind: str) -> bytes:
        """The raw content of object ``oid``, which must be a ``kind`` (``Corrupt`` otherwise)."""
        return self._object(oid, kind)

    def remember_blob(self, oid: str, data: bytes) -> None:
        """Keep ``data`` as the content of blob ``oid`` (one computed, or read in a batch: ``derive.py``)."""
        if len(data) < 1 << 20:
            self._blobs.setdefault(oid, data)

    def remember_tree(self, oid: str, data: bytes) -> None:
        """Keep the tree object ``data`` (read in a batch: ``derive.py``) as tree ``oid``."""
        if oid not in self._trees:
            self._trees[oid] = parse_tree(data, self._hexlen)

    def read_tree(self, oid: str) -> dict[str, TreeEntry]:
        tree = self._trees.get(oid)
        if tree is None:
            tree = parse_tree(self._object(oid, "tree"), self._hexlen)
            self._trees[oid] = tree
        return tree

    def read_blob(self, oid: str) -> bytes:
        blob = self._blobs.get(oid)
        if blob is None:
            blob = self._object(oid, "blob")
            if len(blob) < 1 << 20:
                self._blobs[oid] = blob
        return blob

    def tip(self) -> str | None:
        from .gitdir import read_ref

        fast = read_ref(self.repo.common_dir, self.ref) if self.repo.fast_refs else False
        if fast is not False:
            return fast  # type: ignore[return-value]
        got = self.cat.get(self.ref)
        if got is None:
            return None
        if got[1] != "commit":
            raise Corrupt(f"{self.ref} points at a {got[1]}, not a commit")
        return got[0]

    def snapshot(self, commit: str | None = None, *, at_tip: bool = True) -> Snapshot:
        if commit is None and at_tip:
            commit = self.tip()
        if commit is None:
            return Snapshot(self, None, None)
        info = parse_commit(self._object(commit, "commit"))
        if info.parents and commit in self.shallow():
            info.parents = ()  # git's shallow boundary: history stops here, as git log stops
        return Snapshot(self, commit, info)

    def shallow(self) -> frozenset[str]:
        """The shallow boundary; read again whenever the file changes (a fetch may move it)."""
        stamp = fsutil.stamp(os.path.join(self.repo.common_dir, "shallow"))
        if self._shallow is None or self._shallow[0] != stamp:
            self._shallow = (stamp, self.repo.shallow() if stamp is not None else frozenset())
        return self._shallow[1]

    # --- writing ------------------------------------------------------------------------------

    def _build(self, tree_oid: str | None, changes: dict[tuple[str, ...], bytes | None]) -> str | None:
        entries = dict(self.read_tree(tree_oid)) if tree_oid else {}
        groups: dict[str, dict[tuple[str, ...], bytes | None]] = {}
        for parts, data in changes.items():
            if len(parts) == 1:
                if data is None:
                    entries.pop(parts[0], None)
                else:
                    entries[parts[0]] = TreeEntry(MODE_BLOB, parts[0], self.writer.write("blob", data))
            else:
                groups.setdefault(parts[0], {})[parts[1:]] = data
        for name, sub in groups.items():
            old = entries.get(name)
            new_oid = self._build(old.oid if old is not None and old.is_tree else None, sub)
            if new_oid is None:
                entries.pop(name, None)
            else:
                entries[name] = TreeEntry(MODE_TREE, name, new_oid)
        if not entries and tree_oid is not None:
            return None
        oid = self.writer.write_tree(entries)
        self._trees.setdefault(oid, entries)
        return oid

    def check_append_only(self, base: Snapshot, changes: dict[str, bytes | None]) -> None:
        """Refuse (as a bug) any change that would rewrite or truncate an append-only log."""
        for path, data in changes.items():
            if path.endswith(APPEND_ONLY_SUFFIX) and not keeps_append_only(path, base.blob(path), data):
                raise Corrupt(f"refusing to rewrite append-only file {path}")

    def commit_body(self, base: Snapshot, changes: dict[str, bytes | None], message: str, identity: str,
                    when: int) -> bytes:
        """The unsigned commit object gitwork writes for ``changes`` on ``base`` (its trees and blobs go
        to ``self.writer``; the arbiter's derive check gives it one that only hashes, ``derive.py``)."""
        self.check_append_only(base, changes)
        split = {tuple(path.split("/")): data for path, data in changes.items()}
        tree = self._build(base.root, split) or self.writer.write_tree({})
        signature = f"{identity} {when} +0000"
        parents = [base.commit] if base.commit else []
        return format_commit(tree, parents, signature, signature, message)

    def write_commit(
        self,
        base: Snapshot,
        changes: dict[str, bytes | None],
        message: str,
        identity: str,
        when: int,
    ) -> str:
        """Write the objects of a commit on top of ``base``; the ref is not touched."""
        body = self.commit_body(base, changes, message, identity, when)
        if self.repo.settings.signing == "ssh":  # docs/security.md: one ssh-keygen per commit
            from .sshsig import sign_commit

            body = sign_commit(body, self.repo.git_config.get("gitwork.signingkey"))
        return self.writer.write("commit", body)

    def set_if_equals(self, old: str | None, new: str) -> bool:
        """Move the ref from ``old`` to ``new``; ``False`` if another writer moved it first."""
        expected = old or "0" * self._hexlen
        lock_path = os.path.join(self.repo.common_dir, *self.ref.split("/")) + ".lock"
        deadline_attempts = max(1, int(self.repo.settings.lock_timeout / 0.05))
        in_process = self._swaps_in_process()
        for _attempt in range(deadline_attempts + 1):
            if in_process:
                moved = self._swap_files(lock_path, old, new)
                if moved is None:  # the lock is held: transient, unless it never goes away
                    time.sleep(jitter(0.01, 0.09))
                    continue
                if isinstance(moved, bool):
                    return moved
                in_process = False  # something only git knows how to do (a symbolic ref, say): ask it
            done = gitcmd.run(
                ["--git-dir", self.repo.git_dir, "update-ref", "-m", "gitwork", self.ref, new, expected],
                check=False,
            )
            if done.returncode == 0:
                return True
            err = done.err
            if "but expected" in err or "reference already exists" in err or "reference is missing" in err:
                return False
            if "aborted by hook" in err:
                # A reference-transaction hook said no: its own words, on one line.
                why = "; ".join(line.strip() for line in err.splitlines()
                                if line.strip() and "aborted by hook" not in line) or "no reason given"
                raise GitFailed(f"a reference-transaction hook refused to move {self.ref}: {why}",
                                stderr=err, returncode=done.returncode)
            if ".lock" in err and "File exists" in err:
                # Another writer holds git's lock: transient, unless it never goes away.
                if not self._swept_git_lock():
                    time.sleep(jitter(0.01, 0.09))
                continue
            raise GitFailed(f"git update-ref {self.ref} failed: {err}", stderr=err)
        raise Locked(
            f"{self.ref} has been locked for over {self.repo.settings.lock_timeout:g}s: a crashed writer "
            f"may have left {lock_path}; if no git process is running, remove it",
            lock=lock_path,
        )


    def _swaps_in_process(self) -> bool:
        """Whether the ref may be moved here, as ``git update-ref`` would move it, without a git process
        (issue 27: the fork and exec of git are a third of a launch's state commit): the files backend
        (refs read as files, ``fast_refs``), a ref outside those git keeps a reflog of by default (branches,
        remotes, notes), none kept for it (``core.logAllRefUpdates=always``, or a log already there),
        and no ``reference-transaction`` hook but gitwork's own, which passes every ref but session
        branches, with no hook chained before it; ``core.hooksPath`` set: git decides."""
        core = self.repo.core
        if (not self.repo.fast_refs or "core.hookspath" in core or core.get("core.logallrefupdates", "").lower() == "always"
                or not self.ref.startswith("refs/") or self.ref.startswith(("refs/heads/", "refs/remotes/", "refs/notes/"))):
            return False  # (git keeps a reflog of those by default)
        common = self.repo.common_dir
        if os.path.exists(os.path.join(common, "logs", *self.ref.split("/"))) or not _head_is_valid(self.repo.git_dir):
            return False  # (a HEAD git cannot read: git refuses the repository, and says so)
        hook = os.path.join(common, "hooks", "reference-transaction")
        if not os.access(hook, os.X_OK):
            return True  # (git runs no hook that is not executable)
        if os.access(hook + ".legacy", os.X_OK):
            return False
        try:
            with open(hook, "rb") as read:
                return b"# gitwork-hook: reference-transaction." in read.read(4096)
        except OSError:
            return False

    def _swap_files(self, lock_path: str, old: str | None, new: str) -> bool | str | None:
        """git's files-backend compare-and-swap, in this process. The lock is git's own ``REF.lock`` (so
        git and gitwork serialise on it), made whole before it exists: the new value is written to a file
        of ours (``<common>/gitwork/.reflock-PID-RANDOM``), ``flock``-ed, and hard-linked to ``REF.lock``
        (atomic, refused when it exists). Under it the ref is compared (loose, else ``packed-refs``) and
        the lock renamed over it (fsynced first when ``core.fsync`` asks for references). A writer killed
        while it holds the lock leaves a lock the kernel has unlocked, with a second link: the next
        writer removes it (``_stale``); a lock left by a killed ``git update-ref`` goes only by the stale
        rule (``stalelocks.py``: old, and no git of the repository runs). True: moved; False: another writer moved it first; None: the lock is held (try again);
        ``"git"``: a case left to ``git update-ref`` (nothing was changed)."""
        import fcntl

        from .gitdir import read_ref
        from .objects import _REF, parse_fsync_components, shared_perm

        if not os.path.isdir(os.path.dirname(lock_path)):
            return "git"  # (its folder made by git, with git's permissions, the first time)
        mine = os.path.join(self.repo.common_dir, "gitwork", f"{REFLOCK}{os.getpid()}-{os.urandom(6).hex()}")
        try:
            fd = os.open(mine, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
        except FileNotFoundError:
            try:
                self.repo.gitwork_dir()
                fd = os.open(mine, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
            except OSError:
                return "git"
        except OSError:
            return "git"
        locked = moved = False
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)  # from before the lock exists until this process ends or lets go
            os.write(fd, new.encode("ascii") + b"\n")
            if parse_fsync_components(self.repo.core.get("core.fsync", "")) & _REF:
                os.fsync(fd)
            adjust_shared_perm(mine, shared_perm(self.repo.core.get("core.sharedrepository")))
            try:
                os.link(mine, lock_path)
                locked = True
            except FileExistsError:
                self._stale(lock_path)
                return None
            current = read_ref(self.repo.common_dir, self.ref)
            if current is False:
                return "git"
            if current != old:
                return False
            crash_point("ref-locked")  # (tests: a writer killed here leaves a lock the next one removes)
            os.replace(lock_path, lock_path[:-5])
            moved = True
            return True
        except (OSError, ValueError):
            return "git"
        finally:
            if locked and not moved:
                try:
                    os.unlink(lock_path)  # still ours: nobody removes a lock whose flock is held
                except FileNotFoundError:
                    pass
            try:
                os.unlink(mine)
            except FileNotFoundError:
                pass
            os.close(fd)
            if moved:
                self._sweep_reflocks(lock_path[:-5])

    def _sweep_reflocks(self, ref_path: str) -> None:
        """Remove the ``.reflock-*`` files of writers that died outside the lock (before linking theirs,
        or after renaming it over the ref): one listing of gitwork's folder after each move (tens of
        microseconds). A file goes only when it is older than ``REFLOCK_AGE``, no process holds its
        ``flock`` (a live writer holds its own from just after creating it), and it is linked to nothing
        but the ref itself: a file linked to a ``REF.lock`` is left to ``_stale``, which needs that second
        link to know the lock is ours. A writer paused between creating its file and locking it, whose
        file goes, finds it gone when it links and leaves the move to ``git update-ref``."""
        now = time.time()

        def dead_writers(found: os.stat_result) -> bool:
            if now - found.st_mtime < REFLOCK_AGE:
                return False
            if found.st_nlink == 1:
                return True
            ref = os.stat(ref_path)
            return (ref.st_dev, ref.st_ino) == (found.st_dev, found.st_ino)

        reflocks = self._reflocks()
        if reflocks:
            from .stalelocks import unlink_unheld

            for path in reflocks:
                unlink_unheld(path, dead_writers)

    def _stale(self, lock_path: str) -> None:
        """Remove ``REF.lock`` when it is one of ours whose writer died: a second link (ours are made by
        ``link``; git's lock has one) and no ``flock`` held on it (the kernel drops a dead process's).
        Whoever holds the flock of a lock still at the path removes exactly that one (held open, its
        inode is not reused), so two writers never remove each other's. Anything else is left alone:
        git's lock, a live writer's. The dead writer's own link (``.reflock-*``) goes with it."""
        from .stalelocks import unlink_unheld

        removed = unlink_unheld(lock_path, lambda found: found.st_nlink >= 2)
        if removed is None:
            self._swept_git_lock()
            return
        for path in self._reflocks():
            try:
                if os.stat(path).st_ino == removed.st_ino:
                    os.unlink(path)
            except OSError:
                pass

    def _swept_git_lock(self) -> bool:
        """Whether ``REF.lock`` was git's, left by a killed git (old, and no git of the repository runs:
        stalelocks.py), and is removed now; said on stderr. One ``lstat`` while the lock is young."""
        from .stalelocks import sweep_and_say

        # under "refs/": the state ref is the setting's (refs/gitwork/state by default, any name under refs/).
        return sweep_and_say(self.repo.common_dir, [self.ref], under="refs/", work_tree=self.repo.toplevel)

    def _reflocks(self) -> list[str]:
        folder = os.path.join(self.repo.common_dir, "gitwork")
        try:
            return [os.path.join(folder, name) for name in os.listdir(folder) if name.startswith(REFLOCK)]
        except OSError:
            return []


REFLOCK = ".reflock-"  # the files the in-process compare-and-swap links to REF.lock (Store._swap_files)
REFLOCK_AGE = 10.0  # seconds: a dead writer's own file older than this is swept (Store._sweep_reflocks)


def _head_is_valid(git_dir: str) -> bool:
    """git's ``validate_headref``, which every git command runs on finding the repository: ``HEAD`` a
    symbolic ref under ``refs/``, or an object id."""
    try:
        with open(os.path.join(git_dir, "HEAD"), "rb") as read:
            head = read.read(256).strip()
    except OSError:
        return False
    if head.startswith(b"ref:"):
        return head[4:].strip().startswith(b"refs/")
    return len(head) in (40, 64) and all(c in b"0123456789abcdef" for c in head)


def identity_signature(name: str) -> str:
    """A git signature for a holder identity (no user.name/user.email needed)."""
    clean = "".join(ch for ch in name if ch not in "<>\n") or "gitwork"
    if re.fullmatch(r"[^@\s/]+@[^@\s/]+\.[^@\s/]+", clean):
        email = clean
    else:
        email = re.sub(r"[^A-Za-z0-9._-]+", "-", clean).strip("-") + "@gitwork.invalid"
    return f"{clean} <{email}>"
