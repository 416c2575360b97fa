"""One git runner, one ``cat-file --batch`` parser (issue 26, point 4).

Every reader of ``git cat-file --batch`` output (the long-lived :class:`gitcmd.CatFile`, the one-shot
:func:`gitcmd.read_batch` behind ``derive.read_many`` and the cache's pipelined read) goes through
one parser, checked here corner by corner against a real git: a missing object (also a ``rev:path``
with spaces), a blob holding newlines and bytes that look like a header, an empty blob, a blob larger
than a pipe, and a git that dies in the middle of an object (a truncated loose object: git prints
the header, part of the content, then ``fatal: unable to stream``): a clear ``GitFailed``, never a
torn object. And no module outside gitcmd starts git or parses ``--batch`` output itself.
"""

from __future__ import annotations

import os
import re
import threading
from pathlib import Path

import pytest

from conftest import git, make_repo
from gitwork import cachefill, derive, gitcmd
from gitwork.errors import GitFailed

GITWORK = Path(__file__).resolve().parent.parent / "gitwork"
LARGE = 3 * 1024 * 1024 + 17  # past any pipe buffer, not a round number


@pytest.fixture
def objects(tmp_path: Path) -> tuple[str, dict[str, bytes], str]:
    """A repository holding the awkward blobs, committed (so ``HEAD:path`` names them); its git dir."""
    repo = make_repo(tmp_path / "r")
    tricky_header = b"0123456789012345678901234567890123456789 blob 5\nabc\n"  # a header, inside a blob
    blobs = {
        "tricky": tricky_header + b"x missing\n\n\n" + b"deadbeef ambiguous\n",
        "empty": b"",
        "large": os.urandom(LARGE),
        "with space.txt": b"a name with a space\n",
        "no-newline": b"ends without one",
    }
    for name, data in blobs.items():
        (repo / name).write_bytes(data)
    git(repo, "add", "-A")
    git(repo, "-c", "user.name=t", "-c", "user.email=t@example.com", "commit", "-q", "-m", "blobs")
    oids = {name: git(repo, "rev-parse", f"HEAD:{name}").strip() for name in blobs}
    return str(repo / ".git"), {oids[name]: data for name, data in blobs.items()}, oids["large"]


def test_read_batch_returns_every_awkward_object_exactly(objects: tuple[str, dict[str, bytes], str]) -> None:
    git_dir, blobs, _ = objects
    missing = ["0" * 40, "HEAD:no such file", "HEAD:with space.txt-not", "not-a-rev"]
    names = [*blobs, *missing, "HEAD:with space.txt", *blobs]  # repeated names get the same answer
    found = gitcmd.read_batch(git_dir, names)
    assert {name: found[name][2] for name in blobs} == blobs
    assert all(found[name][1] == "blob" and found[name][0] == name for name in blobs)
    assert found["HEAD:with space.txt"][2] == b"a name with a space\n"
    assert not set(missing) & set(found)
    assert gitcmd.read_batch(git_dir, []) == {}
    assert gitcmd.read_batch(git_dir, ["HEAD\nHEAD"]) == {}  # a name with a newline cannot exist


def test_catfile_reads_the_same_objects_one_by_one(objects: tuple[str, dict[str, bytes], str]) -> None:
    git_dir, blobs, _ = objects
    cat = gitcmd.CatFile(git_dir)
    try:
        for _ in range(2):  # the same process answers again after a large object
            for oid, data in blobs.items():
                assert cat.get(oid) == (oid, "blob", data)
            assert cat.get("0" * 40) is None
            assert cat.get("HEAD:no such file") is None
            assert cat.get("HEAD:with space.txt") is not None
    finally:
        cat.close()


def test_the_other_readers_are_the_same_parser(objects: tuple[str, dict[str, bytes], str]) -> None:
    git_dir, blobs, _ = objects
    names = [*blobs, "0" * 40]
    assert derive.read_many(git_dir, names) == blobs
    assert cachefill._read_batch(git_dir, names) == {oid: ("blob", data) for oid, data in blobs.items()}


