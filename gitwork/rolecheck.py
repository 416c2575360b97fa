"""The arbiter's side of the roles: each pushed command is judged again with the server's own settings.

A client's engine checks the roles (``gitwork/roles.py``) with the client's settings, which is only
advice: anyone can run another gitwork, change their ``.workplane`` or write a commit with plain git.
The arbiter's pre-receive hook (``gitwork.hookcheck``, through ``gitwork.statecheck``) calls
:func:`check_commits` for every new commit on the state ref: it re-applies the commit's command
document to the commit's parent, at the commit's author time, with the settings of the arbiter's
repository (``git config gitwork.admins`` / ``gitwork.agents`` there), and refuses the push when the
engine answers :class:`Forbidden`: a revoke or decide by the wrong role, an ask by someone who does
not hold the item, an agent acting on an item it does not hold. Other refusals are left to the other
checks (a replayed command may be refused for reasons that are ``gw sync``'s to report).

What it cannot do is know who really pushed: the command's ``as`` is what the client wrote, unless
the arbiter requires signed state commits (``signing: ssh``: ``hookcheck.check_signatures`` binds
``as`` to a key first; docs/security.md); see docs/leases.md, "Roles".
"""

from __future__ import annotations


def check_commits(git_dir: str, ref: str, commits: list[tuple[str, str | None]]) -> list[str]:
    """Refusals for ``[(commit, parent)]`` about to land on ``ref`` of the repository at ``git_dir``.

    Only the ops declared ``@op(..., roles=True)`` are re-applied: those whose rules depend on who acts.
    """
    from . import engine, statecommit
    from .errors import Forbidden, GwError
    from .store import Repository, Store

    try:
        repo = Repository.discover(git_dir)
    except GwError as error:  # e.g. a bad gitwork.admins on the server: say so rather than wave it through
        return [f"cannot read the arbiter's settings: {error.message}"]
    store = Store(repo, ref)
    problems: list[str] = []
    try:
        for commit, parent in commits:
            if parent is None:
                continue
            state = statecommit.read(store, commit)
            cmd = state.command
            declared = engine.spec(cmd["op"]) if cmd is not None and isinstance(cmd.get("op"), str) else None
            if declared is None or not declared.roles or not cmd.get("id") or state.at is None:
                continue
            try:
                clean = engine.validate_command(dict(cmd))
                engine.apply(store.snapshot(parent, at_tip=False), clean, state.at, repo.settings)
            except Forbidden as error:
                problems.append(f"{commit[:12]}: {cmd['op']} by {cmd.get('as')} refused by the arbiter's roles: "
                                f"{error.message}")
            except Exception:  # noqa: BLE001 - any other refusal or oddity is the other checks' business:
                pass  # this check must never turn a push away for anything but a role
    finally:
        store.close()
    return problems
