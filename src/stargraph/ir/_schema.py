"""JSON Schema of the IR, exported to ``ir/schema/`` for editors and other languages.

Regenerate with ``python -m stargraph.ir._schema``; ``tests/ir/test_ir.py`` fails when the
committed file is stale.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Final

import orjson

from stargraph.ir._models import GraphIR

__all__ = ["SCHEMA_PATH", "ir_json_schema", "write_json_schema"]

SCHEMA_PATH: Final = Path(__file__).parent / "schema" / "graph-ir.schema.json"
"""Where the exported schema lives inside the package."""


def ir_json_schema() -> dict[str, Any]:
    """The JSON Schema (draft 2020-12) of :class:`GraphIR`."""
    schema = GraphIR.model_json_schema()
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    schema["$id"] = "https://stargraph.dev/schema/graph-ir-1.json"
    return schema


def write_json_schema(path: Path = SCHEMA_PATH) -> None:
    """Write :func:`ir_json_schema` to ``path`` as sorted, indented JSON."""
    text = orjson.dumps(ir_json_schema(), option=orjson.OPT_SORT_KEYS | orjson.OPT_INDENT_2)
    path.write_bytes(text + b"\n")


if __name__ == "__main__":
    write_json_schema()
