"""Skills composed as subgraphs: validation, Merkle hashing, site ids, declared outputs,
the three LangGraph subgraph faults, events, and nested durability."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Annotated, Any

import pytest
from pydantic import BaseModel

from stargraph import reducers
from stargraph.checkpoint import SqliteStore
from stargraph.errors import (
    CompileError,
    GraphHashMismatch,
    InvalidWriteError,
    NodeError,
    SkillValidationError,
    UndeclaredOutputError,
)
from stargraph.graph import END, START, Graph
from stargraph.nodes import SubgraphNode
from stargraph.runtime import RunContext, RunFinished
from stargraph.skills import Example, Skill, SkillKind

CALLS: list[str] = []
FAIL: set[str] = set()


class Inner(BaseModel):
    question: str = ""
    answer: str = ""
    items: Annotated[list[str], reducers.append] = []
    total: Annotated[int, reducers.add] = 0
    scratch: list[str] = []  # child-only working memory


class Out(BaseModel):
    answer: str = ""
    items: Annotated[list[str], reducers.append] = []
    total: Annotated[int, reducers.add] = 0


class Parent(BaseModel):
    question: str = "why?"
    answer: str = ""
    items: Annotated[list[str], reducers.append] = []
    total: Annotated[int, reducers.add] = 0
    audit: list[str] = []


def think(state: Inner, ctx: RunContext) -> dict[str, Any]:
    CALLS.append(f"{'/'.join(ctx.path)}:{ctx.node}@{ctx.step}")
    if ctx.node in FAIL:
        raise RuntimeError(f"{ctx.node} failed")
    return {"items": [f"{ctx.node}"], "total": 1, "scratch": [*state.scratch, ctx.node]}


def conclude(state: Inner, ctx: RunContext) -> dict[str, Any]:
    CALLS.append(f"{'/'.join(ctx.path)}:{ctx.node}@{ctx.step}")
    return {"answer": f"{state.question} -> {len(state.scratch)} thoughts"}


def parent_step(state: Parent, ctx: RunContext) -> dict[str, Any]:
    CALLS.append(f"parent:{ctx.node}@{ctx.step}")
    return {"items": [ctx.node], "total": 10}


def skill_graph(n: int = 2) -> Graph[Inner]:
    graph = Graph("inner", state=Inner)
    names = [f"t{i}" for i in range(n)]
    for name in names:
        graph = graph.with_node(name, think)
    graph = graph.with_node("conclude", conclude).with_edge(START, names[0])
    for a, b in zip(names, [*names[1:], "conclude"], strict=True):
        graph = graph.with_edge(a, b)
    return graph.with_edge("conclude", END)


def make_skill(n: int = 2, **extra: Any) -> Skill:
    fields: dict[str, Any] = {
        "name": "thinker",
        "version": "1.0.0",
        "kind": SkillKind.WORKFLOW,
        "description": "thinks, then concludes",
        "state_schema": Out,
        "examples": (Example(input={"question": "q"}),),
    }
    fields.update(extra)
    return Skill.from_graph(skill_graph(n), **fields)


def parent_graph(skill: Skill, **mount: Any) -> Graph[Parent]:
    return (
        Graph("parent", state=Parent)
        .with_node("before", parent_step)
        .with_node(SubgraphNode.from_skill(skill, site="step-3", **mount))
        .with_node("after", parent_step)
        .with_edge(START, "before")
        .with_edge("before", "step-3")
        .with_edge("step-3", "after")
        .with_edge("after", END)
    )


@pytest.fixture(autouse=True)
def _reset() -> None:
    CALLS.clear()
    FAIL.clear()


# ------------------------------------------------------------------ Skill validation (E1 E2 E8)


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("name", "Not A Slug", "skill name is not a slug: 'Not A Slug'"),
        ("version", "1.0", "version is not SemVer: '1.0'"),
        ("tools", ("fetch",), "tool id 'fetch' is not '<ns>.<name>@<semver>'"),
        ("kind", "wizard", "Input should be 'agent', 'workflow' or 'utility' (got 'wizard')"),
    ],
)
def test_skill_validators_name_field_and_value(field: str, value: Any, message: str) -> None:
    with pytest.raises(SkillValidationError) as info:
        make_skill(**{field: value})
    assert message in str(info.value)
    assert f"/{field}" in str(info.value)


@pytest.mark.parametrize(
    ("name", "suggested"),
    [("Triage_Flow", "'triage-flow'"), ("web research 2", "'web-research-2'"), ("9x", "e.g.")],
)
def test_a_name_that_is_no_slug_gets_the_slug_to_use_and_why_node_ids_differ(
    name: str, suggested: str
) -> None:
    """A node id like ``triage_flow`` is fine while the same skill name is refused: the
    error says which name to use instead, and that the mounted node keeps any id."""
    with pytest.raises(SkillValidationError) as info:
        make_skill(name=name)
    message = str(info.value)
    assert f"use {suggested}" in message
    assert "as SKILL.md names are" in message
    assert "SubgraphNode.from_skill(skill, node_id=...)" in message


def test_set_field_rejected_frozenset_accepted() -> None:
    class WithSet(BaseModel):
        tags: set[str] = set()

    class WithFrozen(BaseModel):
        tags: frozenset[str] = frozenset()

    with pytest.raises(SkillValidationError, match="sets have no stable order"):
        Skill(
            name="s-1",
            version="1.0.0",
            kind="utility",
            description="",
            subgraph=None,
            state_schema=WithSet,
        )
    Skill(
        name="s-1",
        version="1.0.0",
        kind="utility",
        description="",
        subgraph=None,
        state_schema=WithFrozen,
    )


def test_utility_skill_with_a_write_tool_is_rejected() -> None:
    skill = Skill(
        name="util",
        version="1.0.0",
        kind="utility",
        description="",
        subgraph=None,
        state_schema=Out,
        tools=("fs.read@1.0.0", "fs.write@1.0.0"),
    )
    with pytest.raises(SkillValidationError) as info:
        skill.check_tools({"fs.read@1.0.0": "read", "fs.write@1.0.0": "write"})
    assert "utility skill uses tool 'fs.write@1.0.0' whose side effect is 'write'" in str(
        info.value
    )
    agent = skill.model_copy(update={"kind": SkillKind.AGENT})
    agent.check_tools({"fs.read@1.0.0": "read", "fs.write@1.0.0": "write"})


def llm(state: Inner) -> dict[str, Any]:
    return {}


def route(state: Inner) -> str:
    return "done"


def test_workflow_skill_with_llm_routing_is_rejected() -> None:
    graph = (
        Graph("routed", state=Inner)
        .with_node("llm", llm, must_stub=True)
        .with_edge(START, "llm")
        .with_conditional_edges("llm", route, {"done": END})
    )
    with pytest.raises(SkillValidationError, match="routes on the output of LLM node 'llm'"):
        Skill.from_graph(
            graph, name="wf", version="1.0.0", kind="workflow", description="", state_schema=Out
        )
    Skill.from_graph(
        graph, name="wf", version="1.0.0", kind="agent", description="", state_schema=Out
    )


def test_missing_subgraph_hash_names_hash_and_skill() -> None:
    ref = "sha256:" + "ab" * 32
    skill = Skill(
        name="remote", version="1.0.0", kind="agent", description="", subgraph=ref, state_schema=Out
    )
    with pytest.raises(SkillValidationError) as info:
        SubgraphNode.from_skill(skill)
    assert ref in str(info.value)
    assert "'remote'" in str(info.value)


# ------------------------------------------------------------------ composition


def test_seed_example_compiles_and_runs() -> None:
    parent_ir = Graph("host", state=Parent).with_node("before", parent_step).to_ir()
    graph: Graph[Any] = Graph(parent_ir).with_node(
        SubgraphNode.from_skill(make_skill(), site="step-3")
    )
    graph = graph.with_edge(START, "before").with_edge("before", "step-3")
    final = graph.with_edge("step-3", END).compile().invoke({})
    assert final.answer == "why? -> 2 thoughts"


def test_child_writes_reach_the_parent_once_through_its_reducers() -> None:
    final = parent_graph(make_skill()).compile().invoke({"items": ["seed"], "total": 100})
    # LangGraph fault 1: an appended list is not duplicated across the boundary.
    assert final.items == ["seed", "before", "t0", "t1", "after"]
    # LangGraph fault 2: the child's adds arrive once (2), parent adds 10 twice.
    assert final.total == 100 + 10 + 2 + 10
    assert final.answer == "why? -> 2 thoughts"
    # Child-only fields never reach the parent.
    assert "scratch" not in Parent.model_fields


def untouched(state: Inner, ctx: RunContext) -> dict[str, Any]:
    state.items.append("mutated in place")  # tries to reach the parent by aliasing
    return {"answer": "only this"}


def test_summed_key_the_child_did_not_write_is_not_added_again() -> None:
    graph = Graph("quiet", state=Inner).with_node("only", untouched)
    graph = graph.with_edge(START, "only").with_edge("only", END)
    skill = Skill.from_graph(
        graph, name="quiet", version="1.0.0", kind="workflow", description="", state_schema=Out
    )
    final = parent_graph(skill).compile().invoke({"total": 5, "items": ["x"]})
    assert final.total == 5 + 10 + 10  # no re-application of the child's (unchanged) total
    assert final.items == ["x", "before", "after"]  # LangGraph fault 3: in-place mutation
    assert final.answer == "only this"


def test_outputs_excluding_a_key_keep_it_unchanged() -> None:
    final = parent_graph(make_skill(), outputs={"answer": "answer"}).compile().invoke({})
    assert final.answer == "why? -> 2 thoughts"
    assert final.items == ["before", "after"]
    assert final.total == 20


def test_input_and_output_projection_to_other_channels() -> None:
    final = (
        parent_graph(
            make_skill(),
            inputs={"question": "answer"},
            outputs={"answer": "question"},
        )
        .compile()
        .invoke({"answer": "from parent"})
    )
    assert final.question == "from parent -> 2 thoughts"
    assert final.answer == "from parent"


def writes_audit(state: Inner) -> dict[str, Any]:
    return {"answer": "a"}


class Leaky(BaseModel):
    answer: str = ""
    audit: list[str] = []  # same name as a parent channel, not declared by the skill


def leak(state: Leaky) -> dict[str, Any]:
    return {"audit": ["sneaky"], "answer": "leaked"}


def _leaky_skill(writes: list[str] | None) -> Skill:
    graph = Graph("leaky", state=Leaky).with_node("leak", leak, writes=writes)
    graph = graph.with_edge(START, "leak").with_edge("leak", END)

    class LeakyOut(BaseModel):
        answer: str = ""

    return Skill.from_graph(
        graph, name="leaky", version="1.0.0", kind="workflow", description="", state_schema=LeakyOut
    )


def test_skill_compile_rejects_undeclared_output() -> None:
    with pytest.raises(UndeclaredOutputError) as info:
        parent_graph(_leaky_skill(["answer", "audit"])).compile()
    assert str(info.value) == (
        "graph 'parent' is invalid: /nodes/2/subgraph/nodes/0/writes: node 'step-3' (skill "
        "leaky@1.0.0): child node 'leak' writes 'audit', a channel of the parent that the "
        "skill does not declare (declared: ['answer']) (fix: declare it in the skill's "
        "state_schema or rename the child field)"
    )
    with pytest.raises(UndeclaredOutputError, match="does not declare output 'audit'"):
        SubgraphNode.from_skill(_leaky_skill(None), outputs={"audit": "audit"})


def test_dynamic_undeclared_write_fails_and_leaves_the_parent_untouched(tmp_path: Path) -> None:
    store = SqliteStore(tmp_path / "s.db")
    app = parent_graph(_leaky_skill(None)).compile(store=store)
    with pytest.raises(InvalidWriteError) as info:
        app.invoke({}, run_id="r")
    assert str(info.value) == (
        "skill at site 'step-3': child node 'leak' wrote 'audit', a channel of the parent that "
        "the skill does not declare (declared outputs: ['answer']); add it to the skill's "
        "state_schema or rename the child's field"
    )
    assert app.get_run("r").last_step == 1  # no checkpoint for the failing step
    assert app.get_state("r").audit == []
    store.close()


# ------------------------------------------------------------------ hashing and sites


def test_child_change_changes_the_parent_hash_and_blocks_resume(tmp_path: Path) -> None:
    store = SqliteStore(tmp_path / "s.db")
    old = parent_graph(make_skill(2)).compile(store=store)
    FAIL.add("t1")
    with pytest.raises(NodeError):
        old.invoke({}, run_id="r")
    new = parent_graph(make_skill(3)).compile(store=store)
    assert new.graph_hash != old.graph_hash
    with pytest.raises(GraphHashMismatch):
        new.resume("r")
    store.close()


def test_site_ids_are_stable_and_distinct() -> None:
    skill = make_skill()
    base = parent_graph(skill)
    bigger = base.with_node("unrelated", parent_step).with_edge("before", "unrelated")
    bigger = bigger.with_edge("unrelated", END)
    events = [e for e in bigger.compile().stream({}) if e.path]
    assert {e.path for e in events} == {("step-3",)}
    # One skill mounted twice gets two site ids.
    twice = (
        Graph("twice", state=Parent)
        .with_node(SubgraphNode.from_skill(skill, node_id="first"))
        .with_node(SubgraphNode.from_skill(skill, node_id="second"))
        .with_edge(START, "first")
        .with_edge("first", "second")
        .with_edge("second", END)
    )
    paths = {e.path for e in twice.compile().stream({}) if e.path}
    assert paths == {("first",), ("second",)}


def test_duplicate_site_is_a_compile_error() -> None:
    skill = make_skill()
    graph = (
        Graph("dup", state=Parent)
        .with_node(SubgraphNode.from_skill(skill, site="s", node_id="a"))
        .with_node(SubgraphNode.from_skill(skill, site="s", node_id="b"))
        .with_edge(START, "a")
        .with_edge("a", "b")
        .with_edge("b", END)
    )
    with pytest.raises(CompileError, match="uses site 's', already used by node 'a'"):
        graph.compile()


def test_site_ids_match_across_processes() -> None:
    code = (
        "import sys; sys.path.insert(0, sys.argv[1])\n"
        "from tests.skills.test_skills import make_skill, parent_graph\n"
        "app = parent_graph(make_skill()).compile()\n"
        "print(app.graph_hash, sorted({'/'.join(e.path) for e in app.stream({}) if e.path}))\n"
    )
    outs = {
        subprocess.run(
            [sys.executable, "-c", code, str(Path(__file__).parents[2])],
            capture_output=True,
            text=True,
            check=True,
            env={**os.environ, "PYTHONHASHSEED": seed},
        ).stdout
        for seed in ("1", "2")
    }
    assert len(outs) == 1
    assert "['step-3']" in outs.pop()


def test_forged_embedded_subgraph_is_rejected() -> None:
    ir = parent_graph(make_skill()).to_ir()
    data = ir.model_dump(mode="json")
    key = next(iter(data["subgraphs"]))
    data["subgraphs"][key]["name"] = "tampered"
    from stargraph.ir import GraphIR

    with pytest.raises(CompileError, match="it was altered after embedding"):
        Graph(GraphIR.model_validate(data)).compile()


# ------------------------------------------------------------------ events


def test_bubble_events_on_and_off() -> None:
    on = list(parent_graph(make_skill()).compile().stream({}, run_id="r"))
    child = [e for e in on if e.path == ("step-3",)]
    assert [e.kind for e in child if e.kind == "node_finished"] == ["node_finished"] * 3
    assert child[0].run_id == "r::step-3@1.0"
    # The child's events come before the subgraph node's own node_finished.
    position = next(i for i, e in enumerate(on) if e.kind == "node_finished" and e.node == "step-3")
    assert all(on.index(e) < position for e in child)
    off = list(parent_graph(make_skill(bubble_events=False)).compile().stream({}))
    assert [e for e in off if e.path] == []
    finished = off[-1]
    assert isinstance(finished, RunFinished)
    assert finished.state["answer"] == "why? -> 2 thoughts"  # the child still ran


# ------------------------------------------------------------------ nested durability


def test_crash_inside_the_child_resumes_inside_the_child(tmp_path: Path) -> None:
    store = SqliteStore(tmp_path / "s.db")
    app = parent_graph(make_skill(3)).compile(store=store)
    FAIL.add("t2")
    with pytest.raises(NodeError):
        app.invoke({}, run_id="r")
    FAIL.clear()
    assert app.get_run("r::step-3@1.0").last_step == 2  # the child checkpointed t0, t1
    final = app.resume("r")
    assert final.answer == "why? -> 3 thoughts"
    assert final.items == ["before", "t0", "t1", "t2", "after"]
    child_calls = [c for c in CALLS if c.startswith("step-3:")]
    assert child_calls == [
        "step-3:t0@1",
        "step-3:t1@2",
        "step-3:t2@3",  # first attempt (t2 failed)
        "step-3:t2@3",
        "step-3:conclude@4",  # resumed inside the child
    ]
    store.close()


class Mid(BaseModel):
    """A middle level's state: the skill's outputs, none of its working memory."""

    question: str = ""
    answer: str = ""
    items: Annotated[list[str], reducers.append] = []
    total: Annotated[int, reducers.add] = 0


def nested_skill(depth: int) -> Skill:
    skill = make_skill(1)
    for level in range(depth - 1):
        graph = (
            Graph(f"level{level}", state=Mid)
            .with_node(SubgraphNode.from_skill(skill, site=f"L{level}"))
            .with_edge(START, f"L{level}")
            .with_edge(f"L{level}", END)
        )
        skill = Skill.from_graph(
            graph,
            name=f"level-{level}",
            version="1.0.0",
            kind="workflow",
            description="",
            state_schema=Out,
        )
    return skill


def test_three_levels_of_nesting(tmp_path: Path) -> None:
    store = SqliteStore(tmp_path / "s.db")
    app = parent_graph(nested_skill(3)).compile(store=store)
    final = app.invoke({}, run_id="r")
    assert final.items == ["before", "t0", "after"]
    assert final.answer == "why? -> 1 thoughts"
    runs = sorted(r.run_id for r in store.list_runs())
    assert runs == ["r", "r::step-3@1.0", "r::step-3@1.0::L1@1.0", "r::step-3@1.0::L1@1.0::L0@1.0"]
    store.close()
