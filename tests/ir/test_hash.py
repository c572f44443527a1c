"""Invariant 1: the graph hash covers everything behavioural and nothing cosmetic."""

from __future__ import annotations

import copy
import json
import os
import random
import subprocess
import sys
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from stargraph.examples.basics import chain_graph, fanout_graph, loop_graph, mapreduce_graph
from stargraph.graph import END, START, Graph
from stargraph.ir import GraphIR

BASE = loop_graph().to_ir()
FAN = fanout_graph().to_ir()


def _data(ir: GraphIR = BASE) -> dict[str, Any]:
    return copy.deepcopy(ir.model_dump(mode="json"))


def _rehash(data: dict[str, Any]) -> str:
    return GraphIR.model_validate(data).graph_hash


def _field(data: dict[str, Any], name: str) -> dict[str, Any]:
    return next(f for f in data["state"]["fields"] if f["name"] == name)


def _kind(d: dict[str, Any]) -> None:
    node = d["nodes"][0]
    d["nodes"][0] = {"kind": "subgraph", "id": node["id"], "graph": "sha256:" + "0" * 64}


BEHAVIOURAL: dict[str, Callable[[dict[str, Any]], None]] = {
    "node kind": _kind,
    "node ref": lambda d: d["nodes"][0].update(ref="stargraph.examples.basics:tally"),
    "node config": lambda d: d["nodes"][0].update(config={"temperature": 0.5}),
    "node writes": lambda d: d["nodes"][0].update(writes=["counter"]),
    "node retry": lambda d: d["nodes"][0].update(retry={"max_attempts": 5}),
    "node destinations": lambda d: d["nodes"][0].update(destinations=["__end__"]),
    "node timeout": lambda d: d["nodes"][0].update(timeout_s=3.0),
    "node interrupt": lambda d: d["nodes"][0].update(interrupt_before=True),
    "node blocking": lambda d: d["nodes"][0].update(blocking=True),
    "node must_stub": lambda d: d["nodes"][0].update(must_stub=True),
    "node rules": lambda d: d["nodes"][0].update(
        rules=[{"id": "p", "version": "1.0.0", "source": "(defrule r =>)"}]
    ),
    "edge target": lambda d: d["edges"][0]["mapping"].update(done="step"),
    "router ref": lambda d: d["edges"][0].update(router="stargraph.examples.basics:scatter"),
    "router mapping key": lambda d: d["edges"][0].update(
        mapping={"again": "step", "finished": "__end__"}
    ),
    "extra edge": lambda d: d["edges"].append(
        {"kind": "static", "sources": ["step"], "target": "__end__"}
    ),
    "state field type": lambda d: _field(d, "counter").update(type="float"),
    "state reducer": lambda d: _field(d, "counter").update(reducer="add"),
    "state default": lambda d: _field(d, "limit").update(default=4),
    "state ref": lambda d: d["state"].update(ref="other.module:State"),
    "fact flag": lambda d: _field(d, "counter").update(fact=True),
    "entry": lambda d: d.update(entry=["other"]),
    "rule pack": lambda d: d.update(
        rule_packs=[{"id": "p", "version": "1.0.0", "source": "(defrule r =>)"}]
    ),
    "rule text": lambda d: d.update(
        rule_packs=[{"id": "p", "version": "1.0.0", "source": "(defrule r2 =>)"}]
    ),
    "outputs": lambda d: d.update(outputs=["counter"]),
    "closure digest": lambda d: d["nodes"][0].update(closure={"code": "sha256:" + "1" * 64}),
    "closure factory args": lambda d: d["nodes"][0].update(
        closure={"code": "sha256:" + "1" * 64, "factory": "m:make", "args": {"name": "ada"}}
    ),
    "node cache": lambda d: d["nodes"][0].update(cache={}),
    "cache ttl": lambda d: d["nodes"][0].update(cache={"ttl_s": 60}),
    "cache key": lambda d: d["nodes"][0].update(cache={"key": "m:key"}),
    "private flag": lambda d: _field(d, "counter").update(private=True),
    "input model": lambda d: d.update(input_model="m:In"),
    "output model": lambda d: d.update(output_model="m:Out"),
    "name": lambda d: d.update(name="loop2"),
}


@pytest.mark.parametrize("change", sorted(BEHAVIOURAL))
def test_every_behavioural_field_changes_the_hash(change: str) -> None:
    data = _data()
    if change == "rule text":
        BEHAVIOURAL["rule pack"](data)
        before = _rehash(data)
    else:
        before = BASE.graph_hash
    BEHAVIOURAL[change](data)
    assert _rehash(data) != before


def test_join_sources_change_the_hash() -> None:
    data = _data(FAN)
    join = next(e for e in data["edges"] if len(e.get("sources", [])) > 1)
    join["sources"] = join["sources"][:-1]
    assert _rehash(data) != FAN.graph_hash


COSMETIC: dict[str, Callable[[dict[str, Any]], None]] = {
    "graph metadata": lambda d: d.update(metadata={"description": "a loop", "x": 1}),
    "node metadata": lambda d: d["nodes"][0].update(metadata={"layout": {"x": 10, "y": 20}}),
    "edge metadata": lambda d: d["edges"][0].update(metadata={"label": "loop back"}),
    "field metadata": lambda d: _field(d, "counter").update(metadata={"description": "n"}),
}


@pytest.mark.parametrize("change", sorted(COSMETIC))
def test_metadata_does_not_change_the_hash(change: str) -> None:
    data = _data()
    COSMETIC[change](data)
    changed = GraphIR.model_validate(data)
    assert changed != BASE  # the change is real ...
    assert changed.graph_hash == BASE.graph_hash  # ... and invisible to the hash


