"""One convention for every command's ``--json`` (issue 8, point 13; docs/exit-codes.md, "Output with --json").

- stdout holds exactly one JSON value: an object for a single result (``"ok": true``), an array for a
  listing; ``thread --follow --json`` streams JSON lines, one message object per line;
- an error, usage errors included, is one object with ``"ok": false``, ``error``, ``code``,
  ``message``, and one line on stderr;
- an item id is always a full id under the key ``item`` (never ``id``).

The commands are enumerated from the typer app, so a command added without a case here fails
``test_every_command_has_a_case``. They run in-process (``gitwork.cli.main.main``, the real entry
point: fast path, then typer) against a real repository, with a real bare remote for the arbiter.
"""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path
from typing import Any

import pytest

from conftest import git, make_repo, run_gw, tip
from gitwork.cli import main as cli_main
from gitwork.workplane import Workplane

FULL_ID = re.compile(r"w-[0-9a-f]{16}\Z")
A = "w-a000000000000001"
B = "w-b000000000000002"
C = "w-c000000000000003"

# command path -> (arguments, shape): the cases run in this order, each may rely on the ones before.
# "{session}" is replaced by the id the session start case printed; "{worktree}" by its worktree.
CASES: dict[str, tuple[list[str], str]] = {
    "init": ([], "object"),
    "new": (["first", "-c", "works", "--from", "file:x.py"], "object"),
    "show": ([A], "object"),
    "list": (["--all"], "array"),
    "ready": ([], "array"),
    "edit": ([A, "--add-label", "json"], "object"),
    "claim": ([A], "object"),
    "renew": ([A, "--ttl", "20m"], "object"),
    "check": ([A, "1"], "object"),
    "decision": ([A, "one table", "--why", "simple"], "object"),
    "defer": ([A, "--until", "2h"], "object"),
    "undefer": ([A], "object"),
    "wait": ([A, "--ref", "main"], "object"),  # wait 2 (the timer was 1)
    "unwait": ([A, "2"], "object"),
    "waits check": ([], "object"),
    "msg": ([A, "hello", "--to", "bob"], "object"),
    "thread": ([A], "array"),
    "ack": ([A, "1", "--as", "bob"], "object"),
    "inbox": (["--as", "bob"], "object"),
    "ask": ([A, "ship it?", "-o", "yes", "-o", "no", "--to", "bob"], "object"),
    "decide": ([A, "2", "--choose", "yes", "--why", "tests pass", "--as", "bob"], "object"),
    "history": ([A], "array"),
    "log": (["-n", "3"], "array"),
    "blocked": ([], "array"),
    "dep tree": ([A], "object"),
    "stale": (["--for", "1s"], "array"),
    "summary": ([], "object"),
    "prime": ([], "object"),
    "onboard": ([], "object"),
    "help": (["claim"], "object"),
    "whoami": ([], "object"),
    "completion": (["bash"], "object"),
    "search": (["first", "--all"], "array"),
    "apply": (["{document}"], "object"),
    "import": (["beads", "{beads}"], "object"),
    "export": (["--format", "beads", "--output", "{export}"], "object"),
    "shadow add": (["bd", "--kind", "beads", "--source", "{beads}"], "object"),
    "shadow report": (["bd", "--record"], "object"),
    "session start": ([A], "object"),
    "session commit": (["--file", "new.txt", "-m", "add a file", "-C", "{worktree}"], "object"),
    "session list": ([], "array"),
    "queue remove": (["{session}"], "object"),  # queued by SETUP_AFTER["session list"]
    "publish": (["{session}", "--keep-open"], "object"),
    "done": ([A], "object"),
    "reopen": ([A], "object"),
    "session drop": (["{session}"], "object"),
    "cancel": ([C], "object"),
    "handoff": ([B, "--reason", "blocked", "-m", "stuck"], "object"),
    "takeover": ([B], "object"),
    "release": ([B], "object"),
    "revoke": ([B, "--reason", "reassigning"], "object"),
    "remote set": (["origin"], "object"),
    "sync": ([], "object"),
    "retry": (["c-retried-renew"], "object"),
    "push": ([], "object"),
    "pull": ([], "object"),
    "status": ([], "object"),
    "hooks install": ([], "object"),
    "doctor": ([], "array"),  # after hooks install: every check passes (exit 0)
    "config get": (["default_ttl"], "object"),
    "config set": (["default_ttl", "20m"], "object"),
    "config list": ([], "object"),
    "demo": ([], "object"),
    "run": ([B, "--backend", "subprocess", "cat"], "object"),
    "runs": ([], "array"),
    "send": (["{execution}", "hello", "--enter"], "object"),
    "capture": (["{execution}"], "object"),
    "report": (["--execution", "{execution}", "--tokens-in", "10", "--cost", "0.01"], "object"),
    "cost": (["--by", "agent"], "object"),
    "coordinate": (["--once"], "object"),
    "launcher": (["--status"], "object"),  # serving runs until stopped (tests/test_launcher.py)
    "context": ([B], "object"),
    "attach": (["{execution}"], "object"),
    "detach": (["{execution}"], "object"),  # released, not killed: the loop below ends its process
    "stop": (["{execution}"], "object"),
    "cache status": ([], "object"),
    "cache rebuild": ([], "object"),
    "cache drop": ([], "object"),
    "mcp": (["--tools"], "object"),  # serving speaks MCP on stdio (tests/test_mcp.py); --tools prints the list
    # multi-step sessions: the rules and items come from STEPS_SETUP below
    "session create": (["{steps_item}", "--chain", "one"], "object"),
    "session status": (["{steps}"], "object"),
    "step next": (["{steps}"], "object"),
    "step block": (["{steps}", "step-1/parallel-1", "--reason", "stuck"], "object"),
    "step resume": (["{steps}"], "object"),
    "step wait": (["{steps}", "step-2/parallel-1", "--timeout", "0"], "object"),
    "step submit": (["{steps}", "step-2/parallel-1"], "object"),
    "session stop": (["{steps}"], "object"),
    "session done": (["{steps}", "--route", "user"], "object"),
    "serve token add": (["alice", "--role", "person"], "object"),
    "serve token list": ([], "array"),
    "serve token revoke": (["alice"], "object"),
}
STEPS_RULES = "sessions:\n  steps: {solo: {operator: user}}\n  chains: {one: [solo]}\n"


