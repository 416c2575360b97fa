"""A clone's side of the batch arbiter (``arbiter: batch``): push the request, read the answer, adopt.

:func:`submit` writes the command's request commit (:mod:`gitwork.inbox`) and pushes it to
``refs/gitwork/inbox/<id>``: a create, so it races nobody. The arbiter's post-receive hook
(:mod:`gitwork.applier`) applies it in the next batch and the push prints its answer. Then:

- landed: fetch the state ref, check that the tip records the command (an answer is believed only
  when the objects say so), adopt it onto the local ref as after any grant, and return the result;
- refused: the arbiter's verdict, raised as the engine's own error (the exit code of the refusal);
- no answer (the push was cut short, the applier killed): outcome unknown, kept for ``gw retry``.

``gw retry`` (or any re-submit of the same id) finds the inbox ref taken: it fetches the answer
that ref holds, or, if the request still waits (its applier was killed), sends it again (the arbiter
allows re-sending a waiting request with the same document) so that a batch decides it. A command
the arbiter already recorded is answered with its first result: nothing lands twice.
"""

from __future__ import annotations

import json

from .. import engine, gitcmd
from ..errors import GwError, Invalid, RemoteError, RemoteRefused, verdict_from_json
from ..inbox import EMPTY_TREE, REQUEST_BYTES, answers_said, inbox_ref, nonce, parse_answer, request_body
from ..store import crash_point

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

    from ..engine import Applied
    from .replay import Replay

# What a push of an inbox ref says when that id is taken: an earlier try of the same command (its
# lost reply), a sibling that carried it, or another clone's document; the answer then decides.
_TAKEN = ("already exists", "fetch first", "non-fast-forward", "stale info", "failed to update ref", "but expected",
          "already answered", "already waiting")


def fits(cmd: dict[str, Any]) -> bool:
    """Whether ``cmd`` goes through the inbox (a document too large for a request uses the CAS)."""
    return len(json.dumps(cmd, ensure_ascii=False)) < REQUEST_BYTES - 4096


def submit(arbiter: Replay, cmd: dict[str, Any], key: str) -> Applied:
    """Ask the arbiter for ``cmd`` through its inbox; the processes of one clone take turns
    (:mod:`pushturn`): one holds the turn and pushes its own request with every request its siblings
    left in the clone's queue, in one push (one pre-receive, one post-receive, one fetch for all).
    ``key``: what the outcome depends on besides the document (``cas._carry_key``)."""
    import os

    from ..pushturn import TURN_FILE, Carry, PushTurn

    gitwork_dir = arbiter.wp.repo.gitwork_dir()
    turn = PushTurn(os.path.join(gitwork_dir, TURN_FILE))
    carry = Carry(gitwork_dir, "batch " + key)  # never carried by a compare-and-swap holder, nor the reverse
    try:
        if turn.try_take() is False and carry.leave(cmd, None):
            try:
                said = carry.wait(turn, cmd["id"])
            finally:
                carry.withdraw(cmd["id"])
            if said is not None and isinstance(said.get("inbox"), dict):
                return _answered(arbiter, cmd, said["inbox"], fetched=True)
            # No answer from a holder: the turn is ours now (or waiting is over): ask ourselves.
        return _hold(arbiter, cmd, carry, turn)
    finally:
        turn.give()


def _hold(arbiter: Replay, cmd: dict[str, Any], carry: Any, turn: Any) -> Applied:
    from ..inbox import PER_PUSH

    entries = carry.pending(PER_PUSH - 1) if turn.handle is not None else []
    answers: dict[str, dict[str, Any]] = {}
    # Siblings arriving during the push wait for its end (their requests ride on the next one).
    beat = _Heartbeat(turn.path) if turn.handle is not None else None
    try:
        answers = _ask(arbiter, [cmd] + [entry.cmd for entry in entries])
        if any(a.get("status") == "landed" for a in answers.values()):
            arbiter.fetch()  # once for every landed command of this push
    finally:
        if beat is not None:
            beat.stop()
        for entry in entries:
            answer = answers.get(str(entry.cmd.get("id")))
            carry.answer(entry, {"inbox": answer} if answer is not None else {"own": True})
    answer = answers.get(cmd["id"])
    if answer is None:
        raise RemoteError(f"{arbiter.remote} gave no answer for command {cmd['id']}", remote=arbiter.remote)
    return _answered(arbiter, cmd, answer, fetched=True)


class _Heartbeat:
    """Touch the turn file every second while the holder's push is under way: its waiting siblings
    go alone only when the holder stops moving (``pushturn.TURN_WAIT``: SIGSTOP), not when a push
    under load takes long."""

    def __init__(self, path: str) -> None:
        import threading

        self.path = path
        self.done = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        import os

        while True:
            try:
                os.utime(self.path)
            except OSError:
                pass
            if self.done.wait(1.0):
                return

    def stop(self) -> None:
        self.done.set()


def _write_request(arbiter: Replay, cmd: dict[str, Any], again: bool) -> str:
    store = arbiter.store
    tree = store.writer.write_tree({})
    if tree not in EMPTY_TREE.values():
        raise Invalid("the empty tree has an unexpected id (unknown object format)")
    when = int(arbiter.wp.now().timestamp())
    return store.writer.write("commit", request_body(cmd, when, tree, nonce() if again else ""))


