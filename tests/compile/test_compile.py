"""The compiler collects every problem into one CompileError, each with pointer and hint."""

from __future__ import annotations

import collections.abc
from typing import Annotated, Any

import pytest
from pydantic import BaseModel

from stargraph import reducers
from stargraph.errors import CompileError, Problem
from stargraph.graph import END, START, Graph


class S(BaseModel):
    n: int = 0
    items: Annotated[list[str], reducers.append] = []


class SetState(BaseModel):
    tags: set[str] = set()
    nested: list[set[int]] = []
    ok: frozenset[str] = frozenset()


class TwoReducers(BaseModel):
    items: Annotated[list[str], reducers.append, reducers.merge] = []


def inc(state: S) -> dict[str, Any]:
    return {"n": state.n + 1}


def three_args(state: S, ctx: Any, extra: Any) -> None:
    return None


def _messages(exc: CompileError) -> list[str]:
    return [p.render() for p in exc.problems]


def test_three_faults_in_one_error() -> None:
    graph = (
        Graph("bad", state=S)
        .with_node("a", inc, writes=["n", "missing"])  # fault 1: undeclared channel
        .with_node("b", inc)
        .with_edge(START, "a")
        .with_edge("a", "c")  # fault 2: dangling edge
        .with_edge("a", END)
        .with_edge("b", END)  # fault 3: b unreachable
    )
    with pytest.raises(CompileError) as info:
        graph.compile()
    assert _messages(info.value) == [
        "/nodes/0/writes: node 'a' declares a write to 'missing', which is not a channel of "
        "the state (channels: ['items', 'n']) (fix: add the field to the state model or "
        "remove it from writes)",
        "/edges/1/target: edge points at unknown node 'c' (fix: add the node with with_node() "
        "or fix the edge)",
        "/nodes/1: node 'b' is unreachable from START (fix: add an edge into it, or remove it)",
    ]
    assert str(info.value).startswith("graph 'bad' has 3 problems:\n  - /nodes/0/writes")


def test_set_fields_rejected_frozenset_accepted() -> None:
    graph = Graph("sets", state=SetState).with_node("a", inc).with_edge(START, "a")
    graph = graph.with_edge("a", END)
    with pytest.raises(CompileError) as info:
        graph.compile()
    rendered = _messages(info.value)
    assert rendered[0] == (
        "/state/fields/tags: field 'tags' has type set[str]: sets have no stable order, so "
        "states would not hash or replay identically (fix: use frozenset (merged in sorted "
        "order) or a list)"
    )
    assert rendered[1].startswith("/state/fields/nested: field 'nested' has type list[set[int]]")
    assert not any("'ok'" in m for m in rendered)


class AbcSetState(BaseModel):
    marks: collections.abc.MutableSet[str] = set()


def test_issue23_abc_mutable_set_field_rejected_as_in_nested_models() -> None:
    # The top-level check missed collections.abc.MutableSet, which the nested-model check
    # (skills) caught: one check serves both now.
    graph = Graph("abc", state=AbcSetState).with_node("a", inc).with_edge(START, "a")
    with pytest.raises(CompileError) as info:
        graph.with_edge("a", END).compile()
    assert [p.pointer for p in info.value.problems] == ["/state/fields/marks"]
    assert "sets have no stable order" in info.value.problems[0].message


def test_conflicting_reducers() -> None:
    graph = Graph("r", state=TwoReducers).with_node("a", inc).with_edge(START, "a")
    with pytest.raises(CompileError) as info:
        graph.with_edge("a", END).compile()
    assert _messages(info.value) == [
        "/state/fields/items: field 'items' declares 2 reducers ['append', 'merge']: "
        "conflicting (fix: keep exactly one reducer in the Annotated[...] metadata)"
    ]


def test_node_that_cannot_reach_end_and_missing_entry() -> None:
    graph = (
        Graph("stuck", state=S)
        .with_node("a", inc)
        .with_node("b", inc)
        .with_edge("a", "b")
        .with_edge("b", "a")
    )
    with pytest.raises(CompileError) as info:
        graph.compile()
    assert _messages(info.value) == [
        "/entry: the graph has no entry node (fix: add with_edge(START, 'first'))",
        "/nodes/0: node 'a' is unreachable from START (fix: add an edge into it, or remove it)",
        "/nodes/1: node 'b' is unreachable from START (fix: add an edge into it, or remove it)",
    ]
    looped = graph.with_edge(START, "a")
    with pytest.raises(CompileError) as info:
        looped.compile()
    assert _messages(info.value) == [
        "/nodes/0: node 'a' cannot reach END (fix: add an edge from 'a' (or a node after it) "
        "to END)",
        "/nodes/1: node 'b' cannot reach END (fix: add an edge from 'b' (or a node after it) "
        "to END)",
    ]


