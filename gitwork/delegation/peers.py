"""Peers, the local signing key and the allowed signers: from local, untracked configuration only.

A peer is declared in the repository's own git config (``.git/config``, never the tracked
``.workplane``: a committed file is not authority)::

    gitwork.peer.<name>.url     where its ``gw serve`` listens (needed to send to it)
    gitwork.peer.<name>.key     its SSH public key (``ssh-ed25519 AAAA...``): verifies what it signs
    gitwork.peer.<name>.allow   what it may be asked to do / may ask of us: plan,test,start,observe,cancel
    gitwork.signingKey          this side's private key (any scope: it is the user's own key)
    gitwork.allowedSigners      identities -> keys for signed state commits (default:
                                <common git dir>/gitwork/allowed_signers)
    gitwork.delegation.command  what a delegated start runs here (the sender never chooses it)
    gitwork.delegation.backend  where it runs: subprocess (default) or tmux

Peers and the delegation command are read from the repository's own config file (``.git/config``,
and ``config.worktree`` when worktree config is on) only, by path: a peer in ``~/.gitconfig`` would
make every repository of that user trust it, and one in ``GIT_CONFIG*`` or ``git -c`` whoever sets
this process's environment.
"""

from __future__ import annotations

import os
import re
import shlex

from .. import gitcmd
from ..errors import GitFailed, Invalid, NotFound
from ..records.protocol import OPS

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

NAMESPACE = "gitwork-delegation"
DEFAULT_ALLOW = frozenset(("plan", "test", "observe"))  # the dry and read-only ones
PEER_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]{0,63}\Z")
_KEY = re.compile(r"(ssh-ed25519|ecdsa-sha2-nistp\d+|ssh-rsa|sk-ssh-ed25519@openssh\.com|"
                  r"sk-ecdsa-sha2-nistp256@openssh\.com) [A-Za-z0-9+/=]{16,}\Z")
_LOCAL = ("local", "worktree")


class Peer:
    __slots__ = ("name", "url", "key", "allow")

    def __init__(self, name: str, url: str | None, key: str | None, allow: frozenset[str]) -> None:
        self.name, self.url, self.key, self.allow = name, url, key, allow

    def to_json(self) -> dict[str, Any]:
        return {"peer": self.name, "url": self.url, "key": self.key, "allow": sorted(self.allow)}


class Config:
    """What this repository's local config says about delegation."""

    def __init__(self, common_dir: str, values: dict[str, list[tuple[str, str]]]) -> None:
        self.common_dir = common_dir
        self.values = values
        self.peers: dict[str, Peer] = {}
        names = {k[len("gitwork.peer."):].rpartition(".")[0] for k in local_keys(values) if k.startswith("gitwork.peer.")}
        for name in sorted(n for n in names if n):
            self.peers[name] = _peer(name, self._local(f"gitwork.peer.{name}."))

    def _local(self, prefix: str) -> dict[str, list[str]]:
        out: dict[str, list[str]] = {}
        for key, entries in self.values.items():
            if key.startswith(prefix):
                out[key[len(prefix):].lower()] = [value for scope, value in entries if scope in _LOCAL]
        return out

    def _last(self, key: str, local: bool = False) -> str | None:
        entries = [value for scope, value in self.values.get(key, ()) if not local or scope in _LOCAL]
        return entries[-1] if entries else None

    @property
    def signing_key(self) -> str | None:
        value = self._last("gitwork.signingkey")
        return os.path.expanduser(value) if value else None

    @property
    def command(self) -> list[str] | None:
        value = self._last("gitwork.delegation.command", local=True)
        try:
            return shlex.split(value) if value else None
        except ValueError as exc:
            raise Invalid(f"bad git config gitwork.delegation.command: {exc}") from None

    @property
    def backend(self) -> str:
        return self._last("gitwork.delegation.backend", local=True) or "subprocess"

    def peer(self, name: str) -> Peer:
        """The peer named ``name``; refused (exit 3) when it is not configured here."""
        found = self.peers.get(name)
        if found is None:
            known = ", ".join(sorted(self.peers)) or "none"
            raise NotFound(f"no peer {name[:64]!r} is configured here (git config gitwork.peer.<name>.*; "
                           f"configured: {known})", peer=name[:64])
        return found

    def history(self, now: Any = None) -> dict[str, list[dict[str, Any]]]:
        """Note the keys configured now in the key history (``keyring.note``: a rotated key is kept, with
        when it was valid) and return the whole history."""
        from ..errors import GwError
        from . import keyring
        from .signing import public_key

        current = {f"peer:{p.name}": p.key for p in self.peers.values() if p.key}
        if self.signing_key:
            try:
                current[keyring.SELF] = public_key(self.signing_key)
            except GwError:
                pass  # no readable key: nothing to note (signing with it fails on its own)
        return keyring.note(os.path.join(self.common_dir, "gitwork"), current, now)

    def keys(self, now: Any = None) -> dict[str, list[dict[str, Any]]]:
        """:meth:`history`, or only the keys configured now when the history file is damaged: where a
        peer answers or a sender follows up, a damaged history must not stop the work
        (``gw receipts verify`` reports it, exit 8)."""
        from ..errors import Corrupt
        from . import keyring
        from .signing import public_key

        try:
            return self.history(now)
        except Corrupt:
            current = {f"peer:{p.name}": p.key for p in self.peers.values() if p.key}
            if self.signing_key and os.path.isfile(self.signing_key):
                current[keyring.SELF] = public_key(self.signing_key)
            return {name: [{"key": key, "from": None, "until": None}] for name, key in current.items()}

    def by_key(self) -> list[tuple[str, str]]:
        """``(principal, public key)`` for every peer with a key: the signers a request may come from."""
        return [(p.name, p.key) for p in self.peers.values() if p.key]


