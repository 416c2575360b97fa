"""``gw mcp`` (issue 17): the work plane as an MCP server, spoken to by the ``mcp`` SDK's own client.

Every test starts the real ``gw mcp`` as a child process over stdio (``stdio_client`` +
``ClientSession``) on a real repository; the state ref is read with git and the library afterwards.
A tool call runs the verb's plain function, so its result is the CLI's ``--json`` and a refusal is a
tool error (``isError``) carrying the CLI's kind, code and the exit code's name.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import importlib.util
import json
import os
import subprocess
import sys
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import anyio
import pytest

from conftest import git, gw_cmd, let_post, tip
from gitwork.mcp import tools
from gitwork.workplane import Workplane

# The SDK is imported by the tests that run, not at collection: every xdist worker collects this module, and
# importing mcp costs ~0.6 s of CPU (2026-12-02), paid by each worker whether or not it runs a test of it.
pytestmark = pytest.mark.skipif(importlib.util.find_spec("mcp") is None, reason="the mcp SDK is not installed")
if TYPE_CHECKING:
    from mcp import ClientSession

BUDGET = 3000  # tokens the whole tool list may cost an agent's context (beads' server: 10-50k)
T0 = dt.datetime(2030, 1, 1, 12, 0, 0, tzinfo=dt.timezone.utc)


def at(seconds: int = 0) -> str:
    return (T0 + dt.timedelta(seconds=seconds)).strftime("%Y-%m-%dT%H:%M:%SZ")


@contextlib.asynccontextmanager
async def connect(repo: Path, who: str, errlog: Path, env: dict[str, str] | None = None) -> AsyncIterator[ClientSession]:
    """A real ``gw mcp -C REPO --as WHO`` child, initialised, as the SDK's client session."""
    from mcp import ClientSession
    from mcp.client.stdio import StdioServerParameters, stdio_client

    params = StdioServerParameters(command=sys.executable, args=["-m", "gitwork", "mcp", "-C", str(repo), "--as", who],
                                   env={**os.environ, **(env or {})})
    with open(errlog, "a") as log:
        async with stdio_client(params, errlog=log) as (read, write), ClientSession(read, write) as session:
            await session.initialize()
            yield session


async def call(session: ClientSession, tool: str, **arguments: Any) -> tuple[bool, Any]:
    result = await session.call_tool(tool, arguments)
    assert len(result.content) == 1 and result.content[0].type == "text"
    return bool(result.is_error), json.loads(result.content[0].text)


async def ok(session: ClientSession, tool: str, **arguments: Any) -> Any:
    is_error, doc = await call(session, tool, **arguments)
    assert not is_error, (tool, doc)
    return doc


async def refused(session: ClientSession, repo: Path, tool: str, kind: str, exit: str, **arguments: Any) -> dict[str, Any]:
    """A tool error with the CLI's error object and the exit code's name, and nothing written."""
    before = tip(repo)
    is_error, doc = await call(session, tool, **arguments)
    assert is_error, (tool, arguments, doc)
    assert doc["ok"] is False and doc["error"] == kind and doc["exit"] == exit, (tool, doc)
    assert isinstance(doc["code"], int) and doc["message"]
    assert tip(repo) == before, f"{tool} was refused but the state ref moved"
    return doc


def run(scenario: Callable[[], Awaitable[None]]) -> None:
    """Run a scenario; a failure inside the client's task groups is raised as itself, not as a group."""
    try:
        anyio.run(scenario)
    except Exception as exc:  # an ExceptionGroup (3.11+, or the backport on 3.10): unwrap one-leaf groups
        leaf: BaseException = exc
        while len(getattr(leaf, "exceptions", ())) == 1:
            leaf = leaf.exceptions[0]  # type: ignore[attr-defined]
        if leaf is exc:
            raise
        raise leaf from None


def seed(repo: Path, *titles: str) -> list[str]:
    with Workplane(str(repo), agent="seeder", now=lambda: T0) as wp:
        wp.do("init")
        # Priorities 1, 2, ... in the order given: that is the ready order too.
        return [wp.do("new", title=title, criteria=["works"], priority=min(n, 4)).result["item"]
                for n, title in enumerate(titles, 1)]


