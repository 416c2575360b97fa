"""``gw run`` makes one state commit before its agent starts (issue 27 point 4).

The reservation, the lease (kept, or claimed) and ``launching`` under it were three commits, each a
compare-and-swap (and with an arbiter, a push) on the way to the agent's first line. They are one
command now, ``exec-reserve`` with ``launch``: all or nothing, decided by the arbiter when there is
one, and derived by its server hook like any other command. What it must keep: the lease the agent
runs under is granted by that command (its fence in ``launching``), a refused claim records nothing
at all, and the arbiter's replay derives the very same lease.
"""

from __future__ import annotations

import json
import signal
from pathlib import Path

from conftest import git, make_repo, run_gw, tip
from gitwork.cli.main import main
from gitwork.codec import load_yaml
from gitwork.hooks_install import install_server
from gitwork.launch.build import current
from gitwork.records.executions import execution_path
from gitwork.serve.timeline import history_spans
from gitwork.workplane import Workplane

STATE = "refs/gitwork/state"


def commands_since(repo: Path, base: str | None) -> list[dict[str, object]]:
    """The command documents of the state commits after ``base``, oldest first (the ``Command:`` line)."""
    span = f"{base}..{STATE}" if base else STATE
    docs = []
    for body in git(repo, "log", "--reverse", "--format=%B%x00", span).split("\0"):
        for line in body.splitlines():
            if line.startswith("Command: "):
                docs.append(json.loads(line[len("Command: "):]))
    return docs


def one_item(repo: Path, **fields: object) -> str:
    with Workplane(str(repo), agent="setup") as wp:
        wp.do("init")
        return str(wp.do("new", title="run me", **fields).result["item"])


def test_gw_run_commits_once_before_the_agent_starts(repo: Path) -> None:
    """Killed just before it starts the agent, ``gw run`` has made exactly one state commit, and that
    one holds the reservation, alice's new lease and ``launching`` under its fence."""
    item = one_item(repo)
    before = tip(repo)
    crashed = run_gw(repo, "run", item, "--backend", "subprocess", "--as", "alice", "--ttl", "20m", "--id", "x-once",
                     "--", "cat", env={"GW_CRASH_AT": "after-launching"})
    assert crashed.returncode == -signal.SIGKILL, crashed.stderr
    [command] = commands_since(repo, before)
    assert (command["op"], command["launch"], command["ttl"], command["as"]) == ("exec-reserve", True, 1200, "alice")
    with Workplane(str(repo)) as wp:
        lease = wp.lease(item)
        assert lease is not None and (lease.holder, lease.epoch, lease.grant) == ("alice", 1, command["id"])
        record = wp.context().file(execution_path("x-once"))
        assert record is not None
        doc = load_yaml(record)
        assert (doc["state"], doc["fence"], doc["epoch"], doc["holder"]) == ("launching", lease.fence, 1, "alice")
        types = [e["type"] for e in wp.context().records(item)]
        assert types[-3:] == ["execution", "claim", "execution"]  # reserved, the grant, launching: one command
        assert {e["cmd"] for e in wp.context().records(item)[-3:]} == {command["id"]}
        [span] = history_spans(wp, "alice", None)["spans"]
        assert (span["item"], span["epoch"], span["holder"]) == (item, 1, "alice") and span["from"]
    # The dead run is settled and its retry launches under the lease it holds: still one more commit
    # for the whole launch, the lease kept (no second grant).
    base = tip(repo)
    again = run_gw(repo, "run", item, "--backend", "subprocess", "--as", "alice", "--id", "x-once", "--json", "--",
                   "sh", "-c", "exit 0")
    assert again.returncode == 0, again.stderr
    ops = [(c["op"], c.get("to"), c.get("launch")) for c in commands_since(repo, base)]
    assert ops[:2] == [("exec-state", "failed", None), ("exec-reserve", None, True)], ops
    assert all(op != "claim" for op, _, _ in ops)
    with Workplane(str(repo)) as wp:
        lease = wp.lease(item)
        assert lease is not None and lease.epoch == 1


def test_a_refused_claim_records_no_reservation(repo: Path) -> None:
    """All or nothing: an item waiting on an open dependency cannot be claimed, so ``gw run`` is refused
    with the claim's code (6) and the state ref does not move (no ``reserved`` or ``failed`` record)."""
    with Workplane(str(repo), agent="setup") as wp:
        wp.do("init")
        first = wp.do("new", title="first").result["item"]
        item = wp.do("new", title="after first", depends_on=[first]).result["item"]
    before = tip(repo)
    done = run_gw(repo, "run", item, "--backend", "subprocess", "--as", "alice", "--", "cat")
    assert done.returncode == 6, done.stderr
    assert "depends on" in done.stderr and len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert tip(repo) == before
    listed = run_gw(repo, "runs", "--json")
    assert listed.returncode == 0 and json.loads(listed.stdout) == [], listed.stdout


def test_the_arbiter_derives_the_launch_commit_under_the_clients_default_ttl(tmp_path: Path) -> None:
    """The launch commit grants a lease with the client's own default ttl; the arbiter's server hook
    replays it under its own settings and must derive the same lease, so the command records the ttl."""
    bare = make_repo(tmp_path / "arbiter.git", bare=True)
    install_server(str(bare))
    clone = make_repo(tmp_path / "alice")
    git(clone, "remote", "add", "origin", f"file://{bare}")
    git(clone, "config", "gitwork.agent", "alice")
    assert main(["init", "--remote", "origin", "-C", str(clone)]) == 0
    with Workplane(str(clone)) as wp:
        item = wp.do("new", title="long job").result["item"]
    assert main(["sync", "-C", str(clone)]) == 0
    with Workplane(str(clone), default_ttl=7200) as wp:
        launched = wp.record("exec-reserve", item=item, execution="x-derived", command=["cat"], backend="subprocess",
                             host="h", launcher={"host": "h", "pid": "1", "start": "1"}, build=current(), launch=True)
    assert launched.command["ttl"] == 7200 and launched.result["state"] == "launching"
    assert tip(bare) == tip(clone)  # the push landed: the hook derived exactly this commit
    lease_file = next(p for p in git(bare, "ls-tree", "-r", "--name-only", STATE).splitlines()
                      if f"/{item}/" in p and p.endswith("lease.yaml"))
    assert "ttl: 7200" in git(bare, "cat-file", "blob", f"{STATE}:{lease_file}")


def test_a_ttl_without_launch_is_refused_and_records_nothing(repo: Path) -> None:
    item = one_item(repo)
    before = tip(repo)
    with Workplane(str(repo), agent="alice") as wp:
        try:
            wp.record("exec-reserve", item=item, execution="x-nolaunch", command=["cat"], backend="subprocess",
                      host="h", build=current(), ttl="20m")
        except Exception as error:  # Invalid (5): the ttl of a lease no command grants
            assert getattr(error, "code", None) == 5 and "launch" in str(error), error
        else:
            raise AssertionError("a ttl without launch was accepted")
    assert tip(repo) == before
