"""The batch arbiter (``arbiter: batch``, issue 27 point 2): clones push command documents to the
arbiter's inbox and its post-receive hook applies every waiting one as one chain.

Real git throughout: a bare arbiter with gitwork's server hooks (``gw hooks install --server``) and
``gitwork.arbiter batch`` in its config, clones driven by the real ``gw`` in child processes, forged
requests pushed with plain git, and kill -9 of the applier and of a clone mid-push (``GW_CRASH_AT``;
over ``file://`` the arbiter's hooks run with the pusher's environment).
"""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from conftest import git, gw_cmd, gw_here, run_gw, scrubbed, tip
from gitwork.inbox import EMPTY_TREE, INBOX_PREFIX, REQUEST_BYTES
from test_sync import STATE, gw_ok

HELD, REMOTE, REMOTE_REFUSED = 75, 12, 14


def refs(bare: Path) -> str:
    return git(bare, "for-each-ref", "refs/gitwork/")


def state_log(bare: Path) -> list[str]:
    return git(bare, "log", "--format=%s", STATE).splitlines()


@pytest.fixture(scope="module")
def template(published_template: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Built once: the arbiter (hooks, batch mode), machine ``a`` with six items, clones ``b`` and ``c``."""
    with scrubbed(tmp_path_factory):
        base = tmp_path_factory.mktemp("batch")
        remote = base / "remote.git"
        shutil.copytree(published_template / "remote.git", remote, symlinks=True)
        shutil.copytree(published_template / "a", base / "a", symlinks=True)
        git(base / "a", "remote", "set-url", "origin", f"file://{remote}")
        assert gw_here(base / "a", "hooks", "install", "--server", str(remote)).returncode == 0
        git(remote, "config", "gitwork.arbiter", "batch")
        for n in range(6):
            assert gw_here(base / "a", "new", f"task {n}").returncode == 0
        assert gw_here(base / "a", "sync").returncode == 0
        for name in ("b", "c"):
            git(base, "clone", "-q", f"file://{remote}", name)
            assert gw_here(base / name, "init", "--remote", "origin").returncode == 0
        for name in ("a", "b", "c"):
            git(base / name, "config", "gitwork.arbiter", "batch")
    return base


@pytest.fixture
def world(template: Path, tmp_path: Path) -> dict[str, Path]:
    """A copy of the template for one test (the clones pointed at the copy's arbiter)."""
    shutil.copytree(template, tmp_path / "w", symlinks=True)
    base = tmp_path / "w"
    for name in ("a", "b", "c"):
        git(base / name, "remote", "set-url", "origin", f"file://{base / 'remote.git'}")
    return {"remote": base / "remote.git", **{name: base / name for name in ("a", "b", "c")}}


def test_a_herd_on_three_clones_is_granted_once_each(world: dict[str, Path]) -> None:
    procs = []
    clones = []
    for name in ("a", "b", "c"):
        for n in range(2):
            env = {"GW_AGENT": f"agent-{name}{n}"}
            clones.append(name)
            procs.append(subprocess.Popen(gw_cmd("claim", "--next", "--json"), cwd=world[name], text=True,
                                          stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                          env={**_env(), **env}))
    results = []
    for proc in procs:
        out, err = proc.communicate(timeout=120)
        assert proc.returncode == 0, err
        results.append(json.loads(out))
    items = [r["item"] for r in results]
    assert len(set(items)) == 6  # one grant per item, every process granted
    assert sorted(r["fence"] for r in results) == [1, 2, 3, 4, 5, 6]
    claims = [line for line in state_log(world["remote"]) if line.startswith("claim ")]
    assert len(claims) == 6  # one commit per command, written by the arbiter, nothing twice
    for name, result in zip(clones, results, strict=True):
        # The answer is the arbiter's record, and the clone that asked adopted it: its own view shows the
        # lease (another clone sees it after its next fetch, not before).
        shown = gw_ok(world[name], "show", result["item"])
        assert shown["lease"]["holder"] == result["holder"]
    answered = git(world["remote"], "for-each-ref", "--format=%(objectname)", INBOX_PREFIX).split()
    assert len(answered) == 6
    for oid in answered:  # each inbox ref now holds the answer (a child of the request)
        assert git(world["remote"], "log", "-1", "--format=%s", oid).startswith("gitwork answer ")


def _env() -> dict[str, str]:
    import os

    return dict(os.environ)


def test_a_refusal_is_the_arbiters_verdict_and_stays_fetchable(world: dict[str, Path]) -> None:
    first = gw_ok(world["b"], "claim", "--next", env={"GW_AGENT": "bob"})
    before = state_log(world["remote"])
    done = run_gw(world["c"], "claim", first["item"], "--json", env={"GW_AGENT": "carol"})
    assert done.returncode == HELD, done.stderr
    assert "held by bob" in done.stderr
    assert state_log(world["remote"]) == before  # nothing landed for the refused command
    answers = [git(world["remote"], "log", "-1", "--format=%b", ref).strip() for ref in
               git(world["remote"], "for-each-ref", "--format=%(refname)", INBOX_PREFIX).split()]
    refused = [json.loads(a) for a in answers if '"refused"' in a]
    assert len(refused) == 1 and refused[0]["error"]["error"] == "held"


def test_an_arbiter_not_in_batch_mode_refuses_the_inbox(world: dict[str, Path]) -> None:
    git(world["remote"], "config", "--unset", "gitwork.arbiter")
    before = refs(world["remote"])
    done = run_gw(world["b"], "claim", "--next")
    assert done.returncode == REMOTE_REFUSED, done.stderr
    assert "does not take batched commands" in done.stderr
    assert "Traceback" not in done.stderr
    assert refs(world["remote"]) == before


def _request(clone: Path, doc: dict, *, author: str | None = None, tree: str | None = None,
             message: str | None = None, parent: str | None = None) -> str:
    """A request commit made with plain git (``commit-tree``), as a hostile clone would."""
    name = author or doc.get("as", "x")
    env = {**_env(), "GIT_AUTHOR_NAME": name, "GIT_AUTHOR_EMAIL": f"{name}@gitwork.invalid",
           "GIT_COMMITTER_NAME": name, "GIT_COMMITTER_EMAIL": f"{name}@gitwork.invalid"}
    text = message if message is not None else f"gitwork request {doc['id']}\n\n{json.dumps(doc)}\n"
    args = ["git", "commit-tree", tree or EMPTY_TREE["sha1"], *(["-p", parent] if parent else [])]
    git(clone, "hash-object", "-w", "-t", "tree", "--stdin", input=b"")
    return subprocess.run(args, cwd=clone, input=text, text=True, capture_output=True, env=env,
                          check=True).stdout.strip()


def _push(clone: Path, spec: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["git", "push", "--porcelain", "origin", spec], cwd=clone, capture_output=True, text=True)


def test_forged_inbox_pushes_are_refused_and_write_nothing(world: dict[str, Path]) -> None:
    clone, bare = world["c"], world["remote"]
    a_file = git(clone, "hash-object", "-w", "--stdin", input=b"x").strip()
    tree = subprocess.run(["git", "mktree"], cwd=clone, input=f"100644 blob {a_file}\tf\n", text=True,
                          capture_output=True, check=True).stdout.strip()

    def doc(n: int, **fields: object) -> dict:
        return {"op": "claim", "id": f"c-forged{n:010d}", "as": "alice", "next": True, **fields}

    parent = _request(clone, doc(99))
    # Each forgery under its own inbox ref, all in one push: the arbiter names every one and takes none.
    forgeries = {
        "must be the document's acting identity": _request(clone, doc(1), author="mallory"),
        "carries no files": _request(clone, doc(2), tree=tree),
        "not JSON": _request(clone, doc(3), message="gitwork request c-forged0000000003\n\n{nope\n"),
        "not a gitwork request": _request(clone, doc(4), message="hello\n"),
        "is not the ref's": _request(clone, doc(0), message=f"gitwork request c-forged0000000005\n\n{json.dumps(doc(0))}\n"),
        "unknown op": _request(clone, doc(6, op="rm-rf")),
        "identity": _request(clone, doc(7, **{"as": "ro ot"}), author="ro-ot"),
        "at most 262144": _request(clone, doc(8, title="x" * (REQUEST_BYTES + 10))),
        "has no parent": _request(clone, doc(9), parent=parent),
    }
    before = refs(bare)
    specs = [f"{commit}:{INBOX_PREFIX}c-forged{n:010d}" for n, commit in enumerate(forgeries.values(), start=1)]
    specs.append(f"{parent}:{INBOX_PREFIX}x/state")  # a ref name that is no command id
    done = subprocess.run(["git", "push", "origin", *specs], cwd=clone, capture_output=True, text=True)
    assert done.returncode != 0 and "Traceback" not in done.stderr
    assert "inbox/x/state: not an inbox ref" in done.stderr
    for n, why in enumerate(forgeries, start=1):
        assert any(f"c-forged{n:010d}" in line and why in line for line in done.stderr.splitlines()), (why, done.stderr[-3000:])
    assert refs(bare) == before
    # Too many in one push: refused whole too.
    many = [f"{parent}:{INBOX_PREFIX}c-many{n:012d}" for n in range(65)]
    done = subprocess.run(["git", "push", "origin", *many], cwd=clone, capture_output=True, text=True)
    assert done.returncode != 0 and "at most 64" in done.stderr
    assert refs(bare) == before
    # A well-formed request made with plain git is decided like any other; deleting it, or re-sending
    # another document under its id, is refused afterwards.
    good = doc(99)
    done = _push(clone, f"{parent}:{INBOX_PREFIX}{good['id']}")
    assert done.returncode == 0 and '"status":"landed"' in done.stderr
    assert any(line.startswith("claim ") and "by alice" in line for line in state_log(bare))
    after = refs(bare)
    other = _request(clone, doc(99, next=None, item="w-0000000000000000"))
    done = subprocess.run(["git", "push", "origin", f":{INBOX_PREFIX}{good['id']}", f"+{other}:{INBOX_PREFIX}{good['id']}"],
                          cwd=clone, capture_output=True, text=True)
    assert done.returncode != 0
    assert refs(bare) == after


def test_the_applier_killed_after_the_state_moved_then_gw_retry(world: dict[str, Path]) -> None:
    bare = world["remote"]
    done = run_gw(world["b"], "claim", "--next", "--json", env={"GW_AGENT": "bob", "GW_CRASH_AT": "applier-after-state"})
    assert done.returncode == REMOTE, done.stderr
    command_id = json.loads(done.stdout)["details"]["command_id"] if done.stdout.strip() else \
        done.stderr.split("gw retry ")[1].split()[0]
    # The state holds the claim (the batch's CAS happened), the request still waits for its answer.
    assert sum(line.startswith("claim ") for line in state_log(bare)) == 1
    assert git(bare, "log", "-1", "--format=%s", INBOX_PREFIX + command_id).startswith("gitwork request")
    retried = run_gw(world["b"], "retry", command_id, "--json", env={"GW_AGENT": "bob"})
    assert retried.returncode == 0, retried.stderr
    result = json.loads(retried.stdout)
    assert result["duplicate"] is True and result["holder"] == "bob"
    assert sum(line.startswith("claim ") for line in state_log(bare)) == 1  # never twice
    assert git(bare, "log", "-1", "--format=%s", INBOX_PREFIX + command_id).startswith("gitwork answer")
    assert tip(world["b"]) == tip(bare)


def test_a_clone_killed_mid_push_loses_nothing_and_grants_nothing_twice(world: dict[str, Path]) -> None:
    bare = world["remote"]
    done = run_gw(world["b"], "claim", "--next", env={"GW_AGENT": "bob", "GW_CRASH_AT": "after-push"})
    assert done.returncode == -9
    claims = [line for line in state_log(bare) if line.startswith("claim ")]
    assert len(claims) == 1 and "by bob" in claims[0]
    item = claims[0].split()[1]
    # Another clone's claim of that item is refused: the grant stands on the arbiter.
    assert run_gw(world["c"], "claim", item, env={"GW_AGENT": "carol"}).returncode == HELD
    # The killed clone catches up on its next command and holds what it was granted.
    gw_ok(world["b"], "sync")
    assert gw_ok(world["b"], "show", item)["lease"]["holder"] == "bob"
    # Killed before its push: nothing was asked, nothing landed.
    done = run_gw(world["b"], "claim", "--next", env={"GW_AGENT": "bob", "GW_CRASH_AT": "before-push"})
    assert done.returncode == -9
    assert len([line for line in state_log(bare) if line.startswith("claim ")]) == 1


def test_an_arbiter_command_sees_the_clones_own_commands_not_yet_synced(world: dict[str, Path]) -> None:
    """Read your writes, as with the compare-and-swap arbiter: ``gw new`` lands on the clone only, and the
    claim of that item right after it must be decided on a state that has it (the clone's unsynced
    commands go with the request). Found by the system harness (``gw publish --queue`` right after ``gw
    session commit`` was refused "not an open session", exit 3): the inbox carried the claim alone."""
    made = gw_ok(world["b"], "new", "fresh item", env={"GW_AGENT": "bob"})
    claimed = run_gw(world["b"], "claim", made["item"], "--json", env={"GW_AGENT": "bob"})
    assert claimed.returncode == 0, claimed.stderr
    assert json.loads(claimed.stdout)["item"] == made["item"]
    landed = state_log(world["remote"])
    assert any(line.startswith("new ") and made["item"] in line for line in landed), landed
    assert any(line.startswith("claim ") and made["item"] in line for line in landed), landed
