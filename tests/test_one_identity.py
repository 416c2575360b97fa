"""One identity per document (issue 23, points 2 and 5), on every face, for every op of the registry.

A command document acts as one identity: its ``as``. A document it carries (a batch's members: any
field of the ``docs`` kind) either leaves ``as`` out or names the same identity; a member naming
another is refused as ``forbidden`` (77, HTTP 403) before anything runs, and every ``as``, nested or
not, must be a valid identity name (``invalid``, 5). The rule lives in the engine
(``engine.validate_command`` and the batch op's member check), so each face below meets the same
refusal: the library, ``gw apply`` (JSON lines and multi-document YAML become a batch), a real
``gw serve``, a real ``gw mcp`` (which takes no identity argument at all) and the arbiter's
pre-receive hook, which re-applies a pushed batch whose members were rewritten with plain git.
After every refusal the state ref is where it was; the arbiter refuses a forged member ``as`` that is not a
name at all too, since it re-applies every pushed command (derive.py) and any refusal refuses the push.
"""

from __future__ import annotations

import contextlib
import json
import os
import select
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from conftest import git, gw_here, make_repo, tip
from gitwork import engine
from gitwork.errors import ExitCode, Forbidden, Invalid
from gitwork.workplane import Workplane

STATE = "refs/gitwork/state"
BAD_NAMES = ("", " root", "root\n", "-root", "ro ot", "r" * 200, 5, ["root"], {"name": "root"})


def _all_ops() -> dict[str, engine.OpSpec]:
    engine.declared("internal")  # loads every op module
    return dict(engine.OPS)


def _public() -> list[str]:
    return sorted(name for name, each in _all_ops().items() if not each.internal)


def _nesting() -> dict[str, list[str]]:
    """Each op with fields that carry command documents (kind ``docs``), and those fields."""
    found = {name: [field for field, spec in each.fields.items() if spec.kind == "docs"]
             for name, each in _all_ops().items()}
    return {name: fields for name, fields in found.items() if fields}


def _carrying(op: str, field: str, member: dict[str, Any], envelope_as: str | None = "alice") -> dict[str, Any]:
    doc: dict[str, Any] = {"op": op, field: [{"op": "new", "title": "harmless"}, member]}
    if envelope_as is not None:
        doc["as"] = envelope_as
    return doc


@pytest.fixture
def plane(repo: Path) -> Iterator[tuple[Path, str]]:
    """An initialised repository with roles set (root an admin, bot an agent) and an item alice holds."""
    git(repo, "config", "gitwork.admins", "root")
    git(repo, "config", "gitwork.agents", "bot")
    with Workplane(str(repo), agent="alice") as wp:
        wp.do("init")
        item = wp.do("new", title="held by alice").result["item"]
        wp.do("claim", item=item)
    yield repo, item


def test_the_registry_has_ops_that_carry_documents_and_they_are_the_batch() -> None:
    nesting = _nesting()
    assert nesting == {"batch": ["ops"]}, "a new op carries documents: these tests cover it by enumeration"


# --- the library: Workplane.submit --------------------------------------------------------------------


@pytest.mark.parametrize("member_op", sorted(_all_ops()))
def test_library_refuses_a_member_acting_as_someone_else_for_every_op(plane: tuple[Path, str],
                                                                     member_op: str) -> None:
    repo, item = plane
    before = tip(repo)
    with Workplane(str(repo), agent="alice") as wp:
        for op, fields in _nesting().items():
            for field in fields:
                member = {"op": member_op, "as": "root", "item": item}
                with pytest.raises(Forbidden) as refused:
                    wp.submit(_carrying(op, field, member))
                assert refused.value.code == ExitCode.FORBIDDEN and "root" in refused.value.message
                # The envelope left to the work plane's identity: the member is judged against it.
                with pytest.raises(Forbidden):
                    wp.submit(_carrying(op, field, member, envelope_as=None))
    assert tip(repo) == before


def test_library_refuses_the_issue_23_batch_and_accepts_members_of_the_same_identity(plane: tuple[Path, str]) -> None:
    repo, item = plane
    before = tip(repo)
    with Workplane(str(repo), agent="bot") as wp:
        for member in ({"op": "revoke", "item": item, "as": "root", "reason": "mine"},
                       {"op": "new", "title": "as root", "as": "root"}):
            with pytest.raises(Forbidden):
                wp.submit({"op": "batch", "ops": [member]})
        assert tip(repo) == before
        done = wp.submit({"op": "batch", "ops": [{"op": "new", "title": "one", "as": "bot"}, {"op": "new", "title": "two"}]})
    assert done.result["count"] == 2
    recorded = engine.parse_command_from_message(git(repo, "log", "-1", "--format=%B", STATE))
    assert recorded is not None and {m["as"] for m in recorded["ops"]} == {"bot"}


