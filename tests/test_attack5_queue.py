"""An attacker's pass (session 5) over the publish queue's records: entries, its sequence and the
publisher's lease forged by hand on the state ref. ``gw queue`` (and every op reading them) must refuse
a bad one as corrupt (exit 8, naming its file), never exit 1 on a Python error; the arbiter's file check
names the same problem.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from conftest import git, gw_here
from gitwork import codec
from gitwork.model import state_file_problem
from test_attack5_ledger import ENV, STATE, forge, ok

CORRUPT = 8
ENTRY = "queue/entries/00000001.yaml"


def good_entry(item: str) -> str:
    return (f"seq: 1\nsession: s-0123456789abcdef\nitem: {item}\nholder: alice\nfence: 1\nepoch: 1\n"
            f"commit: {'a' * 40}\ninto: main\nenqueued_at: \"2026-12-02T00:00:00Z\"\ncmd: c-0123456789abcdef\n")


BAD = {
    "seq is text": ("seq: 1\n", "seq: abc\n"),
    "seq is a list": ("seq: 1\n", "seq: [1]\n"),
    "seq is not the file's": ("seq: 1\n", "seq: 7\n"),
    "no session": ("session: s-0123456789abcdef\n", ""),
    "into is a list": ("into: main\n", "into: [main]\n"),
}


@pytest.mark.parametrize("case", list(BAD))
def test_a_forged_queue_entry_is_corrupt_not_a_crash(repo: Path, case: str) -> None:
    ok(repo, "init")
    item = ok(repo, "new", "victim").strip()
    old, new = BAD[case]
    body = good_entry(item).replace(old, new)
    forge(repo, ENTRY, body.encode())
    before = git(repo, "rev-parse", STATE)
    for args in (["queue"], ["queue", "--json"]):
        done = gw_here(repo, *args, env=ENV)
        assert done.returncode == CORRUPT, (args, done.stdout, done.stderr)
        assert "internal error" not in done.stderr and ENTRY in done.stderr, done.stderr
        assert len(done.stderr.strip().splitlines()) == 1
    assert item[:8] in ok(repo, "list")
    assert git(repo, "rev-parse", STATE) == before
    assert state_file_problem(ENTRY, codec.load_yaml(body.encode()))


def test_sound_queue_records_pass_the_check() -> None:
    assert state_file_problem(ENTRY, codec.load_yaml(good_entry("w-0123456789abcdef").encode())) is None
    assert state_file_problem("queue/seq.yaml", {"next": 2}) is None
    assert state_file_problem("queue/seq.yaml", {"next": "abc"})
    assert state_file_problem("queue/publisher.yaml", {"epoch": 3, "state": "held"}) is None
    assert state_file_problem("queue/publisher.yaml", {"epoch": "abc"})
