"""The execution ledger: ``report`` (what an agent used) and ``cost`` (the totals), docs/launch.md.

``report`` builds one ``exec-report`` command document (``ops/ledger.py``) and submits it; ``cost`` reads
``gitwork.ledger``.
"""

from __future__ import annotations

import os

from .. import output
from ..actions import submit

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

    from ...workplane import Workplane


def report(wp: Workplane, as_json: bool, execution: str | None = None, tokens_in: Any = None,
           tokens_out: Any = None, cost: Any = None, model: str | None = None, fence: int | None = None,
           command_id: str | None = None) -> None:
    """``gw report``: inside a launched agent ``GW_EXECUTION`` names the execution (and ``GW_FENCE`` the
    fence), so no id is needed. The numbers go to the document as given: the op's kinds check them."""
    execution = execution or os.environ.get("GW_EXECUTION")  # none at all: the op says what is missing (5)
    submit(wp, as_json, "exec-report", execution=execution, tokens_in=tokens_in, tokens_out=tokens_out, cost=cost,
           model=model, fence=fence, id=command_id)


def cost(wp: Workplane, as_json: bool, item: str | None = None, agent_name: str | None = None,
         since: str | None = None, by: str = "item") -> None:
    from ...ledger import cost as cost_

    found = cost_(wp, item=item, agent=agent_name, since=since, by=by)
    if as_json:
        output.emit_json({"ok": True, **found})
        return
    rows = [*found["rows"], found["total"]]
    output.table((by, "executions", "reports", "tokens in", "tokens out", "cost USD", "wall"),
                 [(r["key"], r["executions"], r["reports"], r["tokens_in"], r["tokens_out"], r["cost"],
                   f"{r['wall_seconds']}s") for r in rows], title="cost")
