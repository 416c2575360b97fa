"""What the installed git hooks check: ``python -m gitwork.hookcheck <hook-name> [args]``, stdin as git gives it.

Local hooks (a convenience: they stop honest mistakes early; ``git -c core.hooksPath=/dev/null``
or libgit2 bypasses them):

- ``reference-transaction`` (git >= 2.28; not skipped by ``--no-verify``, sees every ref move): a
  session branch ``refs/heads/session/*`` is commit-once. It may be created with at most one commit
  of its own, then move exactly once, by one commit whose parent is its base; no second commit,
  ``--amend``, ``reset``, ``rebase``, ``branch -f`` or ``update-ref`` after that, and no deletion
  until its commit is published (reachable from a branch, tag or remote-tracking ref that is not a
  session branch). ``git pack-refs``/``git gc`` still work: their synthetic lines are recognised.
- ``pre-commit``: the same rule, checked before git writes a commit (a friendlier, earlier refusal).

Server hook (the real gate): ``pre-receive`` runs every function in :data:`SERVER_CHECKS` on the
whole push; each yields refusal messages. :func:`register_server_check` adds one in the running
process (the hook process imports no other module to add any).

The hook scripts (top-level ``hooks/``) only start Python when a session ref is involved, so the
cost on every other ref update (gitwork's own state writes included) is one ``sh`` and one ``cat``.
"""

from __future__ import annotations

import functools
import os
import sys
from collections.abc import Callable, Iterable

from . import gitcmd
from .lazyre import Lazy

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

    from .model import Lease
    from .store import Repository, Store

SESSION_PREFIX = "refs/heads/session/"
STATE_PREFIX = "refs/gitwork/"
INBOX_PREFIX = "refs/gitwork/inbox/"  # the batch arbiter's requests (sync/inbox.py), not state refs
_ITEM = Lazy(r"w-[0-9a-f]{16}\Z")

# Patterns for rev-list: every branch, tag and remote-tracking ref that is not a session branch.
PUBLISHED = ("--exclude=session/*", "--branches", "--exclude=*/session/*", "--remotes", "--tags")
SERVER_PUBLISHED = ("--exclude=session/*", "--branches", "--tags")


class RefUpdate:
    """One line of hook input; ``old``/``new`` are ``None`` for the all-zero id."""

    __slots__ = ("old", "new", "ref")

    def __init__(self, old: str | None, new: str | None, ref: str) -> None:
        self.old, self.new, self.ref = old, new, ref

    def __repr__(self) -> str:
        return f"RefUpdate({self.old}, {self.new}, {self.ref})"


def parse_updates(text: str) -> list[RefUpdate]:
    updates = []
    for line in text.splitlines():
        parts = line.split(" ", 2)
        if len(parts) != 3:
            continue
        old, new, ref = parts
        updates.append(RefUpdate(None if set(old) == {"0"} else old, None if set(new) == {"0"} else new, ref))
    return updates


def _git(*args: str, check: bool = False) -> gitcmd.Completed:
    return gitcmd.run(list(args), check=check)


@functools.lru_cache(maxsize=1)
def _location() -> Any:
    """The repository the hook runs in, found the one way gitwork finds repositories (``gitdir``)."""
    from .gitdir import discover

    return discover(os.getcwd())


def _resolve(ref: str) -> str | None:
    done = _git("rev-parse", "-q", "--verify", f"{ref}^{{commit}}")
    return done.out.strip() or None if done.returncode == 0 else None


def _trailers(commit: str, key: str) -> list[str]:
    done = _git("log", "-1", f"--format=%(trailers:key={key},valueonly,separator=%x1f)", commit)
    return [v.strip() for v in done.out.strip().split("\x1f") if v.strip()] if done.returncode == 0 else []


def _unreached(commit: str, published: Iterable[str], extra: Iterable[str] = ()) -> list[str]:
    """Commits reachable from ``commit`` but from none of the published refs (nor ``extra``)."""
    done = _git("rev-list", commit, "--not", *published, *extra)
    return done.out.split() if done.returncode == 0 else [commit]


def session_name(ref: str) -> str:
    return ref[len("refs/heads/"):]


# --- local: commit-once session branches -----------------------------------------------------------