def steps_setup(path: str, doc: dict[str, Any], project: Path, found: dict[str, str],
                capsys: pytest.CaptureFixture[str]) -> None:
    """The multi-step cases: rules and an item first; a person's responses between the verbs."""
    def respond(folder: str, key: str) -> None:
        (Path(folder) / key / "response" / "response.json").write_text('{"status": "done", "fields": {}}')

    if path == "cache drop":
        (project / ".workplane").write_text(STEPS_RULES)
        found.update(steps_item=json.loads(gw_in_process(capsys, ["new", "steps", "-C", str(project), "--json"])[1])["item"])
    elif path == "session create":
        found.update(steps=doc["session"])
    elif path == "step resume":
        respond(doc["folder"], "step-2/parallel-1")
    elif path == "session stop":  # a second session, finished, for `session done`
        item = json.loads(gw_in_process(capsys, ["new", "steps 2", "-C", str(project), "--json"])[1])["item"]
        made = json.loads(gw_in_process(capsys, ["session", "create", item, "--chain", "one", "-C", str(project),
                                                 "--json"])[1])
        respond(made["folder"], "step-1/parallel-1")
        assert gw_in_process(capsys, ["step", "submit", made["session"], "step-1/parallel-1", "-C", str(project)])[0] == 0
        found.update(steps=made["session"])
# Run after a case, to set up later ones: items B and C exist; B is claimed for handoff and for revoke.
SETUP_AFTER = {"new": [["new", "second"], ["new", "third"]], "cancel": [["claim", B]], "release": [["claim", B]],
               "reopen": [["claim", A], ["session", "start", A]], "session list": [["publish", "--queue"]]}


def command_paths() -> set[str]:
    import typer.main

    from gitwork.cli.app import app

    def walk(command: Any, prefix: str) -> set[str]:
        subs = getattr(command, "commands", None)
        if subs is None:
            return {prefix}
        found: set[str] = set()
        for name, sub in subs.items():
            if not getattr(sub, "hidden", False):
                found |= walk(sub, f"{prefix} {name}".strip())
        return found

    return walk(typer.main.get_command(app), "")


