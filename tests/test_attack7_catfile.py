"""Attack on the object reader started through ``posix_spawn`` (gitwork/gitcmd.py ``_Child``,
``CatFile``): a reader killed mid-read, descriptors leaking into it, zombies left in a long-lived
process, git missing from PATH, a PATH with a relative entry."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from conftest import git
from gitwork import gitcmd
from gitwork.errors import GitFailed

pytestmark = pytest.mark.skipif(not gitcmd._SPAWN, reason="posix_spawn and /proc/self/fd are needed")


@pytest.fixture
def objects(repo: Path) -> tuple[Path, str, str]:
    """A repository with a commit (HEAD) and a blob of 8 MiB: (repo, small commit id, big blob id)."""
    big = os.urandom(4 << 20).hex().encode()
    blob = git(repo, "hash-object", "-w", "--stdin", input=big)
    git(repo, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "--allow-empty", "-m", "x")
    return repo, git(repo, "rev-parse", "HEAD"), blob


def zombies() -> list[int]:
    """This process's children that have ended and were never waited for."""
    found = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat") as read:
                fields = read.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if fields[0] == "Z" and int(fields[1]) == os.getpid():
            found.append(int(name))
    return found


def test_no_descriptor_of_ours_reaches_the_reader(objects: tuple[Path, str, str], tmp_path: Path) -> None:
    """An inheritable descriptor of the parent (a file only it opened) is not among the reader's."""
    repo, head, _ = objects
    marker = tmp_path / "only-the-parent-opened-this"
    marker.write_text("x")
    fd = os.open(marker, os.O_RDONLY)
    os.set_inheritable(fd, True)
    try:
        cat = gitcmd.CatFile(str(repo / ".git"))
        assert cat.get(head) is not None
        pid = cat._proc.pid  # type: ignore[union-attr]
        held = [os.readlink(f"/proc/{pid}/fd/{n}") for n in os.listdir(f"/proc/{pid}/fd")]
        cat.close()
    finally:
        os.close(fd)
    assert str(marker) not in held, held


def test_many_readers_closed_leave_no_zombie(objects: tuple[Path, str, str]) -> None:
    """A long-lived process (``gw serve``) that opens and closes readers many times leaves none of
    them unreaped."""
    repo, head, _ = objects
    before = set(zombies())
    for _ in range(60):
        cat = gitcmd.CatFile(str(repo / ".git"))
        assert cat.get(head) is not None
        cat.close()
    assert set(zombies()) - before == set()


DROPPING = """
import gc, os, sys, time
from gitwork import gitcmd
def zombies():
    found = 0
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                with open(f"/proc/{name}/stat") as read:
                    fields = read.read().rsplit(")", 1)[1].split()
            except OSError:
                continue
            found += fields[0] == "Z" and int(fields[1]) == os.getpid()
    return found
for _ in range(20):
    cat = gitcmd.CatFile(sys.argv[1])
    assert cat.get("HEAD") is not None
    del cat
    gc.collect()
time.sleep(0.3)  # (every dropped git has ended by now: its stdin closed)
last = gitcmd.CatFile(sys.argv[1])
assert last.get("HEAD") is not None  # a reader started: those that ended are reaped
print(zombies())
last.close()
"""


def test_readers_dropped_without_close_are_reaped(objects: tuple[Path, str, str]) -> None:
    """Readers let go without ``close`` in a long-lived process (an error path, an owner garbage-
    collected): git ends at its stdin's end, and is reaped when the next reader starts, as
    ``subprocess.Popen`` reaps its own; never a zombie a request. (In a process of its own: the
    suite's conftest keeps every reader it sees.)"""
    repo, _head, _ = objects
    done = subprocess.run([sys.executable, "-c", DROPPING, str(repo / ".git")], capture_output=True, text=True,
                          timeout=60, env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)})
    assert done.returncode == 0, done.stderr
    assert int(done.stdout) == 0, "zombies left by readers dropped without close: " + done.stdout


def test_a_reader_killed_mid_read_is_an_error_then_a_fresh_reader(objects: tuple[Path, str, str]) -> None:
    """The reader killed while it writes an 8 MiB blob: the read fails with GitFailed (never a short
    blob), the next read starts a new reader, and the dead one is reaped."""
    repo, head, blob = objects
    cat = gitcmd.CatFile(str(repo / ".git"))
    assert cat.get(head) is not None
    pid = cat._proc.pid  # type: ignore[union-attr]
    got: list[object] = []

    def read() -> None:
        try:
            got.append(cat.get(blob))
        except GitFailed as exc:
            got.append(exc)

    # The reader writes 8 MiB into a 64 KiB pipe: it blocks until read, so it is killed mid-write
    # unless this thread is slower than the whole read.
    thread = threading.Thread(target=read)
    thread.start()
    os.kill(pid, signal.SIGKILL)
    thread.join(30)
    assert len(got) == 1
    outcome = got[0]
    if not isinstance(outcome, GitFailed):
        assert isinstance(outcome, tuple) and len(outcome[2]) == 8 << 20
    fresh = cat.get(head)
    assert fresh is not None and fresh[1] == "commit"
    assert cat._proc.pid != pid  # type: ignore[union-attr]
    cat.close()
    assert pid not in zombies()


def test_git_missing_from_path_is_a_git_failure(objects: tuple[Path, str, str],
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    """No git on PATH: the reader's start fails as ``gitcmd.run`` does (GitFailed, one line), never a
    bare FileNotFoundError through the command's error handling."""
    repo, head, _ = objects
    monkeypatch.setenv("PATH", "/nonexistent")
    cat = gitcmd.CatFile(str(repo / ".git"))
    with pytest.raises(GitFailed, match="not installed or not on PATH"):
        cat.get(head)
    cat.close()


def test_a_relative_path_entry_finds_git_as_subprocess_would(objects: tuple[Path, str, str], tmp_path: Path,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    """PATH with a relative entry (``bin``, searched from the working folder, as execvp does) before the
    real git's folder: an empty or missing relative folder is passed over; git is found after it."""
    repo, head, _ = objects
    real = os.path.dirname(subprocess.run(["sh", "-c", "command -v git"], capture_output=True, text=True,
                                          check=True).stdout.strip())
    (tmp_path / "bin").mkdir()
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("PATH", os.pathsep.join(["bin", "nothere", "", real]))
    cat = gitcmd.CatFile(str(repo / ".git"))
    got = cat.get(head)
    cat.close()
    assert got is not None and got[1] == "commit"
