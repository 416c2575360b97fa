"""What a kill -9 of a gitwork process (with its process group, so its git children die too) leaves
behind, and whether the next ordinary command converges without a person removing files by hand.

Each kill here is real: the command runs in a session of its own (``start_new_session``) and a git hook
of the repository (``reference-transaction``, ``post-checkout``) sends SIGKILL to that whole process
group at the chosen step, so gw and the git it runs die mid-step, holding what git holds at that point.
A lock left behind is then aged past ``stalelocks.STALE_AFTER`` with ``os.utime`` (the test does not
sleep 2 s): that is the only thing planted.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import git, gw_cmd, held_project, run_gw, tip
from gitwork import sessions, stalelocks
from gitwork.errors import Held
from gitwork.sessions.plan import _started
from gitwork.workplane import Workplane


def kill_hook(why: str, names: str, phase: str = "prepared") -> str:
    """A ``reference-transaction`` hook for the tests: with ``GW_TEST_KILL`` set, it kills its whole process
    group (the gw under test, with its git) at ``phase`` of a transaction whose updates name ``names``
    (``$GW_TEST_KILL``: the phase the test names)."""
    return (f"#!/bin/sh\n# test hook: {why}\n[ -n \"$GW_TEST_KILL\" ] || exit 0\n[ \"$1\" = {phase} ] || exit 0\n"
            f"grep -q ' {names}' && kill -KILL 0\nexit 0\n")


KILL_ON_SESSION_REF = kill_hook("git holds the session ref's locks", "refs/heads/session/", '"$GW_TEST_KILL"')


project = held_project  # a repository with one commit, an initialised work plane and an item alice holds


def start_session(repo: Path, item: str) -> tuple[str, Path]:
    with Workplane(str(repo), agent="alice") as wp:
        started = sessions.start(wp, item)
    return str(started["session"]), Path(started["worktree"])


def killed(repo: Path, *args: str, at: str) -> None:
    """Run ``gw ARGS`` in its own process group; the repository's hook kills that group at step ``at``."""
    env = {**os.environ, "GW_TEST_KILL": at, "GW_NO_AUTO_GC": "1"}
    done = subprocess.run(gw_cmd(*args), cwd=repo, env=env, capture_output=True, text=True, timeout=60,
                          start_new_session=True)
    assert done.returncode == -9, (done.returncode, done.stdout, done.stderr)


def hook(repo: Path, name: str, text: str) -> Path:
    path = (repo / ".git" if (repo / ".git").is_dir() else repo) / "hooks" / name  # (a bare repository: its own)
    path.write_text(text)
    path.chmod(0o755)
    return path


def aged(*locks: Path) -> None:
    """Make the locks a kill left as old as a lock found the next time someone looks (the test's only plant)."""
    then = time.time() - stalelocks.STALE_AFTER - 30
    for lock in locks:
        os.utime(lock, (then, then))


def test_a_session_commit_killed_while_git_holds_its_locks_is_committed_by_the_same_command_again(
        tmp_path: Path) -> None:
    """``gw session commit`` killed with its group while ``git commit`` holds the worktree's HEAD.lock and the
    session branch's lock: before, every later ``gw session commit`` of that session failed (exit 5, "cannot
    lock ref 'HEAD'") until a person removed them. The worktree's ``index.lock`` (what the step's ``git add``
    killed mid-write leaves: the hook cannot stop it there) is planted beside them: before, exit 1, "Unable
    to create .../index.lock: File exists"."""
    repo, item = project(tmp_path)
    session, source = start_session(repo, item)
    (source / "a.txt").write_text("beta\n")
    remove = hook(repo, "reference-transaction", KILL_ON_SESSION_REF)
    commit = ("session", "commit", session, "--file", "a.txt", "-m", "change a", "--as", "alice")
    killed(repo, *commit, at="prepared")
    admin = repo / ".git" / "worktrees" / "source"
    left = [admin / "index.lock", admin / "HEAD.lock", repo / ".git" / "refs" / "heads" / "session" / f"{session}.lock"]
    assert [p.exists() for p in left] == [False, True, True]
    left[0].write_text("")
    remove.unlink()
    aged(*left)
    again = run_gw(repo, *commit, "--json")
    assert again.returncode == 0, again.stdout + again.stderr
    assert not any(p.exists() for p in left)
    assert "removed the stale lock" in again.stderr
    assert git(repo, "log", "-1", "--format=%B", f"session/{session}").startswith("change a")


