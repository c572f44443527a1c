"""The stargraph IR: frozen, content-hashed graph documents.

>>> from stargraph.ir import canonical_json
>>> canonical_json({"b": 1, "a": [1.0, "x"]})
b'{"a":[1,"x"],"b":1}'
"""

from __future__ import annotations

from stargraph.ir._canonical import ContentHash, canonical_json, content_hash
from stargraph.ir._models import (
    END,
    IR_VERSION,
    START,
    CachePolicyIR,
    ClosureIR,
    ConditionalEdgeIR,
    EdgeIR,
    FieldIR,
    FunctionNodeIR,
    GraphHash,
    GraphIR,
    NodeId,
    NodeIR,
    RetryPolicyIR,
    RulePackIR,
    StateSchemaIR,
    StaticEdgeIR,
    SubgraphNodeIR,
)
from stargraph.ir._schema import SCHEMA_PATH, ir_json_schema, write_json_schema

__all__ = [
    "CachePolicyIR",
    "ClosureIR",
    "ConditionalEdgeIR",
    "ContentHash",
    "END",
    "EdgeIR",
    "FieldIR",
    "FunctionNodeIR",
    "GraphHash",
    "GraphIR",
    "IR_VERSION",
    "NodeIR",
    "NodeId",
    "RetryPolicyIR",
    "RulePackIR",
    "SCHEMA_PATH",
    "START",
    "StateSchemaIR",
    "StaticEdgeIR",
    "SubgraphNodeIR",
    "canonical_json",
    "content_hash",
    "ir_json_schema",
    "write_json_schema",
]
