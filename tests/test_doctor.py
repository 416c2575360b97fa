"""``gw doctor`` (issue 25, point 8): one line per check, exit 0 when all pass and 1 otherwise, ``--json`` a
list of checks; it reads only: every ref and every file of the repository (the .git folder included) is the
same before and after, on a healthy repository and on a broken one. Real repositories, real hooks.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

from conftest import git, run_gw
from test_everyday import ALICE, gw_ok, new


def snapshot(repo: Path) -> dict[str, str]:
    """Every file under the repository (``.git`` included) -> a hash of its bytes and mode."""
    found = {}
    for folder, _dirs, files in os.walk(repo):
        for name in files:
            path = os.path.join(folder, name)
            with open(path, "rb") as handle:
                found[os.path.relpath(path, repo)] = hashlib.sha256(handle.read()).hexdigest() + oct(
                    os.stat(path).st_mode)
    found["refs"] = git(repo, "for-each-ref")
    return found


def doctor(repo: Path, *args: str) -> tuple[int, str, str]:
    done = run_gw(repo, "doctor", *args, env=ALICE)
    assert "Traceback" not in done.stderr
    return done.returncode, done.stdout, done.stderr


def test_a_ready_repository_passes_every_check_and_nothing_changes(repo: Path) -> None:
    gw_ok(repo, "init")
    gw_ok(repo, "hooks", "install")
    new(repo, "one")
    gw_ok(repo, "list")  # a read builds the read cache
    before = snapshot(repo)
    code, out, _err = doctor(repo)
    assert code == 0, out
    lines = out.splitlines()
    assert [line.split(":")[0] for line in lines][:6] == [
        "repository", "identity", "state ref", "arbiter remote", "hooks", "read cache"]
    assert all(": ok, " in line for line in lines), lines
    code, out, _err = doctor(repo, "--json")
    checks = json.loads(out)
    assert code == 0 and all(c["ok"] and c["fix"] is None for c in checks)
    assert {"extra serve", "extra mcp", "extra sessions", "extra jq"} <= {c["check"] for c in checks}
    assert next(c for c in checks if c["check"] == "identity")["detail"].startswith("alice")
    assert snapshot(repo) == before


def test_each_failure_says_what_to_do_exits_1_and_changes_nothing(repo: Path) -> None:
    # No state ref, no hooks, a remote setting naming no git remote, a damaged read cache; no gitwork folder.
    git(repo, "config", "gitwork.remote", "arbiter")
    before = snapshot(repo)
    code, out, _err = doctor(repo, "--json")
    assert code == 1
    by_name = {c["check"]: c for c in json.loads(out)}
    assert by_name["state ref"]["ok"] is False and by_name["state ref"]["fix"] == "run gw init"
    assert by_name["hooks"]["ok"] is False and by_name["hooks"]["fix"] == "gw hooks install"
    assert by_name["arbiter remote"]["ok"] is False and "git remote add arbiter" in by_name["arbiter remote"]["fix"]
    assert by_name["read cache"]["ok"] is True, "no cache yet is fine: the next read builds it"
    assert by_name["repository"]["ok"] and by_name["identity"]["ok"]
    code, out, _err = doctor(repo)
    assert code == 1 and "state ref: refs/gitwork/state does not exist; fix: run gw init" in out.splitlines()
    assert snapshot(repo) == before, "doctor made the gitwork folder, a cache or a ref"


def test_a_damaged_cache_and_a_bad_identity_fail(repo: Path) -> None:
    gw_ok(repo, "init")
    new(repo, "one")
    assert run_gw(repo, "list", env=ALICE).returncode == 0  # a child: its cache is checkpointed when it ends
    cache = repo / ".git" / "gitwork" / "cache.sqlite"
    assert cache.exists()
    cache.write_bytes(b"not a database" * 100)
    before = snapshot(repo)
    code, out, _err = doctor(repo, "--json")
    by_name = {c["check"]: c for c in json.loads(out)}
    assert code == 1 and by_name["read cache"]["fix"] == "gw cache rebuild"
    done = run_gw(repo, "doctor", "--as", "no spaces allowed", env=ALICE)
    assert done.returncode == 1 and "identity: " in done.stdout and "; fix: set a valid --as" in done.stdout
    bad = run_gw(repo, "doctor", env={**ALICE, "GW_AGENT": "no spaces allowed"})
    assert bad.returncode == 1 and bad.stdout.startswith("settings: ") and "Traceback" not in bad.stderr
    assert snapshot(repo) == before


def test_outside_a_repository_it_reports_rather_than_fails(tmp_path: Path) -> None:
    done = run_gw(tmp_path, "doctor", env=ALICE)
    assert done.returncode == 1 and done.stdout.startswith("repository: not a git repository")
    assert "Traceback" not in done.stderr and list(tmp_path.iterdir()) == []


def test_a_stale_ref_lock_is_named_with_what_removes_it_and_doctor_removes_nothing(machine_a: Path) -> None:
    """A lock a killed git left on the tracking ref (a gw sync killed mid-fetch) or the state ref: doctor
    names it, its age, and that the next sync or write removes it (gitwork/stalelocks.py); it removes
    nothing itself. A young lock is a writer at work: fine."""
    code, out, _err = doctor(machine_a, "--json")
    by_name = {c["check"]: c for c in json.loads(out)}
    assert by_name["ref locks"]["ok"] is True, by_name["ref locks"]
    lock = machine_a / ".git" / "refs" / "remotes" / "origin" / "gitwork" / "state.lock"
    lock.write_text("")
    os.utime(lock, (os.path.getmtime(lock) - 60,) * 2)
    before = snapshot(machine_a)
    code, out, _err = doctor(machine_a, "--json")
    check = {c["check"]: c for c in json.loads(out)}["ref locks"]
    assert code == 1 and check["ok"] is False, check
    assert "refs/remotes/origin/gitwork/state.lock" in check["detail"] and "gw sync" in check["fix"], check
    assert snapshot(machine_a) == before and lock.exists()
    code, out, _err = doctor(machine_a)
    assert any(line.startswith("ref locks: ") and "; fix: " in line for line in out.splitlines()), out
    os.utime(lock, None)  # young: a fetch at work, for all doctor knows
    check = {c["check"]: c for c in json.loads(doctor(machine_a, "--json")[1])}["ref locks"]
    assert check["ok"] is True and "state.lock" in check["detail"], check
