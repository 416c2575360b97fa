"""The typer-free fast path must build exactly the call typer builds for the same arguments.

Every verb and option is declared once, in ``gitwork/cli/app.py``; the fast path's table is generated
from those declarations (``python -m gitwork.cli.fastgen``). These tests pin that the table is
current, and that for EVERY option spelling of EVERY fast verb (flags, values, ints, floats,
repeatables, aliases, ``--opt=value``, defaults, environment variables) the fast parser hands the
same plain function the same keyword arguments typer does.
"""

from __future__ import annotations

import importlib
import json
import subprocess
import sys
from typing import Any

import pytest

from gitwork.cli import actions, fast, fastgen
from gitwork.cli.app import app
from gitwork.cli.fast_table import GROUPS, TYPER_ONLY, VERBS

SAMPLE = {"int": "7", "float": "1.5", "value": "v-1", "multi": "m-1"}


def sample(kind: str) -> str:
    return SAMPLE["int"] if kind.startswith("int") else SAMPLE[kind]


_ROOT: list[Any] = []


def _root() -> Any:
    """The click group typer builds from the app, built once: ``run_app`` rebuilds it on every call
    (about 30 ms each), and these tests parse a few hundred command lines."""
    if not _ROOT:
        import typer.main

        _ROOT.append(typer.main.get_command(app))
    return _ROOT[0]


def _click_command(verb: str) -> Any:
    """The click command of a verb, or of a group's verb given as two words (``"cache rebuild"``)."""
    found = _root()
    for word in verb.split():
        found = found.commands[word]
    return found


# Every fast verb's words and table row: the one-word verbs, then the verbs of sub-command groups.
ROWS = [([verb], row) for verb, row in VERBS.items()] + [
    ([*group.split(), verb], row) for group, verbs in GROUPS.items() for verb, row in verbs.items()]


def _typer_call(argv: list[str], monkeypatch: pytest.MonkeyPatch) -> tuple[Any, dict[str, object]]:
    seen: list[tuple[Any, dict[str, object]]] = []

    def record(func, **kwargs):  # type: ignore[no-untyped-def]
        seen.append((func, kwargs))
        return 0

    monkeypatch.setattr(actions, "invoke", record)
    # What run_app does (``app(...)`` is ``get_command(app)(...)``), with the command built once.
    assert _root()(args=argv, prog_name="gw", standalone_mode=False) in (0, None), argv
    (call,) = seen
    return call


def _same_call(argv: list[str], monkeypatch: pytest.MonkeyPatch) -> dict[str, object]:
    parsed = fast.parse(argv)
    assert parsed is not None, f"the fast path should take {argv}"
    target, kwargs = parsed
    kwargs = dict(kwargs)
    if target.startswith("plain:"):  # no work plane: typer calls the plain function itself
        topic, _, name = target[len("plain:"):].partition(":")
        module = importlib.import_module(f"gitwork.cli.commands.{topic}")
        seen: list[dict[str, object]] = []
        monkeypatch.setattr(module, name, lambda **given: seen.append(given) or 0)
        assert _root()(args=argv, prog_name="gw", standalone_mode=False) in (0, None), argv
        assert seen == [kwargs], argv
        return kwargs
    func, expected = _typer_call(argv, monkeypatch)
    topic, _, name = target.partition(":")
    assert getattr(importlib.import_module(f"gitwork.cli.commands.{topic}"), name) is func, argv
    got = {"as_json": kwargs.pop("json"), "path": kwargs.pop("path"), "agent": kwargs.pop("agent"), **kwargs}
    assert got == expected, argv
    return got


def test_fast_table_is_generated_from_the_typer_declarations() -> None:
    assert fastgen.render() == fastgen.PATH.read_text(encoding="utf-8"), (
        "gitwork/cli/fast_table.py is stale: run python -m gitwork.cli.fastgen")
    assert fastgen.render_help() == fastgen.HELP_PATH.read_text(encoding="utf-8"), (
        "gitwork/cli/fast_help.py is stale: run python -m gitwork.cli.fastgen")


def test_help_of_every_command_is_what_typer_prints(capsys: pytest.CaptureFixture[str]) -> None:
    """``gw [WORDS] --help`` (and ``-h``) from the stored pages, word for word typer's, for every command."""
    from gitwork.cli.app import run_app
    from gitwork.cli.fast_help import HELP

    shown = {" ".join(words) for words, command in _every_command() if not getattr(command, "hidden", False)}
    assert set(HELP) >= shown | {""}  # a hidden command's help is left to typer
    for words, text in HELP.items():
        argv = [*words.split(), "--help"]
        assert fast.help_text(argv) == text == fast.help_text([*words.split(), "-h"])
        capsys.readouterr()
        assert run_app(argv) == 0
        assert capsys.readouterr().out == text, words
    assert fast.help_text(["claim", "w-1", "--help"]) is None  # anything else: typer


