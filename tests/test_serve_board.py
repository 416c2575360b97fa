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

from conftest import ROOT, gw_cmd, make_repo, scrubbed  # noqa: E402

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
