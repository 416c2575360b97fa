"""The launch's state commit in a long-lived process (issue 27, point 2; docs/launch.md, "The resident
launcher"): what it costs is found once, not at every commit.

- ``hashing.new`` finds each algorithm's constructor once a process: the digests are hashlib's, and a
  later call imports nothing (a module missing from the build, ``_sha2`` before Python 3.12, was
  searched for along sys.path at every call: milliseconds of every commit of the launcher).
"""

from __future__ import annotations

import builtins
import hashlib
from typing import Any

import pytest

from gitwork import hashing


@pytest.mark.parametrize("algorithm", ["sha1", "sha256", "md5"])
def test_digests_are_hashlibs_and_a_later_call_imports_nothing(algorithm: str, monkeypatch: pytest.MonkeyPatch) -> None:
    data = b"tree 0\0"
    assert hashing.new(algorithm, data).hexdigest() == hashlib.new(algorithm, data).hexdigest()

    def no_import(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError(f"imported {args[0]} again")

    monkeypatch.setattr(builtins, "__import__", no_import)
    again = hashing.new(algorithm, data).hexdigest()
    empty = hashing.new(algorithm)
    empty.update(data)
    monkeypatch.undo()
    assert again == empty.hexdigest() == hashlib.new(algorithm, data).hexdigest()