def commands_since(repo: Path, commit: str | None) -> list[tuple[str, str, str]]:
    """(op, as, author) of each state commit after ``commit``, oldest first."""
    with Workplane(str(repo)) as wp:
        entries = []
        for entry in wp.log():
            if entry["commit"] == commit:
                break
            entries.append((entry["command"]["op"], entry["command"]["as"], entry["author"].split(" <")[0]))
    return entries[::-1]


# --- the agent loop ------------------------------------------------------------------------------


def test_an_agent_claims_talks_checks_and_finishes_over_stdio(repo: Path, tmp_path: Path, capsys: Any) -> None:
    first, second = seed(repo, "Design the schema", "Build the API")
    start = tip(repo)
    seen: dict[str, Any] = {}

    async def scenario() -> None:
        async with connect(repo, "bot", tmp_path / "server.log", {"GW_NOW": at(60)}) as session:
            listed = await session.list_tools()
            assert [t.name for t in listed.tools] == [t.name for t in tools.TOOLS]
            assert [t.model_dump(by_alias=True, exclude_none=True) for t in listed.tools] == tools.listing()
            served = listed.model_dump_json(by_alias=True, exclude_none=True)  # what a client hands the model
            assert abs(len(served) - len(tools.listing_json())) < 200
            assert tools.estimate_tokens(served) <= BUDGET
            ready = await ok(session, "ready")
            assert [row["item"] for row in ready] == [first, second]

            claim = await ok(session, "claim", next=True, ttl="30m")
            assert (claim["item"], claim["holder"], claim["epoch"]) == (first, "bot", 1)
            posted = await ok(session, "msg", item=first, text="starting on the schema")
            assert posted["seq"] == 1
            thread = await ok(session, "thread", item=first, since=0)
            assert [(m["seq"], m["by"], m["text"]) for m in thread] == [(1, "bot", "starting on the schema")]
            # A number as text is not what the schema says (integer): refused, not coerced (docs/mcp.md).
            await refused(session, repo, "thread", "invalid", "INVALID", item=first, since="1")
            # The remembered lease fences the call; passing the same fence explicitly is the same call.
            await ok(session, "check", item=first[:8], criterion=1, fence=claim["fence"])
            seen["show"] = await ok(session, "show", item=first)
            done = await ok(session, "done", item=first)
            assert (done["op"], done["item"], done["status"]) == ("done", first, "done")
            seen["context"] = await ok(session, "context", item=first)

            resource = await session.read_resource(f"gitwork://item/{first}")
            assert json.loads(resource.contents[0].text)["status"] == "done"
            resource = await session.read_resource(f"gitwork://item/{first}/thread")
            assert [m["seq"] for m in json.loads(resource.contents[0].text)] == [1]
            resource = await session.read_resource("gitwork://ready")
            assert [row["item"] for row in json.loads(resource.contents[0].text)] == [second]
            templates = await session.list_resource_templates()
            assert {t.uri_template for t in templates.resource_templates} == {"gitwork://item/{id}",
                                                                              "gitwork://item/{id}/thread"}

    run(scenario)
    # Exactly the four commands the calls made, as the server's identity, nothing else.
    assert commands_since(repo, start) == [("claim", "bot", "bot"), ("msg", "bot", "bot"), ("check", "bot", "bot"),
                                           ("done", "bot", "bot")]
    # The tools answer what `gw --json` prints for the same state.
    from gitwork.cli.main import main

    capsys.readouterr()
    assert main(["context", first, "-C", str(repo), "--as", "bot", "--json"]) == 0
    cli = json.loads(capsys.readouterr().out)
    assert {**cli, "state_commit": None} == {**seen["context"], "state_commit": None}
    assert seen["show"]["criteria"][0]["checked"] is True and seen["show"]["lease"]["holder"] == "bot"


def test_the_tool_list_fits_in_3000_tokens() -> None:
    """The JSON of the ``tools/list`` result, counted at 3.5 characters a token (conservative:
    tokenizers average about 4 on English and JSON), fits the budget docs/mcp.md states. The served
    result is this listing (the stdio test compares them), serialised by the SDK to within a few
    characters of this text (the stdio test checks that too, and the budget on the served text)."""
    text = tools.listing_json()
    assert len(json.loads(text)["tools"]) == len(tools.TOOLS) >= 15
    assert tools.estimate_tokens("x" * 7) == 2 and tools.estimate_tokens("x" * 8) == 3  # rounded up
    assert tools.estimate_tokens(text) <= BUDGET, f"the tool list costs {tools.estimate_tokens(text)} tokens"


