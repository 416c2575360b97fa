"""The typer application and what every declaration uses: the options all verbs share, and :func:`verb`,
:func:`plain`, :func:`typer_only`, which register a declaration (``verbs/<topic>.py``) on the app.

Each declaration is a typed signature and a docstring; :func:`verb` registers it so that typer calls
the verb's plain function in ``commands/<topic>.py`` with the parsed options under the same names.
The fast path's table (``fast_table.py``) is generated from these declarations
(``python -m gitwork.cli.fastgen``), so an option is never spelled a second time.

Options every command takes: ``--json`` (machine-readable stdout, errors included), ``--as NAME``
(acting identity; default ``GW_AGENT`` or ``user@host/s<session>``) and ``-C PATH`` (run as if
started in PATH, like ``git -C``).
"""

# No ``from __future__ import annotations``: typer reads the verbs' annotations on every build of the click
# command, and string ones made it ``eval`` each (tests/test_suite_speed.py).

import functools
import sys
from typing import Annotated, Any, Callable, Optional

import typer
import typer.core

from .. import __version__
from . import actions, helptext


class TopicGroup(typer.core.TyperGroup):
    """The root command: ``gw --help`` lists the verbs by topic (``helptext.TOPICS``) and the global options."""

    def format_options(self, ctx: Any, formatter: Any) -> None:
        super().format_options(ctx, formatter)
        with formatter.section("Global options (before or after the verb)"):
            formatter.write_dl(list(helptext.GLOBAL_OPTIONS))

    def format_commands(self, ctx: Any, formatter: Any) -> None:
        width = formatter.width - 6 - max(len(name) for name in self.list_commands(ctx))
        for topic, names in helptext.TOPICS.items():
            rows = [(name, self.commands[name].get_short_help_str(width)) for name in names
                    if name in self.commands and not self.commands[name].hidden]
            if rows:
                with formatter.section(topic):
                    formatter.write_dl(rows)
        rest = [(name, command.get_short_help_str(width)) for name, command in self.commands.items()
                if not command.hidden and not any(name in names for names in helptext.TOPICS.values())]
        if rest:  # a command given no topic still shows (tests/test_everyday_help.py says to give it one)
            with formatter.section("Commands"):
                formatter.write_dl(rest)

    def format_epilog(self, ctx: Any, formatter: Any) -> None:
        formatter.write_paragraph()
        formatter.write_text("gw help VERB (or gw VERB --help) shows a verb's options and examples.")


app = typer.Typer(
    cls=TopicGroup,
    name="gw",
    help="gitwork: work items, fenced leases and conversations kept on a git ref.",
    no_args_is_help=True,
    add_completion=False,
    context_settings={"help_option_names": ["-h", "--help"]},
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
)

Json = Annotated[bool, typer.Option("--json", help="Print JSON on stdout (errors too).")]
As = Annotated[Optional[str], typer.Option("--as", envvar="GW_AGENT", help="Acting identity.", show_envvar=True)]
Repo = Annotated[Optional[str], typer.Option("-C", help="Run as if gw was started in this directory.")]
Fence = Annotated[
    Optional[int], typer.Option("--fence", envvar="GW_FENCE", help="Fencing token of the lease you act under.")
]


def _complete_items(ctx: typer.Context, incomplete: str) -> list[str]:
    """Shell completion of item ids: the open items' full ids that start with what was typed."""
    try:
        from ..reports import item_ids
        from ..workplane import Workplane

        with Workplane(ctx.params.get("path")) as plane:
            return item_ids(plane, incomplete)
    except Exception:  # completion must never print a traceback into the user's shell
        return []


ItemArg = Annotated[str, typer.Argument(help="Item id or unique prefix.", show_default=False,
                                        autocompletion=_complete_items)]
# Several ids: one command each, each reported; the exit code is the first failure's.
ItemsArg = Annotated[list[str], typer.Argument(help="Item ids or unique prefixes (each its own command).",
                                               show_default=False, autocompletion=_complete_items)]
Offline = Annotated[
    bool, typer.Option("--offline", help="Tentative: do not ask the arbiter remote now (gw sync decides later).")
]
Ttl = Annotated[Optional[str], typer.Option("--ttl", help="Lease duration, e.g. 90s, 15m, 1h (default: the default_ttl setting, 15m).")]


def _run(func, as_json: bool, path: Optional[str], agent: Optional[str], **kwargs) -> None:  # type: ignore[no-untyped-def]
    code = actions.invoke(func, as_json=as_json, path=path, agent=agent, **kwargs)
    if code:
        raise typer.Exit(code)