@pytest.mark.parametrize("op", sorted(_all_ops()))
def test_library_refuses_a_top_level_identity_that_is_not_a_name_for_every_op(plane: tuple[Path, str], op: str) -> None:
    repo, item = plane
    before = tip(repo)
    internal = _all_ops()[op].internal
    with Workplane(str(repo), agent="alice") as wp:
        submit = wp.submit_record if internal else wp.submit
        for bad in BAD_NAMES:
            with pytest.raises(Invalid) as refused:
                submit({"op": op, "as": bad, "item": item})
            assert "identity" in refused.value.message, (op, bad, refused.value.message)
    assert tip(repo) == before


@pytest.mark.parametrize("bad", BAD_NAMES)
def test_library_refuses_a_nested_identity_that_is_not_a_name(plane: tuple[Path, str], bad: Any) -> None:
    repo, _item = plane
    before = tip(repo)
    with Workplane(str(repo), agent="alice") as wp:
        for op, fields in _nesting().items():
            for field in fields:
                for envelope in ("alice", None):
                    with pytest.raises(Invalid) as refused:
                        wp.submit(_carrying(op, field, {"op": "new", "title": "x", "as": bad}, envelope))
                    assert "identity" in refused.value.message
    assert tip(repo) == before


def test_engine_validation_refuses_before_any_op_runs() -> None:
    """validate_command is the gate every face passes: it alone refuses, with no snapshot at all."""
    with pytest.raises(Forbidden):
        engine.validate_command({"op": "batch", "as": "bot", "ops": [{"op": "revoke", "item": "w-1", "as": "root"}]})
    with pytest.raises(Invalid):
        engine.validate_command({"op": "batch", "as": "bot", "ops": [{"op": "new", "title": "t", "as": "ro ot"}]})
    clean = engine.validate_command({"op": "batch", "as": "bot", "ops": [{"op": "new", "title": "t", "as": "bot"}]})
    assert clean["ops"][0]["as"] == "bot"


# --- the CLI: gw apply FILE (several documents are one batch) -----------------------------------------


def _apply(repo: Path, text: str, name: str, who: str = "alice") -> subprocess.CompletedProcess[str]:
    (repo / name).write_text(text)
    try:
        return gw_here(repo, "apply", name, "--as", who)
    finally:
        (repo / name).unlink()


def _one_line_refusal(done: subprocess.CompletedProcess[str], code: ExitCode, says: str) -> None:
    assert done.returncode == code, (done.returncode, done.stderr)
    lines = done.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("gw: ") and says in lines[0], done.stderr
    assert "Traceback" not in done.stderr


@pytest.mark.parametrize("member_op", _public())
def test_gw_apply_refuses_a_document_acting_as_someone_else_for_every_op(plane: tuple[Path, str],
                                                                        member_op: str) -> None:
    repo, item = plane
    before = tip(repo)
    first = {"op": "new", "title": "harmless"}
    foreign = {"op": member_op, "as": "root", "item": item}
    lines = json.dumps(first) + "\n" + json.dumps(foreign) + "\n"
    _one_line_refusal(_apply(repo, lines, "cmds.jsonl", "bot"), ExitCode.FORBIDDEN, "root")
    yaml_docs = f"op: new\ntitle: harmless\n---\nop: {member_op}\nas: root\nitem: {item}\n"
    _one_line_refusal(_apply(repo, yaml_docs, "cmds.yaml", "bot"), ExitCode.FORBIDDEN, "root")
    assert tip(repo) == before


def test_gw_apply_refuses_the_issue_23_revoke_and_a_bad_nested_name(plane: tuple[Path, str]) -> None:
    repo, item = plane
    before = tip(repo)
    batch = {"op": "batch", "ops": [{"op": "revoke", "item": item, "as": "root", "reason": "mine"}]}
    _one_line_refusal(_apply(repo, json.dumps(batch), "batch.json", "bot"), ExitCode.FORBIDDEN, "root")
    bad = json.dumps({"op": "new", "title": "a"}) + "\n" + json.dumps({"op": "new", "title": "b", "as": "ro ot"}) + "\n"
    _one_line_refusal(_apply(repo, bad, "bad.jsonl"), ExitCode.INVALID, "identity")
    assert tip(repo) == before
    same = json.dumps({"op": "new", "title": "a", "as": "alice"}) + "\n" + json.dumps({"op": "new", "title": "b"}) + "\n"
    assert _apply(repo, same, "same.jsonl").returncode == 0


