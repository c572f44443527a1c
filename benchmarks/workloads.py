"""The core workloads, each buildable on stargraph, LangGraph and plain Python.

Every node body is trivial (bump a counter, append one item), so what the benchmark measures
is the engine's cost per node execution. Node functions live at module level because
stargraph references callables by import path (``benchmarks.workloads:bump``).

Two copies of each node body exist: one over the pydantic :class:`State` (used by stargraph
and by the plain-Python baseline, unchanged) and one over the TypedDict :class:`LGState`
(LangGraph's idiomatic state). They compute the same thing.

A :class:`Workload` holds one builder per engine; a builder takes a ``size`` (chain length,
loop length, branch count) and returns a zero-argument *runner* that performs one invocation
and returns the engine's final state. :func:`snapshot` turns any engine's final state into a
comparable ``(counter, items)`` pair. To add a workload, append to :data:`WORKLOADS` (or
return it from :func:`all_workloads` when it depends on an optional module).
"""

from __future__ import annotations

import itertools
import operator
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Annotated, Any, TypedDict

from pydantic import BaseModel

from stargraph import reducers
from stargraph.graph import END, START, Graph, Send

if TYPE_CHECKING:
    from langchain_core.runnables import RunnableConfig

__all__ = [
    "ENGINES",
    "WORKLOADS",
    "Builder",
    "LGState",
    "Runner",
    "Snapshot",
    "State",
    "Workload",
    "all_workloads",
    "chain_graph",
    "chain_state_graph",
    "fanout_graph",
    "fanout_state_graph",
    "send_graph",
    "send_state_graph",
    "snapshot",
    "subgraph_graph",
    "subgraph_state_graph",
]

ENGINES: tuple[str, ...] = ("stargraph", "langgraph", "plain")
"""Engine names, in table order."""

Runner = Callable[[], Any]
"""One invocation of a built workload; returns the engine's final state."""

Builder = Callable[[int], Runner]
"""Builds a workload of the given size on one engine (compiling happens here, untimed)."""

Snapshot = tuple[int, tuple[str, ...]]
"""``(counter, items)``: an engine-independent view of a final state."""

LOOP_END = 1000
"""The self-loop stops when the counter reaches this; a run of size ``n`` starts at
``LOOP_END - n``, so the loop's length is chosen by the input, not by the graph."""


# ---------------------------------------------------------------------- states


class State(BaseModel):
    """The stargraph / plain-Python state."""

    counter: int = 0
    items: Annotated[list[str], reducers.append] = []


class LGState(TypedDict):
    """The LangGraph state: the same two channels, ``items`` reduced by ``operator.add``."""

    counter: int
    items: Annotated[list[str], operator.add]


def snapshot(final: Any) -> Snapshot:
    """``(counter, items)`` of a final state from any engine (a model or a dict)."""
    if isinstance(final, Mapping):
        return int(final["counter"]), tuple(final["items"])
    return int(final.counter), tuple(final.items)


# ---------------------------------------------------------------------- node bodies (pydantic)


def bump(state: State) -> dict[str, Any]:
    """Bump the counter and append its old value."""
    return {"counter": state.counter + 1, "items": [str(state.counter)]}


def loop_router(state: State) -> str:
    """Run ``loop`` again until the counter reaches :data:`LOOP_END`."""
    return "loop" if state.counter < LOOP_END else END


def _branch_factory(index: int) -> Callable[[State], dict[str, Any]]:
    item = f"b{index:02d}"

    def branch(state: State) -> dict[str, Any]:
        # Parallel branches may not all write ``counter`` (it has no reducer: invariant 2),
        # so a branch only appends; the fork and the join bump the counter.
        return {"items": [item]}

    return branch


def _lg_branch_factory(index: int) -> Callable[[LGState], dict[str, Any]]:
    item = f"b{index:02d}"

    def lg_branch(state: LGState) -> dict[str, Any]:
        return {"items": [item]}

    return lg_branch


MAX_BRANCHES = 20
"""Branch functions exist for up to this many branches (``branch_00`` ... ``branch_19``)."""


