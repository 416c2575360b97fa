"""Everyday use (issue 18, "What to add"): the reports that say why an item is not ready, stale
leases, a summary, and what an agent re-reads after a context reset. Through the real CLI on real
repositories; time from ``GW_NOW``.

``gw_ok`` runs the real entry point (``gitwork.cli.main.main``: fast path, then typer) in this
process, which keeps these tests cheap; what reads stdin or starts an editor, and the checks of exit
codes and of the global options, run ``gw`` in a child process (``run_gw``).
"""

from __future__ import annotations

import contextlib
import io
import json
from pathlib import Path

import pytest

from conftest import environment, git, let_post, run_gw, tip
from gitwork.cli import main as cli_main

ALICE = {"GW_AGENT": "alice", "GW_NO_AUTO_GC": "1"}


def gw_ok(repo: Path, *args: str, env: dict[str, str] | None = None, input: str | None = None) -> str:
    full = {**ALICE, **(env or {})}
    if input is not None or "VISUAL" in full:  # stdin or an editor: a real child process
        done = run_gw(repo, *args, env=full, input=input)
        assert done.returncode == 0, (args, done.returncode, done.stdout, done.stderr)
        return done.stdout
    out, err = io.StringIO(), io.StringIO()
    with environment(full), contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = cli_main.main([*args, "-C", str(repo)])
    assert code == 0, (args, code, out.getvalue(), err.getvalue())
    return out.getvalue()


def gw_json(repo: Path, *args: str, env: dict[str, str] | None = None) -> object:
    return json.loads(gw_ok(repo, *args, "--json", env=env))


def new(repo: Path, title: str, *args: str) -> str:
    return str(gw_json(repo, "new", title, *args)["item"])  # type: ignore[index]


@pytest.fixture
def plane(repo: Path) -> Path:
    gw_ok(repo, "init")
    return repo


def test_blocked_names_each_reason(plane: Path) -> None:
    base = new(plane, "base")
    mid = new(plane, "mid", "--dep", base)
    top = new(plane, "top", "--dep", mid)
    free = new(plane, "free")
    gw_ok(plane, "claim", mid, "--force")  # its dependency is open: claimed anyway
    gw_ok(plane, "ask", mid, "ship it?", "-o", "yes", "-o", "no", "--to", "bob")
    gw_ok(plane, "edit", top, "--status", "blocked", "--reason", "waiting for the design")

    entries = gw_json(plane, "blocked")
    assert isinstance(entries, list)
    by_item = {e["item"]: e for e in entries}
    assert set(by_item) == {mid, top}, "free has no reason; base waits on nothing"
    assert free not in by_item
    mid_reasons = by_item[mid]["blocked_by"]
    assert {"kind": "dependency", "item": base, "title": "base", "status": "open"} in mid_reasons
    decision = next(r for r in mid_reasons if r["kind"] == "decision")
    assert decision["question"] == "ship it?" and decision["options"] == ["yes", "no"] and decision["seq"] == 1
    manual = next(r for r in by_item[top]["blocked_by"] if r["kind"] == "manual")
    assert manual["reason"] == "waiting for the design" and manual["by"] == "alice"

    text = gw_ok(plane, "blocked")
    assert "waits on" in text and "(open: base)" in text
    assert "waits for a decision on #1: ship it?" in text
    assert "blocked by hand by alice: waiting for the design" in text


def test_blocked_lists_items_waiting_on_dependencies_that_show_as_open(plane: Path) -> None:
    """The case the issue found: an item waiting on dependencies shows as `open` in `gw list`."""
    first = new(plane, "first")
    second = new(plane, "second", "--dep", first)
    assert [e["item"] for e in gw_json(plane, "blocked")] == [second]  # type: ignore[union-attr]
    gw_ok(plane, "claim", first)
    gw_ok(plane, "done", first)
    assert gw_json(plane, "blocked") == []
    done = run_gw(plane, "blocked", env=ALICE)
    assert done.stdout == "" and "nothing is blocked" in done.stderr


def test_a_cancelled_dependency_blocks_and_is_named(plane: Path) -> None:
    gone = new(plane, "gone")
    waiting = new(plane, "waiting", "--dep", gone)
    gw_ok(plane, "cancel", gone)
    [entry] = gw_json(plane, "blocked")  # type: ignore[misc]
    assert entry["item"] == waiting
    assert entry["blocked_by"] == [{"kind": "dependency", "item": gone, "title": "gone", "status": "cancelled"}]


def test_dep_tree_both_directions(plane: Path) -> None:
    a = new(plane, "a")
    b = new(plane, "b")
    c = new(plane, "c", "--dep", a, "--dep", b)
    d = new(plane, "d", "--dep", c)
    e = new(plane, "e", "--dep", d)
    tree = gw_json(plane, "dep", "tree", c)
    assert tree["ok"] is True and tree["item"] == c and tree["title"] == "c"  # type: ignore[index]
    assert [n["item"] for n in tree["depends_on"]] == [a, b]  # type: ignore[index]
    [down] = tree["dependents"]  # type: ignore[index]
    assert down["item"] == d and [n["item"] for n in down["dependents"]] == [e]
    text = gw_ok(plane, "dep", "tree", d)
    lines = text.splitlines()
    assert lines[0].endswith("[open] d") and lines[1] == "depends on:"
    assert lines[2].strip().endswith("[open] c") and lines[3].startswith("    ")  # c's own deps, nested
    assert lines[-2] == "needed by:" and lines[-1].strip().endswith("[open] e")
    leaf = gw_json(plane, "dep", "tree", a)
    assert leaf["depends_on"] == [] and [n["item"] for n in leaf["dependents"]] == [c]  # type: ignore[index]


