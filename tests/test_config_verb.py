"""Issue 25, point 8: ``gw config get|set|list``.

Like git: ``set`` writes this clone's git config (``gitwork.KEY``, ``--local``, the default) or, with
``--shared``, the tracked ``.workplane`` (to commit and share); ``get``/``list`` give the value in force
and where it comes from. A bad key or value is exit 5 and changes nothing (both files hashed before and
after). Real repositories, the real entry point; the verb runs without typer (the fast path).
"""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import git, gw_here

ENV = {"GW_AGENT": "alice", "GW_NO_AUTO_GC": "1"}


def run(repo: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return gw_here(repo, *args, env=ENV)


def ok(repo: Path, *args: str) -> str:
    done = run(repo, *args)
    assert done.returncode == 0, (args, done.stdout, done.stderr)
    return done.stdout


def fingerprint(repo: Path) -> tuple[str, str, str]:
    workplane = repo / ".workplane"
    config = (repo / ".git" / "config").read_bytes()
    refs = git(repo, "for-each-ref")
    return (hashlib.sha256(workplane.read_bytes()).hexdigest() if workplane.exists() else "-",
            hashlib.sha256(config).hexdigest(), refs)


def test_set_local_then_shared_and_where_each_value_comes_from(repo: Path) -> None:
    ok(repo, "init")
    got = json.loads(ok(repo, "config", "get", "default_ttl", "--json"))
    assert got["ok"] is True and got["value"] == 900 and got["source"] == "default"
    ok(repo, "config", "set", "default-ttl", "30m")  # dashes or underscores, as in .workplane
    assert git(repo, "config", "gitwork.defaultTtl") == "30m", "--local (the default): this clone's git config"
    got = json.loads(ok(repo, "config", "get", "default_ttl", "--json"))
    assert got["value"] == 1800 and got["source"] == "git config gitwork.defaultttl"
    assert ok(repo, "config", "get", "default_ttl").strip() == "1800"
    # --shared: the tracked .workplane, comments and other keys kept
    (repo / ".workplane").write_text("# team settings\nagents: [bot-1]\n")
    ok(repo, "config", "set", "admins", "lead,ops", "--shared")
    text = (repo / ".workplane").read_text()
    assert text.startswith("# team settings\nagents: [bot-1]\n") and "admins:" in text
    got = json.loads(ok(repo, "config", "get", "admins", "--json"))
    assert got["value"] == ["lead", "ops"] and got["source"] == ".workplane"
    assert got["enforced_by_arbiter"] is True, "roles are decided by the arbiter's own settings"
    ok(repo, "config", "set", "admins", "boss", "--shared")  # replaces the line, does not add a second
    assert (repo / ".workplane").read_text().count("admins:") == 1
    assert json.loads(ok(repo, "config", "get", "admins", "--json"))["value"] == ["boss"]
    listed = json.loads(ok(repo, "config", "list", "--json"))
    rows = {row["key"]: row for row in listed["settings"]}
    assert rows["agents"]["value"] == ["bot-1"] and rows["agents"]["source"] == ".workplane"
    assert rows["remote"]["source"] == "default" and rows["ref"]["value"] == "refs/gitwork/state"
    plain = ok(repo, "config", "list")
    assert "default_ttl = 1800" in plain and "(git config gitwork.defaultttl)" in plain


@pytest.mark.parametrize("args", [
    ("set", "no_such_key", "1"), ("get", "no_such_key"), ("set", "default_ttl", "soon"),
    ("set", "admins", "ok,bad name"), ("set", "signing", "gpg", "--shared"), ("set", "agent", ""),
    ("set", "ref", "heads/main"), ("set", "sessions", "x", "--shared"), ("set", "agents", "lead", "--shared"),
])
def test_bad_key_or_value_is_exit_5_and_changes_nothing(repo: Path, args: tuple[str, ...]) -> None:
    ok(repo, "init")
    (repo / ".workplane").write_text("admins: [lead]\n")
    before = fingerprint(repo)
    done = run(repo, "config", *args)
    assert done.returncode == 5, (done.stdout, done.stderr)
    assert len(done.stderr.strip().splitlines()) == 1 and "Traceback" not in done.stderr
    assert fingerprint(repo) == before, "a refused set writes nothing"
    as_json = run(repo, "config", *args, "--json")
    assert json.loads(as_json.stdout)["error"] == "invalid" and fingerprint(repo) == before


def test_config_runs_without_typer(repo: Path) -> None:
    ok(repo, "init")
    code = ("import sys; from gitwork.cli.main import main; code = main(['config', 'get', 'clock_margin']); "
            "assert 'typer' not in sys.modules and 'ruamel' not in sys.modules, 'slow path'; sys.exit(code)")
    done = subprocess.run([sys.executable, "-c", code], cwd=repo, capture_output=True, text=True, env={**ENV,
                          "PATH": "/usr/bin:/bin", "PYTHONPATH": str(Path(__file__).parents[1])})
    assert done.returncode == 0 and done.stdout.strip() == "30", (done.stdout, done.stderr)


def test_a_block_list_is_replaced_whole_and_comments_stay() -> None:
    from gitwork.settings_edit import edited

    text = "# top\nadmins:\n  - a\n  - b\nagents:\n- x\n- y\n\n# tail\npeople: [p]\n"
    assert edited(text, "admins", 'admins: ["c"]\n') == '# top\nadmins: ["c"]\nagents:\n- x\n- y\n\n# tail\npeople: [p]\n'
    assert edited(text, "agents", 'agents: ["z"]\n') == '# top\nadmins:\n  - a\n  - b\nagents: ["z"]\n\n# tail\npeople: [p]\n'
    assert edited("default-ttl: 5m", "default_ttl", 'default_ttl: "30m"\n') == 'default_ttl: "30m"\n'
    assert edited("x: 1", "remote", 'remote: "origin"\n') == 'x: 1\nremote: "origin"\n'


def test_an_environment_variable_wins_and_says_so_and_a_bare_repository_has_no_workplane(tmp_path: Path) -> None:
    from conftest import make_repo

    repo = make_repo(tmp_path / "work")
    ok(repo, "init")
    done = gw_here(repo, "config", "set", "remote", "origin", "--json", env={**ENV, "GW_REMOTE": "arbiter"})
    doc = json.loads(done.stdout)
    assert done.returncode == 0 and doc["wrote"] == "git config gitwork.remote"
    assert doc["value"] == "arbiter" and doc["source"] == "GW_REMOTE", "GW_* is above git config"
    bare = make_repo(tmp_path / "bare.git", bare=True)
    refused = gw_here(bare, "config", "set", "admins", "lead", "--shared", env=ENV)
    assert refused.returncode == 2 and "--local" in refused.stderr
    assert not (bare / ".workplane").exists()
    assert gw_here(bare, "config", "set", "admins", "lead", env=ENV).returncode == 0
    assert git(bare, "config", "gitwork.admins") == "lead"