def test_input_schemas_come_from_the_op_declarations() -> None:
    from gitwork import engine

    for tool in tools.TOOLS:
        if tool.op is None:
            continue
        declared = engine.spec(tool.op)
        assert declared is not None and not declared.internal, tool.name
        schema = tool.input_schema()
        for name in schema["properties"]:
            assert name in declared.fields or name == "fence", (tool.name, name)
        assert set(schema.get("required", ())) == {n for n in schema["properties"]
                                                   if n in declared.fields and declared.fields[n].required}
    handoff = tools.BY_NAME["handoff"].input_schema()["properties"]["reason"]
    from gitwork.ops.leases import HANDOFF_REASONS

    assert handoff == {"enum": list(HANDOFF_REASONS)}


def test_a_long_lived_server_does_not_keep_every_commit_it_read(repo: Path) -> None:
    """The store memoises the trees it reads; the server lets go of them between calls, so memory does
    not grow with the number of calls (in-process: the same Session the server runs)."""
    (item,) = seed(repo, "Busy")
    with Workplane(str(repo), agent="bot") as wp:
        session = tools.Session(wp)
        held = []
        for _ in range(12):
            for tool in ("claim", "release"):
                is_error, doc = session.call(tool, {"item": item})
                assert not is_error, doc
            held.append(len(wp.store._trees))
        assert max(held) <= held[0] + 4, held  # without letting go: about 11 more trees every round


def test_a_bug_in_a_call_is_an_internal_tool_error_not_a_crash(wp: Workplane, monkeypatch: pytest.MonkeyPatch) -> None:
    item = wp.do("new", title="Fine").result["item"]
    session = tools.Session(wp)

    def broken(*args: Any) -> Any:
        raise ZeroDivisionError("division by zero")

    with monkeypatch.context() as patch:
        patch.setattr(tools, "run_verb", broken)
        is_error, doc = session.call("show", {"item": item})
    assert is_error and doc == {"ok": False, "error": "internal", "code": 1, "exit": "INTERNAL",
                                "message": "ZeroDivisionError: division by zero"}
    is_error, doc = session.call("show", {"item": item})
    assert not is_error and doc["item"] == item


# --- refusals are tool errors; the server keeps serving ----------------------------------------------


def test_bad_input_is_a_tool_error_with_its_kind_and_the_server_keeps_serving(repo: Path, tmp_path: Path) -> None:
    (item,) = seed(repo, "One item")

    async def scenario() -> None:
        async with connect(repo, "bot", tmp_path / "server.log") as session:
            cases: list[tuple[str, str, str, dict[str, Any]]] = [
                ("check", "usage", "USAGE", {"item": item}),  # a missing argument
                ("claim", "invalid", "INVALID", {}),  # neither an item nor next
                ("check", "invalid", "INVALID", {"item": item, "criterion": "first"}),  # wrong types
                ("claim", "invalid", "INVALID", {"next": "yes"}),
                ("ready", "invalid", "INVALID", {"limit": [1]}),
                ("handoff", "invalid", "INVALID", {"item": item, "reason": "bored"}),
                ("frobnicate", "usage", "USAGE", {}),  # an unknown tool
                ("show", "usage", "USAGE", {"item": item, "verbose": True}),  # an unknown argument
                ("msg", "invalid", "INVALID", {"item": item, "text": "x" * 300_000}),  # a huge string
                ("show", "not-found", "NOT_FOUND", {"item": "w-0000"}),
                ("release", "not-holder", "STALE", {"item": item}),  # nothing held: not the holder (exit 7)
            ]
            for tool, kind, exit, arguments in cases:
                await refused(session, repo, tool, kind, exit, **arguments)
                assert (await ok(session, "show", item=item))["item"] == item  # still serving
            from mcp.shared.exceptions import MCPError

            with pytest.raises(MCPError) as caught:  # resources have no error results: a protocol error
                await session.read_resource("gitwork://item/w-0000")
            assert caught.value.message.startswith("not-found: ") and caught.value.data["exit"] == "NOT_FOUND"

            # The identity is fixed at start: no argument can act as someone else.
            for key in ("as", "agent"):
                doc = await refused(session, repo, "claim", "usage", "USAGE", item=item, **{key: "mallory"})
                assert "fixed when it started" in doc["message"]
            claim = await ok(session, "claim", item=item)
            assert claim["holder"] == "bot"

    run(scenario)
    with Workplane(str(repo)) as wp:
        assert wp.lease(item).holder == "bot"  # type: ignore[union-attr]
    # The refused calls wrote nothing: after the seeding, the only command is the one good claim.
    assert commands_since(repo, None)[-1] == ("claim", "bot", "bot")