def local_keys(values: dict[str, list[tuple[str, str]]]) -> list[str]:
    """The keys set in the repository's own config (a peer in ~/.gitconfig or /etc/gitconfig is no peer)."""
    return [key for key, entries in values.items() if any(scope in _LOCAL for scope, _value in entries)]


def _peer(name: str, values: dict[str, list[str]]) -> Peer:
    if not PEER_NAME.match(name):
        raise Invalid(f"bad peer name {name[:64]!r} in git config: letters, digits, '_' and '-'")
    urls = values.get("url")
    url = urls[-1] if urls else None
    if url is not None and not re.match(r"https?://[^\s/]+", url):
        raise Invalid(f"bad git config gitwork.peer.{name}.url: {url[:80]!r} (http:// or https://)")
    keys = values.get("key")
    key = keys[-1] if keys else None
    if key is not None:
        key = " ".join(key.split()[:2])  # "type base64 [comment]": the comment is not part of the key
        if not _KEY.match(key):
            raise Invalid(f"bad git config gitwork.peer.{name}.key: not an SSH public key ('ssh-ed25519 AAAA...')")
    allow_values = values.get("allow")
    if allow_values:
        allow = frozenset(word for value in allow_values for word in re.split(r"[\s,]+", value.strip()) if word)
        unknown = sorted(allow - set(OPS))
        if unknown:
            raise Invalid(f"bad git config gitwork.peer.{name}.allow: unknown {', '.join(unknown)} "
                          f"(known: {', '.join(OPS)})")
    else:
        allow = DEFAULT_ALLOW
    return Peer(name, url, key, allow)


_LOCAL_PATTERN = r"^(gitwork\.(peer|delegation)\..*|extensions\.worktreeconfig)$"
_ANY_SCOPE_PATTERN = r"^gitwork\.(signingkey|allowedsigners)$"
_WORKTREE_CONFIG = "extensions.worktreeconfig"


def _entries(args: list[str], pattern: str, scope: str | None) -> list[tuple[str, str, str]]:
    """``(scope, key, value)`` of ``git config ARGS -z --get-regexp PATTERN``: ``scope`` given, or git's own."""
    done = gitcmd.run([*args, *(() if scope else ("--show-scope",)), "-z", "--get-regexp", pattern], check=False)
    if done.returncode not in (0, 1):  # 1: no such key
        raise GitFailed(f"git config failed (exit {done.returncode}): {gitcmd.one_line(done.err)}")
    tokens = done.stdout.decode("utf-8", "replace").split("\0")
    # with --show-scope: scope NUL key LF value NUL, repeated; else key LF value NUL
    pairs = list(zip(tokens[0::2], tokens[1::2], strict=False)) if scope is None else [(scope, t) for t in tokens if t]
    return [(where, *entry.partition("\n")[::2]) for where, entry in pairs]  # type: ignore[misc]


def read_local(git_dir: str, common_dir: str) -> dict[str, list[tuple[str, str]]]:
    """Peers and ``gitwork.delegation.*`` from the repository's own config files, by path (``git config
    --file``): ``<common dir>/config``, and this worktree's ``config.worktree`` when
    ``extensions.worktreeConfig`` is on. git's other sources (``~/.gitconfig``, ``/etc/gitconfig``,
    ``GIT_CONFIG``, ``GIT_CONFIG_COUNT``/``_KEY_n``/``_VALUE_n``, ``git -c`` passed down in
    ``GIT_CONFIG_PARAMETERS``, include directives) are never looked at."""
    values: dict[str, list[tuple[str, str]]] = {}
    files = [("local", os.path.join(common_dir, "config")), ("worktree", os.path.join(git_dir, "config.worktree"))]
    for scope, path in files:
        if scope == "worktree" and (values.pop(_WORKTREE_CONFIG, None) or [("", "")])[-1][1].lower() not in (
                "true", "yes", "on", "1"):
            break
        if os.path.isfile(path):
            for where, key, value in _entries(["config", "--file", path], _LOCAL_PATTERN, scope):
                # git lower-cases section and key names, never the subsection (the peer's name)
                values.setdefault(key, []).append((where, value))
    values.pop(_WORKTREE_CONFIG, None)
    return values


def read(git_dir: str, common_dir: str | None = None) -> dict[str, list[tuple[str, str]]]:
    """Every delegation key, each value with its scope: :func:`read_local`, plus the signing key from
    any scope (it is the user's own key)."""
    values = read_local(git_dir, common_dir or git_dir)
    for scope, key, value in _entries(["--git-dir", git_dir, "config"], _ANY_SCOPE_PATTERN, None):
        values.setdefault(key, []).append((scope, value))
    return values


def load(repo: Any) -> Config:
    return Config(repo.common_dir, read(repo.git_dir, repo.common_dir))


def configured(repo: Any) -> bool:
    """Is any peer configured here? Without one, the delegation face does not exist."""
    return bool(load(repo).peers)


def configured_at(path: str | None) -> bool:
    """:func:`configured` for the repository around ``path`` (the CLI's check); ``False`` outside one."""
    from ..errors import GwError
    from ..gitdir import discover

    try:
        where = discover(os.path.abspath(path or os.getcwd()))
        return any(k.startswith("gitwork.peer.") for k in read_local(where.git_dir, where.common_dir))
    except GwError:
        return False
