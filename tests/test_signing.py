"""Signing and verifying with ssh-keygen, replay protection, and where peers may be configured.

Real keys (ed25519, generated per module), real ``ssh-keygen``; no mocks.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from conftest import git, make_repo, scrubbed
from gitwork.delegation import peers, signing
from gitwork.errors import Forbidden, Held, Invalid
from gitwork.records import protocol
from gitwork.store import Repository

NS = peers.NAMESPACE


def keygen(path: Path, comment: str = "gw-test") -> tuple[str, str]:
    """A new ed25519 key at ``path``: ``(private key path, public key 'type base64')``."""
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", comment, "-f", str(path)], check=True)
    return str(path), " ".join(path.with_suffix(".pub").read_text().split()[:2])


@pytest.fixture(scope="module")
def keys(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[str, str]]:
    folder = tmp_path_factory.mktemp("keys")
    with scrubbed(tmp_path_factory):
        return {name: keygen(folder / name) for name in ("alice", "bob")}


def test_a_signature_verifies_for_its_signer_only_and_names_each_refusal(keys: dict[str, tuple[str, str]]) -> None:
    alice_key, alice_pub = keys["alice"]
    _bob_key, bob_pub = keys["bob"]
    data = b'{"op":"plan"}'
    signature = signing.sign(data, alice_key, NS)
    assert signing.verify(data, signature, [("bob", bob_pub), ("alice", alice_pub)], NS) == "alice"
    refusals = {
        "unknown-key": (data, signature, [("bob", bob_pub)], NS),
        "bad-signature": (b'{"op":"plan!"}', signature, [("alice", alice_pub)], NS),  # one byte changed
        "wrong-namespace": (data, signature, [("alice", alice_pub)], "git"),
    }
    for reason, (payload, sig, signers, namespace) in refusals.items():
        with pytest.raises(Forbidden) as caught:
            signing.verify(payload, sig, signers, namespace)
        assert caught.value.details["reason"] == reason, reason
    with pytest.raises(Forbidden):
        signing.verify(data, "not a signature", [("alice", alice_pub)], NS)


def test_a_nonce_is_accepted_once_and_only_inside_the_window(tmp_path: Path) -> None:
    nonces = signing.Nonces(str(tmp_path))
    nonces.check_fresh(1000.0, 1000.0 + signing.WINDOW)
    for late in (1000.0 + signing.WINDOW + 1, 1000.0 - signing.WINDOW - 1):
        with pytest.raises(Forbidden):
            nonces.check_fresh(late, 1000.0)
    nonces.remember("a" * 32, 1000.0)
    with pytest.raises(Forbidden) as caught:
        nonces.remember("a" * 32, 1001.0)
    assert caught.value.details["reason"] == "replay"
    # Forgotten only after two windows, when the request itself is long refused as stale.
    nonces.remember("a" * 32, 1000.0 + 2 * signing.WINDOW + 1)


def test_the_nonce_store_is_bounded(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(signing, "MAX_NONCES", 3)
    nonces = signing.Nonces(str(tmp_path))
    for n in range(3):
        nonces.remember(f"{n:032x}", 1000.0)
    with pytest.raises(Held):
        nonces.remember("f" * 32, 1000.0)
    assert len(Path(nonces.path).read_text().splitlines()) == 3


def test_peers_come_from_the_repositorys_own_config_only(tmp_path: Path, keys: dict[str, tuple[str, str]]) -> None:
    repo = make_repo(tmp_path / "repo")
    _key, pub = keys["alice"]
    # A tracked file and the user's global config are not authority: neither makes a peer.
    (repo / ".workplane").write_text(f"peer:\n  evil:\n    url: http://127.0.0.1:9\n    key: {pub}\n")
    git(repo, "config", "--global", "gitwork.peer.evil.url", "http://127.0.0.1:9")
    git(repo, "config", "--global", "gitwork.peer.evil.key", pub)
    assert not peers.configured(Repository.discover(repo))
    assert not peers.configured_at(str(repo))
    git(repo, "config", "gitwork.peer.gpu.url", "http://127.0.0.1:9")
    git(repo, "config", "gitwork.peer.gpu.key", pub + " a comment")
    git(repo, "config", "gitwork.peer.gpu.allow", "plan,start")
    git(repo, "config", "--add", "gitwork.peer.gpu.allow", "observe")
    config = peers.load(Repository.discover(repo))
    assert list(config.peers) == ["gpu"]
    assert config.peers["gpu"].to_json() == {"peer": "gpu", "url": "http://127.0.0.1:9", "key": pub,
                                             "allow": ["observe", "plan", "start"]}
    assert peers.configured_at(str(repo)) and not peers.configured_at(str(tmp_path))


@settings(max_examples=100, deadline=None)
@given(st.one_of(st.text(max_size=300), st.builds(json.dumps, st.dictionaries(
    st.sampled_from(["kind", "v", "id", "op", "item", "args", "at", "nonce", "outcome", "request_digest"]),
    st.one_of(st.none(), st.integers(), st.text(max_size=40), st.just(protocol.REQUEST), st.just(protocol.RECEIPT),
              st.dictionaries(st.text(max_size=5), st.integers(), max_size=2)), max_size=10))))
def test_parsing_a_request_or_receipt_either_succeeds_or_says_invalid(text: str) -> None:
    for parse in (protocol.parse_request, protocol.parse_receipt):
        try:
            doc = parse(text)
        except Invalid:
            continue
        assert isinstance(doc, dict)


@settings(max_examples=10, deadline=None)
@given(message=st.text(alphabet=st.characters(blacklist_categories=("Cs",)), min_size=1, max_size=200))
def test_a_signed_commit_splits_back_into_exactly_what_was_signed(keys: dict[str, tuple[str, str]],
                                                                    message: str) -> None:
    from gitwork.objects import format_commit, parse_commit
    from gitwork.sshsig import sign_commit, split_signed_commit

    body = format_commit("4b825dc642cb6eb9a060e54bf8d69288fbee4904", [], "a <a@x> 1 +0000", "a <a@x> 1 +0000",
                         message)
    signed = sign_commit(body, keys["alice"][0])
    payload, signature = split_signed_commit(signed)
    assert payload == body and signature is not None
    fields = ("tree", "parents", "author", "committer", "message")
    assert [getattr(parse_commit(signed), f) for f in fields] == [getattr(parse_commit(body), f) for f in fields]
    assert signing.verify(payload, signature, [("alice", keys["alice"][1])], "git") == "alice"