def test_every_command_has_a_case() -> None:
    """A case here, or a ``sample=`` on its declaration (``cli/app.py``), which the test below runs."""
    from gitwork.cli.fastgen import samples

    missing = command_paths() - set(CASES) - set(samples())
    assert not missing, (f"give {sorted(missing)} a sample= on its verb(...) declaration (or a --json case in "
                         "tests/test_json_convention.py)")
    assert not set(CASES) - command_paths()


def sample_world(project: Path, capsys: pytest.CaptureFixture[str]) -> str:
    """What a declared sample may rely on: an item with one criterion, leased by the acting identity."""
    for argv in (["init"], ["new", "sampled", "-c", "works"], ["claim", A]):
        assert gw_in_process(capsys, [*argv, "-C", str(project)])[0] == 0, argv
    return A


def test_every_declared_sample_prints_one_json_value(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    """Each verb's own ``sample=`` succeeds with ``--json`` and prints one value by the convention, in a
    world of its own (so samples cannot depend on each other or on the order of the cases)."""
    from gitwork.cli.fastgen import samples

    monkeypatch.setenv("GW_AGENT", "alice")
    for number, (path, args) in enumerate(samples().items()):
        repo = make_repo(tmp_path / f"sample-{number}")
        monkeypatch.setattr("gitwork.ids.mint", iter([A, B, C]).__next__)
        item = sample_world(repo, capsys)
        argv = [*path.split(), *(a.format(item=item) for a in args), "--json", "-C", str(repo)]
        code, out, err = gw_in_process(capsys, argv)
        assert code == 0, (argv, code, out, err)
        json.loads(out)  # one value
        check_shape(path, "array" if out.startswith("[") else "object", out)


def gw_in_process(capsys: pytest.CaptureFixture[str], argv: list[str]) -> tuple[int, str, str]:
    capsys.readouterr()
    code = cli_main.main(argv)
    out, err = capsys.readouterr()
    return code, out, err


def check_ids(value: Any, where: str) -> None:
    """Every ``item`` key holds a full item id (or null: a command that names none); never ``id``."""
    if isinstance(value, dict):
        if value.get("item") is not None:
            assert isinstance(value["item"], str) and FULL_ID.match(value["item"]), (where, value["item"])
        if isinstance(value.get("id"), str):
            assert not FULL_ID.match(value["id"]), f"{where}: an item id under 'id' (use 'item'): {value}"
        for key, inner in value.items():
            check_ids(inner, f"{where}.{key}")
    elif isinstance(value, list):
        for number, inner in enumerate(value):
            check_ids(inner, f"{where}[{number}]")


def check_shape(path: str, shape: str, out: str) -> Any:
    if shape == "lines":
        docs = [json.loads(line) for line in out.splitlines()]
        assert docs and all(isinstance(d, dict) for d in docs), (path, out)
        return docs
    doc = json.loads(out)  # exactly one JSON value: trailing garbage would not parse
    assert out.endswith("\n")
    if shape == "object":
        assert isinstance(doc, dict) and doc.get("ok") is True, (path, out[:400])
    else:
        assert isinstance(doc, list) and all(isinstance(row, dict) for row in doc), (path, out[:400])
    check_ids(doc, path)
    return doc


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    for role in ("AUTHOR", "COMMITTER"):  # the person's own commit; gitwork needs no git identity
        monkeypatch.setenv(f"GIT_{role}_NAME", "Person")
        monkeypatch.setenv(f"GIT_{role}_EMAIL", "person@example.com")
    repo = make_repo(tmp_path / "project")
    git(repo, "checkout", "-q", "-b", "main")
    (repo / "README").write_text("a project\n")
    git(repo, "add", "README")
    git(repo, "commit", "-q", "-m", "initial")
    remote = make_repo(tmp_path / "arbiter.git", bare=True)
    git(repo, "remote", "add", "origin", str(remote))
    monkeypatch.setenv("GW_AGENT", "alice")
    monkeypatch.setenv("GW_NO_AUTO_GC", "1")
    monkeypatch.setattr("gitwork.ids.mint", iter([A, B, C, "w-d000000000000004", "w-e000000000000005",
                                                       "w-f000000000000006", "w-a000000000000007"]).__next__)
    return repo


def test_every_command_prints_one_json_value_by_the_convention(project: Path, tmp_path: Path,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    document = tmp_path / "doc.json"
    document.write_text(json.dumps({"op": "new", "title": "applied"}))
    beads = tmp_path / "issues.jsonl"
    beads.write_text('{"id": "bd-1", "title": "imported", "status": "open"}\n')
    found: dict[str, str] = {"document": str(document), "beads": str(beads), "export": str(tmp_path / "out.jsonl")}
    for path, (args, shape) in CASES.items():
        argv = [*path.split(), *(a.format(**found) for a in args), "--json"]
        if "-C" not in argv and path != "demo":  # the demo makes its own throwaway repository
            argv += ["-C", str(project)]
        code, out, err = gw_in_process(capsys, argv)
        assert code == 0, (argv, code, out, err)
        doc = check_shape(path, shape, out)
        if path == "run":
            found.update(execution=doc["execution"])
        if path == "detach":  # gw no longer answers for it: end it here, by its process group
            import os
            import signal

            handle = project / ".git" / "gitwork" / "executions" / doc["execution"] / "handle"
            os.killpg(int(handle.read_text().partition("@")[0]), signal.SIGKILL)
        if path == "session start":
            found.update(session=doc["session"], worktree=doc["worktree"])
            (Path(doc["worktree"]) / "new.txt").write_text("new\n")
        steps_setup(path, doc, project, found, capsys)
        if path == "sync":  # a command whose outcome was unknown (exit 12) waits for `gw retry`
            from gitwork.sync import remember_unknown
            from gitwork.workplane import Workplane

            with Workplane(str(project)) as plane:
                remember_unknown(plane, {"op": "new", "title": "retried", "id": "c-retried-renew", "as": "alice"})
        for extra in SETUP_AFTER.get(path, []):
            code, out, _err = gw_in_process(capsys, [*extra, "-C", str(project), "--json"])
            assert code == 0, extra
            found.update(session=json.loads(out).get("session", found["session"]) if "session" in found else None)
    # The one streaming form: JSON lines, one message per line.
    code, out, _err = gw_in_process(capsys, ["thread", A, "--follow", "--timeout", "0.2", "--json", "-C",
                                             str(project)])
    assert code == 0
    messages = check_shape("thread --follow", "lines", out)
    assert [m["seq"] for m in messages] == list(range(1, len(messages) + 1))


def test_show_names_the_item_like_every_other_command(project: Path, capsys: pytest.CaptureFixture[str]) -> None:
    for argv in (["init"], ["new", "one"], ["claim", A]):
        assert gw_in_process(capsys, [*argv, "-C", str(project)])[0] == 0
    shown = json.loads(gw_in_process(capsys, ["show", A, "--json", "-C", str(project)])[1])
    listed = json.loads(gw_in_process(capsys, ["list", "--json", "-C", str(project)])[1])
    assert shown["item"] == listed[0]["item"] == A and "id" not in shown
    assert shown["title"] == listed[0]["title"] == "one" and shown["lease"]["holder"] == "alice"
    assert shown["lease"]["item"] == A


@pytest.mark.parametrize("path", sorted(CASES))
def test_a_usage_error_is_one_line_and_one_json_error_object(path: str, capsys: pytest.CaptureFixture[str],
                                                             tmp_path: Path) -> None:
    code, out, err = gw_in_process(capsys, [*path.split(), "--no-such-option", "--json", "-C", str(tmp_path)])
    assert code == 2
    doc = json.loads(out)
    assert {k: doc[k] for k in ("ok", "error", "code")} == {"ok": False, "error": "usage", "code": 2}
    assert "--no-such-option" in doc["message"] and "\n" not in doc["message"]
    assert err.count("\n") == 1 and err.startswith("gw: usage: ")


def test_an_unknown_status_is_refused_not_an_empty_list(repo: Path, wp: Workplane) -> None:
    before = tip(repo)
    for argv in (["list", "--status", "bogus"], ["list", "-s", "open", "-s", "bogus"]):
        done = run_gw(repo, *argv)
        assert done.returncode == 5 and done.stdout == ""
        assert done.stderr.count("\n") == 1 and "unknown status 'bogus'" in done.stderr
    as_json = run_gw(repo, "list", "--status=bogus", "--json")
    assert as_json.returncode == 5
    assert json.loads(as_json.stdout)["error"] == "invalid"
    negative = run_gw(repo, "ready", "-n", "-1")
    assert negative.returncode == 5 and "--limit" in negative.stderr
    assert tip(repo) == before


def test_the_typer_path_refuses_an_unknown_status_too(repo: Path, wp: Workplane, capsys: pytest.CaptureFixture[str],
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    from gitwork.cli.app import run_app

    monkeypatch.chdir(repo)
    capsys.readouterr()
    assert run_app(["list", "--status", "bogus"]) == 5
    out, err = capsys.readouterr()
    assert out == "" and "unknown status" in err


def test_a_usage_error_from_the_real_process(repo: Path) -> None:
    done = subprocess.run([*__import__("conftest").gw_cmd("claim", "--ttl")], cwd=repo, capture_output=True,
                          text=True)
    assert done.returncode == 2 and done.stdout == "" and done.stderr.count("\n") == 1
    assert done.stderr.startswith("gw: usage: ")


def test_the_fast_path_and_typer_print_the_same(project: Path, capsys: pytest.CaptureFixture[str],
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    """Every fast verb, read or refused, gives the same stdout, stderr and exit code through both parsers."""
    import datetime as dt

    # One instant for both runs: `gw show` prints the lease's time left, which a second between them changes.
    monkeypatch.setenv("GW_NOW", dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"))
    from gitwork.cli import fast
    from gitwork.cli.app import run_app
    from gitwork.cli.fast_table import GROUPS, VERBS

    for argv in (["init"], ["new", "one", "-c", "works"], ["claim", A], ["msg", A, "hello", "--to", "bob"]):
        assert gw_in_process(capsys, [*argv, "-C", str(project)])[0] == 0
    lines = [["show", A], ["history", A], ["list", "--all"], ["ready"], ["log", "-n", "2"], ["status"],
             ["thread", A], ["inbox", "--as", "bob"], ["show", "w-ffff"], ["history", "w-ffff"], ["log", "-n", "-1"],
             ["claim", "w-ffff"], ["renew", "w-ffff"], ["release", A, "--fence", "99"], ["msg", "w-ffff", "x"],
             ["ack", A, "9"], ["thread", "w-ffff"], ["list", "-s", "bogus"], ["ready", "-n", "-2"],
             # every verb is on the fast path now (issue 25): the reports, and refusals of the mutations
             ["blocked"], ["summary"], ["stale"], ["search", "one"], ["dep", "tree", A], ["onboard"],
             ["cache", "status"], ["edit", "w-ffff", "--title", "x"], ["check", A, "9"], ["done", "w-ffff"],
             ["cancel", "w-ffff"], ["reopen", A], ["decision", "w-ffff", "x", "--why", "y"],
             ["takeover", A], ["handoff", "w-ffff", "--reason", "blocked"], ["stale", "--for", "soon"]]
    # Every declared sample too, on an item that does not exist: a refusal both parsers must print alike.
    from gitwork.cli.fastgen import samples

    lines += [[*path.split(), *(a.format(item="w-ffff") for a in args)] for path, args in samples().items()
              if path.split()[0] in VERBS or " ".join(path.split()[:-1]) in GROUPS]
    assert {argv[0] for argv in lines} <= set(VERBS) | set(GROUPS)
    codes = set()
    for argv in lines:
        for extra in ([], ["--json"]):
            full = [*argv, *extra, "-C", str(project)]
            assert fast.parse(full) is not None, full
            fast_result = gw_in_process(capsys, full)
            capsys.readouterr()
            typer_code = run_app(full)
            typer_out, typer_err = capsys.readouterr()
            assert (typer_code, typer_out, typer_err) == fast_result, full
            codes.add(typer_code)
    assert 0 in codes and len(codes) > 2  # successes and several kinds of refusal were compared
