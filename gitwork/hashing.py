"""SHA-1 and SHA-256 without loading OpenSSL.

``hashlib`` imports ``_hashlib``, which loads libcrypto: a few milliseconds of every command's
start-up (issue 27: ``gw claim`` is mostly start-up). The interpreter ships its own implementations
(``_sha1``, and ``_sha256`` before Python 3.12, ``_sha2`` since); the digests are the same. Where a
build lacks them, ``hashlib`` answers as before.
"""

from __future__ import annotations

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any


def new(algorithm: str, data: bytes = b"") -> Any:
    """A hash object of ``algorithm`` (``sha1`` or ``sha256``; any other name goes to ``hashlib``)."""
    make = _MADE.get(algorithm)
    if make is None:
        make = _MADE[algorithm] = _constructor(algorithm)
    return make(data)


# Each algorithm's constructor, found once a process: a module that is not there (``_sha2`` before
# Python 3.12) is searched for along the whole of sys.path at every import attempt, a millisecond and
# more of each launch's state commit in a long-lived process (the resident launcher, issue 27).
_MADE: dict[str, Any] = {}


def _constructor(algorithm: str) -> Any:
    try:
        if algorithm == "sha1":
            from _sha1 import sha1  # type: ignore[import-not-found]

            return sha1
        if algorithm == "sha256":
            try:
                from _sha2 import sha256  # type: ignore[import-not-found]  # Python 3.12+
            except ImportError:
                from _sha256 import sha256  # type: ignore[import-not-found,no-redef]
            return sha256
    except ImportError:
        pass
    import hashlib

    return lambda data=b"": hashlib.new(algorithm, data)


def sha1_hex(data: bytes) -> str:
    return str(new("sha1", data).hexdigest())


def sha256_hex(data: bytes) -> str:
    return str(new("sha256", data).hexdigest())
