"""The execution ledger and budgets (issue 29, point 4; docs/launch.md, "The execution ledger", "Budgets").

Real repositories, real ``gw`` processes and a real launched agent (the subprocess backend: a shell
script that calls ``gw report`` and writes ``$GW_REPORT``), a real kill -9 of its wrapper, and an
arbiter with gitwork's server hook that a tampered client pushes to with plain ``git push``.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import stat
import subprocess
import sys
from pathlib import Path
from typing import Any, Iterator

import pytest

from conftest import end_executions, gw_here, make_repo, run_gw, tip
from conftest import poll as wait_until
from gitwork.errors import Illegal
from gitwork.launch.build import current
from gitwork.workplane import Workplane

INVALID, ILLEGAL, STALE, FORBIDDEN = 5, 6, 7, 77


@pytest.fixture
def plane(repo: Path) -> Iterator[Path]:
    """A repository with one item, ``ITEM``, owned by carol; every agent process a test started is killed."""
    with Workplane(str(repo), agent="carol") as wp:
        wp.do("init")
        (repo / "ITEM").write_text(wp.do("new", title="metered").result["item"])
    subprocess.run(["git", "config", "gitwork.agents", "bot"], cwd=repo, check=True)
    yield repo
    end_executions(repo)  # (the agents too: survivors finds them by their GW_CONTEXT)


def item_of(repo: Path) -> str:
    return (repo / "ITEM").read_text()


def agent(repo: Path, name: str, body: str) -> str:
    """An executable agent script in the repository; ``gw`` in it is this interpreter's gitwork."""
    path = repo / name
    path.write_text(f"#!/bin/sh\ngw() {{ {sys.executable} -m gitwork \"$@\"; }}\n{body}\n")
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return f"./{name}"


def gw_json(repo: Path, *args: str, env: dict[str, str] | None = None, here: bool = False) -> tuple[int, Any]:
    """``gw ARGS --json``: a real process, or (``here``) the same entry point in this process, for the
    reads and retries around the one process a test is about."""
    done = (gw_here if here else run_gw)(repo, args[0], "--json", *args[1:], env=env)
    return done.returncode, json.loads(done.stdout) if done.stdout.strip() else {"stderr": done.stderr}


def execution(repo: Path, execution_id: str) -> dict[str, Any]:
    with Workplane(str(repo)) as wp:
        from gitwork.launch.run import get_execution

        return get_execution(wp, execution_id)


def launched_by_hand(repo: Path, who: str = "bot", execution_id: str = "x-hand") -> dict[str, str]:
    """An execution recorded running under ``who``'s lease, with no process (the records only): fast, for
    the rules the engine enforces on reports. Its agent's environment."""
    item = item_of(repo)
    with Workplane(str(repo), agent=who) as wp:
        wp.record("exec-reserve", item=item, execution=execution_id, command=["cat"], backend="subprocess",
                  host="elsewhere", build=current())
        fence = wp.do("claim", item=item, ttl="1h").result["fence"]
        wp.record("exec-state", execution=execution_id, to="launching", fence=fence)
        wp.record("exec-state", execution=execution_id, to="running", handle="1@1")
    return {"GW_AGENT": who, "GW_EXECUTION": execution_id, "GW_FENCE": str(fence), "GW_ITEM": item}


# --- a launched agent reports; the totals --------------------------------------------------------------


