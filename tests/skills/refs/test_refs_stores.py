"""Stores, embedder and retrieval: the shared conformance suites on every shipped store,
the hashing embedder's determinism across processes, fusion, and plugin registration."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from stargraph.plugin import Registry, get_plugin_manager
from stargraph.skills.refs import (
    DocumentStore,
    HashingEmbedder,
    InMemoryDocumentStore,
    InMemoryVectorStore,
    MiniLMEmbedder,
    SqliteDocumentStore,
    SqliteVectorStore,
    StoreError,
    VectorStore,
    builtin_skills,
    hybrid_search,
    index_passages,
)
from stargraph.skills.refs.conformance import check_document_store, check_vector_store
from stargraph.skills.refs.retrieval import citations, reciprocal_rank_fusion
from tests.skills.refs.conftest import load_corpus


@pytest.fixture(params=["memory", "sqlite-memory", "sqlite-file"])
def doc_factory(request: pytest.FixtureRequest, tmp_path: Path) -> Callable[[], DocumentStore]:
    counter = iter(range(100))
    factories: dict[str, Callable[[], DocumentStore]] = {
        "memory": InMemoryDocumentStore,
        "sqlite-memory": SqliteDocumentStore,
        "sqlite-file": lambda: SqliteDocumentStore(tmp_path / f"d{next(counter)}.db"),
    }
    return factories[request.param]


@pytest.fixture(params=["memory", "sqlite-memory", "sqlite-file"])
def vec_factory(request: pytest.FixtureRequest, tmp_path: Path) -> Callable[[], VectorStore]:
    counter = iter(range(100))
    factories: dict[str, Callable[[], VectorStore]] = {
        "memory": InMemoryVectorStore,
        "sqlite-memory": SqliteVectorStore,
        "sqlite-file": lambda: SqliteVectorStore(tmp_path / f"v{next(counter)}.db"),
    }
    return factories[request.param]


def test_document_store_conformance(doc_factory: Callable[[], DocumentStore]) -> None:
    check_document_store(doc_factory)


def test_vector_store_conformance(vec_factory: Callable[[], VectorStore]) -> None:
    check_vector_store(vec_factory)


def test_sqlite_stores_persist_across_connections(tmp_path: Path) -> None:
    embedder = HashingEmbedder()
    docs, vectors = SqliteDocumentStore(tmp_path / "d.db"), SqliteVectorStore(tmp_path / "v.db")
    index_passages(load_corpus(), docs=docs, vectors=vectors, embedder=embedder)
    before = hybrid_search("waggle dance", docs=docs, vectors=vectors, embedder=embedder)
    docs.close()
    vectors.close()
    docs, vectors = SqliteDocumentStore(tmp_path / "d.db"), SqliteVectorStore(tmp_path / "v.db")
    assert (len(docs), len(vectors), vectors.dim) == (12, 12, 256)
    assert hybrid_search("waggle dance", docs=docs, vectors=vectors, embedder=embedder) == before
    raw = vectors._db.execute("SELECT vec FROM vectors WHERE id = 'p1'").fetchone()[0]
    assert len(raw) == 256 * 4  # float32 blob
    docs.close()
    vectors.close()


def test_hybrid_search_ranks_alike_in_memory_and_sqlite() -> None:
    embedder = HashingEmbedder()
    results = []
    for docs, vectors in (
        (InMemoryDocumentStore(), InMemoryVectorStore()),
        (SqliteDocumentStore(), SqliteVectorStore()),
    ):
        index_passages(load_corpus(), docs=docs, vectors=vectors, embedder=embedder)
        found = hybrid_search("lighthouse lamps", docs=docs, vectors=vectors, embedder=embedder)
        results.append([p.id for p in found])
        docs.close()
        vectors.close()
    assert results[0][:2] == results[1][:2] == ["p9", "p8"]


def test_hashing_embedder_is_normalised_and_similarity_aware() -> None:
    embedder = HashingEmbedder(dim=128)
    vectors = embedder.embed(["honeybee colony", "honeybee colonies", "granite rock", ""])
    assert vectors.dtype == np.float32
    assert vectors.shape == (4, 128)
    assert np.allclose(np.linalg.norm(vectors[:3], axis=1), 1.0)
    assert not vectors[3].any()  # no features, no direction
    assert vectors[0] @ vectors[1] > 0.5 > vectors[0] @ vectors[2]
    assert embedder.name == "hashing-ngram-v1/dim=128/n=3-5"
    with pytest.raises(StoreError, match="dim >= 8"):
        HashingEmbedder(dim=2)


def test_hashing_embedder_is_deterministic_across_processes() -> None:
    texts = ["The queen lays 2,000 eggs a day.", "Überraschung: café"]
    code = (
        "import json, sys; from stargraph.skills.refs import HashingEmbedder; "
        f"print(json.dumps(HashingEmbedder().embed({texts!r}).tolist()))"
    )
    outputs = [
        subprocess.run(
            [sys.executable, "-c", code],
            capture_output=True,
            text=True,
            check=True,
            env={"PYTHONHASHSEED": seed, "PATH": ""},
        ).stdout
        for seed in ("1", "2")
    ]
    assert outputs[0] == outputs[1]
    here = HashingEmbedder().embed(texts)
    assert np.array_equal(np.asarray(json.loads(outputs[0]), dtype=np.float32), here)


def test_reciprocal_rank_fusion_and_citations() -> None:
    fused = reciprocal_rank_fusion([["a", "b", "c"], ["c", "b"]], k=60)
    assert [pid for pid, _ in fused] == ["c", "b", "a"]
    assert fused[0][1] == pytest.approx(1 / 63 + 1 / 61)
    assert reciprocal_rank_fusion([["y"], ["x"]]) == [("x", 1 / 61), ("y", 1 / 61)]  # ties by id
    assert citations("x [p1], y [p2][p1] and [not a cite] [http://h/p.html]") == [
        "p1",
        "p2",
        "http://h/p.html",
    ]


def test_minilm_embedder_is_lazy() -> None:
    embedder = MiniLMEmbedder()  # constructing imports nothing heavy
    assert (embedder.name, embedder.dim) == ("all-MiniLM-L6-v2", 384)
    assert "torch" not in sys.modules


def test_builtin_plugin_registers_the_three_skills() -> None:
    assert [s.name for s in builtin_skills()] == ["rag", "autoresearch", "wiki"]
    skills = Registry.build(get_plugin_manager()).skills
    for name in ("rag", "autoresearch", "wiki"):
        assert skills[name] is next(s for s in builtin_skills() if s.name == name)
