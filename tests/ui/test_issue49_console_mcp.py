"""The console shows the tools each model call offered, and marks the descriptions MCP
servers wrote as untrusted: the model reads them as instructions."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from starlette.testclient import TestClient

from stargraph.checkpoint import SqliteStore
from stargraph.llm import ChatMessage, ChatRequest, ChatResponse, ScriptedChatModel, ToolCall
from stargraph.skills.react import react_graph
from stargraph.tools import Arbiter, McpServer, ToolRegistry, tool
from stargraph.ui import UiSettings, create_app
from tests import mcp_servers

pytestmark = pytest.mark.mcp

DOUBLE = "demo.double@1.0.0"


@tool(id=DOUBLE)
def double(x: float) -> float:
    """Double a number."""
    return 2 * x


def script(request: ChatRequest) -> ChatResponse:
    if not any(m.role == "tool" for m in request.messages):
        call = ToolCall(id="c1", name="get_current_time", arguments=json.dumps({"timezone": "UTC"}))
        return ChatResponse(message=ChatMessage.assistant(None, [call]), finish_reason="tool_calls")
    return ChatResponse(message=ChatMessage.assistant("It is now."), finish_reason="stop")


def _offered(page: str) -> dict[str, str]:
    """Each offered tool's block on the page, by the name the model was offered."""
    blocks = re.findall(r'<div class="offered-tool[^"]*"><code>([^<]+)</code>(.*?)</div>', page)
    return dict(blocks)


def test_issue49_offered_tools_are_shown_and_mcp_descriptions_marked_untrusted(
    tmp_path: Path,
) -> None:
    graph = react_graph(
        name="clock",
        # One MCP tool by name (offered under its short name), the server's others through a
        # wildcard (offered under reversible names), and a local tool.
        tools=["mcp.time.get_current_time", "mcp.time.*", DOUBLE],
        max_steps=4,
    )
    server = McpServer(command=mcp_servers.time_server(), name="time")
    registry = ToolRegistry.build(mcp=[server], builtins=[double])
    with (
        SqliteStore(tmp_path / "runs.db") as store,
        Arbiter(registry, workspace=tmp_path) as arbiter,
    ):
        services: dict[str, Any] = {"model": ScriptedChatModel(script), "arbiter": arbiter}
        app = graph.compile(store=store, services=services)
        final = app.invoke({"task": "What time is it?"}, run_id="clock-1")
        assert [c.tool.partition("@")[0] for c in final.tool_calls] == ["mcp.time.get_current_time"]
        console = create_app(store, graphs=[app], settings=UiSettings())
        page = TestClient(console, base_url="http://127.0.0.1").get("/runs/clock-1").text
        listed = {t.name: t.description for t in server.listing().tools}
    offered = _offered(page)
    convert = next(name for name in offered if "convert_time" in name)
    assert sorted(offered) == sorted(["get_current_time", convert, "double"])
    for name in ("get_current_time", convert):
        assert "untrusted: written by MCP server <code>time</code>" in offered[name]
    assert "untrusted" not in offered["double"]
    assert "Double a number." in offered["double"]
    # The server's own description is shown as the model read it.
    assert listed["get_current_time"].split("\n")[0] in offered["get_current_time"]
    assert "3 tools offered, 2 described by MCP servers (untrusted text)" in page