def test_an_agent_may_ask_but_not_decide_or_revoke(repo: Path, tmp_path: Path) -> None:
    (item,) = seed(repo, "Pick a database")
    git(repo, "config", "gitwork.agents", "bot")

    async def scenario() -> None:
        async with connect(repo, "bot", tmp_path / "server.log") as session:
            await ok(session, "claim", item=item)
            asked = await ok(session, "ask", item=item, text="Postgres or SQLite?", options=["Postgres", "SQLite"])
            doc = await refused(session, repo, "decide", "forbidden", "FORBIDDEN", item=item,
                                question=asked["seq"], choose="SQLite", why="small")
            assert "agents may ask" in doc["message"] and doc["code"] == 77
            doc = await refused(session, repo, "revoke", "forbidden", "FORBIDDEN", item=item, reason="mine now")
            assert "agents may not revoke" in doc["message"]

    run(scenario)


def test_a_takeover_makes_the_remembered_lease_stale_and_nothing_is_written(repo: Path, tmp_path: Path) -> None:
    """The server acts only under the lease it was granted: once that lease is gone, the calls on the
    item are refused as stale and write nothing, also when the same identity holds a newer lease
    granted elsewhere. After one refused message the agent can still say that it stopped."""
    first, second = seed(repo, "Long job", "Other job")
    let_post(repo, "alice")  # once bob took the item over, alice says that she stopped (docs/leases.md, "Who may post")

    def cli_claim(item: str, who: str) -> dict[str, Any]:
        # An hour later (by this process's clock) the server's one-minute leases have expired.
        done = subprocess.run(gw_cmd("claim", item, "--as", who, "--json"), cwd=repo,
                              env={**os.environ, "GW_NOW": at(3600)}, capture_output=True, text=True)
        assert done.returncode == 0, done.stderr
        return json.loads(done.stdout)

    async def scenario() -> None:
        async with connect(repo, "alice", tmp_path / "server.log", {"GW_NOW": at(0)}) as session:
            claim = await ok(session, "claim", item=first, ttl="1m")
            await ok(session, "claim", item=second, ttl="1m")
            taken = cli_claim(first, "bob")
            assert taken["fence"] > claim["fence"]
            for tool, arguments in (("check", {"criterion": 1}), ("done", {}), ("renew", {}), ("release", {}),
                                    ("handoff", {"reason": "blocked"}), ("msg", {"text": "still on it"})):
                doc = await refused(session, repo, tool, "stale", "STALE", item=first, **arguments)
                assert doc["code"] == 7
            # Told once: a message now is a note at the current epoch; work stays refused.
            note = await ok(session, "msg", item=first, text="stopping: bob has it")
            assert note["epoch"] == taken["epoch"]
            await refused(session, repo, "check", "stale", "STALE", item=first, criterion=1)

            # The same identity, in another process, claims the second item anew: still not this lease.
            again = cli_claim(second, "alice")
            assert again["holder"] == "alice" and again["epoch"] == 2
            for tool, arguments in (("check", {"criterion": 1}), ("done", {}), ("msg", {"text": "done here"})):
                await refused(session, repo, tool, "stale", "STALE", item=second, **arguments)

    run(scenario)
    with Workplane(str(repo)) as wp:
        assert wp.lease(first).holder == "bob"  # type: ignore[union-attr]
        assert [m["text"] for m in wp.thread(first)[1] if m["by"] == "alice"] == ["stopping: bob has it"]
        assert wp.item(second).criteria[0]["checked"] is False  # type: ignore[index]


