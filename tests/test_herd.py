"""The loss path of a claim through the arbiter: the back-off a loser waits, and the clone's push turn.

A herd of claimers costs every loser a push and a fetch per round; `sync.ArbiterRef` makes the
processes of one clone take turns (`pushturn.PushTurn`, a flock in the common git directory) and draws a
loser's wait from a sequence seeded by its command id (`sync.backoff`). The turn is an optimisation,
never a condition of safety: a sibling stopped while holding it must not stop the clone.
(The herd itself, every item granted once across 3 clones x 4 processes, is tests/test_sync_daemon.py.)
"""

from __future__ import annotations

import random
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import git, make_repo
from gitwork import pushturn, sync
from gitwork.pushturn import BACKOFF_CAP, PushTurn
from gitwork.sync import after_a_win, backoff
from gitwork.workplane import Workplane


def test_the_back_off_is_seeded_full_jitter_shorter_for_a_longer_loser_and_a_winner_waits_longest() -> None:
    round_trip = 0.4
    first = [backoff(lost, round_trip, random.Random("c-0001")) for lost in range(1, 12)]
    again = [backoff(lost, round_trip, random.Random("c-0001")) for lost in range(1, 12)]
    assert first == again  # the same command id draws the same waits: no wall clock in it
    assert first != [backoff(lost, round_trip, random.Random("c-0002")) for lost in range(1, 12)]
    draws = random.Random(7)
    for lost, cap in [(1, round_trip / 2), (2, round_trip / 4), (3, round_trip / 8), (50, round_trip / 256)]:
        waits = [backoff(lost, round_trip, draws) for _ in range(400)]
        assert all(0 <= w <= cap for w in waits), (lost, max(waits))
        assert max(waits) > cap * 0.9  # full jitter: the whole range up to the cap is used
    assert all(backoff(1, 60.0, draws) <= BACKOFF_CAP for _ in range(100))  # a slow remote: capped
    # A clone that just won waits longer than any loser, so the losers' pushes go first.
    wins = [after_a_win(round_trip, True, draws) for _ in range(400)]
    assert min(wins) >= 2 * round_trip > round_trip / 2 and max(wins) <= 2.5 * round_trip
    alone = [after_a_win(round_trip, False, draws) for _ in range(400)]  # no herd: lost rounds only
    assert min(alone) >= round_trip > round_trip / 2 and max(alone) <= 1.25 * round_trip


def test_the_turn_says_wait_only_after_a_sibling_won_a_contended_round(tmp_path: Path) -> None:
    turn = PushTurn(str(tmp_path / "turn.lock"))
    assert turn.take() and not turn.take()  # taken once per process
    turn.mark_won("a" * 40, 0.3, 0)
    assert turn.won_by_sibling("a" * 40) is None  # nobody else pushing: the next claim goes at once
    turn.mark_lost()
    turn.mark_won("b" * 40, 0.3, 0)
    assert turn.won_by_sibling("b" * 40) == (pytest.approx(0.3), False)  # other clones contend: let them go
    assert turn.won_by_sibling("c" * 40) is None  # the tip is not this clone's
    fresh = PushTurn(str(tmp_path / "fresh.lock"))
    assert fresh.take()
    fresh.mark_won("d" * 40, 0.2, 3)  # never lost, but its push carried three waiting commands: a herd
    assert fresh.won_by_sibling("d" * 40) == (pytest.approx(0.2), True)
    fresh.give()
    turn.give()
    assert turn.won_by_sibling("b" * 40) is None  # read only while holding the turn


HOLD = """
import sys
from gitwork.pushturn import PushTurn
turn = PushTurn(sys.argv[1])
turn.take()
print("held", flush=True)
sys.stdin.read()
"""


def test_a_sibling_stuck_holding_the_turn_does_not_stop_the_clone(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    bare = make_repo(tmp_path / "arbiter.git", bare=True)
    repo = make_repo(tmp_path / "clone")
    git(repo, "remote", "add", "origin", str(bare))
    with Workplane(str(repo), agent="alice") as wp:
        sync.configure_remote(wp, "origin")
        wp.do("init")
        item = wp.do("new", title="one").result["item"]
        sync.Arbiter(wp).sync()
        path = str(Path(wp.repo.gitwork_dir(), pushturn.TURN_FILE))
        holder = subprocess.Popen([sys.executable, "-c", HOLD, path], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                  text=True)
        try:
            assert holder.stdout is not None and holder.stdout.readline() == "held\n"
            probe = PushTurn(path)
            monkeypatch.setattr(pushturn, "TURN_WAIT", 0.05)
            assert probe.take() and probe.handle is None  # the turn is held: went on without it
            applied = wp.do("claim", item=item)  # through the arbiter, without the turn
        finally:
            holder.communicate("", timeout=30)
    assert applied.result["fence"] == 1
    assert git(bare, "rev-parse", "refs/gitwork/state") == applied.commit
    assert probe.take() and probe.handle is not None  # the holder exited: the kernel dropped its lock
    probe.give()
