"""A ref lock a killed git process left behind: when it is stale, and who removes it.

A leaf module (nothing of gitwork imported): the store, the transport, the arbiter's hook and the
command service all apply this one rule.

git takes ``<ref>.lock`` for the milliseconds it moves a ref, and removes it even on SIGTERM; a git
process killed outright (SIGKILL, a crash) while it holds one leaves it, and git never removes it:
every later push of that ref fails with "cannot lock ref", from every clone, while fetches work. The
likeliest holder on an arbiter is git's own housekeeping: ``receive.autogc`` makes a push run ``git
gc --auto``, whose ``pack-refs --prune`` locks each loose ref to prune it, in the foreground of the
push, in the serving daemon's process group (the soak's stuck round, seed 124758941,
tests/test_arbiter_stale_lock.py). Clients can only report it (exit 11, ``Locked``).

So the hook (``hookcheck.pre_receive``, run before git takes the lock) removes the lock of a state
ref being pushed when both hold:

- it is older than :data:`STALE_AFTER` (a live holder keeps it for milliseconds);
- no git process of this repository that may hold ref locks runs on this host: anything but the
  serving and reading commands in :data:`HARMLESS` (``receive-pack``, ``upload-pack``, ``cat-file``...)
  counts, and blocks the removal. That matters: a paused ``pack-refs`` resumed after its lock was
  removed would delete the loose ref written meanwhile and move the ref back to its packed value.
  A ``receive-pack`` that started before the lock was made counts too: paused while it held the lock
  (SIGSTOP, or a ``reference-transaction`` hook slower than ``STALE_AFTER``), and resumed after the
  lock went, it would rename whatever lock is at the path then (the next push's) over the ref and tell
  its own client that its push landed, and the next push would find its own commit there: both told
  they won (tests/test_attack10b_paused.py, two claims of one item granted). One started later cannot
  hold it.

Only ``refs/gitwork/*`` locks of the refs this push updates are looked at, by their path under the
repository (nothing outside it).

A clone applies the same rule to its tracking ref (``refs/remotes/<remote>/gitwork/state``), which
every fetch and push of gitwork moves (``sync/transport.Remote.fetch``): a ``gw sync`` killed with its
process group mid-fetch left that lock, and every later fetch of the clone failed (exit 11) until a
person removed it (the system harness, seed 20261202). There the git processes that count are also
the ones working anywhere in the clone's work tree (a person's own ``git fetch`` in a subfolder).
The store applies it to the state ref's lock a killed ``git update-ref`` left (``Store.swap``: git moves
the ref where gitwork cannot, e.g. with ``core.logAllRefUpdates=always``). The server hook also sweeps
the session branches ``gw publish --queue`` pushes (``refs/heads/session/*``, ``hookcheck.SWEPT``); and
each step that writes with git applies it to the locks its own killed git would leave: a session's
worktree ``index.lock``/``HEAD.lock``, its branch and ``packed-refs.lock`` (``sessions``), the publish
target and tracking refs (``publish``, ``pubqueue``), ``config.lock`` (``settings_edit.write_git_config``)
and the batch applier's inbox refs (``applier``).
"""

from __future__ import annotations

import os
import time

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable

# Seconds a ref lock must have existed before the hook may call it stale: a live holder keeps it for
# milliseconds, and a client gives up on a locked ref after its lock_timeout (5 s by default).
STALE_AFTER = 2.0
# git commands that never hold a ref lock of the repository they serve or read.
HARMLESS = frozenset({
    "receive-pack", "upload-pack", "upload-archive", "cat-file", "rev-list", "merge-base", "diff-tree", "ls-tree",
    "index-pack", "unpack-objects", "pack-objects", "rev-parse", "config", "for-each-ref", "show-ref", "log", "show",
    "fsck", "count-objects", "hash-object", "var", "daemon",
})
# Options of ``git`` itself that take a value as the next argument.
_VALUED = frozenset({"-c", "-C", "--git-dir", "--work-tree", "--namespace", "--exec-path", "--config-env"})


def git_command(argv: list[str]) -> str | None:
    """The git subcommand a process runs (``pack-refs`` of ``git -c a=b pack-refs --all``), or None
    when it is not git."""
    if not argv:
        return None
    program = os.path.basename(argv[0])
    if program.startswith("git-"):
        return program[4:]
    if program != "git":
        return None
    skip = False
    for arg in argv[1:]:
        if skip:
            skip = False
        elif arg in _VALUED:
            skip = True
        elif not arg.startswith("-"):
            return arg
    return None


