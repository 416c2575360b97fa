"""The arbiter derives the state (issue 23): a pushed state commit lands only if it is exactly what its
command produces on its parent under the arbiter's own settings (``gitwork/derive.py``).

A real bare arbiter with gitwork's server hook (``install_server``), real clones writing through the
real engine, and forgeries made with git plumbing and pushed with plain ``git push``, as an attacker
with push access would. Every refused push leaves the arbiter's state ref where it was.
"""

from __future__ import annotations

import datetime as dt
import os
import re
import subprocess
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from conftest import git, let_post, make_repo, tip
from gitwork.cli.main import main
from gitwork.errors import GwError
from gitwork.hooks_install import install_server
from gitwork.sshsig import sign_commit, split_signed_commit
from gitwork.workplane import Workplane
from test_signing import keygen

STATE = "refs/gitwork/state"
STALE = 7


# --- plumbing: reading and forging commits the way an attacker would --------------------------------


def raw_commit(repo: Path, commit: str) -> bytes:
    return subprocess.run(["git", "cat-file", "commit", commit], cwd=repo, capture_output=True, check=True).stdout


def write_commit(repo: Path, body: bytes) -> str:
    done = subprocess.run(["git", "hash-object", "-t", "commit", "-w", "--stdin"], cwd=repo, input=body,
                          capture_output=True, check=True)
    return done.stdout.decode().strip()


def tree_with(repo: Path, commit: str, changes: dict[str, bytes | None]) -> str:
    """The tree of ``commit`` with ``changes`` (path -> content, ``None`` removes), written with git."""
    env = {**os.environ, "GIT_INDEX_FILE": str(repo / ".git" / "forged-index")}

    def run(*args: str, data: bytes | None = None) -> str:
        done = subprocess.run(["git", *args], cwd=repo, env=env, input=data, capture_output=True)
        assert done.returncode == 0, done.stderr.decode()
        return done.stdout.decode().strip()

    run("read-tree", commit)
    for path, content in changes.items():
        if content is None:
            run("update-index", "--force-remove", path)
        else:
            run("update-index", "--add", "--cacheinfo", f"100644,{run('hash-object', '-w', '--stdin', data=content)},{path}")
    return run("write-tree")


def forge(repo: Path, commit: str, *, parent: str | None = None, tree: str | None = None,
          header: tuple[str, str] | None = None, message: bytes | None = None, key: str | None = None) -> str:
    """A copy of ``commit`` with one thing replaced: its parent, tree, one header line (``("author",
    "Alice <alice@gitwork.invalid> 1 +0000")``) or message; signed with ``key`` when given."""
    body, _signature = split_signed_commit(raw_commit(repo, commit))
    head, _, text = body.partition(b"\n\n")
    lines = head.split(b"\n")
    for index, line in enumerate(lines):
        name, _, _value = line.partition(b" ")
        if name == b"tree" and tree is not None:
            lines[index] = b"tree " + tree.encode()
        elif name == b"parent" and parent is not None:
            lines[index] = b"parent " + parent.encode()
        elif header is not None and name == header[0].encode():
            lines[index] = f"{header[0]} {header[1]}".encode()
    body = b"\n".join(lines) + b"\n\n" + (text if message is None else message)
    return write_commit(repo, sign_commit(body, key) if key else body)


def push(repo: Path, *refspecs: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["git", "push", "--porcelain", "origin", *refspecs], cwd=repo, capture_output=True, text=True)


def refused(done: subprocess.CompletedProcess[str], bare: Path, before: str | None, *words: str) -> None:
    assert done.returncode != 0, done.stdout + done.stderr
    assert "pre-receive hook declined" in done.stdout + done.stderr
    for word in words:
        assert word in done.stderr, done.stderr
    assert tip(bare) == before  # the arbiter's state did not move


def lease_path(repo: Path, item: str) -> str:
    listing = git(repo, "ls-tree", "-r", "--name-only", STATE)
    return next(path for path in listing.splitlines() if f"/{item}/" in path and path.endswith("lease.yaml"))