def _export(name: str, fn: Callable[..., Any]) -> Callable[..., Any]:
    """Give ``fn`` a module-level name so stargraph can reference it by import path."""
    fn.__name__ = fn.__qualname__ = name
    fn.__module__ = __name__
    globals()[name] = fn
    return fn


BRANCHES: tuple[Callable[[State], dict[str, Any]], ...] = tuple(
    _export(f"branch_{i:02d}", _branch_factory(i)) for i in range(MAX_BRANCHES)
)
"""One distinct module-level function per branch, so the merged items show the merge order."""

LG_BRANCHES: tuple[Callable[..., dict[str, Any]], ...] = tuple(
    _export(f"lg_branch_{i:02d}", _lg_branch_factory(i)) for i in range(MAX_BRANCHES)
)
"""The LangGraph twins of :data:`BRANCHES`."""


def send_router(state: State) -> list[Send]:
    """Fan out to ``work`` ``counter - 1`` times; each payload overlays ``counter`` with an index.

    The width comes from the input (a run of width ``n`` starts at ``counter=n``, and ``fork``
    has bumped it once), so the graph needs no global setting.
    """
    return [Send("work", {"counter": i}) for i in range(state.counter - 1)]


def work(state: State) -> dict[str, Any]:
    """A ``Send`` worker: append one item naming its index."""
    return {"items": [f"w{state.counter:02d}"]}


# ---------------------------------------------------------------------- node bodies (LangGraph)


def lg_bump(state: LGState) -> dict[str, Any]:
    """:func:`bump` over the TypedDict state."""
    return {"counter": state["counter"] + 1, "items": [str(state["counter"])]}


def lg_loop_router(state: LGState) -> str:
    """:func:`loop_router` over the TypedDict state."""
    return "loop" if state["counter"] < LOOP_END else END


def lg_send_router(state: LGState) -> list[Any]:
    """:func:`send_router` with LangGraph's ``Send`` (the payload is the worker's whole input)."""
    from langgraph.types import Send as LGSend

    return [LGSend("work", {"counter": i}) for i in range(state["counter"] - 1)]


def lg_work(state: LGState) -> dict[str, Any]:
    """:func:`work` over the TypedDict state."""
    return {"items": [f"w{state['counter']:02d}"]}


# ---------------------------------------------------------------------- plain-Python baseline


def _apply(state: State, update: Mapping[str, Any]) -> State:
    """Apply one node's update: ``items`` appends (the same reducer), the rest replace."""
    changes = dict(update)
    if "items" in changes:
        changes["items"] = reducers.append(state.items, changes["items"])
    return state.model_copy(update=changes)


def _apply_step(state: State, updates: Sequence[Mapping[str, Any]]) -> State:
    """Apply the updates of one parallel step in order, all computed from the same state."""
    for update in updates:
        state = _apply(state, update)
    return state


# ---------------------------------------------------------------------- workload definition


@dataclass(frozen=True)
class Workload:
    """One benchmark workload and how to build it on each engine.

    ``size`` and ``invocations`` are the full-scale figures; ``nodes(size)`` is the exact
    number of node executions in one invocation and ``expected(size)`` its final state.
    """

    name: str
    description: str
    size: int
    invocations: int
    nodes: Callable[[int], int]
    expected: Callable[[int], Snapshot]
    builders: Mapping[str, Builder]


# chain ------------------------------------------------------------------------------------


def _node_ids(n: int) -> list[str]:
    width = len(str(n - 1))
    return [f"n{i:0{width}d}" for i in range(n)]


def chain_graph(n: int) -> Graph[State]:
    """``n`` nodes in a line, each :func:`bump` (uncompiled; the durable benchmarks compile it
    with a store)."""
    ids = _node_ids(n)
    graph = Graph(f"chain{n}", state=State)
    for node in ids:
        graph = graph.with_node(node, bump)
    graph = graph.with_edge(START, ids[0]).with_edge(ids[-1], END)
    for a, b in itertools.pairwise(ids):
        graph = graph.with_edge(a, b)
    return graph


def chain_state_graph(n: int) -> Any:
    """The same chain as an uncompiled LangGraph ``StateGraph`` of :func:`lg_bump` nodes."""
    from langgraph.graph import StateGraph

    ids = _node_ids(n)
    builder = StateGraph(LGState)
    for node in ids:
        builder.add_node(node, lg_bump)
    builder.add_edge(START, ids[0])
    for a, b in itertools.pairwise(ids):
        builder.add_edge(a, b)
    builder.add_edge(ids[-1], END)
    return builder


