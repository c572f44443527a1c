"""LangGraph documentation examples, each run on LangGraph and on ``stargraph.langgraph``
with only the imports changed (``engines.py``): both must reach LangGraph's final state."""

from __future__ import annotations

import importlib
from pathlib import Path
from typing import Any

import pytest

from tests.langgraph_ports import engines

PORTS = sorted(p.stem for p in Path(__file__).parent.glob("port_*.py"))
ENGINES = {"langgraph": engines.langgraph_engine, "stargraph": engines.stargraph_engine}


def _port(name: str) -> Any:
    return importlib.import_module(f"tests.langgraph_ports.{name}")


def test_issue46_at_least_ten_ports() -> None:
    assert len(PORTS) >= 10, PORTS


@pytest.mark.parametrize("engine", sorted(ENGINES))
@pytest.mark.parametrize("port", PORTS)
def test_issue46_port_gives_langgraphs_final_state(port: str, engine: str) -> None:
    module = _port(port)
    assert module.run(ENGINES[engine]()) == module.EXPECTED