# --- the world: an arbiter where alice holds an item, and bob with push access ----------------------


def clone(tmp_path: Path, name: str, bare: Path, key: str | None = None) -> Path:
    path = make_repo(tmp_path / name)
    git(path, "remote", "add", "origin", f"file://{bare}")
    git(path, "config", "gitwork.agent", name)
    let_post(path, "bob")  # bob posts on alice's item: these tests are about the derive, not who may post
    if key is not None:
        git(path, "config", "gitwork.signing", "ssh")
        git(path, "config", "gitwork.signingKey", key)
    assert main(["init", "--remote", "origin", "-C", str(path)]) == 0
    return path


def arbiter(tmp_path: Path, keys: dict[str, tuple[str, str]] | None = None) -> Path:
    bare = make_repo(tmp_path / "arbiter.git", bare=True)
    install_server(str(bare))
    let_post(bare, "bob")  # the arbiter's own settings decide (its derive re-applies the rule)
    if keys:
        git(bare, "config", "gitwork.signing", "ssh")
        (bare / "gitwork").mkdir()
        (bare / "gitwork" / "allowed_signers").write_text("".join(f"{n} {k[1]}\n" for n, k in keys.items()))
    return bare


def alice_holds_an_item(tmp_path: Path, keys: dict[str, tuple[str, str]] | None = None
                        ) -> tuple[Path, Path, Path, str]:
    """(arbiter, alice's clone, bob's clone, the item alice holds on the arbiter)."""
    bare = arbiter(tmp_path, keys)
    alice = clone(tmp_path, "alice", bare, keys["alice"][0] if keys else None)
    with Workplane(str(alice)) as wp:
        item = wp.do("new", title="contested").result["item"]
    assert main(["sync", "-C", str(alice)]) == 0
    with Workplane(str(alice)) as wp:
        wp.do("claim", item=item, ttl="1h")  # an arbiter op: on the arbiter once it returns
    bob = clone(tmp_path, "bob", bare, keys["bob"][0] if keys else None)
    assert tip(bob) == tip(bare) == tip(alice)
    return bare, alice, bob, item


def bob_says(bob: Path, item: str, text: str = "hello") -> str:
    """An ordinary ``gw msg`` by bob: lands on bob's clone only (the arbiter does not decide msg)."""
    with Workplane(str(bob)) as wp:
        wp.do("msg", item=item, text=text, epoch="current")
    commit = tip(bob)
    assert commit is not None
    return commit


def lease_to_bob(bob: Path, commit: str, item: str, key: str | None = None) -> str:
    """Bob's msg commit again, its tree also handing him the lease (the command unchanged)."""
    path = lease_path(bob, item)
    lease = git(bob, "cat-file", "blob", f"{commit}:{path}").replace("holder: alice", "holder: bob")
    assert "holder: bob" in lease
    return forge(bob, commit, tree=tree_with(bob, commit, {path: (lease + "\n").encode()}), key=key)


# --- the attacks of issue 23 --------------------------------------------------------------------------


def test_a_forged_tree_handing_bob_the_lease_is_refused_and_alice_keeps_it(tmp_path: Path) -> None:
    bare, alice, bob, item = alice_holds_an_item(tmp_path)
    before = tip(bare)
    forged = lease_to_bob(bob, bob_says(bob, item), item)
    refused(push(bob, f"{forged}:{STATE}"), bare, before,
            f"{forged[:12]}: tree differs from the command's replay at ", "lease.yaml")
    assert subprocess.run(["git", "cat-file", "-e", forged], cwd=bare).returncode != 0  # no object kept
    with Workplane(str(alice)) as wp:  # alice's lease is intact on the arbiter: she renews it
        assert wp.do("renew", item=item, ttl="1h").result["fence"] == 1


