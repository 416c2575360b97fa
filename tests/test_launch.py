"""`gw run`: agents started under a lease, at most once, with real tmux and real processes (issue 12).

Every test has its own repository, so its own tmux server (the socket is derived from the
repository's git dir) and its own execution folders; the ``launched`` fixture kills whatever a test
started (the tmux server, the subprocess backend's process groups), pass or fail.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any, Iterator

import pytest

from conftest import end_executions, gw_cmd, let_post, make_repo, run_gw, tip
from conftest import poll as wait_until
from gitwork.store import Repository
from gitwork.workplane import Workplane

needs_tmux = pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is not installed (apt-get install tmux)")


def socket_of(repo: Path) -> str:
    from gitwork.launch.tmux import socket_path

    return socket_path(Repository.discover(str(repo)))


def tmux_sessions(repo: Path) -> list[str]:
    done = subprocess.run(["tmux", "-S", socket_of(repo), "list-sessions", "-F", "#{session_name}"],
                          capture_output=True, text=True)
    return done.stdout.split() if done.returncode == 0 else []


def live_panes(repo: Path) -> list[str]:
    done = subprocess.run(["tmux", "-S", socket_of(repo), "list-panes", "-a", "-F", "#{session_name} #{pane_dead}"],
                          capture_output=True, text=True)
    return [line.split()[0] for line in done.stdout.splitlines() if line.endswith(" 0")]


@pytest.fixture
def launched(repo: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """An initialised repository with one item, ``ITEM``, and its own tmux server (socket under tmp_path);
    afterwards every process a test started is ended."""
    monkeypatch.setenv("GW_TMUX_SOCKET", str(tmp_path / "tmux.sock"))
    with Workplane(str(repo), agent="setup") as plane:
        plane.do("init")
        item = plane.do("new", title="run me").result["item"]
    (repo / "ITEM").write_text(item)
    yield repo
    if shutil.which("tmux"):
        subprocess.run(["tmux", "-S", socket_of(repo), "kill-server"], capture_output=True)
    end_executions(repo)


def item_of(repo: Path) -> str:
    return (repo / "ITEM").read_text()


def gw_json(repo: Path, *args: str, **kwargs: Any) -> tuple[int, dict[str, Any]]:
    done = run_gw(repo, args[0], "--json", *args[1:], **kwargs)  # before any "--"
    return done.returncode, json.loads(done.stdout) if done.stdout.strip() else {"stderr": done.stderr}


def runs(repo: Path, *args: str) -> list[dict[str, Any]]:
    done = run_gw(repo, "runs", "--json", *args)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def poll(condition: Any, what: str, limit: float = 15.0) -> Any:
    """conftest's ``poll``; most checks here start a ``gw`` process, hence the longer interval."""
    return wait_until(condition, timeout=limit, interval=0.05, what=what)


# --- one run per item, whatever the race -----------------------------------------------------------


@needs_tmux
@pytest.mark.slow
def test_ten_concurrent_runs_start_one_agent_and_name_it_nine_times(launched: Path) -> None:
    item = item_of(launched)
    env = dict(os.environ)
    procs = [subprocess.Popen(gw_cmd("run", item, "--json", "--as", f"caller{n}", "--", "cat"), cwd=launched,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env) for n in range(10)]
    answers = []
    for proc in procs:
        out, err = proc.communicate(timeout=120)
        answers.append((proc.returncode, json.loads(out), err))
    started = [doc for code, doc, _ in answers if code == 0 and doc["existing"] is False]
    assert len(started) == 1, answers
    execution = started[0]["execution"]
    for code, doc, err in answers:
        assert code in (0, 75), (code, doc, err)
        named = doc["execution"] if code == 0 else doc["details"]["execution"]
        assert named == execution, (code, doc)
    assert tmux_sessions(launched) == [execution]
    assert [r["execution"] for r in runs(launched) if r["state"] == "running"] == [execution]
    assert len(runs(launched)) == 1  # the losers reserved nothing


@needs_tmux
def test_the_agent_gets_its_lease_in_its_environment_and_capture_shows_its_output(launched: Path) -> None:
    item = item_of(launched)
    code, doc = gw_json(launched, "run", item, "--as", "alice", "--id", "x-envcheck",
                        "--", "sh", "-c", 'echo "agent=$GW_AGENT item=$GW_ITEM fence=$GW_FENCE exec=$GW_EXECUTION"; cat')
    assert code == 0 and doc["execution"] == "x-envcheck" and doc["state"] == "running", doc
    expected = f"agent=alice item={item} fence={doc['fence']} exec=x-envcheck"
    text = poll(lambda: expected in (out := gw_json(launched, "capture", "x-envcheck")[1]["text"]) and out, "output")
    assert expected in text
    # What is typed into the terminal reaches the agent (cat echoes it back).
    assert run_gw(launched, "send", "x-envcheck", "ping-42", "--enter").returncode == 0
    poll(lambda: run_gw(launched, "capture", "x-envcheck", "--lines", "3").stdout.count("ping-42") >= 2, "echo")
    # A retry under the same id starts nothing: it reports the running execution.
    code, again = gw_json(launched, "run", item, "--as", "alice", "--id", "x-envcheck", "--", "cat")
    assert (code, again["existing"], again["execution"]) == (0, True, "x-envcheck")
    assert tmux_sessions(launched) == ["x-envcheck"]
    # Stop kills the session and records it.
    code, stopped = gw_json(launched, "stop", "x-envcheck", "--reason", "enough")
    assert code == 0 and stopped["state"] == "stopped" and stopped["reason"] == "enough"
    assert tmux_sessions(launched) == []


