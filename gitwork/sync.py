"""Several machines: a git remote as the single arbiter of leases, offline work replayed on sync.

The remote's state ref is the truth. A lease command (claim, renew, release, takeover, revoke,
handoff) succeeds only once its commit is on the remote's state ref: it is applied on top of the
last known remote tip and pushed with ``--force-with-lease=<ref>:<that tip>``, a compare-and-swap on
the remote. A rejected push means another machine moved first: fetch, apply the same document
again on the new tip (re-validating it: the item may now be held, the fence stale) and push again.

Everything else can be done offline. ``sync`` replays the local commands the remote has not seen on
top of the remote tip, in order, each re-validated by the engine at its original time; a command
that no longer applies is refused and reported by command id (and kept in ``refused.jsonl``), the
others still land. The remote's history is never rewritten; local history becomes the remote's plus
the replayed commands. Commands already on the remote (a push whose reply was lost) are recognised
by their ``Command-Id`` and not applied twice.

Pushes and fetches use the git binary: pygit2's push to a local path is not a compare-and-swap and
runs no server hooks.
"""

from __future__ import annotations

import json
import os
import random
import time

from . import clock, engine, gitcmd
from .errors import GwError, Held, RemoteError, UsageError
from .store import Snapshot, crash_point, identity_signature

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

    from .workplane import Applied, Workplane

# Ops that must be decided by the arbiter; other modules may add theirs.
ARBITER_OPS: set[str] = {"claim", "renew", "release", "takeover", "revoke", "handoff"}
MAX_ROUNDS = 200


def tracking_ref(remote: str, ref: str) -> str:
    return f"refs/remotes/{remote}/{ref.removeprefix('refs/')}"


def configure_remote(wp: Workplane, name: str) -> dict[str, Any]:
    """Record ``name`` as the arbiter and add a fetch refspec for the state ref (branches untouched)."""
    repo = wp.repo
    known = gitcmd.run(["--git-dir", repo.git_dir, "remote"], check=True).out.split()
    if name not in known:
        raise UsageError(f"no git remote named {name!r} (add it with: git remote add {name} URL)")
    spec = f"+{wp.store.ref}:{tracking_ref(name, wp.store.ref)}"
    existing = gitcmd.run(["--git-dir", repo.git_dir, "config", "--get-all", f"remote.{name}.fetch"],
                          check=False).out.split()
    if spec not in existing:
        gitcmd.run(["--git-dir", repo.git_dir, "config", "--add", f"remote.{name}.fetch", spec])
    gitcmd.run(["--git-dir", repo.git_dir, "config", "gitwork.remote", name])
    wp.settings.remote = name
    return {"remote": name, "fetch": spec, "tracking": tracking_ref(name, wp.store.ref)}