def test_the_honest_commit_is_accepted(tmp_path: Path) -> None:
    bare, _alice, bob, item = alice_holds_an_item(tmp_path)
    honest = bob_says(bob, item)
    done = push(bob, f"{honest}:{STATE}")
    assert done.returncode == 0, done.stderr
    assert tip(bare) == honest


def test_a_forged_author_is_refused(tmp_path: Path) -> None:
    bare, _alice, bob, item = alice_holds_an_item(tmp_path)
    before = tip(bare)
    honest = bob_says(bob, item)
    when = re.search(rb"\nauthor .*> (\d+ [+-]\d{4})\n", raw_commit(bob, honest)).group(1).decode()  # type: ignore[union-attr]
    as_alice = forge(bob, honest, header=("author", f"alice <alice@gitwork.invalid> {when}"))
    refused(push(bob, f"{as_alice}:{STATE}"), bare, before, f"{as_alice[:12]}: author ", "acting identity")
    both = forge(bob, as_alice, header=("committer", f"alice <alice@gitwork.invalid> {when}"))
    refused(push(bob, f"{both}:{STATE}"), bare, before, f"{both[:12]}: author ")


def test_a_chain_of_honest_commits_is_accepted_and_one_forgery_in_it_refuses_the_push(tmp_path: Path) -> None:
    bare, _alice, bob, item = alice_holds_an_item(tmp_path)
    before = tip(bare)
    chain = [bob_says(bob, item, f"note {n}") for n in range(4)]
    # the same chain with its second commit's tree forged, and the later ones laid on top of it
    forged = [chain[0], lease_to_bob(bob, chain[1], item)]
    for commit in chain[2:]:
        forged.append(forge(bob, commit, parent=forged[-1]))
    refused(push(bob, f"{forged[-1]}:{STATE}"), bare, before, f"{forged[1][:12]}: tree differs")
    done = push(bob, f"{chain[-1]}:{STATE}")
    assert done.returncode == 0, done.stderr
    assert tip(bare) == chain[-1]


def test_a_commit_dated_after_the_arbiters_clock_is_refused(tmp_path: Path) -> None:
    """A pusher chooses the time a command is decided at: the future would make leases look expired."""
    bare, _alice, bob, item = alice_holds_an_item(tmp_path)
    before = tip(bare)
    with Workplane(str(bob), now=lambda: dt.datetime(2031, 1, 1, tzinfo=dt.timezone.utc)) as wp:
        wp.do("msg", item=item, text="from the future", epoch="current")
    refused(push(bob, f"{STATE}:{STATE}"), bare, before, "later than the arbiter's clock")


def test_a_merge_and_a_commit_without_a_command_are_refused(tmp_path: Path) -> None:
    bare, _alice, bob, item = alice_holds_an_item(tmp_path)
    before = tip(bare)
    honest = bob_says(bob, item)
    bare_message = forge(bob, honest, message=b"just a tree\n")
    refused(push(bob, f"{bare_message}:{STATE}"), bare, before, "carries no command document")
    body = raw_commit(bob, honest).replace(b"\nauthor ", f"\nparent {honest}\nauthor ".encode(), 1)
    merge = write_commit(bob, body)
    refused(push(bob, f"{merge}:{STATE}"), bare, before, "merge commit")


@pytest.mark.slow
def test_with_signing_a_forgery_signed_by_the_forgers_own_key_is_refused(tmp_path: Path) -> None:
    keys = {name: keygen(tmp_path / f"{name}-key") for name in ("alice", "bob")}
    bare, alice, bob, item = alice_holds_an_item(tmp_path, keys)
    before = tip(bare)
    honest = bob_says(bob, item)
    forged = lease_to_bob(bob, honest, item, key=keys["bob"][0])
    assert split_signed_commit(raw_commit(bob, forged))[1] is not None  # signed, by bob, for bob's command
    refused(push(bob, f"{forged}:{STATE}"), bare, before, "tree differs", "lease.yaml")
    done = push(bob, f"{honest}:{STATE}")  # the honest, signed commit lands
    assert done.returncode == 0, done.stderr
    assert main(["sync", "-C", str(alice)]) == 0
    with Workplane(str(alice)) as wp:
        assert wp.do("renew", item=item, ttl="1h").result["fence"] == 1