# --- two servers and a CLI race for one item -----------------------------------------------------


@pytest.mark.slow
def test_two_servers_and_a_cli_race_for_one_item_one_wins(repo: Path, tmp_path: Path) -> None:
    (item,) = seed(repo, "Contended")
    outcomes: dict[str, tuple[bool, Any]] = {}

    async def scenario() -> None:
        async with connect(repo, "alice", tmp_path / "alice.log") as alice, \
                connect(repo, "bob", tmp_path / "bob.log") as bob:
            async def server(name: str, session: ClientSession) -> None:
                outcomes[name] = await call(session, "claim", item=item)

            async def cli() -> None:
                done = await anyio.run_process([*gw_cmd("claim", item, "--as", "carol", "--json")], cwd=repo,
                                               check=False)
                outcomes["carol"] = (done.returncode != 0, json.loads(done.stdout))
                outcomes["carol-exit"] = (False, done.returncode)

            async with anyio.create_task_group() as group:
                group.start_soon(cli)
                group.start_soon(server, "alice", alice)
                group.start_soon(server, "bob", bob)

    run(scenario)
    racers = ("alice", "bob", "carol")
    winners = [who for who in racers if not outcomes[who][0]]
    assert len(winners) == 1, outcomes
    for who in racers:
        if who in winners:
            assert outcomes[who][1]["holder"] == who
        else:
            assert outcomes[who][1]["error"] == "held", outcomes[who]
            assert who == "carol" or outcomes[who][1]["exit"] == "HELD"
    assert outcomes["carol-exit"][1] == (0 if winners == ["carol"] else 75)
    with Workplane(str(repo)) as wp:
        assert wp.lease(item).holder == winners[0]  # type: ignore[union-attr]
    assert [op for op, _who, _author in commands_since(repo, None)].count("claim") == 1


def test_a_bad_identity_is_refused_before_anything_is_served(repo: Path) -> None:
    seed(repo)
    before = tip(repo)
    for args, env in ((["--as", "not a name"], {}), ([], {"GW_AGENT": "bad name!"})):
        done = subprocess.run(gw_cmd("mcp", "-C", str(repo), *args), env={**os.environ, **env}, capture_output=True,
                              text=True, input="", timeout=60)
        assert done.returncode == 5, done.stderr
        assert done.stdout == "" and done.stderr.startswith("gw: invalid: ") and len(done.stderr.splitlines()) == 1
    assert tip(repo) == before


def test_without_the_sdk_gw_mcp_says_which_extra_to_install(repo: Path) -> None:
    seed(repo)
    script = ("import sys\nsys.modules['mcp'] = None  # as if the extra were not installed\n"
              "from gitwork.cli.main import main\nsys.exit(main(['mcp', '-C', sys.argv[1]]))\n")
    done = subprocess.run([sys.executable, "-c", script, str(repo)], capture_output=True, text=True, input="")
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.startswith("gw: usage: gw mcp needs the mcp extra: pip install 'gitwork[mcp]'")
    assert len(done.stderr.splitlines()) == 1


def test_docs_describe_the_tools_as_they_are() -> None:
    """docs/mcp.md's table (the agent's loop) names real tools with their real arguments; every tool,
    one declared on an op (``mcp=``) included, is in docs/api.md's generated table (test_api_docs.py)."""
    root = Path(__file__).resolve().parent.parent
    text = (root / "docs" / "mcp.md").read_text()
    rows = {line.split("`")[1]: line for line in text.splitlines() if line.startswith("| `")
            and "(`gw " in line}
    assert {"ready", "claim", "done", "msg", "revoke"} <= set(rows)
    for name, row in rows.items():
        assert name in tools.BY_NAME, f"docs/mcp.md has a row for {name}, which is no tool"
        for argument in tools.BY_NAME[name].input_schema()["properties"]:
            assert argument in row, (name, argument)
    assert "docs/mcp.md" in (root / "README.md").read_text()


# --- nothing of the MCP SDK on any other verb's path ----------------------------------------------