class Arbiter:
    def __init__(self, wp: Workplane, remote: str | None = None) -> None:
        self.wp = wp
        self.store = wp.store
        self.remote = remote or wp.settings.remote
        if not self.remote:
            raise UsageError("no arbiter remote configured (gw remote set NAME)")
        self.tracking = tracking_ref(self.remote, self.store.ref)
        self.git_dir = wp.repo.git_dir

    # --- talking to the remote ------------------------------------------------------------------

    def fetch(self) -> str | None:
        """Fetch the remote's state ref; return its tip (``None`` if the remote has none yet)."""
        for attempt in range(20):
            done = gitcmd.run(
                ["--git-dir", self.git_dir, "fetch", "--quiet", "--no-tags", "--no-write-fetch-head", self.remote,
                 f"+{self.store.ref}:{self.tracking}"],
                check=False, timeout=120,
            )
            if done.returncode == 0:
                return self.known_remote_tip()
            if "couldn't find remote ref" in done.err:
                return None
            if "cannot lock ref" in done.err or ".lock" in done.err:
                # Another gw process in this clone fetched at the same moment and holds (or just
                # moved) the tracking ref: the remote answered, so fetch again rather than fail.
                time.sleep(random.uniform(0.005, 0.03 * (attempt + 1)))
                continue
            break
        raise RemoteError(f"cannot fetch from {self.remote}: {_last_line(done.err)}", remote=self.remote)

    def known_remote_tip(self) -> str | None:
        from .gitdir import read_ref

        fast = read_ref(self.wp.repo.common_dir, self.tracking) if self.wp.repo.fast_refs else False
        if fast is not False:
            return fast  # type: ignore[return-value]
        got = self.store.cat.get(self.tracking)
        return got[0] if got else None

    def push(self, expected: str | None, new: str) -> bool:
        """CAS on the remote: move its state ref from ``expected`` to ``new``; False if it moved first."""
        lease = f"--force-with-lease={self.store.ref}:{expected or ''}"
        crash_point("before-push")
        done = gitcmd.run(
            ["--git-dir", self.git_dir, "push", "--porcelain", lease, self.remote,
             f"{new}:{self.store.ref}"],
            check=False, timeout=120,
        )
        status = None
        for line in done.out.splitlines():
            fields = line.split("\t")
            if len(fields) >= 2 and fields[1].endswith(f":{self.store.ref}"):
                status = fields[0]
        if status == "!":
            return False  # rejected: stale info / non-fast-forward / fetch first
        if done.returncode != 0 or status is None:
            if "stale info" in done.err or "rejected" in done.err:
                return False
            if done.returncode == 0 or "remote end hung up" in done.err or "unexpected disconnect" in done.err:
                # No word about our ref (the server went away mid-push): ask what it holds now.
                landed = self._remote_has(new)
                if landed is not None:
                    return landed and self._pushed(new)
            raise RemoteError(f"cannot push to {self.remote}: {_last_line(done.err)}", remote=self.remote)
        return self._pushed(new)

    def _remote_has(self, new: str) -> bool | None:
        """Whether the remote's state ref is at ``new`` (``None``: the remote cannot be asked)."""
        done = gitcmd.run(["--git-dir", self.git_dir, "ls-remote", self.remote, self.store.ref], check=False,
                          timeout=60)
        if done.returncode != 0:
            return None
        return done.out.split("\t", 1)[0].strip() == new

    def _pushed(self, new: str) -> bool:
        crash_point("after-push")
        # git moves the tracking ref itself when a fetch refspec maps the state ref (gw remote set
        # adds one); only without it does that take a process of our own.
        if self.known_remote_tip() != new:
            gitcmd.run(["--git-dir", self.git_dir, "update-ref", self.tracking, new], check=False)
        return True

    # --- history questions ------------------------------------------------------------------------

    def _reaches(self, start: str, target: str, limit: int = 256) -> bool:
        """Whether ``target`` is within ``limit`` first parents of ``start`` (state history is linear)."""
        commit: str | None = start
        for _ in range(limit):
            if commit == target:
                return True
            if commit is None:
                return False
            info = self.store.snapshot(commit).info
            commit = info.parents[0] if info and info.parents else None
        return False

    def _merge_base(self, a: str, b: str) -> str | None:
        # The usual cases (one side a few commits ahead) are answered from the objects, no process.
        if self._reaches(a, b):
            return b
        if self._reaches(b, a):
            return a
        done = gitcmd.run(["--git-dir", self.git_dir, "merge-base", a, b], check=False)
        return done.out.strip() or None

    def _first_parent_range(self, exclude: str | None, include: str) -> list[str]:
        args = ["--git-dir", self.git_dir, "rev-list", "--first-parent", "--reverse", include]
        if exclude:
            args.append(f"^{exclude}")
        return gitcmd.run(args).out.split()

    def _command_of(self, commit: str) -> tuple[dict[str, Any] | None, int]:
        info = self.store.snapshot(commit).info
        assert info is not None
        when = int(info.author.rsplit(" ", 2)[1])
        return engine.parse_command_from_message(info.message), when

    # --- building the chain to push -----------------------------------------------------------

    def _apply(self, base: Snapshot, cmd: dict[str, Any], when: Any) -> tuple[Snapshot, dict[str, Any], Any]:
        snapshot_cmd = dict(cmd)
        outcome = engine.apply(base, snapshot_cmd, when, self.wp.settings)
        if outcome.empty:
            return base, snapshot_cmd, outcome
        message = engine.commit_message(snapshot_cmd, outcome)
        commit = self.store.write_commit(base, outcome.changes, message, identity_signature(snapshot_cmd["as"]),
                                         int(when.timestamp()))
        return self.store.snapshot(commit), snapshot_cmd, outcome

    def rebuild(self, local: str | None, remote: str | None) -> tuple[str | None, list[dict[str, Any]], list[dict[str, Any]]]:
        """The chain to publish: ``remote`` plus local commands it has not seen, re-validated.

        Returns (new tip, replayed, refused). When one side simply contains the other no command is
        re-applied and no commit is rewritten.
        """
        if local is None or local == remote:
            return remote, [], []
        if remote is None:
            return local, [], []
        base = self._merge_base(local, remote)
        if base == local:
            return remote, [], []
        if base == remote:
            return local, [], []
        seen = set()
        for commit in self._first_parent_range(local, remote):
            cmd, _ = self._command_of(commit)
            if cmd and "id" in cmd:
                seen.add(cmd["id"])
        chain = self.store.snapshot(remote)
        replayed: list[dict[str, Any]] = []
        refused: list[dict[str, Any]] = []
        for commit in self._first_parent_range(remote, local):
            cmd, when = self._command_of(commit)
            if cmd is None:
                refused.append({"commit": commit, "error": "corrupt", "message": "commit carries no command document"})
                continue
            if cmd.get("id") in seen:
                continue  # already on the remote (a push whose reply was lost, or a replayed copy)
            try:
                chain.check_format()
                before = chain.commit
                chain, applied_cmd, _ = self._apply(chain, engine.validate_command(cmd),
                                                    clock.parse_instant_epoch(when))
                if chain.commit != before:  # a no-op (e.g. init on existing state) is not news
                    replayed.append({"command_id": cmd["id"], "op": cmd.get("op"), "item": applied_cmd.get("item")})
            except GwError as error:
                refused.append({"command_id": cmd.get("id"), "op": cmd.get("op"), "item": cmd.get("item"),
                                **error.to_json()})
        return chain.commit, replayed, refused

    def _adopt(self, local: str | None, new: str) -> None:
        """Point the local ref at ``new`` if nobody moved it meanwhile (else the next sync sorts it out)."""
        if local == new:
            return
        self.store.set_if_equals(local, new)

    def _record_refused(self, refused: list[dict[str, Any]]) -> None:
        if not refused:
            return
        path = os.path.join(self.wp.repo.gitwork_dir(), "refused.jsonl")
        with open(path, "a", encoding="utf-8") as handle:
            for entry in refused:
                handle.write(json.dumps({"at": clock.format_instant(clock.now()), **entry}) + "\n")

    # --- the three entry points ---------------------------------------------------------------

    def sync(self, *, push: bool = True) -> dict[str, Any]:
        """Fetch, replay what the remote has not seen, and (with ``push``) publish it."""
        all_replayed: dict[str, dict[str, Any]] = {}
        all_refused: dict[str, dict[str, Any]] = {}
        for _round in range(MAX_ROUNDS):
            remote = self.fetch()
            local = self.store.tip()
            new, replayed, refused = self.rebuild(local, remote)
            for entry in replayed:
                all_replayed[entry["command_id"]] = entry
            for entry in refused:
                all_refused[str(entry.get("command_id") or entry.get("commit"))] = entry
            if new is None:
                break
            if push and new != remote:
                if not self.push(remote, new):
                    time.sleep(0.01)
                    continue
            self._adopt(local, new)
            if self.store.tip() != new and not push:
                continue
            break
        else:
            raise Held(f"gave up after {MAX_ROUNDS} rounds of racing other machines")
        refused_list = [v for k, v in all_refused.items() if k not in all_replayed]
        self._record_refused(refused_list)
        return {"remote": self.remote, "tip": self.store.tip(), "remote_tip": self.known_remote_tip(),
                "replayed": list(all_replayed.values()), "refused": refused_list}

    def submit(self, cmd: dict[str, Any]) -> Applied:
        """Apply a lease command so that it lands on the remote, or refuse it as the remote sees it."""
        from .workplane import Applied

        remote = self.known_remote_tip()
        fetched = False
        for attempt in range(1, MAX_ROUNDS + 1):
            local = self.store.tip()
            base, _replayed, refused = self.rebuild(local, remote)
            self._record_refused(refused)
            snapshot = self.store.snapshot(base) if base else Snapshot(self.store, None, None)
            snapshot.check_format()
            try:
                after, applied_cmd, outcome = self._apply(snapshot, cmd, self.wp.now())
            except GwError:
                if fetched:
                    raise
                # Our view of the remote may be old: refuse only on what the remote says now.
                remote, fetched = self.fetch(), True
                continue
            if after.commit == base:
                return Applied(applied_cmd, base, outcome.result, outcome.summary, attempt)
            assert after.commit is not None
            if self.push(remote, after.commit):
                self._adopt(local, after.commit)
                return Applied(applied_cmd, after.commit, outcome.result, outcome.summary, attempt)
            remote, fetched = self.fetch(), True
        raise Held(f"gave up after {MAX_ROUNDS} lost races on {self.remote}")

    def status(self) -> dict[str, Any]:
        local = self.store.tip()
        remote = self.known_remote_tip()
        pending = []
        if local and local != remote:
            base = self._merge_base(local, remote) if remote else None
            for commit in self._first_parent_range(base, local):
                cmd, _ = self._command_of(commit)
                info = self.store.snapshot(commit).info
                pending.append({"commit": commit, "summary": info.message.split("\n", 1)[0] if info else "",
                                "command_id": (cmd or {}).get("id"), "op": (cmd or {}).get("op")})
        path = os.path.join(self.wp.repo.gitwork_dir(), "refused.jsonl")
        refused = []
        if os.path.exists(path):
            with open(path, encoding="utf-8") as handle:
                refused = [json.loads(line) for line in handle if line.strip()]
        return {"remote": self.remote, "tip": local, "remote_tip": remote, "pending": pending, "refused": refused}


def _last_line(text: str) -> str:
    lines = [line for line in text.strip().splitlines() if line.strip()]
    return lines[-1] if lines else "no output"
