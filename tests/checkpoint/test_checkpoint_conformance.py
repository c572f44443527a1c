"""The shared ``CheckpointStore`` conformance suite, run on every store that ships."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import ClassVar

import pytest

from stargraph.checkpoint import MemoryStore, SqliteStore, StoreFeature
from stargraph.checkpoint.conformance import CheckpointStoreConformance


class TestMemoryStore(CheckpointStoreConformance):
    @pytest.fixture
    def store(self) -> Iterator[MemoryStore]:
        store = MemoryStore()
        yield store
        store.close()


class _PlainStore(MemoryStore):
    """A store that declares no features, as one written before features existed: the
    runtime uses only the protocol's methods (and keeps node caches in memory itself)."""

    features: ClassVar[frozenset[StoreFeature]] = frozenset()


class TestPlainStore(CheckpointStoreConformance):
    @pytest.fixture
    def store(self) -> Iterator[MemoryStore]:
        store = _PlainStore()
        yield store
        store.close()


class TestSqliteStore(CheckpointStoreConformance):
    @pytest.fixture
    def store(self, tmp_path: Path) -> Iterator[SqliteStore]:
        store = SqliteStore(tmp_path / "conformance.db")
        yield store
        assert store.integrity_check() == "ok"
        store.close()


class TestSqliteStoreFull(CheckpointStoreConformance):
    """Same semantics with ``synchronous=FULL`` and a store re-opened over an existing file."""

    @pytest.fixture
    def store(self, tmp_path: Path) -> Iterator[SqliteStore]:
        SqliteStore(tmp_path / "conformance.db").close()
        store = SqliteStore(tmp_path / "conformance.db", synchronous="FULL")
        yield store
        store.close()
