"""Import of a large beads export: time and repository growth (issue 16's benchmark).

A synthetic ``issues.jsonl`` (default: 10,000 issues, 30,000 dependencies, 50,000 comments; the
dependencies are three per issue on earlier issues, so the graph is acyclic: blocks, parent-child,
related and discovered-from mixed) is imported into a fresh repository through the library
(``importers.run``, the code ``gw import beads`` runs), in batches of 500 (one commit each). Then:
an unchanged re-import (must write nothing), a re-import with 1% of the issues changed, and the
repository's size loose, after ``git gc``, and per item.

Runs from the interpreter that starts it (the worktree's venv), like bench_cache.py; prints one
markdown table on stdout and one JSON object on stderr's last line. ``--quick``: 1,000 issues.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from gitwork import importers  # noqa: E402
from gitwork.workplane import Workplane  # noqa: E402

KINDS = ("blocks", "blocks", "parent-child", "related", "discovered-from")


def generate(path: Path, issues: int, deps_per: int, comments_per: int, seed: int = 7) -> tuple[int, int]:
    """Write a beads export; return (dependencies, comments) written."""
    rng = random.Random(seed)
    deps_total = comments_total = 0
    with open(path, "w", encoding="utf-8") as out:
        for n in range(issues):
            own = f"bd-{n:05d}"
            deps = []
            if n >= deps_per:
                kinds = list(KINDS)
                rng.shuffle(kinds)
                parents = 0
                for target in rng.sample(range(n), deps_per):
                    kind = kinds.pop()
                    if kind == "parent-child":
                        parents += 1
                        if parents > 1:
                            kind = "blocks"
                    deps.append({"issue_id": own, "depends_on_id": f"bd-{target:05d}", "type": kind,
                                 "created_at": "2025-01-01T00:00:00Z"})
            comments = [{"id": c + 1, "issue_id": own, "author": rng.choice(["alice", "bob", "Carol Ng", "dev-7"]),
                         "text": f"comment {c + 1} on {own}: " + "lorem ipsum " * rng.randint(1, 8),
                         "created_at": f"2025-01-{1 + c % 28:02d}T10:00:00Z"} for c in range(comments_per)]
            status = rng.choice(["open", "open", "in_progress", "closed", "blocked"])
            issue = {"id": own, "title": f"Issue {n}: do the thing", "description": "Some text.\n" * rng.randint(1, 5),
                     "status": status, "priority": rng.randint(0, 4), "issue_type": rng.choice(["task", "bug", "feature"]),
                     "assignee": rng.choice(["", "alice", "bob"]), "labels": rng.sample(["backend", "ui", "db", "ops"], 2),
                     "dependencies": deps, "comments": comments, "acceptance_criteria": "- [ ] works\n- [ ] tested",
                     "created_at": "2025-01-01T00:00:00Z", "updated_at": "2025-01-02T00:00:00Z"}
            if status == "closed":
                issue.update(close_reason="done", closed_at="2025-01-03T00:00:00Z")
            out.write(json.dumps(issue) + "\n")
            deps_total += len(deps)
            comments_total += len(comments)
    return deps_total, comments_total


def size(git_dir: Path) -> int:
    return sum(f.stat().st_size for f in (git_dir / "objects").rglob("*") if f.is_file())


def timed(label: str, func) -> tuple[float, object]:  # type: ignore[no-untyped-def]
    start = time.perf_counter()
    value = func()
    took = time.perf_counter() - start
    sys.stderr.write(f"{label}: {took:.1f} s\n")
    return took, value


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--issues", type=int, default=10_000)
    args = parser.parse_args()
    issues = 1_000 if args.quick else args.issues
    os.environ.setdefault("GW_NO_AUTO_GC", "1")
    tmp = Path(tempfile.mkdtemp(prefix="gw-bench-import-"))
    source = tmp / "issues.jsonl"
    deps, comments = generate(source, issues, 3, 5)
    repo = tmp / "repo"
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    git_dir = repo / ".git"
    figures: dict[str, object] = {"issues": issues, "dependencies": deps, "comments": comments,
                                  "file_bytes": source.stat().st_size}
    with Workplane(str(repo), agent="importer") as wp:
        wp.do("init")
        empty = size(git_dir)
        took, _ = timed("read + plan", lambda: importers.plan("beads", importers.read("beads", str(source)), str(source)))
        figures["read_plan_s"] = round(took, 2)
        took, result = timed("import", lambda: importers.run(wp, "beads", str(source)))
        figures.update(import_s=round(took, 2), commits=len(result["commits"]),  # type: ignore[index]
                       created=result["created"], messages=result["comments"])  # type: ignore[index]
        figures["loose_bytes"] = size(git_dir) - empty
        tip = wp.store.tip()
        took, again = timed("re-import, unchanged", lambda: importers.run(wp, "beads", str(source)))
        figures.update(reimport_unchanged_s=round(took, 2), reimport_commits=len(again["commits"]),  # type: ignore[index]
                       ref_unchanged=wp.store.tip() == tip)
        lines = source.read_text().splitlines()
        for n in range(0, len(lines), 100):  # 1% changed: a new title
            doc = json.loads(lines[n])
            doc["title"] += " (edited)"
            lines[n] = json.dumps(doc)
        source.write_text("\n".join(lines) + "\n")
        took, changed = timed("re-import, 1% changed", lambda: importers.run(wp, "beads", str(source)))
        figures.update(reimport_changed_s=round(took, 2), reimport_changed_updated=changed["updated"],  # type: ignore[index]
                       reimport_changed_commits=len(changed["commits"]))  # type: ignore[index]
    subprocess.run(["git", "--git-dir", str(git_dir), "gc", "-q", "--prune=now"], check=True)
    figures["packed_bytes"] = size(git_dir)
    figures["packed_bytes_per_item"] = round(figures["packed_bytes"] / issues)  # type: ignore[operator]
    print("| figure | value |\n|---|---|")
    for key, value in figures.items():
        print(f"| {key} | {value} |")
    sys.stderr.write(json.dumps(figures) + "\n")
    subprocess.run(["rm", "-rf", str(tmp)], check=False)


if __name__ == "__main__":
    main()
