"""Signing and delegation requests attacked: allowed-signers patterns, keys ssh-keygen will not use,
key paths with spaces, requests that do not say where they are going. Real ``ssh-keygen``, real keys."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from conftest import scrubbed
from gitwork import sshsig
from gitwork.errors import Forbidden, Invalid
from gitwork.records import protocol
from test_signing import keygen


@pytest.fixture(scope="module")
def keys(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[str, str]]:
    folder = tmp_path_factory.mktemp("attack keys") / "with space"  # a key path with spaces signs as well
    folder.mkdir()
    with scrubbed(tmp_path_factory):
        return {name: keygen(folder / f"{name} key") for name in ("bots", "alice", "dave")}


def test_allowed_signers_patterns_and_lists_are_honoured_for_the_expected_identity(
        keys: dict[str, tuple[str, str]], tmp_path: Path) -> None:
    bots_key, bots_pub = keys["bots"]
    alice_key, alice_pub = keys["alice"]
    allowed = tmp_path / "allowed_signers"
    allowed.write_text(f"agent-* {bots_pub}\nalice,carol {alice_pub}\n"  # ssh-keygen(1): patterns, lists
                       f'dave namespaces="gitwork-delegation" {keys["dave"][1]}\n')  # and options
    data = b"tree 0000\n\nstate commit\n"
    by_bots = sshsig.sign(data, bots_key, "git")
    assert sshsig.verify(data, by_bots, str(allowed), "git", expect="agent-7") == "agent-7"
    assert sshsig.verify(data, sshsig.sign(data, alice_key, "git"), str(allowed), "git", expect="carol") == "carol"
    refusals = {  # and each refusal still says which check failed
        "wrong-key": (data, by_bots, "alice", "git"),  # the bots' key, on alice's commit
        "bad-signature": (data + b"!", by_bots, "agent-7", "git"),  # one byte changed
        "wrong-namespace": (data, sshsig.sign(data, bots_key, "gitwork-delegation"), "agent-7", "git"),
        "wrong-namespace ": (data, sshsig.sign(data, keys["dave"][0], "git"), "dave", "git"),  # dave's line allows delegation signatures only
    }
    for reason, (payload, signature, expect, namespace) in refusals.items():
        with pytest.raises(Forbidden) as caught:
            sshsig.verify(payload, signature, str(allowed), namespace, expect=expect)
        assert caught.value.details["reason"] == reason.strip(), (reason, caught.value.message)


def test_a_signing_key_others_can_read_or_that_is_no_key_is_one_clear_line(keys: dict[str, tuple[str, str]],
                                                                          tmp_path: Path) -> None:
    private, _pub = keys["alice"]
    loose = tmp_path / "loose key"
    loose.write_bytes(Path(private).read_bytes())
    loose.chmod(0o644)
    with pytest.raises(Invalid) as caught:
        sshsig.sign(b"x", str(loose), "git")
    assert "chmod 600" in caught.value.message and "@" not in caught.value.message, caught.value.message
    junk = tmp_path / "junk"
    junk.write_text("not a key\n")
    junk.chmod(0o600)
    with pytest.raises(Invalid) as caught:
        sshsig.sign(b"x", str(junk), "git")
    assert "not an SSH private key" in caught.value.message and "\n" not in caught.value.message
    assert os.path.exists(junk) and not list(tmp_path.glob("*.sig"))  # nothing written beside it


def test_a_request_that_does_not_name_its_destination_is_refused(keys: dict[str, tuple[str, str]]) -> None:
    text = protocol.request(protocol.new_request_id(), "plan", None, {}, "2030-01-01T00:00:00Z", "1",
                            protocol.destination(keys["alice"][1] + " a comment"))
    assert protocol.parse_request(text)["to"] == keys["alice"][1]
    for to in (None, "", "alice", 7):
        forged = protocol.canonical({**protocol.parse_request(text), "to": to})
        with pytest.raises(Invalid, match="meant for"):
            protocol.parse_request(forged)


def test_the_same_unanswered_request_again_is_a_retry_anything_else_with_its_nonce_a_replay(tmp_path: Path) -> None:
    from gitwork.delegation.signing import Nonces

    nonces = Nonces(str(tmp_path))
    nonces.remember("n1", 1000.0, "sha256:aa")
    nonces.remember("n1", 1001.0, "sha256:aa")  # the peer stopped before answering: the sender's retry
    with pytest.raises(Forbidden, match="replayed"):
        nonces.remember("n1", 1002.0, "sha256:bb")  # other bytes under that nonce
    nonces.settle("n1", 1003.0)  # answered (refused) now
    with pytest.raises(Forbidden, match="replayed"):
        nonces.remember("n1", 1004.0, "sha256:aa")
    nonces.remember("n2", 1005.0)
    with pytest.raises(Forbidden, match="replayed"):  # no digest given: never a retry
        nonces.remember("n2", 1006.0)
    assert len((tmp_path / "delegation-nonces").read_text().splitlines()) == 2  # one entry per nonce


def test_the_public_half_is_read_from_the_pub_beside_the_key_without_asking_for_a_passphrase(
        keys: dict[str, tuple[str, str]], tmp_path: Path) -> None:
    private, pub = keys["bots"]
    locked = tmp_path / "locked key"  # stands for a key only ssh-agent can open: ssh-keygen -y cannot read it
    locked.write_text("-----BEGIN OPENSSH PRIVATE KEY-----\nlocked\n-----END OPENSSH PRIVATE KEY-----\n")
    locked.chmod(0o600)
    (tmp_path / "locked key.pub").write_text(Path(private + ".pub").read_text())
    assert sshsig.public_key(str(locked)) == pub
    with pytest.raises(Invalid, match="cannot read the public half"):
        sshsig.public_key(str(tmp_path / "locked key.pub.missing"))
