"""The board in a real browser: Playwright for Python driving Debian's chromium (no browser download).

A real server on a free port over a throwaway repository; changes come from the page (a tick, a
decision) and from outside it (``gw msg`` in a child process), and are checked on the state ref and
on the page without a reload. ``GW_SCREENSHOTS=1`` saves the board and an item page into docs/.
"""

from __future__ import annotations

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

from conftest import ROOT, gw_cmd, let_post, make_repo, scrubbed  # noqa: E402
from gitwork.serve.app import create_app  # noqa: E402
from gitwork.serve.threaded import Running  # noqa: E402
from gitwork.serve.tokens import Tokens  # noqa: E402
from gitwork.store import Repository  # noqa: E402
from gitwork.workplane import Workplane  # noqa: E402

SAVE = bool(os.environ.get("GW_SCREENSHOTS"))  # read at import: the fixtures scrub GW_* variables
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
    def __init__(self, repo: Path, url: str, page: Any, items: dict[str, str]) -> None:
        self.repo, self.url, self.page, self.items = repo, url, page, items

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
        token = Tokens(Repository.discover(str(repo)).gitwork_dir()).add("alice", "person")[0]
        with Running(create_app(str(repo))) as url, sync_api.sync_playwright() as playwright:
            browser = playwright.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
            page = browser.new_page(viewport={"width": 1400, "height": 900})
            page.goto(f"{url}/")
            page.fill("input[name=token]", token)  # the sign-in form sets the session cookie
            page.click("button[type=submit]")
            page.wait_for_selector("section.column")
            yield Board(repo, url, page, items)
            browser.close()


def screenshot(page: Any, name: str, tmp_path: Path) -> None:
    target = ROOT / "docs" / name if SAVE else tmp_path / name
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
