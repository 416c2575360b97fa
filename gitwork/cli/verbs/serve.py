"""Declarations of gw serve and its tokens (commands/serve.py)."""

# No ``from __future__ import annotations``: typer reads the verbs' annotations on every build of the click
# command, and string ones made it ``eval`` each (tests/test_suite_speed.py).

from typing import Annotated, Optional

import typer

from .. import helptext
from ..commands import serve as serving
from ..declare import (
    As,
    Json,
    Repo,
    _run,
    app,
    typer_only,
    verb,
)

# --- gw serve: the REST API and the board (commands/serve.py; issue 14) -----------------------------

serve_app = typer.Typer(help="The REST API (OpenAPI at /docs) and the web board over this repository; "
                             "`gw serve token` manages who may use it.", epilog=helptext.epilog("serve"))
app.add_typer(serve_app, name="serve")
token_app = typer.Typer(help="Bearer tokens of gw serve (stored hashed in the common git dir).", no_args_is_help=True)
serve_app.add_typer(token_app, name="token")


@serve_app.callback(invoke_without_command=True)
@typer_only("starts FastAPI and uvicorn, which cost more than typer")
def serve(
    ctx: typer.Context,
    bind: Annotated[Optional[str], typer.Option("--bind", help="HOST:PORT to listen on (default 127.0.0.1:8765; "
                                                               "port 0: any free port).")] = None,
    repo: Annotated[Optional[str], typer.Option("--repo", help="The repository to serve (default: this one).")] = None,
    public: Annotated[bool, typer.Option("--public", help="Allow a HOST that is not loopback (prints a warning).")] = False,
    cors: Annotated[Optional[list[str]], typer.Option("--cors", help="Allow this browser origin (repeatable; "
                                                                     "default: no CORS).")] = None,
    json: Json = False, agent: As = None, path: Repo = None,
) -> None:
    """Run the REST API and the board until interrupted: every request needs a token (gw serve token add)."""
    if ctx.invoked_subcommand is None:
        _run(serving.serve, json, repo or path, agent, bind=bind, repo=repo, public=public, cors=cors)


@verb(serving.token_add, "add", group=token_app)
def serve_token_add(
    name: Annotated[str, typer.Argument(help="The identity the token acts as.", show_default=False)],
    role: Annotated[str, typer.Option("--role", help="agent, person or admin (replaces the settings' role for "
                                                     "this identity in the server).")] = "agent",
    json: Json = False, agent: As = None, path: Repo = None,
) -> None:
    """Create a token for NAME; prints it once (only its hash is stored)."""


@verb(serving.token_list, "list", group=token_app)
def serve_token_list(json: Json = False, agent: As = None, path: Repo = None) -> None:
    """Tokens: id, identity, role, created, revoked (never the token itself)."""


@verb(serving.token_revoke, "revoke", group=token_app)
def serve_token_revoke(
    which: Annotated[str, typer.Argument(metavar="NAME|ID", help="A token id (or a prefix of one), or an identity "
                                         "with one live token; naming several is refused (exit 4).",
                                         show_default=False)],
    json: Json = False, agent: As = None, path: Repo = None,
) -> None:
    """Revoke one token: the server refuses it from the next request and ends its open event streams."""