def test_dep_tree_of_an_unknown_item_is_not_found(plane: Path) -> None:
    before = tip(plane)
    done = run_gw(plane, "dep", "tree", "w-0000000000000000", env=ALICE)
    assert done.returncode == 3 and done.stdout == "" and len(done.stderr.splitlines()) == 1
    assert tip(plane) == before


AT = {"GW_NOW": "2030-01-01T12:00:00Z"}


def two_leases(plane: Path) -> tuple[str, str]:
    """Items "short" (a 10-minute lease from AT), "long" (3 hours) and "free" (none): short and long."""
    short = new(plane, "short")
    long = new(plane, "long")
    new(plane, "free")
    gw_ok(plane, "claim", short, "--ttl", "10m", env=AT)
    gw_ok(plane, "claim", long, "--ttl", "3h", env=AT)
    return short, long


def test_stale_lists_expired_and_long_held_leases(plane: Path) -> None:
    short, long = two_leases(plane)
    assert gw_json(plane, "stale", env=AT) == []
    # 30 minutes on: short expired (and takeable past the margin); long held for 30m only.
    later = {"GW_NOW": "2030-01-01T12:30:00Z"}
    [expired] = gw_json(plane, "stale", env=later)  # type: ignore[misc]
    assert expired["item"] == short and expired["expired"] is True and expired["takeable"] is True
    assert expired["holder"] == "alice" and expired["held_seconds"] == 1800
    both = gw_json(plane, "stale", "--for", "20m", env=later)
    assert {(e["item"], e["expired"]) for e in both} == {(short, True), (long, False)}  # type: ignore[union-attr]
    # Default --for is 1h: two hours on, the long lease is listed though it has not expired.
    assert {e["item"] for e in gw_json(plane, "stale", env={"GW_NOW": "2030-01-01T14:00:00Z"})} == {short, long}  # type: ignore[union-attr]
    text = gw_ok(plane, "stale", env=later)
    assert "expired, takeable" in text and "30m" in text


def test_stale_refuses_a_bad_duration(plane: Path) -> None:
    done = run_gw(plane, "stale", "--for", "soon", "--json", env=ALICE)
    assert done.returncode == 5 and json.loads(done.stdout)["ok"] is False


def test_summary_counts(plane: Path) -> None:
    at = {"GW_NOW": "2030-01-01T12:00:00Z"}
    a = new(plane, "a")
    new(plane, "b", "--dep", a)
    c = new(plane, "c")
    d = new(plane, "d")
    gw_ok(plane, "claim", c, "--ttl", "10m", env=at)
    gw_ok(plane, "ask", c, "which way?", "-o", "left", "-o", "right", env=at)
    gw_ok(plane, "cancel", d, env=at)
    counts = gw_json(plane, "summary", env={"GW_NOW": "2030-01-01T13:00:00Z"})
    assert counts["ok"] is True and counts["total"] == 4  # type: ignore[index]
    assert counts["by_status"] == {"open": 2, "in_progress": 0, "blocked": 1, "done": 0, "cancelled": 1}  # type: ignore[index]
    assert counts["ready"] == 1 and counts["blocked"] == 2  # type: ignore[index]
    assert counts["expired"] == 1 and counts["open_questions"] == 1  # type: ignore[index]
    text = gw_ok(plane, "summary")
    assert "4 items: 2 open, 1 blocked, 1 cancelled" in text and "open questions 1" in text


def test_prime_names_the_identity_the_loop_and_what_is_held(plane: Path) -> None:
    item = new(plane, "the task", "-c", "tests pass")
    text = gw_ok(plane, "prime")
    for words in ("You are `alice`", "gw claim --next", "Exit 3", "--fence", "GW_FENCE", "gw renew", "gw msg",
                  "--reply-to", "gw ack", "gw inbox", "gw ask", "gw session start", "gw session commit", "gw done",
                  "gw session drop", "gw handoff", "| 7 |", "| 75 |", "| 12 |", "gw retry",
                  "Nothing: start with `gw claim --next`"):
        assert words in text, words
    assert "the default" not in text, "alice was named: not the default identity"
    assert 4000 < len(text) < 8000, "about 1-2k tokens (4 characters a token)"
    default = json.loads(run_gw(plane, "prime", "--json").stdout)
    assert "a new terminal or agent process is a new identity" in default["text"]
    claimed = gw_json(plane, "claim", item)
    text = gw_ok(plane, "prime")
    assert f"- {item} the task (fence {claimed['fence']}" in text and "[ ] 1. tests pass" in text  # type: ignore[index]
    gw_ok(plane, "decision", item, "use tomllib", "--why", "standard library")
    let_post(plane, "bob")  # a reviewer: may post on any item (docs/leases.md, "Who may post")
    gw_ok(plane, "msg", item, "how is it going?", "--kind", "question", "--to", "alice", env={"GW_AGENT": "bob"})
    doc = gw_json(plane, "prime")
    assert doc["item"] == item and doc["identity"] == "alice"  # type: ignore[index]
    assert "decided: use tomllib (why: standard library)" in doc["text"]  # type: ignore[index]
    assert doc["inbox"] == {"unread": 1, "unanswered": 0} and "1 unread" in doc["text"]  # type: ignore[index]
    assert doc["holding"][0]["criteria"] == [{"text": "tests pass", "done": False}]  # type: ignore[index]
    # an open session of the held item is named, with how to finish it
    git(plane, "-c", "user.name=P", "-c", "user.email=p@example.com", "commit", "-q", "--allow-empty", "-m", "start")
    session = gw_json(plane, "session", "start", item)["session"]  # type: ignore[index]
    doc = gw_json(plane, "prime")
    assert [s["session"] for s in doc["sessions"]] == [session]  # type: ignore[index]
    assert f"session {session} of {item} (no commit yet)" in doc["text"] and f"gw done {item}" in doc["text"]  # type: ignore[index]
    other = json.loads(gw_ok(plane, "prime", "--json", env={"GW_AGENT": "bob"}))
    assert other["holding"] == [] and other["item"] is None and "You are `bob`" in other["text"]


