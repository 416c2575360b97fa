"""What ``gw claim`` / ``gw release`` load at start-up (issue 27 point 4: a command's cost is mostly
its imports). Each module named here costs milliseconds per command and has a lighter stand-in on
this path: ``subprocess`` (with ``threading``, ``locale``, ``selectors``: one ``git update-ref`` is
spawned with ``os.posix_spawn``), ``hashlib`` (OpenSSL's ``_hashlib``: object ids come from the
interpreter's own ``_sha1``/``_sha256``), ``random`` (the odd jitter and auto-gc draw use ``os.urandom``),
``signal`` (its enums; the C module ``_signal`` gives the numbers).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from gitwork.workplane import Workplane

HEAVY = {"subprocess", "threading", "locale", "selectors", "signal", "hashlib", "_hashlib", "random"}


def imported_by(repo: Path, *args: str) -> set[str]:
    done = subprocess.run([sys.executable, "-X", "importtime", "-m", "gitwork", *args], cwd=repo,
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    return {line.split("|")[-1].strip() for line in done.stderr.splitlines() if line.startswith("import time:")}


def test_claim_and_release_load_no_heavy_module(repo: Path) -> None:
    with Workplane(str(repo)) as wp:
        wp.do("init")
        item = wp.do("new", title="one").result["item"]
    for verb in ("claim", "release"):
        imported = imported_by(repo, verb, item, "--as", "bob")
        assert "gitwork.engine" in imported  # the command ran through the engine
        assert not imported & HEAVY, f"gw {verb} imports {sorted(imported & HEAVY)}"
    with Workplane(str(repo)) as wp:
        lease = wp.context().lease(item)
        assert lease is not None and lease.state == "released" and lease.holder == "bob"


def wrapper_run(folder: Path, *command: str, code: int = 0) -> set[str]:
    from gitwork.launch import wrapper

    # As the backends start it (wrapper.argv): imported from its folder, so its bytecode is used.
    done = subprocess.run([sys.executable, "-S", "-X", "importtime", "-c", wrapper.BOOT, wrapper.__file__, str(folder),
                           "--", *command],
                          capture_output=True, text=True, start_new_session=True, cwd=folder)
    assert done.returncode == code, done.stderr
    return {line.split("|")[-1].strip() for line in done.stderr.splitlines() if line.startswith("import time:")}


def test_the_launch_wrapper_reaches_the_agent_without_subprocess(tmp_path: Path) -> None:
    """The wrapper stands between ``gw run`` and the agent's first line (issue 27: ``gw run`` to the
    first line within 5x a bare ``tmux new-session``): it starts the agent with ``os.posix_spawn``,
    keeps subprocess's contract (PATH of the agent's environment, its exit code or 128+signal, a
    command that cannot start reported in ``failed``), and loads no site-packages (``-S``)."""
    ok = tmp_path / "ok"
    ok.mkdir()
    imported = wrapper_run(ok, "sh", "-c", 'echo "$GW_T_MARK" > out; exit 3')  # (out: in its folder, the cwd)
    assert (ok / "out").is_file()
    # Nor json (re, enum) nor importlib.util on the way to the agent: the env file is NUL-separated text,
    # and the wrapper writes its files itself (issue 27, run5).
    heavy = HEAVY | {"json", "re", "enum", "importlib.util"}
    assert not imported & heavy, f"the wrapper imports {sorted(imported & heavy)}"
    assert (ok / "code").read_text() == "3\n" and (ok / "child").read_text().strip().isdigit()
    killed = tmp_path / "killed"
    killed.mkdir()
    wrapper_run(killed, "sh", "-c", "kill -TERM $$")
    assert (killed / "code").read_text() == "143\n"
    missing = tmp_path / "missing"
    missing.mkdir()
    wrapper_run(missing, "no-such-agent-gw-test", code=127)
    assert (missing / "failed").read_text().startswith("cannot start no-such-agent-gw-test")
    assert not (missing / "code").exists() and not (missing / "child").exists()


def test_the_wrapper_hands_the_agent_its_environment_file_exactly(tmp_path: Path) -> None:
    """The env file is ``NAME=VALUE`` entries ended by NUL (no JSON on the way to the agent): values with
    ``=``, newlines, non-ASCII text or nothing at all arrive as written, over the pane's own
    environment, and the file is gone once read."""
    from gitwork.launch import wrapper

    env = {"GW_T_EQ": "a=b=c", "GW_T_LINES": "one\ntwo\n", "GW_T_TEXT": "ünïcødé ✓", "GW_T_EMPTY": "",
           "PATH": os.environ["PATH"]}
    env_file = wrapper.write_env(str(tmp_path), env)
    assert os.stat(env_file).st_mode & 0o777 == 0o600
    script = "import os, json, sys; json.dump({k: v for k, v in os.environ.items() if k.startswith('GW_T_')}, sys.stdout)"
    done = subprocess.run([*wrapper.argv(str(tmp_path), env_file, [sys.executable, "-c", script])],
                          capture_output=True, text=True, start_new_session=True, env={**os.environ, "GW_T_EQ": "pane's"})
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == {k: v for k, v in env.items() if k != "PATH"}
    assert not os.path.exists(env_file) and (tmp_path / "code").read_text() == "0\n"


def test_a_claim_under_the_default_identity_loads_neither_socket_nor_getpass(repo: Path) -> None:
    """Without ``--as`` or ``GW_AGENT`` the identity is ``user@host/sSID``: the user from getpass's own
    sources (LOGNAME, USER, ..., the password database), the host from ``os.uname()``, not the
    modules (``socket`` alone is ~3 ms: selectors, enums)."""
    import os

    with Workplane(str(repo), agent="setup") as wp:
        wp.do("init")
        item = wp.do("new", title="one").result["item"]
    env = {k: v for k, v in os.environ.items() if k != "GW_AGENT"}
    done = subprocess.run([sys.executable, "-X", "importtime", "-m", "gitwork", "claim", item], cwd=repo,
                          capture_output=True, text=True, env=env)
    assert done.returncode == 0, done.stderr
    imported = {line.split("|")[-1].strip() for line in done.stderr.splitlines() if line.startswith("import time:")}
    assert not imported & {"socket", "getpass", "_socket"}, sorted(imported & {"socket", "getpass", "_socket"})
    import getpass
    import socket

    from gitwork.ids import plain_identity

    # The same name the modules give (the child shares this process's session).
    expected = f"{plain_identity(getpass.getuser())[:24]}@{plain_identity(socket.gethostname().split('.')[0])[:24]}"
    with Workplane(str(repo)) as wp:
        lease = wp.lease(item)
        assert lease is not None and lease.holder == f"{expected}/s{os.getsid(0)}", lease


# The character classes with wide Unicode ranges cost 0.3-0.6 ms each to compile (issue 27): compiled on
# first use, and an ASCII text is answered without them.
WIDE = {"gitwork.codec": "_ESCAPE", "gitwork.commands": "_CONTROL", "gitwork.engine": "_LINE_BREAKING"}
PROBE = """
import importlib, sys
from gitwork.cli.main import main
code = main(sys.argv[1:])
compiled = [m + "." + n for m, n in {wide!r}.items() if getattr(importlib.import_module(m), n)._compiled is not None]
print(code, ",".join(compiled))
"""


def test_an_ascii_claim_compiles_none_of_the_wide_patterns(repo: Path) -> None:
    with Workplane(str(repo), agent="setup") as wp:
        wp.do("init")
        item = wp.do("new", title="one").result["item"]
    done = subprocess.run([sys.executable, "-c", PROBE.format(wide=WIDE), "claim", item, "--as", "bob", "--ttl", "30m"],
                          cwd=repo, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split("\n")[-2].split(" ") == ["0", ""], done.stdout


def test_text_outside_printable_ascii_is_still_escaped_and_refused() -> None:
    """The ASCII shortcut never skips what the patterns catch: DEL (ASCII, not printable), C1 controls,
    U+2028, lone surrogates."""
    from gitwork import codec, commands, engine
    from gitwork.errors import Invalid

    assert engine.one_line("a\x7fb\u2028c\nd") == "a\\u007fb\\u2028c\\nd"
    assert engine.one_line("plain ascii, printable") == "plain ascii, printable"
    for bad in ("a\x7f", "a\x00", "a\x1b[2J", "a\ud800"):
        try:
            commands.check_text(bad, "title")
        except Invalid:
            continue
        raise AssertionError(f"{bad!r} was accepted")
    assert commands.check_text("tab\tand text\n", "title") == "tab\tand text\n"
    dumped = codec.dump_yaml({"title": "del\x7f, nel\x85, sep\u2028"}).decode()
    assert "\\u007f" in dumped and "\\u0085" in dumped and "\\u2028" in dumped
    assert codec.load_yaml(dumped.encode()) == {"title": "del\x7f, nel\x85, sep\u2028"}


def test_gw_run_reaches_a_tmux_agent_without_subprocess_hashlib_or_shutil(repo: Path, tmp_path: Path) -> None:
    """``gw run --backend tmux`` (issue 27: to the agent's first line within a few times a bare ``tmux
    new-session``): its tmux clients are started with ``os.posix_spawn`` (``gitcmd.run_tool``), the
    socket digest comes from ``hashing.py``, the command is found on PATH without ``shutil``."""
    import os
    import shutil

    if shutil.which("tmux") is None:
        import pytest

        pytest.skip("tmux is not installed (apt-get install tmux)")
    with Workplane(str(repo), agent="setup") as wp:
        wp.do("init")
        item = wp.do("new", title="one").result["item"]
    socket = str(tmp_path / "tmux.sock")
    env = {**os.environ, "GW_TMUX_SOCKET": socket}
    try:
        done = subprocess.run([sys.executable, "-X", "importtime", "-m", "gitwork", "run", item, "--as", "bob", "--",
                               "sleep", "30"], cwd=repo, capture_output=True, text=True, env=env)
        assert done.returncode == 0, done.stderr
        imported = {line.split("|")[-1].strip() for line in done.stderr.splitlines() if line.startswith("import time:")}
        assert "gitwork.launch.tmux" in imported
        heavy = imported & (HEAVY | {"shutil"})
        assert not heavy, f"gw run imports {sorted(heavy)}"
        listed = subprocess.run(["tmux", "-S", socket, "list-sessions", "-F", "#{session_name}"], capture_output=True,
                                text=True)
        assert len(listed.stdout.split()) == 1, listed  # and the agent runs
    finally:
        subprocess.run(["tmux", "-S", socket, "kill-server"], capture_output=True)


TOOL_PROBE = """
import subprocess, sys, time
from gitwork.gitcmd import run_tool
done = run_tool(["sh", "-c", "echo out; echo err >&2; cat; exit 3"])  # stdin: /dev/null, not ours (a pipe)
assert (done.returncode, done.stdout, done.stderr) == (3, b"out\\n", b"err\\n"), done
t0 = time.monotonic()
try:
    run_tool(["sleep", "20"], timeout=0.3)
