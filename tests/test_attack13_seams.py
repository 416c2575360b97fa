"""An outsider's pass (session 12, attack13) on the places where two features meet.

- forged git objects x the arbiter's state hook: the hook derives every pushed *commit*, but the object the
  state ref is moved to was never required to be a commit. ``git push origin <annotated tag>:refs/gitwork/state``
  (the tag wrapping the arbiter's own tip, or an honest clone's next state commit) was accepted, and from
  then on every clone's ``gw sync``, ``claim``, ``done`` and a fresh clone's ``gw init`` were exit 8
  ("object ... is a tag, expected a commit"), and the arbiter's next honest push too: one plain ``git push``
  stopped every machine until someone moved the arbiter's ref by hand.

Each scenario runs real clones, a real bare arbiter under ``gw hooks install --server`` and the real ``gw``
(or plain ``git``) in child processes; nothing is mocked.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from conftest import git, run_gw, tip
from test_sync import STATE, gw_ok

CORRUPT = 8


def hooked(remote: Path) -> None:
    done = run_gw(remote.parent, "hooks", "install", "--server", str(remote))
    assert done.returncode == 0, done.stderr


def plain_push(repo: Path, url: str, *refspecs: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["git", "push", "--porcelain", url, *refspecs], cwd=repo, capture_output=True, text=True)


# --- forged objects x the state hook: what the state ref may point at -------------------------------------------


@pytest.mark.parametrize("wrapped", ["arbiter-tip", "next-commit", "tree"])
def test_the_state_ref_is_moved_only_to_a_commit(machine_a: Path, remote: Path, url: str, wrapped: str) -> None:
    """The hook peeled whatever the ref was moved to (``rev-list NEW``) and judged the commits behind it, so an
    annotated tag of the arbiter's own tip (no new commit: nothing to judge) or of the clone's honest next
    commit (judged sound) was accepted as the ref's target. Every reader of the state takes the ref for a
    commit: from then on every ``gw sync``/``claim`` on every clone was exit 8. Now the ref moves only to a
    commit; the push is refused in the hook's words and the arbiter's ref is untouched."""
    a = machine_a
    hooked(remote)
    item = gw_ok(a, "new", "work")["item"]  # local only: the clone's next state commit, not yet on the arbiter
    before = tip(remote)
    assert before is not None and tip(a) != before
    target = {"arbiter-tip": before, "next-commit": tip(a), "tree": f"{tip(a)}^{{tree}}"}[wrapped]
    forged = (git(a, "rev-parse", target) if wrapped == "tree"
              else git(a, "-c", "user.name=m", "-c", "user.email=m@x", "tag", "-a", "-m", "state", "forged", target)
              or git(a, "rev-parse", "forged"))
    done = plain_push(a, url, f"+{forged}:{STATE}")
    assert done.returncode != 0, done.stdout + done.stderr
    assert "a commit" in done.stderr, done.stderr
    assert tip(remote) == before and git(remote, "cat-file", "-t", STATE) == "commit"
    claimed = gw_ok(a, "claim", item, "--as", "bob")  # the clone goes on: its news and claim land
    assert tip(remote) == claimed["commit"]
