"""What gitwork reads itself it reads exactly as git does, or asks git: config, permissions, fsync,
ownership and hook refusals, each compared with git's own answer on a real repository."""

from __future__ import annotations

import hashlib
import json
import os
import stat
import subprocess
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from conftest import git, init_state, make_repo, run_gw, tip
from gitwork import gitdir
from gitwork.objects import fsync_loose_objects, parse_fsync_components
from gitwork.store import Repository

# --- config values: the fast reader and git agree ---------------------------------------------------

VALUES = [
    "alice", "alice#laptop", "alice;laptop", "alice # laptop", "alice ; laptop", "  alice  ", "alice\t\tbob",
    "a b  c", "", "x=y", "alice\r", "#all comment", "a\tb # c ; d", "ünï cødé", "alice   ",
    '"alice#laptop"', '" alice "  # c', 'al"ice # x"y', '"" a', "alice\\tbob", 'a\\"b', "a\\\\b", "a\\nb",
]


def git_value(repo: Path, key: str) -> str | None:
    done = subprocess.run(["git", "config", "--get", key], cwd=repo, capture_output=True)
    return done.stdout.decode().removesuffix("\n") if done.returncode == 0 else None


@pytest.mark.parametrize("value", VALUES)
def test_fast_config_reader_agrees_with_git(repo: Path, value: str) -> None:
    with open(repo / ".git" / "config", "a", encoding="utf-8", newline="") as handle:
        handle.write(f"[GitWork]  # a comment after the header\n\tAgent = {value}\n")
    fast = gitdir.read_config(str(repo / ".git"), str(repo / ".git"))
    assert fast is not None, "the fast reader gave up on a value it should read"
    assert fast.get("gitwork.agent") == git_value(repo, "gitwork.agent")


@pytest.mark.slow
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.text(alphabet=st.sampled_from(list('ab #;=\t\r"\\tn') + ["é"]), max_size=12),
       st.sampled_from(["gitwork", 'alias "x"', "alias"]))
def test_fast_config_reader_agrees_with_git_on_any_value(repo: Path, value: str, section: str) -> None:
    """Any value, in gw's own section or in one gw ignores: the same answer as git, or git is asked
    (and then only because git itself rejects the file, or the value continues on the next line)."""
    config = repo / ".git" / "config"
    original = config.read_bytes()
    try:
        with open(config, "a", encoding="utf-8", newline="") as handle:
            handle.write(f"[{section}]\n\tagent = {value}\n[gitwork]\n\tremote = after\n")
        fast = gitdir.read_config(str(repo / ".git"), str(repo / ".git"))
        asked = subprocess.run(["git", "config", "--get", "gitwork.remote"], cwd=repo, capture_output=True)
        if fast is None:
            assert asked.returncode != 0 or value.rstrip("\r").endswith("\\")
        else:
            assert asked.returncode == 0
            assert fast.get("gitwork.agent") == git_value(repo, "gitwork.agent")
            assert fast.get("gitwork.remote") == "after"
    finally:
        config.write_bytes(original)


@pytest.mark.parametrize("text", [
    "[gitwork]\n\tagent = ali\\\nce-bob\n",  # a continuation line (git reads alice-bob)
    '[alias]\n\tx = log \\\n[gitwork]\n\tagent = mallory\n',  # one in a section gw ignores: no [gitwork]
    '[includeIf "gitdir:/"]\n\tpath = other.config\n',
    "[include]\n\tpath = ~nobody/other.config\n",
    "[gitwork] agent = alice\n",  # a key on the header line
])
def test_what_the_fast_reader_does_not_handle_is_asked_of_git(repo: Path, text: str) -> None:
    (repo / ".git" / "other.config").write_text("[gitwork]\n\tagent = carol\n")
    with open(repo / ".git" / "config", "a", encoding="utf-8") as handle:
        handle.write(text)
    assert gitdir.read_config(str(repo / ".git"), str(repo / ".git")) is None
    assert Repository.discover(repo).settings.agent == git_value(repo, "gitwork.agent")


