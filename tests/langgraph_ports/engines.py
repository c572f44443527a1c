"""The two engines a port runs on: each a namespace of LangGraph's names.

A port's body uses only ``lg.<name>`` for what it would import, so the same body runs on
the real LangGraph (``langgraph.graph``, ``langgraph.types``, ...) and on
``stargraph.langgraph``: the imports are the only thing that changes. ``lg.ai`` and
``lg.human`` build messages the way each engine's chat model would (the swapped-in model).
"""

from __future__ import annotations

import json
import warnings
from collections.abc import Sequence
from types import SimpleNamespace
from typing import Any


class Engine(SimpleNamespace):
    """An engine's names. A port's nodes are closures over it; as a module of imports
    would, it stands for its engine's name in the graph hash."""

    def __stargraph_identity__(self) -> str:
        return str(self.name)


def langgraph_engine() -> Engine:
    """The real LangGraph 1.x, as an example imports it."""
    from langchain_core.messages import AIMessage, HumanMessage, RemoveMessage
    from langgraph.cache.memory import InMemoryCache
    from langgraph.checkpoint.memory import InMemorySaver
    from langgraph.config import get_stream_writer
    from langgraph.graph import END, START, MessagesState, StateGraph
    from langgraph.graph.message import REMOVE_ALL_MESSAGES, add_messages
    from langgraph.managed import RemainingSteps
    from langgraph.types import CachePolicy, Command, RetryPolicy, Send, interrupt

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # create_react_agent is deprecated in langgraph 1.x
        from langgraph.prebuilt import create_react_agent
        from langgraph.prebuilt.chat_agent_executor import AgentState

    def ai(content: str, tool_calls: Sequence[tuple[str, str, dict[str, Any]]] = ()) -> Any:
        calls = [{"id": i, "name": n, "args": a} for i, n, a in tool_calls]
        return AIMessage(content=content, tool_calls=calls)

    def tool_message(content: str, call_id: str) -> Any:
        return {"role": "tool", "content": content, "tool_call_id": call_id}

    return Engine(
        name="langgraph",
        StateGraph=StateGraph,
        START=START,
        END=END,
        Send=Send,
        Command=Command,
        interrupt=interrupt,
        RetryPolicy=RetryPolicy,
        CachePolicy=CachePolicy,
        MessagesState=MessagesState,
        add_messages=add_messages,
        RemoveMessage=RemoveMessage,
        REMOVE_ALL_MESSAGES=REMOVE_ALL_MESSAGES,
        InMemorySaver=InMemorySaver,
        InMemoryCache=InMemoryCache,
        RemainingSteps=RemainingSteps,
        get_stream_writer=get_stream_writer,
        create_react_agent=_quiet(create_react_agent),
        AgentState=AgentState,
        ai=ai,
        human=lambda text: HumanMessage(content=text),
        tool_message=tool_message,
        tool_calls=lambda m: [(c["id"], c["name"], c["args"]) for c in m.tool_calls],
    )


def stargraph_engine() -> Engine:
    """The same names from ``stargraph.langgraph``."""
    from stargraph.langgraph import (
        END,
        REMOVE_ALL_MESSAGES,
        START,
        CachePolicy,
        Command,
        InMemoryCache,
        InMemorySaver,
        MessagesState,
        RemainingSteps,
        RemoveMessage,
        RetryPolicy,
        Send,
        StateGraph,
        add_messages,
        get_stream_writer,
        interrupt,
    )
    from stargraph.langgraph.prebuilt import AgentState, create_react_agent
    from stargraph.llm import ToolCall
    from stargraph.messages import Message

    def ai(content: str, tool_calls: Sequence[tuple[str, str, dict[str, Any]]] = ()) -> Any:
        calls = [ToolCall(id=i, name=n, arguments=json.dumps(a)) for i, n, a in tool_calls]
        return Message(role="assistant", content=content, tool_calls=tuple(calls))

    def tool_message(content: str, call_id: str) -> Any:
        return {"role": "tool", "content": content, "tool_call_id": call_id}

    return Engine(
        name="stargraph",
        StateGraph=StateGraph,
        START=START,
        END=END,
        Send=Send,
        Command=Command,
        interrupt=interrupt,
        RetryPolicy=RetryPolicy,
        CachePolicy=CachePolicy,
        MessagesState=MessagesState,
        add_messages=add_messages,
        RemoveMessage=RemoveMessage,
        REMOVE_ALL_MESSAGES=REMOVE_ALL_MESSAGES,
        InMemorySaver=InMemorySaver,
        InMemoryCache=InMemoryCache,
        RemainingSteps=RemainingSteps,
        get_stream_writer=get_stream_writer,
        create_react_agent=create_react_agent,
        AgentState=AgentState,
        ai=ai,
        human=lambda text: {"role": "user", "content": text},
        tool_message=tool_message,
        tool_calls=lambda m: [(c.id, c.name, json.loads(c.arguments)) for c in m.tool_calls or ()],
    )


def _quiet(fn: Any) -> Any:
    """``fn`` called without the deprecation warning langgraph 1.x gives for it."""

    def call(*args: Any, **kwargs: Any) -> Any:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return fn(*args, **kwargs)

    return call


def texts(messages: list[Any]) -> list[tuple[str, Any]]:
    """A conversation as (role, content) pairs, whichever engine's message objects."""
    roles = {"human": "user", "ai": "assistant"}
    out = []
    for m in messages:
        role = getattr(m, "role", None) or roles.get(getattr(m, "type", ""), getattr(m, "type", ""))
        out.append((role, m.content or ""))
    return out
