"""``gw mcp``: serve the work plane to an MCP client over stdio (``gitwork/mcp``; docs/mcp.md).

Everything of the MCP SDK is imported inside the function, only when ``gw mcp`` runs: no other verb
pays for it, and a ``gw`` installed without the ``mcp`` extra still runs every other verb.
"""

from __future__ import annotations

from .. import output

TYPE_CHECKING = False
if TYPE_CHECKING:
    from ...workplane import Workplane


def mcp(wp: Workplane, as_json: bool, tools: bool = False) -> None:
    if tools:  # what an agent carries in its context: the tool list, and its size
        return _tool_list(as_json)
    try:
        import mcp.server.lowlevel  # noqa: F401  (the SDK: absent unless the extra was installed)
    except ImportError as exc:
        from ...errors import UsageError

        raise UsageError(f"gw mcp needs the mcp extra: pip install 'gitwork[mcp]' ({exc})") from exc
    from ...mcp.server import serve

    serve(wp)


def _tool_list(as_json: bool) -> None:
    from ...mcp.tools import estimate_tokens, listing, listing_json

    text = listing_json()
    tools = listing()
    if as_json:
        # The listing as the exact text measured (its schemas have "item" keys that are not item ids).
        output.emit_json({"ok": True, "item": None, "tools": [t["name"] for t in tools], "chars": len(text),
                          "tokens": estimate_tokens(text), "listing": text})
        return
    output.table(("tool", "description"), [(t["name"], t["description"]) for t in tools])
    output.info(f"{len(tools)} tools: {len(text)} characters of tools/list JSON, at most about "
                f"{estimate_tokens(text)} tokens (characters / 3.5)")