def test_a_launched_agent_reports_and_its_report_json_adds_up_once(plane: Path) -> None:
    item = item_of(plane)
    script = agent(plane, "agent.sh", "\n".join([
        "gw report --tokens-in 1000 --tokens-out 200 --cost 0.25 --model m-1 --id r-first || exit 9",
        "gw report --tokens-in 1000 --tokens-out 200 --cost 0.25 --model m-1 --id r-first || exit 9  # a retry",
        "gw report --cost 0.1 || exit 9",
        'echo \'{"tokens_in": 5, "tokens_out": 6, "cost": "0.05", "model": "m-1"}\' > "$GW_REPORT"',
    ]))
    rc, started = gw_json(plane, "run", item, "--backend", "subprocess", "--id", "x-first", "--as", "bot", "--",
                          script)
    assert rc == 0, started
    assert started["attempt"] == 1

    def settled() -> dict[str, Any] | None:  # a retry under the same id settles the record with the backend
        found = gw_json(plane, "run", item, "--backend", "subprocess", "--id", "x-first", "--as", "bot", "--", script,
                        here=True)
        return found[1] if found[1].get("state") == "exited" else None

    ended = wait_until(settled, timeout=30, what="the agent's exit")
    assert ended["code"] == 0, ended
    record = execution(plane, "x-first")
    assert [r["id"] for r in record["reports"]][0] == "r-first" and record["reports"][-1]["id"] == "exit"
    assert record["usage"] == {"tokens_in": 1005, "tokens_out": 206, "cost": "0.4", "reports": 3}
    assert record["started_at"] <= record["ended_at"]

    # A second execution of the item is attempt 2 (derived from the state, not a counter of this clone).
    again = agent(plane, "again.sh", "gw report --tokens-in 1 --cost 1 || exit 9")
    rc, second = gw_json(plane, "run", item, "--backend", "subprocess", "--id", "x-second", "--as", "bot", "--", again,
                         here=True)
    assert rc == 0 and second["attempt"] == 2, second
    wait_until(lambda: execution(plane, "x-second").get("usage"), timeout=30, what="the second report")

    rc, by_item = gw_json(plane, "cost", here=True)
    assert rc == 0, by_item
    assert by_item["rows"] == [{"key": item, "executions": 2, "reports": 4, "tokens_in": 1006, "tokens_out": 206,
                                "cost": "1.4", "wall_seconds": by_item["rows"][0]["wall_seconds"]}]
    rc, by_agent = gw_json(plane, "cost", "--by", "agent", "--since", "1d", here=True)
    assert [(r["key"], r["cost"]) for r in by_agent["rows"]] == [("bot", "1.4")]
    rc, by_day = gw_json(plane, "cost", "--by", "day", "--item", item, "--agent", "nobody", here=True)
    assert by_day["rows"] == [] and by_day["total"]["cost"] == "0"
    assert "1.4 USD; 1006 tokens in, 206 out; 2 executions" in gw_here(plane, "show", item).stdout


def test_a_malformed_report_json_is_recorded_as_such_and_the_exit_still_is(plane: Path) -> None:
    item = item_of(plane)
    script = agent(plane, "bad.sh", "echo '{\"cost\": NaN, \"tokens_in\": 1e400}' > \"$GW_REPORT\"; exit 3")
    assert gw_json(plane, "run", item, "--backend", "subprocess", "--id", "x-bad", "--as", "bot", "--", script)[0] == 0
    wait_until(lambda: (plane / ".git" / "gitwork" / "executions" / "x-bad" / "code").exists(), timeout=30)
    rc, stopped = gw_json(plane, "stop", "x-bad", "--as", "bot", here=True)  # records the end as it was
    assert rc == 0 and stopped["state"] == "exited" and stopped["code"] == 3, stopped
    assert "usage" not in stopped and "report.json" in stopped["report_error"], stopped