# --- the property: every one-field mutation of an honest sequence is refused --------------------------

OPS = ("new", "claim", "renew", "release", "msg", "done", "check")


def play(wp: Workplane, choices: list[tuple[str, int]]) -> None:
    """Apply the chosen commands; one the engine refuses (renew of an item not held...) is skipped."""
    items: list[str] = []
    for name, pick in choices:
        target = items[pick % len(items)] if items else None
        args = {"new": {"title": f"item {pick}", "criteria": ["it works"]}, "claim": {"ttl": "1h"},
                "renew": {"ttl": "1h"}, "release": {}, "msg": {"text": f"note {pick}", "epoch": "current"}, "done": {},
                "check": {"criterion": 1}}[name]
        if name != "new":
            if target is None:
                continue
            args = {**args, "item": target}
        try:
            result = wp.do(name, **args).result
        except GwError:
            continue
        if name == "new":
            items.append(result["item"])


MUTATIONS = ("content", "add", "remove", "author", "committer", "message")


def mutate(repo: Path, commit: str, how: str, pick: int) -> str:
    files = git(repo, "ls-tree", "-r", "--name-only", commit).splitlines()
    path = files[pick % len(files)]
    body = raw_commit(repo, commit)
    if how == "content":
        old = subprocess.run(["git", "cat-file", "blob", f"{commit}:{path}"], cwd=repo, capture_output=True).stdout
        return forge(repo, commit, tree=tree_with(repo, commit, {path: old + b"x"}))
    if how == "add":
        folder = path.rpartition("/")[0]
        added = f"{folder}/extra-{pick}.yaml" if folder else f"extra-{pick}.yaml"
        return forge(repo, commit, tree=tree_with(repo, commit, {added: b"a: 1\n"}))
    if how == "remove":
        return forge(repo, commit, tree=tree_with(repo, commit, {path: None}))
    if how in ("author", "committer"):
        line = re.search(rf"\n{how} (.*)\n".encode(), body).group(1).decode()  # type: ignore[union-attr]
        who, when, zone = line.rsplit(" ", 2)
        variants = [f"mallory <mallory@gitwork.invalid> {when} {zone}", f"{who} {int(when) + 1} {zone}",
                    f"{who} {when} +0100"]
        return forge(repo, commit, header=(how, variants[pick % len(variants)]))
    text = body.partition(b"\n\n")[2]
    message = text.replace(b"\n", b" (edited)\n", 1) if pick % 2 else text + b"Extra: trailer\n"
    return forge(repo, commit, message=message)


@pytest.mark.slow  # a fresh arbiter and two pushes per example (~15 s for 4 examples under load 15)
@settings(max_examples=4, deadline=None, suppress_health_check=list(HealthCheck))
@given(choices=st.lists(st.tuples(st.sampled_from(OPS), st.integers(0, 5)), min_size=1, max_size=6),
       mutations=st.lists(st.tuples(st.sampled_from(MUTATIONS), st.integers(0, 50)), min_size=8, max_size=8))
