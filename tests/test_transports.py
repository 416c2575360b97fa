"""The arbiter tried from outside, over every transport git offers: races, paused holders, kill -9,
hostile servers.

Each transport is a real server (or none): a plain path, ``file://``, a real ``git daemon`` and a
real smart-HTTP server (``git http-backend``, tests/httpd.py), and the deployment of docs/deploy.md
(nginx + fcgiwrap + ``git http-backend`` with the server hook, tests/webserver.py). Every machine is
a real clone driven by the installed ``gw`` in child processes; what the tests check is what git holds
on the arbiter's ref.
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

import webserver
from conftest import git, make_repo, run_gw, tip
from daemon import GitDaemon, bare_repo
from httpd import GitHTTPServer, http_server, served_repo  # noqa: F401 (a fixture)
from test_sync import STATE, assert_sound, command_ids, gw_ok, machine, new_item
from test_sync_daemon import gw_program
from webserver import WebServer

OK, STALE, REMOTE, REMOTE_REFUSED, SYNC_REFUSED, HELD = 0, 7, 12, 14, 15, 75


class Served:
    """One bare arbiter repository behind one transport; ``stop``/``start`` take the server away."""

    def __init__(self, kind: str, tmp: Path) -> None:
        self.kind = kind
        self.server: GitDaemon | GitHTTPServer | WebServer | None = None
        base = tmp / "served"
        base.mkdir()
        if kind == "http":
            self.bare = served_repo(base, "plane")
            self.server = GitHTTPServer(base)
        elif kind == "nginx":  # the deployment of docs/deploy.md, server hook included
            webserver.require()
            self.bare = webserver.served_repo(base, "plane")
            self.server = WebServer(base)
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


TRANSPORTS = ["path", "file", "daemon", "http", "nginx"]


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

CLONES, PROCS, ITEMS = 3, 4, 1

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
@pytest.mark.parametrize("kind", ["http"])
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
        # The command in flight when it was paused (row paused_at) may have finished before the
        # takeover. Every renew it started after it resumed asks the arbiter and is refused; a msg is
        # local and can only know once a renew has fetched the news: from then on, all are refused.
        after = rows[paused_at + 1:]
        assert all(rc == STALE for verb, rc, _doc in after if verb == "renew"), after
        told = next(n for n, (verb, _rc, _doc) in enumerate(after) if verb == "renew")
        assert all(rc == STALE and doc.get("error") == "stale" for _verb, rc, doc in after[told:]), after
        assert len(after[told:]) >= 4

        # Nothing it wrote lands on the arbiter under the superseded fence after the takeover: this sync
        # refuses what is left of it (a msg written before it learned) and says so with exit 15, or
        # finds nothing left to refuse (exit 0).
        synced = run_gw(a, "sync", "--json")
        assert synced.returncode in (OK, SYNC_REFUSED), synced.stdout + synced.stderr
        assert all(e["code"] == STALE for e in json.loads(synced.stdout)["refused"])
        history = trailers(served.bare)
        at = next(n for n, c in enumerate(history) if c.get("Command-Id") == taken["command_id"])
        late = [c["command"] for c in history[at + 1:] if c["command"].get("as") == "alice"]
        assert late == []
        assert gw_ok(b, "show", x)["lease"]["holder"] == "bob"
        assert_grants_linear(served.bare)
        assert_sound(served.bare)
    finally:
        served.stop()


# --- 4: kill -9 at random points of claim and sync over smart HTTP ----------------------------------

WORKER = r"""
n=0
while :; do
  for verb in new claim sync; do
    case $verb in
      new) "$GW" new "made by $$ #$n" --json > "$OUT.last" 2>> "$OUT.err" ;;
      claim) "$GW" claim --next --as looper --json > "$OUT.last" 2>> "$OUT.err" ;;
      sync) "$GW" sync --json > "$OUT.last" 2>> "$OUT.err" ;;
    esac
    echo "$verb $? $(tr -d '\n' < "$OUT.last")" >> "$OUT"
  done
  n=$((n + 1))
