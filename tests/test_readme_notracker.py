"""README.md, "What no tracker has": its ``console`` transcript runs as shown (issue 29, "shown in the README
with a real transcript").

The block is read from README.md at test time. Its world is set up here and not shown (the README's intro
says what it is): a bare ``origin.git`` guarded by ``gw hooks install --server`` (the arbiter and the code
remote), and a clone with ``src/api/app.py`` and ``README.md`` on ``main``. Every ``$ `` line then runs, in
order, in one bash process acting as alice; the transcript (stdout and stderr as a terminal shows them,
``[exit N]`` after a refusal) must equal the README's once what differs from run to run is masked: ids,
hashes, instants, session stamps, the host name and wall times.

Real parts only: the code remote's pre-receive hook refuses alice's push, ``git merge-tree`` predicts the
conflict, the publisher lands bob's session on ``origin``'s ``main``, a real agent process reports its cost.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

from conftest import end_executions, git, make_repo
from test_readme import console_block, gw_on_path, shlex_quote
from test_readme import mask as mask_common

START = "gw init --remote origin"


def mask(text: str) -> str:
    """``test_readme.mask`` plus what only this transcript shows (before it: a session stamp's eight digits
    would otherwise read as a hash)."""
    text = re.sub(r"\b\d{8}-\d{6}-", "<stamp>-", text)
    text = re.sub(r"\bx-[0-9a-f]{16}\b", "<execution>", text)
    text = re.sub(r"\(subprocess on [^,]+,", "(subprocess on <host>,", text)
    text = re.sub(r"\t(\d+[hms])+$", "\t<wall>", text, flags=re.MULTILINE)
    return mask_common(text)


def world(tmp_path: Path) -> tuple[Path, dict[str, str]]:
    """The clone the transcript runs in, and its environment (gw on PATH, alice, a git identity)."""
    env = {**gw_on_path(tmp_path), "GW_AGENT": "alice"}
    for role in ("AUTHOR", "COMMITTER"):
        env[f"GIT_{role}_NAME"], env[f"GIT_{role}_EMAIL"] = "Dev", "dev@example.com"
    bare = make_repo(tmp_path / "origin.git", bare=True)
    hooks = subprocess.run(["gw", "hooks", "install", "--server", str(bare)], cwd=tmp_path, env=env,
                           capture_output=True, text=True)
    assert hooks.returncode == 0, hooks.stderr
    repo = tmp_path / "repo"
    git(tmp_path, "init", "-q", "-b", "main", str(repo))
    (repo / "src" / "api").mkdir(parents=True)
    (repo / "src" / "api" / "app.py").write_text("def handler():\n    return 200\n", encoding="utf-8")
    (repo / "README.md").write_text("# Shop\n", encoding="utf-8")
    for args in (("add", "."), ("commit", "-qm", "start"), ("remote", "add", "origin", str(bare)),
                 ("push", "-q", "origin", "main")):
        assert subprocess.run(["git", *args], cwd=repo, env=env, capture_output=True).returncode == 0, args
    git(bare, "symbolic-ref", "HEAD", "refs/heads/main")
    return repo, env


@pytest.mark.slow  # 26 commands, five pushes through the server hook: ~6 s of CPU
def test_what_no_tracker_has_runs_as_the_readme_shows(tmp_path: Path) -> None:
    transcript = console_block(START)
    commands = [line[2:] for line in transcript.splitlines() if line.startswith("$ ")]
    assert 25 <= len(commands) <= 40, len(commands)
    repo, env = world(tmp_path)
    script = ["exec 2>&1", "ulimit -t 120"]  # bounded: the wait loop ends when the agent's exit is recorded
    for command in commands:
        script.append(f"printf '%s\\n' {shlex_quote('$ ' + command)}")
        script.append(command)
        script.append('rc=$?; if [ "$rc" -ne 0 ]; then echo "[exit $rc]"; fi')
    try:
        done = subprocess.run(["bash", "-c", "\n".join(script)], cwd=repo, env=env, capture_output=True, text=True,
                              timeout=180)
    finally:
        end_executions(repo)
    assert done.returncode == 0, done.stdout
    assert mask(done.stdout).splitlines() == mask(transcript).splitlines(), done.stdout
    # What the transcript claims, on the remote itself: bob's session landed, alice's refused push did not.
    assert git(tmp_path / "origin.git", "show", "main:README.md") == "# Shop\nA shop."
    assert git(tmp_path / "origin.git", "show", "main:src/api/app.py") == "def handler():\n    return 200"


def test_the_mask_keeps_what_the_transcript_asserts() -> None:
    """Masking hides only what varies: exit codes, counts, paths, holders and money still compare."""
    line = "gw: held: w-7701ba544f151742's paths overlap a live lease: alice holds w-815b882ef7b83bd6 (a ~ b)"
    assert mask(line) != mask(line.replace("alice", "bob"))
    assert mask("total\t1\t1\t52000\t4100\t0.61\t1s") != mask("total\t1\t1\t52000\t4100\t0.62\t1s")
    assert mask("total\t1\t1\t52000\t4100\t0.61\t1s") == mask("total\t1\t1\t52000\t4100\t0.61\t1m3s")
    assert mask("[exit 75]") != mask("[exit 13]")
    assert mask("session/20261202-074535-repo-alice") == mask("session/20270101-000000-repo-alice")
