"""LangGraph's spelling over stargraph: port a LangGraph graph by changing its imports.

``from stargraph.langgraph import StateGraph, START, END`` builds a native
:class:`stargraph.Graph` (content-hashed, journaled, replayable) from LangGraph's mutable
builder; the compiled object takes LangGraph's ``config={"configurable": {"thread_id":
...}}``. What differs, and why, is in ``docs/langgraph.md``. This package never imports
the ``langgraph`` package.

>>> import operator
>>> from typing import Annotated, TypedDict
>>> from stargraph.langgraph import START, StateGraph
>>> class State(TypedDict):
...     log: Annotated[list[str], operator.add]
>>> def hello(state: State) -> dict:
...     return {"log": ["hello"]}
>>> builder = StateGraph(State)
>>> builder.add_node(hello).add_edge(START, "hello").compile().invoke({"log": ["hi"]})
{'log': ['hi', 'hello']}
"""

# No ``from __future__ import annotations`` here: the example above defines a TypedDict,
# whose annotations must be objects for the layer to read them.

from stargraph.graph import END, START, Send
from stargraph.langgraph._compiled import (
    CompiledStateGraph,
    InMemorySaver,
    Interrupt,
    MemorySaver,
    PregelTask,
    StateSnapshot,
)
from stargraph.langgraph._graph import StateGraph
from stargraph.langgraph._types import (
    CachePolicy,
    Command,
    InMemoryCache,
    MessagesState,
    RemainingSteps,
    RetryPolicy,
    get_stream_writer,
    interrupt,
)
from stargraph.messages import REMOVE_ALL_MESSAGES, RemoveMessage, add_messages

__all__ = [
    "CachePolicy",
    "Command",
    "CompiledStateGraph",
    "END",
    "InMemoryCache",
    "InMemorySaver",
    "Interrupt",
    "MemorySaver",
    "MessagesState",
    "PregelTask",
    "REMOVE_ALL_MESSAGES",
    "RemainingSteps",
    "RemoveMessage",
    "RetryPolicy",
    "START",
    "Send",
    "StateGraph",
    "StateSnapshot",
    "add_messages",
    "get_stream_writer",
    "interrupt",
]
