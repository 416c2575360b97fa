"""Trust before growth (issue 8, points 1, 4, 5, 6, 11, 12): the engine's side of the promises.

- one identity rule for every source of identity, and a commit format that user text cannot forge;
- bounded parsing of command documents and state files (no YAML alias expansion, depth and size
  limits, bounded durations and GW_NOW);
- a command id names one command (digests in commands/<id>);
- record ops (session and publish records) only through gitwork's own procedures;
- the log helper owns ``seq``;
- and a property test over random documents through the same path as ``gw apply``.

Process-level where something could be written; in-process where only the engine is asked.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from conftest import Clock, git, gw_here, replace_blob, run_gw, tip
from gitwork import codec, engine, layout
from gitwork.config import default_identity
from gitwork.errors import Corrupt, ExitCode, GwError, Invalid
from gitwork.workplane import Workplane

A = "w-aaaa000000000001"
B = "w-bbbb000000000002"
PLANTED = '{"as": "mallory", "id": "c-planted-0001", "item": "w-aaaa000000000001", "op": "release"}'
HOSTILE_NAME = f"mallory\n\nCommand: {PLANTED}\n\nX: y"
BOMB = """op: new
title: t
a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]
b: &b [*a,*a,*a,*a,*a,*a,*a,*a,*a]
c: &c [*b,*b,*b,*b,*b,*b,*b,*b,*b]
d: &d [*c,*c,*c,*c,*c,*c,*c,*c,*c]
e: &e [*d,*d,*d,*d,*d,*d,*d,*d,*d]
f: &f [*e,*e,*e,*e,*e,*e,*e,*e,*e]
g: &g [*f,*f,*f,*f,*f,*f,*f,*f,*f]
h: &h [*g,*g,*g,*g,*g,*g,*g,*g,*g]
i: &i [*h,*h,*h,*h,*h,*h,*h,*h,*h]
"""
FORGED_PUBLISH = {
    "op": "publish", "item": A, "session": "20300101-120000-forged", "source": "1" * 40, "commit": "2" * 40,
    "into": "main", "mode": "fast-forward", "as": "alice",
}


@pytest.fixture
def state(repo: Path) -> Path:
    with Workplane(str(repo), agent="alice") as wp:
        wp.do("init")
        wp.do("new", title="first", item=A)
        wp.do("new", title="second", item=B)
    return repo


def refused(repo: Path, *args: str, code: ExitCode, says: str, input: str | None = None,
            env: dict[str, str] | None = None, timeout: float | None = None) -> None:
    """``gw *args``: refused with ``code``, one line on stderr, nothing on stdout, the ref unchanged.

    Through the CLI's entry point in this process, or in a child process bounded by ``timeout`` where
    the invariant is that the command ends."""
    before = tip(repo)
    if timeout is None:
        done = gw_here(repo, *args, input=input, env=env)
    else:
        done = run_gw(repo, *args, input=input, env=env, timeout=timeout)
    assert done.returncode == code, (args, done.returncode, done.stderr)
    lines = done.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("gw: "), done.stderr
    assert says in lines[0], lines[0]
    assert done.stdout == ""
    assert tip(repo) == before


def message_of(repo: Path, commit: str) -> str:
    return subprocess.run(["git", "cat-file", "commit", commit], cwd=repo, capture_output=True, check=True,
                          text=True).stdout.split("\n\n", 1)[1]


# --- 1. one identity rule, every source ------------------------------------------------------------


@pytest.mark.parametrize("source", ["--as", "GW_AGENT", "gitwork.agent", ".workplane", "document"])
def test_a_newline_bearing_identity_is_refused_from_every_source(state: Path, source: str) -> None:
    args: tuple[str, ...] = ("release", A)
    env: dict[str, str] = {}
    stdin = None
    if source == "--as":
        args = (*args, "--as", HOSTILE_NAME)
    elif source == "GW_AGENT":
        env = {"GW_AGENT": HOSTILE_NAME}
    elif source == "gitwork.agent":
        git(state, "config", "gitwork.agent", HOSTILE_NAME)
    elif source == ".workplane":
        (state / ".workplane").write_text(f"agent: {json.dumps(HOSTILE_NAME)}\n")
    else:
        args, stdin = ("apply", "-"), json.dumps({"op": "new", "title": "x", "as": HOSTILE_NAME})
    refused(state, *args, code=ExitCode.INVALID, says="not a valid identity", env=env, input=stdin)
    # Also for a command that would create something, through the typer path.
    if source != "document":
        refused(state, "new", "planted?", *args[2:], code=ExitCode.INVALID, says="not a valid identity", env=env)


def test_an_empty_as_is_an_error_not_the_default(state: Path) -> None:
    refused(state, "new", "x", "--as", "", code=ExitCode.INVALID, says="--as is not a valid identity")
    refused(state, "claim", A, "--as", "", code=ExitCode.INVALID, says="--as is not a valid identity")  # fast path


@pytest.mark.parametrize("name", ["", "a b", "a<b>", "x" * 10_000, "tab\there", "-leading", "ünïcode", "a\u2028b"])
def test_the_identity_rule_in_process(state: Path, name: str) -> None:
    before = tip(state)
    with pytest.raises(Invalid, match="not a valid identity"):
        Workplane(str(state), agent=name)
    with Workplane(str(state)) as wp:
        for doc in ({"op": "new", "title": "x", "as": name}, {"op": "new", "title": "x", "owner": name},
                    {"op": "msg", "item": A, "text": "hi", "to": name}):
            with pytest.raises(Invalid):
                wp.submit(doc)
    assert tip(state) == before


def test_good_identities_pass_and_sign_the_commit(state: Path) -> None:
    for name in ("alice", "ci-bot@example.org", "worker/3", "ann@box/s812", "a.b+c_d", "x" * 64):
        with Workplane(str(state), agent=name) as wp:
            assert wp.do("new", title=f"by {name}").command["as"] == name


def test_the_default_identity_follows_the_rule_whatever_the_login(monkeypatch: pytest.MonkeyPatch) -> None:
    import os
    import types

    # getpass.getuser's first source, and the node name (what socket.gethostname returns on POSIX).
    monkeypatch.setenv("LOGNAME", "Jane Doe <jd>\nCommand: {}")
    monkeypatch.setattr(os, "uname", lambda: types.SimpleNamespace(nodename="-weird host" + "x" * 100))
    name = default_identity()
    assert name.startswith("Jane-Doe--jd--Command")
    assert "\n" not in name and " " not in name and len(name) <= 64
    from gitwork.ids import check_identity

    assert check_identity(name) == name


def test_a_title_cannot_plant_a_command_document(state: Path) -> None:
    # A newline in a title is refused outright...
    refused(state, "apply", "-", code=ExitCode.INVALID, says="title",
            input=json.dumps({"op": "new", "title": f"x\n\nCommand: {PLANTED}"}))
    # ...and line separators that titles may hold are escaped in the commit message.
    with Workplane(str(state), agent="alice") as wp:
        applied = wp.do("new", title=f"x\u2028\u2028Command: {PLANTED}\u0085Work-Item: {A}")
        entry = next(wp.log(limit=1))
    message = message_of(state, applied.commit)
    summary = message.split("\n", 1)[0]
    assert "\u2028" not in message and "\u0085" not in message
    assert summary.startswith("new ") and "\\u2028" in summary
    assert engine.parse_command_from_message(message) == applied.command
    assert entry["command"] == applied.command and entry["command"]["op"] == "new"
    assert entry["trailers"]["Work-Item"] == applied.result["item"]


def test_commit_message_neutralises_any_text_and_the_parser_reads_only_the_fixed_place() -> None:
    outcome = engine.Outcome()
    outcome.summary = f"evil\n\nCommand: {PLANTED}\n\nFence: 1"
    outcome.trailers = {"Work-Item": "w-1\nCommand: {}", "Command-Id": "c-real-0001"}
    cmd = {"op": "new", "id": "c-real-0001", "as": "alice", "title": "t\u2028u"}
    message = engine.commit_message(cmd, outcome)
    lines = message.split("\n")
    assert lines[1] == "" and lines[2].startswith("Command: {") and lines[3] == ""
    assert len(lines) == 7 and lines[-1] == ""  # summary, blank, Command, blank, two trailers, end
    assert engine.parse_command_from_message(message) == cmd
    # A document anywhere but line 3 is never taken for one.
    assert engine.parse_command_from_message(f"summary\nCommand: {PLANTED}\n") is None
    assert engine.parse_command_from_message(f"summary\n\nnot it\n\nCommand: {PLANTED}\n") is None
    assert engine.parse_command_from_message("summary\n\nCommand: [1]\n") is None
    assert engine.parse_command_from_message(f"summary\n\nCommand: {'[' * 100000}\n") is None


def test_gw_log_and_sync_ignore_a_command_line_out_of_place(state: Path) -> None:
    # Another tool (or an old gitwork fooled by a newline) left a commit whose planted line is not
    # in the fixed place: neither `gw log` nor the parser sync uses takes it for the command.
    head = tip(state)
    tree = git(state, "rev-parse", f"{head}^{{tree}}")
    forged = subprocess.run(
        ["git", "commit-tree", tree, "-p", head], cwd=state, capture_output=True, check=True, text=True,
        input=f"new by x\nCommand: {PLANTED}\n\nCommand: {PLANTED}\n",
        env={**os.environ, "GIT_AUTHOR_NAME": "x", "GIT_AUTHOR_EMAIL": "x@x", "GIT_COMMITTER_NAME": "x",
             "GIT_COMMITTER_EMAIL": "x@x"}).stdout.strip()
    git(state, "update-ref", "refs/gitwork/state", forged, head)
    done = run_gw(state, "log", "--json")
    assert done.returncode == 0, done.stderr
    entries = json.loads(done.stdout) if done.stdout.lstrip().startswith("[") else [
        json.loads(line) for line in done.stdout.splitlines() if line.strip()]
    assert entries[0]["commit"] == forged and entries[0]["command"] is None
    assert all((e["command"] or {}).get("id") != "c-planted-0001" for e in entries)


# --- 4 and 11. bounded parsing -----------------------------------------------------------------------


def test_a_yaml_alias_bomb_in_gw_apply_is_refused_quickly(state: Path) -> None:
    refused(state, "apply", "-", input=BOMB, code=ExitCode.INVALID, says="aliases", timeout=30)


@pytest.mark.parametrize("text", [
    '{"op": "new", "title": ' + "[" * 100_000 + "]" * 100_000 + "}",  # RecursionError in json
    '{"op": "new", "title": "x", "owner": ' + "[" * 100 + "]" * 100 + "}",  # within json's limit
    "op: new\ntitle: " + "[" * 5000 + "]" * 5000 + "\n",
    "op: new\ntitle: x\nd:\n" + "".join("  " * (k + 1) + f"k{k}:\n" for k in range(200)) + "  " * 201 + "v: 1\n",
])
def test_deeply_nested_documents_are_invalid(state: Path, text: str) -> None:
    refused(state, "apply", "-", input=text, code=ExitCode.INVALID, says="nested deeper")


def test_deeply_nested_documents_from_the_python_api_are_invalid(state: Path) -> None:
    deep: Any = "x"
    for _ in range(100_000):
        deep = [deep]
    before = tip(state)
    with Workplane(str(state), agent="alice") as wp:
        for doc in ({"op": "new", "title": "x", "labels": deep}, {"op": "new", "title": "x", "source": {"a": deep}},
                    {"op": "new", "title": deep}):
            with pytest.raises(Invalid, match="nested deeper"):
                wp.submit(doc)
    assert tip(state) == before


def test_oversized_and_hugely_numbered_documents_are_invalid(state: Path) -> None:
    refused(state, "apply", "-", input='{"op": "new", "title": "' + "x" * (1100 * 1024) + '"}',
            code=ExitCode.INVALID, says="larger than")
    refused(state, "apply", "-", input='{"op": "claim", "item": "w-aaaa", "ttl": ' + "9" * 4000 + "}",
            code=ExitCode.INVALID, says="out of range")
    refused(state, "apply", "-", input='{"op": "new", "title": "x", "priority": "' + "1" * 5000 + '"}',
            code=ExitCode.INVALID, says="whole number")


def test_a_ttl_of_five_thousand_digits_is_invalid(state: Path) -> None:
    refused(state, "claim", A, "--ttl", "9" * 5000, "--as", "bob", code=ExitCode.INVALID, says="duration")
    refused(state, "claim", A, "--ttl", "1" * 3000 + "m", "--as", "bob", code=ExitCode.INVALID, says="duration")
    for text in ("9" * 5000, "5" * 300 + "d", "²", "1h" * 40):
        with pytest.raises(Invalid):
            codec.parse_duration(text)


@pytest.mark.parametrize("value", ["yesterday", "", "   ", "2025-13-45T99:00:00Z", "9" * 5000])
def test_a_bad_gw_now_is_invalid(state: Path, value: str) -> None:
    refused(state, "new", "x", env={"GW_NOW": value}, code=ExitCode.INVALID, says="GW_NOW")


def test_a_committed_alias_bomb_is_corrupt_naming_the_file_and_ends(state: Path) -> None:
    path = layout.item_path(B, layout.ITEM_FILE)
    replace_blob(state, path, f"id: {B}\ntitle: bomb\nstatus: open\n{BOMB.split(chr(10), 2)[2]}".encode())
    refused(state, "show", B, code=ExitCode.CORRUPT, says=path, timeout=30)
    refused(state, "claim", B, "--as", "bob", code=ExitCode.CORRUPT, says=path, timeout=30)
    # Reads over the whole state end (how they present the one bad item is issue 8, point 10).
    for verb in ("list", "ready"):
        done = run_gw(state, verb, timeout=30)
        assert done.returncode in (0, 8) and "Traceback" not in done.stderr, (verb, done.stderr)


def test_the_server_hook_refuses_a_pushed_alias_bomb_quickly(tmp_path: Path) -> None:
    from test_state_hook import STATE, Guarded, craft, events_log

    guarded = Guarded(tmp_path)
    path = events_log(guarded.a).replace("events.log", "item.yaml")
    forged = craft(guarded.a, guarded.tip, {path: BOMB.encode()})
    done = subprocess.run(["git", "push", "--porcelain", guarded.url, f"{forged}:{STATE}"], cwd=guarded.a,
                          capture_output=True, text=True, timeout=60)
    guarded.refused(done, "aliases")


def test_the_state_yaml_reader_is_bounded() -> None:
    with pytest.raises(Corrupt, match="aliases"):
        codec.load_yaml(BOMB.encode(), what="items/aa/w-x/item.yaml")
    with pytest.raises(Corrupt, match="aliases"):
        codec.load_yaml(b"a: &x 1\nb: 2\n")  # an anchor alone is refused too: no aliases at all
    deep = "".join("  " * k + f"k{k}:\n" for k in range(300)) + "  " * 300 + "v: 1\n"
    with pytest.raises(Corrupt, match="nested deeper"):
        codec.load_yaml(deep.encode())
    with pytest.raises(Corrupt, match="nested deeper"):
        codec.load_yaml(("a: " + "[" * 5000 + "]" * 5000 + "\n").encode())
    with pytest.raises(Corrupt, match="larger than"):
        codec.load_yaml(b"# not canonical\n" + b"a: " + b"x" * (5 * 1024 * 1024) + b"\n")
    with pytest.raises(Corrupt, match="line 1"):
        list(codec.iter_records(b"[" * 100_000 + b"\n"))
    # What gitwork writes and ordinary hand-written YAML still read.
    assert codec.load_yaml(b"# hand-written\ntitle: 'x'\nlabels: [a, b]\n") == {"title": "x", "labels": ["a", "b"]}


# --- 5. a command id names one command --------------------------------------------------------------


def test_a_reused_command_id_for_a_different_command_is_refused(state: Path) -> None:
    first = run_gw(state, "apply", "-", "--json", input=json.dumps({"op": "new", "title": "one", "id": "c-reuse-0001"}))
    assert first.returncode == 0, first.stderr
    refused(state, "apply", "-", code=ExitCode.INVALID, says="command id c-reuse-0001 was used for a different command",
            input=json.dumps({"op": "claim", "item": A, "id": "c-reuse-0001", "as": "bob"}))
    refused(state, "apply", "-", code=ExitCode.INVALID, says="was used for a different command",
            input=json.dumps({"op": "new", "title": "two", "id": "c-reuse-0001"}))
    assert run_gw(state, "show", A, "--json").stdout.count('"holder"') == 0  # no lease was granted
    again = run_gw(state, "apply", "-", "--json", input=json.dumps({"op": "new", "title": "one", "id": "c-reuse-0001"}))
    assert again.returncode == 0 and json.loads(again.stdout)["duplicate"] is True


def test_a_retry_matches_the_document_as_requested_or_as_recorded(state: Path) -> None:
    with Workplane(str(state), agent="alice") as wp:
        asked = {"op": "claim", "item": "w-aaaa", "ttl": "15m", "id": "c-retry-0001"}
        applied = wp.submit(dict(asked))
        before = tip(state)
        assert applied.command["item"] == A and applied.command["ttl"] == 900
        retry = wp.submit(dict(asked))  # as requested: a prefix, a duration in words
        recorded = engine.parse_command_from_message(message_of(state, applied.commit))
        replay = wp.submit(dict(recorded))  # as recorded: what sync replays
        for answer in (retry, replay):
            assert answer.result["duplicate"] is True and answer.result["fence"] == applied.result["fence"]
        with pytest.raises(Invalid, match="different command"):
            wp.submit({**asked, "ttl": "16m"})
        with pytest.raises(Invalid, match="different command"):
            wp.submit({**asked, "as": "bob"})
        assert tip(state) == before
        record = json.loads(wp.store.snapshot().blob(layout.command_path("c-retry-0001")))
        assert len(record["digests"]) == 2 and all(d.startswith("sha256:") for d in record["digests"])


def test_records_without_digests_answer_as_duplicates_as_before(state: Path) -> None:
    path = layout.command_path("c-old-record-1")
    replace_blob(state, path, json.dumps({"op": "new", "at": "2025-01-01T00:00:00Z", "by": "alice",
                                          "result": {"item": A}}).encode() + b"\n")
    before = tip(state)
    with Workplane(str(state), agent="alice") as wp:
        answer = wp.submit({"op": "claim", "item": B, "id": "c-old-record-1"})
    assert answer.result == {"item": A, "duplicate": True} and tip(state) == before


# --- 6. records only gitwork writes ---------------------------------------------------------------------


def test_a_forged_publish_record_is_refused_from_every_face(state: Path) -> None:
    with Workplane(str(state), agent="alice") as wp:
        wp.do("claim", item=A)
    before = tip(state)
    refused(state, "apply", "-", input=json.dumps(FORGED_PUBLISH), code=ExitCode.INVALID, says="only gitwork")
    with Workplane(str(state), agent="alice") as wp:
        args = {k: v for k, v in FORGED_PUBLISH.items() if k not in ("op", "as")}
        with pytest.raises(Invalid, match="only gitwork"):
            wp.do("publish", **args)
        with pytest.raises(Invalid, match="only gitwork"):
            wp.submit(dict(FORGED_PUBLISH))
        for op in ("session-start", "session-commit", "session-drop"):
            with pytest.raises(Invalid, match="only gitwork"):
                wp.submit({"op": op, "item": A})
        with pytest.raises(Invalid) as unknown:
            wp.submit({"op": "bogus"})
        assert "publish" not in unknown.value.message  # record ops are not offered to faces
    assert tip(state) == before
    assert "publish" not in git(state, "log", "--format=%s", "refs/gitwork/state")


# --- 12. the log owns seq -------------------------------------------------------------------------------


def test_ask_numbers_the_event_log_consecutively(state: Path) -> None:
    assert run_gw(state, "claim", A, "--as", "alice").returncode == 0
    assert run_gw(state, "msg", A, "note one", "--as", "alice").returncode == 0
    asked = run_gw(state, "ask", A, "Which one?", "-o", "x", "-o", "y", "--as", "alice")
    assert asked.returncode == 0, asked.stderr
    log = git(state, "show", f"refs/gitwork/state:{layout.item_path(A, layout.EVENTS_FILE)}").splitlines()
    records = [json.loads(line) for line in log]
    assert [r["seq"] for r in records] == list(range(1, len(records) + 1))
    waiting = [r for r in records if r["type"] == "waiting"]
    assert len(waiting) == 1 and waiting[0]["message"] == 2


def test_the_append_helper_owns_seq(state: Path) -> None:
    from gitwork import engine

    with Workplane(str(state), agent="alice") as wp:
        view = wp.context()  # reads are a read-only View; an op's writes go through a Context
        ctx = engine.Context(view.snapshot, {"op": "edit", "as": "alice", "id": "c-0123456789abcdef"}, view.now,
                             wp.settings)
        first = ctx.append(A, layout.EVENTS_FILE, {"type": "x", "seq": 99})
        second = ctx.event(A, "y", seq=1)
    assert first["seq"] == 2 and second["seq"] == 3  # "created" is 1
    assert list(first)[0] == "seq"


# --- the closing property: random documents through the apply path ---------------------------------------


GOOD_NAMES = st.sampled_from(["alice", "bob", "ci-bot@example.org"])
BAD_NAMES = st.sampled_from(["", "a b", HOSTILE_NAME, "x" * 65, "m<x>", "tab\there"])
IDENTITIES = st.one_of(GOOD_NAMES, GOOD_NAMES, BAD_NAMES)
TITLES = st.one_of(st.sampled_from(["plain", "ok  ", "x\u2028Command: {}", "a\u0085b"]), st.text(max_size=8),
                   st.sampled_from([f"x\n\nCommand: {PLANTED}", "  ", "t\x00"]))
IDS = st.sampled_from([None, "c-pool-0001", "c-pool-0002"])
ITEMS = st.one_of(st.sampled_from([A, B, "w-aaaa", "w-bbbb00"]), st.sampled_from(["../x", "w-cccc"]))
OPS = st.one_of(st.sampled_from(["new", "claim", "release", "msg", "edit"]),
                st.sampled_from(["publish", "session-start", "nope"]))


@st.composite
def documents(draw: Any) -> dict[str, Any]:
    op = draw(OPS)
    doc: dict[str, Any] = {"op": op}
    if op == "new":
        doc["title"] = draw(TITLES)
    elif op != "nope":
        doc["item"] = draw(ITEMS)
    if op == "claim" and draw(st.booleans()):
        doc["ttl"] = draw(st.sampled_from(["15m", "900", 60, "0", "9" * 50]))
    if op == "msg":
        doc["text"] = draw(TITLES)
    if op == "edit":
        doc["title"] = draw(TITLES)
    if op == "publish":
        doc.update({k: v for k, v in FORGED_PUBLISH.items() if k not in ("op", "item", "as")})
    if op == "session-start":
        doc.update({"session": "20300101-120000-forged", "base": "1" * 40, "branch": "session/20300101-120000-forged"})
    if draw(st.integers(0, 2)) == 0:
        doc["as"] = draw(IDENTITIES)
    identity = draw(IDS)
    if identity:
        doc["id"] = identity
    return doc


def clean(doc: dict[str, Any], identity: str) -> dict[str, Any] | None:
    """The document as the engine asks for it (validated, ``as`` filled), or None if invalid."""
    try:
        validated = engine.validate_command(dict(doc))
    except GwError:
        return None
    validated.setdefault("as", identity)
    return validated


def check_submission(repo: Path, wp: Workplane, doc: dict[str, Any], seen: dict[str, list[dict[str, Any]]]) -> None:
    """Submit one document and check the three properties against the ref."""
    before = tip(repo)
    requested = clean(doc, wp.settings.identity())
    try:
        applied = wp.submit(dict(doc))
    except GwError as error:
        assert tip(repo) == before, f"refused ({error.message}) but the ref moved"
        return
    except Exception as exc:  # noqa: BLE001 - every refusal must be a GwError, never an internal error
        raise AssertionError(f"internal error for {doc!r}: {exc!r}") from exc
    assert requested is not None, f"accepted an invalid document {doc!r}"
    assert doc["op"] not in ("publish", "session-start", "session-commit"), "a record op was accepted"
    known = seen.get(requested["id"])
    if applied.result.get("duplicate"):
        assert tip(repo) == before
        assert known is not None and requested in known, f"claims to duplicate a different document: {doc!r}"
        return
    assert known is None or requested in known, f"a used id was applied again: {doc!r}"
    if applied.commit == before:
        return  # a command that changes nothing (init on a state that exists)
    parents = git(repo, "rev-list", "--parents", "-n", "1", applied.commit).split()[1:]
    assert parents == ([before] if before else []), "an acceptance is exactly one commit on the old tip"
    assert tip(repo) == applied.commit
    assert engine.parse_command_from_message(message_of(repo, applied.commit)) == applied.command
    seen[requested["id"]] = [requested, applied.command]


STEPS = st.lists(st.one_of(documents(), st.tuples(st.integers(0, 20), st.booleans())), min_size=1, max_size=10)


def test_random_documents_through_the_apply_path(tmp_path: Path) -> None:
    """Random documents, retries and reuses of their ids, forged records and hostile identities, each
    submitted the way `gw apply` submits: a refusal leaves the ref alone, an acceptance is one commit
    carrying exactly the applied document, and a duplicate answer is only ever for the same document."""
    runs = iter(range(10_000))

    @settings(max_examples=25, deadline=None, suppress_health_check=list(HealthCheck), database=None, derandomize=True)
    @given(STEPS)
    def run(steps: list[Any]) -> None:
        repo = tmp_path / f"prop{next(runs)}"
        subprocess.run(["git", "init", "-q", str(repo)], check=True)
        clock = Clock()
        with Workplane(str(repo), agent="alice", now=clock) as wp:
            wp.do("init")
            wp.do("new", title="first", item=A)
            wp.do("new", title="second", item=B)
            wp.do("claim", item=A)  # so a forged record by alice would pass the fencing rule
            seen: dict[str, list[dict[str, Any]]] = {}
            history: list[dict[str, Any]] = []
            for step in steps:
                if isinstance(step, tuple):
                    if not history:
                        continue
                    doc = history[step[0] % len(history)]  # a retry, or a reuse of its id
                    if step[1] and doc.get("id") in seen:
                        doc = dict(seen[doc["id"]][1])  # the recorded document, as sync replays it
                else:
                    doc = step
                history.append(doc)
                clock.advance(7)
                check_submission(repo, wp, doc, seen)

    run()


@pytest.mark.parametrize("doc", [
    FORGED_PUBLISH,
    {"op": "new", "title": "x", "as": HOSTILE_NAME},
    {"op": "claim", "item": B, "id": "c-cli-0001"},  # reuses the id of the `new` below
    {"op": "new", "title": "cli", "id": "c-cli-0001"},  # a retry of it: a duplicate
])
def test_gw_apply_processes_keep_the_same_properties(state: Path, doc: dict[str, Any]) -> None:
    first = run_gw(state, "apply", "-", "--json", input=json.dumps({"op": "new", "title": "cli", "id": "c-cli-0001"}))
    assert first.returncode == 0, first.stderr
    before = tip(state)
    done = run_gw(state, "apply", "-", "--json", input=json.dumps(doc))
    if doc.get("title") == "cli":
        assert done.returncode == 0 and json.loads(done.stdout)["duplicate"] is True
    else:
        assert done.returncode == ExitCode.INVALID, done.stderr
    assert tip(state) == before
