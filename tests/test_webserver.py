"""The arbiter as a team deploys it (docs/deploy.md): nginx + fcgiwrap + ``git http-backend``, with
``gw hooks install --server`` on the bare repository and pushes authenticated at the web server.

One server serves the whole module (tests/webserver.py); each test serves its own bare repository
under it. Everything is real: the clones are driven by the installed ``gw`` in child processes, the
forged pushes are made with plain git, and what is checked is what the arbiter's refs hold.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from pathlib import Path

import pytest

from conftest import git, let_post, run_gw, tip
from daemon import in_group
from test_state_hook import craft, events_log
from test_sync import STATE, assert_sound, gw_ok, machine, new_item
from test_sync_daemon import gw_program
from test_transports import assert_grants_linear
from webserver import WebServer, served_repo, web_server  # noqa: F401 (a fixture)

OK, HELD = 0, 75
NO_PROMPT = {**os.environ, "GIT_TERMINAL_PROMPT": "0"}


def push(repo: Path, url: str, *refspecs: str, force: bool = False) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["git", "push", "--porcelain", *(["--force"] if force else []), url, *refspecs],
                          cwd=repo, capture_output=True, text=True, env={**os.environ, "GIT_TERMINAL_PROMPT": "0"})


@pytest.fixture
def plane(web_server: WebServer, request: pytest.FixtureRequest) -> Path:
    """This test's own bare arbiter under the shared server, with the server hook installed."""
    return served_repo(web_server.root, request.node.name.replace("[", "-").replace("]", ""))


def url_of(web_server: WebServer, bare: Path) -> str:
    return web_server.url(bare.name.removesuffix(".git"))


def test_clone_fetch_push_and_sync_through_nginx(tmp_path: Path, web_server: WebServer, plane: Path) -> None:
    url = url_of(web_server, plane)
    a = machine(tmp_path, "a", url, publish=True)
    item = new_item(a, "served by nginx")
    gw_ok(a, "sync")
    assert tip(plane) == tip(a)

    # Another machine adopts the arbiter's history over HTTP and sees the item.
    b = machine(tmp_path, "b", url)
    assert tip(b) == tip(plane)
    assert gw_ok(b, "show", item)["title"] == "served by nginx"

    # B's work reaches A through the arbiter: gw sync both ways.
    for repo in (b, plane):  # bob posts on an item he neither holds nor owns, here and on the deriving arbiter
        let_post(repo, "bob")
    gw_ok(b, "msg", item, "hello from b", "--as", "bob")
    gw_ok(b, "sync")
    gw_ok(a, "sync")
    assert tip(a) == tip(b) == tip(plane)
    assert_sound(plane)

    # Plain git: anyone may clone and fetch; pushing needs the credentials nginx checks.
    anonymous = web_server.anonymous_url(plane.name.removesuffix(".git"))
    clone = tmp_path / "anonymous"
    git(tmp_path, "clone", "-q", "--bare", anonymous, str(clone))
    git(clone, "fetch", "-q", anonymous, f"+{STATE}:{STATE}")
    assert tip(clone) == tip(plane)
    before = git(plane, "for-each-ref")
    refused = push(clone, anonymous, f"{STATE}:refs/heads/anonymous")
    assert refused.returncode != 0 and "terminal prompts disabled" in refused.stderr, refused.stderr
    wrong = push(clone, anonymous.replace("://", "://agent:wrong@"), f"{STATE}:refs/heads/anonymous")
    assert wrong.returncode != 0 and "Authentication failed" in wrong.stderr, wrong.stderr
    assert git(plane, "for-each-ref") == before  # nothing moved
    allowed = push(clone, url, f"{STATE}:refs/heads/authenticated")
    assert allowed.returncode == 0, allowed.stderr
    assert tip(plane, "refs/heads/authenticated") == tip(plane)


