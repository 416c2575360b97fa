"""The MCP server of ``gw mcp``: the tools and resources of ``tools.py`` on the ``mcp`` SDK, over stdio.

Built on the SDK's low-level ``Server`` rather than its decorator layer (``MCPServer``): the input
schemas are exactly the ones derived from the op declarations (``tools.Tool.input_schema``), nothing
is inferred from Python signatures, and a refusal is returned as a tool result with ``isError`` and
the CLI's JSON error object, never raised through the SDK. Calls run one at a time on the event
loop: the work plane is one git repository, and every write is one compare-and-swap anyway.

While serving, the SDK points file descriptors 0 and 1 elsewhere (the null device, stderr) and
keeps private copies for the protocol, so nothing a verb or a git child prints can corrupt it.
"""

from __future__ import annotations

import json

from .. import __version__
from ..errors import GwError
from . import tools

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

    from ..workplane import Workplane

INSTRUCTIONS = (
    "gitwork work plane, acting as {who}. Loop: ready, claim (next: true), context, check, msg, done. "
    "claim's lease is remembered: later calls on that item are fenced with it. Results are the JSON of "
    "`gw VERB --json`; errors carry error (kind), code and exit (HELD: held by another, retry later; STALE: "
    "your lease is gone, stop)."
)


def _text(doc: Any) -> str:
    return json.dumps(doc, ensure_ascii=False, separators=(",", ":"))


def build(session: tools.Session) -> Any:
    """The SDK server: its handlers answer from ``session``."""
    import mcp_types as types
    from mcp.server.lowlevel import Server
    from mcp.shared.exceptions import MCPError

    async def list_tools(ctx: Any, params: Any) -> types.ListToolsResult:
        return types.ListToolsResult(tools=[types.Tool.model_validate(doc) for doc in tools.listing()])

    async def call_tool(ctx: Any, params: types.CallToolRequestParams) -> types.CallToolResult:
        is_error, doc = session.call(params.name, params.arguments)
        return types.CallToolResult(content=[types.TextContent(type="text", text=_text(doc))], is_error=is_error)

    async def list_resources(ctx: Any, params: Any) -> types.ListResourcesResult:
        return types.ListResourcesResult(resources=[
            types.Resource(name=name, uri=uri, description=text, mime_type="application/json")
            for name, uri, text in tools.RESOURCES])

    async def list_templates(ctx: Any, params: Any) -> types.ListResourceTemplatesResult:
        return types.ListResourceTemplatesResult(resource_templates=[
            types.ResourceTemplate(name=name, uri_template=uri, description=text, mime_type="application/json")
            for name, uri, text in tools.TEMPLATES])

    async def read_resource(ctx: Any, params: types.ReadResourceRequestParams) -> types.ReadResourceResult:
        uri = str(params.uri)
        try:
            doc = session.read(uri)
        except GwError as error:  # a protocol error here (resources have no error results), with the same object
            raise MCPError(code=types.INVALID_PARAMS, message=f"{error.kind}: {error.message}",
                           data=tools.error_doc(error)) from None
        return types.ReadResourceResult(contents=[
            types.TextResourceContents(uri=uri, mime_type="application/json", text=_text(doc))])

    return Server("gitwork", version=__version__, instructions=INSTRUCTIONS.format(who=session.identity),
                  on_list_tools=list_tools, on_call_tool=call_tool, on_list_resources=list_resources,
                  on_list_resource_templates=list_templates, on_read_resource=read_resource)


def serve(wp: Workplane) -> None:
    """Serve one MCP connection on stdin/stdout until the client closes it."""
    import anyio

    async def main() -> None:
        from mcp.server.stdio import stdio_server

        server = build(tools.Session(wp))
        async with stdio_server() as (read_stream, write_stream):
            await server.run(read_stream, write_stream, server.create_initialization_options())

    try:
        anyio.run(main)
    except Exception as exc:
        if not _client_gone(exc):
            raise
        # The client closed the connection before it read every answer: the end of the connection,
        # as when it closes between calls. What a call wrote stays written, as for a killed CLI.


_GONE = (BrokenPipeError, ConnectionResetError)


def _client_gone(exc: BaseException) -> bool:
    """Is ``exc`` (an exception group of the SDK's task groups, or one error) only the client having gone away?"""
    leaves = getattr(exc, "exceptions", None)
    if leaves is None:
        return isinstance(exc, _GONE)
    return bool(leaves) and all(_client_gone(leaf) for leaf in leaves)
