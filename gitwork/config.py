"""Settings: defaults < ``.workplane`` (repository top level) < git config ``gitwork.*`` < ``GW_*``.

Flags given on the command line are applied by the faces on top of what :func:`load` returns.
Every setting, its default and its meaning is listed in ``.workplane.example``.
"""

from __future__ import annotations

import os

from .codec import parse_duration
from .errors import Invalid
from .ids import check_identity, plain_identity

TYPE_CHECKING = False  # typing costs ~15 ms to import; annotations are strings anyway
if TYPE_CHECKING:
    from typing import Any


DEFAULTS: dict[str, Any] = {
    "ref": "refs/gitwork/state",
    "default_ttl": 900,  # seconds a claim lasts unless --ttl says otherwise
    "clock_margin": 30,  # seconds of clock skew tolerated; see docs/leases.md
    "agent": None,  # holder identity; None means the documented default
    "lock_timeout": 5.0,  # seconds a ref lock may persist before we call it a crashed writer
    "admins": (),  # identities that may revoke and decide; empty: every person may (see docs/leases.md)
    "agents": (),  # identities that are agents: they act only on what they hold, may ask, never decide
    "people": (),  # persons who may post on any item's thread (docs/leases.md, "Who may post")
    "remote": None,  # arbiter remote (several machines)
    "gates": (),  # commands that must pass before a merge is published
    "signing": None,  # "ssh": sign every state commit with gitwork.signingKey (docs/security.md)
    "sessions": None,  # multi-step session rules: operators, steps, chains (gitwork/sessions/rules.py)
    "tmux_socket": None,  # gw run's own tmux server; None: under the git common dir (docs/launch.md)
    "paths": None,  # "strict": the code remote refuses a push touching a path no live lease of the pusher covers
    "budget": None,  # default budgets in USD: {"item": ..., "session": ...} (docs/launch.md, "Budgets")
    "arbiter": None,  # "batch": lease commands go to the arbiter's inbox, applied in batches (docs/deploy.md)
}


class Settings:
    """Resolved settings (a plain class: dataclasses cost ~25 ms of start-up)."""

    ref: str
    default_ttl: int
    clock_margin: int
    agent: str | None
    lock_timeout: float
    admins: tuple[str, ...]
    agents: tuple[str, ...]
    people: tuple[str, ...]
    remote: str | None
    gates: tuple[str, ...]
    signing: str | None
    sessions: dict[str, Any] | None
    tmux_socket: str | None
    paths: str | None
    budget: dict[str, str] | None
    arbiter: str | None

    def __init__(self, extra: dict[str, Any] | None = None, **values: Any) -> None:
        unknown = set(values) - set(DEFAULTS)
        if unknown:
            raise TypeError(f"unknown settings {sorted(unknown)}")
        for name, default in DEFAULTS.items():
            setattr(self, name, values.get(name, default))
        self.extra = extra or {}

    def replace(self, **values: Any) -> Settings:
        current = {name: getattr(self, name) for name in DEFAULTS}
        current.update(values)
        return Settings(self.extra, **current)

    def identity(self) -> str:
        # ``agent`` is checked where it is read (load, Workplane); an empty one is refused there, never
        # silently the default. The check here covers settings built directly (Settings(agent=...)).
        if self.agent is None:
            return default_identity()
        return check_identity(self.agent, "the identity")

    def role(self, who: str) -> str:
        """``admin``, ``agent`` or ``person`` (everyone not listed); see docs/leases.md, "Roles"."""
        if who in self.admins:
            return "admin"
        if who in self.agents:
            return "agent"
        return "person"


# The session of the process a command runs for, when it is not this one: the resident launcher
# (launch/resident.py) runs a caller's `gw run` in its own process, as the caller's terminal would.
CALLER_SESSION: int | None = None


