"""Several processes posting to one thread at once: every acknowledged post is in the log exactly once.

Library writers (a tight loop each, for contention) and real ``gw msg`` processes race on the same
ref; some re-send a post that already landed, as a client does when the reply was lost. Afterwards
the thread must hold each acknowledged post once, numbered gaplessly, at the number it was told.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

from conftest import git, gw_cmd, let_post
from gitwork.workplane import Workplane

WRITER = r"""
import json, os, sys, time
from gitwork.workplane import Workplane
repo, item, who, count, gate = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), sys.argv[5]
open(gate + "." + who, "w").close()  # started: waiting at the gate
while not os.path.exists(gate):
    time.sleep(0.005)
wp = Workplane(repo, agent=who)
for n in range(count):
    msg_id = f"{who}-{n}"
    got = wp.post(item, f"{who} post {n}", msg_id=msg_id)
    print(json.dumps({"id": msg_id, "seq": got.result["seq"], "attempts": got.attempts}), flush=True)
    if n % 4 == 3:  # the reply was "lost": send the same post again
        again = wp.post(item, f"{who} post {n}", msg_id=msg_id)
        assert again.result["duplicate"] and again.result["seq"] == got.result["seq"], again.result
wp.close()
"""


def test_concurrent_posters_each_land_exactly_once(repo: Path, wp: Workplane, tmp_path: Path):
    item = wp.do("new", title="busy thread").result["item"]
    let_post(repo, *(f"lib{k}" for k in range(5)), *(f"cli{k}" for k in range(3)))  # the racing posters may post
    gate = tmp_path / "go"
    writers = [
        subprocess.Popen([sys.executable, "-c", WRITER, str(repo), item, f"lib{k}", "12", str(gate)],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        for k in range(5)
    ]
    deadline = time.monotonic() + 60  # every writer started and waits at the gate (a bounded poll)
    while not all((tmp_path / f"go.lib{k}").exists() for k in range(5)):
        assert time.monotonic() < deadline, "writers did not start"
        time.sleep(0.01)
    gate.touch()
    cli = []
    for k in range(3):
        for n in range(3):
            cli.append((f"cli{k}-{n}", subprocess.Popen(
                gw_cmd("msg", item, f"cli{k} post {n}", "--id", f"cli{k}-{n}", "--json"),
                cwd=repo, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                env={**os.environ, "GW_AGENT": f"cli{k}"})))
    told: dict[str, int] = {}
    for proc in writers:
        out, err = proc.communicate(timeout=300)
        assert proc.returncode == 0, err
        for line in out.splitlines():
            record = json.loads(line)
            told[record["id"]] = record["seq"]
    for msg_id, proc in cli:
        out, err = proc.communicate(timeout=300)
        assert proc.returncode == 0, err
        told[msg_id] = json.loads(out)["seq"]
    assert len(told) == 5 * 12 + 9

    records = wp.thread(item)[1]
    ids = Counter(r["id"] for r in records)
    assert all(ids[msg_id] == 1 for msg_id in told), [m for m in told if ids[m] != 1]
    assert len(records) == len(told)  # nothing that was not acknowledged
    assert [r["seq"] for r in records] == list(range(1, len(told) + 1))
    assert {r["id"]: r["seq"] for r in records} == told  # each at the number its writer was told
    # Each writer's own posts keep their order; one commit per post on a single first-parent chain.
    for k in range(5):
        seqs = [told[f"lib{k}-{n}"] for n in range(12)]
        assert seqs == sorted(seqs)
    history = git(repo, "rev-list", "--first-parent", "refs/gitwork/state").split()
    assert len(history) == 2 + len(told) == len(git(repo, "rev-list", "refs/gitwork/state").split())
