"""``@tool`` functions stay callable as the plain functions they wrap, and still register."""

from __future__ import annotations

import asyncio

from stargraph.tools import AsyncPythonTool, PythonTool, ToolCall, ToolContext, tool

from .conftest import ArbiterFactory


@tool(id="demo.add@1.0.0")
def add(a: int, b: int = 1) -> int:
    """Add two integers."""
    return a + b


def test_issue44_tool_is_callable_and_still_dispatches(make_arbiter: ArbiterFactory) -> None:
    assert add(2, b=3) == 5
    assert add(a=4) == 5
    # The same object registers and runs through the arbiter, unchanged by direct calls.
    assert isinstance(add, PythonTool)
    arbiter = make_arbiter(add)
    result = arbiter.dispatch(ToolCall(tool="demo.add", args={"a": 2, "b": 3}))
    assert result.payload == 5
    assert add.spec.id == "demo.add@1.0.0"


def test_issue44_tool_with_context_and_async_tool_are_callable() -> None:
    @tool(id="demo.ctx@1.0.0", description="Echo the calling node.")
    def where(ctx: ToolContext, text: str) -> str:
        return f"{ctx.node}:{text}"

    @tool(id="demo.wait@1.0.0", description="Double, asynchronously.")
    async def double(n: int) -> int:
        return 2 * n

    class _Ctx:
        node = "n1"

    assert where(_Ctx(), text="hi") == "n1:hi"
    assert isinstance(double, AsyncPythonTool)
    assert asyncio.run(double(21)) == 42
