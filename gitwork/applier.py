"""The batch arbiter's server side: check inbox pushes (pre-receive), apply them in batches (post-receive).

:func:`inbox_refusals` is a pre-receive check (``hookcheck.SERVER_CHECKS``): an inbox push is refused
whole, nothing written, unless the arbiter takes batched commands (its git config ``gitwork.arbiter
batch``, and no ``signing: ssh``: the arbiter writes these commits itself), the push brings at most
``PER_PUSH`` inbox refs, and each is a create (or the re-send of a request still waiting, with the
same document) of ``refs/gitwork/inbox/<id>`` by a request commit of at most ``REQUEST_BYTES``:
parentless, on the empty tree, whose document passes ``engine.validate_command``, carries that id,
and whose author is the document's acting identity as gitwork writes it (one identity per document).

:func:`apply_waiting` runs in the post-receive hook of every push that brought an inbox ref. Under
the arbiter's applier lock (``<git dir>/gitwork-applier.lock``, a ``flock`` the kernel drops with a
killed process) it takes every request waiting in the inbox, of every clone, oldest first, and
decides each with the engine on the current state tip at the arbiter's clock under the arbiter's
settings, exactly as the derive rule re-applies a pushed commit (``derive.py``): a command that
applies becomes one commit on the chain, a refusal becomes its answer. Then one compare-and-swap of
the state ref moves it over the whole chain, and only after that the inbox refs move to their answers
(one ``update-ref --stdin`` transaction). A push that arrives while a batch is applied waits for the
lock; its requests ride on the next batch, so one batch grants what every clone asked meanwhile.

A kill -9 of the applier before its CAS leaves nothing (unreferenced objects); after it, the state
holds the chain and the requests still wait: the next batch decides them again, and the engine
answers a command id it already recorded with its first result, never twice.
"""

from __future__ import annotations

import fcntl
import json
import os
import re
import time
from collections.abc import Iterable

from . import clock, engine, gitcmd
from .errors import GwError
from .inbox import (
    ANSWER_LINE,
    COMMAND_ID,
    EMPTY_TREE,
    INBOX_PREFIX,
    PER_PUSH,
    REQUEST_BYTES,
    answer_body,
    parse_answer,
    parse_request,
)
from .objects import parse_commit
from .store import crash_point

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

    from .hookcheck import Push, RefUpdate
    from .store import Store

LOCK_FILE = "gitwork-applier.lock"
# The most requests one batch decides (the rest wait for the next batch, at once).
BATCH_MOST = 256
# Seconds an answered inbox ref is kept for a client that lost its push's reply (gw retry reads it).
ANSWER_KEPT = 3600
# Seconds a post-receive waits for the applier lock before leaving its requests to the next batch.
LOCK_WAIT = 60.0


def _git(git_dir: str, *args: str, input: bytes | None = None) -> gitcmd.Completed:
    return gitcmd.run(["--git-dir", git_dir, *args], check=False, input=input)


# --- pre-receive: what an inbox push may bring ---------------------------------------------------


def inbox_refusals(push: Push) -> Iterable[str]:
    updates = [u for u in push.updates if u.ref.startswith(INBOX_PREFIX)]
    if not updates:
        return
    settings = push.repository.settings  # the hook's own discovery (a bare arbiter asks git twice per one)
    if settings.arbiter != "batch":
        yield (f"{updates[0].ref}: this arbiter does not take batched commands (set git config gitwork.arbiter "
               "batch on the arbiter, or push state commits: arbiter: cas)")
        return
    if settings.signing == "ssh":
        yield (f"{updates[0].ref}: this arbiter takes only signed state commits (signing: ssh); batched commands "
               "are written by the arbiter and cannot carry your signature: use arbiter: cas")
        return
    if len(updates) > PER_PUSH:
        yield f"a push may bring at most {PER_PUSH} inbox requests (this one brings {len(updates)})"
        return
    sizes = gitcmd.read_sizes(push.git_dir, [u.new for u in updates if u.new])
    for update in updates:
        why = _request_refusal(push.git_dir, update, sizes)
        if why:
            yield f"{update.ref}: {why}"


def _read(git_dir: str, oid: str) -> bytes | None:
    got = gitcmd.read_batch(git_dir, [oid]).get(oid)
    return got[2] if got and got[1] == "commit" else None