def test_kill_9_of_the_wrapper_before_it_reads_report_json_counts_the_report_once(plane: Path) -> None:
    item = item_of(plane)
    script = agent(plane, "slow.sh", "\n".join([
        "gw report --tokens-in 10 --cost 0.5 --id r-during || exit 9",
        'echo \'{"tokens_out": 70, "cost": 0.25}\' > "$GW_REPORT"',
        "touch reported; sleep 60",
    ]))
    rc, started = gw_json(plane, "run", item, "--backend", "subprocess", "--id", "x-slow", "--as", "bot", "--", script)
    assert rc == 0, started
    wait_until(lambda: (plane / "reported").exists(), timeout=30, what="the agent's report.json")
    folder = plane / ".git" / "gitwork" / "executions" / "x-slow"
    os.kill(int(folder.joinpath("handle").read_text().partition("@")[0]), signal.SIGKILL)  # the wrapper alone
    assert not (folder / "report").exists()  # it never read the file
    for here in (False, True):  # the end is recorded once; a second pass (a retry) finds it ended, adds nothing
        rc, passed = gw_json(plane, "coordinate", "--once", "--as", "bot", here=here)
        assert rc == 0, passed
    # the same report id sent again after the end: answered as the first time, not counted twice
    rc, retried = gw_json(plane, "report", "--execution", "x-slow", "--tokens-in", "10", "--cost", "0.5",
                          "--id", "r-during", "--as", "bot", env={"GW_FENCE": str(started["fence"])}, here=True)
    assert rc == 0 and retried.get("duplicate") is True, retried
    record = execution(plane, "x-slow")
    assert record["state"] == "lost", record
    assert record["usage"] == {"tokens_in": 10, "tokens_out": 70, "cost": "0.75", "reports": 2}, record


# --- hostile input: exit 5 (or 7), one line, nothing written ------------------------------------------


BAD_NUMBERS = [
    ("--cost", "-1"), ("--cost", "NaN"), ("--cost", "1e400"), ("--cost", "inf"), ("--cost", "lots"), ("--cost", ""),
    ("--cost", "1000001"), ("--tokens-in", "-1"), ("--tokens-in", "1e400"), ("--tokens-in", "1.5"),
    ("--tokens-out", "ten"), ("--tokens-out", str(10**13)), ("--model", "a\nb"),
]


def test_bad_numbers_stale_fences_and_other_identities_are_refused_and_write_nothing(plane: Path) -> None:
    env = launched_by_hand(plane)
    before = tip(plane)
    for option, value in BAD_NUMBERS:
        done = gw_here(plane, "report", option, value, *(["--cost", "1"] if option == "--model" else []), env=env)
        assert done.returncode == INVALID, (option, value, done.stdout, done.stderr)
        assert len(done.stderr.strip().splitlines()) == 1 and "Traceback" not in done.stderr, done.stderr
    assert gw_here(plane, "report", env=env).returncode == INVALID  # nothing reported
    assert gw_here(plane, "report", "--cost", "1", env={**env, "GW_FENCE": "99"}).returncode == STALE
    assert gw_here(plane, "report", "--cost", "1", env={**env, "GW_AGENT": "mallory"}).returncode == STALE
    assert gw_here(plane, "report", "--cost", "1", env={**env, "GW_EXECUTION": "x-none"}).returncode == 3
    assert gw_here(plane, "report", "--cost", "1", env={**env, "GW_EXECUTION": "../x"}).returncode == INVALID
    for value in ("-1", "NaN", "1e400", "cheap"):
        assert gw_here(plane, "edit", item_of(plane), "--budget", value, "--as", "carol").returncode == INVALID
    for args in (["--by", "week"], ["--since", "0"], ["--since", "soon"], ["--item", "w-00"]):
        done = gw_here(plane, "cost", *args)
        assert done.returncode in (INVALID, 3) and len(done.stderr.strip().splitlines()) == 1, (args, done.stderr)
    assert tip(plane) == before
    assert gw_here(plane, "report", "--cost", "0.000001", env=env).returncode == 0


def test_a_report_under_a_lease_that_was_taken_over_is_stale(plane: Path) -> None:
    env = launched_by_hand(plane)
    assert gw_here(plane, "revoke", item_of(plane), "--reason", "gone", "--as", "carol").returncode == 0
    assert gw_here(plane, "claim", item_of(plane), "--as", "bot").returncode == 0  # a new epoch and fence
    before = tip(plane)
    done = gw_here(plane, "report", "--cost", "1", env=env)
    assert done.returncode == STALE and tip(plane) == before, done.stderr


