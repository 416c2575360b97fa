"""The resident launcher, ``gw launcher`` (docs/launch.md, "The resident launcher"; issue 27 point 4).

Real processes throughout: a ``gw launcher`` per test, ``gw run`` started as a process (so its pid and
terminal session are its own), real signals. What holds:

- a ``gw run`` that finds the launcher hands the launch over: the execution's launcher is the resident
  process, and everything else is the caller's (its identity, default identity of its own session
  included, its environment, its working folder); refusals keep their code and their one line;
- without a live launcher (none, or a dead one's socket) ``gw run`` launches itself;
- the socket is the clone owner's alone (0600), and one launcher serves a clone (a second exits 75);
- kill -9 of the launcher at a named point of a launch, or at a random moment, leaves one agent at
  most, and the ``gw run`` that was waiting on it (a retry, in its own process) converges: one
  running execution under the item's current fence, or none and the item's lease as it was.
"""

from __future__ import annotations

import json
import os
import random
import signal
import stat
import subprocess
import time
from pathlib import Path
from typing import Any, Iterator

import pytest

from conftest import gw_cmd, live_processes
from test_launch import launched, needs_tmux, poll  # noqa: F401  (launched: a fixture)


def launcher_socket(repo: Path) -> Path:
    """Where the clone's launcher listens: under its git dir, or under /tmp when that path is too long for
    a Unix socket (a deep basetemp, as xdist's can be)."""
    from gitwork.launch.client import socket_path

    return Path(socket_path(str(repo / ".git")))


def start_launcher(repo: Path, env: dict[str, str] | None = None) -> subprocess.Popen[str]:
    proc = subprocess.Popen(gw_cmd("launcher"), cwd=repo, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            text=True, env={**os.environ, "GW_AGENT": "owner", **(env or {})})
    assert proc.stderr is not None
    line = proc.stderr.readline()  # once it listens
    assert "serves gw run" in line, line + proc.stderr.read()
    return proc


@pytest.fixture
def resident(launched: Path) -> Iterator[subprocess.Popen[str]]:
    proc = start_launcher(launched)
    yield proc
    if proc.poll() is None:
        proc.kill()
    proc.wait()


@pytest.fixture
def shell_resident(launched: Path) -> Iterator[subprocess.Popen[str]]:
    """A launcher with its default pane, the shell pane (what ``resident`` is, said explicitly)."""
    proc = start_launcher(launched, {"GW_LAUNCHER_SHELL_PANE": "1"})
    yield proc
    if proc.poll() is None:
        proc.kill()
    proc.wait()


@pytest.fixture
def wrapper_resident(launched: Path) -> Iterator[subprocess.Popen[str]]:
    """A launcher whose panes run the Python wrapper (``GW_LAUNCHER_SHELL_PANE=0``)."""
    proc = start_launcher(launched, {"GW_LAUNCHER_SHELL_PANE": "0"})
    yield proc
    if proc.poll() is None:
        proc.kill()
    proc.wait()


def test_the_opt_out_pane_is_the_python_wrapper_whose_code_is_kept(launched: Path,
                                                                  wrapper_resident: subprocess.Popen[str]) -> None:
    """With ``GW_LAUNCHER_SHELL_PANE=0`` the launcher's pane runs the Python wrapper (a ``python`` in
    the pane's command line), which writes the exit code itself."""
    done, _ = run(launched, item_of(launched), "--json", "--backend", "tmux", "--", "sh", "-c", "exit 3",
                  env={"GW_AGENT": "alice"})
    assert done.returncode == 0, done.stderr
    execution = json.loads(done.stdout)["execution"]
    folder = launched / ".git" / "gitwork" / "executions" / execution
    poll(lambda: (folder / "code").exists(), "the wrapper's code file")
    assert (folder / "code").read_text() == "3\n"
    assert (folder / "handle").read_text().partition("@")[0] != (folder / "child").read_text().strip()


