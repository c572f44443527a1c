"""Regenerate the committed IR artifacts: the JSON Schema and the example IR documents.

Run ``python scripts/regen_ir_artifacts.py`` after changing the IR models or the example
graphs; ``tests/ir/test_ir.py`` fails while either is stale. It also refreshes the top-level
``ir/`` specification (``ir/generate.py``), which ``tests/ir/test_ir_spec.py`` keeps in step.
"""

from __future__ import annotations

import runpy
from pathlib import Path

import stargraph.ir
from stargraph.examples import basics
from stargraph.ir import write_json_schema

EXAMPLES = Path(stargraph.ir.__file__).parent / "examples"


def main() -> None:
    """Write the schema and one ``<name>.json`` per example graph."""
    write_json_schema()
    for graph in (
        basics.chain_graph(),
        basics.loop_graph(),
        basics.fanout_graph(),
        basics.mapreduce_graph(),
    ):
        (EXAMPLES / f"{graph.name}.json").write_text(graph.to_ir().to_json(indent=True) + "\n")
    runpy.run_path(
        str(Path(__file__).resolve().parent.parent / "ir" / "generate.py"), run_name="__main__"
    )


if __name__ == "__main__":
    main()