def has_own_work(commit: str, session: str) -> bool:
    """The branch of ``session`` at ``commit`` already holds its commit (or more): it must not move again.

    Either the tip carries this session's ``Session:`` trailer (``gw session commit`` wrote it; this
    also covers a branch whose commit was since published), or the tip is reachable from no
    published ref. Another session's trailer does not count: a base may well be an earlier session's
    published commit.
    """
    named = _trailers(commit, "Session")
    if session in named:
        return True
    unreached = _unreached(commit, PUBLISHED)
    return bool(unreached[:1]) and not _earlier_steps(unreached, session)


_STEP_BRANCH = Lazy(r"(.+)-s[1-9][0-9]*-p[1-9][0-9]*\Z")


def _earlier_steps(commits: list[str], session: str) -> bool:
    """A multi-step session's source branch ``<id>-sN-pM`` starts from a base holding the earlier steps'
    commits, still unpublished until ``gw session done`` lands them all (docs/sessions.md): that base is
    not this branch's own work when every unpublished commit in it was made for the same multi-step
    session (a ``Session:`` trailer ``<id>`` or ``<id>-sK-pJ``)."""
    match = _STEP_BRANCH.match(session)
    if not match:
        return False
    parent = match.group(1)
    for commit in commits:
        if not any(s == parent or (_STEP_BRANCH.match(s) and _STEP_BRANCH.match(s).group(1) == parent)  # type: ignore[union-attr]
                   for s in _trailers(commit, "Session")):
            return False
    return True


def _state_ref() -> str:
    return _git("config", "--get", "gitwork.ref").out.strip() or "refs/gitwork/state"


def _item_events(item: str, state_ref: str) -> list[dict[str, object]]:
    """The item's ``events.log`` on the state ref (empty when absent or unreadable)."""
    import json

    from . import layout

    done = _git("cat-file", "blob", f"{state_ref}:{layout.item_path(item, layout.EVENTS_FILE)}")
    if done.returncode != 0:
        return []
    events = []
    for line in done.out.splitlines():
        try:
            record = json.loads(line)
        except ValueError:
            continue
        if isinstance(record, dict):
            events.append(record)
    return events


def drop_recorded(commit: str, session: str, state_ref: str | None = None) -> bool:
    """The state ref records ``session-drop`` for ``session`` in the item named by ``commit``'s trailer.

    An unpublished session branch may be deleted once its drop is on the record (``gw session drop``
    writes the record first): the work is then thrown away on purpose, and the history says so.
    """
    ref = state_ref or _state_ref()
    for item in _trailers(commit, "Work-Item"):
        if _ITEM.match(item) and any(e.get("type") == "session-drop" and e.get("session") == session
                                     for e in _item_events(item, ref)):
            return True
    return False


def _is_pruning(ref: str, old: str | None) -> bool:
    """``git pack-refs`` (and so ``git gc``) deletes a loose ref it has just copied to packed-refs.

    Measured on git 2.39: it reports that as ``<oid> 0{40} <ref>``, exactly like a real delete with
    an expected value. What tells them apart is that packed-refs already holds the same value and
    the loose file still does too: after the "delete", the ref still exists unchanged.
    """
    if old is None:
        return False
    common = _location().common_dir
    try:
        with open(os.path.join(common, *ref.split("/")), encoding="ascii") as loose:
            if loose.read().strip() != old:
                return False
        with open(os.path.join(common, "packed-refs"), encoding="utf-8", errors="replace") as packed:
            wanted = f"{old} {ref}"
            return any(line.rstrip("\n") == wanted for line in packed)
    except OSError:
        return False


def check_session_update(update: RefUpdate) -> str | None:
    """Why this move of a session branch is refused, or ``None`` if it is allowed."""
    name = session_name(update.ref)
    current = _resolve(update.ref)
    new = update.new
    if new is not None and new == current:
        return None  # a no-op, or pack-refs copying the ref into packed-refs
    if new is None:
        if current is None or _is_pruning(update.ref, update.old or current):
            return None
        if _unreached(current, PUBLISHED)[:1] and not drop_recorded(current, name[len("session/"):]):
            return (f"{name} holds an unpublished commit ({current[:12]}); deleting it would lose the session's "
                    "work. Publish it with `gw publish`, or drop the session on the record with "
                    "`gw session drop`.")
        return None
    if current is None:
        own = _unreached(new, PUBLISHED)
        if len(own) > 1 and not _earlier_steps(own, name[len("session/"):]):
            return (f"{name} may be created with at most one commit of its own "
                    f"({len(own)} commits of {new[:12]} are on no published branch)")
        return None
    if has_own_work(current, name[len("session/"):]):
        return (f"{name} already has its commit ({current[:12]}): a session branch is commit-once. "
                "No second commit, --amend, reset, rebase, branch -f or update-ref; start a new session "
                "(`gw session start`) for more work.")
    parents = _git("rev-list", "--parents", "-n1", new).out.split()
    if len(parents) < 2 or parents[1] != current or len(_unreached(new, PUBLISHED, [current])) != 1:
        return (f"{name} may only move by one commit on top of its base {current[:12]}; "
                f"{new[:12]} is not that (reset, rebase, branch -f and update-ref are refused)")
    return None


