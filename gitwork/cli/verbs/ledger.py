"""Declarations of the execution ledger (commands/ledger.py): ``gw report`` and ``gw cost``."""

# No ``from __future__ import annotations``: typer reads the verbs' annotations (see verbs/launch.py).

from typing import Annotated, Optional

import typer

from ..commands import ledger
from ..declare import As, Fence, Json, Repo, verb


@verb(ledger.report)
def report(
    execution: Annotated[Optional[str], typer.Option("--execution", help="The execution (default: GW_EXECUTION, "
                                                                         "set in a launched agent).")] = None,
    tokens_in: Annotated[Optional[str], typer.Option("--tokens-in", help="Input tokens used (0 to 10^12).")] = None,
    tokens_out: Annotated[Optional[str], typer.Option("--tokens-out", help="Output tokens used (0 to 10^12).")] = None,
    cost: Annotated[Optional[str], typer.Option("--cost", help="What it cost, USD (0 to 1,000,000), e.g. 0.42.")] = None,
    model: Annotated[Optional[str], typer.Option("--model", help="The model that was used.")] = None,
    command_id: Annotated[Optional[str], typer.Option("--id", help="Command id: a report sent again with the same id "
                                                                   "is counted once.")] = None,
    fence: Fence = None, json: Json = False, agent: As = None, path: Repo = None,
) -> None:
    """Report what an execution used (tokens, cost, model): one fenced record on the execution; several add up.
    A stale fence is refused (exit 7), bad numbers too (exit 5)."""


@verb(ledger.cost)
def cost(
    item: Annotated[Optional[str], typer.Option("--item", help="Only this item's executions.")] = None,
    agent_name: Annotated[Optional[str], typer.Option("--agent", help="Only the executions this agent held.")] = None,
    since: Annotated[Optional[str], typer.Option("--since", help="Only executions started this long ago or later, "
                                                                 "e.g. 7d.")] = None,
    by: Annotated[str, typer.Option("--by", help="One row per item, agent or day.")] = "item",
    json: Json = False, agent: As = None, path: Repo = None,
) -> None:
    """Tokens, cost and wall time of executions, as their agents reported them, per item, agent or day."""
