"""A regular expression compiled on its first use.

Compiling a pattern costs 0.05-0.6 ms (a character class with wide Unicode ranges the most), paid by
every process that imports the module, whether or not it ever matches anything with it. The patterns
of modules on ``gw claim``'s path that a claim seldom or never uses are :class:`Lazy` (issue 27:
start-up); ``re`` itself is imported anyway (``json`` imports it).
"""

from __future__ import annotations

import re


class Lazy:
    """``re.compile(pattern, flags)``, done by the first ``match``/``search``/``sub``/``fullmatch``."""

    __slots__ = ("_pattern", "_flags", "_compiled")

    def __init__(self, pattern: str, flags: int = 0) -> None:
        self._pattern = pattern
        self._flags = flags
        self._compiled: re.Pattern[str] | None = None

    @property
    def compiled(self) -> re.Pattern[str]:
        if self._compiled is None:
            self._compiled = re.compile(self._pattern, self._flags)
        return self._compiled

    def match(self, text: str) -> re.Match[str] | None:
        return self.compiled.match(text)

    def fullmatch(self, text: str) -> re.Match[str] | None:
        return self.compiled.fullmatch(text)

    def search(self, text: str) -> re.Match[str] | None:
        return self.compiled.search(text)

    def sub(self, repl: object, text: str) -> str:
        return self.compiled.sub(repl, text)  # type: ignore[call-overload]
