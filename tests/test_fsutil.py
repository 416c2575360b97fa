"""One write-whole-or-not-at-all (issue 26, point 4): ``gitwork.fsutil.write_atomic``.

Racing writers on one path (separate processes), a reader beside them: every read is one whole
version, and no temporary file is left. A writer killed with ``kill -9`` at an arbitrary moment leaves
the old file intact. A failure (bad data, a target that cannot be replaced) removes the temporary
file. And no module of gitwork writes a temporary file and renames it by hand: the grep below finds
every ``os.replace``/``rename``/``link``/``".tmp"`` outside fsutil.
"""

from __future__ import annotations

import hashlib
import multiprocessing
import os
import re
import signal
import stat
import time
from pathlib import Path

import pytest

from gitwork import fsutil
from gitwork.workplane import Workplane

FORK = multiprocessing.get_context("fork")
GITWORK = Path(__file__).resolve().parent.parent / "gitwork"


def version(writer: int, n: int, size: int) -> bytes:
    """A self-checking file body: a header, filler, and the digest of both."""
    head = f"{writer}:{n}:".encode()
    body = head + bytes([65 + (writer * 7 + n) % 26]) * size
    return body + b"|" + hashlib.sha256(body).hexdigest().encode()


def whole(data: bytes) -> bool:
    body, _, digest = data.rpartition(b"|")
    return bool(body) and hashlib.sha256(body).hexdigest().encode() == digest


def _writer(path: str, writer: int, rounds: int, size: int, fsync: bool) -> None:
    for n in range(rounds):
        fsutil.write_atomic(path, version(writer, n, size), fsync=fsync)


def temporaries(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if fsutil.is_temp(p.name))


@pytest.mark.parametrize("fsync", [False, True])
def test_racing_writers_leave_one_whole_version_and_no_temporary_file(tmp_path: Path, fsync: bool) -> None:
    target = tmp_path / "shared.json"
    fsutil.write_atomic(str(target), version(99, 0, 4096), fsync=fsync)
    writers = [FORK.Process(target=_writer, args=(str(target), w, 60, 48 * 1024, fsync)) for w in range(4)]
    for proc in writers:
        proc.start()
    reads, torn = 0, 0
    while any(proc.is_alive() for proc in writers):
        data = target.read_bytes()
        reads += 1
        torn += not whole(data)
    for proc in writers:
        proc.join(30)
        assert proc.exitcode == 0
    assert reads > 0 and torn == 0
    assert whole(target.read_bytes())
    assert temporaries(tmp_path) == []
    assert sorted(p.name for p in tmp_path.iterdir()) == ["shared.json"]


def _loop_big(path: str) -> None:
    n = 0
    while True:
        fsutil.write_atomic(path, version(n % 2, n, 6 * 1024 * 1024), fsync=False)
        n += 1


def test_a_writer_killed_at_any_moment_leaves_the_old_file_whole(tmp_path: Path) -> None:
    target = tmp_path / "big"
    old = version(7, 0, 1024)
    fsutil.write_atomic(str(target), old, fsync=True)
    for delay in (0.005, 0.02, 0.05, 0.08, 0.13):
        proc = FORK.Process(target=_loop_big, args=(str(target),))
        proc.start()
        time.sleep(delay)
        assert proc.pid is not None
        os.kill(proc.pid, signal.SIGKILL)
        proc.join(10)
        assert proc.exitcode == -signal.SIGKILL
        data = target.read_bytes()
        assert whole(data), f"torn file after a kill -9 at {delay}s"
        # whatever the killed writer left is a temporary file by name, which folder scans skip
        assert all(fsutil.is_temp(p.name) for p in tmp_path.iterdir() if p.name != "big")
    fsutil.write_atomic(str(target), old, fsync=False)  # a killed writer's leftovers never block the next
    assert target.read_bytes() == old


def test_a_failed_write_removes_its_temporary_file_and_keeps_the_old_one(tmp_path: Path) -> None:
    target = tmp_path / "kept"
    target.write_bytes(b"old")
    with pytest.raises(TypeError):
        fsutil.write_atomic(str(target), 12345, fsync=True)  # type: ignore[arg-type]
    assert target.read_bytes() == b"old" and temporaries(tmp_path) == []
    folder = tmp_path / "a-folder"
    (folder / "inside").mkdir(parents=True)
    with pytest.raises(OSError):
        fsutil.write_atomic(str(folder), b"new", fsync=False)  # a non-empty folder cannot be replaced
    assert (folder / "inside").is_dir() and temporaries(tmp_path) == []
    with pytest.raises(FileNotFoundError):
        fsutil.write_atomic(str(tmp_path / "no-such-folder" / "x"), b"new", fsync=False)


