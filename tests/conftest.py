"""Fixtures shared by the whole test tree.

``store`` is a fresh checkpoint store, closed after the test: a SQLite file under
``tmp_path`` by default. A module that must hold for every store says so with
``pytestmark = pytest.mark.stores("memory", "sqlite")``; its tests then run once per kind
(test ids ``[memory]`` and ``[sqlite]``). A module or class that defines its own ``store``
fixture (an agent store, a proposal store, PostgreSQL) overrides this one as usual.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from stargraph.checkpoint import CheckpointStore, MemoryStore, SqliteStore

STORE_KINDS = ("memory", "sqlite")
"""The kinds ``pytest.mark.stores`` accepts: the two stores that need no server."""


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """Run the tests of a module marked ``stores(...)`` once per store kind it names."""
    marker = metafunc.definition.get_closest_marker("stores")
    if marker is None or "store" not in metafunc.fixturenames:
        return
    unknown = set(marker.args) - set(STORE_KINDS)
    if unknown or not marker.args:
        raise pytest.UsageError(
            f"{metafunc.definition.nodeid}: pytest.mark.stores takes kinds out of "
            f"{STORE_KINDS}, got {marker.args!r}"
        )
    metafunc.parametrize("store", marker.args, indirect=True)


@pytest.fixture
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[CheckpointStore]:
    """A fresh checkpoint store (SQLite unless the module's ``stores`` mark says), closed
    after the test."""
    kind = getattr(request, "param", "sqlite")
    made: CheckpointStore = MemoryStore() if kind == "memory" else SqliteStore(tmp_path / "sg.db")
    yield made
    made.close()