def run(repo: Path, *args: str, env: dict[str, str] | None = None, new_session: bool = False
        ) -> tuple[subprocess.CompletedProcess[str], int]:
    """``gw run ARGS`` as a process of its own: (its outcome, its pid)."""
    proc = subprocess.Popen(gw_cmd("run", *args), cwd=repo, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env={**os.environ, **(env or {})}, start_new_session=new_session)
    out, err = proc.communicate(timeout=60)
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err), proc.pid


def record(repo: Path, execution: str) -> dict[str, Any]:
    from gitwork.workplane import Workplane

    with Workplane(str(repo), agent="reader") as wp:
        from gitwork.launch.run import find

        found = find(wp, execution)
        assert found is not None
        return found


def item_of(repo: Path) -> str:
    return (repo / "ITEM").read_text()


def _marked(marker: str) -> dict[int, tuple[list[bytes], int]]:
    """The live processes whose command line holds ``sleep MARKER`` as two arguments: the agent, and whatever
    is on its way to start one (a wrapper, a pane's shell, ``env``, tmux's server): pid -> (argv, parent)."""
    wanted = [b"sleep", marker.encode()]
    return {pid: (argv, parent) for pid, argv, parent in live_processes()
            if any(argv[i:i + 2] == wanted for i in range(len(argv)))}


def agents(marker: str) -> list[int]:
    """The live processes started as ``sleep MARKER`` (the agents of these tests)."""
    return sorted(pid for pid, (argv, _parent) in _marked(marker).items() if argv[:2] == [b"sleep", marker.encode()])


