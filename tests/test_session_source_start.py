"""A multi-step session's source branch is started once, by whichever process gets its folder first
(sessions.plan._source_for). A second process that finds the folder taken must wait for the first's
record, not die with an internal error: the CI run of 2026-12-02 08:18 failed the end-to-end steps test
with "internal: could not find a free session id" from that race."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

from conftest import git, held_project
from gitwork import sessions
from gitwork.errors import Held
from gitwork.fsutil import write_atomic
from gitwork.sessions import MANIFEST, session_dir
from gitwork.sessions.plan import _started
from gitwork.workplane import Workplane


@pytest.fixture
def started(tmp_path: Path) -> tuple[Workplane, str, str]:
    repo, item = held_project(tmp_path)
    return Workplane(str(repo), agent="alice"), item, str(repo)


def test_a_named_session_whose_folder_is_taken_is_held_not_an_internal_error(started: tuple[Workplane, str, str]) -> None:
    wp, item, top = started
    name = "20261202-081838-proj-alice-s3-p1"
    Path(session_dir(top, name)).mkdir(parents=True)
    with pytest.raises(Held) as raised:
        sessions.start(wp, item, session_id=name)
    assert raised.value.code == 75 and name in raised.value.message
    assert git(top, "branch", "--list", f"session/{name}") == ""  # nothing made for the loser


def test_the_loser_waits_for_the_winners_record(started: tuple[Workplane, str, str]) -> None:
    wp, item, top = started
    name = "20261202-081838-proj-alice-s3-p1"
    record = sessions.start(wp, item, session_id=name)
    manifest = Path(session_dir(top, name)) / MANIFEST
    text = manifest.read_bytes()
    manifest.unlink()  # the winner has its folder and worktree, and writes its record a moment later

    def winner() -> None:
        time.sleep(0.3)
        write_atomic(str(manifest), text, fsync=False)  # as Session.save writes it: never seen half written

    thread = threading.Thread(target=winner)
    thread.start()
    try:
        assert _started(top, name).branch == record["branch"]
    finally:
        thread.join()
    manifest.unlink()
    with pytest.raises(Held):  # a start that died half way: a clear refusal, after the wait
        _started(top, name, wait=0.2)
