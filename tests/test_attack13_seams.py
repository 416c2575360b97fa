"""An outsider's pass (session 12, attack13) on the places where two features meet.

- forged git objects x the arbiter's state hook: the hook derives every pushed *commit*, but the object the
  state ref is moved to was never required to be a commit. ``git push origin <annotated tag>:refs/gitwork/state``
  (the tag wrapping the arbiter's own tip, or an honest clone's next state commit) was accepted, and from
  then on every clone's ``gw sync``, ``claim``, ``done`` and a fresh clone's ``gw init`` were exit 8
  ("object ... is a tag, expected a commit"), and the arbiter's next honest push too: one plain ``git push``
  stopped every machine until someone moved the arbiter's ref by hand.

- forged git objects x what the hook reads to judge them: a changed ``.yaml`` of a refused commit was parsed
  whole to say what it broke, and every pushed command record was read whole for its digest; a blob of zeros
  or a YAML list compresses a thousandfold, so a push of a megabyte took the arbiter gigabytes (a MemoryError
  under a bound);
- the setting ``ref`` x the state hook: a state ref named by the arbiter's ``gitwork.ref`` outside
  ``refs/gitwork/`` was not guarded at all (forged commits and rewinds accepted), nor was a stale lock of it
  swept, on the arbiter (every push refused until a person removed it), on a clone or in the command
  service (every command exit 11);
- offline replay x the arbiter's clock: one command made under a clock months ahead wedges every lease
  command of the clone (strict xfail: a design decision).

Each scenario runs real clones, a real bare arbiter under ``gw hooks install --server`` and the real ``gw``
(or plain ``git``) in child processes; nothing is mocked.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from pathlib import Path

import pytest

from conftest import git, run_gw, tip
from test_arbiter_derive import forge as copy_commit
from test_arbiter_derive import tree_with
from test_sync import STATE, gw_ok

CORRUPT = 8


def hooked(remote: Path) -> None:
    done = run_gw(remote.parent, "hooks", "install", "--server", str(remote))
    assert done.returncode == 0, done.stderr


def plain_push(repo: Path, url: str, *refspecs: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["git", "push", "--porcelain", url, *refspecs], cwd=repo, capture_output=True, text=True)


def forge(repo: Path, files: dict[str, bytes], honest: str = STATE) -> str:
    """The commit ``honest`` (its parent, command, message, author, committer and times) with ``files`` added
    to its tree, made with plain git: the replay of its command then differs from it only in the tree."""
    commit = git(repo, "rev-parse", honest)
    return copy_commit(repo, commit, tree=tree_with(repo, commit, dict(files)))


def push_within(repo: Path, url: str, refspec: str, limit: int) -> subprocess.CompletedProcess[str]:
    """``git push`` to a receiving side (receive-pack, the arbiter's hook) held to ``limit`` bytes of address
    space: git runs a ``--receive-pack`` with shell words through the shell, the path of the repository
    appended."""
    return subprocess.run(["git", "push", "--porcelain", f"--receive-pack=ulimit -v {limit >> 10}; git-receive-pack",
                           url, refspec], cwd=repo, capture_output=True, text=True)


# --- forged objects x the state hook: what the state ref may point at -------------------------------------------


@pytest.mark.parametrize("wrapped", ["arbiter-tip", "next-commit", "tree"])
def test_the_state_ref_is_moved_only_to_a_commit(machine_a: Path, remote: Path, url: str, wrapped: str) -> None:
    """The hook peeled whatever the ref was moved to (``rev-list NEW``) and judged the commits behind it, so an
    annotated tag of the arbiter's own tip (no new commit: nothing to judge) or of the clone's honest next
    commit (judged sound) was accepted as the ref's target. Every reader of the state takes the ref for a
    commit: from then on every ``gw sync``/``claim`` on every clone was exit 8. Now the ref moves only to a
    commit; the push is refused in the hook's words and the arbiter's ref is untouched."""
    a = machine_a
    hooked(remote)
    item = gw_ok(a, "new", "work")["item"]  # local only: the clone's next state commit, not yet on the arbiter
    before = tip(remote)
    assert before is not None and tip(a) != before
    target = {"arbiter-tip": before, "next-commit": tip(a), "tree": f"{tip(a)}^{{tree}}"}[wrapped]
    forged = (git(a, "rev-parse", target) if wrapped == "tree"
              else git(a, "-c", "user.name=m", "-c", "user.email=m@x", "tag", "-a", "-m", "state", "forged", target)
              or git(a, "rev-parse", "forged"))
    done = plain_push(a, url, f"+{forged}:{STATE}")
    assert done.returncode != 0, done.stdout + done.stderr
    assert "a commit" in done.stderr, done.stderr
    assert tip(remote) == before and git(remote, "cat-file", "-t", STATE) == "commit"
    claimed = gw_ok(a, "claim", item, "--as", "bob")  # the clone goes on: its news and claim land
    assert tip(remote) == claimed["commit"]


# --- forged objects x the state hook: what the hook reads of a refused commit --------------------------------------


def test_a_huge_state_file_in_a_forged_commit_is_refused_without_parsing_it(machine_a: Path, remote: Path,
                                                                          url: str) -> None:
    """A refused commit is explained by the structural checks (``hookcheck._check_commit``), which parsed every
    changed ``.yaml`` of the pushed tree in full: a YAML list compresses a thousandfold in the push and takes
    some 25 times its size to parse, so 1 MB pushed made the arbiter's hook take gigabytes and minutes (5 MB of
    ``- 1`` lines: 2 s CPU, 125 MB). 16 MB here (16 kB in the push), the arbiter's side held to 400 MB: the
    hook died of a MemoryError ("hook failed"). Now a changed file larger than any state file is not parsed to
    explain the refusal: the push is refused as the replay's difference, within the bound."""
    a = machine_a
    hooked(remote)
    before = tip(remote)
    gw_ok(a, "new", "work")  # local only: the honest commit the forged one copies
    forged = forge(a, {"format.yaml": b"- 1\n" * (4 << 20)})
    done = push_within(a, url, f"{forged}:{STATE}", 400 << 20)
    assert done.returncode != 0, done.stdout + done.stderr
    assert "Memory" not in done.stderr and "hook failed" not in done.stderr, done.stderr
    assert "tree differs from the command's replay at format.yaml" in done.stderr, done.stderr
    assert tip(remote) == before