def test_a_session_drop_killed_mid_deletion_is_finished_by_the_same_command_again(tmp_path: Path) -> None:
    """``gw session drop`` killed with its group while ``git update-ref -d`` holds ``packed-refs.lock`` and the
    branch's lock: the drop is recorded, and the same command again finishes the clean-up. Before, the
    branch was kept (with a warning) by every later drop, of this session and of every other one, since
    each deletion needs ``packed-refs.lock``."""
    repo, item = project(tmp_path)
    session, source = start_session(repo, item)
    remove = hook(repo, "reference-transaction", KILL_ON_SESSION_REF)
    drop = ("session", "drop", session, "--as", "alice", "--json")
    killed(repo, *drop, at="prepared")
    left = [repo / ".git" / "packed-refs.lock", repo / ".git" / "refs" / "heads" / "session" / f"{session}.lock"]
    assert [p.exists() for p in left] == [True, True]
    remove.unlink()
    aged(*left)
    again = run_gw(repo, *drop)
    assert again.returncode == 0, again.stdout + again.stderr
    assert '"branch": "deleted"' in again.stdout, again.stdout
    assert git(repo, "branch", "--list", f"session/{session}") == ""
    assert not any(p.exists() for p in left)


def test_a_session_commit_killed_after_git_moved_the_branch_is_recorded_by_the_same_command_again(
        tmp_path: Path) -> None:
    """``gw session commit`` killed with its group just after ``git commit`` moved the session branch, before
    gw wrote the manifest or the record: before, every later ``gw session commit`` was refused (exit 6, "moved
    from its base outside gw: its one commit is used up"), so the work could never be recorded or published.
    The branch's one commit on the base, with this session's trailers, is recognised as the killed command's
    own and recorded; a commit made outside gw is still refused."""
    repo, item = project(tmp_path)
    session, source = start_session(repo, item)
    (source / "a.txt").write_text("beta\n")
    remove = hook(repo, "reference-transaction", KILL_ON_SESSION_REF)
    commit = ("session", "commit", session, "--file", "a.txt", "-m", "change a", "--as", "alice", "--json")
    killed(repo, *commit, at="committed")
    remove.unlink()
    made = git(repo, "rev-parse", f"session/{session}")
    wrong = run_gw(repo, "session", "commit", session, "--file", "b.txt", "-m", "change a", "--as", "alice")
    assert wrong.returncode == 5 and "declare exactly those files" in wrong.stderr, wrong.stdout + wrong.stderr
    again = run_gw(repo, *commit)
    assert again.returncode == 0, again.stdout + again.stderr
    assert f'"commit": "{made}"' in again.stdout
    listed = run_gw(repo, "session", "list", "--json")
    assert '"state": "committed"' in listed.stdout, listed.stdout
    assert run_gw(repo, *commit).returncode == 6  # commit-once still: the second time is refused

    # A commit on the session branch that gw did not make (no session trailers) is still "used up".
    other, source = start_session(repo, item)
    (source / "a.txt").write_text("gamma\n")
    git(source, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qam", "by hand")
    by_hand = run_gw(repo, "session", "commit", other, "--file", "a.txt", "-m", "x", "--as", "alice")
    assert by_hand.returncode == 6 and "outside gw" in by_hand.stderr, by_hand.stdout + by_hand.stderr


KILL_ON_CHECKOUT = """#!/bin/sh
# test hook: kill the whole process group of the start under test from inside its `git worktree add`
[ -n "$GW_TEST_KILL" ] && kill -KILL 0
exit 0
"""

START_NAMED = """
import sys
from gitwork import sessions
from gitwork.workplane import Workplane
with Workplane(sys.argv[1], agent="alice") as wp:
    sessions.start(wp, sys.argv[2], session_id=sys.argv[3])
"""


def test_a_named_session_start_killed_in_git_worktree_add_is_made_again_by_the_next_start(tmp_path: Path) -> None:
    """A multi-step session's source branch is a named session, started once (``plan._source_for``). A start
    killed with its group inside ``git worktree add`` (from its ``post-checkout`` hook: the worktree and the
    branch are made, the manifest is not) left the folder, and every later step waited 30 s and failed (exit
    75, "a start died half way; remove <folder>") until a person removed it. The next start finds nobody
    holding the start and a folder older than ``STALE_AFTER`` (aged here), clears it and starts again."""
    repo, item = project(tmp_path)
    name = "20261203-010203-proj-alice-s1-p1"
    remove = hook(repo, "post-checkout", KILL_ON_CHECKOUT)
    done = subprocess.run([sys.executable, "-c", START_NAMED, str(repo), item, name], cwd=repo,
                          env={**os.environ, "GW_TEST_KILL": "1", "GW_NO_AUTO_GC": "1"}, capture_output=True,
                          text=True, timeout=60, start_new_session=True)
    assert done.returncode == -9, (done.returncode, done.stderr)
    remove.unlink()
    folder = Path(sessions.session_dir(str(repo), name))
    assert (folder / "source").is_dir() and not (folder / sessions.MANIFEST).exists()
    assert git(repo, "branch", "--list", f"session/{name}") != ""
    with Workplane(str(repo), agent="alice") as wp:
        with pytest.raises(Held):  # young: the start that made it may be alive and about to lock it
            sessions.start(wp, item, session_id=name)
        aged(folder)
        # What a step waiting for the source branch does (plan._source_for): it tries the start again.
        record = _started(str(repo), name, wait=10, start=lambda: sessions.start(wp, item, session_id=name))
    assert record.id == name and record.get("recorded") and (folder / sessions.MANIFEST).exists()
    assert sorted(os.listdir(folder)) == [sessions.MANIFEST, "source"]
    assert git(Path(record.source), "rev-parse", "--abbrev-ref", "HEAD") == f"session/{name}"
    with Workplane(str(repo), agent="alice") as wp, pytest.raises(Held):  # started: once only
        sessions.start(wp, item, session_id=name)
    assert sorted(os.listdir(folder)) == [sessions.MANIFEST, "source"]


def test_a_config_lock_a_killed_git_config_left_no_longer_stops_gw_config_set_for_good(tmp_path: Path) -> None:
    """``gw config set`` writes the clone's git config through ``git config``, which holds ``config.lock`` for
    the milliseconds it writes; killed with the command's group there, it leaves it (planted here, aged:
    no hook runs inside ``git config``), and every later ``gw config set`` failed (exit 1, "could not lock
    config file") until a person removed it. A young lock is still refused."""
    repo, _item = project(tmp_path)
    lock = repo / ".git" / "config.lock"
    lock.write_text("")
    refused = run_gw(repo, "config", "set", "lock_timeout", "7")
    assert refused.returncode != 0 and lock.exists(), refused.stdout + refused.stderr
    aged(lock)
    done = run_gw(repo, "config", "set", "lock_timeout", "7")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "removed the stale lock config.lock" in done.stderr and not lock.exists()
    assert git(repo, "config", "gitwork.lockTimeout") == "7"


def checkout_killer(tmp_path: Path) -> dict[str, str]:
    """An environment whose git runs a smudge filter on every file it checks out, and the filter kills its
    process group: a ``git worktree add`` dies mid-checkout, while git still marks the new worktree
    "initializing" (``.git/worktrees/<name>/locked``)."""
    attributes = tmp_path / "kill-attributes"
    attributes.write_text("* filter=killer\n")
    return {"GIT_CONFIG_COUNT": "2", "GIT_CONFIG_KEY_0": "core.attributesFile", "GIT_CONFIG_VALUE_0": str(attributes),
            "GIT_CONFIG_KEY_1": "filter.killer.smudge", "GIT_CONFIG_VALUE_1": "kill -KILL 0"}


def test_a_publish_killed_in_its_gates_worktree_add_publishes_when_run_again(tmp_path: Path) -> None:
    """``gw publish`` of a merge with gates runs them in a scratch worktree (``<session>/merge``); killed with
    its group inside that ``git worktree add`` (mid-checkout: a smudge filter kills the group), it left a
    worktree git still marks "initializing", which ``git worktree remove --force`` and ``prune`` leave
    alone, and the next ``gw publish`` failed ("is a missing but locked worktree") until a person ran
    ``git worktree unlock``."""
    repo, item = project(tmp_path)
    git(repo, "config", "gitwork.gates", "true")
    with Workplane(str(repo), agent="alice") as wp:
        started = sessions.start(wp, item, from_ref="main")
        (Path(started["worktree"]) / "a.txt").write_text("alpha v2\n")
        sessions.commit(wp, ["a.txt"], "session change", session=started["session"])
    git(repo, "checkout", "-q", "-b", "work")  # main moves while the person works elsewhere: a merge
    (repo / "b.txt").write_text("beta\n")
    git(repo, "add", "b.txt")
    git(repo, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "-m", "b")
    git(repo, "update-ref", "refs/heads/main", git(repo, "rev-parse", "HEAD"))
    publish = ("publish", started["session"], "--as", "alice", "--json")
    done = subprocess.run(gw_cmd(*publish), cwd=repo, env={**os.environ, **checkout_killer(tmp_path),
                          "GW_NO_AUTO_GC": "1"}, capture_output=True, text=True, timeout=60, start_new_session=True)
    assert done.returncode == -9, (done.returncode, done.stdout, done.stderr)
    assert (repo / ".git" / "worktrees" / "merge" / "locked").exists()
    again = run_gw(repo, *publish)
    assert again.returncode == 0, again.stdout + again.stderr
    assert '"mode": "merge"' in again.stdout


def test_the_publish_queues_scratch_worktree_killed_mid_add_is_removed_by_the_next_publisher(tmp_path: Path) -> None:
    """The publish queue's publisher runs gates in ``.worktrees/queue/<seq>`` the same way (``pubqueue``): the
    ``git worktree add`` it runs, killed mid-checkout with its group, left a locked worktree that
    ``_remove_worktree`` (one ``--force``, ``prune``) left, and the next publisher's ``git worktree add``
    of that entry failed until a person unlocked it."""
    from gitwork import pubqueue

    repo, _item = project(tmp_path)
    scratch = repo / ".worktrees" / "queue" / "00000001"
    done = subprocess.run(["git", "worktree", "add", "-q", "--detach", str(scratch), "HEAD"], cwd=repo,
                          env={**os.environ, **checkout_killer(tmp_path)}, capture_output=True, timeout=60,
                          start_new_session=True)
    assert done.returncode == -9 and (repo / ".git" / "worktrees" / "00000001" / "locked").exists()
    pubqueue._remove_worktree(str(repo), str(scratch))
    git(repo, "worktree", "add", "-q", "--detach", str(scratch), "HEAD")  # before: "a missing but locked worktree"


def test_a_config_lock_a_killed_git_config_left_no_longer_stops_gw_remote_set_for_good(tmp_path: Path) -> None:
    """``gw remote set`` (and ``gw init --remote``) write the clone's git config; a ``config.lock`` a killed
    ``git config`` left (planted, aged) fails every later one (exit 1, "could not lock config file")."""
    repo, _item = project(tmp_path)
    git(repo, "remote", "add", "origin", str(tmp_path / "nowhere.git"))
    lock = repo / ".git" / "config.lock"
    lock.write_text("")
    aged(lock)
    done = run_gw(repo, "remote", "set", "origin")
    assert done.returncode == 0, done.stdout + done.stderr
    assert not lock.exists()


KILL_ON_REMOTE_SESSION_REF = kill_hook("on the code remote (over file:// its receive-pack runs in the pusher's "
                                       "process group) while the session branch's lock is held there",
                                       "refs/heads/session/")


def committed_session(a: Path, remote: Path) -> str:
    """Machine ``a`` (its arbiter ``remote`` with gitwork's server hooks, also its code remote, holding
    ``main``) with a committed session of alice's: its id."""
    git(a, "symbolic-ref", "HEAD", "refs/heads/main")
    (a / "a.txt").write_text("alpha\n")
    git(a, "add", "a.txt")
    git(a, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "-m", "initial")
    git(a, "push", "-q", "origin", "HEAD:refs/heads/main")
    assert run_gw(remote.parent, "hooks", "install", "--server", str(remote)).returncode == 0
    made = run_gw(a, "new", "queued work", "--json")
    item = made.stdout.split('"item": "')[1].split('"')[0]
    assert run_gw(a, "claim", item, "--as", "alice").returncode == 0
    with Workplane(str(a), agent="alice") as wp:
        started = sessions.start(wp, item)
        (Path(started["worktree"]) / "a.txt").write_text("alpha v2\n")
        sessions.commit(wp, ["a.txt"], "session change", session=started["session"])
    return str(started["session"])


def test_a_queue_push_killed_while_the_remote_held_the_session_branchs_lock_is_pushed_again(
        machine_a: Path, remote: Path) -> None:
    """``gw publish --queue`` pushes the session branch to the code remote (here the arbiter, with gitwork's
    server hooks); killed with its group while the remote's ``receive-pack`` (over ``file://``, in the same
    group) held ``refs/heads/session/<id>.lock``, it left that lock on the remote, and every later push of
    the branch was refused (exit 13, "cannot lock ref") until a person removed it there. The server hook
    removes it by the stale-lock rule, as it does for the state refs."""
    a = machine_a
    session = committed_session(a, remote)
    kill = hook(remote, "reference-transaction", KILL_ON_REMOTE_SESSION_REF)
    queue = ("publish", "--queue", session, "--as", "alice", "--json")
    killed(a, *queue, at="prepared")
    kill.unlink()
    lock = remote / "refs" / "heads" / "session" / f"{session}.lock"
    assert lock.exists()
    aged(lock)
    again = run_gw(a, *queue)
    assert again.returncode == 0, again.stdout + again.stderr
    assert not lock.exists()
    assert git(remote, "rev-parse", f"refs/heads/session/{session}") == git(a, "rev-parse", f"session/{session}")


KILL_ON_QUEUE_FETCH = kill_hook("the publisher's fetch holds the lock of a publish-queue ref", "refs/gitwork/queue/")


def test_a_publisher_killed_in_its_fetch_of_a_queued_branch_lands_it_on_the_next_pass(
        machine_a: Path, remote: Path) -> None:
    """The publisher (``gw queue work``) fetches each queued session branch into ``refs/gitwork/queue/<id>``;
    killed with its group while that fetch held the ref's lock, it left it, and every later pass read the
    failed fetch as "the session branch is not on the remote" and sent the entry back, and again after each
    ``gw publish --queue``: it could never land until a person removed the lock."""
    a = machine_a
    session = committed_session(a, remote)
    queued = run_gw(a, "publish", "--queue", session, "--as", "alice")
    assert queued.returncode == 0, queued.stdout + queued.stderr
    kill = hook(a, "reference-transaction", KILL_ON_QUEUE_FETCH)
    killed(a, "queue", "work", "--once", "--as", "alice", at="prepared")
    kill.unlink()
    lock = a / ".git" / "refs" / "gitwork" / "queue" / f"{session}.lock"
    assert lock.exists()
    aged(lock)
    # The killed publisher's lease (its default 120 s) is left to run out: the next pass comes after it.
    later = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(time.time() + 300))
    work = run_gw(a, "queue", "work", "--once", "--as", "alice", "--json", env={"GW_NOW": later})
    assert work.returncode == 0, work.stdout + work.stderr
    assert '"outcome": "landed"' in work.stdout, work.stdout
    assert git(remote, "merge-base", "--is-ancestor", git(a, "rev-parse", f"session/{session}"), "main",
               check=False) == ""
    assert not lock.exists()