done
"""


KILLS = 6


@pytest.mark.slow
def test_kill_9_at_random_points_of_claim_and_sync_over_http(tmp_path: Path, http: Served) -> None:
    # A slow server widens the window in which a kill lands while a push is in flight.
    http.hook("pre-receive", "#!/bin/sh\ncat >/dev/null\nsleep 0.1\n")
    a = machine(tmp_path, "a", http.url, publish=True)
    b = machine(tmp_path, "b", http.url)
    out = tmp_path / "worker.log"
    env = {**os.environ, "GW": gw_program(tmp_path), "OUT": str(out)}
    rng = random.Random(int(os.environ.get("GW_TEST_SEED", "0")) or None)
    locks: list[str] = []
    for kills in range(1, KILLS + 1):
        done_before = len(log_lines(out))
        worker = subprocess.Popen(["bash", "-c", WORKER], cwd=a, env=env, start_new_session=True)
        try:
            # Let it finish at least one command, then kill it at a random moment of the next ones.
            poll(lambda done_before=done_before, worker=worker: len(log_lines(out)) > done_before or worker.poll() is not None, "the worker's progress")
            assert worker.wait(timeout=rng.uniform(0.0, 1.0)) is None, "the worker loop ended by itself"
        except subprocess.TimeoutExpired:
            pass
        finally:
            os.killpg(worker.pid, signal.SIGKILL)  # the loop and the gw/git it runs right now
            worker.wait()
        # A kill inside git's own ref update leaves its lock. The tracking ref's is left for gw: the next
        # fetch removes it once it is old and no git of the clone runs (gitwork/stalelocks.py). Any other
        # (documented: exit 11 until a person removes it) goes here, as that person would remove it.
        tracking = a / ".git" / "refs" / "remotes" / "origin" / "gitwork" / "state.lock"
        for stale in (a / ".git").rglob("*.lock"):
            if stale == tracking:
                continue
            stale.unlink()
            locks.append(str(stale))
        # The arbiter's ref is never torn: it names a commit whose tree is all there.
        head = tip(http.bare)
        assert head and git(http.bare, "cat-file", "-t", f"{head}^{{tree}}") == "tree"
        if kills % 3 == 1:  # another machine moves the arbiter, so a's work must be replayed
            gw_ok(b, "new", f"from b after kill {kills}")
            gw_ok(b, "sync")

    rows = log_lines(out)
    assert rows, "nothing ran"
    odd = [(verb, rc, doc.get("message")) for verb, rc, doc in rows if rc not in (OK, 3, REMOTE)]
    assert odd == [], odd
    # What was cut short with "outcome unknown" is answered by gw retry; then a sync converges.
    unknown = sorted((a / ".git" / "gitwork" / "unknown").glob("*.json"))
    for kept in unknown:
        done = run_gw(a, "retry", kept.stem, "--json")
        assert done.returncode in (OK, HELD, STALE), done.stdout + done.stderr
    report = gw_ok(a, "sync")
    gw_ok(b, "sync")
    assert tip(a) == tip(b) == tip(http.bare)
    # Nothing acknowledged is lost: every command that exited 0 is on the arbiter, once.
    on_arbiter = command_ids(http.bare)
    acknowledged = [doc["command_id"] for verb, rc, doc in rows if rc == OK and verb in ("new", "claim")]
    assert [c for c in acknowledged if c not in on_arbiter] == []
    refused = {entry.get("command_id") for entry in report["refused"]}
    assert refused.isdisjoint(acknowledged)
    assert_grants_linear(http.bare)
    assert_sound(http.bare)
    print(f"\n{kills} SIGKILLs, {len(rows)} commands, {len(unknown)} retried, stale locks removed: {locks}")


# --- 5: hostile answers: a server that goes away mid-push, hooks that print garbage -----------------

STALL = """#!/bin/sh
{guard}
touch "{marker}"
sleep 60
"""
BEFORE_THE_REF_MOVES = ("pre-receive", "cat >/dev/null")
AFTER_THE_REF_MOVED = ("reference-transaction",
                       '[ "$1" = committed ] || exit 0\ngrep -q refs/gitwork/state || exit 0')


@pytest.mark.slow
@pytest.mark.parametrize("when", ["before-the-ref-moves", "after-the-ref-moved"])
def test_http_server_gone_in_the_middle_of_a_claim(tmp_path: Path, http: Served, when: str) -> None:
    a = machine(tmp_path, "a", http.url, publish=True)
    x = new_item(a, "X")
    gw_ok(a, "sync")
    before, local = tip(http.bare), tip(a)
    marker = tmp_path / "in-the-server"
    name, guard = BEFORE_THE_REF_MOVES if when == "before-the-ref-moves" else AFTER_THE_REF_MOVED
    stall = http.hook(name, STALL.format(guard=guard, marker=marker))

    claiming = subprocess.Popen([gw_program(tmp_path), "claim", x, "--as", "alice", "--json"], cwd=a,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    poll(lambda: marker.exists() or claiming.poll() is not None, "the push reaching the server")
    assert claiming.poll() is None, claiming.communicate()
    http.stop()  # the listener, http-backend, receive-pack and the hook: the connection drops
    out, err = claiming.communicate(timeout=60)
    landed = tip(http.bare) != before
    assert landed == (when == "after-the-ref-moved")
    if claiming.returncode == OK:  # (git can read a good report before the server died)
        assert landed and json.loads(out)["commit"] == tip(http.bare)
        return
    assert claiming.returncode == REMOTE, out + err
    line = one_line(err)
    error = json.loads(out)
    command_id = error["details"]["command_id"]
    assert command_id in line and "outcome unknown" in line and "origin" in line
    assert len(line) < 1000
    assert tip(a) == local

    stall.unlink()
    http.start()
    again = gw_ok(a, "retry", command_id, env={"GW_NOW": later(minutes=1)})
    assert again["command_id"] == command_id and again.get("duplicate", False) == landed
    assert (again["holder"], again["fence"]) == ("alice", 1)
    assert command_ids(http.bare).count(command_id) == 1
    assert tip(a) == tip(http.bare)
    assert_grants_linear(http.bare)
    assert_sound(http.bare)


# Printed by a refusing hook: terminal escapes (clear screen, set the title, a hyperlink), a bell,
# a carriage return that hides text, NUL, C1 controls, Unicode line separators, bidi overrides, and
# bytes that are not UTF-8.
GARBAGE = (b"\x1b[2J\x1b[H\x1b]0;owned\x07\x1b]8;;http://evil.invalid\x1b\\link\x1b]8;;\x1b\\ quota\rHIDDEN"
           b"\x08\x08\x7f \xc2\x85nel \xe2\x80\xa8ls \xe2\x80\xa9ps \xe2\x80\xaertl \xc2\x9b31m \x9b31m \xff\xfe bad"
           b" \x0bvt \x0cff \x1c\x1d\x1e fs\x00after nul")

# Text that reads differently than it is (bidi overrides and isolates, zero-width marks) and C1 controls.
BIDI = (b"quota \xe2\x80\xaedesrever\xe2\x80\xac \xe2\x81\xa6isolate\xe2\x81\xa9 \xe2\x80\x8fmark"
        b" \xc2\x9b31mcsi \xc2\x90dcs end")


def refusing_hook(body: str) -> str:
    return f"#!/bin/sh\ncat >/dev/null\n{body}\nexit 1\n"


HOSTILE = {
    "control-characters": "cat '{garbage}' >&2",
    "one-megabyte-line": "head -c 1048576 /dev/zero | tr '\\0' 'x' >&2; echo >&2",
    "a-megabyte-of-lines": "yes 'quota exceeded, and again' | head -c 1048576 >&2",
    "nothing-at-all": ":",
}


def printable(line: str) -> bool:
    """No control character, no Unicode line or paragraph separator, no bidi control."""
    return not re.search("[\x00-\x1f\x7f-\x9f\u2028\u2029\u200e\u200f\u202a-\u202e\u2066-\u2069]", line)


@pytest.mark.slow
def test_a_hook_printing_garbage_gets_one_bounded_line(tmp_path: Path, http: Served) -> None:
    a = machine(tmp_path, "a", http.url, publish=True)
    x = new_item(a, "X")
    gw_ok(a, "sync")
    new_item(a, "pending")
    before, local = tip(http.bare), tip(a)
    garbage = tmp_path / "garbage"
    garbage.write_bytes(BIDI + b"\n" + GARBAGE + b"\n" + GARBAGE + b"\n")
    for answer, body in sorted(HOSTILE.items()):
        http.hook("pre-receive", refusing_hook(body.replace("{garbage}", str(garbage))))
        for args in (("claim", x, "--as", "alice"), ("sync",)):
            done = run_gw(a, *args, "--json")
            assert done.returncode == REMOTE_REFUSED, (answer, done.stdout[:2000] + done.stderr[:2000])
            line = one_line(done.stderr)
            assert line.startswith("gw: remote-refused: ") and printable(line) and len(line) <= 2000, (answer, line)
            error = json.loads(done.stdout)
            assert error["error"] == "remote-refused" and printable(error["message"]), answer
            assert len(error["message"]) <= 2000, answer
            assert all(printable(said) and len(said) <= 300 for said in error["details"].get("said", [])), answer
            assert len(done.stdout) < 10_000, answer
            if answer == "a-megabyte-of-lines":
                assert "quota exceeded" in line
            assert tip(http.bare) == before and tip(a) == local, answer


def test_what_a_remote_said_is_cleaned_and_bounded() -> None:
    """The reading of git's stderr itself: escapes dropped, controls blanked, nothing after a NEL lost."""
    from gitwork.sync import git_reason, remote_said

    err = ("remote: \x1b]0;title\x07before\x85after \u202eevil\u202c\r"
           "remote: next\x1b[31m red\n" + "remote: " + "y" * 1_000_000 + "\nerror: failed to push some refs\n")
    said = remote_said(err)
    assert said[:2] == ["before after  evil", "next red"]
    assert all(printable(line) and len(line) <= 300 for line in said)
    assert len(said[2]) == 300 and said[2].endswith("...")
    assert git_reason(err).startswith("remote said: before after")
    assert remote_said("remote: a\n" * 1000) == ["a"] * 5


