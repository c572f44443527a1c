"""IR documents: schema export, pinned examples, and typed errors for malformed input."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

import stargraph.ir
from stargraph.compile import compile_ir
from stargraph.errors import CompileError, IRError
from stargraph.examples import basics
from stargraph.graph import Graph
from stargraph.ir import SCHEMA_PATH, GraphIR, ir_json_schema
from stargraph.runtime import CompiledGraph

EXAMPLES = Path(stargraph.ir.__file__).parent / "examples"

# Each committed example IR is pinned to its hash: a change to the IR models, to hashing or
# to the example graphs must be deliberate (regenerate with scripts/regen_ir_artifacts.py and
# update the pin in the same commit).
PINNED = {
    "chain.json": "sha256:98a386af2302f",
    "fanout.json": "sha256:2e0d5d4b4d72f",
    "loop.json": "sha256:22e275e6918f6",
    "mapreduce.json": "sha256:91485027a1dab",
}


def test_committed_json_schema_is_current() -> None:
    committed = json.loads(SCHEMA_PATH.read_text())
    assert committed == ir_json_schema(), (
        "ir/schema/graph-ir.schema.json is stale: run python scripts/regen_ir_artifacts.py"
    )


@pytest.mark.parametrize("name", sorted(PINNED))
def test_examples_are_pinned_to_their_hash(name: str) -> None:
    ir = GraphIR.from_json((EXAMPLES / name).read_text(), source=name)
    assert ir.graph_hash.startswith(PINNED[name])
    graph = getattr(basics, f"{name.removesuffix('.json')}_graph")()
    assert graph.to_ir() == ir, f"{name} is stale: run python scripts/regen_ir_artifacts.py"


def test_example_ir_compiles_and_runs_from_json() -> None:
    ir = GraphIR.from_json((EXAMPLES / "fanout.json").read_text())
    app: CompiledGraph[Any] = Graph(ir).compile()
    assert app.graph_hash == ir.graph_hash
    final = app.invoke({})
    assert final.total == 3
    assert final.items == ["start", "b0", "b1", "b2", "join"]


def test_malformed_json_names_the_document() -> None:
    with pytest.raises(IRError) as info:
        GraphIR.from_json('{"name": "x", ', source="broken.json")
    message = str(info.value)
    assert message.startswith("IR document broken.json is invalid: broken.json: not valid JSON")
    assert "(fix: fix the JSON syntax)" in message


def test_unknown_kind_names_the_node() -> None:
    data = basics.loop_graph().to_ir().model_dump(mode="json")
    data["nodes"][0]["kind"] = "teleport"
    with pytest.raises(IRError) as info:
        GraphIR.from_data(data, source="loop.json")
    assert str(info.value) == (
        "IR document loop.json is invalid: loop.json#/nodes/0: unknown kind 'teleport' "
        "(fix: use one of the known kinds: 'function', 'subgraph')"
    )
    assert isinstance(info.value, CompileError)
    assert isinstance(info.value, ValueError)


def test_wrong_ir_version_is_named() -> None:
    data = basics.loop_graph().to_ir().model_dump(mode="json")
    data["ir_version"] = "7"
    with pytest.raises(IRError) as info:
        GraphIR.from_data(data, source="old.json")
    assert str(info.value) == (
        "IR document old.json is invalid: old.json#/ir_version: IR version '7' is not "
        "supported (this stargraph reads version '1') (fix: re-export the graph with this "
        "stargraph version, or upgrade stargraph)"
    )


def test_all_shape_problems_are_reported_together() -> None:
    data = basics.loop_graph().to_ir().model_dump(mode="json")
    del data["nodes"][0]["ref"]
    data["edges"][0]["colour"] = "red"
    data["nodes"][0]["timeout_s"] = -1
    with pytest.raises(IRError) as info:
        GraphIR.from_data(data, source="g.json")
    pointers = {p.pointer for p in info.value.problems}
    assert pointers == {
        "g.json#/nodes/0/ref",
        "g.json#/nodes/0/timeout_s",
        "g.json#/edges/0/colour",
    }
    assert "3 problems" in str(info.value)


def test_ir_is_frozen() -> None:
    ir = basics.loop_graph().to_ir()
    with pytest.raises(Exception, match="frozen"):
        ir.name = "other"


def test_compile_ir_reports_unimportable_refs() -> None:
    data = basics.loop_graph().to_ir().model_dump(mode="json")
    data["nodes"][0]["ref"] = "no_such_module_xyz:fn"
    data["edges"][0]["router"] = "myns.router"
    ir = GraphIR.from_data(data)
    with pytest.raises(CompileError) as info:
        compile_ir(ir, state=basics.CounterState)
    message = str(info.value)
    assert "/nodes/0/ref: node 'step' ref 'no_such_module_xyz:fn' cannot be imported" in message
    assert (
        "/edges/0/router: router of 'step' ref 'myns.router' is a registry id that nothing "
        "registered (fix: supply it with Graph(ir, impls={'myns.router': fn})" in message
    )


def test_a_new_field_at_its_default_keeps_existing_hashes() -> None:
    # Forward compatibility: a field added later with a default must not re-hash every graph.
    data = basics.loop_graph().to_ir().model_dump(mode="json")
    explicit = {**data, "nodes": [{**n, "must_stub": False} for n in data["nodes"]]}
    trimmed = {
        **data,
        "nodes": [{k: v for k, v in n.items() if k != "must_stub"} for n in data["nodes"]],
    }
    assert GraphIR.model_validate(explicit).graph_hash == GraphIR.model_validate(trimmed).graph_hash