def _request_refusal(git_dir: str, update: RefUpdate, sizes: dict[str, tuple[str, int]]) -> str | None:
    from .store import identity_signature

    command_id = update.ref[len(INBOX_PREFIX):]
    if not COMMAND_ID.fullmatch(command_id):
        return "not an inbox ref (refs/gitwork/inbox/<command id>)"
    if update.new is None:
        return "only the arbiter removes inbox refs"
    kind, size = sizes.get(update.new, ("missing", 0))
    if kind != "commit":
        return "a request is a commit"
    if size > REQUEST_BYTES:
        return f"request of {size} bytes; at most {REQUEST_BYTES} (push a larger command as a state commit)"
    body = _read(git_dir, update.new)
    if body is None:
        return "a request is a commit"
    try:
        info = parse_commit(body)
    except (ValueError, UnicodeDecodeError):
        return "not a commit git or gitwork can read"
    if info.tree not in EMPTY_TREE.values():
        return "a request carries no files (its tree is the empty tree)"
    doc = parse_request(info, command_id)
    if isinstance(doc, str):
        return doc
    try:
        clean = engine.validate_command(dict(doc))
    except GwError as error:
        return f"refused: {error.message}"
    except Exception as error:  # noqa: BLE001 - a hostile document must refuse, never crash the hook
        return f"its command document cannot be read ({type(error).__name__})"
    if clean.get("id") != command_id:
        return f"its command id {clean.get('id')!r} is not the ref's ({command_id})"
    if not isinstance(clean.get("as"), str):
        return "its command document names no acting identity ('as')"
    expected = identity_signature(clean["as"])
    if info.author.rsplit(" ", 2)[0] != expected or info.committer.rsplit(" ", 2)[0] != expected:
        return f"author and committer must be the document's acting identity as gw writes it ({expected!r})"
    if _when(info.author) is None or _when(info.committer) is None:
        return "its author or committer date is not a time git writes (seconds since 1970 and a +hhmm zone)"
    if update.old is not None:
        # A re-send (gw retry after a lost reply) of a request still waiting: the same command only.
        old = _read(git_dir, update.old)
        before = parse_request(parse_commit(old), command_id) if old is not None else "answered"
        if isinstance(before, str):
            return "already answered: fetch the answer (gw retry does) instead of asking again"
        from .sync.replay import same_command  # here: gitwork.sync loads the CAS client, for re-sends only

        if not same_command(before, clean):
            return f"command id {command_id} is already waiting with a different document"
    return None


_DATE = re.compile(r"[0-9]{1,12} [+-][0-9]{4}")


def _when(signature: str) -> int | None:
    """The seconds of a commit's ``name <email> SECONDS +ZONE`` line, or ``None`` when they are not
    as git writes them (a forged request's ``soon`` must never reach the applier's int())."""
    date = signature.rsplit(" ", 2)[1:]
    return int(date[0]) if len(date) == 2 and _DATE.fullmatch(" ".join(date)) else None


# --- post-receive: the applier -------------------------------------------------------------------


class Waiting:
    """One request in the inbox: its ref, commit and document."""

    __slots__ = ("command_id", "ref", "commit", "cmd", "when")

    def __init__(self, command_id: str, ref: str, commit: str, cmd: dict[str, Any], when: int) -> None:
        self.command_id, self.ref, self.commit, self.cmd, self.when = command_id, ref, commit, cmd, when


def _inbox(git_dir: str) -> list[tuple[str, str]]:
    done = _git(git_dir, "for-each-ref", "--format=%(objectname) %(refname)", INBOX_PREFIX)
    return [tuple(line.split(" ", 1)) for line in done.out.splitlines() if " " in line]  # type: ignore[misc]


def read_answers(git_dir: str, ids: list[str]) -> dict[str, dict[str, Any]]:
    """The answers the inbox refs of ``ids`` hold now (those still waiting are left out)."""
    refs = [INBOX_PREFIX + i for i in ids]
    got = gitcmd.read_batch(git_dir, refs)
    found = {}
    for command_id, ref in zip(ids, refs, strict=True):
        entry = got.get(ref)
        answer = parse_answer(entry[2], command_id) if entry and entry[1] == "commit" else None
        if answer is not None:
            found[command_id] = answer
    return found


def _waiting(git_dir: str) -> tuple[list[Waiting], list[tuple[str, str]]]:
    """The requests waiting, oldest first (at most ``BATCH_MOST``), and the answers old enough to prune."""
    listing = _inbox(git_dir)
    objects = gitcmd.read_batch(git_dir, [oid for oid, _ in listing])
    waiting, prune = [], []
    now = time.time()
    for oid, ref in listing:
        command_id = ref[len(INBOX_PREFIX):]
        entry = objects.get(oid)
        if entry is None or entry[1] != "commit" or not COMMAND_ID.fullmatch(command_id):
            continue
        info = parse_commit(entry[2])
        when = _when(info.committer) or 0  # (pre-receive refuses a request dated otherwise)
        if info.parents:
            if now - when > ANSWER_KEPT:
                prune.append((ref, oid))
            continue
        doc = parse_request(info, command_id)
        if isinstance(doc, dict):
            waiting.append(Waiting(command_id, ref, oid, doc, when))
    waiting.sort(key=lambda w: (w.when, w.command_id))
    return waiting[:BATCH_MOST], prune