def test_extra_environment_reaches_the_agent_and_only_its_names_are_recorded(launched: Path) -> None:
    from gitwork.errors import Invalid
    from gitwork.launch.run import run as launch_run

    item = item_of(launched)
    with Workplane(str(launched), agent="alice") as plane:
        before = tip(launched)
        for env, words in (({"GW_FENCE": "1"}, "set by gw run itself"), ({"A B": "x"}, "bad environment variable"),
                           ({"TOKEN": "a\0b"}, "without NUL")):
            with pytest.raises(Invalid, match=words):
                launch_run(plane, item, ["cat"], backend_kind="subprocess", env=env)
        assert tip(launched) == before  # refused before anything was recorded
        doc = launch_run(plane, item, ["sh", "-c", 'echo "token=$SECRET_TOKEN fence=$GW_FENCE"; cat'],
                         backend_kind="subprocess", env={"SECRET_TOKEN": "hunter2-s3cr3t", "GW_OTHER": "o"})
    assert doc["env"] == ["GW_OTHER", "SECRET_TOKEN"] and doc["command"][0] == "sh", doc
    poll(lambda: f"token=hunter2-s3cr3t fence={doc['fence']}" in run_gw(launched, "capture", doc["execution"]).stdout,
         "the agent to print its environment")
    # The value is nowhere on the state ref: not in a file of any commit, not in a commit message.
    shown = subprocess.run(["git", "log", "-p", "--format=%B", "refs/gitwork/state"], cwd=launched,
                           capture_output=True, text=True, check=True).stdout
    assert "SECRET_TOKEN" in shown and "hunter2" not in shown


@pytest.mark.parametrize("backend", [pytest.param("tmux", marks=needs_tmux), "subprocess"])
def test_exit_codes_are_recorded(launched: Path, backend: str) -> None:
    item = item_of(launched)
    for number, code in enumerate((0, 3)):
        execution = f"x-exit{number}-{backend}"
        rc, doc = gw_json(launched, "run", item, "--backend", backend, "--id", execution, "--as", "alice",
                          "--", "sh", "-c", f"echo bye; exit {code}")
        assert rc == 0 and doc["existing"] is False, doc
        # A retry under the same id never starts it again: it settles the record with the backend.
        done = poll(lambda execution=execution: (d := gw_json(launched, "run", item, "--backend", backend, "--id", execution,
                                          "--as", "alice", "--", "true")[1])["state"] == "exited" and d, "the exit")
        assert (done["code"], done["execution"], done["existing"]) == (code, execution, True)
        captured = run_gw(launched, "capture", execution)
        assert "bye" in captured.stdout, (captured.stdout, captured.stderr)
    states = [(r["execution"], r["state"], r.get("code")) for r in runs(launched, "--item", item)]
    assert states == [(f"x-exit0-{backend}", "exited", 0), (f"x-exit1-{backend}", "exited", 3)]


@needs_tmux
def test_a_killed_tmux_server_is_detected_as_lost_and_the_next_run_gets_a_new_epoch(launched: Path) -> None:
    item = item_of(launched)
    code, first = gw_json(launched, "run", item, "--as", "alice", "--id", "x-first", "--", "cat")
    assert code == 0 and first["epoch"] == 1
    subprocess.run(["tmux", "-S", socket_of(launched), "kill-server"], check=True, capture_output=True)
    code, second = gw_json(launched, "run", item, "--as", "alice", "--id", "x-first", "--", "cat")
    assert code == 0 and second["existing"] is False and second["execution"] != "x-first", second
    assert second["epoch"] == 2 and second["fence"] > first["fence"]
    lost = [r for r in runs(launched) if r["execution"] == "x-first"][0]
    assert lost["state"] == "lost"
    # The lost agent's fence is dead: whatever it still tries under it is refused.
    refused = run_gw(launched, "renew", item, "--as", "alice", env={"GW_FENCE": str(first["fence"])})
    assert refused.returncode == 7, refused.stderr
    assert live_panes(launched) == [second["execution"]]


