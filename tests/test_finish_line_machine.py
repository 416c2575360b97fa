"""Every order of done / publish / release / expiry / revoke / drop / claim-by-another, by hypothesis.

A real repository (branch ``main`` checked out, sessions in real worktrees), library calls, and an
injectable clock. After every step:

- **delivered work is never re-offered**: once a session of the item was published, the item is not
  in ``ready`` and nobody can claim it, however much time passes;
- **no commit is stranded silently**: every session commit is published (reachable from ``main``),
  or its session is still open and listed by ``session list`` with its branch at the commit, or its
  drop is on the record (a ``session-drop`` event naming the commit);
- **a finish strands nothing**: after a successful ``done`` or publish, no session started under the
  lease that just ended is still open;
- ``main`` only ever moves forward.
"""

from __future__ import annotations

import datetime as dt
import shutil
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule, run_state_machine_as_test

from conftest import Clock, examples, git, make_repo
from gitwork import engine, sessions
from gitwork.errors import GwError
from gitwork.publish import finish, publish
from gitwork.queries import ready
from gitwork.workplane import Workplane
from test_sessions import T0, init_project, person_identity  # noqa: F401  (autouse fixture)

AGENTS = ("alice", "bob")
ACTORS = st.sampled_from(("holder", "holder", "alice", "bob"))  # mostly whoever holds the lease now
TTL = 900


