"""The execution ledger's formats (docs/launch.md, "The execution ledger"): what an agent reports it
used, the totals an execution record keeps, and what an item (or a session) has spent of its budget.

Plain functions over records: ``ops/ledger.py`` and ``ops/executions.py`` write with them, the launcher
reads a ``report.json`` with :func:`check_report`, and ``gitwork/ledger.py`` totals them for ``gw cost``.
"""

from __future__ import annotations

import decimal

from .. import money
from ..errors import Invalid

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

    from ..engine import View

MAX_TOKENS = 10**12  # one report's tokens: more is a bug in the reporter, not a bill
MAX_REPORTS = 1000  # reports one execution keeps (each is a few dozen bytes of its record)
REPORT_KEYS = ("tokens_in", "tokens_out", "cost", "model")
EXIT_REPORT = "exit"  # the id of the report the launcher records from report.json with the exit


def tokens(value: Any, field: str) -> int:
    """A token count from 0 to 10^12; ``Invalid`` otherwise (a bool, a float, text that is no integer)."""
    if isinstance(value, bool) or not isinstance(value, int):
        if isinstance(value, str) and value.strip().isdigit() and len(value.strip()) <= 16:
            value = int(value.strip())
        else:
            raise Invalid(f"{field} must be a whole number of tokens (got {str(value)[:40]!r})")
    if not 0 <= value <= MAX_TOKENS:
        raise Invalid(f"{field} must be from 0 to {MAX_TOKENS} (got {value})")
    return value


def check_report(doc: Any, where: str = "the report") -> dict[str, Any]:
    """A report (``gw report``'s numbers, or a ``report.json``) in its recorded form: ``tokens_in``,
    ``tokens_out`` (whole numbers), ``cost`` (USD text, :mod:`gitwork.money`), ``model`` (a short name);
    at least one number, no other key. ``Invalid`` naming ``where`` otherwise."""
    if not isinstance(doc, dict):
        raise Invalid(f"{where} must be a JSON object with tokens_in, tokens_out, cost, model")
    unknown = sorted(str(k) for k in doc if k not in REPORT_KEYS)
    if unknown:
        raise Invalid(f"{where}: unknown field {unknown[0][:40]!r} (known: {', '.join(REPORT_KEYS)})")
    clean: dict[str, Any] = {}
    for key in ("tokens_in", "tokens_out"):
        if doc.get(key) is not None:
            clean[key] = tokens(doc[key], f"{where}: {key}")
    if doc.get("cost") is not None:
        clean["cost"] = money.parse_text(doc["cost"], f"{where}: cost")
    if not clean:
        raise Invalid(f"{where} reports nothing: give tokens_in, tokens_out or cost")
    model = doc.get("model")
    if model is not None:
        if not isinstance(model, str) or not model.strip() or len(model) > 100 or any(c < " " for c in model):
            raise Invalid(f"{where}: model must be a short name (at most 100 characters, one line)")
        clean["model"] = model.strip()
    return clean


def usage(record: dict[str, Any]) -> dict[str, Any]:
    """An execution's totals: ``tokens_in``, ``tokens_out``, ``cost`` (USD text) and ``reports``."""
    found = record.get("usage") or {}
    return {"tokens_in": int(found.get("tokens_in") or 0), "tokens_out": int(found.get("tokens_out") or 0),
            "cost": money.text(money.stored(found.get("cost"))), "reports": int(found.get("reports") or 0)}


def has_report(record: dict[str, Any], report_id: str) -> bool:
    return any(r.get("id") == report_id for r in record.get("reports") or [])


def add_report(record: dict[str, Any], report: dict[str, Any], report_id: str, at: str, by: str | None) -> None:
    """Add one report to an execution record (its ``reports`` and its ``usage`` totals), in place.
    A report id already there is refused: a report is counted once, whoever sends it again."""
    if has_report(record, report_id):
        raise Invalid(f"execution {record['id']} has report {report_id} already", execution=record["id"])
    kept = list(record.get("reports") or [])
    if len(kept) >= MAX_REPORTS:
        raise Invalid(f"execution {record['id']} has {MAX_REPORTS} reports already: report the sum in fewer",
                      execution=record["id"])
    kept.append({"id": report_id, "at": at, "by": by, **report})
    total = usage(record)
    record["reports"] = kept
    record["usage"] = {"tokens_in": total["tokens_in"] + int(report.get("tokens_in") or 0),
                       "tokens_out": total["tokens_out"] + int(report.get("tokens_out") or 0),
                       "cost": money.text(money.stored(total["cost"]) + money.stored(report.get("cost"))),
                       "reports": total["reports"] + 1}


# --- budgets --------------------------------------------------------------------------------------


def default_budget(settings: Any, scope: str) -> decimal.Decimal | None:
    """The ``.workplane`` default budget of an item (``scope`` "item") or of a session, or None."""
    found = getattr(settings, "budget", None) or {}
    value = found.get(scope)
    return None if value is None else money.usd(value, f"budget.{scope}")


def item_budget(item: Any, settings: Any) -> decimal.Decimal | None:
    """An item's budget: its own (``gw edit --budget``), else the ``.workplane`` default, else none."""
    own = getattr(item, "budget", None)
    return money.usd(own, "budget") if own is not None else default_budget(settings, "item")


def spent(ctx: View, item_id: str, session: str | None = None) -> decimal.Decimal:
    """What the item's executions (only ``session``'s, when given) reported they cost, in all."""
    from .executions import item_executions, load_execution

    total = money.ZERO
    for execution_id in item_executions(ctx, item_id):
        record = load_execution(ctx, execution_id) or {}
        if session is None or record.get("session") == session:
            total += money.stored((record.get("usage") or {}).get("cost"))
    return total


def budget_state(ctx: View, item: Any) -> dict[str, Any] | None:
    """``{"budget", "spent", "spent_out"}`` of an item with a budget (amounts as USD text), or None."""
    budget = item_budget(item, ctx.settings)
    if budget is None:
        return None
    used = spent(ctx, item.id)
    return {"budget": money.text(budget), "spent": money.text(used), "budget_spent": used >= budget}
