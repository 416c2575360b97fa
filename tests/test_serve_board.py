"""The board in a real browser: Playwright for Python driving Debian's chromium (no browser download).

A real server on a free port over a throwaway repository; changes come from the page (a tick, a
decision, a revoke) and from outside it (``gw msg`` in a child process), and are checked on the state
ref and on the page without a reload. One browser for the module, two signed-in pages: ``alice`` (a
person) and ``lead`` (the one admin of the repository's settings). The screenshots in docs/ come from
``python -m gitwork.serve.shots docs/``; these tests only check that a page renders to a real image.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Callable

import pytest

pytest.importorskip("fastapi", reason="gw serve needs the serve extra (pip install -e '.[test]')")
sync_api = pytest.importorskip("playwright.sync_api", reason="the board tests need playwright (pip install -e '.[test]')")

from conftest import gw_cmd, let_post, make_repo, scrubbed  # noqa: E402
from gitwork.serve.app import create_app  # noqa: E402
from gitwork.serve.threaded import Running  # noqa: E402
from gitwork.serve.tokens import Tokens  # noqa: E402
from gitwork.store import Repository  # noqa: E402
from gitwork.workplane import Workplane  # noqa: E402

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
if not os.path.exists(CHROMIUM) and os.geteuid() != 0:
    # As root, tests/system-packages.sh installs it: a missing browser there is a failure, not a skip.
    pytest.skip("Debian's chromium is not installed and this is not root (sudo apt-get install chromium, "
                "or sh tests/system-packages.sh as root)", allow_module_level=True)


def poll(check: Callable[[], Any], timeout: float = 15, what: str = "condition") -> Any:
    deadline = time.monotonic() + timeout
    while True:
        got = check()
        if got:
            return got
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)


class Board:
    def __init__(self, repo: Path, url: str, page: Any, items: dict[str, str], lead: Any = None,
                 browser: Any = None) -> None:
        self.repo, self.url, self.page, self.items, self.lead = repo, url, page, items, lead
        self.browser = browser

    def plane(self, who: str = "alice") -> Workplane:
        return Workplane(str(self.repo), agent=who)


@pytest.fixture(scope="module")
def board(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Board]:
    with scrubbed(tmp_path_factory):
        repo = make_repo(tmp_path_factory.mktemp("board") / "repo")
        items: dict[str, str] = {}
        let_post(repo, "alice", "bob", "carol")  # they post on root's items: these tests are about the faces
        with Workplane(str(repo), agent="root") as wp:
            wp.do("init")
            schema = items["schema"] = wp.do("new", title="Design the schema", priority=1,
                                             criteria=["reviewed by a human", "migrations written"]).result["item"]
            items["api"] = wp.do("new", title="Build the API", depends_on=[schema], criteria=["tests pass"]).result["item"]
            items["docs"] = wp.do("new", title="Write the docs", labels=["docs"]).result["item"]
            items["bench"] = wp.do("new", title="Benchmark it", priority=3).result["item"]
            items["ci"] = wp.do("new", title="Set up CI", priority=0).result["item"]
            items["old"] = wp.do("new", title="Pick a name").result["item"]
            wp.do("done", item=items["old"])
        with Workplane(str(repo), agent="bot") as wp:
            wp.do("claim", item=schema, ttl="20m")
            wp.post(schema, "Starting on the schema; two tables so far.")
            wp.do("claim", item=items["ci"], ttl="45m")
            wp.ask(items["ci"], "Which CI runner should we use?", options=["GitHub Actions", "self-hosted"], to="alice")
        (repo / ".workplane").write_text("admins: [lead]\n")  # alice is a person, lead the admin
        tokens = Tokens(Repository.discover(str(repo)).gitwork_dir())
        token, lead_token = tokens.add("alice", "person")[0], tokens.add("lead", "admin")[0]
        try:
            with Running(create_app(str(repo))) as url, sync_api.sync_playwright() as playwright:
                browser = playwright.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
                page, lead = (sign_in(browser, url, secret) for secret in (token, lead_token))
                yield Board(repo, url, page, items, lead, browser)
                browser.close()
        finally:
            if shutil.which("tmux"):  # the repository's own tmux server (gw run's executions)
                from gitwork.launch.tmux import socket_path

                subprocess.run(["tmux", "-S", socket_path(Repository.discover(str(repo))), "kill-server"],
                               capture_output=True)


def sign_in(browser: Any, url: str, token: str) -> Any:
    """A page of its own browser context (its own cookie), signed in through the sign-in form."""
    page = browser.new_context(viewport={"width": 1400, "height": 900}).new_page()
    page.goto(f"{url}/")
    page.fill("input[name=token]", token)  # the sign-in form sets the session cookie
    page.click("button[type=submit]")
    page.wait_for_selector("section.column")
    return page


def screenshot(page: Any, name: str, tmp_path: Path) -> None:
    target = tmp_path / name
    page.screenshot(path=str(target), full_page=False)
    assert target.stat().st_size > 10_000


def test_columns_counts_ready_order_and_a_lease_countdown_that_moves(board: Board, tmp_path: Path) -> None:
    page = board.page
    page.goto(f"{board.url}/")
    with board.plane() as wp:
        _ctx, rows = wp.rows()
        ready = [row[0] for row in wp.ready()]
    for status in ("open", "in_progress", "blocked", "done", "cancelled"):
        expected = sum(1 for row in rows.values() if row[2] == status)
        assert page.inner_text(f"section[data-status={status}] .count") == str(expected), status
    card = page.locator(f"li.card[data-item='{board.items['schema']}']")
    assert card.locator(".holder").inner_text() == "bot"
    assert page.locator("aside.ready li a").all_inner_texts() == [rows[i][1] for i in ready]
    countdown = card.locator(".countdown")
    first = poll(lambda: countdown.inner_text() if countdown.inner_text().endswith("left") else None, what="countdown")
    poll(lambda: countdown.inner_text() != first, what="the countdown to move")
    assert page.inner_text("section.asks").count("Which CI runner") == 1  # addressed to alice
    screenshot(page, "board.png", tmp_path)


def test_a_message_posted_with_gw_msg_appears_without_a_reload(board: Board, tmp_path: Path) -> None:
    page = board.page
    item = board.items["schema"]
    page.goto(f"{board.url}/items/{item}")
    page.wait_for_selector("html[data-stream=open]", state="attached")
    page.evaluate("window.notReloaded = true")
    posted = subprocess.run(gw_cmd("msg", item, "posted from a terminal", "--as", "bob"), cwd=board.repo,
                            capture_output=True, text=True, timeout=60)
    assert posted.returncode == 0, posted.stderr
    page.wait_for_selector("li.message:has-text('posted from a terminal')", timeout=15_000)
    assert page.evaluate("window.notReloaded") is True
    screenshot(page, "item.png", tmp_path)


def test_a_move_before_the_page_listens_is_shown_when_its_stream_opens(board: Board) -> None:
    """The page is rendered, then the ref moves, then its event stream opens (held here until the move is
    made): the stream's first message names a commit the page was not rendered at, so the page re-renders.
    A page that waited for the next ``state`` message would show the old board until someone moved again."""
    page = board.page
    held: list[Any] = []

    def hold(route: Any) -> None:
        held.append(route)

    page.route("**/v1/events", hold)
    try:
        page.goto(f"{board.url}/")
        while not held:
            page.wait_for_timeout(20)  # lets Playwright deliver the held request
        rendered = page.get_attribute("meta[name=gw-commit]", "content")
        assert rendered == state_tip(board.repo)
        lead = board.lead  # a page that listens: it shows the move once the server's watcher has seen it
        lead.goto(f"{board.url}/")
        lead.wait_for_selector("html[data-stream=open]", state="attached")
        with board.plane("root") as wp:
            item = wp.do("new", title="Made before the page listened").result["item"]
        lead.wait_for_selector(f"li.card[data-item='{item}']")
        page.evaluate("window.notReloaded = true")
        held[0].continue_()  # its first message names the new commit; no state message follows
        page.wait_for_selector(f"li.card[data-item='{item}']")
        assert page.evaluate("window.notReloaded") is True
        assert page.get_attribute("meta[name=gw-commit]", "content") == rendered  # the head stays; the body moved
    finally:
        page.unroute("**/v1/events", hold)


def test_ticking_a_criterion_on_the_page_lands_on_the_state_ref(board: Board) -> None:
    page = board.page
    item = board.items["api"]  # nobody holds it: a person may tick it
    page.goto(f"{board.url}/items/{item}")
    page.click("ol.criteria li:nth-child(1) button.tick")

    def ticked() -> bool:
        with board.plane() as wp:
            return bool(wp.item(item).criteria[0].get("checked"))

    poll(ticked, what="the tick on the state ref")
    page.wait_for_selector("ol.criteria button.tick[aria-pressed=true]")


def test_a_decision_made_on_the_page_lands_on_the_state_ref(board: Board) -> None:
    page = board.page
    item = board.items["ci"]
    page.goto(f"{board.url}/items/{item}")
    form = page.locator("form.ask")
    form.locator("input[value='self-hosted']").check()
    form.locator("input[name=why]").fill("our runners have the GPUs")
    form.locator("button[type=submit]").click()

    def decided() -> list[dict[str, Any]]:
        with board.plane() as wp:
            return list(wp.item(item).decisions)

    decisions = poll(decided, what="the decision on the state ref")
    assert (decisions[0]["text"], decisions[0]["by"]) == ("self-hosted", "alice")
    with board.plane() as wp:
        assert next(wp.log(1))["command"]["op"] == "decide"
    page.wait_for_selector("ol.decisions li:has-text('self-hosted')")
    assert page.locator("form.ask").count() == 0


ATTACK = """<!doctype html><html><body><h1>another origin</h1>
<iframe name="sink1"></iframe><iframe name="sink2"></iframe><iframe name="sink3"></iframe>
<form id="json" method="post" action="BOARD/v1/commands" enctype="text/plain" target="sink1">
  <input name='{"op": "new", "title": "csrf-form", "x": "' value='"}'></form>
