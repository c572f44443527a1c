"""LangChain tools as stargraph tools: :func:`from_langchain`.

Nothing here imports ``langchain_core``: a LangChain tool is read through the attributes
every ``BaseTool`` has (``name``, ``description``, ``tool_call_schema``, ``invoke``), so the
module costs nothing to a program that never hands it one.
"""

from __future__ import annotations

import inspect
import re
from collections.abc import Mapping
from typing import Any, Final, Protocol, TypeGuard

import orjson
from pydantic import BaseModel

from stargraph.errors import Problem, ToolSpecError
from stargraph.tools._schema import ArgumentModel, ValidatedArgs, model_from_json_schema
from stargraph.tools._spec import SideEffect, ToolSpec
from stargraph.tools._tool import AsyncPythonTool, PythonTool, ToolContext

__all__ = ["LangChainToolLike", "from_langchain", "is_langchain_tool"]

_VERSION: Final = "0.0.0"
_BAD: Final = re.compile(r"[^a-z0-9]+")


class LangChainToolLike(Protocol):
    """What a type checker knows of a LangChain ``BaseTool`` without importing it."""

    name: str
    description: str


def is_langchain_tool(candidate: object) -> TypeGuard[LangChainToolLike]:
    """Whether ``candidate`` is a LangChain ``BaseTool`` (by its classes' modules, so that
    asking does not import ``langchain_core``)."""
    return any(cls.__module__.startswith("langchain_core.tools") for cls in type(candidate).__mro__)


def _segment(text: str) -> str:
    cleaned = _BAD.sub("_", text.lower()).strip("_")
    return cleaned if cleaned[:1].isalpha() else f"t_{cleaned}".strip("_")


def _arguments(lc_tool: Any, tool_id: str, where: str) -> ArgumentModel:
    """The tool's argument validator: its own pydantic model when it has one (every
    ``@tool`` function and ``StructuredTool`` does), else its JSON Schema translated."""
    schema = getattr(lc_tool, "tool_call_schema", None)
    if isinstance(schema, type) and issubclass(schema, BaseModel):
        return ArgumentModel(schema)
    if not isinstance(schema, Mapping):
        properties = getattr(lc_tool, "args", None)
        schema = {"type": "object", "properties": dict(properties or {})}
    return model_from_json_schema(schema, name=tool_id, source=where)


def _returned(value: Any) -> Any:
    """What the tool's return value becomes: JSON as it is, a LangChain message its content,
    anything else its ``str()`` (as LangGraph's ``ToolNode`` writes it)."""
    if type(value).__module__.startswith("langchain_core.messages"):
        value = getattr(value, "content", value)
    if value is None or isinstance(value, str):
        return value
    try:
        orjson.dumps(value)
    except TypeError:
        return str(value)
    return value


class LangChainTool(PythonTool):
    """A LangChain tool run by the arbiter: its validated arguments go to ``tool.invoke``
    and its return value is the result. Built by :func:`from_langchain`."""

    __slots__ = ("langchain_tool",)

    def __init__(self, spec: ToolSpec, arguments: ArgumentModel, lc_tool: Any) -> None:
        super().__init__(spec, arguments, lc_tool.invoke)
        self.langchain_tool = lc_tool
        """The wrapped LangChain tool."""
        # The agent offers a tool under the last part of its source: the tool's own name.
        self.source = f"langchain:{lc_tool.name}"

    def execute(self, ctx: ToolContext, args: ValidatedArgs) -> object:
        """Invoke the tool with the arguments as JSON."""
        del ctx
        return _returned(self.langchain_tool.invoke(args.json))


class AsyncLangChainTool(AsyncPythonTool):
    """A LangChain tool that only has a coroutine: the arbiter awaits its ``ainvoke``."""

    __slots__ = ("langchain_tool",)

    def __init__(self, spec: ToolSpec, arguments: ArgumentModel, lc_tool: Any) -> None:
        super().__init__(spec, arguments, lc_tool.ainvoke)
        self.langchain_tool = lc_tool
        """The wrapped LangChain tool."""
        self.source = f"langchain:{lc_tool.name}"

    async def execute(self, ctx: ToolContext, args: ValidatedArgs) -> object:
        """Await the tool's ``ainvoke`` with the arguments as JSON."""
        del ctx
        return _returned(await self.langchain_tool.ainvoke(args.json))


def from_langchain(
    lc_tool: LangChainToolLike,
    *,
    id: str | None = None,
    side_effect: SideEffect = "none",
    locks: tuple[str, ...] | list[str] = (),
    timeout_s: float = 30.0,
    idempotent: bool = False,
) -> PythonTool:
    """A LangChain tool (a ``BaseTool``, e.g. a ``@tool``-decorated function) as a stargraph
    tool, for :func:`~stargraph.skills.agent.create_agent`, ``react_graph`` or a
    :class:`~stargraph.tools.ToolRegistry`.

    Its name, description and argument schema are the LangChain tool's; its id is ``id``,
    else ``langchain.<name>@0.0.0``; the model sees it under its own name, and its result is
    the tool's return value. ``side_effect`` and the rest are declared here, as with
    :func:`~stargraph.tools.tool` and with the same defaults (``"none"``: it runs inline,
    unlocked and unaudited; declare a tool that writes or reaches the outside world).
    """
    if not is_langchain_tool(lc_tool):
        raise ToolSpecError(
            [
                Problem(
                    "",
                    f"expected a LangChain BaseTool, got {type(lc_tool).__name__} {lc_tool!r:.60}",
                    "pass a langchain_core.tools.BaseTool (e.g. a @tool function); wrap a plain "
                    "function with stargraph.tools.tool instead",
                )
            ],
            subject="from_langchain",
        )
    name = str(lc_tool.name)
    tool_id = id or f"langchain.{_segment(name)}@{_VERSION}"
    where = f"LangChain tool {name!r} ({tool_id})"
    arguments = _arguments(lc_tool, tool_id, where)
    description = (lc_tool.description or "").strip()
    if not description:
        raise ToolSpecError(
            [Problem(f"{where}#/description", "the tool has no description", "give it one")],
            subject=where,
        )
    spec = ToolSpec(
        id=tool_id,
        description=description,
        input_schema=arguments.json_schema,
        side_effect=side_effect,
        locks=tuple(locks),
        timeout_s=timeout_s,
        idempotent=idempotent,
    )
    sync = getattr(lc_tool, "func", True) is not None or not inspect.iscoroutinefunction(
        getattr(lc_tool, "coroutine", None)
    )
    if sync:
        return LangChainTool(spec, arguments, lc_tool)
    return AsyncLangChainTool(spec, arguments, lc_tool)
