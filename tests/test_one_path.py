"""One path per concept (issue 10, points 2 and 3).

- One ``@op(...)`` declaration says everything about an op: the ops the arbiter decides and the ops
  its role check re-applies are derived from the declarations, not kept in sets elsewhere.
- Field kinds are declared in ``commands.KINDS`` only (``msgref`` included); ops read the state
  through ``Context``'s public surface (``file``, ``memo``), never ``_file`` or ``__dict__``.
- One path from an outcome to a commit (``engine.land`` inside ``engine.run``), the CAS being the
  only difference between local and remote; one loop bound, exit 75 when it is exhausted.
- One state-commit parser (``statecommit``), one append-only rule, one lease-liveness rule, one
  server-hook entry point.
"""

from __future__ import annotations

import ast
import datetime as dt
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from conftest import ROOT, Clock, bare_remote, git, gw_here, make_repo, tip
from gitwork import commands, engine, statecommit
from gitwork.errors import Held, Invalid
from gitwork.model import Lease, held_for_others
from gitwork.queries import lease_is_live
from gitwork.store import keeps_append_only
from gitwork.workplane import LocalRef, Workplane

STATE = "refs/gitwork/state"
ARBITER_DECIDES = {"claim", "renew", "release", "takeover", "revoke", "handoff", "done", "cancel", "publish",
                   "exec-reserve",  # exec-reserve: two clones of one holder must not each launch
                   "exec-lost",  # judged on the arbiter's lease: a stale clone must not declare a live run lost
                   # the publish queue: one order and one publisher across clones (docs/sessions.md)
                   "queue-add", "queue-remove", "queue-lease", "queue-land", "queue-return"}
# The role rules an op may call (roles.py, and asking the settings for a role itself).
ROLE_RULES = {"act_on", "edit_on", "require_revoker", "require_decider", "require_steerer", "role"}


def python_modules(folder: Path) -> Iterator[tuple[Path, ast.Module]]:
    for path in sorted(folder.rglob("*.py")):
        yield path, ast.parse(path.read_text(encoding="utf-8"), str(path))


# --- one declaration per op --------------------------------------------------------------------------


def test_the_ops_the_arbiter_decides_come_from_their_declarations() -> None:
    assert engine.declared("arbiter") == ARBITER_DECIDES
    assert engine.declared("internal") == {"session-start", "session-commit", "publish", "session-drop",
                                           "exec-reserve", "exec-state", "session-create", "session-branch",
                                           "session-submit", "session-resume", "session-end",
                                           "delegation-sent", "delegation-received", "coord-lease",
                                           "queue-lease", "queue-land", "queue-return"}
    import gitwork.rolecheck
    import gitwork.sync

    # No second registry beside the declarations.
    assert not hasattr(gitwork.sync, "ARBITER_OPS")
    assert not hasattr(gitwork.rolecheck, "CHECKED_OPS")


def ops_calling_role_rules() -> dict[str, set[str]]:
    """Op name -> the role rules its function reaches (through helpers of ``gitwork/ops``, by name), read
    from the source: what ``roles=True`` must cover, derived rather than listed by hand."""
    functions: dict[str, tuple[str, ast.FunctionDef]] = {}
    declared: dict[str, str] = {}  # op -> its function's name
    for path, tree in python_modules(ROOT / "gitwork" / "ops"):
        for node in ast.walk(tree):
            if isinstance(node, ast.FunctionDef):
                functions.setdefault(node.name, (path.stem, node))
                for decorator in node.decorator_list:
                    if (isinstance(decorator, ast.Call) and getattr(decorator.func, "id", None) == "op"
                            and isinstance(decorator.args[0], ast.Constant)):
                        declared[decorator.args[0].value] = node.name

    def called(node: ast.AST) -> set[str]:
        names = set()
        for inner in ast.walk(node):
            if isinstance(inner, ast.Call):
                func = inner.func
                names.add(func.id if isinstance(func, ast.Name) else getattr(func, "attr", ""))
        return names

    def reaches(name: str, seen: set[str]) -> set[str]:
        if name in seen or name not in functions:
            return set()
        seen.add(name)
        direct = called(functions[name][1])
        return (direct & ROLE_RULES).union(*(reaches(each, seen) for each in direct))

    return {op: reaches(function, set()) for op, function in declared.items()}


def test_every_op_that_asks_who_acts_is_declared_roles() -> None:
    """An op whose rules call a role rule must say ``roles=True`` (the arbiter's hook then re-applies it
    with its own settings): derived from the source, so a new op cannot be forgotten in a list here."""
    found = ops_calling_role_rules()
    assert {"edit", "revoke", "decide", "import"} <= {op for op, rules in found.items() if rules}  # the reader works
    undeclared = sorted(op for op, rules in found.items() if rules and op not in engine.declared("roles"))
    assert not undeclared, f"these ops call role rules but are not declared roles=True: {undeclared}"