KILL_ON_TRACKING_FETCH = KILL_ON_QUEUE_FETCH.replace("refs/gitwork/queue/", "refs/remotes/origin/main")


def test_a_publish_killed_in_its_fetch_of_the_target_publishes_when_run_again(machine_a: Path, remote: Path) -> None:
    """``gw publish`` to a code remote fetches the target into ``refs/remotes/<remote>/<into>``; killed with its
    group while that fetch held the ref's lock, it left it, and every later ``gw publish`` failed (exit 12,
    "cannot fetch main from origin ... cannot lock ref") until a person removed it."""
    a = machine_a
    session = committed_session(a, remote)
    git(a, "update-ref", "-d", "refs/remotes/origin/main")  # (so that the publish's fetch writes it, under its lock)
    made = git(a, "rev-parse", f"session/{session}")
    kill = hook(a, "reference-transaction", KILL_ON_TRACKING_FETCH)
    publish = ("publish", session, "--remote", "origin", "--as", "alice", "--json")
    killed(a, *publish, at="prepared")
    kill.unlink()
    lock = a / ".git" / "refs" / "remotes" / "origin" / "main.lock"
    assert lock.exists()
    aged(lock)
    again = run_gw(a, *publish)
    assert again.returncode == 0, again.stdout + again.stderr
    assert git(remote, "rev-parse", "main") == made
    assert not lock.exists()


