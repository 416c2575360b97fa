"""The board's pages and reads without a browser: empty states that say what to do, hostile query
strings refused with a clear page or error object and no change, the lease-timeline and capture
endpoints, and the steering ops' rules (``exec-stop``, an admin's ``handoff``) over a real connection.
The pages in a browser: tests/test_serve_board.py."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("fastapi", reason="gw serve needs the serve extra (pip install -e '.[test]')")
httpx = pytest.importorskip("httpx")

from conftest import make_repo, scrubbed  # noqa: E402
from gitwork.serve.app import create_app  # noqa: E402
from gitwork.serve.threaded import Running  # noqa: E402
from gitwork.serve.tokens import Tokens  # noqa: E402
from gitwork.store import Repository  # noqa: E402
from gitwork.workplane import Workplane  # noqa: E402


class World:
    def __init__(self, repo: Path, url: str, tokens: dict[str, str]) -> None:
        self.repo, self.url, self.tokens = repo, url, tokens

    def api(self, who: str) -> Any:
        return httpx.Client(base_url=self.url, headers={"Authorization": f"Bearer {self.tokens[who]}"}, timeout=60)

    def pages(self, who: str) -> Any:
        return httpx.Client(base_url=self.url, cookies={"gw_token": self.tokens[who]}, timeout=60)

    def tip(self) -> str:
        return subprocess.run(["git", "rev-parse", "refs/gitwork/state"], cwd=self.repo, capture_output=True,
                              text=True, check=True).stdout.strip()

    def plane(self, who: str = "root") -> Workplane:
        return Workplane(str(self.repo), agent=who)


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[World]:
    with scrubbed(tmp_path_factory):
        repo = make_repo(tmp_path_factory.mktemp("pages") / "repo")
        with Workplane(str(repo), agent="root") as wp:
            wp.do("init")
        (repo / ".workplane").write_text("admins: [lead]\nagents: [bot]\n")
        tokens = Tokens(Repository.discover(str(repo)).gitwork_dir())
        names = {"alice": "person", "lead": "admin", "bot": "agent", "bot2": "agent"}
        secrets = {name: tokens.add(name, role)[0] for name, role in names.items()}
        with Running(create_app(str(repo))) as url:
            yield World(repo, url, secrets)


def test_empty_states_say_what_to_do(tmp_path: Path) -> None:
    # A repository of its own: the module's world gains items from the other tests, and under xdist a
    # worker may run this after them (it did: the board then showed their cards, not its empty state).
    repo = make_repo(tmp_path / "empty")
    with Workplane(str(repo), agent="root") as wp:
        wp.do("init")
    token = Tokens(Repository.discover(str(repo)).gitwork_dir()).add("alice", "person")[0]
    with Running(create_app(str(repo))) as url, httpx.Client(base_url=url, cookies={"gw_token": token},
                                                              timeout=60) as pages:
        for path, words in (("/", "gw new"), ("/executions", "gw run ITEM --"), ("/graph", "gw new"),
                            ("/leases", "gw claim ITEM")):
            page = pages.get(path)
            assert page.status_code == 200, path
            assert 'class="empty"' in page.text and words in page.text, path


@pytest.mark.parametrize("path, words", [
    ("/?page=0", "page numbers start at 1"),
    ("/?page=abc", "page is a whole number"),
    ("/?page=99999999999", "page is a whole number"),
    ("/?status=bogus", "unknown status"),
    ("/?q=" + "x" * 201, "a search is at most 200 characters"),
    ("/graph?status=nope", "unknown status"),
    ("/leases?before=zzz", "40 hex digits"),
    ("/leases?before=" + "ab" * 20, "is not a commit of the state ref"),
    ("/leases?limit=0", "a page reads 1 to 5000 commits"),
    ("/leases?limit=-1", "limit is a whole number"),
    ("/items/w-ffffffffffffffff", "no item"),
])
def test_hostile_query_strings_get_a_clear_page_and_change_nothing(world: World, path: str, words: str) -> None:
    before = world.tip()
    with world.pages("alice") as pages:
        page = pages.get(path)
    assert page.status_code in (400, 404), (path, page.status_code)
    assert 'class="error"' in page.text and words in page.text, page.text[-600:]
    assert "Traceback" not in page.text
    assert world.tip() == before


@pytest.mark.parametrize("path, status, kind", [
    ("/v1/leases?before=nothex", 400, "usage"),
    ("/v1/leases?limit=0", 400, "usage"),
    ("/v1/leases?limit=5001", 400, "usage"),
    ("/v1/items/w-ffffffffffffffff/leases", 404, "not-found"),
    ("/v1/executions/bad%20id!/capture", 400, "usage"),
    ("/v1/leases?before=" + "ab" * 20, 404, "not-found"),
    ("/v1/executions/x-nosuchexecution/capture", 404, "not-found"),
    ("/v1/executions/x-nosuchexecution/capture?lines=0", 400, "usage"),
])
def test_the_new_reads_refuse_bad_input_with_the_documented_statuses(world: World, path: str, status: int,
                                                                     kind: str) -> None:
    before = world.tip()
    with world.api("alice") as api:
        answer = api.get(path)
    assert (answer.status_code, answer.json()["error"]) == (status, kind), answer.text
    assert world.tip() == before


def test_lease_timelines_over_rest_per_item_and_paged_over_history(world: World) -> None:
    with world.plane() as wp:
        item = wp.do("new", title="timeline over rest").result["item"]
    with world.plane("bot") as wp:
        wp.do("claim", item=item, ttl="30m")
        wp.do("renew", item=item)
        wp.do("release", item=item)
    with world.plane("bot2") as wp:
        wp.do("claim", item=item, ttl="30m")
    with world.api("alice") as api:
        spans = api.get(f"/v1/items/{item}/leases").json()["spans"]
        assert [(s["holder"], s["end"]) for s in spans] == [("bot", "released"), ("bot2", None)]
        first = api.get("/v1/leases", params={"holder": "bot", "limit": 3}).json()
        assert [(s["item"], s["renewals"], s["end"]) for s in first["spans"]] == [(item, 1, "released")]
        assert first["spans"][0]["from"] is None  # its claim is older than this page: the next page has it
        older = api.get("/v1/leases", params={"holder": "bot", "limit": 3, "before": first["next"]}).json()
        assert older["spans"][0]["from"] is not None and older["spans"][0]["holder"] == "bot"
        everyone = api.get("/v1/leases", params={"limit": 1}).json()
        assert [s["holder"] for s in everyone["spans"]] == ["bot2"]


def _held(world: World, holder: str = "bot") -> str:
    with world.plane() as wp:
        item = wp.do("new", title=f"held by {holder}").result["item"]
    with world.plane(holder) as wp:
        wp.do("claim", item=item, ttl="30m")
    return str(item)


def test_hand_off_of_someone_elses_lease_is_an_admins_and_one_document(world: World) -> None:
    item = _held(world)
    doc = {"op": "handoff", "item": item, "reason": "reassign", "to": "carol", "message": "carol has context"}
    before = world.tip()
    with world.api("alice") as api:  # a person, with admins configured
        refused = api.post("/v1/commands", json=doc)
    assert (refused.status_code, refused.json()["code"]) == (403, 77), refused.text
    with world.api("bot2") as api:  # an agent that does not hold it: the holder's rule, as before (stale)
        refused = api.post("/v1/commands", json=doc)
    assert (refused.status_code, refused.json()["code"]) == (409, 7), refused.text
    with world.api("lead") as api:  # presenting the holder's fence is not a credential, even for an admin
        refused = api.post("/v1/commands", json={**doc, "fence": 1})
    assert refused.json()["code"] == 7, refused.text
    assert world.tip() == before
    with world.api("lead") as api:
        landed = api.post("/v1/commands", json=doc)
    assert landed.status_code == 200, landed.text
    with world.plane() as wp:
        lease = wp.lease(item)
        assert (lease.state, lease.ended_by, lease.handoff["to"]) == ("handed-off", "lead", "carol")
        assert wp.thread(item, 0)[1][-1]["text"] == "carol has context"
    with world.plane("carol") as wp:
        assert wp.do("takeover", item=item).result["holder"] == "carol"  # the next claimant need not wait


def test_exec_stop_records_a_request_only_on_a_live_execution_and_only_for_its_starter_or_an_admin(
        world: World) -> None:
    from gitwork.launch.run import find

    item = _held(world)
    with world.plane("bot") as wp:  # an execution record as gw run makes it (no process: the op is the unit here)
        wp.record("exec-reserve", item=item, execution="x-stoptest1", command=["cat"], backend="subprocess",
                  host="elsewhere", build={"version": "test"})
        wp.record("exec-state", execution="x-stoptest1", to="launching")
        wp.record("exec-state", execution="x-stoptest1", to="running", handle="1@1")
    doc = {"op": "exec-stop", "execution": "x-stoptest1", "reason": "wrong branch"}
    before = world.tip()
    for who, status, code in (("alice", 403, 77), ("bot2", 403, 77)):
        with world.api(who) as api:
            refused = api.post("/v1/commands", json=doc)
        assert (refused.status_code, refused.json()["code"]) == (status, code), (who, refused.text)
    with world.api("lead") as api:
        for bad, status in (({**doc, "execution": "x-nosuchexec"}, 404), ({**doc, "execution": "bad id"}, 422),
                            ({k: v for k, v in doc.items() if k != "reason"}, 422), ({**doc, "reason": " "}, 422)):
            refused = api.post("/v1/commands", json=bad)
            assert refused.status_code == status, (bad, refused.text)
    assert world.tip() == before
    with world.api("lead") as api:
        landed = api.post("/v1/commands", json=doc)
        assert landed.status_code == 200, landed.text
        again = api.post("/v1/commands", json=doc)
        assert (again.status_code, again.json()["error"]) == (409, "illegal-transition"), again.text
    with world.plane() as wp:
        asked = find(wp, "x-stoptest1")["stop_requested"]
        assert (asked["by"], asked["reason"]) == ("lead", "wrong branch")
        assert [e["type"] for e in wp.history(item)][-1] == "stop-requested"
    with world.plane("bot") as wp:  # the starter may ask too; an ended execution has nothing to stop
        wp.record("exec-state", execution="x-stoptest1", to="exited", code=0)
    with world.api("bot") as api:
        ended = api.post("/v1/commands", json=doc)
    assert (ended.status_code, ended.json()["error"]) == (409, "illegal-transition"), ended.text


def test_search_finds_a_part_of_an_id_a_title_or_a_label_in_any_case_and_treats_wildcards_as_text(world: World) -> None:
    with world.plane() as wp:
        summer = wp.do("new", title="Été indien au Québec", labels=["Saisons"]).result["item"]
        percent = wp.do("new", title="Cut 50% of the p99", labels=["perf"]).result["item"]
        other = wp.do("new", title="Something else").result["item"]
    with world.pages("alice") as pages:
        def found(q: str) -> set[str]:
            text = pages.get("/", params={"q": q}).text
            return {item for item in (summer, percent, other) if f'data-item="{item}"' in text}

        assert found("ÉTÉ INDIEN") == {summer}  # non-ASCII folded (casefold), not only ASCII
        assert found("québec") == {summer}
        assert found("saisons") == {summer}  # a label
        assert found(summer[2:10].upper()) == {summer}  # a part of the id, any case
        assert found("50%") == {percent} and found("%") == {percent}  # % is text, not a wildcard
        assert found("_") == set()


def test_a_long_dependency_is_routed_through_the_layers_it_crosses_and_a_short_one_is_straight() -> None:
    """The picture's layout (igraph's Sugiyama): each dependency is drawn above what waits on it, an edge
    that spans several layers gets one point per layer it crosses, on its own route, and an edge between
    neighbouring layers none (igraph's own routing once came back attached to the wrong edge)."""
    from gitwork.serve.board import graph

    def row(item: str, *deps: str) -> tuple[Any, ...]:
        return (item, item, "open", 2, (), deps, "2026-01-01T00:00:00Z", None, None, None, None, None, None, "f")

    rows = {"client": row("client", "api", "auth"), "docs": row("docs", "api"), "release": row("release", "client", "docs", "ci"),
            "ci": row("ci"), "api": row("api"), "auth": row("auth"), "bench": row("bench", "api"), "cursor": row("cursor")}
    ids = ["ci", "api", "release", "cursor", "client", "docs", "auth", "bench"]
    coords, edges = graph.layout(ids, rows)
    layer = {item: coords[n][1] for n, item in enumerate(ids)}
    assert layer["ci"] == layer["api"] == 0 and layer["client"] == 1 and layer["release"] == 2
    routes = {(ids[a], ids[b]): points for a, b, points in edges}
    assert set(routes) == {("api", "client"), ("auth", "client"), ("api", "docs"), ("client", "release"),
                           ("docs", "release"), ("ci", "release"), ("api", "bench")}
    for (a, b), points in routes.items():
        assert [y for _x, y in points] == list(range(int(layer[a]) + 1, int(layer[b]))), (a, b, points)
    assert "<polyline" in graph.svg(ids, rows)


def test_hostile_text_in_items_is_escaped_on_every_new_page(world: World) -> None:
    hostile = '<script>alert(1)</script>"><img src=x onerror=alert(2)>'
    with world.plane() as wp:
        base = wp.do("new", title=hostile).result["item"]
        item = wp.do("new", title="waits on " + hostile, depends_on=[base]).result["item"]
    with world.plane("bot") as wp:
        wp.do("claim", item=item, ttl="30m", force=True)
    with world.pages("alice") as pages:
        for path in ("/", f"/?q={hostile}", "/graph", f"/items/{item}", f"/items/{base}", "/leases",
                     "/leases?holder=" + hostile):
            page = pages.get(path)
            assert page.status_code == 200, (path, page.status_code)
            assert "<script>alert" not in page.text and "<img src=x" not in page.text, path
            assert "&lt;script&gt;alert(1)" in page.text or path.startswith("/leases"), path
