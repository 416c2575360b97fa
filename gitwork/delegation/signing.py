"""Signatures with ``ssh-keygen -Y sign|verify`` (git's own SSH signing format), and replay protection.

A signature is made over exact bytes under a *namespace* (``gitwork-delegation`` for requests and
receipts, ``git`` for commits), so a signature made for one purpose is never valid for another.
Verification is against an allowed-signers list (``principal [namespaces="..."] keytype key``,
``ssh-keygen(1)``): the signer must be a known principal, not merely hold a valid key. Every run of
``ssh-keygen`` goes through gitwork's one subprocess helper (``gitcmd.run_tool``).

Replay protection (:class:`Nonces`): a signed request carries a random nonce and the instant it was
made; a peer refuses one made more than :data:`WINDOW` seconds from its own clock, and one whose
nonce it has seen. Nonces are remembered in the common git dir for twice the window, at most
:data:`MAX_NONCES` at once (beyond that new requests are refused, never old nonces forgotten early).
"""

from __future__ import annotations

import json
import os
import tempfile

from .. import gitcmd
from ..errors import Forbidden, Held, Invalid

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Iterable

WINDOW = 300  # seconds a signed request stays acceptable (both ways: clocks differ)
MAX_NONCES = 10_000
MAX_SIGNATURE = 8 * 1024
SIG_BEGIN = "-----BEGIN SSH SIGNATURE-----"


def _keygen(args: list[str], data: bytes | None = None) -> gitcmd.Completed:
    try:
        return gitcmd.run_tool(["ssh-keygen", *args], input=data if data is not None else b"",
                               env=gitcmd.git_env(), timeout=30)
    except FileNotFoundError:
        raise Invalid("ssh-keygen is not installed (it signs and verifies delegation requests)") from None


def sign(data: bytes, key_path: str | None, namespace: str) -> str:
    """The armored SSH signature of ``data`` by the private key at ``key_path``."""
    if not key_path:
        raise Invalid("no signing key: git config gitwork.signingKey ~/.ssh/id_ed25519 (see docs/security.md)")
    if not os.path.isfile(key_path):
        raise Invalid(f"the signing key {key_path} does not exist (git config gitwork.signingKey)")
    done = _keygen(["-Y", "sign", "-q", "-f", key_path, "-n", namespace], data)
    if done.returncode != 0 or SIG_BEGIN not in done.out:
        raise Invalid(f"ssh-keygen could not sign with {key_path}: {gitcmd.one_line(done.err) or 'no signature'}")
    return done.out


def public_key(key_path: str | None) -> str:
    """``type base64`` of the key at ``key_path`` (a private key, or its ``.pub``)."""
    if not key_path:
        raise Invalid("no signing key: git config gitwork.signingKey ~/.ssh/id_ed25519 (see docs/security.md)")
    done = _keygen(["-y", "-f", key_path])
    if done.returncode != 0:
        raise Invalid(f"cannot read the public half of {key_path}: {gitcmd.one_line(done.err)}")
    return " ".join(done.out.split()[:2])


def allowed_line(principal: str, key: str, namespace: str | None = None) -> str:
    option = f' namespaces="{namespace}"' if namespace else ""
    return f"{principal}{option} {key}"


def verify(data: bytes, signature: str, signers: Iterable[tuple[str, str]] | str, namespace: str) -> str:
    """The principal whose key signed ``data`` under ``namespace``; refused (exit 77) otherwise.

    ``signers``: ``(principal, public key)`` pairs, or the path of an allowed-signers file. The
    refusal says which check failed: ``unknown-key`` (no allowed signer has this key),
    ``wrong-namespace``, ``bad-signature`` (the data or the signature was changed).
    """
    if not isinstance(signature, str) or not signature.strip().startswith(SIG_BEGIN) or len(signature) > MAX_SIGNATURE:
        raise Forbidden("not an SSH signature", reason="bad-signature")
    with tempfile.TemporaryDirectory(prefix="gw-verify-") as tmp:
        sig_path = os.path.join(tmp, "sig")
        with open(sig_path, "w", encoding="ascii", errors="replace") as out:
            out.write(signature)
        if isinstance(signers, str):
            allowed = signers
            if not os.path.isfile(allowed):
                raise Forbidden(f"no allowed-signers file at {allowed}", reason="unknown-key")
        else:
            allowed = os.path.join(tmp, "allowed_signers")
            with open(allowed, "w", encoding="utf-8") as out:
                out.writelines(allowed_line(p, k) + "\n" for p, k in signers)
        found = _keygen(["-Y", "find-principals", "-s", sig_path, "-f", allowed])
        principals = found.out.split() if found.returncode == 0 else []
        if not principals:
            raise Forbidden("signed by a key no allowed signer has", reason="unknown-key")
        errors = []
        for principal in principals:
            done = _keygen(["-Y", "verify", "-f", allowed, "-I", principal, "-n", namespace, "-s", sig_path], data)
            if done.returncode == 0:
                return principal
            errors.append(done.err)
        if any("namespace" in err for err in errors):
            raise Forbidden(f"signature made for another purpose (not namespace {namespace})", reason="wrong-namespace")
        raise Forbidden(f"signature does not match the signed content (signer {principals[0]})",
                        reason="bad-signature")


class Nonces:
    """The nonces seen in the last two windows, in ``<common git dir>/gitwork/delegation-nonces``."""

    def __init__(self, gitwork_dir: str) -> None:
        self.path = os.path.join(gitwork_dir, "delegation-nonces")

    def check_fresh(self, made_at: float, now: float) -> None:
        if abs(now - made_at) > WINDOW:
            raise Forbidden(f"request made {int(now - made_at)}s from this peer's clock (window {WINDOW}s): "
                            "stale or replayed", reason="replay")

    def remember(self, nonce: str, now: float) -> None:
        """Record ``nonce``; refused (exit 77) if it was seen before, 75 if the store is full."""
        import fcntl

        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o600)
        with os.fdopen(fd, "r+", encoding="utf-8") as handle:
            fcntl.flock(handle, fcntl.LOCK_EX)  # released when the file closes
            kept: list[dict[str, object]] = []
            for line in handle.read().splitlines():
                try:
                    entry = json.loads(line)
                    if now - float(entry["t"]) <= 2 * WINDOW:
                        kept.append(entry)
                except (ValueError, KeyError, TypeError):
                    continue  # a torn line from a crash: dropping it keeps at most one nonce less
            if any(entry.get("n") == nonce for entry in kept):
                raise Forbidden("this request was seen before (same nonce): replayed", reason="replay")
            if len(kept) >= MAX_NONCES:
                raise Held(f"more than {MAX_NONCES} requests in {2 * WINDOW}s; try again later")
            kept.append({"n": nonce, "t": now})
            handle.seek(0)
            handle.truncate()
            handle.write("".join(json.dumps(entry, sort_keys=True) + "\n" for entry in kept))
            handle.flush()
            os.fsync(handle.fileno())
