"""An MCP server (the SDK's ``MCPServer``, over stdio) whose tool list changes: ``unlock``
adds ``double`` and says the tool list changed."""

from __future__ import annotations

from typing import Any

from mcp.server.mcpserver import Context, MCPServer

server: MCPServer[Any] = MCPServer("changing", version="1.0.0")


def double(x: int) -> int:
    """Twice ``x``."""
    return 2 * x


@server.tool()
async def unlock(ctx: Context[Any, Any]) -> str:
    """Make the tool ``double`` available."""
    server.add_tool(double)
    # Both ways a server says so: the 2026 protocol's subscription stream, and the older
    # notification (a client on that protocol version reads).
    await ctx.notify_tools_changed()
    await ctx.session.send_tool_list_changed()
    return "unlocked"


if __name__ == "__main__":
    server.run()
