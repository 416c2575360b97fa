"""Trust in the arbiter remote (issue 8): acknowledged work is never dropped, refusals say why.

Each machine is a real clone driven by the real ``gw`` in child processes, the arbiter a real bare
repository; hooks that refuse or stall a push are real scripts in that bare repository.
"""

from __future__ import annotations

import datetime as dt
import json
import subprocess
import time
from pathlib import Path

import pytest

from conftest import gw_cmd, run_gw, tip
from test_sync import STATE, TRACKING, command_ids, gw_ok, gw_refused, machine, new_item, show

REMOTE, REMOTE_REFUSED, NOT_FOUND, ILLEGAL, STALE, HELD = 12, 14, 3, 6, 7, 75




def hook(bare: Path, name: str, body: str) -> Path:
    path = bare / "hooks" / name
    path.write_text(body)
    path.chmod(0o755)
    return path


def refused_ids(report: dict) -> dict[str, dict]:
    return {entry.get("command_id"): entry for entry in report["refused"]}


def wait_for(path: Path, proc: subprocess.Popen[str], what: str, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while not path.exists():
        assert proc.poll() is None, f"{what}: the command ended first: {proc.communicate()}"
        assert time.monotonic() < deadline, f"{what}: not reached in {timeout} s"
        time.sleep(0.02)


# --- 2: offline work under a grant replayed with a new fence -------------------------------------


def test_offline_work_follows_its_grant_to_the_new_fence(tmp_path: Path, remote: Path, url: str,
                                                         machine_a: Path) -> None:
    a = machine_a
    x = new_item(a, "X", "-c", "the first criterion")
    y = new_item(a, "Y")
    gw_ok(a, "sync")
    b = machine(tmp_path, "b", url)

    claimed = gw_ok(a, "claim", x, "--offline", "--as", "alice")
    checked = gw_ok(a, "check", x, "1", "--as", "alice")
    posted = gw_ok(a, "msg", x, "half way there", "--as", "alice")
    assert checked["command_id"] and posted["command_id"]
    other = gw_ok(b, "claim", y, "--as", "bob")
    assert other["fence"] == claimed["fence"] == 1  # the arbiter drew alice's offline number for bob

    report = gw_ok(a, "sync")
    assert report["refused"] == []
    assert {claimed["command_id"], checked["command_id"], posted["command_id"]} <= {
        e["command_id"] for e in report["replayed"]}
    lease = show(a, x)["lease"]
    assert (lease["holder"], lease["fence"], lease["grant"]) == ("alice", 2, claimed["command_id"])
    assert show(a, x)["criteria"][0]["checked"]
    on_remote = command_ids(remote)
    assert checked["command_id"] in on_remote and posted["command_id"] in on_remote
    assert tip(a) == tip(remote)


def test_offline_work_under_a_lost_grant_is_still_refused(tmp_path: Path, remote: Path, url: str,
                                                          machine_a: Path) -> None:
    """The grant, not the fence, pins the work: a grant that lost at the arbiter takes its work along."""
    a = machine_a
    x = new_item(a, "X", "-c", "the first criterion")
    gw_ok(a, "sync")
    b = machine(tmp_path, "b", url)
    claimed = gw_ok(a, "claim", x, "--offline", "--as", "alice")
    checked = gw_ok(a, "check", x, "1", "--as", "alice")
    gw_ok(b, "claim", x, "--as", "bob")

    refused = refused_ids(gw_refused(a, "sync"))
    assert set(refused) == {claimed["command_id"], checked["command_id"]}
    assert refused[checked["command_id"]]["error"] == "stale"
    assert not show(a, x)["criteria"][0].get("checked")


# --- 5 (sync side): a used command id with a different document ------------------------------------


def test_reused_command_id_for_another_document_is_refused_at_sync(tmp_path: Path, remote: Path, url: str,
                                                                   machine_a: Path) -> None:
    a = machine_a
    b = machine(tmp_path, "b", url)
    reused = "c-00000000000000c1"
    (a / "new.json").write_text(json.dumps({"op": "new", "title": "from a", "id": reused}))
    (b / "new.json").write_text(json.dumps({"op": "new", "title": "from b", "id": reused}))
    gw_ok(a, "apply", "new.json")
    gw_ok(a, "sync")
    from_b = gw_ok(b, "apply", "new.json")

    report = gw_refused(b, "sync")
    refused = refused_ids(report)
    assert set(refused) == {reused}
    assert refused[reused]["error"] == "conflict" and refused[reused]["code"] == 5
    assert refused[reused]["item"] == from_b["item"]
    assert command_ids(remote).count(reused) == 1
    status = gw_ok(b, "status")
    assert reused in {e.get("command_id") for e in status["refused"]}


# --- 9: a hook that refuses the push -------------------------------------------------------------


def test_a_refusing_hook_is_reported_with_its_reason_and_not_retried(tmp_path: Path, remote: Path,
                                                                     url: str, machine_a: Path) -> None:
    a = machine_a
    item = new_item(a, "Quota")
    gw_ok(a, "sync")
    calls = tmp_path / "hook-calls"
    hook(remote, "pre-receive", f"#!/bin/sh\ncat >/dev/null\necho run >> '{calls}'\n"
                                "echo 'quota exceeded for this repository' >&2\nexit 1\n")
    local, published = tip(a), tip(remote)

    done = run_gw(a, "claim", item, "--as", "alice", "--json")
    assert done.returncode == REMOTE_REFUSED, done.stdout + done.stderr
    error = json.loads(done.stdout)
    assert error["error"] == "remote-refused" and "quota exceeded" in error["message"]
    assert "origin" in error["message"]
    assert [line for line in done.stderr.splitlines() if line.strip()] == [
        line for line in done.stderr.splitlines() if line.startswith("gw: remote-refused:")]
    assert "quota exceeded" in done.stderr
    assert calls.read_text().splitlines() == ["run"]  # asked once: a refusal is not a lost race
    assert tip(remote) == published and tip(a) == local

    new_item(a, "pending")
    synced = run_gw(a, "sync")
    assert synced.returncode == REMOTE_REFUSED, synced.stderr
    assert "quota exceeded" in synced.stderr
    assert len(calls.read_text().splitlines()) == 2
    assert tip(remote) == published


# --- 14 and 18: refusals made while a lease command replays ------------------------------------


def test_a_lease_command_reports_what_its_replay_refused(tmp_path: Path, remote: Path, url: str,
                                                         machine_a: Path) -> None:
    a = machine_a
    x = new_item(a, "X")
    y = new_item(a, "Y")
    gw_ok(a, "sync")
    b = machine(tmp_path, "b", url)
    tentative = gw_ok(a, "claim", x, "--offline", "--as", "alice")
    gw_ok(b, "claim", x, "--as", "bob")

    done = run_gw(a, "claim", y, "--as", "alice", "--json")
    assert done.returncode == 0, done.stdout + done.stderr
    result = json.loads(done.stdout)
    assert [e["command_id"] for e in result["refused"]] == [tentative["command_id"]]
    assert result["refused"][0]["error"] == "held"
    assert tentative["command_id"] in done.stderr and "refused" in done.stderr
    assert result["item"] == y and tip(a) == tip(remote)


def test_each_refused_command_is_recorded_once(tmp_path: Path, remote: Path, url: str, machine_a: Path) -> None:
    a = machine_a
    x = new_item(a, "X")
    gw_ok(a, "sync")
    b = machine(tmp_path, "b", url)
    tentative = gw_ok(a, "claim", x, "--offline", "--as", "alice")
    gw_ok(b, "claim", x, "--as", "bob")
    for _ in range(3):  # each attempt replays (and refuses) the tentative claim again
        assert run_gw(a, "claim", x, "--as", "alice").returncode == HELD
    gw_refused(a, "sync")  # exit 15: reported by this run
    gw_ok(a, "sync")  # already reported: exit 0

    lines = (a / ".git" / "gitwork" / "refused.jsonl").read_text().splitlines()
    recorded = [json.loads(line).get("command_id") for line in lines]
    assert recorded == [tentative["command_id"]]


# --- 15: a grant the arbiter accepted is always adopted -------------------------------------------

STALL = """#!/bin/sh
cat >/dev/null
[ -e "{armed}" ] || exit 0
rm -f "{armed}"
touch "{inside}"
n=0
while [ ! -e "{go}" ] && [ $n -lt 1200 ]; do sleep 0.05; n=$((n + 1)); done
exit 0
"""


def test_grant_is_adopted_although_the_local_ref_moved(tmp_path: Path, remote: Path, url: str, machine_a: Path) -> None:
    a = machine_a
    x = new_item(a, "X", "-c", "the first criterion")
    gw_ok(a, "sync")
    armed, inside, go = tmp_path / "armed", tmp_path / "inside", tmp_path / "go"
    hook(remote, "pre-receive", STALL.format(armed=armed, inside=inside, go=go))
    armed.touch()

    claiming = subprocess.Popen(gw_cmd("claim", x, "--as", "alice", "--json"), cwd=a, text=True,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        wait_for(inside, claiming, "the claim's push")
        meanwhile = gw_ok(a, "new", "created while the claim was pushing")
    finally:
        go.touch()
    out, err = claiming.communicate(timeout=120)
    assert claiming.returncode == 0, out + err
    claimed = json.loads(out)

    # Without any further command, the local state knows the grant and kept the other command.
    lease = show(a, x)["lease"]
    assert (lease["holder"], lease["fence"], lease["grant"]) == ("alice", claimed["fence"], claimed["command_id"])
    assert show(a, meanwhile["item"])["title"] == "created while the claim was pushing"
    gw_ok(a, "check", x, "1", "--fence", str(claimed["fence"]), "--as", "alice")
    report = gw_ok(a, "sync")
    assert report["refused"] == []
    assert meanwhile["command_id"] in command_ids(remote)


def test_fenced_command_catches_up_with_the_tracking_ref(tmp_path: Path, remote: Path, url: str,
                                                         machine_a: Path) -> None:
    a = machine_a
    x = new_item(a, "X", "-c", "the first criterion")
    gw_ok(a, "sync")
    local = tip(a)
    died = run_gw(a, "claim", x, "--as", "alice", env={"GW_CRASH_AT": "after-push"})
    assert died.returncode < 0  # killed once the grant was on the arbiter
    assert tip(a) == local and tip(a, TRACKING) == tip(remote) != local

    checked = run_gw(a, "check", x, "1", "--fence", "1", "--as", "alice", "--json")
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert show(a, x)["criteria"][0]["checked"]
    assert gw_ok(a, "sync")["refused"] == []


# --- 16: every end of a lease is decided by the arbiter ---------------------------------------------


def test_done_lands_on_the_arbiter_so_nobody_redoes_the_item(tmp_path: Path, remote: Path, url: str) -> None:
    carol = machine(tmp_path, "carol", url, publish=True)
    x = new_item(carol, "Short lease")
    gw_ok(carol, "sync")
    dave = machine(tmp_path, "dave", url)
    claimed = gw_ok(carol, "claim", x, "--ttl", "1m", "--as", "carol")
    finished = gw_ok(carol, "done", x, "--as", "carol")
    assert tip(remote) == finished["commit"]  # decided by the arbiter, not tentatively

    later = (dt.datetime.now(dt.timezone.utc) + dt.timedelta(days=1)).strftime("%Y-%m-%dT%H:%M:%SZ")
    taken = run_gw(dave, "claim", x, "--as", "dave", "--json", env={"GW_NOW": later})
    assert taken.returncode == ILLEGAL, taken.stdout + taken.stderr  # done, not merely expired
    assert gw_ok(carol, "sync")["refused"] == []
    assert show(carol, x)["status"] == "done"
    assert claimed["command_id"] in command_ids(remote)


def test_cancel_of_a_lease_taken_elsewhere_is_refused_at_once(tmp_path: Path, remote: Path, url: str) -> None:
    carol = machine(tmp_path, "carol", url, publish=True)
    x = new_item(carol, "Cancelled")
    gw_ok(carol, "sync")
    dave = machine(tmp_path, "dave", url)
    gw_ok(dave, "claim", x, "--as", "dave")
    # Carol's own view has no lease on x; the arbiter's has dave's, so her cancel is refused now.
    done = run_gw(carol, "cancel", x, "--as", "carol", "--json")
    assert done.returncode == STALE, done.stdout + done.stderr
    assert "dave" in json.loads(done.stdout)["message"]


# --- 17: exit 12 is "outcome unknown"; the same id answers once the arbiter is back ----------------

VANISH = """#!/bin/sh
[ "$1" = committed ] || exit 0
grep -q refs/gitwork/state || exit 0
here=$(pwd)
mv "$here" "$here.away"
kill -9 $PPID
"""


def test_outcome_unknown_names_the_command_and_retry_answers_it(tmp_path: Path, remote: Path, url: str,
                                                                machine_a: Path) -> None:
    a = machine_a
    x = new_item(a, "X")
    gw_ok(a, "sync")
    # The arbiter commits the grant, then dies and is gone before it can answer or be asked.
    hook(remote, "reference-transaction", VANISH)
    lost = run_gw(a, "claim", x, "--as", "alice", "--json")
    assert lost.returncode == REMOTE, lost.stdout + lost.stderr
    error = json.loads(lost.stdout)
    command_id = error["details"]["command_id"]
    assert command_id in error["message"] and "origin" in error["message"]
    assert "outcome unknown" in error["message"]
    assert "failed to push some refs" not in error["message"]
    assert command_id in lost.stderr and len(lost.stderr.strip().splitlines()) == 1
    away = remote.with_name(remote.name + ".away")
    assert away.is_dir()
    (away / "hooks" / "reference-transaction").unlink()
    away.rename(remote)
    assert command_ids(remote).count(command_id) == 1  # the grant had landed

    # A new command id would be told "held by you"; the same one is answered with its result. (A
    # minute later: re-applied within the same second, the claim would make the very same commit.)
    later = (dt.datetime.now(dt.timezone.utc) + dt.timedelta(minutes=1)).strftime("%Y-%m-%dT%H:%M:%SZ")
    again = gw_ok(a, "retry", command_id, env={"GW_NOW": later})
    assert again["command_id"] == command_id and again["duplicate"] is True
    assert (again["item"], again["holder"], again["fence"]) == (x, "alice", 1)
    assert command_ids(remote).count(command_id) == 1
    assert show(a, x)["lease"]["grant"] == command_id
    assert run_gw(a, "retry", command_id).returncode == NOT_FOUND  # answered: nothing left to retry


def test_retry_of_an_unknown_id_is_not_found(tmp_path: Path, remote: Path, url: str, machine_a: Path) -> None:
    a = machine_a
    done = run_gw(a, "retry", "c-00000000000000ff", "--json")
    assert done.returncode == NOT_FOUND, done.stdout + done.stderr
    assert json.loads(done.stdout)["error"] == "not-found"
    bad = run_gw(a, "retry", "../../etc/passwd")
    assert bad.returncode == 5, bad.stderr
    assert "passwd" not in bad.stdout
    assert tip(a) == tip(remote) and tip(a, STATE) is not None


def test_resending_a_tentative_lease_command_online_puts_it_on_the_arbiter(tmp_path: Path, remote: Path,
                                                                          url: str, machine_a: Path) -> None:
    """The same id answered from a local, unpublished commit is not "done": it is pushed first."""
    a = machine_a
    x = new_item(a, "X")
    gw_ok(a, "sync")
    tentative = gw_ok(a, "claim", x, "--offline", "--as", "alice")
    logged = gw_ok(a, "log", "-n", "1")[0]["command"]
    assert logged["id"] == tentative["command_id"]
    (a / "claim.json").write_text(json.dumps(logged))

    again = gw_ok(a, "apply", "claim.json")
    assert again["duplicate"] is True and again["fence"] == tentative["fence"]
    assert command_ids(remote).count(tentative["command_id"]) == 1
    assert tip(a) == tip(remote)


def test_giving_up_after_lost_races_is_exit_75_locally_and_on_the_arbiter(
        tmp_path: Path, remote: Path, url: str, monkeypatch: pytest.MonkeyPatch, machine_a: Path) -> None:
    """One meaning for "gave up after N lost races": held/lost the race, retry later (75)."""
    from gitwork import sync, workplane
    from gitwork.errors import ExitCode, GwError

    a = machine_a
    new_item(a, "X")
    before = tip(a)
    monkeypatch.setattr(workplane, "MAX_ATTEMPTS", 0)  # every race lost: the bound is reached at once
    monkeypatch.setattr(sync.replay, "MAX_ROUNDS", 0)
    with workplane.Workplane(str(a), agent="alice") as plane:
        for give_up in (lambda: plane.do("new", title="never"), lambda: plane.do("claim", next=True),
                        lambda: sync.Arbiter(plane).sync()):
            with pytest.raises(GwError) as caught:
                give_up()
            assert caught.value.code == ExitCode.HELD == 75, caught.value
            assert "lost races" in caught.value.message
    assert tip(a) == before