@pytest.fixture
def test_ops() -> Iterator[None]:
    """Two ops declared by the test, alike but for ``arbiter=True``; the registry is restored after."""
    engine.declared("arbiter")  # every op module loaded first: one loaded meanwhile would be lost by the restore
    before = dict(engine.OPS)

    def note(ctx: engine.Context) -> None:
        item = ctx.target()
        ctx.event(item, "test-note")
        ctx.say(f"note on {item}", item)

    engine.op("test-decided", "a test op the arbiter decides", who="anyone.", arbiter=True, item="item!")(note)
    engine.op("test-local", "a test op decided locally", who="anyone.", item="item!")(note)
    yield
    engine.OPS.clear()
    engine.OPS.update(before)


def test_arbiter_true_in_the_declaration_is_what_sends_an_op_to_the_arbiter(tmp_path: Path,
                                                                             test_ops: None) -> None:
    remote = bare_remote(tmp_path)
    repo = make_repo(tmp_path / "machine")
    git(repo, "remote", "add", "origin", f"file://{remote}")
    assert gw_here(repo, "init", "--remote", "origin").returncode == 0
    assert gw_here(repo, "sync").returncode == 0
    with Workplane(str(repo), agent="alice") as plane:
        item = plane.do("new", title="routed").result["item"]
        assert plane.do("test-local", item=item).commit == tip(repo)
        assert tip(remote) != tip(repo)  # decided here: the remote has not seen it
        plane.do("test-decided", item=item)
        # Decided by the arbiter: on the remote's state ref, with the local command replayed under it.
        assert tip(remote) == tip(repo)


# --- field kinds in one place, Context's public surface ---------------------------------------------