except subprocess.TimeoutExpired as exc:
    assert time.monotonic() - t0 < 10 and exc.timeout == 0.3
else:
    raise AssertionError("no timeout")
try:
    run_tool(["no-such-tool-gw-test"])
except FileNotFoundError:
    print("ok")
"""


def test_a_tool_run_through_posix_spawn_keeps_subprocess_run_s_contract() -> None:
    """``gitcmd.run_tool`` without input (tmux's calls) no longer goes through subprocess: the exit
    code and both streams, stdin from /dev/null (the caller's stdin, a pipe left open here, is not
    read), ``subprocess.TimeoutExpired`` past the timeout (the process killed), ``FileNotFoundError``."""
    proc = subprocess.Popen([sys.executable, "-c", TOOL_PROBE], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        out, err = proc.communicate(timeout=30)
    finally:
        proc.kill()
    assert proc.returncode == 0 and out == "ok\n", err


def test_housekeeping_starts_git_detached_without_subprocess(tmp_path: Path) -> None:
    """The 1-in-64 ``git gc --auto`` a command starts (``workplane.maybe_auto_gc``) goes through
    ``gitcmd.start``: it must not import subprocess (a ``gw run`` drawing the lot did, and its import
    check flaked), must return without waiting for git, and git must really run, in its own session."""
    repo = tmp_path / "r"
    repo.mkdir()
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    for i in range(5):
        (repo / f"f{i}").write_text(str(i))
    subprocess.run(["git", "-C", str(repo), "add", "."], check=True)
    subprocess.run(["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "x"],
                   check=True)
    code = f"""
import sys
from gitwork import gitcmd
assert gitcmd.start(["--git-dir", {str(repo / '.git')!r}, "gc", "--quiet"])
print(sorted(m for m in ("subprocess", "threading", "selectors") if m in sys.modules))
"""
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]", done.stdout
    import time

    deadline = time.monotonic() + 30
    while "packs: 1" not in subprocess.run(["git", "-C", str(repo), "count-objects", "-v"], capture_output=True,
                                           text=True).stdout:
        assert time.monotonic() < deadline, "the detached git gc never ran"
        time.sleep(0.05)


# What the server hook may load for a push of state commits (the suite's costliest child, and every
# push's latency): the CAS client and transport (``gitwork.sync``: only a stale ref lock needs its
# sweep), the batch applier (only for inbox refs), path leases (only for code refs), the CLI.
HOOK_NEVER = {"gitwork.sync", "gitwork.sync.cas", "gitwork.sync.transport", "gitwork.applier", "gitwork.pathcheck",
              "gitwork.cli", "typer", "rich", "ruamel", "tempfile", "shutil", "random", "hashlib"}


def remote_imports(stderr: str) -> set[str]:
    return {line.split("|")[-1].strip() for line in stderr.splitlines() if "import time:" in line}


def test_the_server_hook_derives_a_state_push_without_the_client_modules(tmp_path: Path) -> None:
    """A state commit pushed to an arbiter goes through the real ``pre-receive`` (derived, accepted),
    ``-X importtime`` passed down by git's environment; and ``python -m gitwork.statecheck`` (the tests'
    ``assert_sound``) on the whole history loads no more."""
    from conftest import tip
    from test_arbiter_derive import STATE, alice_holds_an_item, bob_says

    bare, _alice, bob, item = alice_holds_an_item(tmp_path)
    honest = bob_says(bob, item)
    done = subprocess.run(["git", "push", "--porcelain", "origin", f"{honest}:{STATE}"], cwd=bob, capture_output=True,
                          text=True, env={**os.environ, "PYTHONPROFILEIMPORTTIME": "1"})
    assert done.returncode == 0, done.stderr
    assert tip(bare) == honest
    imported = remote_imports(done.stderr)
    assert "gitwork.derive" in imported  # the hook ran and derived the commit
    assert not imported & HOOK_NEVER, f"the server hook imports {sorted(imported & HOOK_NEVER)}"
    # Its git processes (the cat-file reader of the state in quarantine included) go through
    # os.posix_spawn: subprocess (threading, selectors, locale) is ~5 ms of the hook's ~40.
    assert "subprocess" not in imported, sorted(imported)
    check = subprocess.run([sys.executable, "-X", "importtime", "-m", "gitwork.statecheck"], cwd=bare,
                           capture_output=True, text=True, input=f"{'0' * 40} {honest} {STATE}\n",
                           env={**os.environ, "GIT_DIR": str(bare), "GW_NOW": "2100-01-01T00:00:00Z"})
    assert check.returncode == 0, check.stderr
    imported = remote_imports(check.stderr)
    assert "gitwork.derive" in imported
    assert not imported & HOOK_NEVER, f"gitwork.statecheck imports {sorted(imported & HOOK_NEVER)}"


def test_the_installed_gw_script_imports_nothing_of_its_own_before_gitwork(repo: Path) -> None:
    """The ``gw`` a user runs is ``gitwork/cli/script.py`` installed as a script (pyproject.toml's
    shared-scripts), not pip's console-script wrapper: that one imports ``re`` (with ``enum``,
    ``functools``, ``collections``) to tidy ``argv[0]`` for Windows, ~7 ms of every ``gw`` call here."""
    script = Path(sys.executable).parent / "gw"  # where the README's install puts it, beside the interpreter
    assert script.is_file(), "the README's install puts gw beside its interpreter"
    done = subprocess.run([str(script), "--version"], cwd=repo, capture_output=True, text=True,
                          env={**os.environ, "PYTHONPROFILEIMPORTTIME": "1"})
    assert done.returncode == 0 and done.stdout.startswith("gw "), done.stderr
    imported = {line.split("|")[-1].strip() for line in done.stderr.splitlines() if line.startswith("import time:")}
    assert "gitwork.cli.main" in imported
    assert not imported & {"re", "enum", "functools", "collections"}, sorted(imported & {"re", "enum"})
