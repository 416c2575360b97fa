"""The arbiter's inbox (``arbiter: batch``): what a clone pushes instead of a state commit, and the answer.

With the batch arbiter a clone no longer races the other clones for the state ref. It pushes its
command document as a *request*: a parentless commit on the empty tree, authored by the document's
acting identity, whose message is ``gitwork request <id>``, a blank line and the document as one line
of JSON, to ``refs/gitwork/inbox/<command id>`` (create-only: no CAS, nobody else pushes that name).
The arbiter's post-receive hook (:mod:`gitwork.applier`) applies every waiting request of every clone onto
the state tip as one chain (one commit per command, written by the arbiter: the clone chooses no
tree) with one CAS of the state ref, then moves each inbox ref to its *answer*: a commit whose
parent is the request and whose message is ``gitwork answer <id>``, a blank line and the answer's
JSON (landed: the commit, result and summary; refused: the error). The push prints every answer of
its own refs (``remote: gitwork-answer {...}``), so one push is one round trip; the answer stays
fetchable on the inbox ref for ``gw retry`` until the arbiter prunes it (``ANSWER_KEPT``).

This module holds the format, read and written the same way by both ends.
"""

from __future__ import annotations

import json
import os
import re

from .objects import Commit, format_commit, parse_commit
from .store import identity_signature

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

INBOX_PREFIX = "refs/gitwork/inbox/"
# A command id as the engine accepts it (commands._cmd_id): it names the ref, so nothing else does.
COMMAND_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.:-]{3,63}")
# The largest request commit the arbiter reads (a bigger document, an import batch say, is pushed
# through the compare-and-swap path, as with the clone's own queue: pushturn.CARRY_BYTES).
REQUEST_BYTES = 256 * 1024
# The most inbox refs one push may bring (a clone pushes one per command).
PER_PUSH = 64
# The line the post-receive hook prints for each answer, and the client looks for.
ANSWER_LINE = "gitwork-answer "
ARBITER_IDENTITY = "gitwork arbiter <arbiter@gitwork.invalid>"
EMPTY_TREE = {"sha1": "4b825dc642cb6eb9a060e54bf8d69288fbee4904",
              "sha256": "6ef19b41225c5369f1c104d45d8d85efa9b057b53b14b4b9b939dd74decc5321"}


def inbox_ref(command_id: str) -> str:
    return INBOX_PREFIX + command_id


def request_body(cmd: dict[str, Any], when: int, tree: str, nonce: str = "") -> bytes:
    """The request commit for ``cmd`` (``nonce`` makes a re-sent request a new object: a push that
    moves nothing runs no hook)."""
    signature = f"{identity_signature(cmd['as'])} {when} +0000"
    doc = json.dumps(cmd, ensure_ascii=False, sort_keys=True, separators=(",", ":"))
    message = f"gitwork request {cmd['id']}\n\n{doc}\n" + (f"\nNonce: {nonce}\n" if nonce else "")
    return format_commit(tree, [], signature, signature, message)


def answer_body(request: str, command_id: str, answer: dict[str, Any], when: int, tree: str) -> bytes:
    signature = f"{ARBITER_IDENTITY} {when} +0000"
    text = json.dumps(answer, ensure_ascii=False, sort_keys=True, separators=(",", ":"))
    return format_commit(tree, [request], signature, signature, f"gitwork answer {command_id}\n\n{text}\n")


def _third_line(info: Commit, head: str) -> str | None:
    lines = info.message.split("\n")
    if len(lines) < 3 or lines[0] != head or lines[1] != "":
        return None
    return lines[2]


def parse_request(info: Commit, command_id: str) -> dict[str, Any] | str:
    """The document a request commit carries, or why it is not a request for ``command_id``."""
    line = _third_line(info, f"gitwork request {command_id}")
    if line is None:
        return f"not a gitwork request for {command_id} (its message must start 'gitwork request {command_id}')"
    if info.parents:
        return "a request has no parent"
    try:
        doc = json.loads(line)
    except (ValueError, RecursionError):
        return "its command document is not JSON"
    if not isinstance(doc, dict):
        return "its command document is not a JSON object"
    return doc


def parse_answer(data: bytes, command_id: str) -> dict[str, Any] | None:
    """The answer an answer commit carries (``None``: the commit is no answer, a request still waiting)."""
    try:
        info = parse_commit(data)
        line = _third_line(info, f"gitwork answer {command_id}")
        answer = json.loads(line) if line is not None and len(info.parents) == 1 else None
    except (ValueError, RecursionError, UnicodeDecodeError):
        return None
    return answer if isinstance(answer, dict) and answer.get("id") == command_id else None


def answers_said(err: str) -> dict[str, dict[str, Any]]:
    """The answers a push's output carries (``remote: gitwork-answer {...}``), by command id."""
    found: dict[str, dict[str, Any]] = {}
    for line in re.split(r"\r\n|\r|\n", err):
        text = line.removeprefix("remote:").strip()
        if not text.startswith(ANSWER_LINE):
            continue
        try:
            answer = json.loads(text[len(ANSWER_LINE):])
        except (ValueError, RecursionError):
            continue
        if isinstance(answer, dict) and isinstance(answer.get("id"), str):
            found[answer["id"]] = answer
    return found


def nonce() -> str:
    return os.urandom(6).hex()