# --- kill -9 of gw run between its steps ---------------------------------------------------------


@needs_tmux
@pytest.mark.slow
@pytest.mark.parametrize("step", ["after-reserve", "after-claim", "after-launching", "after-start"])
def test_a_run_killed_between_steps_converges_to_one_agent(launched: Path, step: str) -> None:
    item = item_of(launched)
    crashed = run_gw(launched, "run", item, "--as", "alice", "--id", "x-crashy", "--", "cat",
                     env={"GW_CRASH_AT": step})
    assert crashed.returncode == -signal.SIGKILL, crashed.stderr
    assert len(live_panes(launched)) == (1 if step == "after-start" else 0)
    code, doc = gw_json(launched, "run", item, "--as", "alice", "--id", "x-crashy", "--", "cat")
    assert code == 0, doc
    assert live_panes(launched) == [doc["execution"]]
    running = [r for r in runs(launched) if r["state"] in ("reserved", "launching", "running")]
    assert [r["execution"] for r in running] == [doc["execution"]]
    if step == "after-start":  # the process the dead run started is the one: adopted, not started again
        assert (doc["execution"], doc["existing"]) == ("x-crashy", True)
    # And again: still the same one.
    code, again = gw_json(launched, "run", item, "--as", "alice", "--", "cat")
    assert (code, again["execution"], again["existing"]) == (0, doc["execution"], True)
    assert len(live_panes(launched)) == 1


# --- bad input: a clear error, nothing recorded ---------------------------------------------------


@pytest.mark.parametrize("args, words", [
    (["--backend", "screen", "--", "cat"], "unknown backend"),
    (["--"], "needs a command"),
    (["--backend", "subprocess", "--", "no-such-program-xyz"], "cannot start"),
    (["--backend", "subprocess", "--", "/nonexistent/agent"], "cannot start"),
    (["--backend", "subprocess", "--id", "bad.id", "--", "cat"], "bad execution id"),
])
def test_bad_input_is_refused_and_records_nothing(launched: Path, args: list[str], words: str) -> None:
    before = tip(launched)
    done = run_gw(launched, "run", item_of(launched), *args)
    assert done.returncode == 5, done.stderr
    assert words in done.stderr and len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert tip(launched) == before
    assert not (launched / ".git" / "gitwork" / "executions").exists()


def test_runs_refuses_an_unknown_state_and_coordinate_a_lease_shorter_than_two_passes(launched: Path) -> None:
    done = run_gw(launched, "runs", "--state", "sleeping")
    assert done.returncode == 5 and "unknown execution state" in done.stderr, done.stderr
    before = tip(launched)
    done = run_gw(launched, "coordinate", "--interval", "10s", "--ttl", "15s")
    assert done.returncode == 5 and "shorter than two intervals" in done.stderr, done.stderr
    assert tip(launched) == before
    assert run_gw(launched, "runs", "--state", "lost").returncode == 0


def test_without_tmux_the_tmux_backend_says_so_and_records_nothing(launched: Path, tmp_path: Path) -> None:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for tool in ("git", "sh", "cat"):
        (bin_dir / tool).symlink_to(shutil.which(tool) or f"/bin/{tool}")
    before = tip(launched)
    done = run_gw(launched, "run", item_of(launched), "--", "cat", env={"PATH": str(bin_dir)})
    assert done.returncode == 5 and "needs tmux" in done.stderr, done.stderr
    assert tip(launched) == before


def test_an_item_held_by_someone_else_is_not_run(launched: Path) -> None:
    item = item_of(launched)
    assert run_gw(launched, "claim", item, "--as", "bob").returncode == 0
    before = tip(launched)
    done = run_gw(launched, "run", item, "--as", "alice", "--backend", "subprocess", "--", "cat")
    assert done.returncode == 75 and "held by bob" in done.stderr, done.stderr
    assert tip(launched) == before and runs(launched) == []


def test_execution_records_are_not_for_faces(launched: Path) -> None:
    document = launched / "doc.json"
    document.write_text(json.dumps({"op": "exec-reserve", "item": item_of(launched), "execution": "x-forged",
                                    "command": ["cat"], "backend": "tmux", "host": "h"}))
    done = run_gw(launched, "apply", str(document))
    assert done.returncode == 5 and "record" in done.stderr, done.stderr


def test_subprocess_backend_stop_kills_the_whole_process_group(launched: Path) -> None:
    item = item_of(launched)
    code, doc = gw_json(launched, "run", item, "--backend", "subprocess", "--as", "alice", "--",
                        sys.executable, "-c", "import subprocess,sys; p=subprocess.Popen(['sleep','300']);"
                        "print(p.pid, flush=True); sys.stdin.read()")
    assert code == 0, doc
    text = poll(lambda: run_gw(launched, "capture", doc["execution"]).stdout.strip(), "the grandchild's pid")
    grandchild = int(text.split()[0])
    assert gw_json(launched, "stop", doc["execution"])[1]["state"] == "stopped"

    def gone() -> bool:
        try:
            with open(f"/proc/{grandchild}/stat") as stat:
                return stat.read().split(")")[1].split()[0] == "Z"
        except FileNotFoundError:
            return True

    poll(gone, "the grandchild to end", limit=5)