def test_rest_and_mcp_refuse_hostile_reports(plane: Path) -> None:
    pytest.importorskip("fastapi")
    from fastapi.testclient import TestClient

    from gitwork.mcp import tools
    from gitwork.serve.app import create_app
    from gitwork.serve.tokens import Tokens
    from gitwork.store import Repository

    env = launched_by_hand(plane)
    token = Tokens(Repository.discover(str(plane)).gitwork_dir()).add("bot", "agent")[0]
    http = TestClient(create_app(str(plane)), base_url="http://gw", headers={"Authorization": f"Bearer {token}"})
    before = tip(plane)
    doc = {"op": "exec-report", "execution": env["GW_EXECUTION"], "fence": int(env["GW_FENCE"])}
    for bad in ({"cost": -1}, {"cost": "NaN"}, {"cost": "1e400"}, {"tokens_in": -5}, {"tokens_in": "many"},
                {"tokens_out": 1.5}, {}, {"cost": 1, "fence": 99}):
        answer = http.post("/v1/commands", content=json.dumps({**doc, **bad}).replace('"1e400"', "1e400"),
                           headers={"Content-Type": "application/json"})
        assert answer.status_code in (409, 422, 400), (bad, answer.status_code, answer.text)
        assert answer.json()["ok"] is False, answer.text
    raw = http.post("/v1/commands", content=b'{"op": "exec-report", "execution": "x-hand", "cost": 1e400}',
                    headers={"Content-Type": "application/json"})
    assert raw.status_code >= 400 and raw.json()["ok"] is False, raw.text
    assert tip(plane) == before
    assert http.post("/v1/commands", json={**doc, "cost": 0.5}).status_code == 200

    assert "exec-report" in tools.BY_NAME  # an agent reports over MCP too
    with Workplane(str(plane), agent="bot") as wp:
        session = tools.Session(wp)
        middle = tip(plane)
        for bad in ({"cost": float("nan")}, {"cost": float("inf")}, {"cost": -1}, {"tokens_in": "x"}, {"cost": True},
                    {"cost": "1e400"}, {"tokens_in": 10**13}):
            is_error, answer = session.call("exec-report", {"execution": "x-hand", **bad})
            assert is_error and answer["exit"] == "INVALID", (bad, answer)
        assert tip(plane) == middle
        is_error, answer = session.call("exec-report", {"execution": "x-hand", "cost": 0.25})
        assert not is_error, answer
    assert execution(plane, "x-hand")["usage"]["cost"] == "0.75"


# --- budgets -------------------------------------------------------------------------------------------


def test_a_spent_budget_refuses_launches_until_its_owner_raises_it(plane: Path) -> None:
    item = item_of(plane)
    env = launched_by_hand(plane)
    assert gw_here(plane, "edit", item, "--budget", "0.5", "--as", "carol").returncode == 0  # the owner, not holding
    assert gw_here(plane, "edit", item, "--budget", "9", env=env).returncode == FORBIDDEN  # the holder: an agent
    assert gw_here(plane, "report", "--cost", "0.5", env=env).returncode == 0
    assert gw_here(plane, "stop", "x-hand", "--as", "bot").returncode in (0, 5)  # another host's: left alone
    with Workplane(str(plane), agent="bot") as wp:
        wp.record("exec-state", execution="x-hand", to="lost", reason="gone")
    before = tip(plane)
    script = agent(plane, "noop.sh", "true")
    done = run_gw(plane, "run", item, "--backend", "subprocess", "--as", "bot", "--", script)
    assert done.returncode == ILLEGAL and "budget spent" in done.stderr, done.stderr
    assert tip(plane) == before  # nothing reserved, nothing claimed
    assert "(budget spent)" in gw_here(plane, "show", item).stdout
    board_says(plane, item, "0.5 USD of a 0.5 USD budget (budget spent)", "0.5 USD")
    assert gw_here(plane, "edit", item, "--budget", "0.75", "--as", "carol").returncode == 0
    rc, started = gw_json(plane, "run", item, "--backend", "subprocess", "--as", "bot", "--", script, here=True)
    assert rc == 0 and started["attempt"] == 2, started


