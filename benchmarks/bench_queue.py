"""The publisher of the publish queue: landing N queued sessions, beside the same landings done with plain git.

    PYTHONPATH=. python benchmarks/bench_queue.py [--sessions 5]

Data shape: a bare repository that is both the arbiter and the code remote, with the server hook
(`gw hooks install --server`); one clone where one identity holds ``--sessions`` items, each with a
committed session changing its own file, all queued (`gw publish --queue`). The world is copied, then
timed once each, on identical copies:

- ``gw queue work --once`` (one process): take the publisher lease, per session fetch the target and
  the session branch, merge with ``git merge-tree`` (the first is a fast-forward), run one gate
  (``true``) in a scratch worktree, push the branch and the ``queue-land`` record in one atomic push
  (the server hook derives the record), delete the session branch; release the lease.
- the floor: a shell loop of plain git doing the same landings (``merge-tree``, ``commit-tree``,
  ``push --force-with-lease`` of main through the same hook), no gates, no records.

Wall time and CPU time (user+sys of the process and everything it waited for) per landing. Prints one
JSON object; nothing here asserts a speed.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

FLOOR = r"""
set -eu
for s in $SESSIONS; do
  git fetch -q origin +refs/heads/main:refs/bench/main refs/heads/session/$s:refs/bench/$s
  t=$(git rev-parse refs/bench/main)
  c=$(git rev-parse refs/bench/$s)
  if git merge-base --is-ancestor "$t" "$c"; then new=$c; else
    tree=$(git merge-tree --write-tree "$t" "$c")
    new=$(git commit-tree "$tree" -p "$t" -p "$c" -m "Merge session $s")
  fi
  git push -q --force-with-lease=refs/heads/main:$t origin "$new:refs/heads/main"
done
"""


def run(cwd: Path, *args: str, env: dict[str, str] | None = None) -> str:
    done = subprocess.run(list(args), cwd=cwd, capture_output=True, text=True, env=env)
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(args)}: {done.stderr or done.stdout}")
    return done.stdout.strip()


def world(base: Path, n: int, env: dict[str, str]) -> tuple[Path, list[str]]:
    gw = [sys.executable, "-m", "gitwork"]
    base.mkdir(parents=True)
    bare, repo = base / "origin.git", base / "repo"
    run(base, "git", "init", "-q", "--bare", str(bare))
    run(base, *gw, "hooks", "install", "--server", str(bare), env=env)
    run(base, "git", "init", "-q", "-b", "main", str(repo))
    (repo / "README").write_text("bench\n")
    run(repo, "git", "add", "README")
    run(repo, "git", "commit", "-q", "-m", "initial", env=env)
    run(repo, "git", "remote", "add", "origin", str(bare))
    run(repo, "git", "push", "-q", "origin", "main")
    run(repo, *gw, "init", "--remote", "origin", env=env)
    run(repo, "git", "config", "gitwork.gates", "true")
    sessions = []
    for k in range(n):
        item = run(repo, *gw, "new", f"change {k}", env=env)
        run(repo, *gw, "claim", item, env=env)
        started = json.loads(run(repo, *gw, "session", "start", item, "--json", env=env))
        Path(started["worktree"], f"f{k}.txt").write_text(f"{k}\n")
        run(Path(started["worktree"]), *gw, "session", "commit", "--file", f"f{k}.txt", "-m", f"change {k}", env=env)
        run(repo, *gw, "publish", "--queue", started["session"], env=env)
        sessions.append(started["session"])
    return base, sessions


def timed(cwd: Path, argv: list[str], env: dict[str, str]) -> tuple[float, float]:
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    run(cwd, *argv, env=env)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--sessions", type=int, default=5)
    args = parser.parse_args()
    env = {**os.environ, "GW_AGENT": "alice", "GW_NO_AUTO_GC": "1", "GIT_AUTHOR_NAME": "bench",
           "GIT_AUTHOR_EMAIL": "bench@example.com", "GIT_COMMITTER_NAME": "bench",
           "GIT_COMMITTER_EMAIL": "bench@example.com"}
    n = args.sessions
    with tempfile.TemporaryDirectory(prefix="gw-bench-queue-") as tmp:
        base, sessions = world(Path(tmp) / "world", args.sessions, env)
        floor = Path(tmp) / "floor"
        shutil.copytree(base, floor, symlinks=True)  # the floor's copy: its worktree links are not used
        run(floor / "repo", "git", "remote", "set-url", "origin", str(floor / "origin.git"))
        queue_wall, queue_cpu = timed(base / "repo", [sys.executable, "-m", "gitwork", "queue", "work", "--once",
                                                      "--json"], env)
        landed = run(base / "repo", "git", "--git-dir", str(base / "origin.git"), "rev-list", "--count", "main")
        if int(landed) != 1 + n + (n - 1):  # initial, the sessions, a merge for all but the first
            raise SystemExit(f"gw queue work landed a main of {landed} commits")
        floor_wall, floor_cpu = timed(floor / "repo", ["sh", "-c", FLOOR], {**env, "SESSIONS": " ".join(sessions)})
    print(json.dumps({"sessions": n, "date": time.strftime("%Y-%m-%d"), "load": os.getloadavg()[0],
                      "queue_work_ms_per_landing": {"wall": round(1000 * queue_wall / n), "cpu": round(1000 * queue_cpu / n)},
                      "plain_git_floor_ms_per_landing": {"wall": round(1000 * floor_wall / n),
                                                         "cpu": round(1000 * floor_cpu / n)}}))


if __name__ == "__main__":
    main()