class FinishLine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.tmp = Path(tempfile.mkdtemp(prefix="gw-finish-"))
        self.repo = init_project(make_repo(self.tmp / "proj"))
        self.clock = Clock(T0)
        self.wp = {name: Workplane(str(self.repo), now=self.clock, agent=name) for name in (*AGENTS, "admin")}
        self.wp["admin"].do("init")
        self.item = self.wp["admin"].do("new", title="Finish me").result["item"]
        self.wp["alice"].do("claim", item=self.item, ttl=TTL)  # start where the finish line is near
        self.commits: dict[str, str] = {}  # session -> its commit
        self.sessions: list[str] = []
        self.delivered = False
        self.main_history = [git(self.repo, "rev-parse", "main")]
        self.files = 0

    def teardown(self) -> None:
        for plane in self.wp.values():
            plane.close()
        shutil.rmtree(self.tmp, ignore_errors=True)

    # --- helpers ----------------------------------------------------------------------------------

    def _ended_lease_sessions_open(self, fence: int) -> list[str]:
        return [s["session"] for s in sessions.list_sessions(self.wp["alice"])
                if s.get("fence") == fence and s.get("state") in sessions.OPEN_STATES]

    def _who(self, agent: str) -> str:
        if agent != "holder":
            return agent
        lease = self.wp["admin"].lease(self.item)
        return lease.holder if lease is not None and lease.holder in AGENTS else "alice"

    def _live_fence(self, agent: str) -> int | None:
        """The fence of ``agent``'s live lease: the one a successful finish by ``agent`` ends."""
        lease = self.wp["admin"].lease(self.item)
        live = lease is not None and lease.holder == agent and lease.live_for_holder(self.clock.at, 30)
        return lease.fence if live else None  # type: ignore[union-attr]

    # --- rules ------------------------------------------------------------------------------------

    @rule(agent=st.sampled_from(AGENTS))
    def claim(self, agent: str) -> None:
        try:
            self.wp[agent].do("claim", item=self.item, ttl=TTL)
        except GwError:
            pass

    @initialize(commit=st.sampled_from((True, True, False)))
    def at_the_finish_line(self, commit: bool) -> None:
        """Every example starts with alice holding the item and (mostly) one committed session."""
        self.start_session("alice", commit, False)

    @rule(agent=ACTORS, commit=st.sampled_from((True, True, False)), shared_file=st.booleans())
    def start_session(self, agent: str, commit: bool, shared_file: bool) -> None:
        agent = self._who(agent)
        try:
            info = sessions.start(self.wp[agent], self.item, from_ref="main")
        except GwError:
            return
        self.sessions.append(info["session"])
        if not commit:
            return
        self.files += 1
        name = "a.txt" if shared_file else f"f{self.files}.txt"
        Path(info["worktree"], name).write_text(f"change {self.files} by {agent}\n")
        try:
            done = sessions.commit(self.wp[agent], [name], f"change {self.files}", session=info["session"])
        except GwError:
            return
        self.commits[info["session"]] = done["commit"]

    @rule(agent=ACTORS)
    def done(self, agent: str) -> None:
        agent = self._who(agent)
        fence = self._live_fence(agent)
        try:
            result = finish(self.wp[agent], self.item)
        except GwError:
            return
        if result.get("published"):
            self.delivered = True
        if fence is not None:
            assert self._ended_lease_sessions_open(fence) == [], "done stranded a session of the lease it ended"

    @rule(agent=ACTORS, pick=st.integers(min_value=-1, max_value=5))
    def publish(self, agent: str, pick: int) -> None:
        agent = self._who(agent)
        session = self.sessions[pick % len(self.sessions)] if pick >= 0 and self.sessions else None
        fence = self._live_fence(agent)
        try:
            publish(self.wp[agent], session)
        except GwError:
            return
        self.delivered = True
        assert fence is not None and self._ended_lease_sessions_open(fence) == []

    @rule(how=st.sampled_from(("release", "revoke", "expire")))
    def end_lease(self, how: str) -> None:
        """The lease ends without a finish: the holder releases, an admin revokes, or time runs out."""
        if how == "expire":
            self.clock.advance(TTL + 60)
            return
        try:
            if how == "release":
                self.wp[self._who("holder")].do("release", item=self.item)
            else:
                self.wp["admin"].do("revoke", item=self.item, reason="admin")
        except GwError:
            pass

    @rule(agent=ACTORS, pick=st.integers(min_value=0, max_value=5))
    def drop(self, agent: str, pick: int) -> None:
        agent = self._who(agent)
        if not self.sessions:
            return
        try:
            sessions.drop(self.wp[agent], self.sessions[pick % len(self.sessions)])
        except GwError:
            pass

    # --- invariants -------------------------------------------------------------------------------

    @invariant()
    def delivered_work_is_never_reoffered(self) -> None:
        if not self.delivered:
            return
        later = self.clock.at + dt.timedelta(days=1)
        ctx = self.wp["admin"].context()
        assert self.item not in [row[0] for row in ready(ctx.index(), later, 30)]
        cmd = engine.validate_command({"op": "claim", "item": self.item, "as": "carol"})
        with pytest.raises(GwError):
            engine.apply(ctx.snapshot, cmd, later, self.wp["admin"].settings)

    @invariant()
    def no_commit_is_stranded_silently(self) -> None:
        if not self.commits:
            return
        listed = {s["session"]: s for s in sessions.list_sessions(self.wp["admin"])}
        drops = {e.get("commit") for e in self.wp["admin"].history(self.item) if e["type"] == "session-drop"}
        for session, commit in self.commits.items():
            on_main = _is_ancestor(self.repo, commit, "main")
            row = listed.get(session)
            still_open = (row is not None and row["state"] == "committed"
                          and git(self.repo, "rev-parse", f"refs/heads/session/{session}", check=False) == commit)
            assert on_main or still_open or commit in drops, f"session {session}'s commit {commit[:12]} was stranded"

    @invariant()
    def main_only_moves_forward(self) -> None:
        now = git(self.repo, "rev-parse", "main")
        if now != self.main_history[-1]:
            assert _is_ancestor(self.repo, self.main_history[-1], now)
            self.main_history.append(now)


def _is_ancestor(repo: Path, old: str, new: str) -> bool:
    import subprocess

    return subprocess.run(["git", "merge-base", "--is-ancestor", old, new], cwd=repo).returncode == 0


@pytest.mark.slow
def test_every_order_of_the_finish_line() -> None:
    run_state_machine_as_test(FinishLine, settings=settings(
        max_examples=examples(quick=10, thorough=30), stateful_step_count=10, database=None, deadline=None,
        suppress_health_check=list(HealthCheck)))
