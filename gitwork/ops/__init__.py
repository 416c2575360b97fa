"""Op implementations; importing this package registers every op with the engine."""

from __future__ import annotations

from . import items, leases  # noqa: F401
from . import messages  # noqa: F401
from . import sessions  # noqa: F401
