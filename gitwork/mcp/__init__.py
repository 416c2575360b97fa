"""``gw mcp``: the work plane as a Model Context Protocol server over stdio (docs/mcp.md).

``tools.py`` is the tool table and the call path (no MCP SDK: it can be read and tested alone);
``server.py`` wires it into the ``mcp`` SDK's low-level server and the stdio transport. Nothing here is
imported by ``gw``'s other verbs: ``cli/commands/mcp.py`` imports ``server`` only when ``gw mcp`` runs.
"""
