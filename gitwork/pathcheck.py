"""The code remote's pre-receive check of path leases (``hookcheck.check_server_paths`` runs it).

A commit is judged when it first reaches the code remote (reachable from the push, from no ref the
remote already has): publishing a session commit pushed earlier is not judged again. For every path the
commit changes (``git log --name-only``; a merge by what it changes beyond git's own merge of its
parents, ``--diff-merges=remerge``, its parents on their own), each
live path lease on the remote's state ref (``paths.yaml`` and the leases it names) whose glob covers the
path must be the pusher's: a lease named by the commit's ``Work-Item:`` trailer with its current fence in
``Fence:`` (how ``gw session commit`` marks its commits), or another live lease of the same holder.
Anything else is refused, naming the path, the glob, the holder and the item. With ``paths: strict``
(the remote's git config ``gitwork.paths``, or the ``.workplane`` on its HEAD branch) a changed path
that no live lease of the pusher covers is refused too.
"""

from __future__ import annotations

from . import gitcmd

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Iterable
    from typing import Any

    from .model import Lease

    Push = Any  # hookcheck.Push (not imported: hookcheck imports this module)

LIMIT = 20  # refusal lines per push: enough to act on, never a flood


def _lease_of(push: Push, item: str) -> Lease | None:
    """The item's lease on the remote's state ref (``None``: none, a malformed id, or unreadable: the state
    hook judges that)."""
    from . import ids

    return push.lease(item) if ids.is_full(item) else None


def _live_path_leases(push: Push) -> list[tuple[str, Lease]]:
    """The live path leases on the remote's state ref as another party sees them (expiry plus margin)."""
    from . import clock, codec
    from .errors import GwError
    from .paths import PATHS_FILE
    from .store import Repository

    data = push.state_file(PATHS_FILE)
    if not data:
        return []
    try:
        doc = codec.load_yaml(data, what=PATHS_FILE)
    except GwError:
        return []  # the state hook refuses a state that does not parse; nothing to judge by here
    margin = Repository.discover(push.git_dir).settings.clock_margin
    now = clock.now()
    live = []
    for item in sorted(doc):
        lease = _lease_of(push, str(item))
        if lease is not None and lease.paths and not lease.takeable(now, margin):
            live.append((str(item), lease))
    return live


def strict(push: Push) -> bool:
    """``paths: strict`` in the remote's settings or in the ``.workplane`` of its HEAD branch (before the push)."""
    from . import codec
    from .errors import GwError
    from .store import Repository

    if Repository.discover(push.git_dir).settings.paths == "strict":
        return True
    done = gitcmd.run(["cat-file", "blob", "HEAD:.workplane"], check=False)
    if done.returncode != 0:
        return False
    try:
        return codec.load_yaml(done.out, what=".workplane", allow_empty=True).get("paths") == "strict"
    except (GwError, AttributeError):
        return False


def _new_commits(push: Push) -> Iterable[tuple[str, list[str], list[str], list[str]]]:
    """(commit, Work-Item values, Fence values, changed paths) of every commit new to the remote."""
    tips = [u.new for u in push.updates if u.new is not None and push.is_code(u.ref)]
    if not tips:
        return
    # A merge is judged on what it changes beyond git's own merge of its parents (``remerge``: nothing for
    # a clean merge; a resolved conflict or an "evil merge" lists its paths), its parents on their own.
    done = gitcmd.run(["-c", "core.quotePath=false", "log", "-z", "--no-renames", "--name-only",
                       "--diff-merges=remerge",
                       "--format=%x1e%H%x1f%(trailers:key=Work-Item,valueonly,separator=%x1d)%x1f"
                       "%(trailers:key=Fence,valueonly,separator=%x1d)%x1f", *tips, "--not", "--all"], check=False)
    if done.returncode != 0:
        raise RuntimeError(f"git log failed: {done.err.strip()[:200]}")
    for record in done.out.split("\x1e")[1:]:
        head, _, names = record.rpartition("\x1f")
        commit, items, fences = (head.split("\x1f") + ["", ""])[:3]
        split = [v.strip() for v in items.split("\x1d") if v.strip()], [v.strip() for v in fences.split("\x1d") if v.strip()]
        yield commit.strip(), split[0], split[1], [n.strip("\n") for n in names.split("\0") if n.strip("\n")]


def _pusher(push: Push, items: list[str], fences: list[str]) -> set[str]:
    """The holders the commit speaks for: each ``Work-Item:`` whose lease is active, unexpired and carries
    the ``Fence:`` given beside it (one fence for several items applies to each)."""
    from . import clock

    now = clock.now()
    holders: set[str] = set()
    if not fences:
        return holders
    pairs = zip(items, fences, strict=True) if len(items) == len(fences) else ((i, fences[0]) for i in items)
    for item, fence in pairs:
        if not fence.isdigit():
            continue
        lease = _lease_of(push, item)
        if lease is not None and lease.is_active() and lease.fence == int(fence) and now < lease.expires():
            holders.add(lease.holder)
    return holders


def refusals(push: Push) -> Iterable[str]:
    from .paths import matches

    if not any(u.new is not None and push.is_code(u.ref) for u in push.updates):
        return  # only the state ref moves: no code to judge
    live = _live_path_leases(push)
    is_strict: bool | None = None
    count = 0
    for commit, items, fences, changed in _new_commits(push):
        if not changed:
            continue
        if not live and is_strict is None:
            is_strict = strict(push)
            if not is_strict:
                return  # no live path lease and not strict: nothing to judge
        pusher = _pusher(push, items, fences)
        for path in changed:
            covering = [(item, lease, glob) for item, lease in live for glob in lease.paths or () if matches(glob, path)]
            others = [(item, lease, glob) for item, lease, glob in covering if lease.holder not in pusher]
            why: Any = None
            if others:
                item, lease, glob = others[0]
                # A commit that already speaks for a lease of its own is told what it can do about it.
                hint = ("leave it out of this commit or wait for that lease to end" if pusher
                        else "commit under your own lease (Work-Item: and Fence: trailers) or wait")
                why = (f"{commit[:12]}: touches {path}, leased to {lease.holder} ({item}, glob {glob}, until "
                       f"{lease.expires_at}); {hint}")
            elif not covering:
                if is_strict is None:
                    is_strict = strict(push)
                if is_strict:
                    why = (f"{commit[:12]}: touches {path}, which no live path lease of yours covers (paths: strict); "
                           "declare it on your item (gw edit ID --path GLOB) and claim it")
            if why:
                count += 1
                yield why
                if count >= LIMIT:
                    yield "(more refused paths not listed)"
                    return
