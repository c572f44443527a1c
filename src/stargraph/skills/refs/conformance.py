"""Conformance suites for :class:`~stargraph.skills.refs.stores.DocumentStore` and
:class:`~stargraph.skills.refs.stores.VectorStore` implementations.

Any implementation - the shipped SQLite and in-memory stores, or a third party's - passes
``check_document_store(factory)`` and ``check_vector_store(factory)``, where ``factory()``
returns a new, empty store. Each check raises ``AssertionError`` naming what failed and
closes every store it opened.

>>> from stargraph.skills.refs.stores import InMemoryDocumentStore, InMemoryVectorStore
>>> check_document_store(InMemoryDocumentStore)
>>> check_vector_store(InMemoryVectorStore)
"""

from __future__ import annotations

import itertools
from collections.abc import Callable

import numpy as np

from stargraph.skills.refs.stores import DocumentStore, Passage, StoreError, VectorStore

__all__ = ["CORPUS", "check_document_store", "check_vector_store"]

CORPUS = (
    Passage(id="p1", text="The Eiffel Tower is in Paris, the capital of France.", source="a"),
    Passage(id="p2", text="Berlin is the capital of Germany.", source="b"),
    Passage(id="p3", text="Bananas are rich in potassium.", source="c", title="Fruit"),
    Passage(id="p4", text="Paris hosted the Olympic Games in 1900 and 1924.", source="a"),
)
"""A four-passage corpus the suites index."""


def _expect(condition: bool, what: str) -> None:
    if not condition:
        raise AssertionError(what)


def check_document_store(factory: Callable[[], DocumentStore]) -> None:
    """Run the document store suite against fresh stores from ``factory``."""
    store = factory()
    try:
        _expect(isinstance(store, DocumentStore), "the store does not satisfy DocumentStore")
        _expect(len(store) == 0, "a new store is not empty")
        _expect(store.search("paris", k=3) == [], "an empty store found something")
        store.add(CORPUS)
        _expect(len(store) == 4, f"expected 4 passages, got {len(store)}")
        got = store.get(["p3", "missing", "p1"])
        _expect(
            [p.id for p in got] == ["p3", "p1"], "get() must keep the order and skip unknown ids"
        )
        _expect(got[0] == CORPUS[2], "get() must return the passage as stored (all fields)")
        hits = store.search("Paris capital", k=10)
        ids = [h.id for h in hits]
        _expect(ids[0] == "p1", f"the passage with both words must rank first, got {ids}")
        _expect(set(ids) == {"p1", "p2", "p4"}, f"only passages sharing a word match: {ids}")
        _expect(
            all(a.score >= b.score for a, b in itertools.pairwise(hits)),
            "hits must be ordered best first",
        )
        _expect(len(store.search("paris capital", k=1)) == 1, "k must bound the result")
        _expect(store.search("PARIS", k=5) == store.search("paris", k=5), "search ignores case")
        _expect(store.search("zebra", k=5) == [], "a word no passage has must match nothing")
        _expect(store.search("?!", k=5) == [], "a query without words must match nothing")
        _expect(store.search('"quoted" OR', k=5) == [], "query syntax must be treated as words")
        store.add([Passage(id="p3", text="Zebras live in Africa.")])
        _expect(len(store) == 4, "re-adding an id must replace, not duplicate")
        _expect([h.id for h in store.search("zebras", k=5)] == ["p3"], "replaced text searchable")
        _expect(store.search("bananas", k=5) == [], "the replaced text must be gone")
        try:
            store.search("paris", k=0)
        except StoreError:
            pass
        else:
            raise AssertionError("k=0 must raise StoreError")
    finally:
        store.close()


def check_vector_store(factory: Callable[[], VectorStore]) -> None:
    """Run the vector store suite against fresh stores from ``factory``."""
    store = factory()
    try:
        _expect(isinstance(store, VectorStore), "the store does not satisfy VectorStore")
        _expect(len(store) == 0, "a new store is not empty")
        _expect(store.search(np.ones(3, dtype=np.float32), k=2) == [], "empty store found hits")
        store.add(
            ["a", "b", "c", "d"],
            np.array([[1, 0, 0], [0, 2, 0], [1, 1, 0], [0, 0, -1]], dtype=np.float32),
        )
        _expect(len(store) == 4, f"expected 4 vectors, got {len(store)}")
        hits = store.search(np.array([3, 0, 0], dtype=np.float32), k=4)
        _expect([h.id for h in hits][:2] == ["a", "c"], f"cosine order wrong: {hits}")
        _expect(abs(hits[0].score - 1.0) < 1e-5, "cosine of parallel vectors must be 1")
        _expect(abs(hits[1].score - 2**-0.5) < 1e-5, "scores must be cosine similarities")
        _expect(len(store.search([0, 1, 0], k=2)) == 2, "k must bound the result (lists too)")
        tied = store.search(np.array([0, 1, 0], dtype=np.float32), k=4)
        _expect([h.id for h in tied][:2] == ["b", "c"], f"best first: {tied}")
        _expect(
            [h.id for h in store.search(np.array([1, 1, 0], dtype=np.float32), k=3)]
            == ["c", "a", "b"],
            "equal scores must be ordered by id",
        )
        store.add(["d"], np.array([[5, 0, 0]], dtype=np.float32))
        _expect(len(store) == 4, "re-adding an id must replace, not duplicate")
        top = store.search(np.array([1, 0, 0], dtype=np.float32), k=2)
        _expect([h.id for h in top] == ["a", "d"], f"replaced vector must be searched: {top}")
        for bad in (np.ones((1, 4), dtype=np.float32), np.array([[np.nan, 0, 0]])):
            try:
                store.add(["x"], bad)
            except StoreError:
                continue
            raise AssertionError(f"adding {bad!r} must raise StoreError")
        _expect(len(store) == 4, "a refused add must change nothing")
        try:
            store.search(np.ones(4, dtype=np.float32), k=1)
        except StoreError:
            pass
        else:
            raise AssertionError("a query of the wrong length must raise StoreError")
    finally:
        store.close()
