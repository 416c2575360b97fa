"""What ``gw claim`` / ``gw release`` load at start-up (issue 27 point 4: a command's cost is mostly
its imports). Each module named here costs milliseconds per command and has a lighter stand-in on
this path: ``subprocess`` (with ``threading``, ``locale``, ``selectors``: one ``git update-ref`` is
spawned with ``os.posix_spawn``), ``hashlib`` (OpenSSL's ``_hashlib``: object ids come from the
interpreter's own ``_sha1``/``_sha256``), ``random`` (the odd jitter and auto-gc draw use ``os.urandom``),
``signal`` (its enums; the C module ``_signal`` gives the numbers).
"""

from __future__ import annotations

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

    done = subprocess.run([sys.executable, "-S", "-X", "importtime", wrapper.__file__, str(folder), "--", *command],
                          capture_output=True, text=True, start_new_session=True)
    assert done.returncode == code, done.stderr
    return {line.split("|")[-1].strip() for line in done.stderr.splitlines() if line.startswith("import time:")}


def test_the_launch_wrapper_reaches_the_agent_without_subprocess(tmp_path: Path) -> None:
    """The wrapper stands between ``gw run`` and the agent's first line (issue 27: ``gw run`` to the
    first line within 5x a bare ``tmux new-session``): it starts the agent with ``os.posix_spawn``,
    keeps subprocess's contract (PATH of the agent's environment, its exit code or 128+signal, a
    command that cannot start reported in ``failed``), and loads no site-packages (``-S``)."""
    ok = tmp_path / "ok"
    ok.mkdir()
    imported = wrapper_run(ok, "sh", "-c", 'echo "$GW_T_MARK" > out; exit 3')
    assert not imported & HEAVY, f"the wrapper imports {sorted(imported & HEAVY)}"
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