def test_onboard_prints_a_snippet_anywhere(tmp_path: Path) -> None:
    done = run_gw(tmp_path, "onboard")  # not a repository: it reads none
    assert done.returncode == 0 and "gw prime" in done.stdout and done.stdout.startswith("## ")
    doc = json.loads(run_gw(tmp_path, "onboard", "--json").stdout)
    assert doc["ok"] is True and "gw prime" in doc["snippet"]


# --- git and gh habits (point 9) ------------------------------------------------------------------


def test_global_dash_c_and_json_before_the_verb(plane: Path, tmp_path: Path) -> None:
    item = new(plane, "somewhere else")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    for argv in (["-C", str(plane), "--json", "show", item], ["--json", "-C", str(plane), "show", item],
                 [f"-C{plane}", "show", item, "--json"], ["-C", str(plane.parent), "-C", plane.name, "--json", "show", item]):
        done = run_gw(elsewhere, *argv, env=ALICE)
        assert done.returncode == 0, (argv, done.stderr)
        assert json.loads(done.stdout)["item"] == item
    # the fast path (ready, claim) and typer (summary, a group's verb) both take it
    ready = run_gw(elsewhere, "-C", str(plane), "--json", "ready", env=ALICE)
    assert [r["item"] for r in json.loads(ready.stdout)] == [item]
    tree = run_gw(elsewhere, "--json", "-C", str(plane), "dep", "tree", item, env=ALICE)
    assert json.loads(tree.stdout)["item"] == item
    sessions = run_gw(elsewhere, "-C", str(plane), "--json", "session", "list", env=ALICE)
    assert sessions.returncode == 0 and json.loads(sessions.stdout) == []
    claimed = run_gw(elsewhere, "-C", str(plane), "claim", item, env=ALICE)
    assert claimed.returncode == 0
    # outside any repository without -C: exit 10, as before
    assert run_gw(elsewhere, "--json", "summary", env=ALICE).returncode == 10


def test_global_json_reports_usage_errors_as_json(plane: Path) -> None:
    done = run_gw(plane, "--json", "show", env=ALICE)  # missing argument
    assert done.returncode == 2 and json.loads(done.stdout)["ok"] is False


def test_completion_scripts_and_item_ids(plane: Path) -> None:
    item = new(plane, "complete me")
    closed = new(plane, "closed")
    gw_ok(plane, "cancel", closed)
    for shell in ("bash", "zsh", "fish"):
        script = gw_ok(plane, "completion", shell)
        assert "_GW_COMPLETE" in script and "gw" in script
    bad = run_gw(plane, "completion", "tcsh", env=ALICE)
    assert bad.returncode == 2 and len(bad.stderr.splitlines()) == 1 and bad.stdout == ""
    # The shell's side: bash sources the script and asks the real gw for candidates.
    import os
    import shutil
    import sys

    bash = shutil.which("bash")
    if bash is None:
        pytest.skip("no bash")
    gw_bin = Path(sys.executable).with_name("gw")
    assert gw_bin.exists()
    program = ('eval "$(gw completion bash)"; COMP_WORDS=(gw sho); COMP_CWORD=1; _gw_completion gw; '
               'echo "${COMPREPLY[*]}"; COMP_WORDS=(gw show w-); COMP_CWORD=2; _gw_completion gw; '
               'echo "${COMPREPLY[*]}"; '
               # from another directory, with git's -C before the verb
               f'cd /; COMP_WORDS=(gw -C {plane} show w-); COMP_CWORD=4; _gw_completion gw; echo "${{COMPREPLY[*]}}"')
    import subprocess

    env = {**os.environ, **ALICE, "PATH": f"{gw_bin.parent}{os.pathsep}{os.environ['PATH']}"}
    done = subprocess.run([bash, "-c", program], cwd=plane, capture_output=True, text=True, env=env, timeout=60)
    verbs, ids, elsewhere = done.stdout.splitlines()
    assert verbs.split() == ["show"]
    assert ids.split() == [item], "open items only, full ids"
    assert elsewhere.split() == [item], "gw -C DIR show <TAB> completes DIR's ids"


# --- text from stdin, a file or an editor (point 6) ------------------------------------------------


def description_of(repo: Path, item: str) -> str:
    return str(gw_json(repo, "show", item)["description"])  # type: ignore[index]