def test_duplicate_and_malformed_ids() -> None:
    graph = (
        Graph("ids", state=S)
        .with_node("a", inc)
        .with_node("a", inc)
        .with_node("bad id", inc)
        .with_edge(START, "a")
        .with_edge(START, "bad id")
        .with_edge("a", END)
        .with_edge("bad id", END)
    )
    with pytest.raises(CompileError) as info:
        graph.compile()
    rendered = _messages(info.value)
    assert "/nodes/1/id: duplicate node id 'a' (fix: give each node its own id)" in rendered
    assert any(m.startswith("/nodes/2/id: malformed node id 'bad id'") for m in rendered)


def test_did_you_mean() -> None:
    graph = Graph("typo", state=S).with_node("fetch", inc).with_edge(START, "fetch")
    with pytest.raises(CompileError) as info:
        graph.with_edge("fetch", "fetsh").compile()
    assert _messages(info.value)[0] == (
        "/edges/0/target: edge points at unknown node 'fetsh' (fix: did you mean 'fetch'? add "
        "the node first or fix the edge)"
    )


def test_bad_signature() -> None:
    graph = Graph("sig", state=S).with_node("a", three_args).with_edge(START, "a")
    with pytest.raises(CompileError) as info:
        graph.with_edge("a", END).compile()
    assert _messages(info.value) == [
        "/nodes/0/ref: node 'a' callable 'tests.compile.test_compile:three_args' must take "
        "(state) or (state, ctx) (fix: change its signature to def fn(state) or def fn(state, ctx))"
    ]


def test_issue46_lambda_runs_in_process_and_its_ir_asks_for_a_factory() -> None:
    graph = Graph("l", state=S).with_node("a", lambda s: {"n": 7})
    graph = graph.with_edge(START, "a").with_edge("a", END)
    assert graph.compile().invoke({}).n == 7
    with pytest.raises(CompileError) as info:
        Graph(graph.to_ir()).compile()
    assert "records no factory" in str(info.value)
    assert "factory=(make_fn, {json keyword args})" in str(info.value)


def test_closure_with_registry_id_runs_and_reloads() -> None:
    offset = 10

    def add_offset(state: S) -> dict[str, Any]:
        return {"n": state.n + offset}

    graph = (
        Graph("closure", state=S)
        .with_node("a", add_offset, ref="tests.add_offset")
        .with_edge(START, "a")
        .with_edge("a", END)
    )
    assert graph.compile().invoke({}).n == 10
    ir = graph.to_ir()
    with pytest.raises(CompileError, match="registry id that nothing registered"):
        Graph(ir).compile()
    assert Graph(ir, impls={"tests.add_offset": add_offset}).compile().invoke({}).n == 10


def test_router_without_mapping_or_literal() -> None:
    def route(state: S) -> str:
        return "a"

    with pytest.raises(CompileError, match="has no mapping and no Literal return annotation"):
        Graph("r", state=S).with_node("a", inc).with_conditional_edges("a", route, ref="r.route")


def test_state_must_be_a_model() -> None:
    with pytest.raises(CompileError) as info:
        Graph("x", state=dict)  # type: ignore[type-var]
    assert "state must be a pydantic BaseModel subclass" in str(info.value)


def test_stale_ir_state_is_reported() -> None:
    ir = Graph("x", state=S).with_node("a", inc).with_edge(START, "a").with_edge("a", END).to_ir()
    data = ir.model_dump(mode="json")
    data["state"]["fields"][1]["type"] = "float"
    from stargraph.ir import GraphIR

    with pytest.raises(CompileError, match="no longer matches the IR's state fields"):
        Graph(GraphIR.model_validate(data)).compile()


def test_problem_render() -> None:
    assert Problem("/a", "bad").render() == "/a: bad"
    assert Problem("/a", "bad", "fix it").render() == "/a: bad (fix: fix it)"
