"""The batch op: several command documents decided in order on one evolving tree, landed as one commit.

All or nothing: each member is validated as a command document of its own op (``engine.validate_command``,
as ``gw apply`` validates one) and run by its op on the tree the members before it left
(``Context.member``); the first refusal refuses the whole batch, naming the member's position, and
nothing is written. Every member acts as the batch does: a member naming another identity is refused
(``engine.one_identity``, exit 77) before any runs. The recorded document holds every member as its op
resolved it (full ids, minted ids, the epoch "current" stood for), so ``gw sync`` replays a batch like
any command: by running it again. See docs/format.md, "Batches".
"""

from __future__ import annotations

from .. import engine, layout
from ..engine import Context, op
from ..errors import GwError, Invalid

TYPE_CHECKING = False  # typing costs ~15 ms to import; annotations are strings anyway
if TYPE_CHECKING:
    from typing import Any


def _member(ctx: Context, position: int, doc: dict[str, Any], seen: set[str]) -> dict[str, Any]:
    """Validate and run one member; return its document as its op resolved it."""
    if doc.get("as") is None:  # "" is not absent: the identity rule refuses it, as for any document
        doc = {**doc, "as": ctx.actor}
    member = engine.validate_command(doc, internal=False)  # record ops cannot hide in a batch
    name = member["op"]
    declared = engine.OPS[name]
    if name == "batch":
        raise Invalid("a batch cannot hold a batch")
    if declared.arbiter and ctx.settings.remote:
        raise Invalid(f"{name} is decided by the arbiter remote ({ctx.settings.remote}): submit it on its own")
    if member["id"] in seen or member["id"] == ctx.cmd["id"]:
        raise Invalid(f"command id {member['id']} appears twice in the batch")
    if ctx.snapshot.blob(layout.command_path(member["id"])) is not None:
        raise Invalid(f"command id {member['id']} was already used; use a new id", command_id=member["id"])
    seen.add(member["id"])
    child = ctx.member(member)
    declared.func(child)
    return {"doc": member, "summary": child.outcome.summary, "result": child.outcome.result}


@op("batch", "apply several command documents in one commit, all or nothing", who="anyone; each member is judged by its own op's rules, in order.", roles=True, ops="docs!")
def batch(ctx: Context) -> None:
    # One identity per document (issue 23): every member acts as the batch does, judged before any runs
    # against the identity the batch runs as (its document may have been validated before it was filled in).
    engine.one_identity({**ctx.cmd, "as": ctx.actor}, engine.OPS["batch"].fields)
    done: list[dict[str, Any]] = []
    seen: set[str] = set()
    for position, doc in enumerate(ctx.cmd["ops"], 1):
        try:
            done.append(_member(ctx, position, doc, seen))
        except GwError as error:
            raise engine.member_refusal(error, position, doc.get("op")) from error
    # Recorded resolved, member by member: a replay on another tip means the same commands.
    ctx.cmd["ops"] = [entry["doc"] for entry in done]
    changed = [entry for entry in done if entry["summary"]]
    counts: dict[str, int] = {}
    for entry in changed:
        counts[entry["doc"]["op"]] = counts.get(entry["doc"]["op"], 0) + 1
    shown = ", ".join(f"{n} {name}" for name, n in sorted(counts.items())) or "no changes"
    ctx.say(f"batch of {len(done)} by {ctx.actor}: {shown}", batch_size=len(done))
    ctx.outcome.result = {
        "count": len(done),
        "changed": len(changed),
        "ops": [{"op": e["doc"]["op"], "command_id": e["doc"]["id"], **e["result"]} for e in done],
    }
