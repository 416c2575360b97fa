"""Names another tracker allows and gitwork refuses: the one mapping rule (docs/format.md, "Imported items").

- An identity (assignee, comment author): accents folded to ASCII (``José`` → ``Jose``), every run of
  characters outside ``A-Za-z0-9._@/+-`` becomes ``-``, a name that does not start with a letter, digit
  or ``_`` gets a ``_`` in front, and it is cut to 64 characters.
- A label: the same folding, runs outside ``A-Za-z0-9_.:/+-`` become ``-``, leading characters that are
  not a letter or digit are dropped, cut to 64.
- Whatever is left empty becomes ``x-`` and 8 hex digits of the original's SHA-256.

The original is kept in the item's provenance (``original``), so nothing is lost and an export to
the source's format writes the original back.
"""

from __future__ import annotations

import hashlib
import re
import unicodedata

from ..errors import Invalid
from ..ids import IDENTITY_MAX, check_identity

_NOT_IDENTITY = re.compile(r"[^A-Za-z0-9._@/+-]+")
_NOT_LABEL = re.compile(r"[^A-Za-z0-9_.:/+-]+")
_LABEL = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.:/+-]{0,63}\Z")


def _fold(text: str) -> str:
    return unicodedata.normalize("NFKD", text).encode("ascii", "ignore").decode("ascii")


def _fallback(text: str) -> str:
    return "x-" + hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:8]


def identity(text: str) -> str:
    """``text`` as a gitwork identity (itself when it already is one)."""
    try:
        return check_identity(text)
    except Invalid:
        pass
    cleaned = _NOT_IDENTITY.sub("-", _fold(text.strip())).strip("-")
    if cleaned and not re.match(r"[A-Za-z0-9_]", cleaned):
        cleaned = "_" + cleaned
    return cleaned[:IDENTITY_MAX] or _fallback(text)


def label(text: str) -> str:
    """``text`` as a gitwork label (itself when it already is one)."""
    if _LABEL.match(text):
        return text
    cleaned = _NOT_LABEL.sub("-", _fold(text.strip()))
    cleaned = re.sub(r"^[^A-Za-z0-9]+", "", cleaned).rstrip("-")[:64]
    return cleaned or _fallback(text)
