"""Path leases at the code remote: its pre-receive hook (``gitwork/pathcheck.py``), with real pushes into
a bare repository whose state ref holds the leases, one test per rule. The pushing clone has no local
hooks (a client that bypasses them): this is the real gate.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from conftest import copy_world, git, make_repo, scrubbed
from gitwork.hooks_install import install_server
from gitwork.workplane import Workplane
from test_sessions import init_project, person_identity  # noqa: F401  (autouse fixture)

STATE = "refs/gitwork/state"


def push(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["git", "push", "-q", "origin", *args], cwd=cwd, capture_output=True, text=True)


def commit(cwd: Path, files: dict[str, str], message: str, branch: str | None = None) -> str:
    git(cwd, "checkout", "-q", "-B", branch or "work", "main")
    for name, text in files.items():
        (cwd / name).parent.mkdir(parents=True, exist_ok=True)
        (cwd / name).write_text(text)
        git(cwd, "add", name)
    git(cwd, "commit", "-q", "-m", message)
    return git(cwd, "rev-parse", "HEAD")


def under(item: str, fence: int) -> str:
    return f"work\n\nWork-Item: {item}\nFence: {fence}\n"


class World:
    """The code remote (hooked, HEAD on main, state ref holding alice's ``src/api/**`` and bob's ``lib/**``
    leases) and a clone; built once per module, copied for each test."""

    def __init__(self, root: Path, ids: dict[str, object]) -> None:
        self.root, self.bare, self.work = root, root / "code.git", root / "work"
        self.api, self.lib = str(ids["api"]), str(ids["lib"])
        self.api_fence, self.lib_fence = int(ids["api_fence"]), int(ids["lib_fence"])  # type: ignore[call-overload]

    def publish_state(self) -> None:
        assert push(self.work, f"{STATE}:{STATE}").returncode == 0

    def branch(self, name: str) -> str | None:
        return git(self.bare, "rev-parse", "-q", "--verify", f"refs/heads/{name}", check=False) or None


@pytest.fixture(scope="module")
def template(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, object]]:
    with scrubbed(tmp_path_factory), pytest.MonkeyPatch.context() as env:
        for role in ("AUTHOR", "COMMITTER"):
            env.setenv(f"GIT_{role}_NAME", "Person")
            env.setenv(f"GIT_{role}_EMAIL", "person@example.com")
        root = tmp_path_factory.mktemp("pathhook")
        bare = make_repo(root / "code.git", bare=True)
        git(bare, "symbolic-ref", "HEAD", "refs/heads/main")
        install_server(str(bare))
        work = init_project(make_repo(root / "work"))
        git(work, "remote", "add", "origin", str(bare))
        assert push(work, "main").returncode == 0
        with Workplane(str(work), agent="alice") as alice, Workplane(str(work), agent="bob") as bob:
            alice.do("init")
            api = alice.do("new", title="api", paths=["src/api/**"]).result["item"]
            lib = alice.do("new", title="lib", paths=["lib/**"]).result["item"]
            ids = {"api": api, "lib": lib, "api_fence": alice.do("claim", item=api, ttl="1h").result["fence"],
                   "lib_fence": bob.do("claim", item=lib, ttl="1h").result["fence"]}
        assert push(work, f"{STATE}:{STATE}").returncode == 0
        return root, ids


@pytest.fixture
def world(template: tuple[Path, dict[str, object]], tmp_path: Path) -> World:
    root = copy_world(template[0], tmp_path / "world", {"work": "code.git"})
    return World(root, template[1])


def test_a_commit_touching_another_holders_path_is_refused_naming_path_and_holder(world: World) -> None:
    commit(world.work, {"src/api/x.py": "x\n"}, "no trailers")
    done = push(world.work, "work")
    assert done.returncode != 0
    assert "src/api/x.py" in done.stderr and "alice" in done.stderr and world.api in done.stderr
    assert world.branch("work") is None
    # Under bob's own (other) lease: still alice's path.
    commit(world.work, {"src/api/y.py": "y\n"}, under(world.lib, world.lib_fence))
    done = push(world.work, "work")
    assert done.returncode != 0 and "leased to alice" in done.stderr and world.branch("work") is None
    # It spoke for bob's lease: the hint is to leave the path out or wait, not to add the trailers it has.
    assert "leave it out of this commit or wait" in done.stderr and "commit under your own lease" not in done.stderr


def test_the_holder_pushes_under_its_lease_and_unleased_paths_pass(world: World) -> None:
    mine = commit(world.work, {"src/api/x.py": "x\n", "lib/q.py": "q\n"}, under(world.api, world.api_fence))
    refused = push(world.work, "work")  # lib/** is bob's, even in alice's commit
    assert refused.returncode != 0 and "lib/q.py" in refused.stderr and "bob" in refused.stderr
    mine = commit(world.work, {"src/api/x.py": "x\n"}, under(world.api, world.api_fence))
    assert push(world.work, "work").returncode == 0 and world.branch("work") == mine
    other = commit(world.work, {"README": "hello\n"}, "anyone may touch an unleased path", branch="readme")
    assert push(world.work, "readme").returncode == 0 and world.branch("readme") == other


def test_a_released_path_lease_no_longer_guards_its_paths(world: World) -> None:
    with Workplane(str(world.work), agent="alice") as alice:
        alice.do("release", item=world.api)
    world.publish_state()
    free = commit(world.work, {"src/api/x.py": "x\n"}, "after the release")
    assert push(world.work, "work").returncode == 0 and world.branch("work") == free


def test_a_stale_fence_does_not_speak_for_the_holder(world: World) -> None:
    commit(world.work, {"src/api/x.py": "x\n"}, under(world.api, world.api_fence + 100))
    done = push(world.work, "work")
    assert done.returncode != 0 and "leased to alice" in done.stderr


def test_strict_from_the_remote_config_refuses_paths_no_lease_of_the_pusher_covers(world: World) -> None:
    git(world.bare, "config", "gitwork.paths", "strict")
    commit(world.work, {"README": "hello\n"}, "an unleased path, no lease")
    done = push(world.work, "work")
    assert done.returncode != 0 and "README" in done.stderr and "paths: strict" in done.stderr
    commit(world.work, {"lib/a.py": "a\n", "other.txt": "o\n"}, under(world.lib, world.lib_fence))
    done = push(world.work, "work")
    assert done.returncode != 0 and "other.txt" in done.stderr and "lib/a.py" not in done.stderr
    ok = commit(world.work, {"lib/a.py": "a\n"}, under(world.lib, world.lib_fence))
    assert push(world.work, "work").returncode == 0 and world.branch("work") == ok


def test_strict_from_the_workplane_file_on_the_remote_head(world: World) -> None:
    git(world.work, "checkout", "-q", "main")
    (world.work / ".workplane").write_text("paths: strict\n")
    git(world.work, "add", ".workplane")
    git(world.work, "commit", "-q", "-m", "paths: strict")
    assert push(world.work, "main").returncode == 0  # judged by the HEAD before the push: not yet strict
    commit(world.work, {"README": "hello\n"}, "an unleased path, no lease")
    done = push(world.work, "work")
    assert done.returncode != 0 and "paths: strict" in done.stderr and world.branch("work") is None


def test_a_commit_already_on_the_remote_is_not_judged_again_when_published(world: World) -> None:
    """Alice's work landed on a branch under her lease; after her release Bob leases the same paths. Publishing
    her commit into main is not refused: it was judged when it first reached the remote."""
    hers = commit(world.work, {"src/api/x.py": "x\n"}, under(world.api, world.api_fence))
    assert push(world.work, "work").returncode == 0
    with Workplane(str(world.work), agent="alice") as alice, Workplane(str(world.work), agent="carol") as carol:
        alice.do("release", item=world.api)
        wide = carol.do("new", title="all of src", paths=["src/**"]).result["item"]
        carol.do("claim", item=wide)
    world.publish_state()
    assert push(world.work, f"{hers}:refs/heads/main").returncode == 0 and world.branch("main") == hers
    commit(world.work, {"src/api/z.py": "z\n"}, "new work on carol's paths", branch="late")
    late = push(world.work, "late")
    assert late.returncode != 0 and "leased to carol" in late.stderr