# Four commits or more: the records of a push are read at once (derive._prefetch). Packed: the arbiter keeps the
# push's pack as it came (receive.unpackLimit), so the record is no loose object and git is asked its size.
@pytest.mark.parametrize(("commits", "packed"), [(1, False), (4, False), (1, True)])
def test_a_huge_command_record_in_a_forged_commit_is_not_read_whole(machine_a: Path, remote: Path, url: str,
                                                                    commits: int, packed: bool) -> None:
    """The one part of a pushed commit the replay takes from the push is its command record's first digest
    (``derive._requested``), and it read that blob whole, whatever its size, for every pushed commit (the
    sound ones too: before any comparison), then decoded it as JSON: some three times its size in memory.
    48 MB of zeros (48 kB in the push), the arbiter's side held to 100 MB (an honest push needs under
    60): the replay died of a MemoryError. Now a record larger than any command's record is not read: the
    commit is refused as the replay's difference, within the bound."""
    a = machine_a
    hooked(remote)
    git(remote, "config", "core.bigFileThreshold", "1m")  # git streams the blob: only the hook could hold it
    if packed:
        git(remote, "config", "receive.unpackLimit", "1")
    before = tip(remote)
    for n in range(commits):
        gw_ok(a, "new", f"work {n}")
    record = next(p for p in git(a, "diff-tree", "-r", "--name-only", f"{STATE}^", STATE).splitlines()
                  if p.startswith("commands/"))
    forged = forge(a, {record: b"\0" * (48 << 20)})
    done = push_within(a, url, f"{forged}:{STATE}", 100 << 20)
    assert done.returncode != 0, done.stdout + done.stderr
    assert "Memory" not in done.stderr and "hook failed" not in done.stderr, done.stderr
    assert f"tree differs from the command's replay at {record}" in done.stderr, done.stderr
    assert tip(remote) == before


# --- the setting `ref` x the state hook -------------------------------------------------------------------------


WORK_REF = "refs/work/state"