<form id="logout" method="post" action="BOARD/logout" target="sink2"></form>
<form id="login" method="post" action="BOARD/login" target="sink3">
  <input name="token" value="MALLORY"><input name="next" value="/"></form>
<script>
  var loaded = 0;
  document.querySelectorAll('iframe').forEach(function (f) {
    f.addEventListener('load', function () { loaded += 1; window.framesLoaded = loaded; });
  });
  var doc = JSON.stringify({op: 'new', title: 'csrf-fetch'});
  var tries = [
    // No Content-Type at all (a Blob without a type): a "simple" request the browser sends without asking.
    fetch('BOARD/v1/commands', {method: 'POST', mode: 'no-cors', credentials: 'include', body: new Blob([doc])}),
    fetch('BOARD/v1/commands', {method: 'POST', mode: 'no-cors', credentials: 'include',
                                headers: {'Content-Type': 'text/plain'}, body: doc}),
    // application/json needs a CORS preflight, which the server does not grant.
    fetch('BOARD/v1/commands', {method: 'POST', credentials: 'include',
                                headers: {'Content-Type': 'application/json'}, body: doc}),
  ];
  Promise.allSettled(tries).then(function () { window.fetchesDone = true; });
  document.getElementById('json').submit();
  document.getElementById('logout').submit();
  document.getElementById('login').submit();
