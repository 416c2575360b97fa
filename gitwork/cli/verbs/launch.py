"""Declarations of running agents under a lease (commands/launch.py) and the MCP server (commands/mcp.py)."""

# No ``from __future__ import annotations``: typer reads the verbs' annotations on every build of the click
# command, and string ones made it ``eval`` each (tests/test_suite_speed.py).

from typing import Annotated, Optional

import typer

from ..commands import launch
from ..commands import mcp as mcp_server  # imports nothing of the SDK
from ..declare import (
    As,
    ItemArg,
    Json,
    Repo,
    Ttl,
    verb,
)

# --- running agents under a lease (commands/launch.py) ---------------------------------------------

ExecArg = Annotated[str, typer.Argument(metavar="EXEC", help="Execution id (gw runs lists them).", show_default=False)]


@verb(launch.run)
def run(
    item: ItemArg,
    command: Annotated[Optional[list[str]], typer.Argument(metavar="-- CMD ARGS...", help="The agent's command line.",
                                                          show_default=False)] = None,
    backend: Annotated[str, typer.Option("--backend", help="Where it runs: tmux or subprocess.")] = "tmux",
    ttl: Ttl = None,
    execution: Annotated[Optional[str], typer.Option("--id", help="Execution id (default: minted); a retry with the "
                                                                  "same id never starts a second run.")] = None,
    env: Annotated[Optional[list[str]], typer.Option("--env", help="NAME=VALUE for the agent's environment "
                                                                   "(repeatable); only the names are recorded, so pass "
                                                                   "secrets here, never in the command.")] = None,
    json: Json = False, agent: As = None, path: Repo = None,
) -> None:
    """Run an agent on an item under its lease: reserve, claim (or use your live lease), record, launch; prints the
    execution id. A live execution of the item is reported instead (exit 0, or 75 while its launch is in progress)."""


@verb(launch.runs)
def runs(
    item: Annotated[Optional[str], typer.Option("--item", help="Only this item's executions.")] = None,
    state: Annotated[Optional[str], typer.Option("--state", help="Only executions in this state.")] = None,
    json: Json = False, agent: As = None, path: Repo = None,
) -> None:
    """Executions recorded on the state ref (gw run), oldest first."""


@verb(launch.capture)
def capture(
    execution: ExecArg,
    lines: Annotated[Optional[int], typer.Option("--lines", help="Only the last N lines.")] = None,
    json: Json = False, agent: As = None, path: Repo = None,
) -> None:
    """Print what an execution's terminal shows (tmux) or what it wrote (subprocess)."""


@verb(launch.send)
def send(
    execution: ExecArg,
    text: Annotated[str, typer.Argument(help="Text to type into the execution's terminal.", show_default=False)],
    key: Annotated[Optional[list[str]], typer.Option("--key", help="A key to press after the text, e.g. Enter (repeatable).")] = None,
    enter: Annotated[bool, typer.Option("--enter", help="Press Enter after the text.")] = False,
    wait: Annotated[bool, typer.Option("--wait", help="Send the text as one line, then wait until the agent is back "
                                                      "at its prompt (exit 75 after --timeout).")] = False,
    timeout: Annotated[float, typer.Option("--timeout", help="With --wait: seconds to wait.")] = 60.0,
    json: Json = False, agent: As = None, path: Repo = None,
) -> None:
    """Type text (and keys) into a running execution."""


@verb(launch.detach)
def detach(
    execution: ExecArg,
    reason: Annotated[Optional[str], typer.Option("--reason", help="Why it is released (recorded).")] = None,
    json: Json = False, agent: As = None, path: Repo = None,
) -> None:
    """Release an execution without killing it: recorded released, no longer judged by the coordinator."""


@verb(launch.stop)
def stop(
    execution: ExecArg,
    reason: Annotated[Optional[str], typer.Option("--reason", help="Why it is stopped (recorded).")] = None,
    lost: Annotated[bool, typer.Option("--lost", help="Another host's execution, that host gone for good: declare "
                                                      "it lost (only once its lease has ended: revoke it first).")] = False,
    json: Json = False, agent: As = None, path: Repo = None,
) -> None:
    """Stop an execution: kill its process (group or tmux session) and record it stopped."""


@verb(launch.attach)
def attach(execution: ExecArg, json: Json = False, agent: As = None, path: Repo = None) -> None:
    """Attach to an execution's tmux session on gitwork's own tmux server (--json: print the command instead)."""


@verb(launch.coordinate)
def coordinate(
    once: Annotated[bool, typer.Option("--once", help="One pass, then exit.")] = False,
    interval: Annotated[str, typer.Option("--interval", help="Time between passes, e.g. 5s.")] = "5s",
    failures: Annotated[int, typer.Option("--failures", help="Hand an item off (reason reconcile-failure) after this "
                                                            "many failed passes in a row.", min=1)] = 3,
    ttl: Annotated[Optional[str], typer.Option("--ttl", help="The coordinator's own lease on this host (default: "
                                                             "six intervals, at least 30s).")] = None,
    json: Json = False, agent: As = None, path: Repo = None,
) -> None:
    """Keep this host's executions in step: record exits and lost ones, renew the leases of running ones, kill an
    execution whose lease ended (taken over, revoked, expired), and hand off an item that cannot be reconciled.
    One per host (a lease on coordinators/HOST): a second one exits 75."""


@verb(launch.launcher)
def launcher(
    status: Annotated[bool, typer.Option("--status", help="Say whether this clone's launcher listens (its pid and "
                                                          "socket), then exit.")] = False,
    json: Json = False, agent: As = None, path: Repo = None,
) -> None:
    """Serve this clone's gw run from one resident process: a gw run that finds it hands the launch over (the same
    launch, as the caller, without a Python start of its own before the agent). One per clone (a second one exits
    75); SIGTERM or Ctrl-C stops it. See docs/launch.md, "The resident launcher"."""


@verb(launch.context)
def context(item: ItemArg, json: Json = False, agent: As = None, path: Repo = None) -> None:
    """What an agent is told at launch (launch.md): the item, its criteria and decisions, the unread thread, the lease,
    and how to renew, report, ask, hand off and finish."""

# --- the MCP server (commands/mcp.py; issue 17) ------------------------------------------------------





@verb(mcp_server.mcp, "mcp")
def mcp(
    tools: Annotated[bool, typer.Option("--tools", help="Print the tool list an agent is given, and its size; "
                                                      "serve nothing.")] = False,
    json: Json = False, agent: As = None,
    path: Annotated[Optional[str], typer.Option("-C", "--repo", help="The repository to serve (default: here).")] = None,
) -> None:
    """Serve this work plane to an MCP client over stdio, as one identity (--as, GW_AGENT or the default):
    tools for the agent loop (ready, claim, check, msg, done ...), resources gitwork://item/ID. See docs/mcp.md."""