def test_description_from_stdin_and_from_a_file(plane: Path, tmp_path: Path) -> None:
    text = "line one\n\n- a list\n- `code`"
    done = run_gw(plane, "new", "piped", "-d", "-", "--json", env=ALICE, input=text)
    assert done.returncode == 0, done.stderr
    item = json.loads(done.stdout)["item"]
    assert description_of(plane, item) == text, "-d - reads stdin, not a literal '-'"
    source = tmp_path / "desc.md"
    source.write_text("from a file\n")
    other = new(plane, "filed", "--description-file", str(source))
    assert description_of(plane, other) == "from a file\n"
    source.write_text("changed in the file")
    gw_ok(plane, "edit", other, "--description-file", str(source))
    assert description_of(plane, other) == "changed in the file"
    gw_ok(plane, "edit", other, "-d", "-", input="and from stdin")
    assert description_of(plane, other) == "and from stdin"


def test_bad_description_sources_are_refused_and_write_nothing(plane: Path, tmp_path: Path) -> None:
    before = tip(plane)
    missing = run_gw(plane, "new", "x", "--description-file", str(tmp_path / "nope"), env=ALICE)
    assert missing.returncode == 2 and len(missing.stderr.splitlines()) == 1
    both = run_gw(plane, "new", "x", "-d", "a", "--description-file", str(tmp_path / "nope"), env=ALICE)
    assert both.returncode == 2 and "not both" in both.stderr
    binary = tmp_path / "bin"
    binary.write_bytes(b"\xff\xfe\x00")
    assert run_gw(plane, "new", "x", "--description-file", str(binary), env=ALICE).returncode == 2
    huge = run_gw(plane, "new", "x", "-d", "-", env=ALICE, input="y" * (1024 * 1024))
    assert huge.returncode == 5 and "too long" in huge.stderr
    no_title = run_gw(plane, "new", "--json", env=ALICE)
    assert no_title.returncode == 2 and json.loads(no_title.stdout)["ok"] is False
    assert tip(plane) == before


def editor(tmp_path: Path, written: str) -> dict[str, str]:
    """An editor command with an argument (split like a shell, as git does) that saves ``written`` and
    keeps a copy of the form it was given next to it (``<form>.seen``, found through the marker file)."""
    import sys

    script = tmp_path / "editor.py"
    marker = tmp_path / "seen"
    script.write_text(
        "import sys\n"
        "flag, path = sys.argv[1], sys.argv[2]\n"
        "assert flag == '--wait', flag\n"
        f"open({str(marker)!r}, 'w', encoding='utf-8').write(open(path, encoding='utf-8').read())\n"
        f"open(path, 'w', encoding='utf-8').write({written!r})\n"
    )
    return {"VISUAL": f"'{sys.executable}' '{script}' --wait", "EDITOR": "false"}


def test_new_and_edit_in_an_editor(plane: Path, tmp_path: Path) -> None:
    env = editor(tmp_path, "Title from the editor\n\n## Why\nBecause.\n# a Markdown line, kept\n")
    done = run_gw(plane, "new", "-e", "--json", env={**ALICE, **env})
    assert done.returncode == 0, done.stderr
    item = json.loads(done.stdout)["item"]
    shown = gw_json(plane, "show", item)
    assert shown["title"] == "Title from the editor"  # type: ignore[index]
    assert shown["description"] == "## Why\nBecause.\n# a Markdown line, kept"  # type: ignore[index]
    # edit -e: the form holds the current title and description; only what changed is sent
    env = editor(tmp_path, "Title from the editor\n\nA new body.\n# ------------------------ >8 "
                           "------------------------\nignored\n")
    gw_ok(plane, "edit", item, "-e", env=env)
    seen = (tmp_path / "seen").read_text()
    assert seen.startswith("Title from the editor\n\n## Why\nBecause.\n") and ">8" in seen
    shown = gw_json(plane, "show", item)
    assert shown["title"] == "Title from the editor" and shown["description"] == "A new body."  # type: ignore[index]
    history = gw_json(plane, "history", item)
    assert history[-1]["changes"] == {"description": "(changed)"}  # type: ignore[index]


def test_an_empty_form_or_a_failing_editor_writes_nothing(plane: Path, tmp_path: Path) -> None:
    before = tip(plane)
    empty = run_gw(plane, "new", "-e", env={**ALICE, **editor(tmp_path, "\n\n")})
    assert empty.returncode == 5 and "empty title" in empty.stderr
    failing = run_gw(plane, "new", "-e", env={**ALICE, "VISUAL": "", "EDITOR": "false"})
    assert failing.returncode == 2 and "exited with 1" in failing.stderr
    assert tip(plane) == before


# --- JSON for scripts (point 7) -------------------------------------------------------------------


def test_json_field_selection(plane: Path) -> None:
    item = new(plane, "pick", "-l", "x")
    new(plane, "other")
    rows = json.loads(gw_ok(plane, "list", "--json=item,title,status"))
    assert {"item": item, "title": "pick", "status": "open"} in rows and len(rows) == 2
    assert all(list(row) == ["item", "title", "status"] for row in rows)
    shown = json.loads(gw_ok(plane, "--json=title,labels,nope", "show", item))
    assert shown == {"ok": True, "title": "pick", "labels": ["x"], "nope": None}
    claimed = json.loads(gw_ok(plane, "claim", item, "--json=fence,holder"))
    assert claimed == {"ok": True, "fence": claimed["fence"], "holder": "alice"}
    gw_ok(plane, "msg", item, "hello")
    assert json.loads(gw_ok(plane, "thread", item, "--json=seq,text")) == [{"seq": 1, "text": "hello"}]
    # an error is printed whole
    error = run_gw(plane, "show", "w-0000000000000000", "--json=title", env=ALICE)
    assert error.returncode == 3 and json.loads(error.stdout)["error"] == "not-found"
    empty = run_gw(plane, "list", "--json=item,,title", env=ALICE)
    assert empty.returncode == 2 and json.loads(empty.stdout)["ok"] is False and len(empty.stderr.splitlines()) == 1