def test_a_fetch_killed_mid_update_is_a_lock_not_an_unreachable_remote(tmp_path: Path, http: Served) -> None:
    """kill -9 of a fetch can leave the tracking ref's lock behind. While it is young (a live fetch's,
    for all gw knows) that is exit 11 naming the file, not exit 12 "outcome unknown, run gw sync again";
    an old one no git of the clone holds is removed (tests/test_arbiter_stale_lock.py)."""
    a = machine(tmp_path, "a", http.url, publish=True)
    b = machine(tmp_path, "b", http.url)
    new_item(a, "pending")
    new_item(b, "moves the arbiter")
    gw_ok(b, "sync")  # so a's fetch has to move its tracking ref
    local, published = tip(a), tip(http.bare)
    lock = a / ".git" / "refs" / "remotes" / "origin" / "gitwork" / "state.lock"
    lock.write_text("")  # what git leaves when killed between creating the lock and renaming it
    done = run_gw(a, "sync", "--json", env={"GW_LOCK_TIMEOUT": "0.5"})
    assert done.returncode == 11, done.stdout + done.stderr
    line = one_line(done.stderr)
    assert str(lock) in line and "outcome unknown" not in line
    assert json.loads(done.stdout)["details"]["lock"] == str(lock)
    assert (tip(a), tip(http.bare)) == (local, published) and lock.exists()  # a young lock is left alone
    lock.unlink()
    gw_ok(a, "sync")
    assert tip(a) == tip(http.bare)


