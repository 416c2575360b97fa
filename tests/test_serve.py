"""``gw serve``: the REST API over the same command documents (docs/serve.md).

One throwaway repository per module (tokens for a person, an agent and an admin), the application
in-process (httpx over ASGI) for most checks, a real server on a free port where the invariant is
about processes or streams (racing ``gw`` processes, event streams, ``gw serve`` itself).
"""

from __future__ import annotations

import contextlib
import io
import json
import re
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("fastapi", reason="gw serve needs the serve extra (pip install -e '.[test]')")

import httpx  # noqa: E402
from fastapi import APIRouter, Depends, Request  # noqa: E402
from fastapi.testclient import TestClient  # noqa: E402

from conftest import ROOT, gw_cmd, let_post, make_repo, scrubbed, tip  # noqa: E402
from gitwork import commands, engine  # noqa: E402
from gitwork.cli.main import main as gw_main  # noqa: E402
from gitwork.errors import ExitCode  # noqa: E402
from gitwork.serve import schema  # noqa: E402
from gitwork.serve.app import HTTP_STATUS, MAX_BODY, create_app  # noqa: E402
from gitwork.serve.server import principal  # noqa: E402
from gitwork.serve.threaded import Running  # noqa: E402
from gitwork.serve.tokens import Tokens  # noqa: E402
from gitwork.store import Repository  # noqa: E402
from gitwork.workplane import Workplane  # noqa: E402


class World:
    """The module's repository, its tokens and an in-process client per identity."""

    def __init__(self, repo: Path) -> None:
        self.repo = repo
        tokens = Tokens(Repository.discover(str(repo)).gitwork_dir())
        self.token = {name: tokens.add(name, role)[0]
                      for name, role in (("alice", "person"), ("bot", "agent"), ("root", "admin"), ("carol", "person"))}
        self.app = create_app(str(repo))

    def client(self, who: str | None) -> TestClient:
        headers = {"Authorization": f"Bearer {self.token[who]}"} if who else {}
        return TestClient(self.app, base_url="http://gw", headers=headers)

    def new(self, title: str = "task", **args: Any) -> str:
        with Workplane(str(self.repo), agent="root") as wp:
            return wp.do("new", title=title, **args).result["item"]  # type: ignore[no-any-return]


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[World]:
    with scrubbed(tmp_path_factory):
        repo = make_repo(tmp_path_factory.mktemp("serve") / "repo")
        with Workplane(str(repo), agent="root") as wp:
            wp.do("init")
        let_post(repo, "alice", "bob", "carol")  # they post on root's items: these tests are about the faces
        yield World(repo)


def cli(repo: Path, *args: str, who: str = "alice") -> tuple[int, Any]:
    """``gw ARGS --json`` in this process: (exit code, the JSON it printed)."""
    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(io.StringIO()):
        code = gw_main([*args, "-C", str(repo), "--json", "--as", who])
    return code, json.loads(out.getvalue())


# --- the request schema: derived from the op registry ------------------------------------------------


def test_every_field_kind_has_a_json_schema() -> None:
    assert set(schema.KIND_SCHEMAS) == set(commands.KINDS)


def test_openapi_command_schemas_are_the_public_ops_declared_fields(world: World) -> None:
    doc = world.app.openapi()
    body = doc["paths"]["/v1/commands"]["post"]["requestBody"]["content"]["application/json"]["schema"]
    internal = engine.declared("internal")
    assert internal and not internal & set(body["discriminator"]["mapping"])  # records are not accepted
    for name, ref in body["discriminator"]["mapping"].items():
        declared = engine.OPS[name]
        got = doc["components"]["schemas"][ref.rpartition("/")[2]]
        assert set(got["properties"]) == {"op", "id", "as", "fence", *declared.fields}, name
        assert set(got["required"]) == {"op", *(f for f, spec in declared.fields.items() if spec.required)}, name
        assert got["additionalProperties"] is False
    assert set(body["discriminator"]["mapping"]) == set(engine.OPS) - internal