def custom_ref_clone(tmp_path: Path, remote: Path, url: str) -> Path:
    """The arbiter (gitwork's server hooks) and a clone ``a`` whose setting ``ref`` is ``refs/work/state``."""
    hooked(remote)
    git(remote, "config", "gitwork.ref", WORK_REF)
    a = tmp_path / "a"
    git(tmp_path, "init", "-q", str(a))
    git(a, "config", "gitwork.ref", WORK_REF)
    git(a, "remote", "add", "origin", url)
    gw_ok(a, "init", "--remote", "origin")
    return a


def test_a_state_ref_named_by_the_setting_ref_is_guarded_like_the_default(tmp_path: Path, remote: Path,
                                                                          url: str) -> None:
    """The setting ``ref`` takes any name under ``refs/`` (docs/format.md), and the arbiter's hook reads its own
    ``gitwork.ref`` to judge fences, but guarded only ``refs/gitwork/*``: with ``refs/work/state`` on the
    arbiter and its clones, a plain push of a commit no command made, and a forced rewind that took bob's
    acknowledged claim off the arbiter, were both accepted. Now the ref the arbiter's setting names is held
    to every state rule, and honest commands still land."""
    a = custom_ref_clone(tmp_path, remote, url)
    item = gw_ok(a, "new", "work")["item"]
    claimed = gw_ok(a, "claim", item, "--as", "bob")
    ref = WORK_REF
    assert tip(remote, ref) == claimed["commit"] == tip(a, ref)
    gw_ok(a, "new", "local")  # not yet on the arbiter: the honest commit the forged one copies
    forged = forge(a, {"items/forged.yaml": b"title: nobody made me\n"}, honest=ref)
    refused = plain_push(a, url, f"{forged}:{ref}")
    rewind = plain_push(a, url, f"+{claimed['commit']}~1:{ref}")
    assert refused.returncode != 0 and "tree differs from the command's replay" in refused.stderr, refused.stderr
    assert rewind.returncode != 0 and "non-fast-forward" in rewind.stderr, rewind.stderr
    assert tip(remote, ref) == claimed["commit"]
    gw_ok(a, "release", item, "--as", "bob", "--fence", str(claimed["fence"]))  # carries "local" with it
    assert tip(remote, ref) == tip(a, ref) != claimed["commit"]


def test_a_stale_lock_of_the_state_ref_the_setting_ref_names_is_swept_by_the_next_push(tmp_path: Path, remote: Path,
                                                                                      url: str) -> None:
    """A git killed while it held the arbiter's state ref lock leaves ``<ref>.lock``, and every later push of
    the ref fails; the hook removes such a lock once it is stale (docs/security.md, "A stale ref lock on the
    arbiter"), but only for ``refs/gitwork/*``: with ``ref: refs/work/state`` every claim, from every clone,
    was refused (14, "cannot lock ref") until someone removed the file by hand. Now the lock of the state
    ref the arbiter's setting names is swept like the default's (aged here past the stale age with
    ``os.utime``; nothing else is planted)."""
    a = custom_ref_clone(tmp_path, remote, url)
    item = gw_ok(a, "new", "work")["item"]
    gw_ok(a, "sync")
    lock = remote / (WORK_REF + ".lock")
    lock.write_text(tip(remote, WORK_REF) + "\n")
    then = time.time() - 60
    os.utime(lock, (then, then))
    done = run_gw(a, "claim", item, "--as", "bob", "--json")
    assert done.returncode == 0, done.stderr
    assert not lock.exists()
    assert tip(remote, WORK_REF) == tip(a, WORK_REF)


def test_a_stale_lock_of_a_clones_state_ref_the_setting_ref_names_is_swept_by_the_next_command(repo: Path) -> None:
    """The same on a clone: the store removes the ``<ref>.lock`` a killed ``git update-ref`` left on the state
    ref once it is stale (``Store._swept_git_lock``), but its sweep looked only under ``refs/gitwork/``: with
    ``ref: refs/work/state`` every command of the clone was exit 11 ("locked for over 5s") for good."""
    git(repo, "config", "gitwork.ref", WORK_REF)
    gw_ok(repo, "init")
    lock = repo / ".git" / (WORK_REF + ".lock")
    lock.write_text(tip(repo, WORK_REF) + "\n")
    then = time.time() - 60
    os.utime(lock, (then, then))
    before = tip(repo, WORK_REF)
    done = run_gw(repo, "new", "after the kill", "--json")
    assert done.returncode == 0, done.stderr
    assert not lock.exists() and tip(repo, WORK_REF) != before