# --- gw coordinate -----------------------------------------------------------------------------------


def coordinate(repo: Path, args: tuple[str, ...] = (), **kwargs: Any) -> list[dict[str, Any]]:
    code, doc = gw_json(repo, "coordinate", "--once", *args, **kwargs)
    assert code == 0, doc
    return doc["actions"]


@pytest.mark.parametrize("backend", [pytest.param("tmux", marks=needs_tmux), "subprocess"])
def test_coordinator_kills_an_agent_whose_lease_was_revoked(launched: Path, backend: str) -> None:
    item = item_of(launched)
    code, doc = gw_json(launched, "run", item, "--backend", backend, "--as", "alice", "--", "cat")
    assert code == 0, doc
    assert [a["action"] for a in coordinate(launched)] == ["running"]
    assert run_gw(launched, "revoke", item, "--reason", "reassigning", "--as", "carol").returncode == 0
    actions = coordinate(launched)
    assert [(a["execution"], a["action"]) for a in actions] == [(doc["execution"], "stopped")], actions
    assert "revoked" in actions[0]["reason"]
    record = [r for r in runs(launched) if r["execution"] == doc["execution"]][0]
    assert record["state"] == "stopped"
    if backend == "tmux":
        assert tmux_sessions(launched) == []
    else:
        pid = int(record["handle"].partition("@")[0])
        from gitwork.launch.process import alive

        poll(lambda: not alive(pid, record["handle"].partition("@")[2]), "the agent to end", limit=5)
    # Every gw call the old agent still makes under its fence is refused.
    refused = run_gw(launched, "msg", item, "still here", "--as", "alice", env={"GW_FENCE": str(doc["fence"])})
    assert refused.returncode == 7, refused.stderr
    assert coordinate(launched) == []  # nothing live left


def test_coordinator_records_exits_and_renews_running_leases(launched: Path) -> None:
    item = item_of(launched)
    with Workplane(str(launched), agent="setup") as plane:
        other = plane.do("new", title="runs long").result["item"]
    code, short = gw_json(launched, "run", item, "--backend", "subprocess", "--as", "alice", "--",
                          "sh", "-c", "exit 3")
    assert code == 0, short
    code, long = gw_json(launched, "run", other, "--backend", "subprocess", "--as", "alice", "--ttl", "10m", "--",
                         "cat")
    assert code == 0, long
    poll(lambda: any(a["action"] == "exited" and a["code"] == 3 for a in coordinate(launched)), "the exit")
    before = json.loads(run_gw(launched, "show", other, "--json").stdout)["lease"]["expires_at"]
    # Six minutes later less than half of the ten-minute lease is left: the coordinator renews it.
    later = (dt_parse(before) - __import__("datetime").timedelta(minutes=4)).strftime("%Y-%m-%dT%H:%M:%SZ")
    actions = coordinate(launched, env={"GW_NOW": later})
    assert [(a["execution"], a["action"]) for a in actions] == [(long["execution"], "renewed")], actions
    after = json.loads(run_gw(launched, "show", other, "--json").stdout)["lease"]
    assert after["expires_at"] > before and after["fence"] == long["fence"]


def dt_parse(text: str) -> Any:
    import datetime

    return datetime.datetime.strptime(text, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=datetime.timezone.utc)


# --- the launch context ----------------------------------------------------------------------------


def test_the_agent_is_given_its_launch_context_and_gw_context_prints_the_same(launched: Path) -> None:
    item = item_of(launched)
    with Workplane(str(launched), agent="setup") as plane:
        plane.do("edit", item=item, add_criteria=["the schema is reviewed"])
    let_post(launched, "bob")  # a reviewer, who may post on any item (docs/leases.md, "Who may post")
    assert run_gw(launched, "msg", item, "start with the schema", "--as", "bob").returncode == 0
    code, doc = gw_json(launched, "run", item, "--backend", "subprocess", "--as", "alice", "--",
                        "sh", "-c", 'cat "$GW_CONTEXT"; cat')
    assert code == 0, doc
    folder = launched / ".git" / "gitwork" / "executions" / doc["execution"]
    seen = poll(lambda: "## How to" in (text := run_gw(launched, "capture", doc["execution"]).stdout) and text,
                "the agent to print its context")
    assert seen == (folder / "launch.md").read_text()
    assert json.loads((folder / "launch.json").read_text())["lease"]["fence"] == doc["fence"]
    for words in ("1. [ ] the schema is reviewed", "by bob", "start with the schema",
                  f"alice, epoch {doc['epoch']}, fence {doc['fence']}", f"gw renew {item}"):
        assert words in seen, words
    printed = run_gw(launched, "context", item).stdout
    assert [line for line in printed.splitlines() if not line.startswith(("Execution:", "gw 0"))] == \
        [line for line in seen.splitlines() if not line.startswith(("Execution:", "gw 0"))]
    # Never written into the work tree (a session commit would refuse an undeclared file).
    assert not list(launched.glob("launch.*"))