@pytest.mark.parametrize("path", ["other.config", "{home}/other.config", "~/other.config", "missing.config"])
def test_include_path_is_read_as_git_reads_it(repo: Path, path: str) -> None:
    home = Path(os.environ["HOME"])
    (home / "other.config").write_text("[gitwork]\n\tagent = carol ; from the included file\n"
                                      "[extensions]\n\tobjectFormat = sha256\n")
    (home / ".gitconfig").write_text("[gitwork]\n\tagent = before\n[include]\n\tpath = "
                                     + path.format(home=home) + "\n[core]\n\tfsync = loose\n")
    fast = gitdir.read_config(str(repo / ".git"), str(repo / ".git"))
    assert fast is not None, "a plain include.path is read, not handed to git"
    assert fast.get("gitwork.agent") == git_value(repo, "gitwork.agent")
    assert fast.get("core.fsync") == "loose"
    assert "extensions.objectformat" not in fast  # never from outside the repository's config
    # In the repository's own config, an included file's extensions do not count for git either.
    with open(repo / ".git" / "config", "a", encoding="utf-8") as handle:
        handle.write(f"[include]\n\tpath = {home / 'other.config'}\n")
    assert Repository.discover(repo).algorithm == "sha1" == git(repo, "rev-parse", "--show-object-format")


def test_extensions_count_only_in_the_repositorys_own_config(repo: Path) -> None:
    home = Path(os.environ["HOME"])
    (home / ".gitconfig").write_text("[extensions]\n\tobjectFormat = sha256\n\tworktreeConfig = true\n")
    found = Repository.discover(repo)
    assert found.algorithm == "sha1" == git(repo, "rev-parse", "--show-object-format")
    assert git(repo, "rev-parse", "--show-object-format") == "sha1"


def test_global_core_settings_count(repo: Path) -> None:
    home = Path(os.environ["HOME"])
    (home / ".gitconfig").write_text("[core]\n\tsharedRepository = group\n\tfsync = loose-object # comment\n"
                                     "\tcompression = 9\n")
    found = Repository.discover(repo)
    assert {k: v for k, v in found.core.items() if k != "core.logallrefupdates"} == {  # (git init's, in .git/config)
        "core.sharedrepository": "group", "core.fsync": "loose-object", "core.compression": "9"}
    assert found.objects().fsync and found.objects().shared == 0o660


@pytest.mark.parametrize("setting", [None, "core.compression=9", "core.looseCompression=0", "core.compression=-1"])
def test_loose_objects_are_deflated_at_gits_level(repo: Path, setting: str | None) -> None:
    """Byte for byte the file git writes for the same object, at the level git would use."""
    if setting:
        git(repo, "config", *setting.split("="))
    content = b"the same blob, written by both\n" * 20
    by_gw = Repository.discover(repo).objects().write("blob", content)
    path = repo / ".git" / "objects" / by_gw[:2] / by_gw[2:]
    ours = path.read_bytes()
    path.chmod(0o644)
    path.unlink()
    assert git(repo, "hash-object", "-w", "--stdin", input=content) == by_gw
    assert path.read_bytes() == ours


def test_loose_objects_of_any_size_are_read_as_git_wrote_them(repo: Path) -> None:
    """The direct reader of loose files (``LooseObjects.read``, read in 64 KiB parts) against objects git
    wrote itself, around the part size: a file of one part exactly, one byte fewer, one byte more."""
    objects = Repository.discover(repo).objects()
    seen: set[int] = set()  # random bytes do not compress: the file grows a byte per byte of content
    for n in [0, 1, 300, *range(65440, 65560), 200_000]:
        content = os.urandom(n)
        oid = git(repo, "hash-object", "-w", "--stdin", input=content)
        seen.add((repo / ".git" / "objects" / oid[:2] / oid[2:]).stat().st_size)
        assert objects.read(oid) == ("blob", content), n
    assert {65535, 65536, 65537} <= seen


# --- core.fsync, as git parses it ---------------------------------------------------------------------


@pytest.mark.parametrize(("config", "expected"), [
    ({}, False),  # git's default on Linux: loose objects are not fsynced
    ({"core.fsync": "loose-object,reference"}, True),
    ({"core.fsync": "committed"}, True),
    ({"core.fsync": "objects"}, True),
    ({"core.fsync": "loose"}, True),  # git matches component names by prefix
    ({"core.fsync": "reference"}, False),
    ({"core.fsync": "pack,-loose-object"}, False),
    ({"core.fsync": "all,-loose-object"}, True),  # git: what is named wins over what is taken away
    ({"core.fsync": "none"}, False),
    ({"core.fsync": "reference,none"}, False),
    ({"core.fsyncobjectfiles": "true"}, True),
    ({"core.fsyncobjectfiles": "false", "core.fsync": "loose-object"}, True),
    ({"core.fsyncobjectfiles": "1", "core.fsync": "none"}, True),
])
def test_loose_objects_are_fsynced_when_git_would(config: dict[str, str], expected: bool) -> None:
    assert fsync_loose_objects(config) is expected