def test_a_session_start_killed_before_its_record_can_be_dropped(tmp_path: Path) -> None:
    """``gw session start`` killed (``GW_CRASH_AT=before-cas``) after its worktree, branch and manifest, before
    its record: the state never knew the session, so ``gw session drop`` was refused (exit 5, "has no
    session") and so was a publish; its worktree and branch stayed and ``gw session list`` showed it live,
    for good. The drop now removes it locally and says so; the same start again makes a new session."""
    repo, item = project(tmp_path)
    done = subprocess.run(gw_cmd("session", "start", item, "--as", "alice"), cwd=repo, capture_output=True,
                          env={**os.environ, "GW_CRASH_AT": "before-cas", "GW_NO_AUTO_GC": "1"}, text=True, timeout=60)
    assert done.returncode == -9, done.stderr
    [session] = os.listdir(repo / ".worktrees" / "sessions")
    dropped = run_gw(repo, "session", "drop", session, "--as", "alice", "--json")
    assert dropped.returncode == 0, dropped.stdout + dropped.stderr
    assert "never recorded" in dropped.stdout and '"branch": "deleted"' in dropped.stdout, dropped.stdout
    assert git(repo, "branch", "--list", f"session/{session}") == ""
    assert not (repo / ".worktrees" / "sessions" / session / "source").exists()
    assert '"live": true' not in run_gw(repo, "session", "list", "--json").stdout