def test_gw_without_push_credentials_is_refused_by_the_web_server(tmp_path: Path, web_server: WebServer,
                                                                   plane: Path) -> None:
    """A clone whose remote has no credentials reads the plane but cannot land a command: exit 14
    (remote-refused) with one line, and the arbiter does not move."""
    a = machine(tmp_path, "a", url_of(web_server, plane), publish=True)
    item = new_item(a, "only for those who may push")
    gw_ok(a, "sync")
    head = tip(plane)
    reader = machine(tmp_path, "reader", web_server.anonymous_url(plane.name.removesuffix(".git")))
    assert tip(reader) == head and gw_ok(reader, "show", item)["title"] == "only for those who may push"
    done = run_gw(reader, "claim", item, "--as", "mallory", "--json", env={"GIT_TERMINAL_PROMPT": "0"})
    assert done.returncode == 14, (done.returncode, done.stdout, done.stderr)
    assert len(done.stderr.splitlines()) == 1 and "Traceback" not in done.stderr, done.stderr
    assert json.loads(done.stdout)["error"] == "remote-refused"
    # nginx asked for credentials (401; git could not prompt for them), not git http-backend's own
    # refusal of an unauthenticated push (403).
    assert "could not read Username" in done.stderr, done.stderr
    assert tip(plane) == head


def test_the_server_hook_refuses_forged_state_pushes(tmp_path: Path, web_server: WebServer, plane: Path) -> None:
    """Pushed with plain git past every local check, through nginx: the pre-receive hook is the gate."""
    url = url_of(web_server, plane)
    a = machine(tmp_path, "a", url, publish=True)
    item = new_item(a, "guarded")
    fence = gw_ok(a, "claim", item, "--as", "alice")["fence"]
    gw_ok(a, "release", item, "--as", "alice", "--fence", str(fence))
    head = tip(plane)
    assert head == tip(a)

    def refused(done: subprocess.CompletedProcess[str], word: str) -> None:
        assert done.returncode != 0, done.stdout + done.stderr
        assert "pre-receive hook declined" in done.stdout + done.stderr, done.stdout + done.stderr
        assert word in done.stderr, done.stderr
        assert tip(plane) == head  # the arbiter did not move

    rewind = git(a, "rev-parse", f"{head}~1")
    refused(push(a, url, f"{rewind}:{STATE}", force=True), "non-fast-forward")
    refused(push(a, url, f":{STATE}"), "deleting")
    log = events_log(a)
    rewritten = craft(a, head, {log: b"{}\n"}, "forged: the item's history rewritten")
    refused(push(a, url, f"{rewritten}:{STATE}"), "append-only")
    corrupt = craft(a, head, {log.replace("events.log", "item.yaml"): b"title: [unclosed\n"}, "forged: corrupt item")
    refused(push(a, url, f"{corrupt}:{STATE}"), "item.yaml")
    # The honest clone still gets through the same server afterwards.
    gw_ok(a, "claim", item, "--as", "carol")
    assert tip(plane) == tip(a)
    assert_sound(plane)


def test_the_server_hook_refuses_a_commit_whose_tree_is_not_its_commands_replay(
        tmp_path: Path, web_server: WebServer, plane: Path) -> None:
    """A forged state commit: a real ``gw new`` commit, same message, author, committer and time, with
    the new item's title changed in the tree. It parses, it fast-forwards, it rewrites no log: only
    replaying its command (the arbiter's own derivation, gitwork/derive.py) tells it is not what
    the command writes."""
    pytest.importorskip("gitwork.derive", reason="the arbiter's replay check (gitwork/derive.py) is not in this tree")
    url = url_of(web_server, plane)
    a = machine(tmp_path, "a", url, publish=True)
    head = tip(plane)
    new_item(a, "the title the command asked for")  # a local commit on top of the arbiter's tip
    honest = tip(a)
    assert git(a, "rev-parse", f"{honest}~1") == head
    path = next(name for name in git(a, "diff-tree", "-r", "--name-only", "--no-commit-id", head, honest).split()
                if name.endswith("/item.yaml"))
    text = git(a, "cat-file", "blob", f"{honest}:{path}")
    assert "the title the command asked for" in text
    changed = craft(a, honest, {path: text.replace("the title the command asked for", "a forged title").encode()
                                + b"\n"})
    forged_tree = git(a, "rev-parse", f"{changed}^{{tree}}")
    original = git(a, "cat-file", "commit", honest)
    forged_body = original.replace(git(a, "rev-parse", f"{honest}^{{tree}}"), forged_tree, 1) + "\n"
    forged = git(a, "hash-object", "-t", "commit", "-w", "--stdin", input=forged_body.encode())
    assert git(a, "rev-parse", f"{forged}~1") == head and forged != honest

    done = push(a, url, f"{forged}:{STATE}")
    assert done.returncode != 0 and "pre-receive hook declined" in done.stdout + done.stderr, done.stderr
    assert "replay" in done.stderr, done.stderr
    assert tip(plane) == head
    # The honest commit of the same command is taken.
    assert push(a, url, f"{honest}:{STATE}").returncode == 0
    assert tip(plane) == honest