# --- several ids (point 8) ------------------------------------------------------------------------


def test_several_ids_one_command_each_and_the_first_failure_decides(plane: Path) -> None:
    a, b, c = new(plane, "a"), new(plane, "b"), new(plane, "c")
    before = int(gw_ok(plane, "log", "--json").count('"commit"'))
    done = run_gw(plane, "cancel", a, "w-0000000000000000", b, "--json", env=ALICE)
    assert done.returncode == 3, "the first failure's exit code"
    results = json.loads(done.stdout)
    assert [r["ok"] for r in results] == [True, False, True]
    assert results[0]["item"] == a and results[2]["item"] == b
    assert results[1]["error"] == "not-found" and results[1]["argument"] == "w-0000000000000000"
    assert len(done.stderr.splitlines()) == 1 and "w-0000000000000000" in done.stderr
    assert gw_ok(plane, "log", "--json").count('"commit"') == before + 2, "one commit per id that landed"
    statuses = {r["item"]: r["status"] for r in json.loads(gw_ok(plane, "list", "--all", "--json"))}
    assert statuses == {a: "cancelled", b: "cancelled", c: "open"}
    # text: each reported; reopen of an open item is illegal (6) and does not stop the rest
    again = run_gw(plane, "reopen", c, a, b, env=ALICE)
    assert again.returncode == 6 and again.stdout == ""
    assert f"reopen {a}" in again.stderr and f"reopen {b}" in again.stderr
    gw_ok(plane, "claim", a)
    gw_ok(plane, "claim", b)
    finished = json.loads(gw_ok(plane, "done", a, b, "--json"))
    assert [r["item"] for r in finished] == [a, b] and all(r["ok"] for r in finished)
    # one id: the single command's own shape, unchanged
    single = json.loads(gw_ok(plane, "cancel", c, "--json"))
    assert single["ok"] is True and single["item"] == c


# --- small truths (point 10) ----------------------------------------------------------------------


def test_a_reply_to_a_question_counts_as_its_answer_in_the_inbox(plane: Path) -> None:
    item = new(plane, "talk")
    other = new(plane, "more talk")
    bob = {"GW_AGENT": "bob"}
    gw_ok(plane, "msg", item, "what colour?", "--kind", "question", "--to", "bob")
    gw_ok(plane, "msg", other, "which size?", "--kind", "question", "--to", "bob")
    box = json.loads(gw_ok(plane, "inbox", "--json", env=bob))
    assert sorted((m["item"], m["seq"]) for m in box["unread"]) == sorted([(item, 1), (other, 1)])
    gw_ok(plane, "msg", item, "unrelated", env=bob)  # not a reply: the question stays
    assert len(json.loads(gw_ok(plane, "inbox", "--json", env=bob))["unread"]) == 2
    gw_ok(plane, "msg", item, "blue", "--reply-to", "1", env=bob)
    box = json.loads(gw_ok(plane, "inbox", "--json", env=bob))
    assert [(m["item"], m["seq"]) for m in box["unread"] + box["unanswered"]] == [(other, 1)]
    assert "which size?" in gw_ok(plane, "inbox", env=bob) and "what colour?" not in gw_ok(plane, "inbox", env=bob)
    # someone else's reply does not answer it for bob (carol, a reviewer, may post on any item)
    let_post(plane, "carol")
    gw_ok(plane, "msg", other, "I think M", "--reply-to", "1", env={"GW_AGENT": "carol"})
    assert [m["item"] for m in json.loads(gw_ok(plane, "inbox", "--json", env=bob))["unread"]] == [other]


# --- search (point 4) -----------------------------------------------------------------------------


def test_search_titles_descriptions_criteria_decisions_and_threads(plane: Path) -> None:
    in_title = new(plane, "Parser for TOML")
    in_desc = new(plane, "x", "-d", "we need a toml reader")
    in_crit = new(plane, "y", "-c", "reads Toml files")
    in_decision = new(plane, "z")
    in_thread = new(plane, "w")
    nowhere = new(plane, "nothing here")
    gw_ok(plane, "claim", in_decision)
    gw_ok(plane, "decision", in_decision, "use tomllib", "--why", "standard library")
    gw_ok(plane, "msg", in_thread, "what about TOML?")
    found = gw_json(plane, "search", "toml")
    by_item = {f["item"]: [m["field"] for m in f["matches"]] for f in found}  # type: ignore[union-attr]
    assert by_item == {in_title: ["title"], in_desc: ["description"], in_crit: ["criterion 1"],
                       in_decision: ["decision 1"], in_thread: ["message #1"]}
    assert nowhere not in by_item
    gw_ok(plane, "cancel", in_title)
    assert in_title not in {f["item"] for f in gw_json(plane, "search", "toml")}  # type: ignore[union-attr]
    assert {f["item"] for f in gw_json(plane, "search", "toml", "--all")} >= {in_title}  # type: ignore[union-attr]
    assert [f["item"] for f in gw_json(plane, "search", "toml", "-s", "cancelled")] == [in_title]  # type: ignore[union-attr]
    text = gw_ok(plane, "search", "TOML")
    assert "message #1: what about TOML?" in text
    empty = run_gw(plane, "search", "  ", env=ALICE)
    assert empty.returncode == 5 and empty.stdout == ""
    bad = run_gw(plane, "search", "x", "-s", "finished", env=ALICE)
    assert bad.returncode == 5 and "unknown status" in bad.stderr and "expired" in bad.stderr