def test_msgref_is_a_field_kind_of_commands_without_any_op_module_loaded() -> None:
    code = ("import sys, gitwork.commands as c; "
            "assert 'msgref' in c.KINDS, sorted(c.KINDS); "
            "assert not [m for m in sys.modules if m.startswith('gitwork.ops')]; "
            "print(c.validate({'op': 'ack', 'upto': '#3'}, c.parse_fields({'upto': 'msgref!'})))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "{'op': 'ack', 'upto': 3}"
    with pytest.raises(Invalid, match="message number"):
        commands.validate({"op": "ack", "upto": 0}, commands.parse_fields({"upto": "msgref!"}))


def test_no_module_adds_field_kinds_or_reaches_into_a_context() -> None:
    offences = []
    for path, tree in python_modules(ROOT / "gitwork"):
        for node in ast.walk(tree):
            if isinstance(node, ast.Attribute) and node.attr in ("_file", "__dict__") and \
                    isinstance(node.value, ast.Name) and node.value.id == "ctx":
                offences.append(f"{path.name}:{node.lineno} ctx.{node.attr}")
            if isinstance(node, ast.Attribute) and node.attr == "KINDS" and path.name != "commands.py" and \
                    isinstance(node.ctx, ast.Load) and isinstance(getattr(node, "value", None), ast.Name) and \
                    node.value.id in ("commands", "FIELD_KINDS"):
                offences.append(f"{path.name}:{node.lineno} commands.KINDS")
            if isinstance(node, ast.ImportFrom) and node.module and node.module.endswith("commands") and \
                    any(alias.name == "KINDS" for alias in node.names):
                offences.append(f"{path.name}:{node.lineno} imports commands.KINDS")
    assert offences == []


def test_context_reads_its_own_pending_writes_and_memos_last_one_attempt(wp: Workplane) -> None:
    def attempt() -> engine.Context:
        return engine.Context(wp.store.snapshot(), {"op": "init", "id": "c-one"}, wp.now(), wp.settings)

    ctx = attempt()
    assert ctx.file("format.yaml") == wp.store.snapshot().blob("format.yaml")
    ctx.outcome.changes["format.yaml"] = b"format: 1\n"
    assert ctx.file("format.yaml") == b"format: 1\n"
    ctx.memo("thread")["w"] = 3
    assert ctx.memo("thread") == {"w": 3}
    assert attempt().memo("thread") == {}  # a new attempt starts with nothing remembered


# --- one path from an outcome to a commit -----------------------------------------------------------


class Losing(LocalRef):
    """The real local CAS, except that every swap loses (as if another writer always moved first)."""

    limit = 3

    def __init__(self, store: object) -> None:
        super().__init__(store)  # type: ignore[arg-type]
        self.swaps = 0

    def swap(self, old: str | None, new: str) -> bool:
        self.swaps += 1
        return False

    def lost(self, attempt: int) -> None:
        pass


def test_the_loop_gives_up_with_exit_75_and_moves_nothing(wp: Workplane) -> None:
    before = wp.store.tip()
    cas = Losing(wp.store)
    cmd = engine.validate_command({"op": "new", "title": "never lands", "as": "alice"})
    with pytest.raises(Held, match="gave up after 3 lost races") as raised:
        engine.run(cas, cmd, Clock(), wp.settings)
    assert raised.value.code == 75
    assert cas.swaps == 3
    assert wp.store.tip() == before


def test_a_local_and_an_arbiter_write_of_one_command_are_the_same_commit(tmp_path: Path) -> None:
    """The CAS is the only difference: the same document on the same state at the same instant
    lands as the very same commit, by ``git update-ref`` here and by a push to the arbiter there."""
    remote = bare_remote(tmp_path)
    clock = Clock()
    alone, arbitered = make_repo(tmp_path / "alone"), make_repo(tmp_path / "arbitered")
    git(arbitered, "remote", "add", "origin", f"file://{remote}")
    with Workplane(str(alone), now=clock, agent="alice") as one:
        one.do("init", id="init-0001")
        item = one.do("new", title="same", id="new-00001").result["item"]
        git(arbitered, "fetch", "-q", str(alone), f"{STATE}:{STATE}")
        assert gw_here(arbitered, "remote", "set", "origin").returncode == 0
        assert gw_here(arbitered, "sync").returncode == 0
        with Workplane(str(arbitered), now=clock, agent="alice") as two:
            here = one.do("claim", item=item, ttl="15m", id="claim-0001")
            there = two.do("claim", item=item, ttl="15m", id="claim-0001")
    assert here.commit == there.commit == tip(remote)
    assert here.to_json() == there.to_json()


# --- one state-commit parser ----------------------------------------------------------------------------


def test_the_state_commit_parser_reads_what_land_wrote(wp: Workplane) -> None:
    clock = Clock()
    wp.now = clock
    applied = wp.do("new", title="parsed: Not-A-Trailer: x")
    state = statecommit.read(wp.store, applied.commit)
    assert state.command == applied.command
    assert state.summary == applied.summary
    assert state.trailers["Command-Id"] == applied.command["id"]
    assert state.at == clock.at
    assert state.parent is not None
    assert [entry["commit"] for entry in wp.log(limit=2)] == [applied.commit, state.parent]
    logged = next(iter(wp.log(limit=1)))
    assert (logged["command"], logged["trailers"], logged["author"]) == (state.command, state.trailers, state.author)


# --- one append-only rule, one lease-liveness rule ----------------------------------------------------


@pytest.mark.parametrize(("path", "old", "new", "kept"), [
    ("items/ab/w-1/events.log", b"a\n", b"a\nb\n", True),
    ("items/ab/w-1/events.log", None, b"a\n", True),
    ("items/ab/w-1/events.log", b"a\nb\n", b"a\n", False),
    ("items/ab/w-1/events.log", b"a\n", b"x\n", False),
    ("items/ab/w-1/events.log", b"a\n", None, False),
    ("items/ab/w-1/item.yaml", b"a\n", b"x\n", True),
])
def test_the_append_only_rule(path: str, old: bytes | None, new: bytes | None, kept: bool) -> None:
    assert keeps_append_only(path, old, new) is kept


INSTANTS = st.datetimes(min_value=dt.datetime(2030, 1, 1), max_value=dt.datetime(2030, 1, 2),
                        timezones=st.just(dt.timezone.utc))


@given(state=st.sampled_from(["active", "released", "revoked", "handed-off"]), expires=INSTANTS, now=INSTANTS,
       margin=st.integers(0, 600))
def test_the_lease_and_the_ready_query_judge_liveness_alike(state: str, expires: dt.datetime, now: dt.datetime,
                                                            margin: int) -> None:
    stamp = expires.strftime("%Y-%m-%dT%H:%M:%SZ")
    lease = Lease(item="w-1", epoch=1, fence=1, holder="bob", state=state, granted_at=stamp, expires_at=stamp, ttl=60)
    row: list[object] = [None] * 14
    from gitwork.index import EXPIRES, LEASE_STATE

    row[LEASE_STATE], row[EXPIRES] = state, stamp
    live = lease_is_live(tuple(row), now, margin)
    assert live == (not lease.takeable(now, margin)) == held_for_others(state, lease.expires(), now, margin)


# --- one server-hook entry point ---------------------------------------------------------------------


def test_statecheck_runs_the_one_server_hook(tmp_path: Path) -> None:
    """``python -m gitwork.statecheck`` (hooks written before) judges a push as ``hookcheck pre-receive``."""
    bare = make_repo(tmp_path / "server.git", bare=True)
    work = make_repo(tmp_path / "work")
    env = {**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@x", "GIT_COMMITTER_NAME": "t",
           "GIT_COMMITTER_EMAIL": "t@x"}
    for text in ("one", "two"):
        (work / "a.txt").write_text(text)
        subprocess.run(["git", "add", "a.txt"], cwd=work, check=True)
        subprocess.run(["git", "commit", "-qm", text], cwd=work, check=True, env=env)
    subprocess.run(["git", "push", "-q", str(bare), "HEAD:refs/heads/main"], cwd=work, check=True)
    first, second = git(work, "rev-parse", "HEAD~1"), git(work, "rev-parse", "HEAD")
    update = f"{first} {second} refs/heads/session/w-1-s1\n"  # a commit-once branch moving again
    verdicts = []
    for module in (["gitwork.statecheck"], ["gitwork.hookcheck", "pre-receive"]):
        done = subprocess.run([sys.executable, "-m", *module], cwd=bare, input=update, capture_output=True,
                              text=True, env={**os.environ, "GIT_DIR": str(bare)})
        verdicts.append((done.returncode, done.stderr))
    assert verdicts[0] == verdicts[1]
    assert verdicts[0][0] == 1 and "commit-once" in verdicts[0][1]