@pytest.mark.slow
def test_a_paused_server_is_outcome_unknown_not_an_internal_error(
        tmp_path: Path, http: Served, monkeypatch: pytest.MonkeyPatch) -> None:
    """A server that stops answering (SIGSTOPped: the connection stays open, nothing comes back) is
    exit 12 "outcome unknown" naming the command once git gives up, never exit 1 "git timed out"."""
    from gitwork import sync
    from gitwork.errors import ExitCode, GwError
    from gitwork.workplane import Workplane

    a = machine(tmp_path, "a", http.url, publish=True)
    x = new_item(a, "X")
    gw_ok(a, "sync")
    before, local = tip(http.bare), tip(a)
    monkeypatch.setattr(sync.transport, "REMOTE_TIMEOUT", 2.0)
    assert http.server is not None and http.server.proc is not None
    server_group = http.server.proc.pid
    os.killpg(server_group, signal.SIGSTOP)  # our own server's group
    try:
        with Workplane(str(a), agent="alice") as plane:
            with pytest.raises(GwError) as caught:
                plane.do("claim", item=x)
        assert tip(a) == local and tip(http.bare) == before  # (once resumed, the server may finish it)
    finally:
        os.killpg(server_group, signal.SIGCONT)
    error = caught.value
    assert error.code == ExitCode.REMOTE, error
    assert error.details["outcome"] == "unknown" and error.details["command_id"] in error.message
    assert "did not answer" in error.message and "\n" not in error.message
    again = gw_ok(a, "retry", error.details["command_id"])
    assert again["holder"] == "alice" and tip(a) == tip(http.bare)