RACER = r"""
while [ ! -e "$GO" ]; do sleep 0.01; done
"$GW" claim "$ITEM" --as "$ME" --json > "$OUT" 2> "$OUT.err"
echo $? > "$OUT.rc"
"""


def test_two_clones_racing_for_one_item_through_nginx_one_winner(tmp_path: Path, web_server: WebServer,
                                                                   plane: Path) -> None:
    url = url_of(web_server, plane)
    seeder = machine(tmp_path, "seed", url, publish=True)
    item = new_item(seeder, "contended")
    gw_ok(seeder, "sync")
    clones = [machine(tmp_path, name, url) for name in ("left", "right")]
    program, go = gw_program(tmp_path), tmp_path / "go"
    racers = []
    for clone in clones:
        out = tmp_path / f"{clone.name}.json"
        env = {**os.environ, "GW": program, "ME": clone.name, "OUT": str(out), "GO": str(go), "ITEM": item}
        racers.append((clone, out, subprocess.Popen(["bash", "-c", RACER], cwd=clone, env=env)))
    go.touch()
    for _clone, _out, proc in racers:
        proc.wait(timeout=120)
    outcomes = {clone.name: (int(Path(f"{out}.rc").read_text()), out) for clone, out, _proc in racers}
    codes = sorted(rc for rc, _out in outcomes.values())
    assert codes == [OK, HELD], {name: (rc, out.read_text(), Path(f"{out}.err").read_text())
                                  for name, (rc, out) in outcomes.items()}
    winner = next(name for name, (rc, _out) in outcomes.items() if rc == OK)
    granted = assert_grants_linear(plane)
    assert [c["command"]["as"] for c in granted] == [winner]
    won = json.loads(outcomes[winner][1].read_text())
    assert won["command_id"] in git(plane, "log", "--format=%B", STATE)
    for clone in clones:
        gw_ok(clone, "sync")
    assert {tip(clone) for clone in clones} == {tip(plane)}
    assert_sound(plane)


def test_stopping_the_server_leaves_no_process(tmp_path: Path) -> None:
    """Stopped mid-push, the whole deployment goes: nginx, its workers, fcgiwrap, git, the hook."""
    from webserver import require

    require()
    root = tmp_path / "www"
    root.mkdir()
    bare = served_repo(root, "plane", server_hook=False)
    hook = bare / "hooks" / "pre-receive"
    started = tmp_path / "hook-started"
    hook.write_text(f"#!/bin/sh\ntouch {started}\nexec sleep 600\n")  # a push that hangs in the hook
    hook.chmod(0o755)
    server = WebServer(root)
    server.start()
    try:
        group = server.proc.pid if server.proc else 0
        work = tmp_path / "work"
        git(tmp_path, "init", "-q", str(work))
        git(work, "-c", "user.name=A", "-c", "user.email=a@example.org", "commit", "-q", "--allow-empty", "-m", "x")
        pushing = subprocess.Popen(["git", "push", server.url("plane"), "HEAD:refs/heads/main"], cwd=work,
                                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=NO_PROMPT)
        deadline = time.monotonic() + 60
        while not started.exists():
            assert time.monotonic() < deadline and pushing.poll() is None, "the push never reached the hook"
            time.sleep(0.02)
        # The hook touched the file just before it exec'd sleep: wait for the sleep to show.
        while not {"nginx:", "fcgiwrap", "sleep"} <= (serving := {cmd.split()[0].rsplit("/", 1)[-1]
                                                                  for cmd in _commands(group) if cmd}):
            assert time.monotonic() < deadline, serving
            time.sleep(0.02)
    finally:
        server.stop()
    assert in_group(group) == []
    assert not server.prefix.exists()
    assert pushing.wait(timeout=60) != 0
    assert tip(bare, "refs/heads/main") is None


def _commands(group: int) -> list[str]:
    from daemon import commands

    return commands([pid for pid, _parent in in_group(group)])
