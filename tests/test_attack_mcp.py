"""``gw mcp`` attacked as an outside tester would: a client that goes away mid-call, a corrupt state ref.

The disconnect test speaks raw JSON-RPC lines to a real ``gw mcp`` child (the SDK's client cannot
close its end with answers still owed); the corrupt-ref test drives the tool table in process.
"""

from __future__ import annotations

import importlib.util
import json
import subprocess
from pathlib import Path
from typing import Any

import pytest

from conftest import git, gw_cmd, tip
from gitwork.mcp import tools
from gitwork.workplane import Workplane

# Skipped as importorskip("mcp") would, without importing the SDK (~1 s of CPU in every worker's
# collection): nothing here uses it, gitwork.mcp.tools does not import it.
if importlib.util.find_spec("mcp") is None:
    pytest.skip("could not import 'mcp'", allow_module_level=True)


def line(message: dict[str, Any]) -> bytes:
    return (json.dumps(message) + "\n").encode()


@pytest.mark.slow
def test_a_client_that_closes_the_connection_with_answers_owed_ends_the_server_cleanly(repo: Path) -> None:
    with Workplane(str(repo), agent="seeder") as wp:
        wp.do("init")
        item = wp.do("new", title="wanted").result["item"]
    server = subprocess.Popen(gw_cmd("mcp", "-C", str(repo), "--as", "bot"), stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert server.stdin is not None and server.stdout is not None and server.stderr is not None
    try:
        server.stdin.write(line({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "tester", "version": "1"}}}))
        server.stdin.flush()
        assert json.loads(server.stdout.readline())["id"] == 1
        server.stdin.write(line({"jsonrpc": "2.0", "method": "notifications/initialized"}))
        server.stdin.write(line({"jsonrpc": "2.0", "id": 2, "method": "tools/call",
                                 "params": {"name": "claim", "arguments": {"item": item}}}))
        server.stdin.flush()
        server.stdout.close()  # gone before the answer: the server's write meets a closed pipe
        server.stdin.close()
        code = server.wait(timeout=60)
        err = server.stderr.read().decode()
    finally:
        if server.poll() is None:
            server.kill()
            server.wait()
    assert code == 0, err
    assert "internal error" not in err and "Traceback" not in err, err
    # what the call did stays done, exactly once: the claim was written or not at all
    with Workplane(str(repo)) as wp:
        claims = [e for e in wp.log() if e["command"]["op"] == "claim"]
    assert len(claims) <= 1


def test_a_corrupt_state_ref_is_a_tool_error_and_the_server_serves_again_once_repaired(repo: Path) -> None:
    with Workplane(str(repo), agent="seeder") as wp:
        wp.do("init")
        wp.do("new", title="wanted")
    good = tip(repo)
    assert good is not None
    blob = git(repo, "hash-object", "-w", "--stdin", input=b"not a commit").strip()
    with Workplane(str(repo), agent="bot") as wp:
        session = tools.Session(wp)
        git(repo, "update-ref", "refs/gitwork/state", blob)
        for name, arguments in (("ready", {}), ("claim", {"next": True}), ("show", {"item": "w-0"}), ("inbox", {})):
            is_error, doc = session.call(name, arguments)
            assert is_error and doc["error"] == "corrupt" and doc["exit"] == "CORRUPT", (name, doc)
        assert tip(repo) == blob  # nothing written over it
        git(repo, "update-ref", "refs/gitwork/state", good)
        is_error, doc = session.call("claim", {"next": True})
        assert not is_error and doc["holder"] == "bot", doc