@pytest.mark.slow
def test_a_paused_arbiter_stalls_a_coordinator_pass_a_quarter_of_its_ttl_not_two_minutes(
        tmp_path: Path, http: Served) -> None:
    """attack12: each coordinator pass read the arbiter (and pushed its ends) with the 120 s a command
    waits, before it checked its own lease: a paused arbiter stalled every pass long enough to lose the
    coordinator's lease and its agents'. The pass's own read now waits a quarter of the coordinator's
    ttl, then goes on with the local view and says so (``fetch-error``)."""
    from gitwork.launch.coordinate import CoordinatorLease, tick
    from gitwork.workplane import Workplane

    a = machine(tmp_path, "a", http.url, publish=True)
    assert http.server is not None and http.server.proc is not None
    with Workplane(str(a), agent="alice") as plane:
        lease = CoordinatorLease(plane, ttl=8)
        lease.take()
        os.killpg(http.server.proc.pid, signal.SIGSTOP)
        try:
            done = tick(plane, coordinator=lease)
        finally:
            os.killpg(http.server.proc.pid, signal.SIGCONT)
    assert done[0]["action"] == "fetch-error" and done[0]["error"] == "remote-unreachable", done
    assert "did not answer within 2s" in done[0]["message"], done


# What a hostile or misconfigured HTTP server answers, and the exit code it must give.
CANNED = {
    "401-authentication": (b"401 text/plain", b"who are you?", REMOTE_REFUSED),
    "403-forbidden": (b"403 text/plain", b"forbidden \x1b[31mred\x1b[0m", REMOTE_REFUSED),
    "500-with-garbage": (b"500 text/plain", BIDI + b"\n" + GARBAGE, REMOTE),
    "502-a-megabyte": (b"502 text/plain", b"y" * 1_048_576, REMOTE),
    "200-not-git": (b"200 application/x-git-receive-pack-advertisement", b"\x1b[2Jnot pkt-lines at all", REMOTE),
}


@pytest.mark.slow
def test_an_http_server_answering_nonsense_or_no(tmp_path: Path, http: Served) -> None:
    """Denied (401/403) is a refusal, exit 14, nothing kept for a retry: nothing landed and asking
    again gets the same answer. Anything else broken is exit 12. Either way: one clean, bounded line."""
    a = machine(tmp_path, "a", http.url, publish=True)
    x = new_item(a, "X")
    gw_ok(a, "sync")
    new_item(a, "pending")
    before, local = tip(http.bare), tip(a)
    unknown = a / ".git" / "gitwork" / "unknown"
    for answer, (status, body, code) in sorted(CANNED.items()):
        (http.bare.parent / "answer").write_bytes(status + b"\n" + body)
        for args in (("claim", x, "--as", "alice"), ("sync",)):
            done = run_gw(a, *args, "--json")
            assert done.returncode == code, (answer, done.stdout[:2000] + done.stderr[:2000])
            line = one_line(done.stderr)
            assert printable(line) and len(line) <= 1000, (answer, line)
            assert json.loads(done.stdout)["code"] == code
            assert tip(http.bare) == before and tip(a) == local, answer
        kept = list(unknown.glob("*.json"))
        assert len(kept) == (1 if code == REMOTE else 0), answer
        for path in kept:
            path.unlink()
    (http.bare.parent / "answer").unlink()
    assert gw_ok(a, "claim", x, "--as", "alice")["fence"] == 1
    assert tip(a) == tip(http.bare)