def test_the_tmux_socket_is_the_repositorys_own_and_short_enough(tmp_path: Path) -> None:
    import tempfile

    from gitwork.launch.tmux import SOCKET_MAX, socket_path

    # A repository whose own socket path fits: under a short folder, not the basetemp (whose depth
    # depends on where pytest puts it: /dev/shm/pytest-of-USER/pytest-N/popen-gwN/TEST/ is past the bound).
    with tempfile.TemporaryDirectory(prefix="gw-", dir="/tmp") as folder:
        short = Repository.discover(str(make_repo(Path(folder) / "r")))
        assert socket_path(short) == os.path.join(short.common_dir, "gitwork", "tmux", "sock")
    deep = Repository.discover(str(make_repo(tmp_path / ("d" * 90))))
    fallback = socket_path(deep)
    assert len(fallback.encode()) <= SOCKET_MAX and fallback.startswith("/tmp/gw-tmux-")
    assert fallback != socket_path(Repository.discover(str(make_repo(tmp_path / ("e" * 90)))))


@pytest.mark.parametrize("backend", [pytest.param("tmux", marks=needs_tmux), "subprocess"])
def test_a_command_that_cannot_start_is_recorded_failed_never_running(launched: Path, backend: str) -> None:
    agent = launched / "agent.sh"
    agent.write_text("#!/nonexistent/interpreter\necho never\n")
    agent.chmod(0o755)
    done = run_gw(launched, "run", item_of(launched), "--backend", backend, "--id", "x-badstart", "--",
                  str(agent))
    assert done.returncode == 5 and "cannot start" in done.stderr, done.stderr
    assert len(done.stderr.strip().splitlines()) == 1
    with Workplane(str(launched)) as plane:
        states = [e["state"] for e in plane.history(item_of(launched)) if e["type"] == "execution"]
    assert states == ["reserved", "launching", "failed"]
    # The item is free for a run that works.
    code, doc = gw_json(launched, "run", item_of(launched), "--backend", "subprocess", "--", "cat")
    assert code == 0 and doc["state"] == "running", doc


@needs_tmux
def test_a_reconcile_failure_streak_hands_the_item_off_with_that_reason(launched: Path, tmp_path: Path) -> None:
    item = item_of(launched)
    code, doc = gw_json(launched, "run", item, "--as", "alice", "--", "cat")
    assert code == 0, doc
    no_tmux = tmp_path / "no-tmux"
    no_tmux.mkdir()
    (no_tmux / "git").symlink_to(shutil.which("git") or "/usr/bin/git")
    broken = {"PATH": str(no_tmux)}  # the backend cannot be asked: every pass fails
    for streak in (1, 2):
        actions = coordinate(launched, env=broken, args=("--failures", "3"))
        assert [(a["action"], a["streak"]) for a in actions] == [("error", streak)], actions
    actions = coordinate(launched, env=broken, args=("--failures", "3"))
    assert [a["action"] for a in actions] == ["handed-off"], actions
    lease = json.loads(run_gw(launched, "show", item, "--json").stdout)["lease"]
    assert (lease["state"], lease["reason"], lease["fence"]) == ("handed-off", "reconcile-failure", doc["fence"])
    # With tmux back, the next pass stops the process: its lease is gone.
    assert [a["action"] for a in coordinate(launched)] == ["stopped"]
    assert live_panes(launched) == []


# --- attacks: a paused agent, concurrent retries of one id ---------------------------------------------


def pane_pid(repo: Path, execution: str) -> int:
    done = subprocess.run(["tmux", "-S", socket_of(repo), "list-panes", "-t", f"={execution}:", "-F", "#{pane_pid}"],
                          capture_output=True, text=True, check=True)
    return int(done.stdout.split()[0])