def _truncate_loose(git_dir: str, oid: str) -> None:
    """Cut a loose object in half: git still reads its header, then dies while streaming the content."""
    path = os.path.join(git_dir, "objects", oid[:2], oid[2:])
    os.chmod(path, 0o644)
    with open(path, "r+b") as handle:
        handle.truncate(os.path.getsize(path) // 2)


def test_a_git_that_dies_mid_object_is_a_clear_error_never_a_torn_object(
        objects: tuple[str, dict[str, bytes], str]) -> None:
    git_dir, blobs, large = objects
    _truncate_loose(git_dir, large)
    small = next(oid for oid, data in blobs.items() if data == b"ends without one")
    with pytest.raises(GitFailed) as raised:
        gitcmd.read_batch(git_dir, [small, large, small])
    message = str(raised.value)
    assert "\n" not in message and "unable to stream" in message and "cat-file" in message
    with pytest.raises(GitFailed):
        derive.read_many(git_dir, [small, large])
    assert cachefill._read_batch(git_dir, [small, large]) == {}  # the cache falls back to the store's own reads
    cat = gitcmd.CatFile(git_dir)
    try:
        assert cat.get(small) == (small, "blob", b"ends without one")
        with pytest.raises(GitFailed, match="unable to stream"):
            cat.get(large)
        assert cat.get(small) == (small, "blob", b"ends without one")  # a new process answers after it
    finally:
        cat.close()


def test_a_reader_whose_git_warns_at_every_read_never_blocks(tmp_path: Path) -> None:
    """git warns on stderr for an ambiguous name at each read; a long-lived reader nobody drains must
    not fill a pipe and hang (80 KB of warnings here, past a 64 KB pipe)."""
    repo = make_repo(tmp_path / "r")
    git(repo, "-c", "user.name=t", "-c", "user.email=t@example.com", "commit", "-q", "--allow-empty", "-m", "x")
    git(repo, "branch", "x")
    git(repo, "tag", "x")
    cat = gitcmd.CatFile(str(repo / ".git"))
    kinds: set[str] = set()

    def read() -> None:
        for _ in range(2200):
            got = cat.get("x")
            kinds.add(got[1] if got else "missing")

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    reader.join(60)  # bounded: a blocked reader fails the test instead of hanging the suite
    hung = reader.is_alive()
    if hung and cat._proc is not None:
        cat._proc.kill()
    cat.close()
    assert not hung, "the reader blocked on git's stderr"
    assert kinds == {"commit"}


def test_a_header_git_never_writes_is_refused_not_guessed() -> None:
    for line in (b"", b"garbage", b"0123 blob", b"zz blob 3", b"0" * 40 + b" blob -1", b"0" * 40 + b" blob 1 2"):
        with pytest.raises(GitFailed):
            gitcmd.parse_header(line, "x")
    assert gitcmd.parse_header(b"HEAD:a b c missing", "HEAD:a b c") is None
    assert gitcmd.parse_header(b"abc ambiguous", "abc") is None
    assert gitcmd.parse_header(b"f" * 64 + b" tree 0", "x") == ("f" * 64, "tree", 0)


# --- declared once -------------------------------------------------------------------------------------

STARTS_GIT = re.compile(r"[\[(]\s*[\"']git[\"']\s*,")
PARSES_BATCH = re.compile(r"[\"']cat-file[\"'],\s*[\"']--batch")


def test_only_gitcmd_starts_git_or_reads_batch_output() -> None:
    found = []
    for path in sorted(GITWORK.rglob("*.py")):
        if path.name == "gitcmd.py":
            continue
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            if STARTS_GIT.search(line) or PARSES_BATCH.search(line):
                found.append(f"{path.relative_to(GITWORK.parent)}:{number}: {line.strip()}")
    assert found == [], "run git through gitwork.gitcmd (run, read_batch, CatFile, start):\n" + "\n".join(found)
