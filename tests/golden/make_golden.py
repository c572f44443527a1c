"""Rebuild the golden cassettes: ``python tests/golden/make_golden.py [name ...]``.

Each golden graph (``golden_graphs.GOLDENS``) is run live - the ReAct one against a fresh
:class:`~stargraph.testing.ScriptedOpenAIServer` - into a throwaway SQLite store with seeded
entropy and a fixed run id, then exported with ``timestamps=False``: the same code gives
the same bytes every time. Run it after changing a golden graph on purpose, and commit the
changed cassettes with the change.
"""

from __future__ import annotations

import sys
import tempfile
from contextlib import nullcontext
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from golden_graphs import GOLDENS, Golden, compile_golden, react_services

from stargraph.checkpoint import SqliteStore
from stargraph.replay import export_cassette


def record(golden: Golden, workdir: Path) -> Path:
    """Run ``golden`` live into a fresh store and export its cassette next to this file."""
    store = SqliteStore(workdir / f"{golden.name}.db")
    try:
        services: Any = react_services(workdir) if golden.llm else nullcontext({})
        with services as live:
            app = compile_golden(golden, services=live, store=store)
            app.invoke(golden.input, run_id=golden.run_id)
            app.close()
        return export_cassette(store, golden.run_id, golden.path, timestamps=False)
    finally:
        store.close()


def main(argv: list[str]) -> int:
    wanted = set(argv)
    unknown = wanted - {g.name for g in GOLDENS}
    if unknown:
        print(f"unknown golden runs {sorted(unknown)}; known: {[g.name for g in GOLDENS]}")
        return 2
    with tempfile.TemporaryDirectory() as tmp:
        for golden in GOLDENS:
            if wanted and golden.name not in wanted:
                continue
            path = record(golden, Path(tmp))
            print(f"{golden.name:8} {golden.run_id:16} -> {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