def _every_command(group: Any = None, words: tuple[str, ...] = ()) -> Any:
    """``(words, click command)`` of every command the app has, read from click (not from the table)."""
    group = _root() if group is None else group
    for name, command in group.commands.items():
        if hasattr(command, "commands"):
            if getattr(command.callback, "gw_typer_only", None) is not None:
                yield (*words, name), command
            yield from _every_command(command, (*words, name))
        else:
            yield (*words, name), command


def test_every_verb_is_on_the_fast_path_or_says_why_not() -> None:
    """No chosen list: every command of the app has its row, except the ones declared typer-only with a reason."""
    covered = {(verb,) for verb in VERBS} | {(*group.split(), verb) for group, verbs in GROUPS.items() for verb in verbs}
    only = {tuple(words.split()) for words in TYPER_ONLY}
    every = {words for words, _command in _every_command()}
    assert covered | only == every, sorted(every - covered - only)
    assert not covered & only
    assert all(reason.strip() for reason in TYPER_ONLY.values())
    assert len(covered) > 60


def _kind(param: Any) -> str:
    if param.is_flag:
        return "flag"
    if param.multiple:
        return "multi"
    if type(param.type).__name__ == "IntRange":
        return "int" + (f">={param.type.min}" if param.type.min is not None else "") + (
            f"<={param.type.max}" if param.type.max is not None else "")
    return {"int": "int", "float": "float"}.get(param.type.name, "value")


def test_fast_table_covers_every_option_of_every_fast_verb() -> None:
    """Independent of the generator: every spelling click knows is in the table, with the right kind."""
    for words, (_target, positionals, options, defaults, envvars, needed) in ROWS:
        verb = " ".join(words)
        command = _click_command(verb)
        spellings: dict[str, tuple[str, str]] = {}
        for param in command.params:
            if param.param_type_name == "argument":
                kind = "int" if param.type.name == "int" else "value"
                assert (param.name, bool(param.required), param.nargs == -1, kind) in positionals, (verb, param.name)
                continue
            for spelling in param.opts:
                spellings[spelling] = (param.name, _kind(param))
            for spelling in param.secondary_opts:
                spellings[spelling] = (param.name, "off")
            assert defaults[param.name] == (None if param.multiple else param.default), (verb, param.name)
            assert envvars.get(param.name) == (param.envvar or None), (verb, param.name)
            assert (param.name in needed) == bool(param.required), (verb, param.name)
        assert spellings == options, verb
        assert len(positionals) == sum(1 for p in command.params if p.param_type_name == "argument")


def _word(name: str, kind: str) -> str:
    return "3" if kind == "int" else f"{name}-x"


def _exhaustive_cases() -> list[list[str]]:
    cases: list[list[str]] = []
    for words, (_target, positionals, options, _defaults, _envvars, needed) in ROWS:
        spelled = {keyword: (spelling, kind) for spelling, (keyword, kind) in reversed(options.items())}
        musts = [word for keyword in needed for word in (spelled[keyword][0], sample(spelled[keyword][1]))]
        required = [_word(name, kind) for name, needed, _many, kind in positionals if needed] + musts
        every = [_word(name, kind) for name, _needed, _many, kind in positionals] + musts
        cases.append([*words, *required])
        if every != required:
            cases.append([*words, *every])
        if positionals and positionals[-1][2]:  # several words for the last: a list, options between them
            cases.append([*words, *every, "more-1", "more-2"])
            cases.append([*words, *every, "--json", "more-1", "--", "-more-2"])
        for spelling, (_keyword, kind) in options.items():
            if kind in ("flag", "off"):
                cases.append([*words, *required, spelling])
                cases.append([*words, spelling, *required])
                continue
            value = sample(kind)
            cases.append([*words, *required, spelling, value])
            if spelling.startswith("--"):
                cases.append([*words, spelling + "=" + value, *required])
            if kind == "multi":
                cases.append([*words, spelling, "m-1", *required, spelling, "m-2"])
            else:  # given twice: the last one wins in both parsers
                cases.append([*words, spelling, value, *required, spelling, value + "0"])
        if len(required) > len(musts):
            cases.append([*words, *musts, "--", *required[:len(required) - len(musts)]])
    return cases


CASES = _exhaustive_cases()


@pytest.mark.parametrize("argv", CASES, ids=[" ".join(c) for c in CASES])
def test_fast_path_matches_typer_for_every_option(argv: list[str], monkeypatch: pytest.MonkeyPatch) -> None:
    _same_call(argv, monkeypatch)