def _ancestors() -> set[int]:
    """This process and the ones it runs under (the hook's shell, its receive-pack)."""
    found, pid = set(), os.getpid()
    while pid > 1 and pid not in found:
        found.add(pid)
        try:
            with open(f"/proc/{pid}/stat") as read:
                pid = int(read.read().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            break
    return found


def _started_before(pid: str, when: float) -> bool:
    """Whether process ``pid`` started before ``when`` (give or take the second ``btime`` is rounded to);
    True when that cannot be told."""
    try:
        with open(f"/proc/{pid}/stat") as read:
            ticks = int(read.read().rsplit(")", 1)[1].split()[19])
        with open("/proc/stat") as read:
            boot = next(int(line.split()[1]) for line in read if line.startswith("btime "))
        return boot + ticks / os.sysconf("SC_CLK_TCK") < when + 1.0
    except (OSError, ValueError, IndexError, StopIteration):
        return True


def lock_holders(git_dir: str, work_tree: str | None = None, since: float | None = None) -> list[str]:
    """The git processes of ``git_dir`` on this host that may hold a ref lock (``pid command``); with
    ``work_tree``, also those whose working folder is in it. With ``since`` (the lock's mtime), a
    ``receive-pack`` started before it counts too: paused while it held the lock, and resumed, it would
    rename whatever lock is at the path then over the ref (and answer its client that its push landed)."""
    roots = [os.path.realpath(git_dir)] + ([os.path.realpath(work_tree)] if work_tree else [])
    mine = _ancestors()
    found = []
    if not os.path.isdir("/proc"):
        return ["? no /proc here to tell which git processes run"]  # (then no lock is called stale)
    for name in os.listdir("/proc"):
        if not name.isdigit() or int(name) in mine:
            continue
        try:
            with open(f"/proc/{name}/cmdline", "rb") as read:
                argv = [a.decode(errors="replace") for a in read.read().split(b"\0") if a]
            command = git_command(argv)
            if command is None or (command in HARMLESS
                                   and not (command == "receive-pack" and since is not None
                                            and _started_before(name, since))):
                continue
            places = {os.path.realpath(f"/proc/{name}/cwd")}
            places.update(os.path.realpath(a.removeprefix("--git-dir=")) for a in argv
                          if a.startswith(("/", "--git-dir=/")))
            with open(f"/proc/{name}/environ", "rb") as read:
                places.update(os.path.realpath(v[len(b"GIT_DIR="):].decode(errors="replace"))
                              for v in read.read().split(b"\0") if v.startswith(b"GIT_DIR=/"))
        except OSError:
            continue  # gone, or not ours to read
        # The repository or a folder in it (a linked worktree's git dir, .git/worktrees/NAME, is one), or the
        # work tree: a relative GIT_DIR is relative to its cwd, so the cwd counts.
        if any(p == root or p.startswith(root + os.sep) for root in roots for p in places):
            found.append(f"{name} git {command}")
    return found


def sweep(git_dir: str, refs: list[str], now: float | None = None, *, under: str = "refs/gitwork/",
          work_tree: str | None = None) -> list[str]:
    """Remove the stale locks of the refs ``refs`` (those ``under`` a prefix: the state refs unless told)
    in ``git_dir`` (see the module docstring); one line per lock removed."""
    root = os.path.realpath(git_dir)
    removed: list[str] = []
    holders: list[str] | None = None
    for ref in refs:
        if not ref.startswith(under) or ".." in ref.split("/"):
            continue
        path = os.path.join(root, ref + ".lock")
        try:
            made = os.lstat(path).st_mtime
        except OSError:
            continue
        age = (time.time() if now is None else now) - made
        if age < STALE_AFTER:
            continue
        holders = lock_holders(root, work_tree, since=made)
        if holders:
            continue  # it may still be in use: a client reports it (Locked) until that process ends
        # Nor when a process holds its flock: gitwork's own in-process writer (store._swap_files) holds
        # its lock so from before it exists until it renames it over the ref. Paused past STALE_AFTER it
        # is no git process, and once resumed its rename would land on whatever lock is there then.
        if unlink_unheld(path, lambda _found: True) is None:
            continue
        removed.append(f"removed the stale lock {ref}.lock: {int(age)} s old, and no git process of this "
                       "repository that could hold it runs")
    return removed


def sweep_and_say(git_dir: str, refs: list[str], *, under: str = "refs/gitwork/",
                  work_tree: str | None = None) -> bool:
    """``sweep``, each lock removed said on stderr (``gitwork: removed the stale lock ...``), as every step
    that removes one says it: whether any was removed."""
    import sys

    removed = sweep(git_dir, refs, under=under, work_tree=work_tree)
    for line in removed:
        sys.stderr.write(f"gitwork: {line}\n")
    return bool(removed)


def unlink_unheld(path: str, wanted: Callable[[os.stat_result], bool]) -> os.stat_result | None:
    """Remove ``path`` when ``wanted`` says yes of it and no process holds its ``flock`` (taken here,
    so the file removed is the one judged: held open, its inode is not reused); what was removed."""
    import fcntl

    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return None
    try:
        found = os.fstat(fd)
        if not wanted(found):
            return None
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # BlockingIOError (an OSError): its writer lives
        now = os.stat(path)
        if (now.st_dev, now.st_ino) != (found.st_dev, found.st_ino):
            return None
        os.unlink(path)
        return found
    except OSError:
        return None
    finally:
        os.close(fd)


def pid_exists(pid: int) -> bool:
    """Whether a process ``pid`` exists (someone else's counts): what a leftover named by its maker's pid
    is judged by. A reused pid keeps a leftover until that process ends too, which is only late."""
    if pid <= 0:
        return False  # 0 and negatives name process groups, never one maker
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    except (OSError, OverflowError):
        return False  # no such pid can exist (out of range)
    return True