def test_ready_explain_says_why_each_open_item_is_not_ready(plane: Path) -> None:
    free = new(plane, "free")
    held = new(plane, "held")
    later = new(plane, "later", "--dep", held)
    gw_ok(plane, "claim", held, env={"GW_AGENT": "bob"})
    entries = gw_json(plane, "ready", "--explain")
    by_item = {e["item"]: e for e in entries}  # type: ignore[union-attr]
    assert entries[0]["item"] == free and set(by_item) == {free, held, later}, "ready ones first"  # type: ignore[index]
    assert by_item[free]["ready"] is True and by_item[free]["why_not"] == []
    [why_held] = by_item[held]["why_not"]
    assert why_held["kind"] == "held" and why_held["holder"] == "bob"
    assert by_item[later]["why_not"] == [{"kind": "dependency", "item": held, "title": "held", "status": "in_progress"}]
    text = gw_ok(plane, "ready", "--explain")
    assert "held by bob until" in text and "waits on" in text
    # plain ready is unchanged
    assert [r["item"] for r in gw_json(plane, "ready")] == [free]  # type: ignore[union-attr]


def test_field_selection_with_several_ids_keeps_errors_whole(plane: Path) -> None:
    a = new(plane, "a")
    done = run_gw(plane, "cancel", a, "w-0000000000000000", "--json=item,status", env=ALICE)
    assert done.returncode == 3
    ok, error = json.loads(done.stdout)
    assert ok == {"ok": True, "item": a, "status": "cancelled"}
    assert error["ok"] is False and error["error"] == "not-found" and error["argument"] == "w-0000000000000000"


# --- several ids on release and edit (point 8), through the fast path for release ------------------


def test_release_and_edit_take_several_ids(plane: Path) -> None:
    a, b, c = new(plane, "a"), new(plane, "b"), new(plane, "c")
    for item in (a, b):
        gw_ok(plane, "claim", item)
    released = run_gw(plane, "release", a, "w-0000000000000000", b, "--json", env=ALICE)  # a real process
    assert released.returncode == 3, "the first failure's exit code"
    assert [r["ok"] for r in json.loads(released.stdout)] == [True, False, True]
    assert {r["item"] for r in gw_json(plane, "ready")} == {a, b, c}  # type: ignore[union-attr]
    gw_ok(plane, "edit", a, b, "--add-label", "ui", "--add-label", "web", "-p", "1")
    rows = {r["item"]: r for r in gw_json(plane, "list")}  # type: ignore[union-attr]
    assert rows[a]["labels"] == rows[b]["labels"] == ["ui", "web"] and rows[c]["labels"] == []
    assert rows[a]["priority"] == rows[b]["priority"] == 1 and rows[c]["priority"] == 2
    before = tip(plane)
    several = run_gw(plane, "edit", a, b, "-e", env={**ALICE, "VISUAL": "true"})
    assert several.returncode == 2 and len(several.stderr.splitlines()) == 1 and tip(plane) == before


# --- expired leases are visible (point 2) ---------------------------------------------------------


def test_list_and_ready_show_an_expired_lease_as_expired(plane: Path) -> None:
    lapsed, live = two_leases(plane)
    later = {"GW_NOW": "2030-01-01T12:30:00Z"}
    rows = {r["item"]: r for r in gw_json(plane, "list", env=later)}  # type: ignore[union-attr]
    assert rows[lapsed]["expired"] is True and rows[live]["expired"] is False
    text = {line.split("\t")[-1]: line.split("\t") for line in gw_ok(plane, "list", env=later).splitlines()}
    assert text["short"][1:4] == ["expired", "2", "alice"], "not in_progress alice"
    assert text["long"][1] == "in_progress"
    ready = {line.split("\t")[-1]: line.split("\t")[1] for line in gw_ok(plane, "ready", env=later).splitlines()}
    assert ready == {"short": "expired", "free": "open"}
    # -s expired lists exactly the leases past their expiry; it may be combined with a real status
    assert [r["item"] for r in gw_json(plane, "list", "-s", "expired", env=later)] == [lapsed]  # type: ignore[union-attr]
    assert gw_json(plane, "list", "-s", "expired", env=AT) == []
    both = gw_json(plane, "list", "-s", "open", "-s", "expired", env=later)
    assert {r["title"] for r in both} == {"short", "free"}  # type: ignore[union-attr]


def test_an_unknown_status_is_refused_naming_the_known_ones(plane: Path) -> None:
    new(plane, "a")
    for verb in ("list", "search"):
        args = [verb, *(["a"] if verb == "search" else []), "-s", "stale"]
        done = run_gw(plane, *args, env=ALICE)
        assert done.returncode == 5 and done.stdout == "", verb
        assert "unknown status 'stale'" in done.stderr and "expired" in done.stderr and "in_progress" in done.stderr