def test_the_settled_mismatches_between_schema_and_validator(world: World) -> None:
    """null is absent; the schema's maxLength is the byte bound (multi-byte text within it may still be
    refused, 422); a cross-field rule is the engine's (422), never a 5xx."""
    doc = world.app.openapi()["components"]["schemas"]["Command_new"]
    assert {"type": "null"} in doc["properties"]["description"]["anyOf"]
    assert doc["properties"]["title"]["maxLength"] == commands.MAX_TITLE
    item = world.new("mismatches")
    with world.client("alice") as http:
        nulls = http.post("/v1/commands", json={"op": "new", "title": "with nulls", "description": None, "owner": None})
        fits = http.post("/v1/commands", json={"op": "new", "title": "é" * (commands.MAX_TITLE // 2)})
        too_many_bytes = http.post("/v1/commands", json={"op": "new", "title": "é" * (commands.MAX_TITLE // 2 + 1)})
        cross = http.post("/v1/commands", json={"op": "ack", "item": item, "upto": 1, "responded": True})
    assert (nulls.status_code, fits.status_code) == (200, 200)
    assert (too_many_bytes.status_code, too_many_bytes.json()["error"]) == (422, "invalid")
    assert cross.status_code in (404, 409, 422) and cross.json()["ok"] is False


# --- writes: the same documents, the same JSON, the same statuses everywhere -------------------------


def test_a_command_answers_exactly_what_gw_json_prints(world: World) -> None:
    first, second = world.new("http"), world.new("cli")
    with world.client("alice") as http:
        got = http.post("/v1/commands", json={"op": "claim", "item": first, "ttl": "10m"})
    code, printed = cli(world.repo, "claim", second, "--ttl", "10m")
    assert (got.status_code, code) == (200, 0)
    assert set(got.json()) == set(printed)
    volatile = {"item", "command_id", "commit", "expires_at", "fence"}
    assert {k: v for k, v in got.json().items() if k not in volatile} == \
        {k: v for k, v in printed.items() if k not in volatile}
    assert got.json()["holder"] == "alice"


def test_reads_answer_exactly_what_gw_json_prints(world: World) -> None:
    item = world.new("read me", criteria=["one"], labels=["api"])
    with Workplane(str(world.repo), agent="alice") as wp:
        wp.post(item, "hello", to="carol")
    with world.client("carol") as http:
        pairs = [
            ("/v1/items", ["list"]), ("/v1/items?all=true&label=api", ["list", "--all", "-l", "api"]),
            ("/v1/ready?limit=2", ["ready", "-n", "2"]), (f"/v1/items/{item}", ["show", item]),
            (f"/v1/items/{item}/history", ["history", item]), (f"/v1/items/{item}/thread?since=0", ["thread", item]),
            ("/v1/inbox", ["inbox"]), ("/v1/log?limit=3", ["log", "-n", "3"]), ("/v1/executions", ["runs"]),
            ("/v1/sessions", ["session", "list"]),
        ]
        for path, argv in pairs:
            got = http.get(path)
            code, printed = cli(world.repo, *argv, who="carol")
            assert (got.status_code, code) == (200, 0), path
            assert got.json() == printed, path


def test_refusals_carry_the_cli_error_and_their_documented_status(world: World) -> None:
    item = world.new("contended")
    with world.client("alice") as alice, world.client("carol") as carol:
        assert alice.post("/v1/commands", json={"op": "claim", "item": item}).status_code == 200
        held = carol.post("/v1/commands", json={"op": "claim", "item": item})
        # A fence that is not the lease's (fences count claims across the repository, so 1 may be the
        # lease's own when this test runs first: the fence is a capability, whoever presents it).
        stale = carol.post("/v1/commands", json={"op": "renew", "item": item, "fence": 999_999})
        missing = carol.get("/v1/items/w-0000000000000000")
        invalid = carol.post("/v1/commands", json={"op": "new", "title": "x", "priority": 9})
    code, printed = cli(world.repo, "claim", item, who="carol")
    assert (held.status_code, held.headers["retry-after"], code) == (409, "1", 75)
    assert held.json()["error"] == printed["error"] == "held" and held.json()["code"] == 75
    assert (stale.status_code, stale.json()["error"]) == (409, "stale")
    assert "retry-after" not in stale.headers  # a stale fence is not worth retrying
    assert (missing.status_code, missing.json()["error"]) == (404, "not-found")
    assert (invalid.status_code, invalid.json()["error"]) == (422, "invalid")


def test_the_status_table_in_docs_is_the_one_the_server_uses() -> None:
    text = (ROOT / "docs" / "serve.md").read_text()
    text = text[text.index("### Exit codes and HTTP statuses"):text.index("Statuses outside that table")]
    rows = dict(re.findall(r"^\| (\d+) [^|]*\|[^|]*\| (\d{3})", text, re.M))
    assert {int(code): int(status) for code, status in rows.items()} == {int(c): s for c, s in HTTP_STATUS.items()}
    assert set(HTTP_STATUS) == set(ExitCode) - {ExitCode.OK}


def test_malformed_bodies_are_refused_and_nothing_is_written(world: World) -> None:
    before = tip(world.repo)
    with world.client("alice") as http:
        not_json = http.post("/v1/commands", content=b"{op: claim", headers={"Content-Type": "application/json"})
        array = http.post("/v1/commands", json=[{"op": "init"}])
        form = http.post("/v1/commands", content=b"op=claim", headers={"Content-Type": "application/x-www-form-urlencoded"})
        too_big = http.post("/v1/commands", json={"op": "new", "title": "big", "description": "x" * (MAX_BODY + 1)})
        record = http.post("/v1/commands", json={"op": "session-start", "item": "w-1234", "session": "s-1"})
        listing = http.get("/v1/items?limit=minus")
        huge = http.get("/v1/items?limit=99999999999999999999")  # SQLite would take it as a float
    assert (not_json.status_code, not_json.json()["error"]) == (400, "usage")
    assert (form.status_code, form.json()["error"]) == (415, "usage")  # not application/json (guard.py)
    assert (array.status_code, array.json()["error"]) == (400, "usage")
    assert (too_big.status_code, too_big.json()["error"]) == (413, "too-large")
    assert (record.status_code, record.json()["error"]) == (422, "invalid")
    assert "only gitwork itself" in record.json()["message"]
    assert (listing.status_code, listing.json()["error"]) == (400, "usage")
    assert (huge.status_code, huge.json()["error"]) == (400, "usage")
    assert tip(world.repo) == before


# --- authentication and authority -----------------------------------------------------------------------


def test_requests_without_a_live_token_are_refused_and_write_nothing(world: World) -> None:
    item = world.new("guarded")
    before = tip(world.repo)
    code, made = cli(world.repo, "serve", "token", "add", "dave", "--role", "person")
    assert code == 0
    doc = {"op": "claim", "item": item}
    with world.client(None) as anonymous:
        assert anonymous.post("/v1/commands", json=doc).status_code == 401
        assert anonymous.get("/v1/items").status_code == 401
        bad = anonymous.post("/v1/commands", json=doc, headers={"Authorization": "Bearer gwt_not-a-token"})
        basic = anonymous.get("/v1/items", headers={"Authorization": "Basic YWxpY2U6eA=="})
        assert (bad.status_code, bad.json()["error"], bad.headers["www-authenticate"]) == (401, "unauthorized", "Bearer")
        assert basic.status_code == 401
        dave = {"Authorization": f"Bearer {made['token']}"}
        assert anonymous.get("/v1/whoami", headers=dave).json()["who"] == "dave"
        assert cli(world.repo, "serve", "token", "revoke", "dave")[0] == 0
        revoked = anonymous.post("/v1/commands", json=doc, headers=dave)
    assert revoked.status_code == 401
    assert tip(world.repo) == before


def test_tokens_are_stored_hashed_in_the_common_git_dir(world: World) -> None:
    repo = Repository.discover(str(world.repo))
    stored = Path(repo.common_dir) / "gitwork" / "serve-tokens.json"
    text = stored.read_text()
    assert stored.stat().st_mode & 0o077 == 0  # nobody else may read even the hashes
    assert all(token not in text for token in world.token.values())
    assert {entry["name"] for entry in json.loads(text)["tokens"]} >= set(world.token)


def test_roles_are_the_tokens_and_the_identity_is_the_tokens(world: World) -> None:
    item = world.new("ask me")
    with world.client("bot") as bot, world.client("alice") as alice, world.client("root") as root:
        assert bot.post("/v1/commands", json={"op": "claim", "item": item}).status_code == 200
        asked = bot.post("/v1/commands", json={"op": "ask", "item": item, "text": "which?", "options": ["a", "b"]})
        assert asked.status_code == 200  # an agent may ask
        seq = asked.json()["seq"]
        before = tip(world.repo)
        decide = {"op": "decide", "item": item, "question": seq, "choose": "a", "why": "because", "epoch": "current"}
        refused = [bot.post("/v1/commands", json=decide),
                   bot.post("/v1/commands", json={"op": "revoke", "item": item, "reason": "mine"}),
                   alice.post("/v1/commands", json={**decide, "as": "root"}),
                   bot.post("/v1/commands", json={"op": "msg", "item": item, "text": "hi", "as": "alice", "epoch": "current"})]
        assert [r.status_code for r in refused] == [403, 403, 403, 403]
        assert [r.json()["error"] for r in refused] == ["forbidden"] * 4
        assert tip(world.repo) == before  # nothing written by any refusal
        decided = alice.post("/v1/commands", json={**decide, "as": "alice"})  # naming yourself is fine
        assert decided.status_code == 200, decided.text
        revoked = root.post("/v1/commands", json={"op": "revoke", "item": item, "reason": "admin says"})
        assert revoked.status_code == 200, revoked.text
    with Workplane(str(world.repo)) as wp:
        log = list(wp.log(3))
    assert [entry["author"].split(" <")[0] for entry in log[:2]] == ["root", "alice"]


def test_extra_routers_are_mounted_with_the_same_authentication_and_errors(world: World) -> None:
    router = APIRouter(prefix="/peer")

    @router.get("/holder/{item}")
    def holder(item: str, request: Request, who: Any = Depends(principal)) -> dict[str, Any]:
        with request.app.state.server.plane(who) as wp:
            lease = wp.lease(item)  # a bad id raises GwError: the app's own mapping answers
            return {"who": who.name, "holder": lease.holder if lease else None}

    item = world.new("peer")
    app = create_app(str(world.repo), extra_routers=[router])
    with TestClient(app, headers={"Authorization": f"Bearer {world.token['bot']}"}) as client:
        assert client.get(f"/peer/holder/{item}").json() == {"who": "bot", "holder": None}
        assert client.get("/peer/holder/w-0000000000000000").status_code == 404
        assert client.get(f"/peer/holder/{item}", headers={"Authorization": "Bearer nope"}).status_code == 401


def test_gw_serve_carries_the_delegation_endpoints_only_where_a_peer_is_configured(tmp_path: Path) -> None:
    from gitwork.serve.app import serving_app

    repo = make_repo(tmp_path / "peer")
    with Workplane(str(repo)) as wp:
        wp.do("init")

    def paths() -> set[str]:
        return set(serving_app(str(repo)).openapi()["paths"])

    assert not any(path.startswith("/delegation/") for path in paths())
    subprocess.run(["git", "config", "gitwork.peer.laptop.allow", "plan"], cwd=repo, check=True)
    assert "/delegation/plan" in paths()


def test_cors_is_off_unless_origins_are_given(world: World) -> None:
    preflight = {"Origin": "https://board.example", "Access-Control-Request-Method": "POST"}
    with TestClient(world.app) as plain:
        assert "access-control-allow-origin" not in plain.options("/v1/commands", headers=preflight).headers
    with TestClient(create_app(str(world.repo), cors_origins=["https://board.example"])) as allowing:
        answer = allowing.options("/v1/commands", headers=preflight)
    assert answer.headers["access-control-allow-origin"] == "https://board.example"


def test_board_pages_need_a_sign_in_and_render_the_items(world: World) -> None:
    item = world.new("on the board <script>")
    with TestClient(world.app, follow_redirects=False) as browser:
        assert browser.get("/").headers["location"].startswith("/login")
        wrong = browser.post("/login", content=b"token=gwt_wrong", headers={"Content-Type": "application/x-www-form-urlencoded"})
        assert wrong.status_code == 401
        signed = browser.post("/login", content=f"token={world.token['alice']}&next=//evil.example".encode(),
                              headers={"Content-Type": "application/x-www-form-urlencoded"})
        assert (signed.status_code, signed.headers["location"]) == (303, "/")  # never off this server
        assert "httponly" in signed.headers["set-cookie"].lower() and "samesite=strict" in signed.headers["set-cookie"].lower()
        pages = [browser.get("/"), browser.get(f"/items/{item}"), browser.get("/executions")]
        assert [p.status_code for p in pages] == [200, 200, 200]
        assert "on the board &lt;script&gt;" in pages[0].text and "<script>" not in pages[0].text.replace(
            '<script src="/board.js"></script>', "")
        assert browser.get("/items/w-0000000000000000").status_code == 404


def test_the_executions_page_shows_a_running_agents_terminal(world: World) -> None:
    from gitwork.launch.run import run, stop

    item = world.new("launched")
    with Workplane(str(world.repo), agent="alice") as wp:
        started = run(wp, item, ["sh", "-c", "echo hello-from-the-agent; exec sleep 60"], "subprocess")
        try:
            with world.client("alice") as http:
                listed = http.get("/v1/executions", params={"item": item}).json()
                assert [(e["execution"], e["state"]) for e in listed] == [(started["execution"], "running")]
                http.cookies.set("gw_token", world.token["alice"])

                def page() -> str:
                    return http.get("/executions").text

                deadline = time.monotonic() + 20  # the agent's first line, polled (bounded)
                while "hello-from-the-agent" not in page() and time.monotonic() < deadline:
                    time.sleep(0.05)
                assert "hello-from-the-agent" in page()
        finally:
            stop(wp, started["execution"], "test over")


# --- the OpenAPI document, checked against the server -------------------------------------------------------


@pytest.mark.slow
def test_the_api_matches_its_own_openapi_document(world: World) -> None:
    """schemathesis, in-process, both phases: what the schema calls valid is accepted (positive) and what
    it calls invalid is refused (negative); no 5xx, every status documented, every response matching its
    schema. Bounded: a few examples per operation and phase, derandomized (the same run every time).

    The one settled difference (docs/serve.md): a schema-valid command document may still be refused by
    an op's own rule on the input or the state (a cross-field rule, an edit that changes nothing, an
    import's item that is not a full id): 422, 403, 404 or 409 there, never anything else."""
    schemathesis = pytest.importorskip("schemathesis")
    from schemathesis import GenerationMode
    from schemathesis.checks import not_a_server_error
    from schemathesis.specs.openapi.checks import (
        content_type_conformance,
        negative_data_rejection,
        positive_data_acceptance,
        response_schema_conformance,
        status_code_conformance,
    )

    world.new("for schemathesis", criteria=["c"])
    api = schemathesis.openapi.from_asgi("/openapi.json", world.app)
    api.config.checks.negative_data_rejection.expected_statuses.append("413")  # a body too large is refused too
    auth = {"Authorization": f"Bearer {world.token['root']}"}
    common = [not_a_server_error, status_code_conformance, content_type_conformance, response_schema_conformance]
    streams = {"/v1/events", "/v1/items/{item}/thread/events"}  # endless by design
    failures: list[str] = []
    for mode in (GenerationMode.POSITIVE, GenerationMode.NEGATIVE):
        for result in api.get_all_operations():
            operation = result.ok()
            if operation.path in streams:
                continue
            engine_rules = mode.is_positive and operation.path == "/v1/commands"
            checks = [*common] if engine_rules else [
                *common, positive_data_acceptance if mode.is_positive else negative_data_rejection]

            run = _schemathesis_case(operation.as_strategy(generation_mode=mode), auth, checks, engine_rules)
            try:
                run()
            except KeyboardInterrupt:
                raise
            except BaseException as exc:  # every failing operation named, not only the first (a FailureGroup)
                failures.append(f"{mode} {operation.method.upper()} {operation.path}: {str(exc)[:600]}")
    assert not failures, "\n".join(failures)


def _schemathesis_case(strategy: Any, auth: dict[str, str], checks: list[Any], engine_rules: bool) -> Any:
    from hypothesis import HealthCheck, given, settings

    @settings(max_examples=6, deadline=None, database=None, derandomize=True, suppress_health_check=list(HealthCheck))
    @given(case=strategy)
    def run(case: Any) -> None:
        data = case.meta.phase.data if case.meta else None
        mutated = [getattr(data, "parameter", None),
                   *(getattr(m, "parameter", None) for m in getattr(data, "mutations", None) or ())]
        if "Authorization" in mutated:  # a negative case without the token: sent without it
            case.headers = {k: v for k, v in (case.headers or {}).items() if k.lower() != "authorization"}
        response = case.call(headers=None if "Authorization" in mutated else auth)
        case.validate_response(response, checks=checks)
        if engine_rules:
            assert response.status_code in (200, 403, 404, 409, 422), (response.status_code, response.text)

    return run


# --- processes: racing writers, event streams, gw serve itself ------------------------------------------------


@pytest.mark.slow
def test_the_server_and_gw_processes_racing_for_one_item_have_one_winner(world: World) -> None:
    item = world.new("raced")
    results: list[tuple[str, int, str]] = []
    with Running(world.app) as url:
        procs = [subprocess.Popen(gw_cmd("claim", item, "--json", "--as", f"proc{n}"), cwd=world.repo,
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for n in range(3)]

        def http_claim(who: str) -> None:
            with httpx.Client(base_url=url, headers={"Authorization": f"Bearer {world.token[who]}"}) as client:
                answer = client.post("/v1/commands", json={"op": "claim", "item": item})
                results.append((who, answer.status_code, answer.json().get("error", "")))

        threads = [threading.Thread(target=http_claim, args=(who,)) for who in ("alice", "carol", "bot")]
        for thread in threads:
            thread.start()
        for proc in procs:
            out, _err = proc.communicate(timeout=60)
            results.append((f"proc{procs.index(proc)}", proc.returncode, json.loads(out).get("error", "")))
        for thread in threads:
            thread.join(60)
    winners = [r for r in results if r[1] in (0, 200)]
    assert len(results) == 6 and len(winners) == 1, results
    losers = [r for r in results if r[0] != winners[0][0]]
    assert all((code, error) in ((75, "held"), (409, "held")) for _who, code, error in losers), results
    with Workplane(str(world.repo)) as wp:
        assert wp.lease(item).holder == winners[0][0]


def _events(response: httpx.Response) -> Iterator[tuple[str, Any]]:
    """``(event, data)`` pairs of a Server-Sent Events response, as they arrive."""
    event, data = "message", ""
    for line in response.iter_lines():
        if line.startswith("event: "):
            event = line[7:]
        elif line.startswith("data: "):
            data = line[6:]
        elif not line and data:
            yield event, json.loads(data)
            event, data = "message", ""


def test_event_streams_show_changes_made_by_gw_processes(world: World) -> None:
    item = world.new("streamed")
    with Workplane(str(world.repo), agent="alice") as wp:
        wp.post(item, "first")
    auth = {"Authorization": f"Bearer {world.token['carol']}"}
    with Running(world.app) as url, httpx.Client(base_url=url, headers=auth, timeout=20) as client:
        with client.stream("GET", "/v1/events") as state, \
                client.stream("GET", f"/v1/items/{item}/thread/events?since=0") as thread:
            states, messages = _events(state), _events(thread)
            assert next(states)[0] == "hello"
            assert next(messages)[1]["text"] == "first"
            posted = subprocess.run(gw_cmd("msg", item, "from the CLI", "--as", "bob"), cwd=world.repo,
                                    capture_output=True, text=True, timeout=60)
            assert posted.returncode == 0, posted.stderr
            moved = tip(world.repo)
            assert next(messages)[1]["text"] == "from the CLI"
            seen = next(states)
            while seen[1]["commit"] != moved:  # other tests' commits may come first
                seen = next(states)
            assert seen[0] == "state"


def test_the_event_stream_shows_what_gw_sync_brings_from_another_machine(machine_a: Path, url: str,
                                                                          tmp_path: Path) -> None:
    b = make_repo(tmp_path / "b")
    subprocess.run(["git", "remote", "add", "origin", url], cwd=b, check=True)
    assert cli(b, "init", "--remote", "origin", who="bob")[0] == 0
    code, made = cli(b, "new", "made on machine b", who="bob")
    assert code == 0 and cli(b, "sync", who="bob")[0] == 0
    token = Tokens(Repository.discover(str(machine_a)).gitwork_dir()).add("alice", "person")[0]
    auth = {"Authorization": f"Bearer {token}"}
    with Running(create_app(str(machine_a))) as base, httpx.Client(base_url=base, headers=auth, timeout=20) as client:
        with client.stream("GET", "/v1/events") as stream:
            events = _events(stream)
            assert next(events)[0] == "hello"
            assert cli(machine_a, "sync", who="alice")[0] == 0  # adopts b's commit from the arbiter
            event, data = next(events)
            assert (event, data["commit"]) == ("state", tip(machine_a))
        assert made["item"] in [row["item"] for row in client.get("/v1/items").json()]


def test_gw_serve_listens_where_asked_says_where_and_refuses_other_hosts(world: World) -> None:
    refused = subprocess.run(gw_cmd("serve", "--bind", "0.0.0.0:0"), cwd=world.repo, capture_output=True, text=True,
                             timeout=60)
    assert refused.returncode == ExitCode.INVALID and "--public" in refused.stderr
    proc = subprocess.Popen(gw_cmd("serve", "--bind", "127.0.0.1:0", "--json"), cwd=world.repo,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        lines = []
        for line in proc.stdout:  # bounded: the JSON object ends with a line "}"
            lines.append(line)
            if line.startswith("}"):
                break
        url = json.loads("".join(lines))["url"]
        answer = httpx.get(f"{url}/v1/whoami", headers={"Authorization": f"Bearer {world.token['bot']}"}, timeout=20)
        assert answer.json() == {"ok": True, "who": "bot", "role": "agent", "token": answer.json()["token"]}
    finally:
        proc.terminate()
        proc.wait(20)


def test_the_cli_hot_path_imports_nothing_of_the_server(tmp_path: Path) -> None:
    """gw claim (and the token verbs) must not pay for FastAPI, uvicorn, pydantic or gitwork.serve.app."""
    make_repo(tmp_path / "r")
    script = (
        "import sys\nfrom gitwork.cli.main import main\n"
        "codes = [main(['init', '-C', sys.argv[1]]), main(['new', 'x', '-C', sys.argv[1]])]\n"
        "item = __import__('gitwork.workplane').workplane.Workplane(sys.argv[1]).rows()[1]\n"
        "codes.append(main(['claim', list(item)[0], '-C', sys.argv[1], '--json']))\n"
        "heavy = sorted(m for m in sys.modules if m.split('.')[0] in ('fastapi', 'uvicorn', 'starlette', 'pydantic',"
        " 'httpx') or m.startswith('gitwork.serve'))\n"
        "print(codes, heavy)\n"
    )
    done = subprocess.run([sys.executable, "-c", script, str(tmp_path / "r")], capture_output=True, text=True,
                          timeout=60, env={"GW_AGENT": "alice", "PATH": "/usr/bin:/bin", "HOME": str(tmp_path)})
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().splitlines()[-1] == "[0, 0, 0] []"
