"""Mermaid and DOT export: golden text for the example graphs, a subgraph cluster, rule packs,
escaping and determinism."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import BaseModel

from stargraph import fathom
from stargraph.examples import basics
from stargraph.graph import END, START, Graph
from stargraph.ir import GraphIR
from stargraph.nodes import SubgraphNode
from stargraph.skills import Skill, SkillKind
from stargraph.viz import to_dot, to_mermaid


def _body(text: str) -> str:
    # The second line of Mermaid output is a comment with the graph hash, pinned elsewhere.
    lines = text.splitlines()
    return "\n".join(lines[:1] + lines[2:]) + "\n"


CHAIN_MERMAID = """\
flowchart TD
    __end__(["END"])
    __start__(["START"])
    n0["n0"]
    n1["n1"]
    n2["n2"]
    __start__ --> n0
    n0 --> n1
    n1 --> n2
    n2 --> __end__
"""

LOOP_MERMAID = """\
flowchart TD
    __end__(["END"])
    __start__(["START"])
    step["step"]
    __start__ --> step
    step -.->|"done"| __end__
    step -.->|"again"| step
"""

FANOUT_MERMAID = """\
flowchart TD
    __end__(["END"])
    __join0__(("all"))
    __start__(["START"])
    b0["b0"]
    b1["b1"]
    b2["b2"]
    join["join"]
    start["start"]
    __join0__ --> join
    __start__ --> start
    b0 --> __join0__
    b1 --> __join0__
    b2 --> __join0__
    join --> __end__
    start --> b0
    start --> b1
    start --> b2
    classDef joinmark fill:#eeeeee,stroke:#666666
    class __join0__ joinmark
"""

MAPREDUCE_MERMAID = """\
flowchart TD
    __end__(["END"])
    __start__(["START"])
    plan["plan"]
    work["work"]
    __start__ --> plan
    plan -.->|"work"| work
    work --> __end__
"""

CHAIN_DOT = """\
digraph "chain" {
    graph [rankdir=TB, compound=true, fontname="Helvetica", tooltip="HASH"];
    node [fontname="Helvetica"];
    edge [fontname="Helvetica", fontsize=10];
    "__end__" [label="END", shape=oval, style=filled, fillcolor="#eeeeee"];
    "__start__" [label="START", shape=oval, style=filled, fillcolor="#eeeeee"];
    "n0" [label="n0", shape=box, style=rounded];
    "n1" [label="n1", shape=box, style=rounded];
    "n2" [label="n2", shape=box, style=rounded];
    "__start__" -> "n0";
    "n0" -> "n1";
    "n1" -> "n2";
    "n2" -> "__end__";
}
"""

LOOP_DOT_EDGES = [
    '    "__start__" -> "step";',
    '    "step" -> "__end__" [label="done", style=dashed];',
    '    "step" -> "step" [label="again", style=dashed];',
]

FANOUT_DOT_JOIN = [
    '    "__join0__" [label="all", shape=circle, style=filled, fillcolor="#eeeeee", fontsize=10];',
    '    "__join0__" -> "join";',
    '    "b0" -> "__join0__";',
]

MAPREDUCE_DOT_EDGES = ['    "plan" -> "work" [label="work", style=dashed];']


@pytest.mark.parametrize(
    ("factory", "golden"),
    [
        (basics.chain_graph, CHAIN_MERMAID),
        (basics.loop_graph, LOOP_MERMAID),
        (basics.fanout_graph, FANOUT_MERMAID),
        (basics.mapreduce_graph, MAPREDUCE_MERMAID),
    ],
)
def test_mermaid_golden_for_the_example_graphs(factory: Any, golden: str) -> None:
    ir = factory().to_ir()
    text = to_mermaid(ir)
    assert text.splitlines()[1] == f"    %% {ir.name} {ir.graph_hash}"
    assert _body(text) == golden


def test_dot_golden_for_the_chain() -> None:
    ir = basics.chain_graph().to_ir()
    assert to_dot(ir) == CHAIN_DOT.replace("HASH", ir.graph_hash)


@pytest.mark.parametrize(
    ("factory", "lines"),
    [
        (basics.loop_graph, LOOP_DOT_EDGES),
        (basics.fanout_graph, FANOUT_DOT_JOIN),
        (basics.mapreduce_graph, MAPREDUCE_DOT_EDGES),
    ],
)
def test_dot_draws_conditional_edges_and_joins(factory: Any, lines: list[str]) -> None:
    text = to_dot(factory().to_ir())
    for line in lines:
        assert line in text.splitlines()


# --------------------------------------------------------------------------- subgraphs


class Inner(BaseModel):
    question: str = ""
    answer: str = ""


class Out(BaseModel):
    answer: str = ""


class Parent(BaseModel):
    question: str = "why?"
    answer: str = ""


def think(state: Inner) -> dict[str, Any]:
    return {"answer": f"{state.question}!"}


def parent_step(state: Parent) -> dict[str, Any]:
    return {}


def _skill() -> Skill:
    inner = (
        Graph("inner", state=Inner)
        .with_node("t0", think)
        .with_node("t1", think)
        .with_edge(START, "t0")
        .with_edge("t0", "t1")
        .with_edge("t1", END)
    )
    return Skill.from_graph(
        inner,
        name="thinker",
        version="1.0.0",
        kind=SkillKind.WORKFLOW,
        description="thinks twice",
        state_schema=Out,
    )


def _parent() -> GraphIR:
    return (
        Graph("parent", state=Parent)
        .with_node("before", parent_step)
        .with_node(SubgraphNode.from_skill(_skill(), site="step-3"))
        .with_edge(START, "before")
        .with_edge("before", "step-3")
        .with_edge("step-3", END)
        .to_ir()
    )


SUBGRAPH_MERMAID = """\
flowchart TD
    __end__(["END"])
    __start__(["START"])
    before["before"]
    subgraph step_3 ["step-3: thinker@1.0.0"]
        direction TB
        step_3__end(["end"])
        step_3__start(["start"])
        step_3__t0["t0"]
        step_3__t1["t1"]
    end
    __start__ --> before
    before --> step_3__start
    step_3__end --> __end__
    step_3__start --> step_3__t0
    step_3__t0 --> step_3__t1
    step_3__t1 --> step_3__end
