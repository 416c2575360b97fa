"""Server-side guard for the state ref: what a pre-receive hook refuses on ``refs/gitwork/*``.

``receive.denyNonFastForwards`` does not cover refs outside ``refs/heads`` (a forced rewind of a
custom ref is accepted), so the arbiter remote needs this check to keep its history append-only:
no deletion, no non-fast-forward, no commit that rewrites or truncates an append-only ``.log`` file,
and no state that does not parse or was written by a newer format. Branches are not looked at here.
"""

from __future__ import annotations

from . import FORMAT_VERSION, codec, gitcmd
from .errors import GwError
from .model import state_file_problem
from .store import APPEND_ONLY_SUFFIX, FORMAT_FILE, Repository, Store

ZERO = ("0" * 40, "0" * 64)
STATE_PREFIX = "refs/gitwork/"


def _git(git_dir: str, *args: str, check: bool = True) -> gitcmd.Completed:
    return gitcmd.run(["--git-dir", git_dir, *args], check=check)


def _check_commit(git_dir: str, store: Store, commit: str, parent: str | None) -> list[str]:
    problems: list[str] = []
    if parent is None:
        listing = _git(git_dir, "ls-tree", "-r", commit).out.splitlines()
        changes = [("A", line.split("\t", 1)[1], None, line.split()[2]) for line in listing if "\t" in line]
    else:
        raw = _git(git_dir, "diff-tree", "-r", "--no-renames", "--no-commit-id", parent, commit).out.splitlines()
        changes = []
        for line in raw:
            meta, _, path = line.partition("\t")
            fields = meta.split()
            changes.append((fields[4], path, fields[2], fields[3]))
    for status, path, old, new in changes:
        if path.endswith(APPEND_ONLY_SUFFIX) and status in ("M", "D", "T"):
            if status != "M" or not store.read_blob(new).startswith(store.read_blob(old)):
                problems.append(f"{commit[:12]} rewrites or truncates append-only {path}")
                continue
        if status == "D" or new is None or new in ZERO:
            continue
        try:
            if path == FORMAT_FILE:
                version = codec.load_yaml(store.read_blob(new), what=path).get("format")
                if not isinstance(version, int) or version > FORMAT_VERSION:
                    problems.append(f"{commit[:12]} has format {version!r}; this server reads up to {FORMAT_VERSION}")
            elif path.endswith(".yaml"):
                found = state_file_problem(path, codec.load_yaml(store.read_blob(new), what=path))
                if found:  # a value no reader could use (priority "high"): refused before it spreads
                    problems.append(f"{commit[:12]}: {path}: {found}")
            elif path.endswith(APPEND_ONLY_SUFFIX):
                list(codec.iter_records(store.read_blob(new), what=path))
        except GwError as error:
            problems.append(f"{commit[:12]}: {error.message}")
    return problems


def check_update(git_dir: str, ref: str, old: str, new: str) -> list[str]:
    """Reasons to refuse moving ``ref`` from ``old`` to ``new`` (empty: accept)."""
    if not ref.startswith(STATE_PREFIX):
        return []
    if new in ZERO:
        return [f"{ref}: deleting the work-plane state is not allowed"]
    # The same store gw reads through: loose objects read directly (the push's quarantine folder
    # included: git hands it to the hook as GIT_OBJECT_DIRECTORY), the rest from one cat-file.
    store = Store(Repository.discover(git_dir), ref)
    try:
        return _check_range(git_dir, store, ref, old, new)
    finally:
        store.close()


def _check_range(git_dir: str, store: Store, ref: str, old: str, new: str) -> list[str]:
    if old not in ZERO:
        if _git(git_dir, "merge-base", "--is-ancestor", old, new, check=False).returncode != 0:
            return [f"{ref}: non-fast-forward update refused (the state history is append-only)"]
        commits = _git(git_dir, "rev-list", "--reverse", "--parents", new, f"^{old}").out.splitlines()
    else:
        commits = _git(git_dir, "rev-list", "--reverse", "--parents", new).out.splitlines()
    problems: list[str] = []
    for line in commits:
        parts = line.split()
        problems += _check_commit(git_dir, store, parts[0], parts[1] if len(parts) > 1 else None)
        if len(problems) >= 20:
            break
    if not problems:  # the roles, judged with this repository's settings (gitwork/rolecheck.py)
        from .rolecheck import check_commits

        pairs = [(parts[0], parts[1] if len(parts) > 1 else None) for parts in map(str.split, commits)]
        problems += check_commits(git_dir, ref, pairs)
    return problems


def main() -> int:
    """``python -m gitwork.statecheck``: a pre-receive hook body (stdin: ``old new ref`` lines)."""
    import os
    import sys

    git_dir = os.environ.get("GIT_DIR", ".")
    problems: list[str] = []
    for line in sys.stdin:
        parts = line.split()
        if len(parts) == 3:
            problems += check_update(git_dir, parts[2], parts[0], parts[1])
    for problem in problems:
        sys.stderr.write(f"gitwork: {problem}\n")
    return 1 if problems else 0


if __name__ == "__main__":
    raise SystemExit(main())