def process_gone(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rpartition(")")[2].split()[0] == "Z"
    except FileNotFoundError:
        return True


@pytest.mark.parametrize("backend", [pytest.param("tmux", marks=needs_tmux), "subprocess"])
def test_a_paused_agent_whose_lease_was_taken_over_is_stopped_by_the_coordinator(launched: Path, backend: str) -> None:
    item = item_of(launched)
    code, doc = gw_json(launched, "run", item, "--backend", backend, "--as", "alice", "--ttl", "1m", "--", "cat")
    assert code == 0, doc
    group = pane_pid(launched, doc["execution"]) if backend == "tmux" else int(doc["handle"].partition("@")[0])
    os.killpg(group, signal.SIGSTOP)  # the agent (and its wrapper) paused: it can neither exit nor be asked
    # Its lease expires meanwhile, and bob takes the item over.
    later = json.loads(run_gw(launched, "show", item, "--json").stdout)["lease"]["expires_at"]
    future = (dt_parse(later) + __import__("datetime").timedelta(minutes=5)).strftime("%Y-%m-%dT%H:%M:%SZ")
    taken = run_gw(launched, "takeover", item, "--as", "bob", env={"GW_NOW": future})
    assert taken.returncode == 0, taken.stderr
    actions = coordinate(launched)
    assert [(a["execution"], a["action"]) for a in actions] == [(doc["execution"], "stopped")], actions
    assert "replaced by bob" in actions[0]["reason"]
    poll(lambda: process_gone(group), "the paused agent to end", limit=10)
    refused = run_gw(launched, "msg", item, "resumed", "--as", "alice", env={"GW_FENCE": str(doc["fence"])})
    assert refused.returncode == 7, refused.stderr


@needs_tmux
@pytest.mark.slow
def test_concurrent_retries_of_one_execution_id_start_one_process(launched: Path) -> None:
    item = item_of(launched)
    procs = [subprocess.Popen(gw_cmd("run", item, "--json", "--as", "alice", "--id", "x-same", "--", "cat"),
                              cwd=launched, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for _ in range(5)]
    answers = [(proc.wait(timeout=120), json.loads(proc.communicate()[0])) for proc in procs]
    for code, doc in answers:
        assert code in (0, 75), answers
        assert (doc["execution"] if code == 0 else doc["details"]["execution"]) == "x-same", answers
    assert sum(1 for code, doc in answers if code == 0 and not doc["existing"]) == 1, answers
    assert live_panes(launched) == ["x-same"]
    assert [r["execution"] for r in runs(launched)] == ["x-same"]


# --- one build: nothing acts on an execution another gitwork build launched ----------------------------


def test_a_run_or_coordinator_of_another_build_refuses_to_act(launched: Path) -> None:
    from gitwork.launch.build import current
    from gitwork.launch.run import host

    item = item_of(launched)
    other = {**current(), "commit": "0" * 40}
    with Workplane(str(launched), agent="alice") as plane:  # what an older gw run recorded, then died
        fence = plane.do("claim", item=item).result["fence"]
        plane.record("exec-reserve", item=item, execution="x-oldbuild", command=["cat"], backend="subprocess",
                     host=host(), build=other, launcher={"host": host(), "pid": "999999999", "start": "1"})
        plane.record("exec-state", execution="x-oldbuild", to="launching", fence=fence)
    before = tip(launched)
    for args in (("--id", "x-oldbuild"), ()):
        done = run_gw(launched, "run", item, "--backend", "subprocess", "--as", "alice", *args, "--", "cat")
        assert done.returncode == 9 and "build-mismatch" in done.stderr, done.stderr
        assert "x-oldbuild" in done.stderr and "same build" in done.stderr
        assert len(done.stderr.strip().splitlines()) == 1
    assert tip(launched) == before
    actions = coordinate(launched)
    assert [(a["execution"], a["action"], a["error"]) for a in actions] == [("x-oldbuild", "refused", "build-mismatch")]
    assert [r["state"] for r in runs(launched)] == ["launching"]  # left as it was, for its own build to settle


def test_gw_run_refuses_to_launch_beside_a_coordinator_of_another_build(launched: Path) -> None:
    from gitwork.launch.build import current
    from gitwork.launch.paths import clone_id
    from gitwork.launch.run import host_name, me

    with Workplane(str(launched), agent="alice") as plane:  # a live coordinator (this test's process) of another build
        plane.record("coord-lease", host=host_name(), clone=clone_id(plane.repo), action="take", holder=me(), ttl=600,
                     build={**current(), "version": "0.0.1"})
    before = tip(launched)
    done = run_gw(launched, "run", item_of(launched), "--backend", "subprocess", "--", "cat")
    assert done.returncode == 9 and "coordinator" in done.stderr and "gw 0.0.1" in done.stderr, done.stderr
    assert tip(launched) == before and runs(launched) == []


# --- the coordinator is single per host --------------------------------------------------------------


def coordinator_record(repo: Path) -> dict[str, Any] | None:
    from gitwork.launch.paths import clone_id
    from gitwork.launch.run import host_name
    from gitwork.records.executions import load_coordinator

    with Workplane(str(repo)) as plane:
        return load_coordinator(plane.context(), host_name(), clone_id(plane.repo))


def start_coordinator(repo: Path, *args: str) -> subprocess.Popen[str]:
    proc = subprocess.Popen(gw_cmd("coordinate", "--interval", "1s", *args), cwd=repo, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    poll(lambda: (coordinator_record(repo) or {}).get("holder", {}).get("pid") == str(proc.pid), "the lease")
    return proc


@pytest.mark.slow
def test_one_coordinator_per_host_a_killed_one_is_replaced_a_paused_one_stops(launched: Path) -> None:
    first = start_coordinator(launched)
    try:
        for args in (("--once",), ("--interval", "1s")):
            second = run_gw(launched, "coordinate", *args)
            assert second.returncode == 75, second.stderr
            assert "a coordinator runs on" in second.stderr and f"pid {first.pid}" in second.stderr
            assert len(second.stderr.strip().splitlines()) == 1
        first.kill()  # kill -9: its lease is still live, but its process is gone from this host
        first.wait()
        assert run_gw(launched, "coordinate", "--once").returncode == 0
    finally:
        first.kill()
    paused = start_coordinator(launched, "--ttl", "2s")
    try:
        os.kill(paused.pid, signal.SIGSTOP)
        # While it is paused its lease binds (refused), until it expires: then another takes over.
        poll(lambda: run_gw(launched, "coordinate", "--once").returncode == 0, "the paused one's lease to expire")
        os.kill(paused.pid, signal.SIGCONT)
        assert paused.wait(timeout=30) == 7  # it learns before acting that it was taken over, and stops
        err = paused.stderr.read() if paused.stderr else ""
        assert "was taken over" in err and "stopping" in err, err
    finally:
        paused.kill()


@needs_tmux
# One state commit before the agent (issue 27): reserve, claim and `launching` land together, so a run
# killed after it left `launching` with nothing started, whichever of the three crash points (`failed`:
# nothing ran, no new epoch needed). A `reserved` record alone is an older gw's (test_launch_records.py).
@pytest.mark.parametrize("step, settled", [("after-reserve", "failed"), ("after-claim", "failed"),
                                           ("after-launching", "failed"), ("after-start", "running")])
def test_the_coordinator_settles_a_run_killed_between_steps(launched: Path, step: str, settled: str) -> None:
    crashed = run_gw(launched, "run", item_of(launched), "--as", "alice", "--id", "x-killed", "--", "cat",
                     env={"GW_CRASH_AT": step})
    assert crashed.returncode == -signal.SIGKILL, crashed.stderr
    coordinate(launched)
    assert [(r["execution"], r["state"]) for r in runs(launched)] == [("x-killed", settled)]
    assert live_panes(launched) == (["x-killed"] if settled == "running" else [])


@needs_tmux
def test_the_tmux_socket_is_a_setting_and_gw_attach_knows_it(launched: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("GW_TMUX_SOCKET")
    (launched / ".workplane").write_text("tmux_socket: agents.sock\n")
    socket = str(launched / "agents.sock")
    try:
        code, doc = gw_json(launched, "run", item_of(launched), "--as", "alice", "--id", "x-setting", "--", "cat")
        assert code == 0, doc
        listed = subprocess.run(["tmux", "-S", socket, "list-sessions", "-F", "#{session_name}"], capture_output=True,
                                text=True)
        assert listed.stdout.split() == ["x-setting"], listed.stderr
        assert gw_json(launched, "attach", "x-setting")[1]["argv"][:3] == ["tmux", "-S", socket]
        # The environment variable wins over the file.
        elsewhere = str(launched / "env.sock")
        argv = gw_json(launched, "attach", "x-setting", env={"GW_TMUX_SOCKET": elsewhere})[1]
        assert argv["argv"][:3] == ["tmux", "-S", elsewhere], argv
    finally:
        subprocess.run(["tmux", "-S", socket, "kill-server"], capture_output=True)


def test_gw_demo_run_shows_one_agent_started_and_the_other_shell_told_which(tmp_path: Path) -> None:
    done = subprocess.run(gw_cmd("demo", "run", "--json"), cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    [execution] = report["started"]
    assert sorted((r["exit"], r["existing"]) for r in report["race"].values()) in (
        [(0, False), (0, True)], [(0, False), (75, None)]), report["race"]
    assert {r["execution"] for r in report["race"].values()} == {execution}
    assert execution in report["captured"] and "agent shell-" in report["captured"]
    assert not os.path.exists(report["repository"])  # thrown away, with its tmux server
    bad = subprocess.run(gw_cmd("demo", "nope"), cwd=tmp_path, capture_output=True, text=True)
    assert bad.returncode == 2 and "unknown demo" in bad.stderr


@pytest.mark.slow
def test_a_running_coordinator_stops_an_agent_within_an_interval_of_its_lease_ending(launched: Path) -> None:
    items = [item_of(launched)]
    with Workplane(str(launched), agent="setup") as plane:
        items.append(plane.do("new", title="second").result["item"])
    started = []
    for item in items:
        code, doc = gw_json(launched, "run", item, "--backend", "subprocess", "--as", "alice", "--", "cat")
        assert code == 0, doc
        started.append(doc)
    loop = start_coordinator(launched, "--json")
    try:
        assert run_gw(launched, "revoke", items[0], "--reason", "reassigning", "--as", "carol").returncode == 0
        # stopped by the running coordinator (poll's bound only guards a hang: no timed assertion here)
        poll(lambda: {r["execution"]: r["state"] for r in runs(launched)}[started[0]["execution"]] == "stopped",
             "the coordinator to stop the revoked agent")
        assert loop.poll() is None  # still running, keeping the other one
        states = {r["execution"]: r["state"] for r in runs(launched)}
        assert states[started[1]["execution"]] == "running"
    finally:
        loop.terminate()
    assert loop.wait(timeout=30) == 143
    assert coordinator_record(launched)["state"] == "released"  # SIGTERM: it let its lease go


def test_a_session_branch_gone_is_a_reconcile_failure_and_a_streak_hands_off(launched: Path) -> None:
    item = item_of(launched)
    (launched / "README").write_text("x\n")
    subprocess.run(["git", "-C", str(launched), "add", "README"], check=True)
    subprocess.run(["git", "-C", str(launched), "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "base"],
                   check=True)
    code, doc = gw_json(launched, "run", item, "--backend", "subprocess", "--as", "alice", "--", "cat")
    assert code == 0, doc
    started = run_gw(launched, "session", "start", item, "--as", "alice", "--json")
    assert started.returncode == 0, started.stderr
    session = json.loads(started.stdout)
    assert [a["action"] for a in coordinate(launched, args=("--failures", "2"))] == ["running"]
    subprocess.run(["git", "-C", str(launched), "update-ref", "-d", f"refs/heads/{session['branch']}"], check=True)
    actions = coordinate(launched, args=("--failures", "2"))
    assert [(a["action"], a["streak"]) for a in actions] == [("error", 1)] and "lost its branch" in actions[0]["message"]
    actions = coordinate(launched, args=("--failures", "2"))
    assert [a["action"] for a in actions] == ["handed-off"], actions
    lease = json.loads(run_gw(launched, "show", item, "--json").stdout)["lease"]
    assert (lease["state"], lease["reason"]) == ("handed-off", "reconcile-failure")
    assert [r["state"] for r in runs(launched)] == ["stopped"]  # its lease gone, the agent was stopped at once


def test_an_agent_whose_item_was_cancelled_is_stopped(launched: Path) -> None:
    item = item_of(launched)
    code, doc = gw_json(launched, "run", item, "--backend", "subprocess", "--as", "alice", "--", "cat")
    assert code == 0, doc
    from conftest import replace_blob
    from gitwork.layout import ITEM_FILE, item_path

    path = item_path(item, ITEM_FILE)
    text = subprocess.run(["git", "-C", str(launched), "show", f"refs/gitwork/state:{path}"], capture_output=True,
                          text=True, check=True).stdout
    # Closed by a hand edit of the state (an item is never closed through gw while a lease on it is live).
    assert "status: in_progress" in text, text
    replace_blob(launched, path, text.replace("status: in_progress", "status: cancelled").encode())
    actions = coordinate(launched)
    assert [(a["action"], a.get("reason")) for a in actions] == [("stopped", "its item is cancelled")], actions


def test_gw_run_env_passes_values_to_the_agent_and_records_only_names(launched: Path) -> None:
    """``gw run --env NAME=VALUE``: the CLI face of the launcher's ``env`` (a malformed pair or a name gw run
    sets itself is exit 5 and nothing is recorded)."""
    item = item_of(launched)
    before = tip(launched)
    for bad in ("NOEQUALS", "=x", "GW_FENCE=1"):
        rc, doc = gw_json(launched, "run", item, "--backend", "subprocess", "--as", "alice", "--env", bad, "--", "cat")
        assert (rc, doc["error"]) == (5, "invalid"), (bad, doc)
    assert tip(launched) == before
    rc, doc = gw_json(launched, "run", item, "--backend", "subprocess", "--as", "alice", "--env", "API_KEY=k3y-v4lue",
                      "--env", "MODE=fast", "--", "sh", "-c", 'echo "key=$API_KEY mode=$MODE"; cat')
    assert rc == 0 and doc["env"] == ["API_KEY", "MODE"], doc
    poll(lambda: "key=k3y-v4lue mode=fast" in run_gw(launched, "capture", doc["execution"]).stdout,
         "the agent to print its environment")
    shown = subprocess.run(["git", "log", "-p", "--format=%B", "refs/gitwork/state"], cwd=launched,
                           capture_output=True, text=True, check=True).stdout
    assert "API_KEY" in shown and "k3y-v4lue" not in shown