def test_every_one_field_mutation_of_an_honest_sequence_is_refused(
        tmp_path_factory: pytest.TempPathFactory, choices: list[tuple[str, int]],
        mutations: list[tuple[str, int]]) -> None:
    base = tmp_path_factory.mktemp("derive")
    bare = arbiter(base)
    repo = make_repo(base / "clone")
    git(repo, "remote", "add", "origin", f"file://{bare}")
    with Workplane(str(repo), agent="alice") as wp:
        wp.do("new", title="first", criteria=["it works"])  # the root commit: no remote configured in gitwork
        root = tip(repo)
        play(wp, [("new", 0), *choices])
    assert root is not None
    done = push(repo, f"{root}:{STATE}")
    assert done.returncode == 0, done.stderr
    honest = git(repo, "rev-list", "--reverse", f"{root}..{STATE}").split()
    # each honest commit, mutated, on its honest parent: pushed in one push to refs of its own
    forged = {n: mutate(repo, commit, *mutations[n % len(mutations)]) for n, commit in enumerate(honest)}
    done = push(repo, *(f"{commit}:refs/gitwork/forged/{n}" for n, commit in forged.items()))
    assert done.returncode != 0
    for n, commit in forged.items():
        assert f"gitwork: {commit[:12]}" in done.stderr, (mutations[n % len(mutations)], done.stderr)
        assert tip(bare, f"refs/gitwork/forged/{n}") is None
    assert tip(bare) == root
    done = push(repo, f"{STATE}:{STATE}")  # the unmutated sequence lands
    assert done.returncode == 0, done.stderr
    assert tip(bare) == tip(repo)


def test_a_claim_under_the_clients_own_default_ttl_is_derived_alike(tmp_path: Path) -> None:
    """A claim without --ttl takes the client's default_ttl (its .workplane, GW_DEFAULT_TTL): the arbiter,
    with its own default, must still derive the same lease, so the claim records the ttl it used."""
    bare = arbiter(tmp_path)
    alice = clone(tmp_path, "alice", bare)
    with Workplane(str(alice)) as wp:
        item = wp.do("new", title="long job").result["item"]
    assert main(["sync", "-C", str(alice)]) == 0
    with Workplane(str(alice), default_ttl=7200) as wp:
        granted = wp.do("claim", item=item)
    assert granted.command["ttl"] == 7200
    assert tip(bare) == tip(alice)
    assert "ttl: 7200" in git(bare, "cat-file", "blob", f"{STATE}:{lease_path(alice, item)}")


def test_a_root_commit_must_be_its_command_on_the_empty_state(tmp_path: Path) -> None:
    """The first commit of an arbiter's state is held to the same rule, applied to nothing: the honest
    ``init`` lands; the same init with one more file in its tree does not."""
    bare = arbiter(tmp_path)
    repo = make_repo(tmp_path / "clone")
    git(repo, "remote", "add", "origin", f"file://{bare}")
    with Workplane(str(repo), agent="alice") as wp:
        wp.do("init")
    root = tip(repo)
    assert root is not None
    padded = forge(repo, root, tree=tree_with(repo, root, {"counters.yaml": b"fence: 41\n"}))
    refused(push(repo, f"{padded}:{STATE}"), bare, None, f"{padded[:12]}: ", "counters.yaml")
    done = push(repo, f"{root}:{STATE}")
    assert done.returncode == 0, done.stderr
    assert tip(bare) == root


def test_records_whose_mappings_came_in_any_key_order_are_derived_alike(tmp_path: Path) -> None:
    """The Command line is JSON with sorted keys; a mapping field (a build, a report) handed to an op in
    another order must not change what the op writes, or the arbiter's replay differs from the honest
    commit. Records as gitwork's own procedures write them: the coordinator lease, a shadow report."""
    bare = arbiter(tmp_path)
    repo = make_repo(tmp_path / "clone")
    git(repo, "remote", "add", "origin", f"file://{bare}")
    with Workplane(str(repo), agent="alice") as wp:
        wp.do("init")
        wp.submit_record({"op": "coord-lease", "host": "vm", "action": "take", "ttl": 30,
                          "holder": {"pid": "17", "host": "vm", "start": "9"},
                          "build": {"version": "0.1.0", "commit": "b524193a9423"}})
        wp.submit_record({"op": "shadow-report", "shadow": "bd",
                          "report": {"kind": "beads", "compared": 1, "agree": 1,
                                     "counts": {"status": 0, "assignee": 0}, "divergences": []}})
    done = push(repo, f"{STATE}:{STATE}")
    assert done.returncode == 0, done.stderr
    assert tip(bare) == tip(repo)
