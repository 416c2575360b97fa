"""What the launcher reads for the execution ledger: the agent's ``report.json`` (docs/launch.md, "The
execution ledger").

A launched agent may write its usage to ``$GW_REPORT`` (``report.json`` in its execution's folder)
instead of, or besides, calling ``gw report``. The wrapper reads it when the agent exits and leaves
``report`` (the file as JSON it could parse) or ``report.error`` (why not) beside it, before it writes
the exit code; whoever then records the end (``gw run``'s retry, ``gw stop``, the coordinator) sends
the report with it, in the same ``exec-state`` document. A wrapper killed before it read the file
leaves it as the agent wrote it: the end (``lost``, ``stopped``) carries it all the same. A malformed
file is recorded as ``report_error`` on the execution, never a crash and never a refused end.
"""

from __future__ import annotations

import json
import os

from ..errors import Invalid
from ..records.ledger import check_report

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

REPORT_FILE = "report.json"  # the agent's ($GW_REPORT)
MAX_REPORT_BYTES = 64 * 1024


def exit_report(folder: str) -> dict[str, Any]:
    """``{"report": ...}``, ``{"report_error": ...}`` or ``{}`` for the ``exec-state`` of an execution's end."""
    try:
        with open(os.path.join(folder, "report.error"), encoding="utf-8", errors="replace") as read:
            return {"report_error": _line(read.read())}
    except FileNotFoundError:
        pass
    for name in ("report", REPORT_FILE):  # the wrapper's copy; else the agent's own (a wrapper killed first)
        try:
            with open(os.path.join(folder, name), "rb") as read:
                data = read.read(MAX_REPORT_BYTES + 1)
        except FileNotFoundError:
            continue
        except OSError as exc:
            return {"report_error": _line(f"report.json cannot be read: {exc.strerror or exc}")}
        if len(data) > MAX_REPORT_BYTES:
            return {"report_error": f"report.json is larger than {MAX_REPORT_BYTES} bytes"}
        try:
            doc = json.loads(data.decode("utf-8"))
        except (ValueError, RecursionError) as exc:
            return {"report_error": _line(f"report.json is not JSON: {exc}")}
        try:
            return {"report": check_report(doc, "report.json")}
        except Invalid as exc:
            return {"report_error": _line(exc.message)}
    return {}


def _line(text: str) -> str:
    return " ".join(text.split())[:200] or "report.json was refused"