# --- list --text and search with the list filters (point 4) ---------------------------------------


def test_list_text_and_search_take_the_list_filters(plane: Path) -> None:
    ui = new(plane, "Toml in the UI", "-l", "ui", "-p", "1")
    api = new(plane, "api", "-d", "parses toml", "-l", "api", "-p", "2")  # ui first: a better priority
    new(plane, "unrelated", "-l", "ui")
    gw_ok(plane, "claim", api, env={"GW_AGENT": "bob"})
    assert [r["item"] for r in gw_json(plane, "list", "--text", "TOML")] == [ui, api]  # type: ignore[union-attr]
    assert [r["item"] for r in gw_json(plane, "list", "--text", "toml", "-l", "ui")] == [ui]  # type: ignore[union-attr]
    assert [r["item"] for r in gw_json(plane, "search", "toml", "--holder", "bob")] == [api]  # type: ignore[union-attr]
    assert [r["item"] for r in gw_json(plane, "search", "toml", "-p", "1")] == [ui]  # type: ignore[union-attr]
    rows = gw_json(plane, "list", "--text", "toml")
    assert rows[1]["matches"] == [{"field": "description", "text": "parses toml"}]  # type: ignore[index]
    cut = run_gw(plane, "search", "toml", "-n", "1", "--json", env=ALICE)
    assert cut.returncode == 0 and [r["item"] for r in json.loads(cut.stdout)] == [ui]
    assert "more match" in cut.stderr, "a cut listing says so"
    assert "unrelated" not in gw_ok(plane, "list", "--text", "toml")
    empty = run_gw(plane, "list", "--text", " ", env=ALICE)
    assert empty.returncode == 5 and empty.stdout == ""


# --- done and cancel --offline, replayed by gw sync (issue 8's leftover) ---------------------------


def test_done_and_cancel_offline_are_tentative_until_sync(machine_a: Path, remote: Path) -> None:
    a = machine_a
    finish, drop = new(a, "finish"), new(a, "drop")
    gw_ok(a, "claim", finish)
    gw_ok(a, "sync")
    published = tip(remote)
    done = gw_json(a, "done", finish, "--offline")
    cancelled = gw_json(a, "cancel", drop, "--offline")
    assert tip(remote) == published, "the arbiter was not asked"
    pending = [p["command_id"] for p in gw_json(a, "status")["pending"]]  # type: ignore[index]
    assert pending == [done["command_id"], cancelled["command_id"]]  # type: ignore[index]
    report = gw_json(a, "sync")
    assert report["refused"] == [] and tip(remote) == tip(a)  # type: ignore[index]
    statuses = {r["item"]: r["status"] for r in gw_json(a, "list", "--all")}  # type: ignore[union-attr]
    assert statuses == {finish: "done", drop: "cancelled"}


# --- a pager on a terminal, by git's rules (point 9) ----------------------------------------------


def on_a_terminal(repo: Path, *args: str, env: dict[str, str]) -> tuple[int, str]:
    """Run ``gw`` with stdout on a pseudo-terminal (what a person sees); returns its exit code and screen."""
    import os
    import subprocess

    from conftest import gw_cmd

    controller, terminal = os.openpty()
    full = {key: value for key, value in os.environ.items() if key not in ("PAGER", "LESS", "LV")}
    try:
        done = subprocess.run(gw_cmd(*args), cwd=repo, stdout=terminal, stderr=subprocess.PIPE, text=True,
                              stdin=subprocess.DEVNULL, env={**full, **ALICE, "COLUMNS": "100", **env}, timeout=60)
    finally:
        os.close(terminal)
    screen = b""
    while True:
        try:
            chunk = os.read(controller, 65536)
        except OSError:  # EIO: the terminal's other end is closed and drained
            break
        if not chunk:
            break
        screen += chunk
    os.close(controller)
    assert "Traceback" not in done.stderr, done.stderr
    return done.returncode, screen.decode()


def test_a_pager_on_a_terminal_by_gits_rules(plane: Path, tmp_path: Path) -> None:
    first = new(plane, "first item")
    paged, seen = tmp_path / "paged", tmp_path / "less"
    into = f'echo "$LESS $LV" > {seen}; cat > {paged}'
    code, screen = on_a_terminal(plane, "list", env={"GIT_PAGER": into})
    assert code == 0 and "first item" in paged.read_text() and "first item" not in screen
    assert seen.read_text().split() == ["FRX", "-c"], "git's defaults for less"
    paged.unlink()
    on_a_terminal(plane, "list", env={"GIT_PAGER": into, "LESS": "S"})
    assert seen.read_text().split() == ["S", "-c"], "a LESS of one's own is kept"
    # --no-pager (before the verb, as in git), a piped stdout, a mutation, GIT_PAGER=cat: no pager
    paged.unlink()
    for off in ("--no-pager", "-P"):
        code, screen = on_a_terminal(plane, off, "list", env={"GIT_PAGER": into})
        assert code == 0 and "first item" in screen and not paged.exists()
    piped = run_gw(plane, "list", env={**ALICE, "GIT_PAGER": into})
    assert "first item" in piped.stdout and not paged.exists()
    code, screen = on_a_terminal(plane, "new", "second", env={"GIT_PAGER": into})
    assert code == 0 and screen.startswith("w-") and not paged.exists()
    code, screen = on_a_terminal(plane, "list", env={"GIT_PAGER": "cat", "PAGER": into})
    assert "first item" in screen and not paged.exists()
    # core.pager comes before PAGER, and PAGER before the default
    git(plane, "config", "core.pager", f"cat > {paged}")
    on_a_terminal(plane, "list", env={"PAGER": f"cat > {tmp_path / 'other'}"})
    assert "second" in paged.read_text() and not (tmp_path / "other").exists()
    git(plane, "config", "--unset", "core.pager")
    on_a_terminal(plane, "list", env={"PAGER": f"cat > {tmp_path / 'other'}"})
    assert "second" in (tmp_path / "other").read_text()
    # a person who quits the pager early: exit 0, nothing printed after it, no traceback
    for n in range(3):
        gw_ok(plane, "msg", first, f"message {n} " + "x" * 30000)  # past a pipe's 64 KiB
    code, screen = on_a_terminal(plane, "thread", first, env={"GIT_PAGER": "head -c 10 >/dev/null"})
    assert code == 0 and screen == ""