def test_the_servers_own_verdict_is_cleaned_too(tmp_path: Path) -> None:
    """git's porcelain verdict carries the server's words (a proc-receive hook chooses them)."""
    from gitwork.sync import Arbiter
    from gitwork.workplane import Workplane

    a = machine(tmp_path, "a", f"file://{make_repo(tmp_path / 'r.git', bare=True)}")
    with Workplane(str(a)) as plane:
        refused = Arbiter(plane)._refused("[remote rejected] (\x1b]0;owned\x07no \u202eway\x9b) " + "z" * 5000, "")
    assert printable(refused.message) and len(refused.message) < 500
    assert refused.details["reason"].startswith("[remote rejected] (no  way")


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["path"])
def test_a_lock_left_on_the_arbiter_is_exit_11_not_200_lost_races(tmp_path: Path, kind: str) -> None:
    """A push killed inside the server (over a path, receive-pack dies with its client's process
    group) can leave the arbiter's ref lock behind. Every later push then finds the ref locked: that
    was 200 "lost races" (~40 s) and exit 75, which a shell loop retries forever."""
    served = Served(kind, tmp_path)
    try:
        a = machine(tmp_path, "a", served.url, publish=True)
        x = new_item(a, "X")
        gw_ok(a, "sync")
        new_item(a, "pending")
        before, local = tip(served.bare), tip(a)
        lock = served.bare / "refs" / "gitwork" / "state.lock"
        lock.write_text("")
        for args in (("claim", x, "--as", "alice"), ("sync",)):
            done = run_gw(a, *args, "--json", env={"GW_LOCK_TIMEOUT": "0.5"}, timeout=30)
            assert done.returncode == 11, done.stdout + done.stderr
            line = one_line(done.stderr)
            assert "state.lock" in line and "origin" in line and "lost races" not in line
            assert json.loads(done.stdout)["details"]["remote"] == "origin"
            assert tip(served.bare) == before and tip(a) == local and lock.exists()
        assert not (a / ".git" / "gitwork" / "unknown").exists()  # nothing landed: nothing to retry
        lock.unlink()
        assert gw_ok(a, "claim", x, "--as", "alice")["fence"] == 1
        assert tip(a) == tip(served.bare)
        assert_sound(served.bare)
    finally:
        served.stop()


def test_a_foreign_state_on_the_arbiter_is_not_adopted(tmp_path: Path) -> None:
    """Someone force-pushed a commit gitwork did not write onto the arbiter's state ref. Replaying
    onto it refused every local command and adopted it (exit 0): acknowledged local work dropped."""
    served = Served("path", tmp_path)
    a = machine(tmp_path, "a", served.url, publish=True)
    x = new_item(a, "X")
    made = gw_ok(a, "new", "acknowledged, not yet synced")
    local = tip(a)
    bare = served.bare
    foreign = git(bare, "-c", "user.name=x", "-c", "user.email=x@x.invalid", "commit-tree",
                  git(bare, "mktree", input=b""), "-m", "not a gitwork state")
    git(bare, "update-ref", STATE, foreign)
    for args in (("sync",), ("claim", x, "--as", "alice")):
        done = run_gw(a, *args, "--json")
        assert done.returncode == 8, done.stdout + done.stderr
        line = one_line(done.stderr)
        assert "origin" in line and "format.yaml" in line
        assert tip(a) == local and tip(bare) == foreign
    assert gw_ok(a, "show", made["item"])["title"] == "acknowledged, not yet synced"


MAX_RSS = """
import resource, subprocess, sys
done = subprocess.run(sys.argv[1:], capture_output=True, text=True)
sys.stdout.write(f"{done.returncode} {resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss}\\n")
sys.stdout.write(done.stderr)
"""


HOOK_OUTPUT = 10_000_000  # bytes the refusing hook prints
PEAK_BOUND_KB = 48_000  # gw's peak RSS (and its git client's): ~16 MB bounded, ~17 x HOOK_OUTPUT unbounded


