"""Bad input: each refusal is one clear line on stderr, its documented exit code, and no ref movement.

Most cases run the CLI's entry point (``gitwork.cli.main.main``, what ``python -m gitwork`` runs) in
this process with its own stdin, stdout, stderr, working directory and environment: the same parsing,
validation and error path, without a 0.3 s interpreter start per case. A few run the real ``gw`` in a
child process (``process=True``), so the exit status and the two streams are checked end to end too.
State that gitwork itself would never write (a newer format version, a corrupt item file) is crafted
with git plumbing, as another tool or a bad merge would leave it.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from conftest import gw_here, replace_blob, run_gw, tip
from gitwork import ids, layout
from gitwork.errors import ExitCode, Invalid
from gitwork.workplane import Workplane

A1 = "w-aaaa000000000001"
A2 = "w-aaaa000000000002"
B1 = "w-bbbb000000000001"


@pytest.fixture
def state(repo: Path) -> dict[str, str]:
    """An initialised repository with a few items: two sharing the prefix w-aaaa."""
    with Workplane(str(repo), agent="alice") as wp:
        wp.do("init")
        wp.do("new", title="first a", item=A1)
        wp.do("new", title="second a", item=A2)
        wp.do("new", title="b depends on a1", item=B1, depends_on=[A1])
        # Fixed ids everywhere: a random one could start with a prefix the tests expect to match nothing.
        crit = wp.do("new", title="with criteria", criteria=["tests pass"], item="w-1111000000000001").result["item"]
        closed = wp.do("new", title="finished", item="w-2222000000000002").result["item"]
        wp.do("done", item=closed)
    return {"crit": crit, "closed": closed}




def refused(repo: Path | str, *args: str, code: ExitCode, says: str, input: str | None = None,
            env: dict[str, str] | None = None, also_json: bool = False, process: bool = False) -> None:
    """Run ``gw *args`` (and, asked, again with --json): refused with ``code``, the ref left alone.

    In this process unless ``process``; each test checks the --json shape on one of its calls only.
    """
    run = run_gw if process else gw_here
    before = tip(repo)
    plain = run(repo, *args, input=input, env=env)
    assert plain.returncode == code, (args, plain.returncode, plain.stderr)
    lines = plain.stderr.splitlines()
    assert len(lines) == 1, f"expected one line on stderr, got {plain.stderr!r}"
    assert lines[0].startswith("gw: "), lines[0]
    assert says in lines[0], lines[0]
    assert "Traceback" not in plain.stderr
    assert plain.stdout == "", "errors go to stderr; stdout is for data"
    assert tip(repo) == before
    if not also_json:
        return

    as_json = run(repo, *args, "--json", input=input, env=env)
    assert as_json.returncode == code, as_json.stderr
    doc = json.loads(as_json.stdout)
    assert doc["ok"] is False
    assert doc["code"] == int(code)
    assert isinstance(doc["error"], str) and doc["error"]
    assert says in doc["message"]
    assert "\n" not in doc["message"]
    assert tip(repo) == before


def test_unknown_id(repo: Path, state: dict[str, str]) -> None:
    refused(repo, "show", "w-cccc", code=ExitCode.NOT_FOUND, says="no item matches 'w-cccc'", also_json=True,
            process=True)
    refused(repo, "claim", "w-0123456789abcdef", "--as", "bob", code=ExitCode.NOT_FOUND, says="no item")
    refused(repo, "edit", "w-dd", "--title", "x", code=ExitCode.NOT_FOUND, says="no item")
    refused(repo, "new", "depends on nothing", "--dep", "w-eeee", code=ExitCode.NOT_FOUND, says="no item")


def test_ambiguous_prefix(repo: Path, state: dict[str, str]) -> None:
    refused(repo, "claim", "w-aaaa", "--as", "bob", code=ExitCode.AMBIGUOUS, says="ambiguous", also_json=True,
            process=True)
    refused(repo, "show", "aaaa00000000000", code=ExitCode.AMBIGUOUS, says="ambiguous")
    refused(repo, "show", "w-a", code=ExitCode.AMBIGUOUS, says="items match")  # other items may start with a too
    # One more digit and it is unique again.
    assert json.loads(run_gw(repo, "show", "w-aaaa000000000002", "--json").stdout)["item"] == A2


def test_malformed_duration(repo: Path, state: dict[str, str]) -> None:
    for ttl in ("5x", "15 minutes", "-1m", "0s"):
        refused(repo, "claim", A1, "--ttl", ttl, "--as", "bob", code=ExitCode.INVALID, says="duration",
                also_json=ttl == "5x")


def test_dependency_cycle(repo: Path, state: dict[str, str]) -> None:
    # B1 depends on A1: A1 -> B1 would close the loop.
    refused(repo, "edit", A1, "--add-dep", B1, code=ExitCode.INVALID, says="dependency cycle", also_json=True)
    refused(repo, "edit", A1, "--add-dep", A1, code=ExitCode.INVALID, says="cannot depend on itself")
    # A longer loop: C -> B1 -> A1, then A1 -> C.
    made = run_gw(repo, "new", "c", "--dep", B1, "--as", "alice")
    assert made.returncode == 0, made.stderr
    refused(repo, "edit", A1, "--add-dep", made.stdout.strip(), code=ExitCode.INVALID, says="dependency cycle")


def test_illegal_transitions(repo: Path, state: dict[str, str]) -> None:
    closed = state["closed"]
    refused(repo, "edit", closed, "--status", "blocked", code=ExitCode.ILLEGAL, says="cannot go from done to blocked",
            also_json=True)
    refused(repo, "done", closed, code=ExitCode.ILLEGAL, says="done to done")
    refused(repo, "reopen", A1, code=ExitCode.ILLEGAL, says="only done or cancelled")
    refused(repo, "claim", closed, "--as", "bob", code=ExitCode.ILLEGAL, says="reopen it before claiming")


def test_done_with_unchecked_criteria_needs_force(repo: Path, state: dict[str, str]) -> None:
    refused(repo, "done", state["crit"], code=ExitCode.ILLEGAL, says="unchecked criteria [1]", also_json=True)
    refused(repo, "done", state["crit"], "--force", code=ExitCode.INVALID, says="--force needs a --reason")


BAD_TITLES = [
        ("", "title must not be empty"),
        ("   ", "title must not be empty"),
        ("bell\x07here", "binary or control characters"),
        ("esc\x1b[31mred", "binary or control characters"),
        ("del\x7f", "binary or control characters"),
        ("two\nlines", "binary or control characters"),
        ("x" * 201, "title is too long"),
]


def test_bad_titles(repo: Path, state: dict[str, str]) -> None:
    # Empty and control characters through the CLI; every case in-process (same validation).
    refused(repo, "new", "", code=ExitCode.INVALID, says="title must not be empty", also_json=True)
    refused(repo, "new", "bell\x07here", code=ExitCode.INVALID, says="binary or control characters")
    before = tip(repo)
    with Workplane(str(repo), agent="alice") as wp:
        for title, says in BAD_TITLES:
            with pytest.raises(Invalid, match=says):
                wp.do("new", title=title)
            with pytest.raises(Invalid, match=says):
                wp.do("edit", item=A1, title=title)
    assert tip(repo) == before


def test_oversized_and_binary_text(repo: Path, state: dict[str, str]) -> None:
    refused(repo, "new", "big", "-d", "a" * (64 * 1024 + 1), code=ExitCode.INVALID, says="description is too long",
            also_json=True)
    refused(repo, "new", "multibyte", "-d", "é" * (32 * 1024 + 1), code=ExitCode.INVALID, says="too long")
    # A NUL cannot travel in argv; it can in a command document.
    doc = json.dumps({"op": "new", "title": "nul", "description": "a\u0000b"})
    refused(repo, "apply", "-", input=doc, code=ExitCode.INVALID, says="binary or control characters", process=True)
    doc = json.dumps({"op": "edit", "item": A1, "description": "\ud800"})
    refused(repo, "apply", "-", input=doc, code=ExitCode.INVALID, says="")


def test_exactly_64_kib_of_description_is_accepted(repo: Path, state: dict[str, str]) -> None:
    done = run_gw(repo, "new", "limit", "-d", "a" * (64 * 1024), "--as", "alice")
    assert done.returncode == 0, done.stderr


def test_path_like_ids(repo: Path, state: dict[str, str]) -> None:
    refused(repo, "show", "../x", code=ExitCode.INVALID, says="malformed item id", also_json=True)
    refused(repo, "edit", "w-../../x", "--title", "t", code=ExitCode.INVALID, says="malformed item id")
    for bad in ("../x", "w-../../x", "w-aa/../bb", "/etc/passwd", "w-", "items/aa", "w-aa bb"):
        refused(repo, "claim", bad, "--as", "bob", code=ExitCode.INVALID, says="malformed item id")


def test_new_with_a_path_like_or_short_explicit_id(repo: Path, state: dict[str, str]) -> None:
    for bad, says in (("../x", "malformed item id"), ("w-../../aaaaaaaaaaaaaa", "malformed item id"),
                      ("w-aaaa00000000000", "must be a full id"), (A1, "already exists")):
        doc = json.dumps({"op": "new", "title": "sneaky", "item": bad})
        refused(repo, "apply", "-", input=doc, code=ExitCode.INVALID, says=says, also_json=bad == A1)


def test_not_a_git_repository(tmp_path: Path) -> None:
    plain = tmp_path / "plain"
    plain.mkdir()
    env = {"GIT_CEILING_DIRECTORIES": str(tmp_path)}  # never find a repository above the test dir
    refused(plain, "init", code=ExitCode.NOT_A_REPO, says="not a git repository", env=env, also_json=True,
            process=True)
    refused(plain, "list", code=ExitCode.NOT_A_REPO, says="not a git repository", env=env)
    refused(plain, "claim", "w-aaaa", code=ExitCode.NOT_A_REPO, says="not a git repository", env=env, process=True)
    refused(plain, "show", "w-aaaa", "-C", str(tmp_path / "missing"), code=ExitCode.NOT_A_REPO, says="does not exist",
            env=env)
    assert not (plain / ".git").exists()


# --- state that gitwork would never write, crafted with plumbing ---------------------------------------


def test_state_written_by_a_newer_format(repo: Path, state: dict[str, str]) -> None:
    crafted = replace_blob(repo, "format.yaml", b"format: 99\n")
    for args in (("list",), ("show", A1), ("claim", A1, "--as", "bob"), ("new", "x")):
        refused(repo, *args, code=ExitCode.NEWER_FORMAT, says="format 99", also_json=args == ("list",),
                process=args == ("new", "x"))
    assert tip(repo) == crafted


def test_state_without_a_format_file_is_not_ours(repo: Path, state: dict[str, str]) -> None:
    replace_blob(repo, "format.yaml", b"not: a format\n")
    refused(repo, "list", code=ExitCode.CORRUPT, says="format", also_json=True)


@pytest.mark.parametrize(
    "garbage",
    [b"title: [unclosed\n", b"- a list\n- not a mapping\n", b"\xff\xfe binary\n",
     b"id: w-bbbb000000000099\ntitle: x\n"],
)
def test_corrupt_item_file(repo: Path, state: dict[str, str], garbage: bytes) -> None:
    crafted = replace_blob(repo, layout.item_path(B1, layout.ITEM_FILE), garbage)
    refused(repo, "show", B1, code=ExitCode.CORRUPT, says=B1, also_json=True, process=garbage.startswith(b"\xff"))
    refused(repo, "claim", B1, "--as", "bob", code=ExitCode.CORRUPT, says=B1)
    refused(repo, "edit", B1, "--title", "y", code=ExitCode.CORRUPT, says=B1)
    assert tip(repo) == crafted


def test_corrupt_item_file_is_named_and_left_out_of_listings(repo: Path, state: dict[str, str]) -> None:
    # One bad item must not take the whole state down (issue 8, point 10; more in test_corrupt_state.py).
    replace_blob(repo, layout.item_path(B1, layout.ITEM_FILE), b"title: [unclosed\n")
    listed = run_gw(repo, "list", "--json")
    assert listed.returncode == 0 and B1 not in listed.stdout and A1 in listed.stdout
    assert listed.stderr.count("\n") == 1 and B1 in listed.stderr and "not valid YAML" in listed.stderr


def test_corrupt_event_log(repo: Path, state: dict[str, str]) -> None:
    replace_blob(repo, layout.item_path(A1, layout.EVENTS_FILE), b'{"seq":1,"type":"created"}\nnot json\n')
    refused(repo, "history", A1, code=ExitCode.CORRUPT, says="not a JSON record", also_json=True)


BAD_DOCUMENTS: list[tuple[dict[str, Any], str]] = [
        ({"op": "frobnicate", "item": A1}, "unknown op 'frobnicate'"),
        ({"op": "claim", "item": A1, "colour": "red"}, "unknown field 'colour'"),
        ({"op": "new"}, "needs 'title'"),
        ({"op": "new", "title": 5}, "title must be text"),
        ({"op": "claim", "item": A1, "ttl": "5x"}, "malformed duration"),
        ({"op": "handoff", "item": A1, "reason": "bored"}, "reason must be one of"),
        ({"item": A1}, "unknown op None"),
        ({"op": "edit", "item": A1, "priority": 9}, "priority must be 0"),
        ({"op": "claim", "item": A1, "fence": 0}, "positive fencing token"),
        ({"op": "claim", "item": A1, "id": "x"}, "id must be 4-64"),
]


def test_apply_refuses_unknown_ops_and_fields(repo: Path, state: dict[str, str]) -> None:
    for number, (document, says) in enumerate(BAD_DOCUMENTS[:2]):
        refused(repo, "apply", "-", input=json.dumps(document), code=ExitCode.INVALID, says=says,
                also_json=number == 0)


def test_submit_refuses_bad_documents(repo: Path, state: dict[str, str]) -> None:
    # The same validation, in-process: `gw apply` only reads the file and calls submit.
    before = tip(repo)
    with Workplane(str(repo), agent="alice") as wp:
        for document, says in BAD_DOCUMENTS:
            with pytest.raises(Invalid) as caught:
                wp.submit(document)
            assert says in caught.value.message
            assert caught.value.code == ExitCode.INVALID
    assert tip(repo) == before


def test_apply_refuses_unparseable_documents(repo: Path, state: dict[str, str]) -> None:
    for text, says in (("{not json", "not valid JSON"), ("op: [unclosed", "not valid YAML"),
                       ("- op: new\n", "must be a mapping"), ("", "must be a mapping")):
        refused(repo, "apply", "-", input=text, code=ExitCode.INVALID, says=says, also_json=not text)


def test_apply_of_a_yaml_file_works_and_a_missing_file_is_a_usage_error(repo: Path, state: dict[str, str],
                                                                        tmp_path: Path) -> None:
    doc = tmp_path / "cmd.yaml"
    doc.write_text(f"op: claim\nitem: {A1}\nttl: 10m\nas: carol\n")
    done = run_gw(repo, "apply", str(doc), "--json")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["holder"] == "carol"
    refused(repo, "apply", str(tmp_path / "nope.yaml"), code=ExitCode.USAGE, says="cannot read", also_json=True)


def test_json_errors_go_to_stdout_with_the_documented_shape(repo: Path, state: dict[str, str]) -> None:
    run_gw(repo, "claim", A1, "--as", "alice")
    held = run_gw(repo, "claim", A1, "--as", "bob", "--json")
    assert held.returncode == ExitCode.HELD
    doc = json.loads(held.stdout)
    assert {k: doc[k] for k in ("ok", "error", "code")} == {"ok": False, "error": "held", "code": 75}
    assert doc["details"]["holder"] == "alice"
    assert "held by alice" in doc["message"]


# --- a lease no longer than the clock margin is refused where it would be set ---------------------


def test_a_lease_no_longer_than_the_clock_margin_is_refused_at_claim_next_takeover_and_renew(
        repo: Path, state: dict[str, str]) -> None:
    """The holder's view ends a lease the margin (30s by default) early: a 30s lease would be granted
    already unusable. Refused (5) naming the margin, nothing written, on claim, claim --next and renew."""
    for ttl in ("30s", "10s", "1s"):
        refused(repo, "claim", A1, "--ttl", ttl, "--as", "bob", code=ExitCode.INVALID, says="clock margin (30s",
                also_json=ttl == "30s")
        refused(repo, "claim", "--next", "--ttl", ttl, "--as", "bob", code=ExitCode.INVALID, says="clock margin")
    refused(repo, "claim", A1, "--ttl", "90s", "--as", "bob", code=ExitCode.INVALID, says="clock margin (2m",
            env={"GW_CLOCK_MARGIN": "2m"})
    refused(repo, "claim", A1, "--as", "bob", code=ExitCode.INVALID, says="clock margin",  # the default ttl too
            env={"GW_TTL": "30s"})
    # gw run's claim: refused before an execution is even reserved (nothing recorded).
    refused(repo, "run", A1, "--ttl", "10s", "--as", "bob", "--", "true", code=ExitCode.INVALID, says="clock margin")
    assert gw_here(repo, "claim", state["crit"], "--ttl", "31s", "--as", "bob").returncode == 0  # just over it
    assert gw_here(repo, "claim", A1, "--ttl", "10m", "--as", "bob").returncode == 0
    refused(repo, "renew", A1, "--ttl", "20s", "--as", "bob", code=ExitCode.INVALID, says="clock margin")
    with Workplane(str(repo), agent="bob") as wp:  # the library, and a batch member, the same
        for doc in ({"op": "renew", "item": A1, "ttl": 30},
                    {"op": "batch", "ops": [{"op": "claim", "item": A2, "ttl": "5s"}]}):
            with pytest.raises(Invalid, match="clock margin"):
                wp.submit(doc)
    assert gw_here(repo, "renew", A1, "--ttl", "10m", "--as", "bob").returncode == 0


def test_rest_refuses_a_lease_no_longer_than_the_clock_margin(repo: Path, state: dict[str, str]) -> None:
    pytest.importorskip("fastapi", reason="gw serve needs the serve extra")
    from fastapi.testclient import TestClient

    from gitwork.serve.app import create_app
    from gitwork.serve.tokens import Tokens
    from gitwork.store import Repository

    token = Tokens(Repository.discover(str(repo)).gitwork_dir()).add("bob", "person")[0]
    before = tip(repo)
    with TestClient(create_app(str(repo)), base_url="http://gw", headers={"Authorization": f"Bearer {token}"}) as http:
        for doc in ({"op": "claim", "item": A1, "ttl": "30s"}, {"op": "claim", "next": True, "ttl": "5s"}):
            answer = http.post("/v1/commands", json=doc)
            assert (answer.status_code, answer.json()["error"]) == (422, "invalid"), answer.text
            assert "clock margin" in answer.json()["message"]
        assert tip(repo) == before
        granted = http.post("/v1/commands", json={"op": "claim", "item": A1, "ttl": "2m"})
        assert granted.status_code == 200, granted.text
        renewed = http.post("/v1/commands", json={"op": "renew", "item": A1, "ttl": "15s"})
        assert (renewed.status_code, renewed.json()["error"]) == (422, "invalid"), renewed.text


# --- text that is not Unicode: lone surrogates (JSON escapes) and bytes that are not UTF-8 ---------

LONE = "a\ud800b"
FULL = ids.imported("csv", "e1")  # the id the import op takes for this source and key
_IMPORT = {"op": "import", "item": FULL, "source": "csv", "external": "e1", "title": "t"}
SURROGATE_DOCUMENTS: list[dict[str, Any]] = [
    {"op": "new", "title": LONE},
    {"op": "new", "title": "t", "description": LONE},
    {"op": "new", "title": "t", "labels": [LONE]},
    {"op": "new", "title": "t", LONE: 1},
    {"op": "msg", "item": A1, "text": LONE},
    {"op": "claim", "item": A1, "ttl": LONE},
    {"op": "claim", "item": LONE},
    {"op": LONE},
    {"op": "new", "title": "t", "as": LONE},
    {"op": "new", "title": "t", "id": LONE},
    {**_IMPORT, "fields": {"k": LONE}},  # structured data: each of these crashed (exit 1) when written
    {**_IMPORT, "original": {"k": [LONE]}},
    {**_IMPORT, "original": {LONE: 1}},
    {**_IMPORT, "comments": [{"id": "m-abcd", "by": "x", "text": LONE}]},
    {"op": "shadow-report", "shadow": "s1", "report": {"counts": {LONE: 1}, "compared": 1, "agree": 1}},
    {"op": "shadow-report", "shadow": "s1", "report": {"counts": {}, "compared": 1, "agree": 1, "x": LONE}},
    {"op": "batch", "ops": [{"op": "new", "title": "ok"}, {**_IMPORT, "fields": {"k": LONE}}]},
]


@pytest.mark.parametrize("document", SURROGATE_DOCUMENTS, ids=lambda d: str(d.get("op"))[:12])
def test_a_lone_surrogate_anywhere_in_a_document_is_invalid_never_a_traceback(repo: Path, state: dict[str, str],
                                                                                document: dict[str, Any]) -> None:
    text = json.dumps(document)  # ASCII: the surrogate travels as a \ud800 escape, as any JSON writer sends it
    assert "\\ud800" in text
    refused(repo, "apply", "-", input=text, code=ExitCode.INVALID, says="", also_json=True)
    before = tip(repo)
    with Workplane(str(repo), agent="alice") as wp:
        with pytest.raises(Invalid):
            wp.submit(document)
    assert tip(repo) == before


def test_bytes_that_are_not_utf8_in_a_command_file_are_invalid(repo: Path, state: dict[str, str], tmp_path: Path) -> None:
    for name, data in (("one.json", b'{"op": "new", "title": "ab\xff\xfe"}'),
                       ("one.yaml", b'op: new\ntitle: "ab\xc3"\n'),
                       ("lines.jsonl", b'{"op": "new", "title": "a"}\n{"op": "new", "title": "b\xed\xa0\x80"}\n')):
        path = tmp_path / name
        path.write_bytes(data)  # \xed\xa0\x80: a surrogate encoded as UTF-8 bytes, which UTF-8 forbids
        refused(repo, "apply", str(path), code=ExitCode.INVALID, says="not UTF-8", also_json=name == "one.json")