SAMPLES = [
    ["claim", "--next", "--as", "alice", "--json"],
    ["claim", "--ttl=15m", "w-3fa9", "--offline"],
    ["msg", "w-3fa9", "-", "--reply-to", "4", "--epoch", "2", "--id", "m-0001", "--json"],
    ["ack", "w-3fa9", "7", "--responded", "--by", "9", "--epoch", "3", "--json"],
    ["thread", "w-3fa9", "--since", "10", "--follow", "--timeout", "1.5", "--poll", "0.1", "--json"],
    ["list", "--status", "open", "-s", "blocked", "-l", "ui", "--label", "api", "--holder", "bob"],
    ["log", "-n", "0", "--json", "-C", "/tmp"],
    ["release", "w-1", "w-2", "--fence", "3", "w-3", "--offline"],
]


@pytest.mark.parametrize("argv", SAMPLES, ids=[" ".join(c) for c in SAMPLES])
def test_fast_path_matches_typer_on_whole_command_lines(argv: list[str], monkeypatch: pytest.MonkeyPatch) -> None:
    _same_call(argv, monkeypatch)


@pytest.mark.parametrize("argv", [
    ["claim", "--help"], ["claim", "--bogus"], ["renew"], ["renew", "w-1", "--fence", "x"],
    ["claim", "--ttl"], ["claim", "--ttl", "--json"], ["release"], ["release", "--json"], ["list", "x"], ["ready", "-n", "y"],
    ["msg", "w-1"], ["ack", "w-1", "3", "4"], ["thread", "w-1", "--since", "x"], ["inbox", "extra"],
    ["msg", "w-1", "x", "--kind"], ["inbox", "--help"], ["show"], ["show", "a", "--web=1"], ["history", "-h"],
    ["log", "-n", "x"], ["log", "-n=5"], ["status", "x"], ["claim", "--json=1"], ["ready", "-n5"],
])
def test_fast_path_leaves_anything_unusual_to_typer(argv: list[str]) -> None:
    assert fast.parse(argv) is None


@pytest.mark.parametrize("argv", [
    ["cache"], ["cache", "--help"], ["cache", "bogus"], ["cache", "rebuild", "--help"], ["cache", "rebuild", "x"],
    ["cache", "status", "--bogus"], ["cache", "drop", "--as"],
])
def test_the_fast_path_leaves_anything_unusual_in_a_group_to_typer(argv: list[str]) -> None:
    assert fast.parse(argv) is None


def test_environment_defaults_are_read_like_typer(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GW_FENCE", "12")
    monkeypatch.setenv("GW_AGENT", "carol")
    for argv in (["release", "w-3fa9"], ["msg", "w-3fa9", "hi"], ["show", "w-3fa9"], ["status"]):
        got = _same_call(argv, monkeypatch)
        assert got["agent"] == "carol"
        assert got.get("fence", 12) == 12


def test_the_fast_path_imports_no_typer_click_rich_inspect_or_typing(tmp_path: Any) -> None:
    """The point of the fast path: a real process running the fast verbs loads none of them."""
    env = {"GW_AGENT": "alice", "PATH": "/usr/bin:/bin", "HOME": str(tmp_path)}
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    subprocess.run([sys.executable, "-m", "gitwork", "init", "-C", str(tmp_path)], check=True, env=env,
                   capture_output=True)
    item = subprocess.run([sys.executable, "-m", "gitwork", "new", "one", "-C", str(tmp_path)], check=True, env=env,
                          capture_output=True, text=True).stdout.strip()
    argvs = [["ready"], ["list"], ["log"], ["status"], ["show", item], ["history", item], ["claim", item],
             ["msg", item, "hi"], ["ack", item, "1"], ["thread", item], ["inbox"], ["renew", item]]
    # Each verb's declared sample (``verb(..., sample=)``), while the item is held: a new verb needs no line here.
    argvs += [[*path.split(), *(a.format(item=item) for a in args)] for path, args in fastgen.samples().items()]
    argvs += [["release", item], ["cache", "status"], ["cache", "rebuild"], ["cache", "drop"]]
    # Every verb's module (the table's targets) also imports none of them (the verbs run here are the hot ones).
    modules = sorted({row[0].removeprefix("plain:").partition(":")[0] for _words, row in ROWS})
    argvs.append(["__import__", *modules])
    script = (
        "import json, sys\nfrom gitwork.cli.main import main\n"
        "import importlib\n"
        "codes = [main([*argv, '-C', sys.argv[1], '--json']) if argv[0] != '__import__' else\n"
        "         [importlib.import_module('gitwork.cli.commands.' + m) for m in argv[1:]] and 0\n"
        "         for argv in json.loads(sys.argv[2])]\n"
        "heavy = sorted(m for m in sys.modules if m.split('.')[0] in ('typer', 'click', 'rich', 'inspect', 'typing',\n"
        "               'mcp', 'mcp_types', 'pydantic', 'anyio') or m.startswith('gitwork.mcp'))\n"
        "print(codes, heavy)\n"
    )
    result = subprocess.run([sys.executable, "-c", script, str(tmp_path), json.dumps(argvs)], capture_output=True,
                            text=True, env=env)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip().splitlines()[-1] == f"{[0] * len(argvs)} []"
