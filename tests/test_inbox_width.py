"""Issue 25, point 7 (the missing part): ``gw inbox`` is readable at 80 columns.

Long identities, long titles and long multi-line messages must not make a line wider than the terminal
(``COLUMNS``; 80 when it cannot be told): each message is a header line and its text, cut with "...".
Real repository, the real entry point.
"""

from __future__ import annotations

import json
from pathlib import Path

from conftest import gw_here, let_post

LONG_NAME = "reviewer-with-a-very-long-identity@build-host-seventeen/s12345"


def ok(repo: Path, *args: str, env: dict[str, str] | None = None) -> str:
    done = gw_here(repo, *args, env={"GW_AGENT": "alice", "GW_NO_AUTO_GC": "1", **(env or {})})
    assert done.returncode == 0, (args, done.stdout, done.stderr)
    return done.stdout


def test_inbox_lines_fit_80_columns(repo: Path) -> None:
    ok(repo, "init")
    let_post(repo, LONG_NAME)
    item = ok(repo, "new", "an item with a rather long title " * 4).strip()
    text = "please look at this " * 30 + "\nsecond line " * 5
    ok(repo, "msg", item, text, "--kind", "question", "--to", "alice", env={"GW_AGENT": LONG_NAME})
    ok(repo, "msg", item, "short one", "--to", "alice", env={"GW_AGENT": LONG_NAME})
    shown = ok(repo, "inbox", env={"COLUMNS": "80"})
    lines = shown.splitlines()
    assert lines, "the inbox printed nothing"
    assert max(len(line.expandtabs()) for line in lines) <= 80, shown
    assert "please look at this" in shown and "short one" in shown, "the text is shown, cut to the width"
    assert "question" in shown and "#1" in shown and "#2" in shown, "the kind and the message numbers"
    # a narrower terminal is honoured too, and --json is untouched by the width
    narrow = ok(repo, "inbox", env={"COLUMNS": "60"})
    assert max(len(line) for line in narrow.splitlines()) <= 60, narrow
    box = json.loads(ok(repo, "inbox", "--json", env={"COLUMNS": "40"}))
    assert box["unread"][0]["text"] == text.strip() or box["unread"][0]["text"].startswith("please look")