def default_identity() -> str:
    """``user@host/s<session id>``: keeps two agents on one machine apart, and one shell together.

    The session id (``getsid``) is shared by every command a shell runs, and differs between two
    terminals, tmux panes or agent processes that each start their own session.
    """
    # getpass.getuser's sources in its order, and the node name socket.gethostname returns on POSIX:
    # without importing getpass (termios) and socket (selectors, enums), ~3 ms of every command run
    # without --as or GW_AGENT (issue 27: gw claim's start-up).
    user = next((os.environ[name] for name in ("LOGNAME", "USER", "LNAME", "USERNAME") if os.environ.get(name)), "")
    if not user:
        try:
            import pwd

            user = pwd.getpwuid(os.getuid()).pw_name
        except Exception:  # no passwd entry in some containers
            user = "user"
    try:
        sid = os.getsid(0) if CALLER_SESSION is None else CALLER_SESSION
    except (AttributeError, OSError):
        sid = os.getppid()
    # A login or host name outside the identity rule is brought within it (each other character
    # becomes "-", each part at most 24 characters), so the default always passes the same check.
    host = os.uname().nodename.split(".")[0] or "host"
    return check_identity(f"{plain_identity(user)[:24]}@{plain_identity(host)[:24]}/s{sid}", "the default identity")


_DURATIONS = {"default_ttl", "clock_margin"}
_LISTS = {"admins", "agents", "people", "gates"}
_ENV = {
    "GW_REF": "ref",
    "GW_TTL": "default_ttl",
    "GW_CLOCK_MARGIN": "clock_margin",
    "GW_AGENT": "agent",
    "GW_LOCK_TIMEOUT": "lock_timeout",
    "GW_REMOTE": "remote",
    "GW_TMUX_SOCKET": "tmux_socket",
    "GW_ARBITER": "arbiter",
}


def _coerce(name: str, value: Any, source: str) -> Any:
    if name == "agent":
        # Every source of an identity passes the one rule (ids.check_identity); "" is an error, not
        # the default (null in .workplane leaves the setting unset).
        where = f"agent in {source}" if source == ".workplane" else source
        if isinstance(value, int) and not isinstance(value, bool):
            value = str(value)  # `agent: 42` in YAML is a number; as a name it is "42"
        return None if value is None else check_identity(value, where)
    if name == "sessions":
        # Only its shape here (a mapping); gitwork/sessions/rules.py checks the rules when a session uses them,
        # so a mistake there never stops the everyday commands.
        if value is not None and not isinstance(value, dict):
            raise Invalid(f"bad setting 'sessions' in {source}: a mapping of operators, steps and chains")
        return value
    if name == "budget":
        return _budget(value, source)
    try:
        if name in _DURATIONS:
            return parse_duration(value) if name != "clock_margin" or str(value) != "0" else 0
        if name == "lock_timeout":
            seconds = float(value)
            if not 0 <= seconds <= 86400:  # NaN too: a lock wait of no sensible length (was exit 1 later)
                raise ValueError("not 0-86400 seconds")
            return seconds
        if name in _LISTS:
            if isinstance(value, str):
                return tuple(v.strip() for v in value.split(",") if v.strip())
            if value is not None and not isinstance(value, (list, tuple)):
                raise ValueError("not a list")
            return tuple(str(v) for v in value or ())
        if value is None:
            return None
        if name == "paths":
            if str(value) not in ("strict", "open"):
                raise ValueError("not strict or open")
            return None if str(value) == "open" else "strict"
        if name == "arbiter":
            if str(value) not in ("batch", "cas"):
                raise ValueError("not batch or cas")
            return None if str(value) == "cas" else "batch"
        if name == "signing":
            if str(value) not in ("ssh", "none"):
                raise ValueError("not ssh or none")
            return None if str(value) == "none" else "ssh"
        return str(value)
    except (ValueError, Invalid) as exc:
        raise Invalid(f"bad setting {name!r} in {source}: {value!r}") from exc


def _budget(value: Any, source: str) -> dict[str, str] | None:
    """``budget``: a mapping of ``item`` and ``session`` to amounts in USD (a bare amount: ``item``'s)."""
    from .money import parse_text

    if value is None:
        return None
    if not isinstance(value, dict):
        value = {"item": value}
    unknown = sorted(str(k) for k in value if k not in ("item", "session"))
    if unknown:
        raise Invalid(f"bad setting 'budget' in {source}: {unknown[0][:40]!r} is not item or session")
    try:
        return {str(k): parse_text(v, f"budget.{k}") for k, v in value.items() if v is not None} or None
    except Invalid as exc:
        raise Invalid(f"bad setting 'budget' in {source}: {exc.message}") from exc


