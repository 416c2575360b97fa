"""The execution ledger's op, ``exec-report``, and the budget rule ``exec-reserve`` applies
(docs/launch.md, "The execution ledger" and "Budgets").

``exec-report`` is what an agent says it used: tokens in and out, the cost in USD, the model. It is a
public op (``gw report``, ``gw apply``, REST, MCP), **fenced** like any work on the item: only the
holder of the lease the execution runs under, under that lease's fence, may report on it, so a
stale agent (its lease taken over, revoked, expired) is refused (7) and writes nothing. Several
reports add up; each is kept on the execution record under its command id, so a retried report
(the same command id, ``gw report --id``) is answered as the first one and never counted twice. It is
no arbiter op (like ``msg``): it lands locally and travels with ``gw sync``, and the arbiter's state
hook re-applies it like every op (``derive.py``), so a forged report, or a report under a stale
fence, pushed with plain git is refused there.

The budget: an item's executions may cost, in all, what its ``budget`` says (``gw edit --budget``, or
the ``.workplane`` default ``budget: {item: USD}``), and one multi-step session's executions what
``budget: {session: USD}`` says. Once their reported cost reaches it, ``exec-reserve`` (every ``gw
run``, the coordinator's launches) is refused with 6, "budget spent": decided by the arbiter (it
re-derives ``exec-reserve``, an arbiter op) from the reports it has.
"""

from __future__ import annotations

from .. import codec, money
from ..engine import Context, op
from ..errors import Illegal, Invalid, NotFound, NotHolder, Stale
from ..records.executions import check_execution_id, execution_path, load_execution
from ..records.ledger import add_report, check_report, default_budget, item_budget, spent, usage

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any


@op("exec-report", "record what an agent used in an execution: tokens in and out, cost in USD, model",
    who="the holder of the lease the execution runs under, under its fence (a launched agent: GW_FENCE).",
    mcp={"verb": "ledger:report", "summary": "report what you used in your execution: tokens in and out, cost in "
                                            "USD, model (your execution and fence are known to gw)",
         "fields": ("execution", "tokens_in", "tokens_out", "cost", "model", "fence")},
    execution="short", item="item", tokens_in="int", tokens_out="int", cost="usd", model="short")
def exec_report(ctx: Context) -> None:
    """``item`` is the execution's, recorded in the document (sync follows a fenced command's lease by
    its item); given, it must be the execution's."""
    if not ctx.cmd.get("execution"):  # optional in the schema: gw report and gw mcp default it to GW_EXECUTION
        raise Invalid("a report names its execution (a launched agent has it in GW_EXECUTION)")
    execution_id = check_execution_id(ctx.cmd["execution"])
    report = check_report({k: ctx.cmd[k] for k in ("tokens_in", "tokens_out", "cost", "model") if k in ctx.cmd},
                          "a report")
    record = load_execution(ctx, execution_id)
    if record is None:
        raise NotFound(f"no execution {execution_id}", execution=execution_id)
    item_id = record["item"]
    if ctx.cmd.get("item") not in (None, item_id):
        raise Invalid(f"execution {execution_id} runs {item_id}, not {ctx.cmd['item']}", execution=execution_id)
    ctx.cmd["item"] = item_id
    lease = ctx.require_holder(item_id)
    if lease is None:
        raise Stale(f"you hold no lease on {item_id}: only the holder of execution {execution_id}'s lease reports "
                    "on it", item=item_id, execution=execution_id)
    if lease.holder != ctx.actor:  # a fence is no pass for another identity: the holder reports
        raise NotHolder(f"{item_id} is held by {lease.holder}; only its holder reports on execution {execution_id} "
                        f"(you are {ctx.actor})", item=item_id, holder=lease.holder, who=ctx.actor)
    if record.get("fence") is None:
        raise Illegal(f"execution {execution_id} never launched ({record['state']}): nothing ran to report on",
                      execution=execution_id, state=record["state"])
    if record.get("fence") != lease.fence:
        raise Stale(f"execution {execution_id} ran under fence {record.get('fence')} of {item_id}, not the current "
                    f"{lease.fence}: its lease is gone", item=item_id, execution=execution_id)
    add_report(record, report, ctx.cmd["id"], ctx.when, ctx.actor)
    record["updated_at"] = ctx.when
    ctx.outcome.changes[execution_path(execution_id)] = codec.dump_yaml(record)
    ctx.event(item_id, "report", execution=execution_id, **report)
    shown = ", ".join(f"{k} {v}" for k, v in report.items())
    ctx.say(f"exec-report {execution_id} on {item_id} by {ctx.actor}: {shown}", item_id, execution=execution_id,
            fence=lease.fence)
    ctx.outcome.result = {"execution": execution_id, "item": item_id, "report": ctx.cmd["id"], **report,
                          "usage": usage(record)}


def refuse_over_budget(ctx: Context, item: Any, session: str | None) -> None:
    """``exec-reserve``'s budget rule: refused (6) once the item's (or the session's) executions reported
    what its budget allows."""
    budget = item_budget(item, ctx.settings)
    if budget is not None:
        used = spent(ctx, item.id)
        if used >= budget:
            raise Illegal(f"budget spent: {item.id}'s executions cost {money.text(used)} USD of its "
                          f"{money.text(budget)} USD budget; its owner or an admin may raise it (gw edit "
                          f"{item.id} --budget USD)", item=item.id, budget=money.text(budget), spent=money.text(used))
    if session:
        cap = default_budget(ctx.settings, "session")
        used = spent(ctx, item.id, session) if cap is not None else money.ZERO
        if cap is not None and used >= cap:
            raise Illegal(f"budget spent: session {session}'s executions cost {money.text(used)} USD of the "
                          f"{money.text(cap)} USD a session may (setting budget.session)", item=item.id,
                          session=session, budget=money.text(cap), spent=money.text(used))


def exit_report(ctx: Context, record: dict[str, Any]) -> None:
    """``exec-state``'s ``report`` (what the agent's ``report.json`` said, read by the launcher when it
    records the end) or ``report_error`` (why that file was refused): kept with the end, in the same
    commit, so a report read again by a retry of the end is never counted twice."""
    from ..records.ledger import EXIT_REPORT, has_report

    if ctx.cmd.get("report") is not None and not has_report(record, EXIT_REPORT):
        add_report(record, check_report(ctx.cmd["report"], "report.json"), EXIT_REPORT, ctx.when, record.get("holder"))
    if ctx.cmd.get("report_error"):
        record["report_error"] = ctx.cmd["report_error"]