def test_fsync_component_parsing_matches_gits_rules() -> None:
    assert parse_fsync_components("none") == 0
    assert parse_fsync_components("pack") == parse_fsync_components("") == parse_fsync_components(", ,")
    assert parse_fsync_components("-pack") & 2 == 0


# --- core.sharedRepository: the same modes git gives --------------------------------------------------


@pytest.mark.parametrize("shared", ["group", "all", "0640", "0660", "0600", "umask", "true"])
def test_object_folders_and_files_get_the_modes_git_gives(tmp_path: Path, shared: str) -> None:
    repo = tmp_path / "repo"
    subprocess.run(["git", "init", "-q", f"--shared={shared}", str(repo)], check=True)
    by_git = git(repo, "hash-object", "-w", "--stdin", input=b"written by git\n")
    writer = Repository.discover(repo).objects()
    n = 0
    while writer.hash("blob", f"written by gw {n}\n".encode())[:2] == by_git[:2]:
        n += 1
    by_gw = writer.write("blob", f"written by gw {n}\n".encode())
    objects = repo / ".git" / "objects"

    def mode(path: Path) -> str:
        return oct(stat.S_IMODE(path.stat().st_mode))

    assert mode(objects / by_gw[:2]) == mode(objects / by_git[:2])
    assert mode(objects / by_gw[:2] / by_gw[2:]) == mode(objects / by_git[:2] / by_git[2:])
    if shared == "group":
        assert mode(objects / by_gw[:2]) == "0o2775"


# --- safe.directory: git's explanation and its fix, not "not a git repository" --------------------------


@pytest.mark.skipif(not hasattr(os, "geteuid") or os.geteuid() != 0, reason="needs root to chown to another uid")
def test_a_repository_owned_by_someone_else_gets_gits_explanation(repo: Path) -> None:
    init_state(repo)  # set-up, not under test: through the library
    before = tip(repo)
    for root, dirs, files in os.walk(repo):
        for name in [*dirs, *files]:
            os.lchown(os.path.join(root, name), 54321, 54321)
    os.lchown(repo, 54321, 54321)
    env = {k: v for k, v in os.environ.items() if k != "SUDO_UID"}
    done = subprocess.run(["git", "status"], cwd=repo, capture_output=True, text=True,
                          env=env)
    assert "dubious ownership" in done.stderr  # git itself refuses it
    for args in (("ready",), ("new", "x")):
        failed = run_gw(repo, *args)
        assert failed.returncode == 10
        lines = failed.stderr.strip().splitlines()
        assert len(lines) == 1, failed.stderr
        assert "dubious ownership" in lines[0] and f"git config --global --add safe.directory {repo}" in lines[0]
    as_json = run_gw(repo, "ready", "--json")
    assert '"not-a-repository"' in as_json.stdout and "safe.directory" in as_json.stdout
    # Trusting it, as git says, is all it takes.
    git(repo, "config", "--global", "--add", "safe.directory", str(repo))
    assert run_gw(repo, "ready").returncode == 0
    assert tip(repo) == before


# --- a refusing reference-transaction hook: one line on stderr ------------------------------------------


def test_a_reference_transaction_refusal_is_one_line(repo: Path) -> None:
    init_state(repo)  # set-up, not under test: through the library
    before = tip(repo)
    hook = repo / ".git" / "hooks" / "reference-transaction"
    hook.write_text('#!/bin/sh\n[ "$1" = prepared ] || exit 0\ncat >/dev/null\n'
                    'echo "state moves are frozen today" >&2\necho "ask the release manager" >&2\nexit 1\n')
    hook.chmod(0o755)
    done = run_gw(repo, "new", "refused")
    assert done.returncode == 1
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert "reference-transaction hook refused" in lines[0] and "state moves are frozen today" in lines[0]
    assert tip(repo) == before


def test_git_failures_are_reported_on_one_line(tmp_path: Path) -> None:
    from gitwork import gitcmd
    from gitwork.errors import GitFailed

    make_repo(tmp_path / "r")
    with pytest.raises(GitFailed) as caught:
        gitcmd.run(["--git-dir", str(tmp_path / "r" / ".git"), "update-ref", "refs/x", "1" * 40], cwd=tmp_path)
    assert "\n" not in caught.value.message


# --- git replace: what git shows, gw shows -------------------------------------------------------------