def reference_transaction(args: list[str], text: str) -> list[str]:
    if not args or args[0] != "prepared":
        return []  # only the prepared phase can abort; committed/aborted are reports
    problems = []
    for update in parse_updates(text):
        if update.ref.startswith(SESSION_PREFIX):
            why = check_session_update(update)
            if why:
                problems.append(why)
    return problems


def pre_commit(args: list[str], text: str) -> list[str]:
    head = _git("symbolic-ref", "-q", "HEAD").out.strip()
    if not head.startswith(SESSION_PREFIX):
        return []
    current = _resolve(head)
    if current is not None and has_own_work(current, session_name(head)[len("session/"):]):
        return [f"{session_name(head)} already has its commit ({current[:12]}): a session branch is commit-once "
                "(no second commit, no --amend). Start a new session for more work."]
    return []


# --- server: pre-receive -----------------------------------------------------------------------


class Push:
    """One push as the server's pre-receive hook sees it (objects are quarantined but readable)."""

    def __init__(self, updates: list[RefUpdate]) -> None:
        self.updates = updates
        self._cat: gitcmd.CatFile | None = None
        self._state_ref: str | None = None
        self._configured_ref: str | None = None
        self._git_dir: str | None = None
        self._repository: Repository | None = None

    @property
    def git_dir(self) -> str:
        if self._git_dir is None:
            self._git_dir = _location().git_dir
        return self._git_dir

    @property
    def repository(self) -> Repository:
        """The repository with its settings, as ``Repository.discover(git_dir)`` finds it (found once)."""
        if self._repository is None:
            self._repository = _repository(self.git_dir)
        return self._repository

    def published_after(self, commit: str) -> bool:
        """``commit`` is on a non-session branch or tag, counting this push's own branch updates."""
        extra = [u.new for u in self.updates
                 if u.new and u.ref.startswith(("refs/heads/", "refs/tags/")) and not u.ref.startswith(SESSION_PREFIX)]
        return not _unreached(commit, SERVER_PUBLISHED, extra)[:1]

    def is_state(self, ref: str) -> bool:
        """``ref`` is a state ref of this arbiter: ``refs/gitwork/*`` (the batch inbox aside), or the one its
        setting ``ref`` names (``gitwork.ref``: any name under ``refs/``, docs/format.md), which the state
        rules guard like the default; the code checks (fences, paths) leave it alone."""
        if ref.startswith(STATE_PREFIX):
            return not ref.startswith(INBOX_PREFIX)
        if not ref.startswith("refs/") or ref.startswith(SESSION_PREFIX):
            return False
        if self._configured_ref is None:  # the hook's discovery read the config already: no git process
            self._configured_ref = self.repository.settings.ref
        return ref == self._configured_ref

    def is_code(self, ref: str) -> bool:
        """``ref``'s new commits are code, for the fence and path checks: not gitwork's (``refs/gitwork/*``,
        the inbox included) nor the state ref the setting ``ref`` names."""
        return not ref.startswith(STATE_PREFIX) and not self.is_state(ref)

    @property
    def state_ref(self) -> str:
        if self._state_ref is None:
            self._state_ref = _git("config", "--get", "gitwork.ref").out.strip() or "refs/gitwork/state"
        return self._state_ref

    def state_file(self, path: str) -> bytes | None:
        """A file of the server's state ref as it was before this push (``None`` if absent)."""
        if self._cat is None:
            self._cat = gitcmd.CatFile(self.git_dir)
        got = self._cat.get(f"{self.state_ref}:{path}")
        return got[2] if got and got[1] == "blob" else None

    def lease(self, item: str) -> Lease | None:
        """The item's lease on the server's state ref, read as the engine reads it; ``None`` if unknown."""
        from . import layout
        from .errors import GwError
        from .model import load_lease

        data = self.state_file(layout.item_path(item, layout.LEASE_FILE))
        if data is None:
            return None
        try:
            return load_lease(data, item)
        except GwError:
            return None  # the state check refuses a state that does not parse; nothing to judge by here

    def close(self) -> None:
        if self._cat is not None:
            self._cat.close()


