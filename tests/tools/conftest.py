"""Fixtures for the tool tests: a workspace directory and arbiters closed after each test."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from stargraph.tools import Arbiter, Tool, ToolRegistry

ArbiterFactory = Callable[..., Arbiter]


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    """An empty workspace root."""
    root = tmp_path / "ws"
    root.mkdir()
    return root


@pytest.fixture
def make_arbiter(workspace: Path) -> Iterator[ArbiterFactory]:
    """``make_arbiter(*tools, **arbiter_kwargs)``: an arbiter over just those tools."""
    built: list[Arbiter] = []

    def make(*tools: Tool, **kwargs: Any) -> Arbiter:
        kwargs.setdefault("workspace", workspace)
        arbiter = Arbiter(ToolRegistry.build(builtins=tools), **kwargs)
        built.append(arbiter)
        return arbiter

    yield make
    for arbiter in built:
        arbiter.close()
