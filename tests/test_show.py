"""``gw show`` for a person (issue 25, point 2): the item as a page, several ids at once, ``--web``.

``--json`` keeps its shape (the stored fields and the lease); the text is what a person reads: numbered
criteria as ``gw check`` takes them, the holder and the lease's time left, dependencies and dependents
with their titles, why it is blocked, decisions and the thread's last messages. Real repositories,
a real ``gw serve`` for ``--web``; time from ``GW_NOW``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest

from conftest import gw_cmd, gw_here, run_gw, tip
from gitwork.errors import ExitCode

T0 = "2026-12-02T10:00:00Z"
LATER = "2026-12-02T10:10:00Z"  # ten minutes into a 30-minute lease


def gw(repo: Path, *args: str, now: str = T0, who: str = "alice") -> str:
    done = run_gw(repo, *args, env={"GW_AGENT": who, "GW_NOW": now, "GW_NO_AUTO_GC": "1"})
    assert done.returncode == 0, (args, done.stderr)
    return done.stdout


def setup_gw(repo: Path, *args: str) -> str:
    """``gw`` for the set-up, through the CLI's entry point in this process (``gw_here``): the same commands
    and state as ``gw`` without 14 interpreter starts per test. What the tests read runs in a child."""
    done = gw_here(repo, *args, env={"GW_AGENT": "alice", "GW_NOW": T0, "GW_NO_AUTO_GC": "1"})
    assert done.returncode == 0, (args, done.stderr)
    return done.stdout


@pytest.fixture
def plane(repo: Path) -> dict[str, str]:
    setup_gw(repo, "init")
    base = setup_gw(repo, "new", "Design the schema").strip()
    item = setup_gw(repo, "new", "Build the API", "--dep", base, "-p", "1", "-l", "api", "-l", "backend",
                    "-c", "tests pass", "-c", "docs written", "-d", "The REST face.\n\nSee the board.").strip()
    later = setup_gw(repo, "new", "Ship it", "--dep", item).strip()
    setup_gw(repo, "claim", item, "--ttl", "30m", "--force")  # its dependency is open
    setup_gw(repo, "check", item, "2")
    setup_gw(repo, "decision", item, "use SQLite", "--why", "one file")
    for n in range(1, 8):
        setup_gw(repo, "msg", item, f"note {n}", *(["--to", "bob"] if n == 7 else []))
    return {"base": base, "item": item, "later": later}


def test_show_is_a_page_for_a_person(repo: Path, plane: dict[str, str]) -> None:
    page = gw(repo, "show", plane["item"][:8], now=LATER)
    lines = page.splitlines()
    assert lines[0] == f"{plane['item']}  Build the API"
    assert "status:    in_progress    priority: 1" in page
    assert "labels:    api, backend" in page
    assert "holder:    alice (fence 1, epoch 1), expires in 20m00s (2026-12-02T10:30:00Z)" in page
    assert "  The REST face." in page and "  See the board." in page
    assert "  [ ] 1. tests pass" in lines
    assert f"  [x] 2. docs written  (alice, {T0})" in lines
    at = lines.index("depends on:")
    assert lines[at + 1].split() == [plane["base"], "open", "Design", "the", "schema"]
    at = lines.index("blocks:")
    assert lines[at + 1].split() == [plane["later"], "open", "Ship", "it"]
    assert f"  1. use SQLite (why: one file) (alice, {T0})" in lines
    assert f"thread (7 messages, last 5; gw thread {plane['item'][:8]} has all):" in lines
    assert not any("note 2" in line for line in lines)
    assert lines[-1] == f"  #7 {T0} alice note -> bob: note 7"
    assert "title:" not in page and "checked: " not in page  # not the stored YAML any more


def test_an_expired_lease_and_a_blocked_item_say_so(repo: Path, plane: dict[str, str]) -> None:
    page = gw(repo, "show", plane["item"], now="2026-12-02T11:00:00Z")
    assert "expired 30m00s ago (2026-12-02T10:30:00Z); gw takeover may take it" in page
    gw(repo, "edit", plane["later"], "--status", "blocked", "--reason", "waits for the launch date")
    page = gw(repo, "show", plane["later"])
    assert "holder:    none" in page
    assert f"blocked:   waits for the launch date (by alice, {T0})" in page


def test_several_ids_and_json_unchanged(repo: Path, plane: dict[str, str]) -> None:
    both = gw(repo, "show", plane["base"], plane["later"])
    assert both.startswith(f"{plane['base']}  Design the schema\n")
    assert f"\n\n{plane['later']}  Ship it\n" in both
    one = json.loads(gw(repo, "show", plane["item"], "--json"))
    assert one["ok"] is True and one["item"] == plane["item"] and one["lease"]["holder"] == "alice"
    assert one["criteria"][1]["checked"] is True and one["depends_on"] == [plane["base"]]
    many = json.loads(gw(repo, "show", plane["base"], plane["item"], "--json"))
    assert [entry["item"] for entry in many] == [plane["base"], plane["item"]]
    assert many[1] == one
    missing = run_gw(repo, "show", plane["base"], "w-0000000000000000", env={"GW_AGENT": "alice"})
    assert missing.returncode == ExitCode.NOT_FOUND and "Design the schema" in missing.stdout


def test_plain_show_stays_on_the_fast_path(repo: Path, plane: dict[str, str]) -> None:
    script = (
        "import sys\nfrom gitwork.cli.main import main\n"
        "code = main(['show', sys.argv[1], '-C', sys.argv[2]])\n"
        "heavy = sorted(m for m in sys.modules if m.split('.')[0] in ('typer', 'click', 'rich', 'ruamel'))\n"
        "print(code, heavy, file=sys.stderr)\n"
    )
    done = subprocess.run([sys.executable, "-c", script, plane["item"], str(repo)], capture_output=True, text=True,
                          env={**os.environ, "GW_AGENT": "alice"})
    assert done.stderr.strip().splitlines()[-1] == "0 []", done.stderr
    assert "[ ] 1. tests pass" in done.stdout


def announced(server: subprocess.Popen[str]) -> str:
    """The URL ``gw serve --json`` says it listens on (its JSON object ends with a line ``}``)."""
    assert server.stdout is not None
    lines = []
    for line in server.stdout:
        lines.append(line)
        if line.startswith("}"):
            break
    return str(json.loads("".join(lines))["url"])


def test_show_web_opens_the_board_page_of_the_running_server(repo: Path, plane: dict[str, str],
                                                             tmp_path: Path) -> None:
    pytest.importorskip("fastapi")
    before = tip(repo)
    refused = run_gw(repo, "show", "--web", plane["item"], env={"GW_AGENT": "alice"})
    assert refused.returncode == ExitCode.USAGE and "gw serve" in refused.stderr
    server = subprocess.Popen(gw_cmd("serve", "--bind", "127.0.0.1:0", "--json"), cwd=repo,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        url = announced(server)
        page = f"{url}/items/{plane['item']}"
        seen = tmp_path / "opened"
        browser = tmp_path / "browser"
        browser.write_text(f'#!/bin/sh\necho "$1" > {seen}\n', encoding="utf-8")
        browser.chmod(0o755)
        opened = run_gw(repo, "show", "--web", plane["item"][:8], "--json", env={"GW_AGENT": "alice",
                                                                               "BROWSER": str(browser)})
        assert opened.returncode == 0, opened.stderr
        assert json.loads(opened.stdout) == {"ok": True, "item": plane["item"], "url": page, "opened": True}
        assert seen.read_text(encoding="utf-8").strip() == page
        env = {key: value for key, value in os.environ.items() if key not in ("BROWSER", "DISPLAY", "WAYLAND_DISPLAY")}
        printed = subprocess.run(gw_cmd("show", "--web", plane["item"]), cwd=repo, capture_output=True, text=True,
                                 env={**env, "GW_AGENT": "alice"}, timeout=60)
        assert printed.returncode == 0 and printed.stdout == page + "\n" and "no browser" in printed.stderr
        with urllib.request.urlopen(page, timeout=20) as answer:  # the board answers there (its login page)
            assert answer.status == 200
    finally:
        server.terminate()
        server.wait(20)
    gone = run_gw(repo, "show", "--web", plane["item"], env={"GW_AGENT": "alice"})
    assert gone.returncode == ExitCode.USAGE
    assert tip(repo) == before


def test_the_server_is_recorded_before_it_says_where_it_listens(repo: Path, plane: dict[str, str]) -> None:
    """Whoever reads ``gw serve --json``'s line may run ``gw show --web`` at once: the record that command
    reads (``serve.json``) is whole by then. The server's stderr here is a pipe already full, so the
    server stops at its first line there; before, the record came after that line (and after the JSON):
    a caller fast enough, or a server slow enough under load, found no server (exit 2). Deterministic:
    nothing the server does after the stderr line can happen before this test drains the pipe."""
    pytest.importorskip("fastapi")
    import threading

    full, writer = os.pipe()
    os.set_blocking(writer, False)
    try:
        while True:
            os.write(writer, b"x")
    except BlockingIOError:
        pass  # the pipe's buffer is full: the next write to it waits for a reader
    os.set_blocking(writer, True)
    server = subprocess.Popen(gw_cmd("serve", "--bind", "127.0.0.1:0", "--json"), cwd=repo,
                              stdout=subprocess.PIPE, stderr=writer, text=True)
    os.close(writer)
    drained = threading.Event()

    def drain() -> None:  # once the test has looked: the server's stderr flows again
        drained.wait()
        with os.fdopen(full, "rb") as pipe:
            while pipe.read(65536):
                pass

    reader = threading.Thread(target=drain, daemon=True)
    reader.start()
    # A guard, not a measurement: a server that wrote to stderr before its announcement would wait on
    # the full pipe for ever; the pipe is drained after 120 s, and the test fails instead of hanging.
    guard = threading.Timer(120, drained.set)
    guard.start()
    try:
        url = announced(server)
        assert not drained.is_set(), "the server wrote to its stderr before it said where it listens"
        record = json.loads((repo / ".git" / "gitwork" / "serve.json").read_text(encoding="utf-8"))
        assert record == {"url": url, "pid": server.pid}
    finally:
        guard.cancel()
        drained.set()
        server.terminate()
        server.wait(60)
        reader.join(60)


def test_history_prints_old_and_new_values_not_python_reprs(repo: Path) -> None:
    gw(repo, "init")
    item = gw(repo, "new", "first title", "-l", "a").strip()
    gw(repo, "edit", item, "--title", "second title", "--add-label", "b", "-p", "1")
    gw(repo, "edit", item, "--title", "third title", "--status", "blocked", "--reason", "waits")
    lines = gw(repo, "history", item).splitlines()
    assert lines[1].split("\t")[4] == "title: first title -> second title; priority: -> 1; labels: -> a, b"
    assert lines[2].split("\t")[4] == "title: second title -> third title; status: -> blocked reason=waits"
    assert not any("{" in line or "[" in line for line in lines)