ServerCheck = Callable[[Push], Iterable[str]]


def check_server_sessions(push: Push) -> Iterable[str]:
    """Session branches on the code remote: created once with at most one new commit, then frozen."""
    for update in push.updates:
        if not update.ref.startswith(SESSION_PREFIX):
            continue
        name = session_name(update.ref)
        if update.old is None and update.new is not None:
            own = _unreached(update.new, SERVER_PUBLISHED)
            if len(own) > 1:
                yield (f"{name}: a session branch may be created with at most one new commit "
                       f"(this push brings {len(own)})")
        elif update.old is not None and update.new is not None:
            yield f"{name}: a session branch is commit-once; updating or force-pushing it is refused"
        elif update.old is not None and not push.published_after(update.old) \
                and not drop_recorded(update.old, name[len("session/"):], push.state_ref):
            yield (f"{name}: deleting an unpublished session branch is refused (publish its commit first, or "
                   "record its drop with `gw session drop` and push the state ref)")


def fence_refusal(push: Push, item: str, fence: int) -> str | None:
    """Why ``fence`` may not land for ``item``, by the server's state ref; ``None`` if it may.

    Refused: a fence below the item's latest grant (someone was granted the item since: takeover,
    claim after expiry or release), and the latest grant's own fence once that lease has ended
    (``released`` by done, release or publish; ``revoked``; ``handed-off``). Every end of a lease makes
    its fence unusable here. Passed: the live latest grant, items the server does not know, and fences
    above the latest grant (a server whose state ref lags behind the clients' cannot judge them).
    """
    lease = push.lease(item)
    if lease is None:
        return None
    if fence < lease.fence:
        return (f"stale fence {fence} for {item} (fence {lease.fence} has since been granted: the lease was lost "
                "before this push). Claim the item again and redo the work in a new session.")
    if fence == lease.fence and not lease.is_active():
        why = f", reason {lease.reason}" if lease.reason else ""
        return (f"stale fence {fence} for {item} (its lease was {lease.state}{why}: the fence ended with it). Claim "
                "the item again and redo the work in a new session.")
    return None


def check_server_fences(push: Push) -> Iterable[str]:
    """A commit whose ``Fence:`` for a ``Work-Item:`` no longer holds on the server is refused.

    The item's ``lease.yaml`` on the server's state ref decides (:func:`fence_refusal`): fences strictly
    increase, so it carries the highest fence ever granted for the item, and its state says whether
    that grant is still live. Commits without trailers and items the server's state does not know
    pass. Commits already on a published branch or tag are not checked again.
    """
    seen: set[str] = set()
    for update in push.updates:
        if update.new is None or not push.is_code(update.ref):
            continue
        # Commits not yet on a published branch or tag: a stale commit parked on a session branch
        # earlier is checked again when it is pushed into a real branch.
        done = _git("log", "-z", "--format=%H%x1f%(trailers:key=Work-Item,valueonly,separator=%x1e)%x1f"
                    "%(trailers:key=Fence,valueonly,separator=%x1e)", update.new, "--not", *SERVER_PUBLISHED)
        for record in done.out.split("\0"):
            parts = record.strip("\n").split("\x1f")
            if len(parts) != 3 or parts[0] in seen:
                continue
            commit, items_text, fences_text = parts
            seen.add(commit)
            items = [i.strip() for i in items_text.split("\x1e") if i.strip()]
            if not items:
                continue
            fences_raw = [f.strip() for f in fences_text.split("\x1e") if f.strip()]
            if not fences_raw:
                continue
            if not all(f.isdigit() for f in fences_raw):
                yield f"{commit[:12]}: malformed Fence trailer {fences_raw!r}"
                continue
            fences = [int(f) for f in fences_raw]
            pairs = list(zip(items, fences, strict=True)) if len(fences) == len(items) else [(i, min(fences)) for i in items]
            for item, fence in pairs:
                if not _ITEM.match(item):
                    continue
                why = fence_refusal(push, item, fence)
                if why:
                    yield f"{commit[:12]} on {update.ref}: {why}"