def test_no_other_verb_imports_the_mcp_sdk(repo: Path) -> None:
    """`gw mcp` is declared in the typer app, but loading the app (every typer verb) and running a
    typer verb import neither gitwork.mcp nor the SDK and its dependencies (pydantic, anyio)."""
    script = (
        "import sys\nfrom gitwork.cli.main import main\n"
        "code = main(['summary', '-C', sys.argv[1], '--json'])\nimport gitwork.cli.app\n"
        "heavy = sorted(m for m in sys.modules if m.split('.')[0] in ('mcp', 'mcp_types', 'pydantic', 'anyio', "
        "'starlette', 'httpx') or m.startswith('gitwork.mcp'))\nprint(code, heavy)\n"
    )
    seed(repo)
    done = subprocess.run([sys.executable, "-c", script, str(repo)], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().splitlines()[-1] == "0 []"


# --- every argument is checked against the tool's own input schema ---------------------------------


GOOD = {"string": "x", "integer": 1, "boolean": True, "array": ["x"]}
# A value of every JSON type, to send where the schema declares another (bool is not an integer).
EVERY_TYPE: dict[str, Any] = {"string": "5", "integer": 5, "boolean": True, "array": ["x"], "object": {"a": 1},
                              "number": 1.5}


def _types(schema: dict[str, Any]) -> set[str]:
    if "enum" in schema:
        return {"string"}
    declared = schema["type"]
    return set(declared) if isinstance(declared, list) else {declared}


def _good(name: str, schema: dict[str, Any], item: str) -> Any:
    if name == "item":
        return item
    if "enum" in schema:
        return schema["enum"][0]
    return GOOD[sorted(_types(schema))[0]]


def test_every_tool_refuses_a_value_of_another_type_than_its_schema_says(repo: Path, tmp_path: Path) -> None:
    """ttl: 5 where the schema says string, labels: "x" where it says array, a string for an integer:
    each a tool error INVALID (docs/mcp.md), never coerced, for every argument of every tool."""
    (item,) = seed(repo, "One item")
    cases: list[tuple[str, dict[str, Any]]] = []
    for tool in tools.TOOLS:
        schema = tool.input_schema()
        required = {name: _good(name, schema["properties"][name], item) for name in schema.get("required", [])}
        for name, prop in schema["properties"].items():
            for json_type, value in EVERY_TYPE.items():
                if json_type not in _types(prop):
                    cases.append((tool.name, {**required, name: value}))
    assert ("claim", {"ttl": 5}) in cases and ("claim", {"labels": "5"}) in cases

    async def scenario() -> None:
        async with connect(repo, "bot", tmp_path / "server.log") as session:
            before = tip(repo)
            for name, arguments in cases:
                result = await session.call_tool(name, arguments)
                doc = json.loads(result.content[0].text)
                assert result.is_error and (doc["error"], doc["exit"]) == ("invalid", "INVALID"), (name, arguments, doc)
                assert "must be" in doc["message"], (name, arguments, doc)
            assert tip(repo) == before
            assert (await ok(session, "claim", item=item, ttl="20m", labels=None))["holder"] == "bot"

    run(scenario)


def test_check_arguments_is_the_schema_and_the_kind_together() -> None:
    """The same refusals without a server: the schema's JSON type, then the kind's own rule."""
    from gitwork.errors import Invalid

    claim = tools.BY_NAME["claim"]
    for arguments in ({"ttl": 5}, {"labels": "x"}, {"priority": "2"}, {"next": 1}, {"priority": True},
                      {"item": 7}, {"labels": [1]}, {"ttl": "soon"}, {"priority": 9}):
        with pytest.raises(Invalid):
            tools.check_arguments(claim, arguments)
    assert tools.check_arguments(claim, {"ttl": "5m", "labels": ["x"], "priority": 2}) == {
        "ttl": "5m", "labels": ["x"], "priority": 2}
    with pytest.raises(Invalid):
        tools.check_arguments(tools.BY_NAME["decide"], {"item": "w-1", "question": 1.5, "choose": "a", "why": "w"})
    assert tools.check_arguments(tools.BY_NAME["ack"], {"item": "w-1", "upto": "3"})["upto"] == "3"
