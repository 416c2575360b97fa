"""The arbiter tried from outside, over every transport git offers: races, paused holders, kill -9,
hostile servers.

Each transport is a real server (or none): a plain path, ``file://``, a real ``git daemon`` and a
real smart-HTTP server (``git http-backend``, tests/httpd.py). Every machine is a real clone driven by
the installed ``gw`` in child processes; what the tests check is what git holds on the arbiter's ref.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import random
import re
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest

from conftest import git, make_repo, run_gw, tip
from daemon import GitDaemon, bare_repo
from httpd import GitHTTPServer, served_repo
from test_sync import STATE, command_ids, gw_ok, machine, new_item
from test_sync_daemon import gw_program

OK, STALE, REMOTE, REMOTE_REFUSED, HELD = 0, 7, 12, 14, 75
ZERO = "0" * 40


class Served:
    """One bare arbiter repository behind one transport; ``stop``/``start`` take the server away."""

    def __init__(self, kind: str, tmp: Path) -> None:
        self.kind = kind
        self.server: GitDaemon | GitHTTPServer | None = None
        base = tmp / "served"
        base.mkdir()
        if kind == "http":
            self.bare = served_repo(base, "plane")
            self.server = GitHTTPServer(base)
        else:
            self.bare = bare_repo(base, "plane")
            if kind == "daemon":
                self.server = GitDaemon(base)
        self.start()
        self.url = {"path": str(self.bare), "file": f"file://{self.bare}"}.get(kind) or self.server.url("plane")

    def start(self) -> None:
        if self.server is not None:
            self.server.start()

    def stop(self) -> None:
        if self.server is not None:
            self.server.stop()

    def hook(self, name: str, body: str) -> Path:
        path = self.bare / "hooks" / name
        path.write_text(body)
        path.chmod(0o755)
        return path


TRANSPORTS = ["path", "file", "daemon", "http"]


@pytest.fixture
def http(tmp_path: Path) -> Iterator[Served]:
    served = Served("http", tmp_path)
    try:
        yield served
    finally:
        served.stop()


# --- what the arbiter's history says ----------------------------------------------------------------


def trailers(bare: Path) -> list[dict]:
    """Each commit of the arbiter's state history, oldest first: its command and its trailers."""
    out = git(bare, "log", "--first-parent", "--reverse", "--format=%H%x00%B%x01", STATE)
    commits = []
    for chunk in out.split("\x01"):
        if not chunk.strip():
            continue
        sha, _, body = chunk.strip().partition("\x00")
        entry: dict = {"commit": sha}
        for line in body.splitlines():
            if line.startswith("Command: "):
                entry["command"] = json.loads(line[len("Command: "):])
            key, sep, value = line.partition(": ")
            if sep and key in ("Work-Item", "Lease-Epoch", "Fence", "Command-Id"):
                entry[key] = value.strip()
        commits.append(entry)
    return commits


def assert_sound(bare: Path) -> None:
    """fsck --full --strict clean, the whole history passes the server check, no command id twice."""
    fsck = subprocess.run(["git", "fsck", "--full", "--strict", "--no-dangling", "--no-progress"], cwd=bare,
                          capture_output=True, text=True)
    assert fsck.returncode == 0 and "error" not in (fsck.stdout + fsck.stderr).lower(), fsck.stdout + fsck.stderr
    head = tip(bare)
    assert head is not None
    check = subprocess.run([sys.executable, "-m", "gitwork.statecheck"], cwd=bare, capture_output=True, text=True,
                           input=f"{ZERO} {head} {STATE}\n", env={**os.environ, "GIT_DIR": str(bare)})
    assert check.returncode == 0, check.stderr
    ids = command_ids(bare)
    assert [i for i, n in Counter(ids).items() if n > 1] == []