def board_says(repo: Path, item: str, on_item: str, on_executions: str) -> None:
    """The board's item page and executions page (gw serve), as a person's browser gets them."""
    pytest.importorskip("fastapi")
    from fastapi.testclient import TestClient

    from gitwork.serve.app import create_app
    from gitwork.serve.tokens import Tokens
    from gitwork.store import Repository

    token = Tokens(Repository.discover(str(repo)).gitwork_dir()).add("carol", "person")[0]
    pages = TestClient(create_app(str(repo)), base_url="http://gw", cookies={"gw_token": token})
    page = pages.get(f"/items/{item}")
    assert page.status_code == 200 and on_item in page.text, page.text[:2000]
    page = pages.get("/executions")
    assert page.status_code == 200 and on_executions in page.text, page.text[:2000]


def test_the_workplane_default_budgets_an_item_and_a_session(plane: Path) -> None:
    item = item_of(plane)
    (plane / ".workplane").write_text("budget:\n  item: 0.3\n  session: 0.2\n")
    env = launched_by_hand(plane)
    assert gw_here(plane, "report", "--cost", "0.3", env=env).returncode == 0
    with Workplane(str(plane), agent="bot") as wp:
        wp.record("exec-state", execution="x-hand", to="lost", reason="gone")
        with pytest.raises(Illegal, match="budget spent"):
            wp.record("exec-reserve", item=item, execution="x-next", command=["cat"], backend="subprocess",
                      host="h", build=current())
    (plane / ".workplane").write_text("budget:\n  session: 0.2\n")
    with Workplane(str(plane), agent="bot") as wp:
        assert wp.record("exec-reserve", item=item, execution="x-next", command=["cat"], backend="subprocess",
                         host="h", build=current()).result["attempt"] == 2
        wp.record("exec-state", execution="x-next", to="failed", reason="not needed")

        def branch(execution_id: str, key: str) -> Any:
            return wp.record("exec-reserve", item=item, execution=execution_id, command=["cat"],
                             backend="subprocess", host="h", build=current(), session="m-20300101-one",
                             branch=key)

        branch("s-one", "step-1/a")
        wp.do("release", item=item)  # x-hand was lost under this epoch: a launch needs a new one
        fence = wp.do("claim", item=item, ttl="1h").result["fence"]
        wp.record("exec-state", execution="s-one", to="launching", fence=fence)
        wp.do("exec-report", execution="s-one", cost="0.2")
        with pytest.raises(Illegal, match="session m-20300101-one's executions cost 0.2 USD"):
            branch("s-two", "step-1/b")  # the session's other branch: its cap is spent
        assert wp.record("exec-reserve", item=item, execution="x-plain", command=["cat"], backend="subprocess",
                         host="h", build=current(), session="m-20300101-two", branch="step-1/a").result["attempt"] == 4
    (plane / ".workplane").write_text("budget: lots\n")
    assert gw_here(plane, "cost").returncode == INVALID


# --- the arbiter re-derives it: forgeries pushed with plain git ------------------------------------------