def test_declaration_order_does_not_change_the_hash() -> None:
    from stargraph.examples.basics import CounterState, bump, tally

    forward = (
        Graph("g", state=CounterState)
        .with_node("a", bump)
        .with_node("b", tally)
        .with_node("c", bump)
        .with_edge(START, "a")
        .with_edge("a", "b")
        .with_edge("a", "c")
        .with_edge(["b", "c"], END)
    )
    backward = (
        Graph("g", state=CounterState)
        .with_node("c", bump)
        .with_node("b", tally)
        .with_node("a", bump)
        .with_edge(["c", "b"], END)
        .with_edge("a", "c")
        .with_edge("a", "b")
        .with_edge(START, "a")
    )
    assert forward.to_ir().graph_hash == backward.to_ir().graph_hash
    assert forward.to_ir().to_json() == backward.to_ir().to_json()


def _shuffle_keys(value: Any, rng: random.Random) -> Any:
    if isinstance(value, dict):
        items = list(value.items())
        rng.shuffle(items)
        return {k: _shuffle_keys(v, rng) for k, v in items}
    if isinstance(value, list):
        return [_shuffle_keys(v, rng) for v in value]
    return value


json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**53) + 1, 2**53 - 1) | st.text(max_size=8),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3)
    ),
    max_leaves=8,
)


@st.composite
def graph_irs(draw: st.DrawFn) -> GraphIR:
    """Random structurally valid IR documents (the hash does not need them to compile)."""
    ids = draw(
        st.lists(
            st.from_regex(r"[a-z][a-z0-9_]{0,6}", fullmatch=True),
            min_size=1,
            max_size=5,
            unique=True,
        )
    )
    nodes = [
        {
            "kind": "function",
            "id": node_id,
            "ref": f"pkg.mod:{node_id}",
            "config": draw(st.dictionaries(st.text(max_size=4), json_values, max_size=3)),
            "metadata": draw(st.dictionaries(st.text(max_size=4), json_values, max_size=2)),
            "closure": draw(
                st.none()
                | st.fixed_dictionaries(
                    {"code": st.just("sha256:" + "2" * 64), "factory": st.just("pkg.mod:make")},
                    optional={
                        "args": st.dictionaries(st.text(max_size=4), json_values, max_size=2)
                    },
                )
            ),
            "cache": draw(st.none() | st.fixed_dictionaries({}, optional={"ttl_s": st.just(5.0)})),
        }
        for node_id in ids
    ]
    targets = [*ids, END]
    edges = [
        {
            "kind": "static",
            "sources": [draw(st.sampled_from(ids))],
            "target": draw(st.sampled_from(targets)),
        }
        for _ in range(draw(st.integers(0, 4)))
    ]
    data = {
        "name": draw(st.text(min_size=1, max_size=8)),
        "state": {
            "ref": "pkg.mod:State",
            "fields": [{"name": "counter", "type": "int", "default": 0}],
        },
        "nodes": nodes,
        "edges": edges,
        "entry": [ids[0]],
        "metadata": draw(st.dictionaries(st.text(max_size=4), json_values, max_size=2)),
    }
    return GraphIR.model_validate(data)


@settings(max_examples=60, deadline=None)
@given(ir=graph_irs())
def test_json_round_trip(ir: GraphIR) -> None:
    again = GraphIR.from_json(ir.to_json())
    assert again == ir
    assert again.graph_hash == ir.graph_hash


@settings(max_examples=60, deadline=None)
@given(ir=graph_irs(), seed=st.integers(0, 2**32))
def test_hash_independent_of_key_order(ir: GraphIR, seed: int) -> None:
    shuffled = _shuffle_keys(ir.model_dump(mode="json"), random.Random(seed))
    assert GraphIR.model_validate(shuffled).graph_hash == ir.graph_hash
    # and of list order where order carries no meaning (nodes, edges)
    rng = random.Random(seed)
    rng.shuffle(shuffled["nodes"])
    rng.shuffle(shuffled["edges"])
    assert GraphIR.model_validate(shuffled).graph_hash == ir.graph_hash


def test_hash_is_the_same_in_every_process() -> None:
    code = (
        "from stargraph.examples.basics import fanout_graph, mapreduce_graph\n"
        "print(fanout_graph().to_ir().graph_hash, mapreduce_graph().to_ir().graph_hash)"
    )
    outputs = set()
    for seed in ("0", "1", "4242"):
        env = {**os.environ, "PYTHONHASHSEED": seed}
        done = subprocess.run(
            [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True
        )
        outputs.add(done.stdout.strip())
    expected = f"{FAN.graph_hash} {mapreduce_graph().to_ir().graph_hash}"
    assert outputs == {expected}


def test_hash_format() -> None:
    h = chain_graph().to_ir().graph_hash
    assert h.startswith("sha256:")
    assert len(h) == 7 + 64
    int(h[7:], 16)


def test_to_json_is_sorted_and_parses() -> None:
    text = BASE.to_json()
    assert json.loads(text) == BASE.model_dump(mode="json")
    assert list(json.loads(text)) == sorted(json.loads(text))


@pytest.mark.parametrize("bad", [2**53, -(2**53), float("nan"), float("inf")])
def test_values_json_cannot_hash_exactly_are_rejected(bad: Any) -> None:
    from stargraph.errors import IRError

    data = _data()
    data["nodes"][0]["config"] = {"n": [1, {"deep": bad}]}
    with pytest.raises(IRError) as info:
        GraphIR.from_data(data, source="g.json")
    assert "g.json#/nodes/0/config" in str(info.value)
    assert "/n/1/deep" in str(info.value)