def test_replaced_state_commits_read_as_git_reads_them(repo: Path) -> None:
    init_state(repo)  # set-up, not under test: through the library
    assert run_gw(repo, "new", "first").returncode == 0
    tip_commit = tip(repo)
    assert tip_commit
    raw = git(repo, "cat-file", "commit", tip_commit)
    env = {**os.environ, "GIT_AUTHOR_NAME": "x", "GIT_AUTHOR_EMAIL": "x@y", "GIT_COMMITTER_NAME": "x",
           "GIT_COMMITTER_EMAIL": "x@y"}
    edited = raw.replace("new w-", "replaced: new w-", 1)
    replacement = subprocess.run(["git", "hash-object", "-t", "commit", "-w", "--stdin"], cwd=repo, env=env,
                                 input=edited.encode(), capture_output=True, check=True).stdout.decode().strip()
    git(repo, "replace", tip_commit, replacement)
    shown = run_gw(repo, "log", "--json")
    assert shown.returncode == 0, shown.stderr
    summaries = [entry["summary"] for entry in json.loads(shown.stdout)]
    assert summaries == git(repo, "log", "--format=%s", "refs/gitwork/state").splitlines()
    assert summaries[0].startswith("replaced: ")


@pytest.mark.skipif(not hasattr(os, "geteuid") or os.geteuid() != 0, reason="needs root to act as a second uid")
def test_a_second_group_member_can_add_objects_where_gw_wrote() -> None:
    """``git init --shared=group``: after gw wrote, another member of the group runs ``git hash-object -w``
    into a fan-out folder gw created (git's "insufficient permission" if gw made it 0755)."""
    import shutil
    import tempfile

    from gitwork.workplane import Workplane

    group, member = 54321, 54322
    top = Path(tempfile.mkdtemp(prefix="gw-shared-"))  # outside pytest's 0700 tree: the member must enter
    try:
        top.chmod(0o755)
        repo = top / "repo"
        subprocess.run(["git", "init", "-q", "--shared=group", str(repo)], check=True)
        for root, dirs, files in os.walk(repo):
            for name in [*dirs, *files]:
                os.lchown(os.path.join(root, name), -1, group)
        os.lchown(repo, -1, group)
        with Workplane(str(repo)) as wp:
            wp.do("init")
            wp.do("new", title="written by gw as root")
        objects = repo / ".git" / "objects"
        made_by_gw = sorted(d.name for d in objects.iterdir() if len(d.name) == 2)
        assert made_by_gw
        home = top / "member-home"
        home.mkdir()
        os.chown(home, member, group)
        env = {"HOME": str(home), "PATH": os.environ["PATH"], "GIT_CONFIG_NOSYSTEM": "1", "LC_ALL": "C"}
        n = 0
        while True:  # content whose object lands in a folder gw made
            content = f"added by the second member {n}\n".encode()
            oid = hashlib.sha1(b"blob %d\0" % len(content) + content).hexdigest()
            if oid[:2] in made_by_gw:
                break
            n += 1
        added = subprocess.run(["git", "-c", "safe.directory=*", "hash-object", "-w", "--stdin"], cwd=repo,
                               input=content, capture_output=True, env=env, user=member, group=group,
                               extra_groups=[])
        assert added.returncode == 0, added.stderr.decode()
        assert (objects / oid[:2] / oid[2:]).stat().st_uid == member
        checked = subprocess.run(["git", "-c", "safe.directory=*", "fsck", "--full", "--strict"], cwd=repo,
                                 capture_output=True, env=env, user=member, group=group, extra_groups=[])
        assert checked.returncode == 0, checked.stderr.decode()
    finally:
        shutil.rmtree(top, ignore_errors=True)


@pytest.mark.skipif(not hasattr(os, "geteuid") or os.geteuid() == 0, reason="root may write anywhere")
def test_no_permission_on_the_object_folder_is_gits_one_line_message(repo: Path) -> None:
    init_state(repo)  # set-up, not under test: through the library
    objects = repo / ".git" / "objects"
    modes = {d: d.stat().st_mode for d in objects.iterdir()}
    try:
        for folder in modes:
            folder.chmod(0o555)
        objects.chmod(0o555)
        done = run_gw(repo, "new", "cannot be written")
    finally:
        objects.chmod(0o755)
        for folder, mode in modes.items():
            folder.chmod(mode)
    assert done.returncode == 1
    assert done.stderr.count("\n") == 1 and "insufficient permission for adding an object" in done.stderr