def test_the_arbiter_refuses_a_forged_report_and_a_launch_over_budget(tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    from conftest import git
    from gitwork.cli.main import main
    from gitwork.hooks_install import install_server
    from test_arbiter_derive import forge, push, refused, tree_with

    bare = make_repo(tmp_path / "arbiter.git", bare=True)
    install_server(str(bare))
    alice = make_repo(tmp_path / "alice")
    git(alice, "remote", "add", "origin", f"file://{bare}")
    assert main(["init", "--remote", "origin", "-C", str(alice), "--as", "alice"]) == 0
    with Workplane(str(alice), agent="alice") as wp:
        item = wp.do("new", title="metered").result["item"]
        wp.do("edit", item=item, budget="1")
        wp.record("exec-reserve", item=item, execution="x-one", command=["cat"], backend="subprocess", host="h",
                  build=current())
        fence = wp.do("claim", item=item, ttl="1h").result["fence"]
        wp.record("exec-state", execution="x-one", to="launching", fence=fence)
        wp.record("exec-state", execution="x-one", to="running", handle="1@1")
        wp.do("exec-report", execution="x-one", cost="0.4")
        wp.record("exec-state", execution="x-one", to="exited", code=0)
    assert main(["sync", "-C", str(alice)]) == 0
    before = tip(bare)
    assert before == tip(alice)

    # A report whose recorded total was edited in the tree: the replay of its command differs.
    with Workplane(str(alice), agent="alice") as wp:
        wp.do("exec-report", execution="x-one", cost="0.7")
    honest = tip(alice)
    assert honest is not None
    path = next(p for p in git(alice, "ls-tree", "-r", "--name-only", honest).splitlines() if p.endswith("x-one.yaml"))
    text = git(alice, "cat-file", "blob", f"{honest}:{path}")
    assert "cost: '1.1'" in text or 'cost: "1.1"' in text or "cost: 1.1" in text, text
    cheap = text.replace("'1.1'", "'0.1'").replace('"1.1"', '"0.1"')
    forged = forge(alice, honest, tree=tree_with(alice, honest, {path: (cheap + "\n").encode()}))
    refused(push(alice, f"{forged}:refs/gitwork/state"), bare, before, "tree differs", path)
    assert push(alice, "refs/gitwork/state:refs/gitwork/state").returncode == 0  # the honest report lands
    spent_tip = tip(bare)

    # A tampered client that skips the budget rule reserves a launch over budget, offline, and pushes it.
    import gitwork.ops.ledger as ledger_ops

    monkeypatch.setattr(ledger_ops, "refuse_over_budget", lambda *args: None)
    with Workplane(str(alice), agent="alice") as wp:
        wp.record("exec-reserve", item=item, execution="x-two", command=["cat"], backend="subprocess", host="h",
                  build=current(), offline=True)
    assert tip(alice) != spent_tip
    refused(push(alice, "refs/gitwork/state:refs/gitwork/state"), bare, spent_tip, "budget spent")


@pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is not installed (apt-get install tmux)")
def test_under_tmux_the_wrapper_reads_report_json_too(plane: Path, tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    socket = tmp_path / "tmux.sock"
    monkeypatch.setenv("GW_TMUX_SOCKET", str(socket))
    item = item_of(plane)
    script = agent(plane, "pane.sh", "gw report --tokens-in 3 --cost 0.01 || exit 9\n"
                                     "echo '{\"tokens_out\": 4, \"cost\": \"0.02\"}' > \"$GW_REPORT\"")
    try:
        rc, started = gw_json(plane, "run", item, "--id", "x-pane", "--as", "bot", "--", script)
        assert rc == 0 and started["backend"] == "tmux", started
        folder = plane / ".git" / "gitwork" / "executions" / "x-pane"
        wait_until(lambda: (folder / "code").exists(), timeout=30, what="the pane's exit")
        assert (folder / "report").exists()  # the wrapper read it at exit, in the pane too
        rc, ended = gw_json(plane, "stop", "x-pane", "--as", "bot", here=True)
        assert rc == 0 and ended["state"] == "exited", ended
        assert ended["usage"] == {"tokens_in": 3, "tokens_out": 4, "cost": "0.03", "reports": 2}, ended
    finally:
        subprocess.run(["tmux", "-S", str(socket), "kill-server"], capture_output=True)


@pytest.mark.parametrize("content, words", [
    (b"{not json", "not JSON"), (b"[1, 2]", "JSON object"), (b'{"cost": NaN}', "finite"),
    (b'{"cost": 1e400}', "finite"), (b'{"tokens_in": -3}', "from 0"), (b'{"tokens": 3}', "unknown field"),
    (b'{"model": "m"}', "reports nothing"), (b"\xff\xfe", "not JSON"), (b"{" * 100_000, "larger than"),
    (b'{"cost": "0.5", "tokens_in": true}', "whole number"),
])
def test_every_malformed_report_json_becomes_a_one_line_report_error(tmp_path: Path, content: bytes,
                                                                     words: str) -> None:
    from gitwork.launch.ledger import exit_report

    (tmp_path / "report.json").write_bytes(content)
    found = exit_report(str(tmp_path))
    assert list(found) == ["report_error"] and words in found["report_error"], found
    assert "\n" not in found["report_error"] and len(found["report_error"]) <= 200


def test_a_report_comes_only_with_an_end_and_is_checked_by_the_engine_too(plane: Path) -> None:
    launched_by_hand(plane)
    with Workplane(str(plane), agent="bot") as wp:
        from gitwork.errors import Invalid

        with pytest.raises(Invalid, match="with its execution's end"):
            wp.record("exec-state", execution="x-hand", to="launching", report={"cost": "1"})
        with pytest.raises(Invalid, match="finite"):  # a launcher that skipped the check is refused all the same
            wp.record("exec-state", execution="x-hand", to="exited", code=0, report={"cost": "NaN"})
        ended = wp.record("exec-state", execution="x-hand", to="exited", code=0, report={"cost": 2}).result
    assert ended["usage"]["cost"] == "2" and ended["reports"][0]["id"] == "exit"


def test_reports_made_in_two_clones_add_up_on_the_arbiter_and_each_counts_once(tmp_path: Path) -> None:
    """The holder's two machines each report on one execution, offline from each other; both sync (twice):
    the arbiter's record adds the two, once each, and a budget decided there sees the sum."""
    from conftest import git
    from gitwork.cli.main import main
    from gitwork.hooks_install import install_server

    bare = make_repo(tmp_path / "arbiter.git", bare=True)
    install_server(str(bare))
    one = make_repo(tmp_path / "one")
    git(one, "remote", "add", "origin", f"file://{bare}")
    assert main(["init", "--remote", "origin", "-C", str(one), "--as", "alice"]) == 0
    with Workplane(str(one), agent="alice") as wp:
        item = wp.do("new", title="metered").result["item"]
        wp.do("edit", item=item, budget="0.5")
        wp.record("exec-reserve", item=item, execution="x-both", command=["cat"], backend="subprocess", host="h",
                  build=current())
        fence = wp.do("claim", item=item, ttl="1h").result["fence"]
        wp.record("exec-state", execution="x-both", to="launching", fence=fence)
    assert main(["sync", "-C", str(one)]) == 0
    two = tmp_path / "two"
    subprocess.run(["git", "clone", "-q", f"file://{bare}", str(two)], check=True, capture_output=True)
    assert main(["init", "--remote", "origin", "-C", str(two), "--as", "alice"]) == 0
    assert main(["sync", "-C", str(two)]) == 0
    for clone, cost in ((one, "0.25"), (two, "0.3")):
        with Workplane(str(clone), agent="alice") as wp:
            wp.do("exec-report", execution="x-both", cost=cost, tokens_in=1)
    for clone in (one, two, one):  # one lands first, two replays onto it, one catches up
        assert main(["sync", "-C", str(clone)]) == 0
    assert tip(one) == tip(two) == tip(bare)
    record = execution(one, "x-both")
    assert record["usage"] == {"tokens_in": 2, "tokens_out": 0, "cost": "0.55", "reports": 2}, record
    with Workplane(str(two), agent="alice") as wp:
        wp.record("exec-state", execution="x-both", to="exited", code=0)
        with pytest.raises(Illegal, match="budget spent"):  # decided by the arbiter, on the sum
            wp.record("exec-reserve", item=item, execution="x-more", command=["cat"], backend="subprocess",
                      host="h", build=current())