def check_server_state(push: Push) -> Iterable[str]:
    """``refs/gitwork/*`` stays append-only, and each new commit is exactly its command's replay (``derive.py``)."""
    for update in push.updates:
        if push.is_state(update.ref):
            zero = "0" * len(update.new or update.old or "0" * 40)
            yield from check_update(push.git_dir, update.ref, update.old or zero, update.new or zero, state=True)


# --- server: the state ref -----------------------------------------------------------------------
#
# ``receive.denyNonFastForwards`` does not cover refs outside ``refs/heads`` (a forced rewind of a
# custom ref is accepted), so the arbiter remote needs this check to keep its history append-only: no
# deletion, no non-fast-forward, no commit that rewrites or truncates an append-only ``.log`` file, and
# no state that does not parse or was written by a newer format; then every commit must be its command's
# replay under the arbiter's settings (``derive.py``: the roles follow), and with ``signing: ssh`` signed.

ZERO = ("0" * 40, "0" * 64)
# The bytes of a refused commit's changed state files the structural checks read to say what it broke.
EXPLAIN_MOST = 4 << 20


def _check_commit(git_dir: str, store: Store, commit: str, parent: str | None) -> list[str]:
    from . import FORMAT_VERSION, codec
    from .errors import GwError
    from .model import state_file_problem
    from .store import APPEND_ONLY_SUFFIX, FORMAT_FILE, keeps_append_only

    git = functools.partial(_git, "--git-dir", git_dir)
    problems: list[str] = []
    if parent is None:
        listing = git("ls-tree", "-r", commit, check=True).out.splitlines()
        changes: list[tuple[str, str, str | None, str]] = [
            ("A", line.split("\t", 1)[1], None, line.split()[2]) for line in listing if "\t" in line]
    else:
        raw = git("diff-tree", "-r", "--no-renames", "--no-commit-id", parent, commit, check=True).out.splitlines()
        changes = []
        for line in raw:
            meta, _, path = line.partition("\t")
            fields = meta.split()
            changes.append((fields[4], path, fields[2], fields[3]))
    # Only a commit the replay refused is explained here, so reading is bounded, not needed: a pushed blob
    # compresses a thousandfold and a YAML parse takes some 25 times its size (a 1 MB push of a list took
    # gigabytes). What is larger, alone or together, is left to the replay's own words ("tree differs at").
    sizes = gitcmd.read_sizes(git_dir, [new for _, path, _, new in changes if new and new not in ZERO
                                        and path.endswith((APPEND_ONLY_SUFFIX, ".yaml"))])
    budget = EXPLAIN_MOST
    for status, path, old, new in changes:
        if new in sizes:
            budget -= sizes[new][1]
            if budget < 0:
                break
        if path.endswith(APPEND_ONLY_SUFFIX) and status in ("M", "D", "T"):
            # A type change (to a symlink, a folder) is a rewrite whatever the new object holds.
            assert old is not None  # M, D and T come from diff-tree, which names the old object
            after = store.read_blob(new) if status == "M" else None
            if not keeps_append_only(path, store.read_blob(old), after):
                problems.append(f"{commit[:12]} rewrites or truncates append-only {path}")
                continue
        if status == "D" or new is None or new in ZERO:
            continue
        try:
            if path == FORMAT_FILE:
                version = codec.load_yaml(store.read_blob(new), what=path).get("format")
                if not isinstance(version, int) or version > FORMAT_VERSION:
                    problems.append(f"{commit[:12]} has format {version!r}; this server reads up to {FORMAT_VERSION}")
            elif path.endswith(".yaml"):
                found = state_file_problem(path, codec.load_yaml(store.read_blob(new), what=path))
                if found:  # a value no reader could use (priority "high"): refused before it spreads
                    problems.append(f"{commit[:12]}: {path}: {found}")
            elif path.endswith(APPEND_ONLY_SUFFIX):
                list(codec.iter_records(store.read_blob(new), what=path))
        except GwError as error:
            problems.append(f"{commit[:12]}: {error.message}")
    return problems


def check_update(git_dir: str, ref: str, old: str, new: str, *, state: bool = False) -> list[str]:
    """Reasons to refuse moving the state ref ``ref`` from ``old`` to ``new`` (empty: accept); ``state``: the
    caller knows ``ref`` is one (:meth:`Push.is_state`), else only ``refs/gitwork/*`` is judged."""
    if not state and not ref.startswith(STATE_PREFIX):
        return []
    if new in ZERO:
        return [f"{ref}: deleting the work-plane state is not allowed"]
    from .store import Store

    # The same store gw reads through: loose objects read directly (the push's quarantine folder
    # included: git hands it to the hook as GIT_OBJECT_DIRECTORY), the rest from one cat-file.
    store = Store(_repository(git_dir), ref)
    try:
        return _check_range(git_dir, store, ref, old, new)
    finally:
        store.close()