def _check_roles(values: dict[str, Any]) -> None:
    """One role per identity: a name listed as both admin and agent is a settings mistake, not a rule to guess."""
    both = sorted(set(values.get("admins", ())) & set(values.get("agents", ())))
    if both:
        raise Invalid(f"bad setting: {', '.join(both)} listed in both 'admins' and 'agents' (one role each)")
    both = sorted(set(values.get("people", ())) & set(values.get("agents", ())))
    if both:
        raise Invalid(f"bad setting: {', '.join(both)} listed in both 'people' and 'agents' (one role each)")


# Settings the arbiter remote decides with its OWN settings (its git config: derive.py re-applies every
# pushed command with them), so with a remote set the value here is only this clone's view of them.
ARBITER = ("admins", "agents", "people", "clock_margin", "default_ttl", "signing")


def good_ref_name(ref: str) -> bool:
    """Whether git takes ``ref`` as a ref's full name (the rules of ``git check-ref-format``), checked
    here so that a bad ``ref`` setting is refused when set, not by git at the first write (exit 1)."""
    if not ref.isprintable() or any(c in ref for c in " ~^:?*[\\") or "@{" in ref:
        return False
    if ref == "@" or ref.endswith((".", "/")) or ".." in ref:
        return False
    parts = ref.split("/")
    return len(parts) >= 2 and all(p and not p.startswith(".") and not p.endswith(".lock") for p in parts)


def load(toplevel: str | None, git_config: dict[str, str], origins: dict[str, str] | None = None,
         workplane: bytes | None = None) -> Settings:
    """The settings in force; ``origins`` (when given) is filled with where each set one came from
    (``.workplane``, ``git config gitwork.KEY``, ``GW_X``); a setting not in it is its default.
    ``workplane``: this text instead of the ``.workplane`` file (what ``gw config set`` would write)."""
    known = set(DEFAULTS)
    origins = {} if origins is None else origins
    values: dict[str, Any] = {}
    extra: dict[str, Any] = {}
    path = os.path.join(toplevel, ".workplane") if toplevel else None
    if workplane is None and path is not None and os.path.exists(path):
        try:
            with open(path, "rb") as handle:
                workplane = handle.read()
        except OSError as exc:  # a folder, no permission: one line, as a .workplane that does not parse
            from .errors import Corrupt

            raise Corrupt(f".workplane cannot be read: {exc.strerror or exc}") from None
    if workplane is not None:
        from .codec import load_yaml

        # (the file's text, or the text gw config set is about to write: checked before it is written)
        doc = load_yaml(workplane, what=".workplane", allow_empty=True)
        for key, value in doc.items():
            name = key.replace("-", "_")
            if name in known:
                values[name] = _coerce(name, value, ".workplane")
                origins[name] = ".workplane"
            else:
                extra[key] = value
    for key, value in git_config.items():
        name = key.removeprefix("gitwork.").replace("-", "_").lower()
        if name.replace("_", "") in {k.replace("_", "") for k in known}:
            name = next(k for k in known if k.replace("_", "") == name.replace("_", ""))
            values[name] = _coerce(name, value, f"git config {key}")
            origins[name] = f"git config {key}"
    for env, name in _ENV.items():
        if os.environ.get(env):
            values[name] = _coerce(name, os.environ[env], env)
            origins[name] = env
    if not str(values.get("ref", "refs/gitwork/state")).startswith("refs/"):
        raise Invalid(f"the state ref must start with refs/: {values['ref']!r}")
    if "ref" in values and not good_ref_name(str(values["ref"])):
        raise Invalid(f"the state ref {str(values['ref'])[:80]!r} is no name git takes for a ref "
                      "(git check-ref-format)")
    _check_roles(values)
    return Settings(extra, **values)