def test_mode_is_exact_from_the_start_and_the_default_follows_the_umask(tmp_path: Path) -> None:
    old = os.umask(0o022)
    try:
        fsutil.write_atomic(str(tmp_path / "secret"), "s", fsync=False, mode=0o600)
        fsutil.write_atomic(str(tmp_path / "hook"), "#!/bin/sh\n", fsync=False, mode=0o755)
        fsutil.write_atomic(str(tmp_path / "plain"), "p", fsync=False)
        os.umask(0o077)
        fsutil.write_atomic(str(tmp_path / "hook2"), "#!/bin/sh\n", fsync=False, mode=0o755)
    finally:
        os.umask(old)
    modes = {name: stat.S_IMODE((tmp_path / name).stat().st_mode) for name in ("secret", "hook", "plain", "hook2")}
    assert modes == {"secret": 0o600, "hook": 0o755, "plain": 0o644, "hook2": 0o755}
    assert (tmp_path / "secret").read_text() == "s"


def test_a_symlink_target_is_replaced_not_followed(tmp_path: Path) -> None:
    victim = tmp_path / "victim"
    victim.write_text("untouched")
    (tmp_path / "link").symlink_to(victim)
    fsutil.write_atomic(str(tmp_path / "link"), b"mine", fsync=False)
    assert victim.read_text() == "untouched"
    assert not (tmp_path / "link").is_symlink() and (tmp_path / "link").read_bytes() == b"mine"


def _create(path: str, writer: int, out: multiprocessing.queues.Queue) -> None:  # type: ignore[type-arg]
    out.put((writer, fsutil.write_new(path, f"writer {writer}\n")))


def test_write_new_has_exactly_one_winner_among_racing_creators(tmp_path: Path) -> None:
    target = tmp_path / "clone-id"
    results = FORK.Queue()
    procs = [FORK.Process(target=_create, args=(str(target), w, results)) for w in range(6)]
    for proc in procs:
        proc.start()
    won = [results.get(timeout=30) for _ in procs]
    for proc in procs:
        proc.join(10)
    winners = [w for w, made in won if made]
    assert len(winners) == 1
    assert target.read_text() == f"writer {winners[0]}\n"
    assert temporaries(tmp_path) == []


# --- a site that used a fixed ``.tmp`` name: racing `shadow add` of one clone ---------------------------


def _add_shadows(repo: str, source: str, rounds: int) -> None:
    from gitwork.importers import shadow

    with Workplane(repo, agent="lead") as wp:
        for _ in range(rounds):
            shadow.add(wp, "bd", "jsonl", source)


def test_racing_shadow_definitions_never_fail_nor_tear(repo: Path, tmp_path: Path) -> None:
    source = tmp_path / "export.jsonl"
    source.write_text("")
    with Workplane(str(repo), agent="lead") as wp:
        wp.do("init")
    procs = [FORK.Process(target=_add_shadows, args=(str(repo), str(source), 150)) for _ in range(4)]
    for proc in procs:
        proc.start()
    for proc in procs:
        proc.join(60)
    assert [proc.exitcode for proc in procs] == [0] * 4  # a fixed `shadows.json.tmp` made some crash
    folder = repo / ".git" / "gitwork"
    assert temporaries(folder) == [] and not list(folder.glob("*.tmp"))
    with Workplane(str(repo), agent="lead") as wp:
        from gitwork.importers import shadow

        assert set(shadow.shadows(wp)) == {"bd"}


# --- declared once -------------------------------------------------------------------------------------

# Renames that are not a temporary-file write, each with why.
ALLOWED = {
    # git's own loose-object protocol (tmp_obj_* names git's prune knows, shared permissions, link-or-rename)
    ("objects.py", "os.replace(tmp, path)"),
    # a foreign hook moved aside to <hook>.legacy, kept exactly as it was
    ("hooks_install.py", "os.replace(path, legacy)"),
    # git's ref-lock protocol (REF.lock made by link from a flock-ed file, renamed over the ref), store.py
    ("store.py", "os.link(mine, lock_path)"),
    ("store.py", "os.replace(lock_path, lock_path[:-5])"),
}
HAND_ROLLED = re.compile(r"os\.(replace|rename|link)\(|\.rename\(|\.replace\(tmp|[\"']\.tmp[\"']|\.tmp\"")


def test_no_module_writes_a_temporary_file_and_renames_it_by_hand() -> None:
    found = []
    for path in sorted(GITWORK.rglob("*.py")):
        if path.name == "fsutil.py":
            continue
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            if HAND_ROLLED.search(line) and not any(path.name == name and text in line for name, text in ALLOWED):
                found.append(f"{path.relative_to(GITWORK.parent)}:{number}: {line.strip()}")
    assert found == [], "use gitwork.fsutil.write_atomic / write_new:\n" + "\n".join(found)