@pytest.mark.slow
def test_a_hook_printing_tens_of_megabytes_is_read_in_bounded_memory(tmp_path: Path, http: Served) -> None:
    """git relays everything a hook prints; gw kept all of it, several times over (300 MB of output
    took 4.8 GB). Over HTTP the server's processes are not ours, so the peak measured is gw's (and
    its git client's).

    The sizes (issue 26, CPU): gw bounded peaks at ~16 MB whatever the hook prints; with everything kept
    it peaked at ~17 times the output (re-planted in a scratch copy, 2026-12-03: 10 MB -> 169-184 MB,
    40 MB -> 596-688 MB). 10 MB against a 48 MB bound fails any regression keeping more than ~3.2 times
    the output (40 MB against 150 MB: ~3.4 times), for a quarter of the relaying's CPU."""
    a = machine(tmp_path, "a", http.url, publish=True)
    new_item(a, "pending")
    before = tip(http.bare)
    http.hook("pre-receive", refusing_hook(f"yes 'quota exceeded' | head -c {HOOK_OUTPUT} >&2"))
    done = subprocess.run([sys.executable, "-c", MAX_RSS, gw_program(tmp_path), "sync"], cwd=a,
                          capture_output=True, text=True, timeout=120)
    status, _, stderr = done.stdout.partition("\n")
    code, peak_kb = map(int, status.split())
    assert code == REMOTE_REFUSED, stderr
    assert "quota exceeded" in one_line(stderr)
    assert peak_kb < PEAK_BOUND_KB, f"peak RSS {peak_kb} kB for {HOOK_OUTPUT} bytes of hook output"
    assert tip(http.bare) == before


def test_only_work_under_an_ended_arbiter_grant_is_refused_locally(tmp_path: Path) -> None:
    """The early refusal is exact: a live lease with local commands pending, and a tentative
    (--offline) lease the arbiter never saw, keep working; only the grant the arbiter ended stops."""
    served = Served("path", tmp_path)
    a = machine(tmp_path, "a", served.url, publish=True)
    x = new_item(a, "X", "-c", "first")
    z = new_item(a, "Z", "-c", "first")
    gw_ok(a, "sync")
    b = machine(tmp_path, "b", served.url)
    fence = gw_ok(a, "claim", x, "--as", "alice")["fence"]
    new_item(a, "pending locally")  # the local ref is ahead of what the arbiter knows
    gw_ok(a, "msg", x, "still mine", "--fence", str(fence), "--as", "alice")
    tentative = gw_ok(a, "claim", z, "--offline", "--as", "alice")["fence"]
    gw_ok(a, "msg", z, "tentative", "--fence", str(tentative), "--as", "alice")

    gw_ok(b, "takeover", x, "--as", "bob", env={"GW_NOW": later(days=1)})
    renewed = run_gw(a, "renew", x, "--fence", str(fence), "--as", "alice", "--json")
    assert renewed.returncode == STALE, renewed.stdout + renewed.stderr  # the arbiter said so; a fetched
    for args in (("check", x, "1"), ("msg", x, "after the takeover")):
        done = run_gw(a, *args, "--fence", str(fence), "--as", "alice", "--json")
        assert done.returncode == STALE, done.stdout + done.stderr
        assert "bob" in one_line(done.stderr)
    gw_ok(a, "check", z, "1", "--fence", str(tentative), "--as", "alice")  # not the arbiter's to end


def test_http_server_round_trip(tmp_path: Path, http_server: GitHTTPServer) -> None:
    """The helper itself: push and fetch through it; stopped, it refuses (exit 12); restarted, it is
    back on the same port, so the URL the clones recorded still works."""
    bare = served_repo(http_server.root, "r")
    a = machine(tmp_path, "a", http_server.url("r"), publish=True)
    assert git(bare, "rev-parse", STATE) == tip(a)
    port = http_server.port
    http_server.stop()
    assert run_gw(a, "sync").returncode == REMOTE
    http_server.start()
    assert http_server.port == port
    new_item(a, "after the restart")
    gw_ok(a, "sync")
    assert tip(bare) == tip(a)