def _push(arbiter: Replay, requests: dict[str, str], force: bool) -> tuple[dict[str, str], str]:
    """Push each request (command id -> commit) to its inbox ref: the porcelain flag per id, git's stderr."""
    specs = [f"{'+' if force else ''}{commit}:{inbox_ref(command_id)}" for command_id, commit in requests.items()]
    done = arbiter._git("push", "--porcelain", arbiter.remote, *specs)
    flags: dict[str, str] = {}
    for line in done.out.splitlines():
        fields = line.split("\t")
        if len(fields) < 2 or ":" not in fields[1]:
            continue
        command_id = fields[1].rsplit(":", 1)[1].removeprefix(inbox_ref(""))
        if command_id not in requests:
            continue
        flags[command_id] = fields[0]
        if fields[0] == "!" and not any(word in (fields[2] if len(fields) > 2 else "") for word in _TAKEN):
            raise _refused(arbiter, fields[2] if len(fields) > 2 else "rejected", done.err)
    if not flags:
        arbiter._unless_denied("push to", done.err)
        from .transport import git_reason

        raise RemoteError(f"cannot push to {arbiter.remote}: {git_reason(done.err)}", remote=arbiter.remote)
    return flags, done.err


def _refused(arbiter: Replay, summary: str, err: str) -> RemoteRefused:
    from .transport import _clean, remote_said

    said = remote_said(err)
    reason = _clean(summary) or "rejected"
    text = "; ".join(said) if said else reason
    return RemoteRefused(f"{arbiter.remote} refused the push to its inbox ({inbox_ref('')}): {text}"
                         + (f" ({reason})" if said else ""), remote=arbiter.remote, reason=reason, said=said)


def _ask(arbiter: Replay, cmds: list[dict[str, Any]], force: bool = False) -> dict[str, dict[str, Any]]:
    """Push the requests of ``cmds`` at once; the answers the arbiter gave (by command id)."""
    requests = {cmd["id"]: _write_request(arbiter, cmd, force) for cmd in cmds}
    crash_point("before-push")
    flags, err = _push(arbiter, requests, force)
    crash_point("after-push")
    said = answers_said(err)
    answers = {i: said[i] for i in requests if flags.get(i) not in ("!", "=") and i in said}
    # An id already taken: an earlier try of this very command (a lost reply), or another document.
    # "=": the very request is there already (a retry within the second of its first try writes the
    # same commit): git runs no hook for it, so nothing answered it in this push either.
    again = []
    for cmd in cmds:
        if flags.get(cmd["id"]) not in ("!", "="):
            continue
        answer = fetch_answer(arbiter, cmd["id"])
        if answer is not None:
            answers[cmd["id"]] = answer
        elif not force:
            again.append(cmd)  # still waiting (its applier was killed): send it again
    if again:
        answers.update(_ask(arbiter, again, force=True))
    return answers


def fetch_answer(arbiter: Replay, command_id: str) -> dict[str, Any] | None:
    """The answer the arbiter's inbox ref for ``command_id`` holds (``None``: still waiting, or none)."""
    local = f"refs/gitwork/answers/{command_id}"
    done = arbiter._git("fetch", "--quiet", "--no-tags", "--no-write-fetch-head", arbiter.remote,
                        f"+{inbox_ref(command_id)}:{local}")
    if done.returncode != 0:
        return None
    try:
        got = gitcmd.read_batch(arbiter.git_dir, [local]).get(local)
    finally:
        gitcmd.run(["--git-dir", arbiter.git_dir, "update-ref", "-d", local], check=False)
    return parse_answer(got[2], command_id) if got and got[1] == "commit" else None


def _answered(arbiter: Replay, cmd: dict[str, Any], answer: dict[str, Any], *, fetched: bool) -> Applied:
    """``cmd``'s outcome from the arbiter's ``answer`` (``fetched``: the tracking ref is already as
    new as the answer, by our own fetch or the holder's that carried it)."""
    from .replay import unique

    if answer.get("status") == "refused":
        refusal = verdict_from_json(answer.get("error"))
        if refusal is None:
            error = answer.get("error")
            message = error.get("message") if isinstance(error, dict) else None
            refusal = Invalid(f"{arbiter.remote} refused command {cmd['id']}: {message or 'no reason given'}")
        raise refusal
    command, commit, result, summary = (answer.get("command"), answer.get("commit"), answer.get("result"),
                                        answer.get("summary"))
    if not (isinstance(command, dict) and command.get("id") == cmd["id"] and isinstance(commit, str)
            and isinstance(result, dict) and isinstance(summary, str)):
        raise RemoteError(f"{arbiter.remote} answered command {cmd['id']} in a form gw cannot read",
                          remote=arbiter.remote)
    tip = arbiter.known_remote_tip() if fetched else arbiter.fetch()
    if tip is None or not record_of(arbiter.store, tip, cmd["id"]):
        tip = arbiter.fetch()  # the holder's fetch may predate it (a re-sent request): ask once more
    if tip is None or not record_of(arbiter.store, tip, cmd["id"]):
        raise RemoteError(f"{arbiter.remote} said command {cmd['id']} landed, but its state does not record it",
                          remote=arbiter.remote)
    refused = unique(arbiter.adopt(arbiter.store.tip(), tip, built_on_local=False))
    return arbiter.answer(engine.Applied(command, commit, result, summary, 1), refused)


def record_of(store: Any, commit: str, command_id: str) -> bool:
    """Whether the state at ``commit`` records ``command_id`` (an answer is believed only then)."""
    from .. import layout

    try:
        return store.snapshot(commit).blob(layout.command_path(command_id)) is not None
    except (GwError, ValueError):
        return False