def _repository(git_dir: str) -> Repository:
    """The hook's repository as ``Repository.discover(git_dir)`` finds it, from the discovery the hook
    already made when that is the same repository: in a bare repository (an arbiter) each discovery
    asks git twice (``rev-parse``, ``config``), two processes a push for nothing."""
    from .errors import GwError
    from .store import Repository

    try:
        where = _location()
    except GwError:  # called from elsewhere (a test, statecheck's callers) outside any repository
        return Repository.discover(git_dir)
    if os.path.realpath(where.git_dir) != os.path.realpath(git_dir):
        return Repository.discover(git_dir)
    return Repository.from_location(where)


def _not_a_commit(git_dir: str, ref: str, new: str, commits: list[str]) -> str | None:
    """Why ``ref`` may not move to ``new``, no commit: rev-list peels a tag and judges the commits behind it,
    so a tag of the arbiter's own tip passed, and every clone's every command was exit 8 from then on. The
    newest listed commit is ``new`` for every honest push: only otherwise is git asked what ``new`` is."""
    if commits and commits[-1].split()[0] == new:
        return None
    kind = gitcmd.read_sizes(git_dir, [new]).get(new, ("missing object", 0))[0]
    return None if kind == "commit" else f"{ref}: the state ref points only at a commit; this push moves it to a {kind}"


def _check_range(git_dir: str, store: Store, ref: str, old: str, new: str) -> list[str]:
    git = functools.partial(_git, "--git-dir", git_dir)
    listed = git("rev-list", "--reverse", "--parents", new, *([f"^{old}"] if old not in ZERO else []))
    commits = listed.out.splitlines() if listed.returncode == 0 else []
    wrong = _not_a_commit(git_dir, ref, new, commits)
    if wrong:
        return [wrong]
    if old not in ZERO:
        # A listed commit whose parent is ``old`` shows ``old`` an ancestor of ``new``: one git process
        # decides both for every ordinary push. Otherwise git's own answer, then the list, as before.
        if not any(old in line.split()[1:] for line in commits):
            if git("merge-base", "--is-ancestor", old, new).returncode != 0:
                return [f"{ref}: non-fast-forward update refused (the state history is append-only)"]
            commits = git("rev-list", "--reverse", "--parents", new, f"^{old}", check=True).out.splitlines()
    elif listed.returncode != 0:
        return [f"{ref}: git cannot list the history of {new[:12]} ({(listed.err.splitlines() or ['?'])[0][:200]})"]
    parents = {parts[0]: (parts[1] if len(parts) > 1 else None) for parts in map(str.split, commits)}
    from .derive import refusals

    # Each commit must be exactly its command's replay under this arbiter's settings (derive.py):
    # that covers what a hand-made tree can break. For a refused commit the structural checks say,
    # when they can, what it broke (a rewritten log, a newer format) rather than only "differs".
    problems: list[str] = []
    for commit, why in refusals(store, list(parents)):
        structural = _check_commit(git_dir, store, commit, parents[commit])
        problems += structural or [f"{commit[:12]}: {why}"]
    if not problems and store.repo.settings.signing == "ssh":  # signed by the acting identity's own key
        problems += check_signatures(git_dir, store, list(parents))
    return problems


def check_signatures(git_dir: str, store: Store, commits: list[str]) -> list[str]:
    """Refusals for state commits not signed by the key the arbiter's allowed-signers file gives their
    acting identity (the command's ``as``). ``ssh-keygen`` is asked for that very principal: a signature
    by a key nobody is allowed, or by another identity's key, is refused (git's own ``%G?`` says ``G``
    for any valid signature, even by an unknown key, and leaves the signer empty: not enough)."""
    from . import statecommit
    from .errors import GwError
    from .sshsig import allowed_signers_path, split_signed_commit, verify

    allowed = allowed_signers_path(store.repo.common_dir, store.repo.git_config)
    problems: list[str] = []
    for commit in commits:
        payload, signature = split_signed_commit(store.read_object(commit, "commit"))
        command = statecommit.read(store, commit).command or {}
        identity = command.get("as")
        if signature is None:
            problems.append(f"{commit[:12]}: unsigned; this arbiter takes only signed state commits (signing: ssh)")
        elif not isinstance(identity, str):
            problems.append(f"{commit[:12]}: no acting identity to check the signature against")
        else:
            try:
                verify(payload, signature, allowed, "git", expect=identity)
            except GwError as error:
                problems.append(f"{commit[:12]}: signature refused for {identity}: {error.message}")
        if len(problems) >= 20:
            break
    return problems


