"""The top-level ``ir/`` directory: the IR as a language-neutral contract.

Its schema and examples are byte-for-byte what the package ships; its conformance vectors are
what the package computes; and a second, independent implementation of the README's rules -
plain JSON, the schema's defaults, the ``rfc8785`` canonicaliser and ``hashlib``, no stargraph
model code - reproduces every vector, which shows the README and the files suffice for another
implementation to check itself.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
from pathlib import Path
from types import ModuleType
from typing import Any, Final

import pytest
import rfc8785

import stargraph.ir
from stargraph.ir import SCHEMA_PATH, GraphIR, canonical_json

ROOT: Final = Path(__file__).resolve().parents[2] / "ir"
PACKAGE_EXAMPLES: Final = Path(stargraph.ir.__file__).parent / "examples"


def _generator() -> ModuleType:
    spec = importlib.util.spec_from_file_location("ir_generate", ROOT / "generate.py")
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


VECTORS: Final = json.loads((ROOT / "conformance" / "vectors.json").read_text(encoding="utf-8"))
SCHEMA: Final = json.loads((ROOT / "schema" / "graph-ir.schema.json").read_text(encoding="utf-8"))
STALE: Final = "ir/ is stale: run python scripts/regen_ir_artifacts.py (or python ir/generate.py)"


def test_ir_directory_is_identical_to_what_the_package_ships() -> None:
    assert (ROOT / "schema" / "graph-ir.schema.json").read_bytes() == SCHEMA_PATH.read_bytes()
    shipped = sorted(p.name for p in PACKAGE_EXAMPLES.glob("*.json"))
    assert shipped  # the package ships examples
    assert sorted(p.name for p in (ROOT / "examples").glob("*.json")) == shipped, STALE
    for name in shipped:
        assert (ROOT / "examples" / name).read_bytes() == (PACKAGE_EXAMPLES / name).read_bytes()
    produced = _generator().files()
    on_disk = {
        f"{folder}/{path.name}": path.read_bytes()
        for folder in ("schema", "examples", "conformance")
        for path in (ROOT / folder).glob("*.json")
    }
    assert on_disk == produced, STALE
    assert (ROOT / "README.md").is_file()


def test_every_shipped_example_is_a_graph_vector() -> None:
    sources = {v.get("source") for v in VECTORS["graphs"]}
    assert {f"examples/{p.name}" for p in PACKAGE_EXAMPLES.glob("*.json")} <= sources
    assert VECTORS["ir_version"] == stargraph.ir.IR_VERSION


@pytest.mark.parametrize("case", VECTORS["canonical_json"], ids=lambda c: c["name"])
def test_canonical_json_vectors(case: dict[str, Any]) -> None:
    expected = case["canonical"].encode()
    assert rfc8785.dumps(case["value"]) == expected  # the reference canonicaliser
    assert canonical_json(case["value"]) == expected  # stargraph's (with its fast path)
    assert hashlib.sha256(expected).hexdigest() == case["sha256"]


# --------------------------------------------------------------------------- an independent
# implementation of README "Normalization" and "The hash view", from the schema alone.

DEFS: Final = SCHEMA["$defs"]
NODE_TYPES: Final = {"function": "FunctionNodeIR", "subgraph": "SubgraphNodeIR"}
EDGE_TYPES: Final = {"static": "StaticEdgeIR", "conditional": "ConditionalEdgeIR"}


def _defaults(type_name: str) -> dict[str, Any]:
    """Schema defaults; a property neither required nor defaulted defaults to ``{}``."""
    spec = DEFS[type_name]
    required = set(spec.get("required", ()))
    return {
        key: prop.get("default", {})
        for key, prop in spec["properties"].items()
        if key not in required
    }


def _same(a: Any, b: Any) -> bool:
    """JSON equality: numbers by value (2 == 2.0), but a boolean is never a number."""
    if isinstance(a, bool) or isinstance(b, bool):
        return isinstance(a, bool) and isinstance(b, bool) and a == b
    if isinstance(a, int | float) and isinstance(b, int | float):
        return a == b
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    return type(a) is type(b) and a == b


def _edge_key(edge: dict[str, Any]) -> tuple[str, ...]:
    if edge["kind"] == "static":
        return ("static", *sorted(set(edge["sources"])), "->", edge["target"])
    return ("conditional", edge["source"], edge["router"])


def normalize(doc: dict[str, Any]) -> dict[str, Any]:
    """README "Normalization"."""
    out = dict(doc)
    out["nodes"] = sorted(doc["nodes"], key=lambda n: n["id"])
    for node in out["nodes"]:
        if node.get("writes") is not None:
            node["writes"] = sorted(set(node["writes"]))
    out["edges"] = sorted(doc.get("edges", []), key=_edge_key)
    for edge in out["edges"]:
        if edge["kind"] == "static":
            edge["sources"] = sorted(set(edge["sources"]))
    out["entry"] = sorted(set(doc.get("entry", [])))
    out["rule_packs"] = sorted(doc.get("rule_packs", []), key=lambda p: (p["id"], p["version"]))
    if doc.get("outputs") is not None:
        out["outputs"] = sorted(set(doc["outputs"]))
    out["state"] = {
        **doc["state"],
        "fields": sorted(doc["state"]["fields"], key=lambda f: f["name"]),
    }
    out["subgraphs"] = {k: normalize(v) for k, v in doc.get("subgraphs", {}).items()}
    return out


def _strip(obj: dict[str, Any], type_name: str) -> dict[str, Any]:
    defaults = _defaults(type_name)
    out = {}
    for key, value in obj.items():
        if key == "metadata" or (key in defaults and _same(value, defaults[key])):
            continue
        out[key] = _nested(type_name, key, value)
    return out


def _nested(type_name: str, key: str, value: Any) -> Any:
    if type_name == "StateSchemaIR" and key == "fields":
        return [_strip(f, "FieldIR") for f in value]
    if type_name in NODE_TYPES.values() and key == "retry":
        return _strip(value, "RetryPolicyIR")
    if key in ("rules", "rule_packs"):
        return [_strip(p, "RulePackIR") for p in value]
    return value


def reference_view(doc: dict[str, Any]) -> dict[str, Any]:
    """README "The hash view", step by step."""
    graph = {k: v for k, v in doc.items() if k not in ("subgraphs", "metadata")}
    view = _strip(graph, "GraphIR")
    if "state" in view:
        view["state"] = _strip(doc["state"], "StateSchemaIR")
    view["nodes"] = [{**_strip(n, NODE_TYPES[n["kind"]]), "kind": n["kind"]} for n in doc["nodes"]]
    view["edges"] = [
        {**_strip(e, EDGE_TYPES[e["kind"]]), "kind": e["kind"]} for e in doc.get("edges", [])
    ]
    view["ir_version"] = doc.get("ir_version", "1")
    view["subgraphs"] = sorted(doc.get("subgraphs", {}))
    return view


def reference_hash(doc: dict[str, Any]) -> str:
    """``graph_hash`` of a normalized document, its children's keys checked (Merkle)."""
    for key, child in doc.get("subgraphs", {}).items():
        assert reference_hash(child) == key, f"child keyed {key} hashes differently"
    return "sha256:" + hashlib.sha256(rfc8785.dumps(reference_view(doc))).hexdigest()


