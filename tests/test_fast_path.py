"""The typer-free fast path must build exactly the call typer builds for the same arguments."""

from __future__ import annotations

import pytest

from gitwork.cli import actions, fast
from gitwork.cli.app import run_app

CASES = [
    ["claim", "w-3fa9"],
    ["claim", "--next", "--as", "alice", "--json"],
    ["claim", "w-3fa9", "--ttl", "90s", "-C", "/tmp"],
    ["claim", "--ttl=15m", "w-3fa9", "--offline"],
    ["renew", "w-3fa9", "--fence", "41", "--ttl", "1h"],
    ["renew", "w-3fa9", "--fence=7", "--as=bob", "--offline"],
    ["release", "w-3fa9", "--fence", "3", "--json"],
    ["release", "--", "w-3fa9"],
    ["msg", "w-3fa9", "hello there", "--kind", "question", "--to", "bob"],
    ["msg", "w-3fa9", "-", "--reply-to", "4", "--epoch", "2", "--id", "m-0001", "--json"],
    ["msg", "w-3fa9", "hi", "-k", "note", "--fence", "9", "--as", "alice"],
    ["ack", "w-3fa9", "7", "--read"],
    ["ack", "w-3fa9", "7", "--responded", "--by", "9", "--epoch", "3", "--json"],
    ["thread", "w-3fa9"],
    ["thread", "w-3fa9", "--since", "10", "--follow", "--timeout", "1.5", "--poll", "0.1", "--json"],
    ["thread", "w-3fa9", "-f"],
    ["inbox"],
    ["inbox", "--json", "--as", "bob", "-C", "/tmp"],
    ["ready"],
    ["ready", "-n", "5", "--json"],
    ["list", "--status", "open", "-s", "blocked", "-l", "ui", "--label", "api", "--holder", "bob"],
    ["list", "-a", "--json"],
]


def _typer_call(argv: list[str], monkeypatch: pytest.MonkeyPatch) -> tuple[str, dict[str, object]]:
    seen: list[tuple[str, dict[str, object]]] = []

    def record(func, **kwargs):  # type: ignore[no-untyped-def]
        seen.append((func.__name__, kwargs))
        return 0

    monkeypatch.setattr(actions, "invoke", record)
    assert run_app(argv) == 0
    (call,) = seen
    return call


@pytest.mark.parametrize("argv", CASES, ids=[" ".join(c) for c in CASES])
def test_fast_path_matches_typer(argv: list[str], monkeypatch: pytest.MonkeyPatch) -> None:
    parsed = fast.parse(argv)
    assert parsed is not None, "the fast path should take this command line"
    target, kwargs = parsed
    kwargs = dict(kwargs)
    expected_name, expected = _typer_call(argv, monkeypatch)
    assert target.partition(":")[2] == expected_name
    assert {"as_json": kwargs.pop("as_json"), "path": kwargs.pop("path"), "agent": kwargs.pop("agent"), **kwargs} == {
        k: v for k, v in expected.items()
    }


@pytest.mark.parametrize("argv", [
    ["claim", "--help"], ["claim", "--bogus"], ["renew"], ["renew", "w-1", "--fence", "x"],
    ["claim", "--ttl"], ["claim", "--ttl", "--json"], ["release", "a", "b"], ["list", "x"], ["ready", "-n", "y"],
    ["msg", "w-1"], ["ack", "w-1", "3", "4"], ["thread", "w-1", "--since", "x"], ["inbox", "extra"],
    ["msg", "w-1", "x", "--kind"], ["inbox", "--help"],
])
def test_fast_path_leaves_anything_unusual_to_typer(argv: list[str]) -> None:
    assert fast.parse(argv) is None


def test_environment_defaults_are_read_like_typer(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GW_FENCE", "12")
    monkeypatch.setenv("GW_AGENT", "carol")
    argv = ["release", "w-3fa9"]
    action, kwargs = fast.parse(argv)  # type: ignore[misc]
    _name, expected = _typer_call(argv, monkeypatch)
    assert (kwargs["fence"], kwargs["agent"]) == (expected["fence"], expected["agent"]) == (12, "carol")