"""

SUBGRAPH_DOT_CLUSTER = """\
    subgraph "cluster_step_3" {
        label="step-3: thinker@1.0.0";
        style=rounded;
        "step_3__end" [label="end", shape=oval, style=filled, fillcolor="#eeeeee"];
        "step_3__start" [label="start", shape=oval, style=filled, fillcolor="#eeeeee"];
        "step_3__t0" [label="t0", shape=box, style=rounded];
        "step_3__t1" [label="t1", shape=box, style=rounded];
    }
"""


def test_subgraph_node_is_drawn_as_a_cluster_holding_the_child_graph() -> None:
    ir = _parent()
    assert _body(to_mermaid(ir)) == SUBGRAPH_MERMAID
    dot = to_dot(ir)
    assert SUBGRAPH_DOT_CLUSTER in dot
    assert '    "before" -> "step_3__start";' in dot
    assert '    "step_3__end" -> "__end__";' in dot


def test_nested_subgraphs_are_clusters_within_clusters() -> None:
    mid = Skill.from_graph(
        Graph("mid", state=Parent)
        .with_node(SubgraphNode.from_skill(_skill(), site="deep"))
        .with_edge(START, "deep")
        .with_edge("deep", END),
        name="middle",
        version="2.0.0",
        kind=SkillKind.WORKFLOW,
        description="wraps the thinker",
        state_schema=Out,
    )
    ir = (
        Graph("top", state=Parent)
        .with_node(SubgraphNode.from_skill(mid, site="outer"))
        .with_edge(START, "outer")
        .with_edge("outer", END)
        .to_ir()
    )
    text = to_mermaid(ir)
    assert '    subgraph outer ["outer: middle@2.0.0"]' in text
    assert '        subgraph outer__deep ["deep: thinker@1.0.0"]' in text
    assert "            outer__deep__t0" in text
    assert 'subgraph "cluster_outer__deep" {' in to_dot(ir)


def test_missing_child_ir_is_drawn_as_a_marked_node() -> None:
    ir = _parent()
    broken = GraphIR.model_validate({**ir.model_dump(), "subgraphs": {}})
    assert "missing subgraph sha256:" in to_mermaid(broken)
    assert 'color="#cc0000"' in to_dot(broken)


# --------------------------------------------------------------------------- rules


class Loop(BaseModel):
    log: list[str] = []


def work(state: Loop) -> dict[str, Any]:
    return {"log": [*state.log, "w"]}


def stop(state: Loop) -> str:
    return "stop"


GOTO = fathom.RulePack.from_spec(
    {
        "id": "cycle",
        "version": "1",
        "rules": [{"name": "again", "when": [{"node": "work"}], "then": {"goto": "work"}}],
    }
)

ANYWHERE = fathom.RulePack.from_clp(
    "anywhere",
    "2",
    "(defrule jump (sg-step (step ?s)) => "
    '(assert (sg-decision (kind goto) (target "work") (rule jump))))',
)


def test_rule_packs_get_a_legend_a_node_marker_and_goto_edges() -> None:
    ir = (
        Graph("ruled", state=Loop)
        .with_node("work", work, rules=[ANYWHERE])
        .with_node("other", work)
        .with_edge(START, "work")
        .with_conditional_edges("work", stop, {"again": "work", "stop": END})
        .with_edge("other", END)
        .with_rules(GOTO, fathom.default_termination_pack(max_steps=5, error_budget=2))
        .to_ir()
    )
    mermaid = to_mermaid(ir)
    assert '    __rules__[/"rule packs<br/>cycle@1<br/>termination@2"/]' in mermaid
    assert '    work["work<br/>[rules: anywhere@2]"]' in mermaid
    assert '    work ==>|"rule again"| work' in mermaid
    # A node pack's rule that matches any node still only fires after its own node.
    assert '    work ==>|"rule jump"| work' in mermaid
    assert "class work ruled" in mermaid
    dot = to_dot(ir)
    assert '"work" -> "work" [label="rule again", style=bold' in dot
    assert 'shape=note, style=filled, fillcolor="#fff8dc"' in dot
    assert 'color="#b8860b", penwidth=3' in dot


def test_graph_rule_without_a_literal_node_routes_from_the_legend() -> None:
    ir = (
        Graph("ruled", state=Loop)
        .with_node("work", work)
        .with_edge(START, "work")
        .with_edge("work", END)
        .with_rules(ANYWHERE)
        .to_ir()
    )
    assert '    __rules__ ==>|"rule jump"| work' in to_mermaid(ir)


# --------------------------------------------------------------------------- text safety


def test_labels_are_escaped_and_ids_are_safe() -> None:
    ir = (
        Graph('odd "name"\n<b>', state=Loop)
        .with_node('say "hi" <x>', work)
        .with_node("end", work)
        .with_node("a-b", work)
        .with_node("a_b", work)
        .with_edge(START, 'say "hi" <x>')
        .with_edge('say "hi" <x>', "end")
        .with_edge("end", "a-b")
        .with_edge("a-b", "a_b")
        .with_edge("a_b", END)
        .to_ir()
    )
    mermaid = to_mermaid(ir)
    assert 'say__hi___x_["say #quot;hi#quot; #lt;x#gt;"]' in mermaid
    assert 'n_end["end"]' in mermaid  # "end" closes a Mermaid block; never an id
    assert 'a_b["a-b"]' in mermaid
    assert 'a_b_2["a_b"]' in mermaid
    assert "<x>" not in mermaid
    dot = to_dot(ir)
    assert 'digraph "odd \\"name\\"\\n<b>" {' in dot
    assert '[label="say \\"hi\\" <x>"' in dot


def test_output_does_not_depend_on_declaration_order() -> None:
    a = basics.fanout_graph().to_ir()
    b = GraphIR.model_validate_json(a.to_json())
    reordered = GraphIR.model_validate(
        {**a.model_dump(), "nodes": list(reversed(a.model_dump()["nodes"]))}
    )
    assert to_mermaid(a) == to_mermaid(b) == to_mermaid(reordered)
    assert to_dot(a) == to_dot(b) == to_dot(reordered)
