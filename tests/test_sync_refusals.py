"""``gw sync`` fails (exit 15, ``sync-refused``) when it refused one of this clone's queued commands.

A shell loop (``gw sync && ...``) must not take a refused ``done --offline`` for delivered work. The
scenario runs through a real bare remote: machine A works offline under its lease and closes the item
with ``done --offline``; meanwhile machine B takes the item over on the arbiter. A's sync lands the
rest of its work and refuses the done: exit 15, the JSON report names the refused command and what
landed, nothing is lost (landed commands on the remote, the refused one in ``refused.jsonl``). A
refusal already reported does not fail the next sync.
"""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path

from conftest import run_gw, tip
from test_sync import command_ids, gw_ok, gw_refused, machine, new_item, show

SYNC_REFUSED = 15


def published_with_b(tmp_path: Path, url: str, a: Path, *titles: str) -> tuple[Path, list[str]]:
    """Items made on ``a`` and synced, then machine ``b`` cloned from the arbiter: (b, the items' ids)."""
    items = [new_item(a, title) for title in titles]
    gw_ok(a, "sync")
    return machine(tmp_path, "b", url), items


def test_a_refused_offline_done_fails_the_sync_and_loses_nothing(tmp_path: Path, remote: Path, url: str,
                                                                 machine_a: Path) -> None:
    a = machine_a
    b, (x, other) = published_with_b(tmp_path, url, a, "X", "Other")
    gw_ok(a, "claim", x, "--ttl", "10m", "--as", "alice")  # decided by the arbiter: alice holds x there

    # Offline: work, then close the item tentatively.
    made = gw_ok(a, "new", "Found while working on X", "--as", "alice")
    edited = gw_ok(a, "edit", other, "--priority", "0", "--as", "alice")
    done = gw_ok(a, "done", x, "--offline", "--as", "alice")
    # Meanwhile alice's lease expires by bob's clock and he takes x over on the arbiter.
    later = (dt.datetime.now(dt.timezone.utc) + dt.timedelta(hours=2)).strftime("%Y-%m-%dT%H:%M:%SZ")
    gw_ok(b, "takeover", x, "--as", "bob", env={"GW_NOW": later})

    report = gw_refused(a, "sync")
    assert report["code"] == SYNC_REFUSED and done["command_id"] in report["message"]
    # Each refused command: its id, op, item, kind and message.
    assert [(e["command_id"], e["op"], e["item"], e["error"]) for e in report["refused"]] == [
        (done["command_id"], "done", x, "stale")]
    assert report["refused"][0]["message"]
    # Everything else landed, and the report says so.
    landed = {e["command_id"] for e in report["replayed"]}
    assert {made["command_id"], edited["command_id"]} <= landed
    on_remote = command_ids(remote)
    assert made["command_id"] in on_remote and edited["command_id"] in on_remote
    assert done["command_id"] not in on_remote
    assert tip(remote) == tip(a)
    assert show(a, other)["priority"] == 0 and show(a, made["item"])["title"] == "Found while working on X"
    assert show(a, x)["status"] != "done" and show(a, x)["lease"]["holder"] == "bob"
    # The refused command is kept, and shown by gw status.
    kept = [json.loads(line) for line in (a / ".git" / "gitwork" / "refused.jsonl").read_text().splitlines()]
    assert [entry["command_id"] for entry in kept] == [done["command_id"]]
    assert done["command_id"] in {e["command_id"] for e in gw_ok(a, "status")["refused"]}

    # Reported once: the next sync has nothing new to refuse (exit 0), with and without --json.
    again = gw_ok(a, "sync")
    assert again["ok"] is True and again["refused"] == []
    plain = run_gw(a, "sync")
    assert plain.returncode == 0 and "sync-refused" not in plain.stderr


def test_a_sync_that_refuses_nothing_exits_0(tmp_path: Path, remote: Path, url: str, machine_a: Path) -> None:
    a = machine_a
    made = gw_ok(a, "new", "Made offline", "--as", "alice")
    report = gw_ok(a, "push")
    assert report["ok"] is True and report["refused"] == [] and "error" not in report
    assert made["command_id"] in {e["command_id"] for e in report["replayed"]} | set(command_ids(remote))
    assert tip(remote) == tip(a)


def test_plain_sync_names_the_refused_command_on_stderr(tmp_path: Path, remote: Path, url: str,
                                                        machine_a: Path) -> None:
    """Without --json: exit 15 and one ``gw: sync-refused:`` line naming the command (nothing on stdout)."""
    a = machine_a
    b, (x,) = published_with_b(tmp_path, url, a, "X")
    tentative = gw_ok(a, "claim", x, "--offline", "--as", "alice")
    gw_ok(b, "claim", x, "--as", "bob")
    done = run_gw(a, "pull")
    assert done.returncode == SYNC_REFUSED, done.stderr
    errors = [line for line in done.stderr.splitlines() if line.startswith("gw: sync-refused:")]
    assert len(errors) == 1 and tentative["command_id"] in errors[0]
    assert done.stdout == ""