def chain_stargraph(n: int) -> Runner:
    """``n`` nodes in a line, each :func:`bump`."""
    app = chain_graph(n).compile(max_steps=n + 10)
    return lambda: app.invoke({})


def chain_langgraph(n: int) -> Runner:
    """The same chain as a LangGraph ``StateGraph``."""
    app = chain_state_graph(n).compile()
    config: RunnableConfig = {"recursion_limit": n + 10}
    return lambda: app.invoke({"counter": 0, "items": []}, config)


def chain_plain(n: int) -> Runner:
    """The chain as a hand-written loop."""
    fns = [bump] * n

    def run() -> State:
        state = State()
        for fn in fns:
            state = _apply(state, fn(state))
        return state

    return run


def _chain_expected(n: int) -> Snapshot:
    return n, tuple(str(i) for i in range(n))


def _chain(n: int, invocations: int) -> Workload:
    return Workload(
        name=f"chain{n}",
        description=f"{n}-node chain x{invocations}",
        size=n,
        invocations=invocations,
        nodes=lambda size: size,
        expected=_chain_expected,
        builders={
            "stargraph": chain_stargraph,
            "langgraph": chain_langgraph,
            "plain": chain_plain,
        },
    )


# self-loop --------------------------------------------------------------------------------


def loop_stargraph(n: int) -> Runner:
    """One node looping on itself through a conditional edge, ``n`` times."""
    graph = (
        Graph("selfloop", state=State)
        .with_node("loop", bump)
        .with_edge(START, "loop")
        .with_conditional_edges("loop", loop_router, ["loop", END])
    )
    app = graph.compile(max_steps=n + 10)
    start = {"counter": LOOP_END - n}
    return lambda: app.invoke(start)


def loop_langgraph(n: int) -> Runner:
    """The same self-loop in LangGraph."""
    from langgraph.graph import StateGraph

    builder = StateGraph(LGState)
    builder.add_node("loop", lg_bump)
    builder.add_edge(START, "loop")
    builder.add_conditional_edges("loop", lg_loop_router, ["loop", END])
    app = builder.compile()
    config: RunnableConfig = {"recursion_limit": n + 10}
    start: LGState = {"counter": LOOP_END - n, "items": []}
    return lambda: app.invoke(start, config)


def loop_plain(n: int) -> Runner:
    """The self-loop as a ``while`` loop calling the same node and router."""

    def run() -> State:
        state = State(counter=LOOP_END - n)
        node = "loop"
        while node != END:
            state = _apply(state, bump(state))
            node = loop_router(state)
        return state

    return run


def _loop_expected(n: int) -> Snapshot:
    return LOOP_END, tuple(str(i) for i in range(LOOP_END - n, LOOP_END))


# fan-out + join ---------------------------------------------------------------------------


def fanout_graph(n: int) -> Graph[State]:
    """``fork`` -> ``n`` parallel branches -> ``join`` (runs once, after all of them),
    uncompiled."""
    branches = [f"b{i:02d}" for i in range(n)]
    graph = Graph(f"fanout{n}", state=State).with_node("fork", bump).with_node("join", bump)
    for node, fn in zip(branches, BRANCHES, strict=False):
        graph = graph.with_node(node, fn).with_edge("fork", node)
    return graph.with_edge(START, "fork").with_edge(branches, "join").with_edge("join", END)


def fanout_stargraph(n: int) -> Runner:
    """:func:`fanout_graph`, compiled."""
    app = fanout_graph(n).compile(max_steps=10)
    return lambda: app.invoke({})


def fanout_state_graph(n: int) -> Any:
    """The same fan-out and join as an uncompiled LangGraph ``StateGraph``
    (``add_edge([...], "join")``)."""
    from langgraph.graph import StateGraph

    branches = [f"b{i:02d}" for i in range(n)]
    builder = StateGraph(LGState)
    builder.add_node("fork", lg_bump)
    builder.add_node("join", lg_bump)
    for node, fn in zip(branches, LG_BRANCHES, strict=False):
        builder.add_node(node, fn)
        builder.add_edge("fork", node)
    builder.add_edge(START, "fork")
    builder.add_edge(branches, "join")
    builder.add_edge("join", END)
    return builder


