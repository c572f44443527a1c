"""The MCP conformance suite against stargraph's client and ``stargraph mcp serve``."""