def decide(store: Store, waiting: list[Waiting], settings: Any) -> tuple[str | None, str | None, dict[str, dict[str, Any]]]:
    """Lay every waiting command on the state tip, one commit each: ``(old tip, new top, answers)``."""
    old = store.tip()
    top = store.snapshot(old)
    top.check_format()
    answers: dict[str, dict[str, Any]] = {}
    for entry in waiting:
        at = clock.now()
        try:
            cmd = engine.validate_command(dict(entry.cmd))
            outcome = engine.apply(top, cmd, at, settings)
            commit = engine.land(store, top, cmd, outcome, at)
        except GwError as error:
            answers[entry.command_id] = {"id": entry.command_id, "status": "refused", "error": error.to_json()}
            continue
        except Exception as error:  # noqa: BLE001 - one hostile document must not stop the batch
            answers[entry.command_id] = {"id": entry.command_id, "status": "refused", "error": {
                "error": "invalid", "code": 5, "message": f"cannot be applied ({type(error).__name__})"}}
            continue
        if commit:
            top = store.snapshot(commit)
        answers[entry.command_id] = {"id": entry.command_id, "status": "landed", "commit": top.commit,
                                     "command": cmd, "result": outcome.result, "summary": outcome.summary}
    return old, top.commit, answers


def _answer_all(git_dir: str, store: Store, waiting: list[Waiting], answers: dict[str, dict[str, Any]],
                prune: list[tuple[str, str]]) -> None:
    tree = store.writer.write_tree({})
    when = int(clock.now().timestamp())
    lines, refs = [], []
    for entry in waiting:
        answer = answers.get(entry.command_id)
        if answer is None:
            continue
        oid = store.writer.write("commit", answer_body(entry.commit, entry.command_id, answer, when, tree))
        lines.append(f"update {entry.ref} {oid} {entry.commit}\n")
        refs.append(entry.ref)
    lines += [f"delete {ref} {oid}\n" for ref, oid in prune]
    if not lines:
        return
    done = _git(git_dir, "update-ref", "--stdin", input="".join(lines).encode())
    if done.returncode != 0 and ".lock" in done.err and \
            _swept(git_dir, refs + [ref for ref, _ in prune] + (["packed-refs"] if prune else [])):
        done = _git(git_dir, "update-ref", "--stdin", input="".join(lines).encode())
    if done.returncode == 0:
        return
    # One transaction failed (a client re-sent a waiting request meanwhile): each ref on its own, so
    # that one moved ref does not keep the others from their answers (the moved one waits for the next batch).
    for line in lines:
        _git(git_dir, "update-ref", "--stdin", input=line.encode())


def _swept(git_dir: str, names: list[str]) -> bool:
    """Whether a lock that a killed git left on one of ``names`` (inbox refs, ``packed-refs``) was removed
    (``stalelocks.py``'s rule: older than ``STALE_AFTER``, no git of the repository that could hold it
    running), said on stderr. An applier killed inside its transaction (over file:// it runs in the
    pusher's process group) left the locks of the refs it answered and pruned and ``packed-refs.lock`` (a
    deletion takes it); from then on every batch's transaction failed: the request it was answering was
    decided again in every batch and never answered, and no answer was pruned again, silently."""
    from .stalelocks import sweep_and_say

    return sweep_and_say(git_dir, names, under="")


def _locked(path: str) -> int | None:
    """The applier lock, waited for without polling (a herd of waiting hooks must not spin on a core):
    a blocking ``flock`` cut short by an alarm after ``LOCK_WAIT``. ``None``: not had in time."""
    import signal

    handle = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o666)

    def late(_signum: int, _frame: object) -> None:
        raise TimeoutError

    previous = signal.signal(signal.SIGALRM, late)
    signal.setitimer(signal.ITIMER_REAL, LOCK_WAIT)
    try:
        fcntl.flock(handle, fcntl.LOCK_EX)
        return handle
    except TimeoutError:
        os.close(handle)
        return None
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def apply_waiting(git_dir: str, mine: list[str]) -> dict[str, dict[str, Any]]:
    """Apply the inbox until the requests ``mine`` (this push's) are answered; their answers."""
    from .store import Repository, Store

    found = read_answers(git_dir, mine)
    if len(found) == len(mine):
        return found  # a batch that ran while we waited answered them all
    handle = _locked(os.path.join(git_dir, LOCK_FILE))
    if handle is None:
        return found
    try:
        for _batch in range(8):
            found = read_answers(git_dir, mine)
            if len(found) == len(mine):
                break
            waiting, prune = _waiting(git_dir)
            if not waiting:
                break
            repo = Repository.discover(git_dir)
            store = Store(repo, repo.settings.ref)
            try:
                old, new, answers = decide(store, waiting, repo.settings)
                if new is not None and new != old and not store.set_if_equals(old, new):
                    continue  # a state commit pushed by compare-and-swap moved the ref: decide again
                crash_point("applier-after-state")
                _answer_all(git_dir, store, waiting, answers, prune)
            finally:
                store.close()
        return read_answers(git_dir, mine)
    finally:
        os.close(handle)


def post_receive(updates: list[RefUpdate], git_dir: str) -> list[str]:
    """The lines the post-receive hook prints: one answer per inbox request of this push."""
    mine = [u.ref[len(INBOX_PREFIX):] for u in updates
            if u.ref.startswith(INBOX_PREFIX) and u.new is not None and COMMAND_ID.fullmatch(u.ref[len(INBOX_PREFIX):])]
    if not mine:
        return []
    answers = apply_waiting(git_dir, mine)
    return [ANSWER_LINE + json.dumps(answers[i], ensure_ascii=False, sort_keys=True, separators=(",", ":"))
            for i in mine if i in answers]

