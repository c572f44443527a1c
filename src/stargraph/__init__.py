"""stargraph: compile LLM-agent workflows into content-hashed graphs, run them deterministically.

>>> from stargraph import Graph, START, END
>>> from stargraph.examples.basics import CounterState, bump
>>> app = (Graph("two", state=CounterState).with_node("a", bump).with_node("b", bump)
...        .with_edge(START, "a").with_edge("a", "b").with_edge("b", END).compile())
>>> app.invoke({}).items
['a', 'b']

Subpackages (imported on demand, so ``import stargraph`` stays light): ``stargraph.ir``,
``stargraph.graph``, ``stargraph.runtime``, ``stargraph.fathom`` (rules), ``stargraph.tools``,
``stargraph.llm``, ``stargraph.testing``.
"""

from __future__ import annotations

from stargraph import reducers
from stargraph.errors import CompileError, RunError, StargraphError, UsageError
from stargraph.graph import END, START, Graph, Send
from stargraph.ir import CachePolicyIR as CachePolicy
from stargraph.ir import RetryPolicyIR as RetryPolicy
from stargraph.runtime import CompiledGraph, Interrupt, RunContext, interrupt_of
from stargraph.runtime._plan import Command

__version__ = "0.1.0"

__all__ = [
    "CachePolicy",
    "Command",
    "CompileError",
    "CompiledGraph",
    "END",
    "Graph",
    "Interrupt",
    "RetryPolicy",
    "RunContext",
    "RunError",
    "START",
    "Send",
    "StargraphError",
    "UsageError",
    "__version__",
    "interrupt_of",
    "reducers",
]
