"""Retrieval latency of the reference skills' stores at 10k passages.

Run: ``.venv/bin/python benchmarks/bench_refs.py [passages] [queries]`` (default 10000, 200).

A synthetic corpus of ``passages`` short passages (deterministic: seeded word choices from a
fixed vocabulary) is indexed with the default ``HashingEmbedder`` (256 dimensions) into the
SQLite document and vector stores, in a temporary directory. Then ``queries`` queries are
timed, after a warm-up query (which loads the vector matrix from SQLite once):

* ``vector``: ``SqliteVectorStore.search`` of a precomputed query vector (exact cosine,
  one numpy matrix-vector product over all 10k vectors);
* ``keyword``: ``SqliteDocumentStore.search`` (FTS5 ``bm25``);
* ``hybrid``: ``hybrid_search`` as the rag ``retrieve`` node runs it: embed the query,
  both searches (20 candidates each), reciprocal rank fusion, fetch the 4 passages.

Figures are medians (and p95) in milliseconds per query; indexing time is reported too.
The synthetic vocabulary is tiny (63 words), so nearly every keyword query matches most of
the corpus: the keyword and hybrid figures are a worst case for FTS5. On the 2-CPU dev
machine: indexing ~1.2-1.9 s, vector ~0.3 ms, keyword ~7 ms, hybrid ~16 ms (medians).
"""

from __future__ import annotations

import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

from stargraph.skills.refs import (
    HashingEmbedder,
    Passage,
    SqliteDocumentStore,
    SqliteVectorStore,
    hybrid_search,
    index_passages,
)

WORDS = [
    "bee",
    "colony",
    "queen",
    "worker",
    "honey",
    "nectar",
    "pollen",
    "flower",
    "hive",
    "wax",
    "comb",
    "dance",
    "mite",
    "virus",
    "lighthouse",
    "lamp",
    "lens",
    "beam",
    "harbour",
    "ship",
    "granite",
    "quartz",
    "mica",
    "rock",
    "river",
    "delta",
    "valley",
    "mountain",
    "glacier",
    "forest",
    "canopy",
    "root",
    "seed",
    "leaf",
    "storm",
    "wind",
    "rain",
    "cloud",
    "winter",
    "summer",
    "city",
    "bridge",
    "tower",
    "market",
    "road",
    "engine",
    "steam",
    "copper",
    "iron",
    "silver",
    "gold",
    "coin",
    "trade",
    "law",
]


def corpus(n: int, seed: int = 7) -> list[Passage]:
    """``n`` deterministic passages of 12 to 30 words."""
    rng = random.Random(seed)
    return [
        Passage(
            id=f"p{i}",
            text=" ".join(rng.choice(WORDS) for _ in range(rng.randint(12, 30))) + ".",
            source=f"synthetic/{i // 10}",
        )
        for i in range(n)
    ]


def timed(fn: object, inputs: list[object]) -> list[float]:
    """Milliseconds per call of ``fn(x)`` for each input."""
    out = []
    for x in inputs:
        start = time.perf_counter()
        fn(x)  # type: ignore[operator]
        out.append((time.perf_counter() - start) * 1000)
    return out


def summary(name: str, ms: list[float]) -> str:
    p95 = sorted(ms)[int(0.95 * (len(ms) - 1))]
    return f"{name:<8} median {statistics.median(ms):7.3f} ms/query   p95 {p95:7.3f} ms"


def main(passages: int = 10_000, queries: int = 200) -> dict[str, float]:
    """Index, time, print; returns the medians (ms) by measurement."""
    embedder = HashingEmbedder()
    rng = random.Random(11)
    texts = [" ".join(rng.choice(WORDS) for _ in range(rng.randint(2, 6))) for _ in range(queries)]
    with tempfile.TemporaryDirectory() as tmp:
        docs = SqliteDocumentStore(Path(tmp) / "docs.db")
        vectors = SqliteVectorStore(Path(tmp) / "vectors.db")
        start = time.perf_counter()
        index_passages(corpus(passages), docs=docs, vectors=vectors, embedder=embedder)
        indexing = time.perf_counter() - start
        vectors.search(embedder.embed(["warm up"])[0], 4)  # loads the matrix once
        query_vectors = list(embedder.embed(texts))
        results = {
            "vector": timed(lambda v: vectors.search(v, 20), query_vectors),  # type: ignore[arg-type]
            "keyword": timed(lambda q: docs.search(q, 20), texts),  # type: ignore[arg-type]
            "hybrid": timed(
                lambda q: hybrid_search(q, docs=docs, vectors=vectors, embedder=embedder),  # type: ignore[arg-type]
                texts,
            ),
        }
        docs.close()
        vectors.close()
    print(f"{passages} passages, {embedder.name}; indexed in {indexing:.2f} s; {queries} queries")
    for name, ms in results.items():
        print(summary(name, ms))
    return {name: statistics.median(ms) for name, ms in results.items()}


if __name__ == "__main__":
    main(*(int(a) for a in sys.argv[1:3]))
