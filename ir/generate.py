"""Regenerate this directory (the IR specification) from the stargraph package.

    python ir/generate.py          # or: python scripts/regen_ir_artifacts.py

``schema/`` and ``examples/`` are byte-for-byte copies of what the package ships
(``stargraph/ir/schema``, ``stargraph/ir/examples``); ``conformance/vectors.json`` is computed
by the package's own canonicaliser and hasher. ``tests/test_ir_spec.py`` fails while any file
here differs from what this script would write.
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any, Final

import orjson
from pydantic import BaseModel

import stargraph.ir
from stargraph.examples import basics
from stargraph.graph import Graph
from stargraph.ir import SCHEMA_PATH, GraphIR, canonical_json
from stargraph.nodes import SubgraphNode
from stargraph.skills import Skill

HERE: Final = Path(__file__).resolve().parent
PACKAGE_EXAMPLES: Final = Path(stargraph.ir.__file__).parent / "examples"

# What the graph hash leaves out (see README "The hash view"): cosmetic metadata at every
# level and the embedded child documents, which enter through their own hashes.
HASH_EXCLUDE: Final[dict[str, Any]] = {
    "metadata": True,
    "subgraphs": True,
    "nodes": {"__all__": {"metadata"}},
    "edges": {"__all__": {"metadata"}},
    "state": {"fields": {"__all__": {"metadata"}}},
}


def hash_view(ir: GraphIR) -> dict[str, Any]:
    """The JSON value whose canonical bytes ``graph_hash`` digests."""
    view = ir.model_dump(mode="json", exclude=HASH_EXCLUDE, exclude_defaults=True)
    view["ir_version"] = ir.ir_version
    view["nodes"] = [
        {**dumped, "kind": node.kind}
        for dumped, node in zip(view.get("nodes", []), ir.nodes, strict=True)
    ]
    view["edges"] = [
        {**dumped, "kind": edge.kind}
        for dumped, edge in zip(view.get("edges", []), ir.edges, strict=True)
    ]
    view["subgraphs"] = sorted(ir.subgraphs)
    return view


def _text(data: Any) -> bytes:
    return orjson.dumps(data, option=orjson.OPT_SORT_KEYS | orjson.OPT_INDENT_2) + b"\n"


# --------------------------------------------------------------------------- graphs


class CounterOut(BaseModel):
    """The declared outputs of the mounted counter skill."""

    counter: int = 0
    items: list[str] = []


def _mounted() -> GraphIR:
    counter = Skill.from_graph(
        basics.chain_graph(2),
        name="counter",
        version="1.0.0",
        kind="workflow",
        description="Count twice.",
        state_schema=CounterOut,
    )
    parent = (
        Graph("mounted", state=basics.CounterState)
        .with_node("first", basics.bump)
        .with_node(SubgraphNode.from_skill(counter, site="count", max_steps=10))
        .with_edge("__start__", "first")
        .with_edge("first", "count")
        .with_edge("count", "__end__")
    )
    return parent.to_ir()


def _with_metadata(ir: GraphIR) -> GraphIR:
    data = ir.model_dump(mode="json")
    data["metadata"] = {"author": "someone", "notes": ["cosmetic"]}
    for part in (*data["nodes"], *data["edges"], *data["state"]["fields"]):
        part["metadata"] = {"position": [1, 2]}
    return GraphIR.model_validate(data)


def _non_defaults() -> GraphIR:
    """Fields away from their defaults: retry, timeouts, writes, rules, config with floats
    and non-ASCII keys (RFC 8785 number formatting and UTF-16 key order matter here)."""
    ir = basics.loop_graph().to_ir()
    data = ir.model_dump(mode="json")
    node = data["nodes"][0]
    node.update(
        {
            "writes": ["items", "counter"],
            "retry": {"max_attempts": 5, "backoff": 1.5, "retry_on": ["builtins:OSError"]},
            "timeout_s": 2.5,
            "blocking": True,
            "interrupt_before": True,
            "must_stub": True,
            "config": {"zeta": 1e21, "é": 0.1, "€": -0.0, "😀": [1.0, 2.5], "a": None},
            "rules": [{"id": "guard", "version": "1", "source": "(defrule noop =>)"}],
        }
    )
    data["name"] = "non-defaults"
    data["outputs"] = ["items", "counter"]
    data["rule_packs"] = [{"id": "term", "version": "2", "source": "(defrule stop =>)"}]
    return GraphIR.model_validate(data)


def _shuffled(ir: GraphIR) -> dict[str, Any]:
    """``ir`` as a producer might write it: lists in another order, a duplicate entry."""
    data = ir.model_dump(mode="json")
    data["nodes"] = list(reversed(data["nodes"]))
    data["edges"] = list(reversed(data["edges"]))
    data["entry"] = [*data["entry"], *data["entry"]]
    data["state"]["fields"] = list(reversed(data["state"]["fields"]))
    for edge in data["edges"]:
        if edge["kind"] == "static":
            edge["sources"] = list(reversed(edge["sources"]))
    return data


def _graph_vector(name: str, ir: GraphIR, **extra: Any) -> dict[str, Any]:
    view = hash_view(ir)
    canonical = canonical_json(view)
    digest = "sha256:" + hashlib.sha256(canonical).hexdigest()
    assert digest == ir.graph_hash, f"{name}: the hash view no longer matches graph_hash"
    return {
        "name": name,
        **extra,
        "document": ir.model_dump(mode="json"),
        "hash_view": view,
        "canonical": canonical.decode(),
        "graph_hash": digest,
    }


def graph_vectors() -> list[dict[str, Any]]:
    """IR document -> hash view -> canonical JSON -> graph_hash, for each vector graph."""
    out = []
    for path in sorted(PACKAGE_EXAMPLES.glob("*.json")):
        ir = GraphIR.from_json(path.read_bytes(), source=path.name)
        out.append(_graph_vector(path.stem, ir, source=f"examples/{path.name}"))
    mounted = _mounted()
    out.append(_graph_vector("mounted-skill", mounted))
    for key, child in sorted(mounted.subgraphs.items()):
        out.append(_graph_vector(f"mounted-skill/subgraphs/{key}", child))
    chain = GraphIR.from_json((PACKAGE_EXAMPLES / "chain.json").read_bytes())
    out.append(_graph_vector("chain-with-metadata", _with_metadata(chain)))
    out.append(_graph_vector("non-defaults", _non_defaults()))
    fanout = GraphIR.from_json((PACKAGE_EXAMPLES / "fanout.json").read_bytes())
    out.append(_graph_vector("fanout-unnormalized", fanout, input=_shuffled(fanout)))
    return out


# --------------------------------------------------------------------------- canonical JSON

CANONICAL_CASES: Final[list[tuple[str, Any]]] = [
    ("sorted keys, integral float", {"b": 1, "a": [1.0, "x"]}),
    (
        "ECMAScript number formatting",
        [0.1, 1e21, 1e-7, -0.0, 123456789012.5, 5e-324, 1.7976931348623157e308, 2.0],
    ),
    ("safe integers", [9007199254740991, -9007199254740991, 0]),
    ("keys sorted by UTF-16 code units", {"é": 1, "z": 2, "€": 3, "😀": 4, "ﬁ": 5, "A": 0}),
    ("string escapes", ['line\nbreak \u2028 \x1f "q" \\ / \x7f é']),
    ("empty and nested", {"a": {}, "b": [], "c": [[]], "d": None, "e": True, "f": False}),
]


def canonical_vectors() -> list[dict[str, Any]]:
    """JSON value -> canonical bytes (RFC 8785), with their sha256."""
    out = []
    for name, value in CANONICAL_CASES:
        canonical = canonical_json(value)
        out.append(
            {
                "name": name,
                "value": value,
                "canonical": canonical.decode(),
                "sha256": hashlib.sha256(canonical).hexdigest(),
            }
        )
    return out


def vectors() -> dict[str, Any]:
    """The whole conformance file."""
    return {
        "about": "stargraph IR conformance vectors; see ../README.md for the rules.",
        "ir_version": stargraph.ir.IR_VERSION,
        "canonical_json": canonical_vectors(),
        "graphs": graph_vectors(),
    }


def files() -> dict[str, bytes]:
    """Every generated file, by its path relative to this directory."""
    out = {"schema/graph-ir.schema.json": SCHEMA_PATH.read_bytes()}
    for path in sorted(PACKAGE_EXAMPLES.glob("*.json")):
        out[f"examples/{path.name}"] = path.read_bytes()
    out["conformance/vectors.json"] = _text(vectors())
    return out


def main() -> None:
    """Write the files; remove generated files that are no longer produced."""
    produced = files()
    for folder in ("schema", "examples", "conformance"):
        for stale in (HERE / folder).glob("*.json") if (HERE / folder).is_dir() else ():
            if f"{folder}/{stale.name}" not in produced:
                stale.unlink()
    for relative, data in produced.items():
        target = HERE / relative
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(data)


if __name__ == "__main__":
    main()