def one_agent_alone(marker: str) -> bool:
    """One agent, and no other process that could still start one: every other process naming ``sleep MARKER``
    is an ancestor of that agent (its wrapper, tmux's server). A second wrapper or pane left by a killed
    launcher is neither, until it is gone (then true) or has started a second agent (then never)."""
    marked = _marked(marker)
    found = [pid for pid, (argv, _parent) in marked.items() if argv[:2] == [b"sleep", marker.encode()]]
    if len(found) != 1:
        return False
    line, pid = set(), found[0]
    while pid > 1:
        line.add(pid)
        try:
            with open(f"/proc/{pid}/stat") as read:
                pid = int(read.read().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            break
    return set(marked) <= line


def test_gw_run_hands_the_launch_to_the_launcher_as_the_caller(launched: Path,
                                                                resident: subprocess.Popen[str]) -> None:
    item = item_of(launched)
    sock = launcher_socket(launched)
    assert stat.S_IMODE(os.stat(sock).st_mode) == 0o600
    done, _pid = run(launched, item, "--json", "--backend", "subprocess", "--env", "GW_T_EXTRA=x y",
                     "--", "sh", "-c", 'printf "%s|%s|%s|%s" "$GW_AGENT" "$GW_T_CALLER" "$GW_T_EXTRA" "$PWD" > seen; '
                                       'exec sleep 601',
                     env={"GW_AGENT": "alice", "GW_T_CALLER": "the caller's"})
    assert done.returncode == 0, done.stderr
    doc = json.loads(done.stdout)
    assert doc["state"] == "running" and doc["holder"] == "alice" and doc["by"] == "alice", doc
    assert record(launched, doc["execution"])["launcher"]["pid"] == str(resident.pid)  # launched by the resident
    poll(lambda: (launched / "seen").exists() and (launched / "seen").read_text().count("|") == 3, "the agent")
    assert (launched / "seen").read_text() == f"alice|the caller's|x y|{launched}"
    # A retry through the launcher answers the running one; its text is gw run's own.
    again, _ = run(launched, item, "--backend", "subprocess", "--", "sleep", "601", env={"GW_AGENT": "alice"})
    assert again.returncode == 0 and again.stdout.strip() == doc["execution"], again
    assert again.stderr.startswith(f"already running: execution {doc['execution']}"), again.stderr
    # An item someone else holds: refused with 75 and one line, as without a launcher.
    from gitwork.workplane import Workplane

    with Workplane(str(launched), agent="carol") as wp:
        held = wp.do("new", title="carol's").result["item"]
        wp.do("claim", item=held)
    other, _ = run(launched, held, "--backend", "subprocess", "--", "sleep", "601", env={"GW_AGENT": "bob"})
    assert other.returncode == 75 and len(other.stderr.strip().splitlines()) == 1, other
    bad, _ = run(launched, item, "--backend", "nope", "--", "sleep", "601", env={"GW_AGENT": "alice"})
    assert bad.returncode == 5 and "unknown backend" in bad.stderr, bad
    assert len(agents("601")) == 1
    assert resident.poll() is None


def test_the_default_identity_is_the_callers_terminal_session(launched: Path,
                                                               resident: subprocess.Popen[str]) -> None:
    env = {k: v for k, v in os.environ.items() if k != "GW_AGENT"}
    proc = subprocess.Popen(gw_cmd("run", item_of(launched), "--json", "--backend", "subprocess", "--", "sleep", "602"),
                            cwd=launched, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
                            start_new_session=True)  # its session id is its pid
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    doc = json.loads(out)
    assert doc["by"].endswith(f"/s{proc.pid}") and doc["holder"] == doc["by"], doc
    assert record(launched, doc["execution"])["launcher"]["pid"] == str(resident.pid)


def test_without_a_live_launcher_gw_run_launches_itself(launched: Path) -> None:
    proc = start_launcher(launched)
    proc.kill()  # kill -9: its socket stays behind, nobody listens
    proc.wait()
    assert launcher_socket(launched).exists()
    done, pid = run(launched, item_of(launched), "--json", "--backend", "subprocess", "--", "sleep", "603",
                    env={"GW_AGENT": "alice"})
    assert done.returncode == 0, done.stderr
    assert record(launched, json.loads(done.stdout)["execution"])["launcher"]["pid"] == str(pid)
    # The next launcher takes the clone over from the dead one's socket.
    again = start_launcher(launched)
    try:
        assert again.poll() is None
    finally:
        again.terminate()
        assert again.wait(timeout=10) == 0
    assert not launcher_socket(launched).exists()  # SIGTERM removes it


def test_one_launcher_per_clone(launched: Path, resident: subprocess.Popen[str]) -> None:
    second = subprocess.run(gw_cmd("launcher"), cwd=launched, capture_output=True, text=True, timeout=60)
    assert second.returncode == 75 and "runs already" in second.stderr, second
    assert resident.poll() is None
    status = subprocess.run(gw_cmd("launcher", "--status", "--json"), cwd=launched, capture_output=True, text=True,
                            timeout=60)
    assert status.returncode == 0 and json.loads(status.stdout)["pid"] == resident.pid, status
    resident.terminate()
    assert resident.wait(timeout=30) == 0
    status = subprocess.run(gw_cmd("launcher", "--status", "--json"), cwd=launched, capture_output=True, text=True,
                            timeout=60)
    assert status.returncode == 0 and json.loads(status.stdout)["running"] is False, status


@pytest.mark.parametrize("backend", ["subprocess", pytest.param("tmux", marks=needs_tmux)])
@pytest.mark.parametrize("point", ["after-reserve", "after-start"])
def test_kill_9_of_the_launcher_at_a_point_of_the_launch_leaves_one_agent(launched: Path, point: str,
                                                                          backend: str) -> None:
    """``GW_CRASH_AT`` in the caller's environment is the launcher's while it runs the caller's launch:
    it dies there with SIGKILL, the caller runs the launch itself (its retry: the crash point kills it
    too), and one more ``gw run`` converges on one agent under the current fence."""
    item = item_of(launched)
    # one marker per case: the agents of two cases running at once on two workers are not taken for two agents
    marker = {("after-reserve", "subprocess"): "6041", ("after-reserve", "tmux"): "6042",
              ("after-start", "subprocess"): "6043", ("after-start", "tmux"): "6044"}[point, backend]
    proc = start_launcher(launched)
    done, _ = run(launched, item, "--backend", backend, "--", "sleep", marker,
                  env={"GW_AGENT": "alice", "GW_CRASH_AT": point})
    assert proc.wait(timeout=30) == -signal.SIGKILL
    if point == "after-reserve":  # nothing started: the caller's own launch (its retry) dies at the same point
        assert done.returncode == -signal.SIGKILL, done
    else:  # the agent started: the caller's retry adopts it
        assert done.returncode == 0 and done.stderr.startswith("already running"), done
    final, _ = run(launched, item, "--json", "--backend", backend, "--", "sleep", marker, env={"GW_AGENT": "alice"})
    assert final.returncode == 0, final.stderr
    converged(launched, item, json.loads(final.stdout), marker)


def converged(repo: Path, item: str, doc: dict[str, Any], marker: str) -> None:
    """One running execution of ``item``, under its lease's current fence, and one agent process."""
    from gitwork.launch.run import runs as all_runs
    from gitwork.workplane import Workplane

    with Workplane(str(repo), agent="reader") as wp:
        rows = all_runs(wp, item)
        lease = wp.context().lease(item)
    live = [r for r in rows if r["state"] in ("reserved", "launching", "running")]
    assert [r["execution"] for r in live] == [doc["execution"]] and live[0]["state"] == "running", rows
    assert lease is not None and lease.state == "active" and live[0]["fence"] == lease.fence, (live, lease)
    # No wait for "long enough": until nothing but the agent and its ancestors names its command, whatever a killed
    # launcher left on its way (gw run returns once its agent started: launch/process.py, wait_started).
    poll(lambda: one_agent_alone(marker), f"one agent `sleep {marker}` and nothing else that could start one")
    assert len(agents(marker)) == 1, agents(marker)


@pytest.mark.slow
def test_kill_9_of_the_launcher_at_random_moments_never_starts_two_agents(launched: Path) -> None:
    """The launcher killed at a random moment of a launch (the caller waiting on it, then launching
    itself as a retry): each time one running execution under the current fence, or none and the
    item's lease as it was, and never two agents."""
    from gitwork.workplane import Workplane

    rng = random.Random(20261202)
    with Workplane(str(launched), agent="setup") as wp:
        items = [wp.do("new", title=f"random {n}").result["item"] for n in range(8)]
    for n, item in enumerate(items):
        marker = str(700 + n)
        proc = start_launcher(launched)
        caller = subprocess.Popen(gw_cmd("run", item, "--json", "--backend", "subprocess", "--", "sleep", marker),
                                  cwd=launched, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                  env={**os.environ, "GW_AGENT": "alice"})
        time.sleep(rng.uniform(0.0, 0.08))
        proc.kill()
        proc.wait()
        out, err = caller.communicate(timeout=60)
        assert caller.returncode == 0, err  # answered by the launcher, or by its own launch (the retry)
        converged(launched, item, json.loads(out), marker)


# --- the launcher's tmux pane: the agent started by /bin/sh as its child, no Python before it (tmux.PANE) ---


def pane_command(repo: Path, execution: str) -> str:
    """The command tmux started the execution's pane with (kept while the pane is, dead or alive)."""
    from test_launch import socket_of

    done = subprocess.run(["tmux", "-S", socket_of(repo), "list-panes", "-t", f"={execution}:", "-F",
                           "#{pane_start_command}"], capture_output=True, text=True, timeout=30)
    assert done.returncode == 0, done.stderr
    return done.stdout


def pane_dead(repo: Path, execution: str) -> bool:
    from test_launch import socket_of

    done = subprocess.run(["tmux", "-S", socket_of(repo), "list-panes", "-t", f"={execution}:", "-F", "#{pane_dead}"],
                          capture_output=True, text=True, timeout=30)
    return done.returncode == 0 and done.stdout.strip() == "1"


def new_item(repo: Path, title: str) -> str:
    from gitwork.workplane import Workplane

    with Workplane(str(repo), agent="setup") as wp:
        return str(wp.do("new", title=title).result["item"])


@needs_tmux
def test_the_launchers_pane_starts_the_agent_through_sh_with_every_guarantee(launched: Path,
                                                                             shell_resident: subprocess.Popen[str]) -> None:
    """Its exact environment (quotes, newlines, ``$`` kept as text), its handle before it runs, the
    env file emptied and removed, the agent a child of the pane's shell in its process group, the exit
    code written by the shell as the wrapper writes it, and its ``report.json`` carried by the end; a
    command that cannot be executed is ``failed``, never running."""
    script = launched / "agent.sh"
    script.write_text("#!/bin/sh\nprintf '%s|%s' \"$GW_T_Q\" \"$GW_AGENT\" > seen\n"
                      "echo '{\"tokens_out\": 4, \"cost\": \"0.02\"}' > \"$GW_REPORT\"\nexit 3\n")
    script.chmod(0o755)
    done, _ = run(launched, item_of(launched), "--json", "--env", "GW_T_Q=it's $HOME\nand `more`", "--", str(script),
                  env={"GW_AGENT": "alice"})
    assert done.returncode == 0, done.stderr
    doc = json.loads(done.stdout)
    folder = launched / ".git" / "gitwork" / "executions" / doc["execution"]
    assert record(launched, doc["execution"])["launcher"]["pid"] == str(shell_resident.pid)
    poll(lambda: (folder / "code").exists(), "the shell's code file")
    assert (launched / "seen").read_text() == "it's $HOME\nand `more`|alice"
    assert (folder / "code").read_text() == "3\n"  # the wrapper's form: whoever reads ends is unchanged
    assert (folder / "handle").read_text().partition("@")[0] != (folder / "child").read_text().strip()
    assert pane_command(launched, doc["execution"]).startswith("/bin/sh -c ")  # no Python in the pane
    assert not list(folder.glob("env.*")) and not list(folder.glob("*.t"))
    ended, _ = run(launched, item_of(launched), "--json", "--", str(script), env={"GW_AGENT": "alice"})
    rows = [r for r in all_runs(launched) if r["execution"] == doc["execution"]]
    assert rows[0]["state"] == "exited" and rows[0]["code"] == 3, rows
    assert rows[0]["usage"]["tokens_out"] == 4 and rows[0]["usage"]["cost"] == "0.02", rows
    assert ended.returncode == 0, ended.stderr
    # A script whose #! interpreter does not exist: failed (exit 5), never running.
    other = new_item(launched, "bad")
    bad = launched / "bad.sh"
    bad.write_text("#!/no/such/interpreter\necho never\n")
    bad.chmod(0o755)
    refused, _ = run(launched, other, "--", str(bad), env={"GW_AGENT": "alice"})
    assert refused.returncode == 5 and "cannot start" in refused.stderr, refused
    rows = [r for r in all_runs(launched) if r["item"] == other]
    assert [r["state"] for r in rows] == ["failed"] and "started_at" not in rows[0], rows


@needs_tmux
@pytest.mark.parametrize(("agent", "code"), [("exit 0", 0), ("exit 3", 3), ("kill -KILL $$", 137),
                                             ("kill -TERM $$", 143)])
def test_the_shell_pane_keeps_the_code_of_a_quick_exit(launched: Path, shell_resident: subprocess.Popen[str],
                                                       agent: str, code: int) -> None:
    """An agent that exits at once (the case tmux 3.3a sometimes reports without a status): its code,
    128+N for a signal, is written by the pane's shell and recorded with the end, every time."""
    for n in range(3):
        done, _ = run(launched, new_item(launched, f"quick {n}"), "--json", "--", "sh", "-c", agent,
                      env={"GW_AGENT": "alice"})
        assert done.returncode == 0, done.stderr
        execution = json.loads(done.stdout)["execution"]
        folder = launched / ".git" / "gitwork" / "executions" / execution
        poll(lambda: (folder / "code").exists(), "the shell's code file")  # noqa: B023
        assert (folder / "code").read_text() == f"{code}\n"
        from gitwork.workplane import Workplane

        with Workplane(str(launched), agent="alice") as wp:
            from gitwork.launch.run import stop

            ended = stop(wp, execution)
        assert ended["state"] == "exited" and ended["code"] == code, ended


def agent_status(pid: int) -> dict[str, str]:
    with open(f"/proc/{pid}/status") as read:
        return dict(line.split(":\t", 1) for line in read.read().splitlines() if ":\t" in line)


@needs_tmux
def test_the_shell_pane_hands_signals_and_the_terminal_to_the_agent(launched: Path,
                                                                    shell_resident: subprocess.Popen[str]) -> None:
    """The agent reads the pane's terminal and hears SIGINT and SIGQUIT (a shell's background command
    would ignore them); TERM sent to the pane's shell alone, and tmux's kill-session (a hangup of the
    shell alone), reach the agent, and the shell records its code (128+N)."""
    for n, (how, code) in enumerate((("term", 143), ("hup", 129))):
        marker = str(620 + n)
        done, _ = run(launched, new_item(launched, how), "--json", "--", "sleep", marker, env={"GW_AGENT": "alice"})
        assert done.returncode == 0, done.stderr
        execution = json.loads(done.stdout)["execution"]
        folder = launched / ".git" / "gitwork" / "executions" / execution
        child = int((folder / "child").read_text())
        shell = int((folder / "handle").read_text().partition("@")[0])
        assert agents(marker) == [child] and os.getpgid(child) == shell
        status = agent_status(child)
        assert int(status["SigIgn"], 16) & ((1 << (signal.SIGINT - 1)) | (1 << (signal.SIGQUIT - 1))) == 0, status
        assert os.readlink(f"/proc/{child}/fd/0").startswith("/dev/pts/")
        if how == "term":
            os.kill(shell, signal.SIGTERM)
        else:
            from test_launch import socket_of

            subprocess.run(["tmux", "-S", socket_of(launched), "kill-session", "-t", f"={execution}"], check=True,
                           timeout=30)
        poll(lambda: (folder / "code").exists(), "the shell's code file")  # noqa: B023
        assert (folder / "code").read_text() == f"{code}\n"
        assert agents(marker) == []


@needs_tmux
def test_hostile_words_reach_the_agent_as_they_are(launched: Path, shell_resident: subprocess.Popen[str]) -> None:
    """Quotes, ``$(...)``, backquotes, ``;`` and ``*`` in the agent's name and arguments: never read by
    the pane's shell, passed as they are; a newline or bytes that are no UTF-8 are refused (5) before
    anything is recorded (a recorded command is one-line text), so nothing runs. (A newline in the
    agent's environment reaches it: the test above.)"""
    odd = launched / "it's $(touch PWNED) `x`;a *"
    odd.write_text("#!/bin/sh\nfor a in \"$0\" \"$@\"; do printf '%s\\0' \"$a\"; done > \"$OUT\"\n")
    odd.chmod(0o755)
    out = launched / "argv.out"

    def gw_run(item: str, words: list[bytes]) -> subprocess.CompletedProcess[bytes]:
        argv = [*map(os.fsencode, gw_cmd("run", item, "--json", "--env", f"OUT={out}", "--")), os.fsencode(str(odd))]
        return subprocess.run([*argv, *words], cwd=launched, capture_output=True, timeout=60,
                              env={**os.environ, "GW_AGENT": "alice"})

    words = [b"'\"$(touch PWNED)\"'", b"*", b"$HOME `id` ${x:-y}", b"-- --x", b"\\", b"a  b"]
    done = gw_run(item_of(launched), words)
    assert done.returncode == 0, done.stderr
    folder = launched / ".git" / "gitwork" / "executions" / json.loads(done.stdout)["execution"]
    poll(lambda: (folder / "code").exists(), "the agent's end")
    assert (folder / "code").read_text() == "0\n"
    assert out.read_bytes().split(b"\0")[:-1] == [os.fsencode(str(odd)), *words]
    other = new_item(launched, "not utf-8")
    for bad in (b"\xff\xfe-not-utf8", b"a\nb"):
        refused = gw_run(other, [bad])
        assert refused.returncode == 5 and refused.stderr.count(b"\n") == 1, refused
    assert [r for r in all_runs(launched) if r["item"] == other] == []
    assert not list(launched.glob("**/PWNED"))


@needs_tmux
def test_an_environment_the_shell_cannot_hold_goes_through_the_python_wrapper(
        launched: Path, shell_resident: subprocess.Popen[str]) -> None:
    """A name that is no shell name (bash's exported functions) would be lost by ``sh``: that launch's
    pane runs the Python wrapper, which writes the exit code itself."""
    done, _ = run(launched, item_of(launched), "--json", "--", "sh", "-c", "exit 4",
                  env={"GW_AGENT": "alice", "BASH_FUNC_gwt%%": "() {  echo hi\n}"})
    assert done.returncode == 0, done.stderr
    folder = launched / ".git" / "gitwork" / "executions" / json.loads(done.stdout)["execution"]
    poll(lambda: (folder / "code").exists(), "the wrapper's exit code")
    assert (folder / "code").read_text() == "4\n"


def all_runs(repo: Path) -> list[dict[str, Any]]:
    from gitwork.launch.run import runs as all_
    from gitwork.workplane import Workplane

    with Workplane(str(repo), agent="reader") as wp:
        return all_(wp)


def test_a_launcher_of_other_code_hands_the_launch_back(launched: Path) -> None:
    """A request from another installation, or to a launcher whose files changed since it loaded them,
    is answered "launch yourself" (nothing run); the changed one stops after answering."""
    import socket

    from gitwork.launch.client import FALLBACK, common_dir, package, request
    from gitwork.launch.resident import Launcher

    common = common_dir(str(launched))
    assert common is not None

    def never(args: list[str]) -> int:
        raise AssertionError(f"ran {args}")

    for change in ("package", "code"):
        launcher = Launcher(common, never)
        body = request(["run", item_of(launched), "--", "true"], str(launched), common)
        if change == "package":
            body = body.replace(b"\0" + os.fsencode(package()) + b"\0", b"\0/elsewhere/gitwork\0")
            body = b"%d\n" % len(body.partition(b"\n")[2]) + body.partition(b"\n")[2]
        else:
            launcher.code = [("/a/file/that/changed.py", 0, 0)]
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        with ours, theirs:
            ours.sendall(body)
            launcher.handle(theirs, socket)
            assert ours.recv(100) == b"%d\x000\x000\x00" % FALLBACK
        assert launcher.stopping is (change == "code")


@needs_tmux
def test_the_launchers_tmux_check_is_its_new_session(launched: Path, resident: subprocess.Popen[str]) -> None:
    """The launcher asks tmux once a socket; afterwards ``new-session`` is the check: a caller whose
    tmux cannot be run (not on its PATH) gets exit 5 and one line, the execution is recorded ``failed``
    (nothing started), and the item is free for the next launch."""
    first, _ = run(launched, item_of(launched), "--json", "--", "sleep", "631", env={"GW_AGENT": "alice"})
    assert first.returncode == 0, first.stderr
    other = new_item(launched, "no tmux")
    refused, _ = run(launched, other, "--", "/bin/sleep", "632", env={"GW_AGENT": "alice", "PATH": "/nonexistent"})
    assert refused.returncode == 5 and refused.stderr.count("\n") == 1 and "needs tmux" in refused.stderr, refused
    rows = [r for r in all_runs(launched) if r["item"] == other]
    assert [r["state"] for r in rows] == ["failed"] and "started_at" not in rows[0], rows
    assert agents("632") == []
    again, _ = run(launched, other, "--json", "--", "sleep", "633", env={"GW_AGENT": "alice"})
    assert again.returncode == 0, again.stderr


@needs_tmux
def test_kill_9_of_the_pane_shell_at_random_moments_never_leaves_an_agent_behind_a_lost_record(
        launched: Path, shell_resident: subprocess.Popen[str]) -> None:
    """The pane's shell killed alone (SIGKILL, no code written) at a random moment of the agent's
    start or run: its agent may run on, orphaned. The end is never recorded as an exit while it
    runs: the next look (a ``gw run`` of the item) kills what runs of it and records it lost, and
    starts one agent, under a new epoch."""
    rng = random.Random(20261202)
    folders = launched / ".git" / "gitwork" / "executions"
    for n in range(6):
        item, marker = new_item(launched, f"shell killed {n}"), f"{640 + n}.{os.getpid()}"  # (this test's alone)
        before = {p.name for p in folders.glob("*")} if folders.exists() else set()
        caller = subprocess.Popen(gw_cmd("run", item, "--json", "--", "sleep", marker), cwd=launched,
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                  env={**os.environ, "GW_AGENT": "alice"})
        deadline = time.monotonic() + rng.uniform(0.0, 0.3)
        handle: Path | None = None
        while time.monotonic() < deadline or handle is None:
            new = [p / "handle" for p in folders.glob("*") if p.name not in before]
            handle = next((h for h in new if h.exists() and h.read_text().strip()), None)
            assert handle is not None or caller.poll() is None, caller.communicate()
            time.sleep(0.002)
        os.kill(int(handle.read_text().partition("@")[0]), signal.SIGKILL)
        out, err = caller.communicate(timeout=60)
        assert caller.returncode == 0, err  # its answer: the launch, whatever became of the shell since
        # (tmux marks the pane dead once it has reaped the shell: until then its agent is "running",
        # which it is; the settling this test is about comes with the first look after that)
        poll(lambda: pane_dead(launched, handle.parent.name), "tmux to see the pane's shell dead")  # noqa: B023
        again, _ = run(launched, item, "--json", "--", "sleep", marker, env={"GW_AGENT": "alice"})
        assert again.returncode == 0, again.stderr
        converged(launched, item, json.loads(again.stdout), marker)
        states = sorted(r["state"] for r in all_runs(launched) if r["item"] == item)
        assert states == ["lost", "running"], states  # never "exited" while its agent may run


def test_a_pane_tmux_forked_but_not_yet_execd_counts_as_running() -> None:
    """``gw run`` waits for the pane's shell to write ``child`` while the shell runs. Right after ``tmux
    new-session`` the pane's process may still be tmux's fork, before its exec of the shell, with the
    server's command line: the launch took that for a pane gone without a word and answered before the
    agent started (a fresh-clone run under load: ``child`` missing after ``gw run`` returned). Here a process
    whose command line is tmux's stands for that fork; one that is neither, and one that ended, do not run."""
    from gitwork.launch.tmux import _runs

    marker = b"/x/wrapper.py"
    fork = subprocess.Popen(["bash", "-c", "exec -a tmux sleep 30"])
    other = subprocess.Popen(["sleep", "30"])
    try:
        poll(lambda: open(f"/proc/{fork.pid}/cmdline", "rb").read().startswith(b"tmux\0"), "the exec -a")
        # Popen returns once the child is inside execve, where its command line still reads empty (a pane
        # starting, to _runs): the other process is judged once it is sleep (a load-dependent failure, 09:29).
        poll(lambda: open(f"/proc/{other.pid}/cmdline", "rb").read().startswith(b"sleep\0"), "the sleep's exec")
        assert _runs(fork.pid, marker)
        assert not _runs(other.pid, marker)
    finally:
        for proc in (fork, other):
            proc.kill()
            proc.wait()
    assert not _runs(fork.pid, marker)