KILL_ON_MAIN = KILL_ON_QUEUE_FETCH.replace("refs/gitwork/queue/", "refs/heads/main")


def test_a_local_publish_killed_while_git_held_the_targets_lock_publishes_when_run_again(tmp_path: Path) -> None:
    """``gw publish`` into a local branch nobody has checked out moves it with ``git update-ref``; killed with its
    group while that held ``refs/heads/main.lock``, it left it, and every later publish failed (exit 13, "main
    kept moving while publishing ...; try again"), misleadingly and for good, until a person removed it."""
    repo, item = project(tmp_path)
    with Workplane(str(repo), agent="alice") as wp:
        started = sessions.start(wp, item, from_ref="main")
        (Path(started["worktree"]) / "a.txt").write_text("alpha v2\n")
        made = sessions.commit(wp, ["a.txt"], "session change", session=started["session"])["commit"]
    git(repo, "checkout", "-q", "-b", "work")
    kill = hook(repo, "reference-transaction", KILL_ON_MAIN)
    publish = ("publish", started["session"], "--as", "alice", "--json")
    killed(repo, *publish, at="prepared")
    kill.unlink()
    lock = repo / ".git" / "refs" / "heads" / "main.lock"
    assert lock.exists()
    aged(lock)
    again = run_gw(repo, *publish)
    assert again.returncode == 0, again.stdout + again.stderr
    assert git(repo, "rev-parse", "main") == made and not lock.exists()