# --- --jq EXPR (point 7) --------------------------------------------------------------------------


def test_jq_filters_the_json_output(plane: Path) -> None:
    a = new(plane, "alpha", "-l", "ui", "-p", "1")
    new(plane, "beta")
    assert gw_ok(plane, "list", "--jq", ".[].title").splitlines() == ["alpha", "beta"], "strings raw"
    assert gw_ok(plane, "--jq=.[] | select(.labels == [\"ui\"]) | {item, priority}", "list").splitlines() == [
        json.dumps({"item": a, "priority": 1})], "objects compact, one a line; --jq before the verb too"
    assert gw_ok(plane, "show", a, "--jq", ".criteria | length") == "0\n"
    before = tip(plane)
    bad = run_gw(plane, "new", "gamma", "--jq", ".[", env=ALICE)
    assert bad.returncode == 2 and json.loads(bad.stdout)["error"] == "usage" and len(bad.stderr.splitlines()) == 1
    assert tip(plane) == before, "a malformed expression is refused before the command runs"
    wrong = run_gw(plane, "list", "--jq", ".title", env=ALICE)
    assert wrong.returncode == 5 and wrong.stdout == "" and "Cannot index array" in wrong.stderr
    missing = run_gw(plane, "show", "w-0000000000000000", "--jq", ".title", env=ALICE)
    assert missing.returncode == 3 and json.loads(missing.stdout)["error"] == "not-found", "an error as it is"
    follow = run_gw(plane, "thread", a, "--follow", "--jq", ".", env=ALICE)
    assert follow.returncode == 2 and "--follow" in follow.stderr


# --- small truths: who you are now (point 10) -----------------------------------------------------


def test_not_the_holder_names_who_you_are_and_how_to_be_the_holder(plane: Path) -> None:
    item = new(plane, "held")
    gw_ok(plane, "claim", item)
    before = tip(plane)
    fresh = run_gw(plane, "release", item)  # a new terminal: GW_AGENT unset, the default identity
    assert fresh.returncode == 7 and len(fresh.stderr.splitlines()) == 1
    assert "held by alice" in fresh.stderr and "(you are " in fresh.stderr
    assert "export GW_AGENT=alice" in fresh.stderr, "says how to act as the holder"
    named = run_gw(plane, "release", item, env={"GW_AGENT": "bob"})
    assert named.returncode == 7 and "(you are bob)" in named.stderr and "GW_AGENT" not in named.stderr
    assert tip(plane) == before


# --- --label is all of them, --label-any is any of them (point 5) ----------------------------------


def test_labels_and_or(plane: Path) -> None:
    ui = new(plane, "ui", "-l", "ui", "-l", "web", "-p", "1")
    api = new(plane, "api", "-l", "api", "-p", "2")
    new(plane, "docs", "-l", "docs", "-p", "3")
    assert [r["item"] for r in gw_json(plane, "list", "--label-any", "ui", "--label-any", "api")] == [ui, api]  # type: ignore[union-attr]
    assert [r["item"] for r in gw_json(plane, "ready", "--label", "ui", "--label", "web")] == [ui]  # type: ignore[union-attr]
    assert gw_json(plane, "ready", "--label", "ui", "--label", "api") == [], "--label repeated: all of them"
    both = gw_json(plane, "search", "i", "--label-any", "api", "--label-any", "web", "--label", "web")
    assert [r["item"] for r in both] == [ui]  # type: ignore[union-attr]
    claimed = gw_json(plane, "claim", "--next", "--label-any", "docs", "--label-any", "api")
    assert claimed["item"] == api  # type: ignore[index]
    before = tip(plane)
    alone = run_gw(plane, "claim", ui, "--label-any", "ui", env=ALICE)
    assert alone.returncode == 5 and "--label-any" in alone.stderr and tip(plane) == before


def test_a_limit_larger_than_sqlite_takes_means_no_limit(plane: Path) -> None:
    """``-n`` of 20 digits overflowed SQLite's 64-bit LIMIT (an internal error): it is no limit at all."""
    a, b = new(plane, "a"), new(plane, "b")
    for verb in ("list", "ready"):
        rows = gw_json(plane, verb, "-n", "99999999999999999999")
        assert {row["item"] for row in rows} == {a, b}  # type: ignore[union-attr,index]
