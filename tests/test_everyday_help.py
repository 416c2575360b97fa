"""Issue 25, point 4: help that finds things.

``gw --help`` groups the verbs by topic and lists the global options (also accepted before the verb);
every verb's help has an example; no option lacks help text; a short flag means one thing everywhere;
``gw help VERB`` prints the verb's help. Help is printed by the fast path (generated), without typer.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any, Iterator

import typer.main

from conftest import gw_here, run_gw
from gitwork.cli import helptext
from gitwork.cli.app import app, peer_app

ALICE = {"GW_AGENT": "alice", "GW_NO_AUTO_GC": "1"}


def commands(group: Any, words: tuple[str, ...] = ()) -> Iterator[tuple[tuple[str, ...], Any]]:
    for name, command in group.commands.items():
        yield (*words, name), command
        if hasattr(command, "commands"):
            yield from commands(command, (*words, name))


def every_command() -> list[tuple[tuple[str, ...], Any]]:
    return [*commands(typer.main.get_command(app)), *commands(typer.main.get_command(peer_app()))]


def leaves() -> list[tuple[tuple[str, ...], Any]]:
    """The verbs: commands that run something (a group with a callback of its own, ``serve``, included)."""
    return [(words, command) for words, command in every_command()
            if not hasattr(command, "commands") or getattr(command, "invoke_without_command", False)]


def test_every_option_has_help_text() -> None:
    missing = [f"gw {' '.join(words)} {param.opts[0]}" for words, command in every_command()
               for param in command.params if param.param_type_name == "option" and not (param.help or "").strip()]
    assert missing == []


def test_every_verb_has_an_example_that_names_it() -> None:
    missing = []
    for words, command in leaves():
        if command.hidden:
            continue
        epilog = command.epilog or ""
        if "Example" not in epilog or f"gw {' '.join(words)}" not in epilog:
            missing.append(" ".join(words))
    assert missing == []


def test_one_meaning_per_short_flag() -> None:
    meanings: dict[str, set[str]] = {}
    for _words, command in every_command():
        for param in command.params:
            if param.param_type_name != "option":
                continue
            for spelling in (*param.opts, *param.secondary_opts):
                if len(spelling) == 2 and spelling not in ("-h",):
                    meanings.setdefault(spelling, set()).add(param.name)
    assert {flag: names for flag, names in meanings.items() if len(names) > 1} == {}
    assert meanings["-f"] == {"follow"} and meanings["-o"] == {"option"} and meanings["-n"] == {"limit"}


def test_root_help_is_grouped_by_topic_with_the_global_options() -> None:
    done = run_gw(".", "--help")
    assert done.returncode == 0, done.stderr
    text = done.stdout
    for topic in ("Items:", "Leases:", "Conversations:", "Sessions:", "Running agents:",
                  "Remote (several machines):", "Serve and MCP:", "Import and export:"):
        assert f"\n{topic}\n" in text, topic
    assert "\nCommands:\n" not in text, "every verb has a topic"
    for option in ("-C DIR", "--json", "--jq EXPR", "--no-pager", "--as NAME"):
        assert option in text, option
    top = [name for name, command in typer.main.get_command(app).commands.items() if not command.hidden]
    placed = [name for names in helptext.TOPICS.values() for name in names]
    assert sorted(placed) == sorted(set(placed)), "one topic per verb"
    assert sorted(top) == sorted(placed)
    assert text.index("\nItems:\n") < text.index("\n  claim ") < text.index("\nConversations:\n")
    # The same page from typer itself (what `gw` alone prints).
    typer_done = subprocess.run([sys.executable, "-c", "import sys\nfrom gitwork.cli.app import run_app\n"
                                 "sys.exit(run_app(['--help']))"], capture_output=True, text=True, timeout=60)
    assert typer_done.stdout.split("\n")[1:] == text.split("\n")[1:]


def test_gw_help_verb(repo: Path) -> None:
    assert gw_here(repo, "help", "claim").stdout == gw_here(repo, "claim", "--help").stdout
    claim = gw_here(repo, "help", "claim").stdout
    assert "Example" in claim and "gw claim --next" in claim
    assert gw_here(repo, "help", "session", "create").stdout == gw_here(repo, "session", "create", "-h").stdout
    assert gw_here(repo, "help").stdout == gw_here(repo, "--help").stdout
    unknown = gw_here(repo, "help", "frobnicate")
    assert unknown.returncode == 2 and unknown.stdout == "" and "frobnicate" in unknown.stderr


def test_help_is_on_the_fast_path() -> None:
    code = ("import sys\nfrom gitwork.cli.main import main\nmain(['help', 'claim'])\nmain(['list', '--help'])\n"
            "main(['--help'])\nassert 'typer' not in sys.modules and 'click' not in sys.modules, 'typer imported'\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0 and "Usage: gw claim" in done.stdout, done.stderr


def test_global_options_before_the_verb(repo: Path) -> None:
    assert gw_here(repo, "init", env=ALICE).returncode == 0
    item = gw_here(repo, "new", "x", env=ALICE).stdout.strip()
    done = gw_here(str(repo.parent), "-C", repo.name, "--as", "bob", "--json", "claim", item, env=ALICE)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["holder"] == "bob"
    shown = gw_here(repo, "--as=carol", "--jq", ".lease.holder", "show", item, env=ALICE)
    assert shown.returncode == 0 and shown.stdout == "bob\n", shown
