"""stargraph's MCP client as the conformance suite's client under test.

The suite runs ``python client.py <server url>`` with the scenario's name in
``MCP_CONFORMANCE_SCENARIO``. The client is what an agent uses: an :class:`McpServer` on the
URL in a :class:`ToolRegistry`, its tools called through an :class:`Arbiter` (listing,
validation, locks, timeout, commit log). Each scenario's server lists the tools it wants
called; every one is called once with arguments filled from its input schema.
"""

from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path
from typing import Any

from stargraph.errors import ToolError
from stargraph.tools import Arbiter, McpServer, ToolCall, ToolRegistry

_SAMPLES: dict[str, Any] = {"number": 1, "integer": 1, "string": "x", "boolean": True}


def _arguments(schema: dict[str, Any]) -> dict[str, Any]:
    properties = schema.get("properties") or {}
    return {
        name: _SAMPLES.get(str(spec.get("type")), "x")
        for name, spec in properties.items()
        if name in (schema.get("required") or [])
    }


def main() -> int:
    url = sys.argv[-1]
    scenario = os.environ.get("MCP_CONFORMANCE_SCENARIO", "?")
    server = McpServer(url=url, name="conformance", timeout_s=20.0)
    with (
        tempfile.TemporaryDirectory(prefix="stargraph-conformance-") as tmp,
        Arbiter(ToolRegistry.build(mcp=[server]), workspace=Path(tmp)) as arbiter,
    ):
        for tool in server.tools():
            call = ToolCall(tool=tool.spec.id, args=_arguments(dict(tool.spec.input_schema)))
            try:
                result = arbiter.dispatch(call)
                print(f"{scenario}: {tool.spec.id} -> {result.summary}")
            except ToolError as exc:
                print(f"{scenario}: {tool.spec.id} failed: {exc}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