def test_a_publish_killed_inside_the_fast_forward_of_the_checked_out_branch_finishes_when_run_again(
        tmp_path: Path) -> None:
    """``gw publish`` into the branch the person has checked out runs ``git merge --ff-only`` there; killed with
    its group after git wrote the index and files, while it held ``HEAD.lock`` and the branch's lock, it
    left the checkout holding the session's change with the branch not moved, and every later publish
    refused that checkout as dirty (exit 13), for good. The publish now recognises exactly that (the branch
    an ancestor of the commit, the index holding its tree, the files the index), removes the stale locks
    and finishes the move; other uncommitted work is still refused."""
    repo, item = project(tmp_path)
    with Workplane(str(repo), agent="alice") as wp:
        started = sessions.start(wp, item, from_ref="main")
        (Path(started["worktree"]) / "a.txt").write_text("alpha v2\n")
        made = sessions.commit(wp, ["a.txt"], "session change", session=started["session"])["commit"]
    kill = hook(repo, "reference-transaction", KILL_ON_MAIN)
    publish = ("publish", started["session"], "--as", "alice", "--json")
    killed(repo, *publish, at="prepared")
    kill.unlink()
    locks = [repo / ".git" / "HEAD.lock", repo / ".git" / "refs" / "heads" / "main.lock"]
    assert [p.exists() for p in locks] == [True, True]
    assert (repo / "a.txt").read_text() == "alpha v2\n" and git(repo, "rev-parse", "main") != made
    aged(*locks)
    (repo / "a.txt").write_text("the person's own edit\n")
    refused = run_gw(repo, *publish)
    assert refused.returncode == 13 and "uncommitted changes" in refused.stderr, refused.stdout + refused.stderr
    (repo / "a.txt").write_text("alpha v2\n")
    again = run_gw(repo, *publish)
    assert again.returncode == 0, again.stdout + again.stderr
    assert git(repo, "rev-parse", "main") == made and not any(p.exists() for p in locks)
    assert git(repo, "status", "--porcelain", "--untracked-files=no") == ""


