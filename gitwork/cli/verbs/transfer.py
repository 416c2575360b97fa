"""Declarations of apply, import, export and shadow (commands/transfer.py)."""

# No ``from __future__ import annotations``: typer reads the verbs' annotations on every build of the click
# command, and string ones made it ``eval`` each (tests/test_suite_speed.py).

from typing import Annotated, Optional

import typer

from ..commands import transfer
from ..declare import (
    As,
    Json,
    Repo,
    app,
    verb,
)

# --- transfer (commands/transfer.py): apply, import, export, shadow (issue 16) ---------------------


@verb(transfer.apply, "apply")
def apply_(
    source: Annotated[str, typer.Argument(help="A file holding a command document (YAML or JSON), JSON lines or "
                                               "YAML documents separated by --- (several: one batch, one commit, "
                                               "all or nothing), or - for stdin.")],
    json: Json = False, agent: As = None, path: Repo = None,
) -> None:
    """Apply command documents directly (the same documents every face submits); several are one batch."""


@verb(transfer.import_, "import")
def import_(
    kind: Annotated[str, typer.Argument(help="beads, github, csv or jsonl (gitwork's own export).", show_default=False)],
    source: Annotated[str, typer.Argument(help="The export file, or - for stdin.", show_default=False)],
    mapping: Annotated[Optional[str], typer.Option("--map", help="csv: field=Column pairs (external=Key,title=Summary,"
                                                                 "...) or a JSON/YAML file of them.")] = None,
    batch: Annotated[int, typer.Option("--batch", help="Items per batch (one commit each).")] = 500,
    progress: Annotated[bool, typer.Option("--progress/--no-progress", help="A progress bar on stderr when it is "
                                                                            "a terminal.")] = True,
    prefer: Annotated[str, typer.Option("--prefer", help="A field changed on both sides since the last import: "
                                                         "gitwork (keep gitwork's value, report the conflict) or "
                                                         "source (take the source's).")] = "gitwork",
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Only report what would be created, updated, left "
                                                            "unchanged or deleted (ids too); write nothing.")] = False,
    json: Json = False, agent: As = None, path: Repo = None,
) -> None:
    """Import another tracker's export: a re-import takes only what the source changed since the last one."""


@verb(transfer.export)
def export(
    format: Annotated[str, typer.Option("--format", help="jsonl (gitwork's own), beads or csv.")] = "jsonl",
    out: Annotated[Optional[str], typer.Option("--output", help="Write to this file (default: stdout).")] = None,
    json: Json = False, agent: As = None, path: Repo = None,
) -> None:
    """Export every item (with its thread) in a format gw import reads back."""


shadow_app = typer.Typer(help="Shadow mode: compare gitwork with the tracker you still run, report only.",
                         no_args_is_help=True)
app.add_typer(shadow_app, name="shadow")


@verb(transfer.shadow_add, "add", group=shadow_app)
def shadow_add(
    name: Annotated[str, typer.Argument(help="A name for this comparison.", show_default=False)],
    kind: Annotated[str, typer.Option("--kind", help="beads, github, csv or jsonl.")],
    source: Annotated[str, typer.Option("--source", help="The other tracker's export file, or a command printing it.")],
    mapping: Annotated[Optional[str], typer.Option("--map", help="csv: field=Column pairs or a file of them.")] = None,
    json: Json = False, agent: As = None, path: Repo = None,
) -> None:
    """Define a shadow comparison (kept in this clone only: its command never travels)."""


@verb(transfer.shadow_report, "report", group=shadow_app)
def shadow_report(
    name: Annotated[Optional[str], typer.Argument(help="The shadow (optional when there is one).", show_default=False)] = None,
    since: Annotated[Optional[str], typer.Option("--since", help="Also show the reports recorded in this window "
                                                                 "(e.g. 7d, or an instant).")] = None,
    record: Annotated[bool, typer.Option("--record", help="Keep this report on the state ref.")] = False,
    json: Json = False, agent: As = None, path: Repo = None,
) -> None:
    """Compare the other tracker's current export with gitwork: every divergence, counts, agreement rate."""