def fanout_langgraph(n: int) -> Runner:
    """:func:`fanout_state_graph`, compiled."""
    app = fanout_state_graph(n).compile()
    return lambda: app.invoke({"counter": 0, "items": []})


def fanout_plain(n: int) -> Runner:
    """Fork, then every branch on the same state, updates applied in branch order, then join."""
    fns = BRANCHES[:n]

    def run() -> State:
        state = _apply(State(), bump(State()))
        state = _apply_step(state, [fn(state) for fn in fns])
        return _apply(state, bump(state))

    return run


def _fanout_expected(n: int) -> Snapshot:
    return 2, ("0", *(f"b{i:02d}" for i in range(n)), "1")


# Send fan-out -----------------------------------------------------------------------------


def send_graph(n: int) -> Graph[State]:
    """``fork`` routes ``n`` ``Send("work", ...)``; ``collect`` runs once after the ``work`` s.

    A run starts at ``counter=n``: that is how :func:`send_router` knows the width.
    """
    return (
        Graph(f"send{n}", state=State)
        .with_node("fork", bump)
        .with_node("work", work)
        .with_node("collect", bump)
        .with_edge(START, "fork")
        .with_conditional_edges("fork", send_router, ["work"])
        .with_edge("work", "collect")
        .with_edge("collect", END)
    )


def send_stargraph(n: int) -> Runner:
    """:func:`send_graph`, compiled, run from ``counter=n``."""
    app = send_graph(n).compile(max_steps=10)
    start = {"counter": n}
    return lambda: app.invoke(start)


def send_state_graph() -> Any:
    """The same map-reduce in LangGraph, compiled (the router returns ``langgraph.types.Send``)."""
    from langgraph.graph import StateGraph

    builder = StateGraph(LGState)
    builder.add_node("fork", lg_bump)
    builder.add_node("work", lg_work)
    builder.add_node("collect", lg_bump)
    builder.add_edge(START, "fork")
    builder.add_conditional_edges("fork", lg_send_router, ["work"])
    builder.add_edge("work", "collect")
    builder.add_edge("collect", END)
    return builder.compile()


def send_langgraph(n: int) -> Runner:
    """:func:`send_state_graph`, run from ``counter=n``."""
    app = send_state_graph()
    return lambda: app.invoke({"counter": n, "items": []})


def send_plain(n: int) -> Runner:
    """Fork, route, run ``work`` on the state overlaid with each payload, then collect."""

    def run() -> State:
        state = State(counter=n)
        state = _apply(state, bump(state))
        sends = send_router(state)
        state = _apply_step(state, [work(state.model_copy(update=s.payload)) for s in sends])
        return _apply(state, bump(state))

    return run


def _send_expected(n: int) -> Snapshot:
    return n + 2, (str(n), *(f"w{i:02d}" for i in range(n)), str(n + 1))


# subgraph (issue 4) ---------------------------------------------------------------------------

SKILL_NODES = 5
"""Nodes of the skill mounted in the middle of the 3-node parent."""


def _skill() -> Any:
    from stargraph.skills import Skill

    return Skill.from_graph(
        chain_graph(SKILL_NODES),
        name="bench-skill",
        version="1.0.0",
        kind="workflow",
        description="five bumps",
        state_schema=State,
    )


def subgraph_graph() -> Graph[State]:
    """``first -> skill (5-node chain, mounted with SubgraphNode.from_skill) -> last``."""
    from stargraph.nodes import SubgraphNode

    return (
        Graph("parent", state=State)
        .with_node("first", bump)
        .with_node(SubgraphNode.from_skill(_skill(), site="skill"))
        .with_node("last", bump)
        .with_edge(START, "first")
        .with_edge("first", "skill")
        .with_edge("skill", "last")
        .with_edge("last", END)
    )


def subgraph_stargraph(n: int) -> Runner:
    """:func:`subgraph_graph`, compiled."""
    app = subgraph_graph().compile()
    return lambda: app.invoke({})