</script></body></html>"""


def test_a_page_of_another_origin_can_neither_write_nor_sign_out_nor_sign_in(board: Board) -> None:
    """Another port of 127.0.0.1 is another origin but the same site: its page gets the board's
    SameSite=Strict cookie sent along. Its forms and fetches must fail and change nothing; the board's
    own forms still work afterwards."""
    import http.server
    import threading

    mallory = Tokens(Repository.discover(str(board.repo)).gitwork_dir()).add("mallory", "admin")[0]
    html = ATTACK.replace("BOARD", board.url).replace("MALLORY", mallory).encode()

    class Hostile(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 - the http.server API
            self.send_response(200)
            self.send_header("Content-Type", "text/html")
            self.send_header("Content-Length", str(len(html)))
            self.end_headers()
            self.wfile.write(html)

        def log_message(self, *args: Any) -> None:
            pass

    before = subprocess.run(["git", "rev-parse", "refs/gitwork/state"], cwd=board.repo, capture_output=True,
                            text=True, check=True).stdout.strip()
    hostile = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Hostile)
    thread = threading.Thread(target=hostile.serve_forever, daemon=True)
    thread.start()
    try:
        other = f"http://127.0.0.1:{hostile.server_address[1]}/"
        assert other.rsplit(":", 1)[0] == board.url.rsplit(":", 1)[0] and other != board.url + "/"
        attack = board.page  # the signed-in tab wanders off to the other origin: the board's cookie is there
        attack.goto(other)
        attack.wait_for_function("window.fetchesDone === true && window.framesLoaded >= 3", timeout=15_000)
    finally:
        hostile.shutdown()
        hostile.server_close()
    after = subprocess.run(["git", "rev-parse", "refs/gitwork/state"], cwd=board.repo, capture_output=True,
                           text=True, check=True).stdout.strip()
    assert after == before, "a page of another origin changed the state"
    page = board.page
    page.goto(f"{board.url}/items/{board.items['docs']}")
    assert page.inner_text("span.who") == "alice (person)"  # neither signed out nor signed in as mallory
    page.fill("section.post textarea", "posted from the board itself")
    page.click("section.post button[type=submit]")

    def posted() -> bool:
        with board.plane() as wp:
            return any(m["text"] == "posted from the board itself" and m["by"] == "alice"
                       for m in wp.thread(board.items["docs"], 0)[1])

    poll(posted, what="the board's own post on the state ref")


# --- steering, pictures, timelines, executions, search and paging ---------------------------------------


def state_tip(repo: Path) -> str:
    return subprocess.run(["git", "rev-parse", "refs/gitwork/state"], cwd=repo, capture_output=True, text=True,
                          check=True).stdout.strip()


def held(board: Board, title: str, holder: str = "bot", **fields: Any) -> str:
    with board.plane("root") as wp:
        item = wp.do("new", title=title, **fields).result["item"]
    with board.plane(holder) as wp:
        wp.do("claim", item=item, ttl="30m")
    return str(item)


def test_an_admin_revokes_and_hands_off_on_the_item_page_and_a_person_is_refused_with_77(board: Board) -> None:
    stuck, reassigned = held(board, "Stuck migration"), held(board, "Needs carol")
    before = state_tip(board.repo)
    page = board.page  # alice, a person: the forms are there, the server refuses them, the page says so
    page.goto(f"{board.url}/items/{stuck}")
    assert "admin role" in page.inner_text("section.steer .note")
    page.fill("form.steer-revoke input[name=reason]", "looks stuck")
    page.click("form.steer-revoke button[type=submit]")
    page.wait_for_selector("#flash.error")
    assert page.inner_text("#flash").startswith("forbidden (77): only an admin may revoke")
    assert state_tip(board.repo) == before

    lead = board.lead
    lead.goto(f"{board.url}/items/{stuck}")
    assert lead.locator("section.steer .note").count() == 0
    lead.fill("form.steer-revoke input[name=reason]", "stuck for an hour")
    lead.click("form.steer-revoke button[type=submit]")

    def ended(item: str, state: str) -> Any:
        with board.plane() as wp:
            lease = wp.lease(item)
            return lease if lease is not None and lease.state == state else None

    lease = poll(lambda: ended(stuck, "revoked"), what="the revoke on the state ref")
    assert (lease.ended_by, lease.reason) == ("lead", "stuck for an hour")
    with board.plane() as wp:
        assert {k: v for k, v in next(wp.log(1))["command"].items() if k != "id"} == {
            "op": "revoke", "item": stuck, "reason": "stuck for an hour", "as": "lead"}  # one document, as lead
    # The page re-renders from the event stream: the timeline shows bot's lease, revoked by lead, and why.
    lead.wait_for_selector("section.item-leases td.end:has-text('revoked by lead: stuck for an hour')")
    assert lead.inner_text("section.item-leases td.holder") == "bot"

    lead.goto(f"{board.url}/items/{reassigned}")
    lead.fill("form.steer-handoff input[name=to]", "carol")
    lead.fill("form.steer-handoff input[name=message]", "carol knows the schema")
    lead.click("form.steer-handoff button[type=submit]")
    lease = poll(lambda: ended(reassigned, "handed-off"), what="the hand-off on the state ref")
    assert lease.handoff == {"reason": "reassign", "to": "carol", "message": "carol knows the schema"}
    assert lease.ended_by == "lead"
    lead.wait_for_selector("li.message:has-text('carol knows the schema')")


@pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is not installed (apt-get install tmux)")
def test_the_executions_page_shows_a_live_terminal_and_an_admin_stops_the_execution(board: Board) -> None:
    with board.plane("root") as wp:
        item = wp.do("new", title="Run an agent").result["item"]
    lead = board.lead
    lead.goto(f"{board.url}/executions")  # open before the agent starts: its row and terminal come live
    lead.wait_for_selector("html[data-stream=open]", state="attached")
    started = subprocess.run(gw_cmd("run", item, "--json", "--as", "bot", "--", "sh", "-c", "echo hello-from-the-agent; cat"),
                             cwd=board.repo, capture_output=True, text=True, timeout=60)
    assert started.returncode == 0, started.stderr
    execution = json.loads(started.stdout)["execution"]
    row = lead.locator(f"tr.execution[data-execution='{execution}']")
    lead.wait_for_selector(f"tr.execution[data-execution='{execution}'][data-state=running]")
    screen = lead.locator(f"pre[data-capture*='{execution}']")
    poll(lambda: "hello-from-the-agent" in screen.inner_text(), what="the agent's first line")
    lead.evaluate("window.notReloaded = true")
    sent = subprocess.run(gw_cmd("send", execution, "typed-from-a-terminal", "--enter"), cwd=board.repo,
                          capture_output=True, text=True, timeout=60)
    assert sent.returncode == 0, sent.stderr
    poll(lambda: "typed-from-a-terminal" in screen.inner_text(), what="the terminal to refresh")
    assert lead.evaluate("window.notReloaded") is True

    page = board.page  # alice may not stop bot's execution
    page.goto(f"{board.url}/executions")
    before = state_tip(board.repo)
    mine = page.locator(f"tr.execution[data-execution='{execution}']")
    mine.locator("input[name=reason]").fill("mine now")
    mine.locator("button[type=submit]").click()
    page.wait_for_selector("#flash.error")
    assert page.inner_text("#flash").startswith("forbidden (77)")
    assert state_tip(board.repo) == before

    row.locator("input[name=reason]").fill("wrong branch")
    row.locator("button[type=submit]").click()

    def asked() -> Any:
        with board.plane() as wp:
            from gitwork.launch.run import find

            return (find(wp, execution) or {}).get("stop_requested")

    assert poll(asked, what="the stop request")["by"] == "lead"
    coordinated = subprocess.run(gw_cmd("coordinate", "--once", "--json"), cwd=board.repo, capture_output=True,
                                 text=True, timeout=60)
    assert coordinated.returncode == 0, coordinated.stderr
    actions = json.loads(coordinated.stdout)["actions"]
    assert [(a["execution"], a["action"]) for a in actions] == [(execution, "stopped")], actions
    lead.wait_for_selector(f"tr.execution[data-execution='{execution}'][data-state=stopped]")
    assert "stop asked by lead: wrong branch" in row.inner_text()


def test_search_filters_and_a_column_that_pages_past_200_cards(board: Board) -> None:
    with board.plane("root") as wp:
        wp.do("batch", ops=[{"op": "new", "title": f"Bulk task {n:03}", "labels": ["bulk"]} for n in range(230)])
        rows = [r for r in wp.rows()[1].values() if "bulk" in r[4]]
    page = board.page
    page.goto(f"{board.url}/")
    page.fill("form.search input[name=q]", "BULK task")  # any case, a title's words
    page.click("form.search button[type=submit]")
    page.wait_for_selector("section.column[data-status=open] li.more")
    open_column = "section.column[data-status=open]"
    assert page.inner_text(f"{open_column} .count") == "230"
    assert page.locator(f"{open_column} li.card").count() == 200
    page.click(f"{open_column} a.next")
    page.wait_for_selector("li.pager")
    assert page.locator("section.column").count() == 1  # one column, its second page
    assert page.locator(f"{open_column} li.card").count() == 30
    assert "page 2 of 2" in page.inner_text("li.pager")
    assert page.locator("li.card > a").first.inner_text().startswith("Bulk task")
    page.goto(f"{board.url}/?q={rows[7][0][:12]}")  # by id
    assert page.locator("li.card > a").all_inner_texts() == [rows[7][1]]
    page.goto(f"{board.url}/?label=docs")  # a label filter, from a card's label
    assert page.locator("li.card > a").all_inner_texts() == ["Write the docs"]
    page.goto(f"{board.url}/?q=no-such-thing-at-all")
    assert "No item matches" in page.inner_text(".empty")


def test_dependency_pictures_of_an_item_and_of_the_whole_board(board: Board) -> None:
    page = board.page
    schema, api = board.items["schema"], board.items["api"]
    page.goto(f"{board.url}/items/{api}")
    svg = page.locator("section.neighbourhood svg.graph")
    assert svg.locator(f"a.node.centre[data-item='{api}']").count() == 1
    assert svg.locator(f"polyline.edge[data-from='{schema}'][data-to='{api}']").count() == 1
    top = {item: float(svg.locator(f"a.node[data-item='{item}'] rect").get_attribute("y") or 0) for item in (schema, api)}
    assert top[schema] < top[api]  # what must be done first is drawn above what it unblocks
    svg.locator(f"a.node[data-item='{schema}']").click()  # each node links to its item
    page.wait_for_url(f"**/items/{schema}")
    page.goto(f"{board.url}/graph?label=docs")
    nodes = page.locator("svg.graph a.node")
    assert [nodes.nth(n).get_attribute("data-item") for n in range(nodes.count())] == [board.items["docs"]]
    page.goto(f"{board.url}/graph?status=done")
    assert board.items["old"] in [n.get_attribute("data-item") for n in page.locator("svg.graph a.node").all()]
    page.goto(f"{board.url}/graph")
    assert page.locator(f"svg.graph a.node[data-item='{board.items['old']}']").count() == 0  # open ones by default


def test_lease_timelines_per_item_and_per_agent(board: Board) -> None:
    item = held(board, "Timeline item", holder="tl-agent")
    with board.plane("tl-agent") as wp:
        wp.do("renew", item=item)
        wp.do("release", item=item)
    with board.plane("tl-other") as wp:
        wp.do("claim", item=item, ttl="30m")
    page = board.page
    page.goto(f"{board.url}/items/{item}")
    spans = page.locator("section.item-leases .span")
    assert [spans.nth(n).get_attribute("data-holder") for n in range(spans.count())] == ["tl-agent", "tl-other"]
    cells = page.locator("section.item-leases table tr").nth(1).locator("td").all_inner_texts()
    assert (cells[0], cells[4]) == ("tl-agent", "released")  # holder, how it ended
    page.goto(f"{board.url}/leases?holder=tl-agent")  # from the state ref's history: renewals counted too
    assert page.locator("table.leases tr").count() == 2  # a header and the one lease
    assert item[:10] in page.inner_text("table.leases")
    assert page.inner_text("table.leases td.renewals") == "1"
    page.goto(f"{board.url}/leases?limit=1")  # a page of one commit: tl-other's claim
    assert page.locator("table.leases td.holder").all_inner_texts() == ["tl-other"]
    page.click("a.older")
    page.wait_for_url("**before=*")
    assert "tl-agent" in page.locator("table.leases td.holder").all_inner_texts()


def test_the_screenshots_command_writes_every_page(board: Board, tmp_path: Path) -> None:
    """``python -m gitwork.serve.shots FOLDER`` (what regenerates docs/*.png): one real image per page,
    taken here in the module's browser (the command launches its own)."""
    from gitwork.serve import shots

    assert shots.main([str(tmp_path / "x"), "extra"]) == 2  # usage: one folder
    with pytest.MonkeyPatch.context() as env:
        env.delenv("GW_AGENT", raising=False)
        written = shots.shoot(tmp_path / "shots", browser=board.browser)
    assert [p.name for p in written] == [f"{name}.png" for name in shots.PAGES]
    for path in written:
        assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and path.stat().st_size > 10_000, path