@pytest.mark.parametrize("op", _public())
def test_gw_apply_refuses_a_top_level_identity_that_is_not_a_name_for_every_op(plane: tuple[Path, str], op: str) -> None:
    repo, item = plane
    before = tip(repo)
    _one_line_refusal(_apply(repo, json.dumps({"op": op, "as": "ro ot", "item": item}), "one.json"),
                      ExitCode.INVALID, "identity")
    assert tip(repo) == before


# --- REST: a real gw serve --------------------------------------------------------------------------


@contextlib.contextmanager
def _serving(repo: Path) -> Iterator[str]:
    """``gw serve`` on a free port; yields its base URL (announced by ``--json`` once it listens)."""
    proc = subprocess.Popen([sys.executable, "-m", "gitwork", "serve", "--bind", "127.0.0.1:0", "--json"], cwd=repo,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        assert proc.stdout is not None
        deadline, said = time.monotonic() + 60, b""
        while True:
            assert proc.poll() is None, f"gw serve exited: {proc.stderr.read().decode() if proc.stderr else ''}"
            assert time.monotonic() < deadline, "gw serve did not start"
            if select.select([proc.stdout], [], [], 0.05)[0]:
                said += os.read(proc.stdout.fileno(), 65536)
                with contextlib.suppress(ValueError):
                    url = str(json.loads(said)["url"])
                    break
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def _token(repo: Path, name: str, role: str) -> str:
    done = gw_here(repo, "serve", "token", "add", name, "--role", role, "--json")
    assert done.returncode == 0, done.stderr
    return str(json.loads(done.stdout)["token"])


def test_rest_refuses_every_nested_identity_and_bad_names(plane: tuple[Path, str]) -> None:
    pytest.importorskip("fastapi", reason="gw serve needs the serve extra")
    import httpx

    repo, item = plane
    bot = {"Authorization": f"Bearer {_token(repo, 'bot', 'agent')}"}
    before = tip(repo)
    with _serving(repo) as url, httpx.Client(base_url=url, headers=bot, timeout=60) as http:
        # The issue's request, word for word: an agent token revoking alice's lease "as root".
        answer = http.post("/v1/commands", json={"op": "batch", "ops": [
            {"op": "revoke", "item": item, "as": "root", "reason": "mine"}]})
        assert (answer.status_code, answer.json()["error"], answer.json()["code"]) == (403, "forbidden", 77), answer.text
        for op, fields in _nesting().items():
            for field in fields:
                for member_op in _public():
                    doc = {"op": op, field: [{"op": "new", "title": "harmless"},
                                             {"op": member_op, "as": "root", "item": item}]}
                    answer = http.post("/v1/commands", json=doc)
                    assert (answer.status_code, answer.json()["error"]) == (403, "forbidden"), (member_op, answer.text)
                    bad = {"op": op, field: [{"op": "new", "title": "x", "as": "ro ot"}]}
                    answer = http.post("/v1/commands", json=bad)
                    assert answer.status_code in (403, 422) and answer.json()["ok"] is False, answer.text
        for op in _public():
            answer = http.post("/v1/commands", json={"op": op, "as": "ro ot", "item": item})
            # Not the token's identity (403) or not a name (422): refused either way, nothing written.
            assert answer.status_code in (403, 422) and answer.json()["ok"] is False, (op, answer.text)
        assert tip(repo) == before
        same = http.post("/v1/commands", json={"op": "batch", "ops": [{"op": "new", "title": "mine", "as": "bot"}]})
        assert same.status_code == 200, same.text
    assert tip(repo) != before


# --- MCP: a real gw mcp takes no identity from a call -----------------------------------------------


def test_mcp_no_tool_carries_documents_or_an_identity(plane: tuple[Path, str], tmp_path: Path) -> None:
    pytest.importorskip("mcp")
    import anyio
    from mcp import ClientSession
    from mcp.client.stdio import StdioServerParameters, stdio_client

    from gitwork.mcp import tools

    repo, item = plane
    nesting = _nesting()
    for tool in tools.TOOLS:  # no tool runs an op that carries documents, nor takes a "docs" argument
        assert tool.op not in nesting and all(f.kind != "docs" for f in tool.fields.values()), tool.name
    before = tip(repo)

    async def scenario() -> None:
        params = StdioServerParameters(command=sys.executable, args=["-m", "gitwork", "mcp", "-C", str(repo),
                                                                     "--as", "bot"], env=dict(os.environ))
        with open(tmp_path / "mcp.log", "a") as log:
            async with stdio_client(params, errlog=log) as (read, write), ClientSession(read, write) as session:
                await session.initialize()
                for tool in tools.TOOLS:
                    for arguments in ({"as": "root"}, {"as": "ro ot"}, {"ops": [{"op": "new", "title": "x", "as": "root"}]}):
                        result = await session.call_tool(tool.name, {"item": item, **arguments})
                        doc = json.loads(result.content[0].text)
                        assert result.is_error and doc["exit"] == "USAGE", (tool.name, doc)

    anyio.run(scenario)
    assert tip(repo) == before
    bad = subprocess.run([sys.executable, "-m", "gitwork", "mcp", "-C", str(repo), "--as", "ro ot"],
                         capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)
    assert bad.returncode == ExitCode.INVALID and "identity" in bad.stderr
    assert tip(repo) == before


# --- the arbiter's pre-receive hook: a batch rewritten with plain git -----------------------------


def _forged_batch_push(repo: Path, item: str, tmp_path: Path, forged_as: str) -> tuple[subprocess.CompletedProcess[str],
                                                                                   str | None, Path]:
    """Push, with plain git, carol's batch revoke whose member was rewritten to act as ``forged_as``:
    (the push, the arbiter's tip before it, the arbiter)."""
    bare = make_repo(tmp_path / "arbiter.git", bare=True)
    hook = bare / "hooks" / "pre-receive"
    hook.write_text(f'#!/bin/sh\nexec "{sys.executable}" -m gitwork.statecheck\n')
    hook.chmod(0o755)
    git(bare, "config", "gitwork.admins", "root")
    git(bare, "config", "gitwork.agents", "bot")
    push = ["git", "push", "--porcelain", str(bare), f"{STATE}:{STATE}"]
    assert subprocess.run(push, cwd=repo, capture_output=True).returncode == 0
    base = tip(repo)
    # carol (a person) revokes in a batch: a hostile client clears the roles locally, so its engine lets her.
    git(repo, "config", "--unset", "gitwork.admins")
    with Workplane(str(repo), agent="carol") as wp:
        landed = wp.submit({"op": "batch", "ops": [{"op": "revoke", "item": item, "reason": "mine"}]}).commit
    git(repo, "config", "gitwork.admins", "root")
    refused = subprocess.run(push, cwd=repo, capture_output=True, text=True)
    assert refused.returncode != 0 and "only an admin" in refused.stderr, refused.stderr  # the honest one
    # The forgery: the member now names another identity; the envelope (and the commit's author) stays carol.
    body = git(repo, "cat-file", "commit", landed).split("\n\n", 1)[1]
    doc = engine.parse_command_from_message(body)
    assert doc is not None and doc["as"] == "carol" and doc["ops"][0]["as"] == "carol"
    forged_doc = {**doc, "ops": [{**doc["ops"][0], "as": forged_as}]}
    lines = body.split("\n")
    lines[2] = engine.COMMAND_PREFIX + json.dumps(forged_doc, ensure_ascii=False, sort_keys=True, separators=(", ", ": "))
    forged = subprocess.run(["git", "commit-tree", git(repo, "rev-parse", f"{landed}^{{tree}}"), "-p", base],
                            cwd=repo, input="\n".join(lines), capture_output=True, text=True, check=True,
                            env={**os.environ, "GIT_AUTHOR_NAME": "m", "GIT_AUTHOR_EMAIL": "m@x.invalid",
                                 "GIT_COMMITTER_NAME": "m", "GIT_COMMITTER_EMAIL": "m@x.invalid"}).stdout.strip()
    git(repo, "update-ref", STATE, forged)
    try:
        return subprocess.run(push, cwd=repo, capture_output=True, text=True), base, bare
    finally:
        git(repo, "update-ref", STATE, str(base))


def test_the_arbiters_hook_refuses_a_forged_batch_member_identity(plane: tuple[Path, str], tmp_path: Path) -> None:
    repo, item = plane
    pushed, base, bare = _forged_batch_push(repo, item, tmp_path, "root")
    assert pushed.returncode != 0 and "root" in pushed.stderr, pushed.stderr
    assert tip(bare, STATE) == base


def test_the_arbiters_hook_refuses_a_forged_batch_member_identity_that_is_not_a_name(plane: tuple[Path, str],
                                                                                     tmp_path: Path) -> None:
    repo, item = plane
    pushed, base, bare = _forged_batch_push(repo, item, tmp_path, "ro ot")
    assert pushed.returncode != 0 and "identity" in pushed.stderr, pushed.stderr
    assert tip(bare, STATE) == base