def check_server_paths(push: Push) -> Iterable[str]:
    """Path leases: a new commit touching a path another live holder leased (or, with ``paths: strict``,
    one no live lease of the pusher covers) is refused (``pathcheck.py``)."""
    if not any(u.new is not None and push.is_code(u.ref) for u in push.updates):
        return  # only state refs move: no code to judge (pathcheck's own first test; its import is saved)
    from .pathcheck import refusals

    yield from refusals(push)


def check_server_inbox(push: Push) -> Iterable[str]:
    """The batch arbiter's inbox (``refs/gitwork/inbox/*``): requests only, bounded (``sync/applier.py``)."""
    if not any(u.ref.startswith(INBOX_PREFIX) for u in push.updates):
        return  # no request in this push: applier.py (and the engine it imports) is not loaded
    from .applier import inbox_refusals

    yield from inbox_refusals(push)


SERVER_CHECKS: list[ServerCheck] = [check_server_state, check_server_inbox, check_server_sessions, check_server_fences,
                                    check_server_paths]


def register_server_check(check: ServerCheck) -> ServerCheck:
    """Add a server-side check (usable as a decorator); it gets the :class:`Push`, yields refusals."""
    if check not in SERVER_CHECKS:
        SERVER_CHECKS.append(check)
    return check


# The refs of a push whose stale locks the hook removes: gitwork's own, and the session branches ``gw publish
# --queue`` pushes to the code remote (a queue push killed with its group over file://, its receive-pack
# with it, left ``refs/heads/session/<id>.lock`` there, and every later push of the branch was refused).
SWEPT = (STATE_PREFIX, "refs/heads/session/")


def _swept_refs(push: Push) -> list[str]:
    """The refs of the push a ``<ref>.lock`` file exists for, among ``SWEPT`` and the state ref the arbiter's
    setting ``ref`` names: only then is the sweep imported (``stalelocks``)."""
    return [u.ref for u in push.updates
            if os.path.lexists(os.path.join(push.git_dir, u.ref + ".lock"))
            and (u.ref.startswith(SWEPT) or push.is_state(u.ref))]


def pre_receive(args: list[str], text: str) -> list[str]:
    push = Push(parse_updates(text))
    try:
        problems: list[str] = []
        for check in list(SERVER_CHECKS):
            problems.extend(check(push))
        locked = _swept_refs(push) if not problems else []
        if locked:  # git takes the ref locks after this hook: a stale one would refuse the push
            from .stalelocks import sweep_and_say

            sweep_and_say(push.git_dir, locked, under="refs/")
        return problems
    finally:
        push.close()


def post_receive(args: list[str], text: str) -> list[str]:
    """The batch arbiter's applier (``sync/applier.py``): prints one answer per inbox request of the
    push; never refuses (the refs have moved already)."""
    from .applier import post_receive as apply

    for line in apply(parse_updates(text), _location().git_dir):
        sys.stdout.write(line + "\n")
    sys.stdout.flush()
    return []


HOOKS: dict[str, Callable[[list[str], str], list[str]]] = {
    "reference-transaction": reference_transaction,
    "pre-commit": pre_commit,
    "pre-receive": pre_receive,
    "post-receive": post_receive,
}


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if not args or args[0] not in HOOKS:
        sys.stderr.write(f"usage: python -m gitwork.hookcheck {{{'|'.join(HOOKS)}}} [hook args]\n")
        return 2
    text = "" if args[0] == "pre-commit" else sys.stdin.read()
    try:
        problems = HOOKS[args[0]](args[1:], text)
    except Exception as exc:  # a gate that cannot decide must not wave the update through
        sys.stderr.write(f"gitwork: {args[0]} hook failed ({type(exc).__name__}: {exc}); refusing\n")
        return 1
    for problem in problems:
        sys.stderr.write(f"gitwork: {problem}\n")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
