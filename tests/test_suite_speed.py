"""What keeps the suite near 3 minutes on 2 cores (issue 26) without weakening a test: the CLI builds its
click command once per process, the property tests' budget is chosen by ``GW_HYPOTHESIS``, and the tests
wait with one ``poll`` helper. Each check here fails if its mechanism is removed."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
import typer
from hypothesis import settings

from conftest import examples, gw_here, load_hypothesis_profile, poll
from gitwork.cli import app as cli_app


def test_the_click_command_is_built_once_per_process(repo: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Building it reads every verb's signature and type hints (~0.13 s): a process that runs several
    typer-path commands through ``main`` pays that once, not once per command."""
    builds: list[object] = []
    real = typer.main.get_command

    def counted(app: typer.Typer) -> object:
        builds.append(app)
        return real(app)

    monkeypatch.setattr(typer.main, "get_command", counted)
    cache_clear = getattr(getattr(cli_app, "_command", None), "cache_clear", None)
    if cache_clear is not None:
        cache_clear()  # the first call below builds it, whatever the tests before it ran
    for argv in (["init"], ["new", "--help"], ["remote", "--help"], ["new", "--bogus"]):
        gw_here(repo, *argv)
        cli_app.run_app([*argv, "-C", str(repo)])
    assert len(builds) == 1, f"the click command was built {len(builds)} times for 8 commands"


def test_the_hypothesis_budget_follows_gw_hypothesis(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("GW_HYPOTHESIS", raising=False)
    assert examples(quick=5, thorough=40) == 5
    monkeypatch.setenv("GW_HYPOTHESIS", "thorough")
    assert examples(quick=5, thorough=40) == 40
    monkeypatch.setenv("GW_HYPOTHESIS", "thorugh")  # a typo is refused, not silently the quick run
    with pytest.raises(pytest.UsageError, match="thorugh"):
        examples(quick=5, thorough=40)


def test_a_thorough_run_loads_the_thorough_profile(monkeypatch: pytest.MonkeyPatch) -> None:
    """In a thorough run, a property without its own count takes 500 examples; by default hypothesis' 100.
    Neither has a per-example deadline."""
    monkeypatch.setenv("GW_HYPOTHESIS", "thorough")
    try:
        load_hypothesis_profile()
        assert (settings.default.max_examples, settings.default.deadline) == (500, None)
    finally:
        monkeypatch.delenv("GW_HYPOTHESIS")
        load_hypothesis_profile()
    assert (settings.default.max_examples, settings.default.deadline) == (100, None)


def test_poll_returns_the_first_answer_and_fails_after_its_timeout() -> None:
    calls: list[float] = []

    def third_time() -> str:
        calls.append(time.monotonic())
        return "ready" if len(calls) == 3 else ""  # false until the third call

    assert poll(third_time, timeout=5, interval=0.01) == "ready"
    assert len(calls) == 3 and calls[-1] - calls[0] < 1  # a short interval: no waiting for a slow tick
    started = time.monotonic()
    with pytest.raises(pytest.fail.Exception, match="the server did not happen within 0.2 s"):
        poll(lambda: False, timeout=0.2, interval=0.05, what="the server")
    assert 0.2 <= time.monotonic() - started < 2


def test_the_verbs_annotations_are_objects_not_strings_typer_must_evaluate() -> None:
    """typer reads every verb's parameters on each build of the click command; string annotations (``from
    __future__ import annotations`` in gitwork/cli/app.py) made it ``eval`` each one again, about 70 % of
    the build (0.117 s against 0.034 s of CPU measured on 2026-12-02): every typer-path ``gw`` pays the build."""
    import inspect

    from gitwork.cli.app import peer_app

    commands = [*cli_app.app.registered_commands, *peer_app().registered_commands]
    for group in cli_app.app.registered_groups:
        assert group.typer_instance is not None
        commands += group.typer_instance.registered_commands
    assert len(commands) > 50
    for command in commands:
        assert command.callback is not None
        annotations = inspect.get_annotations(inspect.unwrap(command.callback))
        strings = {name: value for name, value in annotations.items() if isinstance(value, str)}
        assert not strings, f"{command.callback.__name__}: string annotations {strings}"
