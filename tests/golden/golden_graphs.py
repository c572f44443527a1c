"""The graphs behind the golden cassettes in this directory (imported as ``golden_graphs``).

Node references (``golden_graphs:<name>``) are part of each graph's hash, so this module is
always imported under that name: ``make_golden.py`` and ``tests/test_golden.py`` both put
this directory on ``sys.path``. Editing a graph here changes its hash and fails the golden
test until the cassettes are regenerated with ``python tests/golden/make_golden.py``.

Every graph is compiled with ``entropy=lambda: SeededEntropy(0)`` (:func:`compile_golden`):
clock, id and random draws are keyed by position, so a fresh run reproduces the recording.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BaseModel

from stargraph import fathom, reducers
from stargraph.graph import END, START, Graph
from stargraph.llm import OpenAIChatModel
from stargraph.nodes import SubgraphNode
from stargraph.runtime import CompiledGraph, RunContext, SeededEntropy
from stargraph.skills import Skill, SkillKind
from stargraph.skills.react import react_graph
from stargraph.testing import Reply, ScriptedOpenAIServer
from stargraph.tools import Arbiter, ToolRegistry, Workspace, tool

HERE = Path(__file__).resolve().parent
REGENERATE = "python tests/golden/make_golden.py"

# ----------------------------------------------------------------------------- (a) ReAct

ADD_ID = "golden.add@1.0.0"
ADD_NAME = "add"  # the short name the model is offered for golden.add@1.0.0
REACT_TASK = {"task": "add 2 and 3, then 4, then 5"}
REACT_SCRIPT = (
    Reply.tool_calls([(ADD_NAME, {"a": 2, "b": 3})]),
    Reply.tool_calls([(ADD_NAME, {"a": 5, "b": 4})]),
    Reply.tool_calls([(ADD_NAME, {"a": 9, "b": 5})]),
    Reply.text("The sum is 14."),
)
SWITCHES = {"tool_bodies_raise": False}


@tool(id=ADD_ID, side_effect="none")
def add(a: int, b: int) -> int:
    """Add two integers."""
    if SWITCHES["tool_bodies_raise"]:
        raise AssertionError("a tool body ran during replay")
    return a + b


def react() -> Graph[Any]:
    """ReAct: think -> act -> observe, three tool calls, then a final answer."""
    return react_graph(tools=[ADD_ID], max_steps=6)


@contextmanager
def react_services(workspace: Path, *, live: bool = True) -> Iterator[dict[str, Any]]:
    """``{"model", "arbiter"}`` for the ReAct graph: against a fresh scripted server when
    ``live``, else against a dead address (replay must not call it)."""
    arbiter = Arbiter(ToolRegistry.build(builtins=[add]), workspace=Workspace.at(workspace))
    if not live:
        model = OpenAIChatModel("scripted-model", base_url="http://127.0.0.1:9/v1", api_key="x")
        try:
            yield {"model": model, "arbiter": arbiter}
        finally:
            model.close()
        return
    with ScriptedOpenAIServer(list(REACT_SCRIPT)) as server:
        model = OpenAIChatModel("scripted-model", base_url=server.base_url, api_key="x")
        try:
            yield {"model": model, "arbiter": arbiter}
        finally:
            model.close()


# ----------------------------------------------------------------------------- (b) fan-out


class Fan(BaseModel):
    log: Annotated[list[str], reducers.append] = []
    total: Annotated[int, reducers.add] = 0
    note: str = ""


BRANCHES = tuple(f"b{i:02d}" for i in range(20))


def stamp(state: Fan, ctx: RunContext) -> dict[str, Any]:
    return {
        "log": [f"{ctx.node}:{ctx.uuid()[:8]}:{ctx.random():.6f}"],
        "note": ctx.now().isoformat(),
    }


def branch(state: Fan, ctx: RunContext) -> dict[str, Any]:
    return {"log": [f"{ctx.node}:{ctx.random():.6f}"], "total": int(ctx.node[1:])}


def fanout() -> Graph[Fan]:
    """One node fans out to 20 parallel branches, joined by one node."""
    graph = Graph("golden-fanout", state=Fan).with_node("split", stamp).with_edge(START, "split")
    for name in BRANCHES:
        graph = graph.with_node(name, branch, blocking=True).with_edge("split", name)
    return graph.with_node("join", stamp).with_edge(list(BRANCHES), "join").with_edge("join", END)


# ----------------------------------------------------------------------------- (c) nested


class Inner(BaseModel):
    question: str = ""
    answer: str = ""
    items: Annotated[list[str], reducers.append] = []
    total: Annotated[int, reducers.add] = 0
    scratch: list[str] = []


class Out(BaseModel):
    answer: str = ""
    items: Annotated[list[str], reducers.append] = []
    total: Annotated[int, reducers.add] = 0


class Mid(BaseModel):
    question: str = ""
    answer: str = ""
    items: Annotated[list[str], reducers.append] = []
    total: Annotated[int, reducers.add] = 0


class Parent(BaseModel):
    question: str = "why?"
    answer: str = ""
    items: Annotated[list[str], reducers.append] = []
    total: Annotated[int, reducers.add] = 0


def think(state: Inner, ctx: RunContext) -> dict[str, Any]:
    mark = f"{'/'.join(ctx.path)}:{ctx.node}:{ctx.uuid()[:8]}"
    return {"items": [mark], "total": 1, "scratch": [*state.scratch, ctx.node]}


def conclude(state: Inner, ctx: RunContext) -> dict[str, Any]:
    return {"answer": f"{state.question} -> {len(state.scratch)} thoughts at {ctx.now():%H:%M:%S}"}


def mid_step(state: Mid, ctx: RunContext) -> dict[str, Any]:
    return {"items": [f"{ctx.node}:{ctx.random():.6f}"], "total": 100}


def parent_step(state: Parent, ctx: RunContext) -> dict[str, Any]:
    return {"items": [f"{ctx.node}:{ctx.uuid()[:8]}"], "total": 10}


def inner_skill() -> Skill:
    graph = (
        Graph("golden-inner", state=Inner)
        .with_node("t0", think)
        .with_node("t1", think)
        .with_node("conclude", conclude)
        .with_edge(START, "t0")
        .with_edge("t0", "t1")
        .with_edge("t1", "conclude")
        .with_edge("conclude", END)
    )
    return Skill.from_graph(
        graph,
        name="golden-thinker",
        version="1.0.0",
        kind=SkillKind.WORKFLOW,
        description="thinks twice, then concludes",
        state_schema=Out,
    )


def middle_skill() -> Skill:
    graph = (
        Graph("golden-middle", state=Mid)
        .with_node("prepare", mid_step)
        .with_node(SubgraphNode.from_skill(inner_skill(), site="inner"))
        .with_edge(START, "prepare")
        .with_edge("prepare", "inner")
        .with_edge("inner", END)
    )
    return Skill.from_graph(
        graph,
        name="golden-middle",
        version="1.0.0",
        kind=SkillKind.WORKFLOW,
        description="prepares, then mounts the thinker",
        state_schema=Out,
    )


def nested() -> Graph[Parent]:
    """A parent mounting a skill that mounts a skill (depth 2); every level draws entropy."""
    return (
        Graph("golden-nested", state=Parent)
        .with_node("before", parent_step)
        .with_node(SubgraphNode.from_skill(middle_skill(), site="middle"))
        .with_node("after", parent_step)
        .with_edge(START, "before")
        .with_edge("before", "middle")
        .with_edge("middle", "after")
        .with_edge("after", END)
    )


# ----------------------------------------------------------------------------- (d) rules


class Loop(BaseModel):
    log: Annotated[list[str], reducers.append] = []
    done: Annotated[bool, fathom.Fact()] = False
    error_count: int = 0


def work(state: Loop, ctx: RunContext) -> dict[str, Any]:
    return {"log": [f"{ctx.node}@{ctx.step}:{ctx.random():.6f}"]}


def never_loop(state: Loop) -> Literal["again", "stop"]:
    # The edges alone would end the run after one step; only the goto rule loops.
    return "stop"


GOTO_WORK = fathom.RulePack.from_spec(
    {
        "id": "cycle",
        "version": "1",
        "rules": [{"name": "again", "when": [{"node": "work"}], "then": {"goto": "work"}}],
    }
)


def rules() -> Graph[Loop]:
    """A loop kept going by a goto rule and stopped by the default termination pack."""
    return (
        Graph("golden-rules", state=Loop)
        .with_node("work", work)
        .with_edge(START, "work")
        .with_conditional_edges("work", never_loop, {"again": "work", "stop": END})
        .with_rules(GOTO_WORK, fathom.default_termination_pack(max_steps=6, error_budget=3))
    )


# ----------------------------------------------------------------------------- registry


class Golden:
    """One golden run: its graph, input, run id and cassette file."""

    def __init__(
        self,
        name: str,
        build: Callable[[], Graph[Any]],
        input: Mapping[str, Any],
        *,
        llm: bool = False,
    ) -> None:
        self.name = name
        self.build = build
        self.input = dict(input)
        self.llm = llm
        self.run_id = f"golden-{name}"
        self.path = HERE / f"{name}.json"


GOLDENS = (
    Golden("react", react, REACT_TASK, llm=True),
    Golden("fanout", fanout, {}),
    Golden("nested", nested, {"question": "why?"}),
    Golden("rules", rules, {}),
)


def compile_golden(
    golden: Golden, *, services: Mapping[str, Any] | None = None, **options: Any
) -> CompiledGraph[Any]:
    """Compile a golden graph the way it was recorded: seeded, position-keyed entropy."""
    return golden.build().compile(
        entropy=lambda: SeededEntropy(0), services=dict(services or {}), **options
    )