KILL_ON_INBOX_PRUNE = kill_hook("the batch applier (in the pusher's group over file://) holds the inbox refs' "
                                "locks and packed-refs.lock (a prune)",
                                "0000000000000000000000000000000000000000 refs/gitwork/inbox/")


def test_an_applier_killed_inside_its_answers_transaction_leaves_no_lock_that_stops_later_batches(
        machine_a: Path, remote: Path) -> None:
    """The batch arbiter's applier answers a batch and prunes answered inbox refs older than ``ANSWER_KEPT`` in
    one ``update-ref`` transaction. Killed inside it (over ``file://`` it runs in the pusher's process
    group), it left the locks of the inbox refs it answered and pruned and ``packed-refs.lock``; from then
    on every batch's transaction failed: the killed request was decided again in every batch and never
    answered, and no answer was pruned again, silently. The applier now removes those locks by the
    stale-lock rule and runs the transaction again."""
    assert run_gw(remote.parent, "hooks", "install", "--server", str(remote)).returncode == 0
    for where in (remote, machine_a):
        git(where, "config", "gitwork.arbiter", "batch")
    for title in ("one", "two"):
        assert run_gw(machine_a, "new", title).returncode == 0
    assert run_gw(machine_a, "sync").returncode == 0  # (so that each claim below goes through the inbox alone)
    # An answered request of two hours ago (an answer commit: the request as its parent), due for pruning.
    env = {**os.environ, "GIT_COMMITTER_DATE": f"@{int(time.time()) - 7200} +0000", "GIT_COMMITTER_NAME": "gitwork",
           "GIT_COMMITTER_EMAIL": "gitwork@localhost", "GIT_AUTHOR_NAME": "gitwork", "GIT_AUTHOR_EMAIL": "gitwork@localhost"}
    empty = git(remote, "hash-object", "-t", "tree", "-w", "--stdin", input=b"")
    answer = subprocess.run(["git", "commit-tree", empty, "-p", tip(remote) or "", "-m", "gitwork answer"], cwd=remote,
                            env=env, capture_output=True, text=True, check=True).stdout.strip()
    old = "refs/gitwork/inbox/c-0123456789abcdef"
    git(remote, "update-ref", old, answer)
    kill = hook(remote, "reference-transaction", KILL_ON_INBOX_PRUNE)
    killed(machine_a, "claim", "--next", "--as", "bob", at="prepared")
    kill.unlink()
    inbox = remote / "refs" / "gitwork" / "inbox"
    locks = [remote / "packed-refs.lock", *inbox.glob("*.lock")]
    assert len(locks) == 3, locks  # packed-refs, the pruned answer's, the killed request's
    [request] = [p.name[:-5] for p in locks[1:] if p.name != "c-0123456789abcdef.lock"]
    aged(*locks)
    done = run_gw(machine_a, "claim", "--next", "--as", "carol")
    assert done.returncode == 0, done.stdout + done.stderr
    assert not any(p.exists() for p in locks)
    left = git(remote, "for-each-ref", "--format=%(refname)", "refs/gitwork/inbox/").split()
    assert old not in left, left
    assert git(remote, "log", "-1", "--format=%s", f"refs/gitwork/inbox/{request}").startswith("gitwork answer")