def assert_grants_linear(bare: Path) -> list[dict]:
    """One grant per item per epoch, and the fences the grants drew go 1, 2, 3... along the history."""
    history = trailers(bare)
    granted = [c for c in history if c.get("command", {}).get("op") in ("claim", "takeover")]
    per_epoch = Counter((c["Work-Item"], c["Lease-Epoch"]) for c in granted)
    assert [key for key, n in per_epoch.items() if n > 1] == []
    assert [int(c["Fence"]) for c in granted] == list(range(1, len(granted) + 1))
    return granted


def one_line(stderr: str) -> str:
    lines = stderr.splitlines()
    assert len(lines) == 1, f"{len(lines)} lines on stderr: {stderr[:2000]!r}"
    assert "Traceback" not in stderr
    return lines[0]


def later(**delta: float) -> str:
    return (dt.datetime.now(dt.timezone.utc) + dt.timedelta(**delta)).strftime("%Y-%m-%dT%H:%M:%SZ")


def poll(condition, what: str, timeout: float = 30) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"{what}: not reached in {timeout} s"
        time.sleep(0.02)


# --- 2: 3 clones x 4 processes racing for the same items, over each transport ------------------------

CLONES, PROCS, ITEMS = 3, 4, 2

# One racer: wait for the start signal, then claim every item once; log "rc json" per attempt.
RACER = r"""
while [ ! -e "$GO" ]; do sleep 0.01; done
for item in $ITEMS; do
  "$GW" claim "$item" --as "$ME" --json > "$OUT.last" 2>> "$OUT.err"; rc=$?
  printf '%s %s %s\n' "$item" "$rc" "$(tr -d '\n' < "$OUT.last")" >> "$OUT"
done
"""


@pytest.mark.slow
@pytest.mark.parametrize("kind", TRANSPORTS)
def test_racing_claims_over_each_transport(tmp_path: Path, kind: str) -> None:
    served = Served(kind, tmp_path)
    try:
        seeder = machine(tmp_path, "seed", served.url, publish=True)
        items = [new_item(seeder, f"contended {n}") for n in range(ITEMS)]
        gw_ok(seeder, "sync")
        clones = [machine(tmp_path, f"m{c}", served.url) for c in range(CLONES)]
        program, go = gw_program(tmp_path), tmp_path / "go"
        racers = []
        for clone in clones:
            for p in range(PROCS):
                me, out = f"{clone.name}-{p}", tmp_path / f"{clone.name}-{p}.log"
                env = {**os.environ, "GW": program, "ME": me, "OUT": str(out), "GO": str(go),
                       "ITEMS": " ".join(items)}
                racers.append((me, out, subprocess.Popen(["bash", "-c", RACER], cwd=clone, env=env,
                                                         start_new_session=True)))
        go.touch()
        for me, _out, proc in racers:
            try:
                assert proc.wait(timeout=120) == 0, me
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)  # our own racer's group
                proc.wait()
                raise

        told: dict[tuple[str, str], tuple[int, dict]] = {}
        for me, out, _proc in racers:
            for line in out.read_text().splitlines():
                item, rc, doc = line.split(" ", 2)
                told[(item, me)] = (int(rc), json.loads(doc) if doc.strip() else {})
        errors = [(key, out) for key, out in told.items() if out[0] not in (OK, HELD)]
        assert errors == [], errors
        assert len(told) == ITEMS * CLONES * PROCS

        granted = assert_grants_linear(served.bare)
        holders = {c["Work-Item"]: c["command"]["as"] for c in granted}
        on_arbiter = set(command_ids(served.bare))
        for (item, me), (rc, doc) in told.items():
            if rc == OK:  # told it won: the arbiter holds exactly that grant
                assert doc["command_id"] in on_arbiter and holders[item] == me, (item, me)
            else:  # told it lost: nothing of it on the arbiter
                assert holders[item] != me, (item, me)
        assert sorted(holders) == sorted(items)
        assert sum(rc == OK for rc, _doc in told.values()) == ITEMS

        for clone in clones:
            assert gw_ok(clone, "sync")["refused"] == []
        assert {tip(clone) for clone in clones} == {tip(served.bare)}
        assert_sound(served.bare)
    finally:
        served.stop()


