"""SSH signatures through ``ssh-keygen -Y sign|verify``: git's own SSH signing format.

A signature is made over exact bytes under a *namespace* (``gitwork-delegation`` for delegation
requests and receipts, ``git`` for commits, as git makes them), so a signature made for one purpose
is never valid for another. Verification is against an allowed-signers list (``principal
[namespaces="..."] keytype key``, ``ssh-keygen(1)``): the signer must be a known principal, not
merely hold a valid key. Every run of ``ssh-keygen`` goes through gitwork's one subprocess helper
(``gitcmd.run_tool``). A base module: the store signs state commits with it, the arbiter's hook and
delegation verify with it.
"""

from __future__ import annotations

import os

from . import gitcmd
from .errors import Forbidden, Invalid

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Iterable

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
    key_path = os.path.expanduser(key_path)
    if not os.path.isfile(key_path):
        raise Invalid(f"the signing key {key_path} does not exist (git config gitwork.signingKey)")
    mode = os.stat(key_path).st_mode & 0o077
    if mode and not key_path.endswith(".pub"):  # ssh-keygen would refuse it in a banner of @ lines
        raise Invalid(f"the signing key {key_path} is readable by others (mode {mode:03o} for group/other): "
                      f"chmod 600 '{key_path}'")
    done = _keygen(["-Y", "sign", "-q", "-f", key_path, "-n", namespace], data)
    if done.returncode != 0 or SIG_BEGIN not in done.out:
        said = [line for line in done.err.splitlines() if line.strip() and not line.startswith("@")]
        reason = "not an SSH private key" if any("load" in line for line in said) else "; ".join(said)[:200]
        raise Invalid(f"ssh-keygen could not sign with {key_path}: {reason or 'no signature'}")
    return done.out


def public_key(key_path: str | None) -> str:
    """``type base64`` of the key at ``key_path`` (a private key, or its ``.pub``).

    The ``.pub`` beside a private key is read when it is there, as ssh does: the private key may be
    protected by a passphrase (and held by ssh-agent for signing), which ``ssh-keygen -y`` would ask for."""
    if not key_path:
        raise Invalid("no signing key: git config gitwork.signingKey ~/.ssh/id_ed25519 (see docs/security.md)")
    key_path = os.path.expanduser(key_path)
    try:
        with open(key_path if key_path.endswith(".pub") else key_path + ".pub", encoding="ascii") as handle:
            words = handle.read(16 * 1024).split()
        if len(words) >= 2 and not words[0].startswith("-"):
            return " ".join(words[:2])
    except (OSError, UnicodeDecodeError):
        pass
    done = _keygen(["-y", "-f", key_path])
    if done.returncode != 0:
        raise Invalid(f"cannot read the public half of {key_path}: {gitcmd.one_line(done.err)}")
    return " ".join(done.out.split()[:2])


def allowed_line(principal: str, key: str, namespace: str | None = None) -> str:
    option = f' namespaces="{namespace}"' if namespace else ""
    return f"{principal}{option} {key}"


def verify(data: bytes, signature: str, signers: Iterable[tuple[str, str]] | str, namespace: str,
           expect: str | None = None) -> str:
    """The principal whose key signed ``data`` under ``namespace``; refused (exit 77) otherwise.

    ``signers``: ``(principal, public key)`` pairs, or the path of an allowed-signers file;
    ``expect``: the principal that must have signed. The refusal says which check failed:
    ``unknown-key`` (no allowed signer has this key), ``wrong-key`` (another principal's key),
    ``wrong-namespace``, ``bad-signature`` (the data or the signature was changed).
    """
    if not isinstance(signature, str) or not signature.strip().startswith(SIG_BEGIN) or len(signature) > MAX_SIGNATURE:
        raise Forbidden("not an SSH signature", reason="bad-signature")
    import tempfile  # here, not at the top: the server hook imports this module for split_signed_commit

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
        if expect is not None:
            # ssh-keygen matches the name against the file's principals, patterns included (``agent-*``,
            # ``*``): find-principals would print the pattern itself, never ``expect``.
            done = _keygen(["-Y", "verify", "-f", allowed, "-I", expect, "-n", namespace, "-s", sig_path], data)
            if done.returncode == 0:
                return expect
        found = _keygen(["-Y", "find-principals", "-s", sig_path, "-f", allowed])
        principals = found.out.split() if found.returncode == 0 else []
        if not principals:
            raise Forbidden("signed by a key no allowed signer has", reason="unknown-key")
        errors = []
        if expect is not None:
            intact = _keygen(["-Y", "check-novalidate", "-n", namespace, "-s", sig_path], data)
            if intact.returncode == 0 and expect in principals:  # its line limits it (namespaces="...")
                raise Forbidden(f"the allowed-signers line of {expect} does not allow namespace {namespace}",
                                reason="wrong-namespace")
            if intact.returncode == 0:  # a sound signature, by a key the file gives to others only
                raise Forbidden(f"signed with the key of {', '.join(principals)[:80]}, not of {expect}",
                                reason="wrong-key")
            errors.append(intact.err)
            principals = [expect]
        for principal in principals if expect is None else ():
            done = _keygen(["-Y", "verify", "-f", allowed, "-I", principal, "-n", namespace, "-s", sig_path], data)
            if done.returncode == 0:
                return principal
            errors.append(done.err)
        if any("namespace" in err for err in errors):
            raise Forbidden(f"signature made for another purpose (not namespace {namespace})", reason="wrong-namespace")
        raise Forbidden(f"signature does not match the signed content (signer {principals[0]})",
                        reason="bad-signature")




# --- signed commits, as git writes and reads them ---------------------------------------------------

COMMIT_NAMESPACE = "git"


def sign_commit(body: bytes, key_path: str | None) -> bytes:
    """``body`` (a commit object) with a ``gpgsig`` header holding its SSH signature, as ``git commit -S``
    writes it with ``gpg.format=ssh``: after the committer line, continuation lines indented by one space."""
    headers, sep, message = body.partition(b"\n\n")
    signature = sign(body, key_path, COMMIT_NAMESPACE).rstrip("\n").replace("\n", "\n ")
    return headers + b"\ngpgsig " + signature.encode("ascii") + b"\n" + sep[1:] + message


def split_signed_commit(raw: bytes) -> tuple[bytes, str | None]:
    """``(the signed payload, the signature or None)`` of a commit object: the object without its
    ``gpgsig`` header is exactly what was signed (git's ``parse_signed_commit``)."""
    headers, sep, message = raw.partition(b"\n\n")
    kept: list[bytes] = []
    signature: list[bytes] = []
    inside = False
    for line in headers.split(b"\n"):
        if line.startswith(b"gpgsig "):
            inside = True
            signature.append(line[len(b"gpgsig "):])
        elif inside and line.startswith(b" "):
            signature.append(line[1:])
        else:
            inside = False
            kept.append(line)
    payload = b"\n".join(kept) + sep + message
    return payload, (b"\n".join(signature).decode("ascii", "replace") + "\n") if signature else None


def allowed_signers_path(common_dir: str, git_config: dict[str, str]) -> str:
    """The allowed-signers file: git config ``gitwork.allowedSigners``, else
    ``<common git dir>/gitwork/allowed_signers``. Local configuration only, never a tracked file."""
    value = git_config.get("gitwork.allowedsigners")
    return os.path.expanduser(value) if value else os.path.join(common_dir, "gitwork", "allowed_signers")