def verb(action: Callable[..., Any], name: Optional[str] = None, group: Optional[typer.Typer] = None,
         sample: Optional[list[str]] = None, **settings: Any) -> Callable[[Callable[..., None]], Callable[..., None]]:
    """Register a declaration (signature + docstring, empty body) as the command that runs ``action``.

    typer reads the declaration's signature (``functools.wraps`` keeps it) and calls the wrapper with
    every option under its parameter name; ``json``, ``agent`` and ``path`` go to ``actions.invoke``
    and the rest to ``action`` unchanged. ``gw_action`` names the action for ``fastgen``.

    ``sample``: the arguments of one command line that succeeds (``{item}``: an item with one
    criterion, leased by the acting identity): the tests run it through both parsers, with ``--json``
    and in a process that must not import typer (``fastgen.samples``), so a new verb needs no case there.
    """

    def register(declaration: Callable[..., None]) -> Callable[..., None]:
        @functools.wraps(declaration)
        def command(json: bool = False, agent: Optional[str] = None, path: Optional[str] = None,
                    **options: Any) -> None:
            _run(action, json, path, agent, **options)

        command.gw_action = f"{action.__module__.rpartition('.')[2]}:{action.__name__}"  # type: ignore[attr-defined]
        command.gw_sample = sample  # type: ignore[attr-defined]
        (group or app).command(name, epilog=helptext.epilog(declaration.__name__, _sample_line(
            group, name or declaration.__name__, sample)), **settings)(command)
        return command

    return register


def _sample_line(group: Optional[typer.Typer], name: str, sample: Optional[list[str]]) -> tuple[str, ...]:
    """An example made from a verb's ``sample`` (for a verb ``helptext.EXAMPLES`` does not list yet)."""
    if sample is None:
        return ()
    import shlex

    words = [getattr(getattr(group, "info", None), "name", None) or "", name.rstrip("_").replace("_", "-")]
    args = [word.replace("{item}", "w-3fa9") for word in sample]
    return (" ".join(["gw", *[w for w in words if w], *(shlex.quote(a) for a in args)]),)


def plain(function: Callable[..., int], name: Optional[str] = None, group: Optional[typer.Typer] = None,
          **settings: Any) -> Callable[[Callable[..., None]], Callable[..., None]]:
    """Register a declaration as the command that runs ``function`` (cli/commands/plain.py) with every
    option under its parameter name, without a work plane; its return value is the exit code."""

    def register(declaration: Callable[..., None]) -> Callable[..., None]:
        @functools.wraps(declaration)
        def command(**options: Any) -> None:
            # Looked up when called, as the fast path does (cli/fast.py), so both run the same function.
            code = getattr(sys.modules[function.__module__], function.__name__)(**options)
            if code:
                raise typer.Exit(code)

        command.gw_plain = f"{function.__module__.rpartition('.')[2]}:{function.__name__}"  # type: ignore[attr-defined]
        (group or app).command(name, epilog=helptext.epilog(declaration.__name__), **settings)(command)
        return command

    return register


def typer_only(reason: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Mark a command the fast path leaves to typer, saying why (fastgen lists it in ``TYPER_ONLY``)."""

    def mark(command: Callable[..., Any]) -> Callable[..., Any]:
        command.gw_typer_only = reason  # type: ignore[attr-defined]
        return command

    return mark


def _version(value: bool) -> None:
    if value:
        print(f"gw {__version__}")
        raise typer.Exit()


@app.callback()
def main(
    version: Annotated[
        bool, typer.Option("--version", callback=_version, is_eager=True, help="Print the version and exit.")
    ] = False,
) -> None:
    """gitwork: work items, fenced leases and conversations kept on a git ref."""


ExcludeLabel = Annotated[Optional[list[str]], typer.Option("--exclude-label", help="Leave out items with any of "
                                                                                  "these labels (repeatable; a,b).")]
Since = Annotated[Optional[str], typer.Option("--since", help="Only from then on: a duration back from now (7d, "
                                                              "12h) or an instant (2026-12-01T09:00:00Z).")]
Reverse = Annotated[bool, typer.Option("--reverse", help="The order reversed (the limit applies after).")]
SortBy = Annotated[Optional[str], typer.Option("--sort", help="rank (default: best first), created, updated (last "
                                                              "changed first), id or title.")]
LabelAny = Annotated[Optional[list[str]], typer.Option("--label-any", help="Only items with at least one of these "
                                                                          "labels (repeatable; with --label: both).")]


DescriptionFile = Annotated[
    Optional[str], typer.Option("--description-file", help="Read the description from this file ('-': stdin).")
]
UseEditor = Annotated[bool, typer.Option("-e", "--edit", help="Write the title and description in $VISUAL/$EDITOR.")]



# Date filters of the listings (gitwork/when.py): SQL over the read cache.
_WHEN = "a date (2026-12-01), an instant, 7d/2w/12h back from now, today or yesterday"
CreatedAfter = Annotated[Optional[str], typer.Option("--created-after", help=f"Only items created from then on: {_WHEN}.")]
CreatedBefore = Annotated[Optional[str], typer.Option("--created-before", help="Only items created before then.")]
UpdatedAfter = Annotated[Optional[str], typer.Option("--updated-after", help="Only items changed from then on.")]
UpdatedBefore = Annotated[Optional[str], typer.Option("--updated-before", help="Only items last changed before then.")]