def test_the_command_service_moves_a_state_ref_the_setting_names_past_a_stale_lock(tmp_path: Path) -> None:
    """The command service (``gw serve`` on the arbiter's bare repository: ``serve/writer.py``) writes through
    the same store: with ``ref: refs/work/state`` a lock a killed git left refused every REST write (11)."""
    from gitwork import clock
    from gitwork.serve.writer import Writer
    from gitwork.workplane import Workplane

    bare = tmp_path / "plane.git"
    git(tmp_path, "init", "-q", "--bare", str(bare))
    git(bare, "config", "gitwork.ref", WORK_REF)
    with Workplane(str(bare)) as plane:
        plane.do("init")
    lock = bare / (WORK_REF + ".lock")
    lock.write_text(tip(bare, WORK_REF) + "\n")
    then = time.time() - 60
    os.utime(lock, (then, then))
    serving = Writer(str(bare), now=clock.now)
    try:
        landed = serving.submit("alice", "person", {"op": "new", "title": "after the kill"})
    finally:
        serving.close()
    assert landed is not None and tip(bare, WORK_REF) == landed.commit and not lock.exists()


# --- offline replay x the arbiter's clock ------------------------------------------------------------------------


def test_a_command_dated_past_the_arbiters_clock_does_not_stop_the_clones_other_commands(machine_a: Path,
                                                                                        remote: Path) -> None:
    """A machine whose clock ran months ahead (a VM restored with a bad clock, a wrong RTC until NTP caught up)
    recorded one local command then. Its clock is right again, but the arbiter refuses that commit ("commit
    time ... is later than the arbiter's clock plus clock_margin") on every push, and every lease command of
    the clone carries it: bob's claim of another item, every renew and done of every agent there, and every
    ``gw sync`` are exit 14 until the arbiter's clock passes the date. docs/leases.md says a bad clock can only
    make a party try too early or too late. Now (as for the arbiter's roles, attack11): more than FAR_AHEAD
    past the arbiter's clock, the hook's refusal is that command's verdict, refused and reported (kept in
    arbiter-refused.jsonl and refused.jsonl), and the claim lands (a strict xfail until the fix)."""
    a = machine_a
    hooked(remote)
    item = gw_ok(a, "new", "work")["item"]
    gw_ok(a, "sync")
    ahead = gw_ok(a, "new", "made with a clock months ahead", env={"GW_NOW": "2099-06-01T00:00:00Z"})
    done = run_gw(a, "claim", item, "--as", "bob", "--json")
    assert done.returncode == 0, done.stderr
    assert tip(remote) == tip(a) and ahead["command_id"] not in git(remote, "log", "--format=%B", STATE)
    assert [r["command_id"] for r in json.loads(done.stdout)["refused"]] == [ahead["command_id"]], done.stdout
    kept = (a / ".git" / "gitwork" / "arbiter-refused.jsonl").read_text()
    assert ahead["command_id"] in kept and "clock refuses it" in kept
    assert run_gw(a, "sync").returncode == 0  # reported once; nothing left to push


def test_a_command_a_few_minutes_ahead_is_not_given_up_for_the_arbiters_clock(machine_a: Path, remote: Path) -> None:
    """A skew under FAR_AHEAD heals by itself: the push is refused (14) while the arbiter's clock is behind the
    command, and the command is kept, not turned into a verdict."""
    import datetime as dt

    a = machine_a
    hooked(remote)
    item = gw_ok(a, "new", "work")["item"]
    gw_ok(a, "sync")
    soon = (dt.datetime.now(dt.timezone.utc) + dt.timedelta(minutes=5)).strftime("%Y-%m-%dT%H:%M:%SZ")
    ahead = gw_ok(a, "new", "made five minutes ahead", env={"GW_NOW": soon})
    done = run_gw(a, "claim", item, "--as", "bob", "--json")
    assert done.returncode == 14 and "later than the arbiter's clock" in done.stdout, done.stdout
    assert not (a / ".git" / "gitwork" / "arbiter-refused.jsonl").exists()
    assert ahead["command_id"] in git(a, "log", "--format=%B", STATE)  # still the clone's, to push later