@pytest.mark.parametrize("vector", VECTORS["graphs"], ids=lambda v: v["name"])
def test_graph_vectors_reproduced_by_an_independent_implementation(
    vector: dict[str, Any],
) -> None:
    document = vector["document"]
    assert normalize(document) == document  # the documents are given normalized
    if "input" in vector:
        assert normalize(vector["input"]) == document
    view = reference_view(document)
    assert view == vector["hash_view"]
    canonical = rfc8785.dumps(view)
    assert canonical == vector["canonical"].encode()
    assert reference_hash(document) == vector["graph_hash"]
    # ... and stargraph agrees on the same document.
    assert GraphIR.from_data(document).graph_hash == vector["graph_hash"]


def test_vectors_pin_the_properties_the_readme_states() -> None:
    by_name = {v["name"]: v for v in VECTORS["graphs"]}
    assert by_name["chain-with-metadata"]["graph_hash"] == by_name["chain"]["graph_hash"]
    assert by_name["fanout-unnormalized"]["graph_hash"] == by_name["fanout"]["graph_hash"]
    mounted = by_name["mounted-skill"]
    (child_hash,) = mounted["hash_view"]["subgraphs"]
    assert by_name[f"mounted-skill/subgraphs/{child_hash}"]["graph_hash"] == child_hash
    # A changed child changes the parent (Merkle): edit it, re-key it, hash again.
    child = json.loads(json.dumps(mounted["document"]["subgraphs"][child_hash]))
    child["nodes"][0]["ref"] = "elsewhere:bump"
    new_key = reference_hash(child)
    parent = json.loads(json.dumps(mounted["document"]))
    parent["subgraphs"] = {new_key: child}
    for node in parent["nodes"]:
        if node["kind"] == "subgraph":
            node["graph"] = new_key
    assert reference_hash(parent) != mounted["graph_hash"]
    assert GraphIR.from_data(parent).graph_hash == reference_hash(parent)
