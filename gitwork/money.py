"""Amounts of money (US dollars) in documents, records and settings: one parser, one canonical form.

A cost is kept as text, a decimal with at most six places (micro-dollars), never as a binary float: the
same bytes on every clone and on the arbiter's replay, and sums that do not drift. Bounded, so a
report of ``1e400``, ``NaN``, ``inf`` or a negative amount is refused (exit 5) before anything is written.
"""

from __future__ import annotations

import decimal

from .errors import Corrupt, Invalid

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

MAX_USD = decimal.Decimal(1_000_000)  # one report, or one budget: more is a typo, not a bill
PLACES = decimal.Decimal("0.000001")
ZERO = decimal.Decimal(0)


def usd(value: Any, field: str = "cost") -> decimal.Decimal:
    """``value`` (a number, or text such as ``"0.25"``) as a finite amount from 0 to 1,000,000 USD, to
    the micro-dollar; ``Invalid`` otherwise."""
    if isinstance(value, bool) or not isinstance(value, (int, float, str, decimal.Decimal)):
        raise Invalid(f"{field} must be an amount in USD, e.g. 0.25")
    text = value.strip() if isinstance(value, str) else repr(value) if isinstance(value, float) else str(value)
    if not text or len(text) > 40:
        raise Invalid(f"{field} must be an amount in USD, e.g. 0.25 (got {text[:40]!r})")
    try:
        amount = decimal.Decimal(text)
    except decimal.InvalidOperation:
        raise Invalid(f"{field} must be an amount in USD, e.g. 0.25 (got {text!r})") from None
    if not amount.is_finite():
        raise Invalid(f"{field} must be a finite amount (got {text!r})")
    if amount < 0:
        raise Invalid(f"{field} must not be negative (got {text!r})")
    if amount > MAX_USD:
        raise Invalid(f"{field} is out of range (at most {MAX_USD} USD; got {text[:40]!r})")
    return amount.quantize(PLACES, rounding=decimal.ROUND_HALF_EVEN)


def text(amount: decimal.Decimal) -> str:
    """The canonical text of an amount: ``"0.25"``, ``"3"``, ``"0.000001"`` (no exponent, no trailing zeros)."""
    shown = format(amount.quantize(PLACES), "f").rstrip("0").rstrip(".")
    return shown or "0"


def parse_text(value: Any, field: str = "cost") -> str:
    """``usd`` in its canonical text: what a command document and a record keep."""
    return text(usd(value, field))


def stored(value: Any) -> decimal.Decimal:
    """An amount read back from a record (written by :func:`text`): absent counts as 0; a bad one is
    ``Corrupt`` (8), so a damaged record never silently lowers a total."""
    if value is None:
        return ZERO
    try:
        return usd(value, "a recorded cost")
    except Invalid as exc:
        raise Corrupt(f"{exc.message}: the record was not written by gitwork") from exc
