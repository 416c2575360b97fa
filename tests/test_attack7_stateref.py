"""Attack on the state ref's in-process compare-and-swap (gitwork/store.py ``_swap_files``, ``_stale``):
plain git racing gw writers, a ref only in packed-refs, kill -9 at random moments, a killed
``git update-ref``'s lock, a shared repository, a linked worktree, a symlinked ref."""

from __future__ import annotations

import contextlib
import os
import random
import shutil
import signal
import stat
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from conftest import git, gw_cmd, init_state, run_gw, tip
from gitwork.errors import ExitCode

pytestmark = pytest.mark.slow

STATE = "refs/gitwork/state"


def fsck_is_clean(repo: Path) -> None:
    done = subprocess.run(["git", "fsck", "--strict", "--no-progress"], cwd=repo, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    for line in (done.stdout + done.stderr).splitlines():
        assert line.startswith(("dangling ", "notice: ", "warning: garbage found")), line


def titles(repo: Path) -> list[str]:
    """The titles of every item created on the state ref (``git log`` subjects of ``new``)."""
    return [s for s in git(repo, "log", "--format=%s", STATE).splitlines() if s.startswith("new ")]


def packed_is_consistent(repo: Path) -> None:
    """git itself reads the refs (packed and loose) without complaint, and the state is a commit."""
    git(repo, "for-each-ref")
    git(repo, "show-ref")
    assert git(repo, "cat-file", "-t", STATE) == "commit"


def test_writers_racing_pack_refs_lose_no_update(repo: Path) -> None:
    """Eight gw writers against a loop of ``git pack-refs --all --prune``: every ``new`` lands (each
    writer retries until it wins), the ref is a commit gw wrote, packed-refs stays readable."""
    init_state(repo)
    env = dict(os.environ, GW_LOCK_TIMEOUT="20")
    writers = [subprocess.Popen(gw_cmd("new", f"item {n}", "--as", f"w{n}"), cwd=repo, env=env,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for n in range(8)]
    packs = 0
    while any(w.poll() is None for w in writers):
        subprocess.run(["git", "pack-refs", "--all", "--prune"], cwd=repo, capture_output=True)
        packs += 1
    for w in writers:
        out, err = w.communicate()
        assert w.returncode == 0, err
    assert len(titles(repo)) == 8
    packed_is_consistent(repo)
    fsck_is_clean(repo)
    assert git(repo, "log", "-1", "--format=%an", STATE).startswith("w")


def test_writers_racing_git_gc_and_update_ref(repo: Path) -> None:
    """gw writers against ``git gc`` and a plain ``git update-ref`` that moves the ref to its own
    current value (a CAS with old == new): no lost update, the chain holds every item."""
    init_state(repo)
    env = dict(os.environ, GW_LOCK_TIMEOUT="20")
    writers = [subprocess.Popen(gw_cmd("new", f"item {n}", "--as", f"w{n}"), cwd=repo, env=env,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for n in range(6)]
    turn = 0
    while any(w.poll() is None for w in writers):
        if turn % 3 == 0:
            # (gc's default prune grace: ``--prune=now`` removes the objects of a write in flight before its
            # ref moves, git's own writers' included; git documents it unsafe beside other processes)
            subprocess.run(["git", "gc", "--quiet"], cwd=repo, capture_output=True)
        else:
            now = tip(repo)
            if now:
                subprocess.run(["git", "update-ref", STATE, now, now], cwd=repo, capture_output=True)
        turn += 1
    for w in writers:
        _out, err = w.communicate()
        assert w.returncode == 0, err
    assert len(titles(repo)) == 6
    packed_is_consistent(repo)
    fsck_is_clean(repo)


def test_a_ref_only_in_packed_refs_is_moved(repo: Path) -> None:
    """The state ref only in packed-refs: the next write compares against the packed value and lands
    as a loose ref git reads; the packed line is not taken for the tip afterwards."""
    init_state(repo)
    git(repo, "pack-refs", "--all", "--prune")
    loose = repo / ".git" / "refs" / "gitwork" / "state"
    assert not loose.exists()
    before = tip(repo)
    done = run_gw(repo, "new", "after packing", "--as", "alice")
    assert done.returncode == 0, done.stderr
    assert git(repo, "rev-parse", STATE + "^") == before
    assert loose.read_text().strip() == tip(repo)
    # A stale compare (old = the packed value) is refused now.
    again = run_gw(repo, "new", "second", "--as", "alice")
    assert again.returncode == 0, again.stderr
    assert len(titles(repo)) == 2
    packed_is_consistent(repo)


def killed_update_ref(repo: Path) -> Path:
    """git's own lock on the state ref, by git: a stdin transaction held open at "prepare", then killed."""
    proc = subprocess.Popen(["git", "update-ref", "--stdin"], cwd=repo, stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert proc.stdin is not None and proc.stdout is not None
    proc.stdin.write(f"start\nupdate {STATE} {tip(repo)} {tip(repo)}\nprepare\n".encode())
    proc.stdin.flush()
    assert proc.stdout.readline() == b"start: ok\n" and proc.stdout.readline() == b"prepare: ok\n"
    proc.kill()
    proc.wait()
    return repo / ".git" / "refs" / "gitwork" / "state.lock"


def test_a_lock_left_by_a_killed_git_update_ref_stays_and_is_reported(repo: Path) -> None:
    """``git update-ref`` killed holding ``state.lock`` (one link, as git makes it): while the lock is
    young (a live git's, for all gw knows) gw leaves it, waits its timeout, exits LOCKED (11) naming the
    lock, and the ref is unchanged (an old one is swept: the next test)."""
    init_state(repo)
    before = tip(repo)
    lock = killed_update_ref(repo)
    assert lock.exists() and lock.stat().st_nlink == 1
    done = run_gw(repo, "new", "blocked", "--as", "alice", env={"GW_LOCK_TIMEOUT": "0.3"})
    assert done.returncode == ExitCode.LOCKED, done.stderr
    assert "state.lock" in done.stderr and len(done.stderr.strip().splitlines()) == 1
    assert lock.exists() and tip(repo) == before


def test_kill_9_at_random_moments_then_writers_land(repo: Path) -> None:
    """gw writers killed with SIGKILL at random moments: the ref is always a commit, a later writer
    lands (a dead in-process writer's lock is swept), git fsck is clean."""
    init_state(repo)
    rng = random.Random(int(os.environ.get("GW_ATTACK_SEED", "0")) or None)
    env = dict(os.environ, GW_LOCK_TIMEOUT="10")
    lock = repo / ".git" / "refs" / "gitwork" / "state.lock"
    for round_ in range(12):
        procs = [subprocess.Popen(gw_cmd("new", f"r{round_} {n}", "--as", "k"), cwd=repo, env=env,
                                  stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL) for n in range(2)]
        time.sleep(rng.uniform(0.0, 0.4))
        for p in procs:
            if p.poll() is None:
                p.send_signal(signal.SIGKILL)
            p.wait()
        assert git(repo, "cat-file", "-t", STATE) == "commit"
    done = run_gw(repo, "new", "survivor", "--as", "alice", env={"GW_LOCK_TIMEOUT": "10"})
    assert done.returncode == 0, done.stderr
    assert not lock.exists()
    fsck_is_clean(repo)


def test_shared_repository_group_keeps_the_ref_group_writable(repo: Path) -> None:
    """``core.sharedRepository=group``: the ref gw renames into place is group-writable, as git's."""
    git(repo, "config", "core.sharedRepository", "group")
    init_state(repo)
    done = run_gw(repo, "new", "shared", "--as", "alice")
    assert done.returncode == 0, done.stderr
    mode = (repo / ".git" / "refs" / "gitwork" / "state").stat().st_mode
    assert mode & stat.S_IWGRP and mode & stat.S_IRGRP


def test_a_linked_worktree_moves_the_common_ref(repo: Path, tmp_path: Path) -> None:
    """gw run in a linked worktree moves the state ref in the common dir (not the worktree's git dir)."""
    git(repo, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "--allow-empty", "-m", "base")
    init_state(repo)
    linked = tmp_path / "linked"
    git(repo, "worktree", "add", "-q", str(linked))
    done = run_gw(linked, "new", "from the worktree", "--as", "alice")
    assert done.returncode == 0, done.stderr
    assert tip(repo) == tip(linked) and len(titles(repo)) == 1
    wt_git = Path(git(linked, "rev-parse", "--git-dir"))
    assert not (wt_git / "refs" / "gitwork").exists()
    assert not list((repo / ".git" / "refs" / "gitwork").glob("*.lock"))


@contextlib.contextmanager
def read_only(folder: Path) -> Iterator[None]:
    """``folder`` where nothing can be created: ``chattr +i`` as root (whom modes do not stop), else 0555."""
    if os.geteuid() == 0:
        if shutil.which("chattr") is None or subprocess.run(["chattr", "+i", str(folder)]).returncode != 0:
            pytest.skip("root, and no chattr +i here to make a folder read-only")
        try:
            yield
        finally:
            subprocess.run(["chattr", "-i", str(folder)], check=True)
    else:
        folder.chmod(0o555)
        try:
            yield
        finally:
            folder.chmod(0o755)


def test_a_read_only_refs_folder_is_a_one_line_refusal(repo: Path) -> None:
    """The ref's folder read-only: gw refuses in one line, nothing moves, no lock left."""
    init_state(repo)
    before = tip(repo)
    folder = repo / ".git" / "refs" / "gitwork"
    with read_only(folder):
        done = run_gw(repo, "new", "nowhere", "--as", "alice", env={"GW_LOCK_TIMEOUT": "0.3"})
    assert done.returncode != 0 and len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert "Traceback" not in done.stderr
    assert tip(repo) == before and not list(folder.glob("*.lock"))


def test_a_read_only_gitwork_folder_leaves_the_swap_to_git(repo: Path) -> None:
    """gitwork's own folder (where the in-process lock file is made first) read-only: the write is left
    to ``git update-ref`` and lands; nothing of ours is left in either folder."""
    init_state(repo)
    before = tip(repo)
    ours = repo / ".git" / "gitwork"
    ours.mkdir(exist_ok=True)
    with read_only(ours):
        done = run_gw(repo, "new", "through git", "--as", "alice")
    assert done.returncode == 0, done.stderr
    assert git(repo, "rev-parse", STATE + "^") == before
    assert not [n for n in os.listdir(ours) if n.startswith(".reflock-")]
    assert not list((repo / ".git" / "refs" / "gitwork").glob("*.lock"))


def test_a_symlinked_ref_is_moved_as_git_moves_it(repo: Path, tmp_path: Path) -> None:
    """``refs/gitwork/state`` a symlink to a file: gw's write leaves the same files git's would
    (git's own ``update-ref`` on a twin repository is the reference)."""
    init_state(repo)
    twin = tmp_path / "twin"
    subprocess.run(["git", "clone", "-q", "--mirror", str(repo), str(twin)], check=True)
    results = []
    for where in (repo / ".git", twin):
        folder = where / "refs" / "gitwork"
        real = folder / "real"
        if not (folder / "state").exists():  # (the mirror may hold it packed)
            folder.mkdir(parents=True, exist_ok=True)
            (folder / "state").write_text(tip(repo) + "\n")  # type: ignore[operator]
        real.write_text((folder / "state").read_text())
        (folder / "state").unlink()
        os.symlink("real", folder / "state")
        results.append(folder)
    done = run_gw(repo, "new", "through a symlink", "--as", "alice")
    assert done.returncode == 0, done.stderr
    new = tip(repo)
    assert new is not None
    git(twin, "fetch", "-q", str(repo), f"+{STATE}:refs/tmp/new")
    git(twin, "update-ref", STATE, new, git(twin, "rev-parse", "refs/gitwork/real"))
    gw_side, git_side = results
    assert (gw_side / "state").is_symlink() == (git_side / "state").is_symlink()
    assert (gw_side / "real").read_text() == (git_side / "real").read_text()


def _planted(folder: Path, name: str, text: str, age: float = 120.0) -> Path:
    path = folder / name
    path.write_text(text)
    old = time.time() - age
    os.utime(path, (old, old))
    return path


def test_a_dead_writers_own_lock_file_is_swept_and_nothing_else(repo: Path) -> None:
    """A writer killed before it linked its ``.reflock-*`` file, or after it renamed the lock over the ref,
    leaves that file (1 in 40 random kill -9): the next move sweeps it. What stays: a file whose flock a
    live process holds, a file younger than REFLOCK_AGE, and a file linked to a REF.lock (``_stale`` needs
    that second link to know the lock is gitwork's, so the ref is never left locked for good)."""
    init_state(repo)
    ours = repo / ".git" / "gitwork"
    ours.mkdir(exist_ok=True)
    dead = _planted(ours, ".reflock-999999-0123456789ab", (tip(repo) or "") + "\n")
    young = _planted(ours, ".reflock-999998-0123456789ab", "x\n", age=0)
    held = _planted(ours, ".reflock-999997-0123456789ab", "x\n")
    linked = _planted(ours, ".reflock-999996-0123456789ab", "x\n")
    other_lock = repo / ".git" / "refs" / "gitwork" / "other.lock"
    os.link(linked, other_lock)
    holder = subprocess.Popen([sys.executable, "-c", "import fcntl, os, sys; fd = os.open(sys.argv[1], os.O_RDONLY); "
                               "fcntl.flock(fd, fcntl.LOCK_EX); print('held', flush=True); sys.stdin.read()", str(held)],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout is not None and holder.stdout.readline() == "held\n"
        done = run_gw(repo, "new", "after a dead writer", "--as", "alice")
        assert done.returncode == 0, done.stderr
        assert not dead.exists()
        assert young.exists() and held.exists() and linked.exists() and other_lock.exists()
    finally:
        assert holder.stdin is not None
        holder.stdin.close()
        holder.wait(timeout=30)
    assert run_gw(repo, "new", "once its holder is gone", "--as", "alice").returncode == 0
    assert not held.exists() and young.exists() and linked.exists()


if __name__ == "__main__":  # pragma: no cover
    sys.exit(pytest.main([__file__]))


def test_an_old_lock_of_a_killed_git_update_ref_is_swept_by_the_next_write(repo: Path) -> None:
    """The same lock once it is older than the stale rule's age, and no git of the repository could
    hold it (gitwork/stalelocks.py): the next write removes it, says so on stderr, and lands."""
    init_state(repo)
    lock = killed_update_ref(repo)
    then = time.time() - 30
    os.utime(lock, (then, then))
    done = run_gw(repo, "new", "lands", "--as", "alice", env={"GW_LOCK_TIMEOUT": "5"})
    assert done.returncode == 0, done.stderr
    assert "removed the stale lock refs/gitwork/state.lock" in done.stderr and not lock.exists()
    assert titles(repo)[0].endswith("by alice: lands")  # the newest commit
