"""An attacker's pass (session 5) over the batch arbiter's inbox: requests forged with plain git and
pushed to a bare arbiter carrying gitwork's server hooks (``arbiter: batch``), then honest clones.

A forged request must be refused by pre-receive (nothing written) or decided like any other; it must
never stop the applier for everyone else.
"""

from __future__ import annotations

import json
from pathlib import Path

from conftest import git, run_gw
from gitwork.inbox import EMPTY_TREE, INBOX_PREFIX
from test_batch_arbiter import _push, refs, state_log, template, world  # noqa: F401 - fixtures

__all__ = ["template", "world"]


def _forged(clone: Path, doc: dict, committer_when: str, author_when: str = "1796000000") -> str:
    """A request commit written byte by byte (``hash-object --literally``), as a hostile clone can."""
    who = f"{doc['as']} <{doc['as']}@gitwork.invalid>"
    body = (f"tree {EMPTY_TREE['sha1']}\nauthor {who} {author_when} +0000\ncommitter {who} {committer_when} +0000\n\n"
            f"gitwork request {doc['id']}\n\n{json.dumps(doc)}\n")
    return git(clone, "hash-object", "--literally", "-w", "-t", "commit", "--stdin", input=body.encode()).strip()


def test_a_request_with_a_date_that_is_no_number_is_refused_and_the_inbox_keeps_working(world: dict[str, Path]) -> None:
    """The applier read every waiting request's committer date with int(): one request dated ``soon``
    (pre-receive checked only the name and email) crashed every later post-receive, so no clone's
    command was ever answered again."""
    clone, bare = world["c"], world["remote"]
    for n, when in enumerate(["soon", "-", "1e9", "99999999999999999999999999"]):
        doc = {"op": "claim", "id": f"c-baddate{n:06d}", "as": "mallory", "next": True}
        before = refs(bare)
        done = _push(clone, f"{_forged(clone, doc, when)}:{INBOX_PREFIX}{doc['id']}")
        assert done.returncode != 0 and "Traceback" not in done.stderr, done.stderr
        assert "date" in done.stderr, done.stderr
        assert refs(bare) == before
    # An honest clone is still answered.
    done = run_gw(world["b"], "claim", "--next", "--json", env={"GW_AGENT": "bob"})
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["holder"] == "bob"
    assert any(line.startswith("claim ") and "by bob" in line for line in state_log(bare))


def test_a_replayed_request_after_its_answer_is_never_granted_twice(world: dict[str, Path]) -> None:
    """A clone pushes an answered request again (the same commit under a new inbox name, and under its
    own name once the answer was pruned): the engine's command id answers the first result, no second
    lease is granted."""
    clone, bare = world["c"], world["remote"]
    done = run_gw(clone, "claim", "--next", "--json", env={"GW_AGENT": "carol"})
    assert done.returncode == 0, done.stderr
    first = json.loads(done.stdout)
    (ref,) = [r for r in git(bare, "for-each-ref", "--format=%(refname)", INBOX_PREFIX).split()]
    request = git(bare, "rev-parse", f"{ref}^")
    claims = [line for line in state_log(bare) if line.startswith("claim ")]
    # The arbiter prunes the answer: the ref is gone (as after ANSWER_KEPT), the request is replayed.
    git(bare, "update-ref", "-d", ref)
    git(clone, "fetch", "-q", "origin", f"{request}")  # the clone has the request object already anyway
    done = _push(clone, f"{request}:{ref}")
    assert "Traceback" not in done.stderr
    assert [line for line in state_log(bare) if line.startswith("claim ")] == claims, "granted twice"
    shown = run_gw(clone, "show", first["item"], "--json", env={"GW_AGENT": "carol"})
    assert json.loads(shown.stdout)["lease"]["fence"] == first["fence"]
