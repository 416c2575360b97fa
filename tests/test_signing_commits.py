"""Signed state commits (``signing: ssh``) and the arbiter's check of them (issue 15).

A real bare arbiter with gitwork's pre-receive hook, whose own config requires signed state commits
and whose allowed-signers file maps identities to keys; real clones that sign (or not) with real
ed25519 keys. Each refused push leaves the arbiter's state ref where it was.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from conftest import git, make_repo, tip
from gitwork.cli.main import main
from gitwork.errors import RemoteRefused
from gitwork.hooks_install import install_server
from gitwork.workplane import Workplane
from test_signing import keygen

STATE = "refs/gitwork/state"


def clone(tmp_path: Path, name: str, remote: Path, identity: str, key: str | None) -> Path:
    path = make_repo(tmp_path / name)
    git(path, "remote", "add", "origin", f"file://{remote}")
    git(path, "config", "gitwork.agent", identity)
    if key is not None:
        git(path, "config", "gitwork.signing", "ssh")
        git(path, "config", "gitwork.signingKey", key)
    return path


@pytest.fixture
def arbiter(tmp_path: Path) -> tuple[Path, dict[str, tuple[str, str]]]:
    keys = {name: keygen(tmp_path / f"{name}-key") for name in ("alice", "bot", "mallory")}
    remote = make_repo(tmp_path / "remote.git", bare=True)
    install_server(str(remote))
    for key, value in (("gitwork.signing", "ssh"), ("gitwork.admins", "alice"), ("gitwork.agents", "bot")):
        git(remote, "config", key, value)
    (remote / "gitwork").mkdir()
    (remote / "gitwork" / "allowed_signers").write_text(f"alice {keys['alice'][1]}\nbot {keys['bot'][1]}\n")
    return remote, keys


@pytest.mark.slow
def test_the_arbiter_takes_only_state_commits_signed_by_the_acting_identitys_key(
        tmp_path: Path, arbiter: tuple[Path, dict[str, tuple[str, str]]]) -> None:
    remote, keys = arbiter
    alice = clone(tmp_path, "alice", remote, "alice", keys["alice"][0])
    assert main(["init", "--remote", "origin", "-C", str(alice)]) == 0
    with Workplane(str(alice)) as wp:  # the honest path: every commit signed with alice's key
        item = wp.do("new", title="guarded").result["item"]
        wp.do("claim", item=item, ttl="1h")  # an arbiter op: pushed, checked by the hook
    assert tip(remote) == tip(alice)
    # git itself reads the signature gitwork wrote (gpg.format=ssh), byte for byte
    git(alice, "config", "gpg.ssh.allowedSignersFile", str(remote / "gitwork" / "allowed_signers"))
    assert "Good \"git\" signature for alice" in git_stderr(alice, "verify-commit", tip(alice) or "")

    def refused(name: str, identity: str, key: str | None, op: str, **args: str) -> str:
        machine = clone(tmp_path, name, remote, identity, key)
        assert main(["init", "--remote", "origin", "-C", str(machine)]) == 0
        before = tip(remote)
        with Workplane(str(machine)) as wp, pytest.raises(RemoteRefused) as caught:
            wp.do(op, item=item, **args)
        assert tip(remote) == before, f"{name}: the arbiter's state moved"
        return caught.value.message

    assert "unsigned" in refused("unsigned", "alice", None, "renew", ttl="1h")
    assert "no allowed signer has" in refused("unknown-key", "alice", keys["mallory"][0], "renew", ttl="1h")
    assert "not of alice" in refused("bot-as-alice", "alice", keys["bot"][0], "renew", ttl="1h")
    # bot's own key, a valid signature: but an agent may not revoke (only admins do)
    assert "roles" in refused("agent-revokes", "bot", keys["bot"][0], "revoke", reason="mine now")


def git_stderr(repo: Path, *args: str) -> str:
    import subprocess

    done = subprocess.run(["git", *args], cwd=repo, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    return done.stderr