# --- 3: a holder paused mid-lease while its lease ends and another clone takes over -----------------

# The holder's heartbeat: renew, then post under the same fence, forever; "verb rc" per command.
HOLDER = r"""
n=0
while :; do
  "$GW" renew "$X" --fence "$F" --ttl 10m --as alice --json > "$OUT.last" 2>> "$OUT.err"
  echo "renew $? $(tr -d '\n' < "$OUT.last")" >> "$OUT"
  "$GW" msg "$X" "beat $n" --fence "$F" --as alice --json > "$OUT.last" 2>> "$OUT.err"
  echo "msg $? $(tr -d '\n' < "$OUT.last")" >> "$OUT"
  n=$((n + 1))
done
"""


def log_lines(out: Path) -> list[tuple[str, int, dict]]:
    rows = []
    for line in out.read_text().splitlines() if out.exists() else ():
        verb, rc, doc = (line.split(" ", 2) + [""])[:3]
        rows.append((verb, int(rc), json.loads(doc) if doc.strip() else {}))
    return rows


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["file", "http"])
def test_a_paused_holder_is_refused_after_a_takeover(tmp_path: Path, kind: str) -> None:
    served = Served(kind, tmp_path)
    try:
        a = machine(tmp_path, "a", served.url, publish=True)
        x = new_item(a, "X", "-c", "a criterion")
        gw_ok(a, "sync")
        b = machine(tmp_path, "b", served.url)
        fence = gw_ok(a, "claim", x, "--ttl", "10m", "--as", "alice")["fence"]
        out = tmp_path / "holder.log"
        env = {**os.environ, "GW": gw_program(tmp_path), "X": x, "F": str(fence), "OUT": str(out)}
        holder = subprocess.Popen(["bash", "-c", HOLDER], cwd=a, env=env, start_new_session=True)
        try:
            poll(lambda: len(log_lines(out)) >= 3, "the holder's first heartbeats")
            os.killpg(holder.pid, signal.SIGSTOP)  # mid-lease, possibly mid-command, mid-push
            paused_at = len(log_lines(out))
            assert all(rc == OK for _verb, rc, _doc in log_lines(out)), log_lines(out)

            # The lease runs out (bob's clock is a day ahead) and bob takes over from another clone.
            taken = gw_ok(b, "takeover", x, "--as", "bob", env={"GW_NOW": later(days=1)})
            assert taken["fence"] > fence

            os.killpg(holder.pid, signal.SIGCONT)
            poll(lambda: len(log_lines(out)) >= paused_at + 6, "the holder's heartbeats after it resumed")
        finally:
            os.killpg(holder.pid, signal.SIGKILL)  # our own holder loop's group
            holder.wait()
        rows = log_lines(out)
        # The command in flight when it was paused may have finished before the takeover; every
        # command it started after it resumed is refused as stale, nothing written.
        after = rows[paused_at + 1:paused_at + 6]
        assert [(verb, rc) for verb, rc, _doc in after] == [(verb, STALE) for verb, _rc, _doc in after], after
        assert all(doc.get("error") == "stale" for _verb, _rc, doc in after)

        # Nothing it wrote lands on the arbiter under the superseded fence after the takeover.
        gw_ok(a, "sync")
        history = trailers(served.bare)
        at = next(n for n, c in enumerate(history) if c.get("Command-Id") == taken["command_id"])
        late = [c["command"] for c in history[at + 1:] if c["command"].get("as") == "alice"]
        assert late == []
        assert gw_ok(b, "show", x)["lease"]["holder"] == "bob"
        assert_grants_linear(served.bare)
        assert_sound(served.bare)
    finally:
        served.stop()