def subgraph_state_graph() -> Any:
    """The LangGraph equivalent of :func:`subgraph_graph`, compiled: the compiled 5-node
    chain invoked from a parent node.

    Not ``add_node("skill", compiled_child)``: with a shared ``operator.add`` channel the
    child's whole list would be added to the parent's again (the duplication fault stargraph
    avoids), and the engines would disagree on the final state.
    """
    from langgraph.graph import StateGraph

    child = chain_state_graph(SKILL_NODES).compile()

    def skill(state: LGState) -> dict[str, Any]:
        out = child.invoke({"counter": state["counter"], "items": []})
        return {"counter": out["counter"], "items": out["items"]}

    builder = StateGraph(LGState)
    builder.add_node("first", lg_bump)
    builder.add_node("skill", skill)
    builder.add_node("last", lg_bump)
    builder.add_edge(START, "first")
    builder.add_edge("first", "skill")
    builder.add_edge("skill", "last")
    builder.add_edge("last", END)
    return builder.compile()


def subgraph_langgraph(n: int) -> Runner:
    """:func:`subgraph_state_graph` (see there why the child is called, not mounted)."""
    app = subgraph_state_graph()
    return lambda: app.invoke({"counter": 0, "items": []})


def subgraph_plain(n: int) -> Runner:
    """Plain Python: the parent loop calling a child loop."""

    def run() -> State:
        state = _apply(State(), bump(State()))
        child = State(counter=state.counter)
        for _ in range(SKILL_NODES):
            child = _apply(child, bump(child))
        state = _apply(state, {"counter": child.counter, "items": child.items})
        return _apply(state, bump(state))

    return run


def _subgraph_expected(n: int) -> Snapshot:
    total = SKILL_NODES + 2
    return total, tuple(str(i) for i in range(total))


# registry ---------------------------------------------------------------------------------

WORKLOADS: list[Workload] = [
    _chain(10, 1000),
    _chain(100, 100),
    Workload(
        name="selfloop",
        description=f"self-loop to {LOOP_END} x5",
        size=LOOP_END,
        invocations=5,
        nodes=lambda size: size,
        expected=_loop_expected,
        builders={"stargraph": loop_stargraph, "langgraph": loop_langgraph, "plain": loop_plain},
    ),
    Workload(
        name="fanout",
        description=f"{MAX_BRANCHES}-branch fan-out + join x200",
        size=MAX_BRANCHES,
        invocations=200,
        nodes=lambda size: size + 2,
        expected=_fanout_expected,
        builders={
            "stargraph": fanout_stargraph,
            "langgraph": fanout_langgraph,
            "plain": fanout_plain,
        },
    ),
    Workload(
        name="send",
        description=f"Send fan-out ({MAX_BRANCHES}) + collect x200",
        size=MAX_BRANCHES,
        invocations=200,
        nodes=lambda size: size + 2,
        expected=_send_expected,
        builders={"stargraph": send_stargraph, "langgraph": send_langgraph, "plain": send_plain},
    ),
    Workload(
        name="subgraph",
        description=f"3-node parent, middle a {SKILL_NODES}-node skill x500",
        size=SKILL_NODES,
        invocations=500,
        # the executions that do work: the parent's two + the skill's five (the skill node
        # itself only hosts them; counting it would flatter every engine alike)
        nodes=lambda size: 2 + SKILL_NODES,
        expected=_subgraph_expected,
        builders={
            "stargraph": subgraph_stargraph,
            "langgraph": subgraph_langgraph,
            "plain": subgraph_plain,
        },
    ),
]
"""The workloads of issue 2; later issues append theirs."""


def all_workloads() -> list[Workload]:
    """:data:`WORKLOADS` plus those whose optional dependencies are importable.

    This is where workloads that need a module not every checkout has yet belong: append
    them here behind an ``importlib.util.find_spec`` check. The durable (SQLite) chain is not
    one of these: it has five engine variants, its own unit (µs per committed step) and
    targets, so it is a report section of its own (:mod:`benchmarks.durable`, registered in
    :func:`benchmarks.core_harness.all_sections`).
    """
    return list(WORKLOADS)
