"""The grid's MCP server, made with the SDK's ``MCPServer`` and run over stdio.

Its one tool appends each run of its body to the grid's ledger (``features.LEDGER``), so a
cell counts the calls that reached the server across every process it used, as it counts
the Python tools' bodies.
"""

from __future__ import annotations

import os

from mcp.server.mcpserver import MCPServer
from mcp_types import ToolAnnotations

server = MCPServer("grid", version="1.0.0")


@server.tool(annotations=ToolAnnotations(read_only_hint=True, open_world_hint=False))
def room_area(width: float, height: float) -> str:
    """The area of a room, in square metres."""
    path = os.environ.get("SG_GRID_LEDGER")
    if path:
        with open(path, "a", encoding="utf-8") as ledger:
            ledger.write(f"mcp room_area {width} {height}\n")
    return f"{width * height:g}"


if __name__ == "__main__":
    server.run()
