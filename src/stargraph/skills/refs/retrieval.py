"""Hybrid retrieval shared by the reference skills: vector + keyword, fused by reciprocal
rank fusion, and the citation syntax answers use (``[p3]``).

Nodes call :func:`retrieve` with their ``RunContext``: the stores and the embedder come from
``ctx.services`` (``"docs"``, ``"vectors"``, ``"embedder"``), every number from the node
config (hashed). The result is recorded in the run's journal, so a resumed step or a replay
gets the passages the live run saw without touching a store.

>>> reciprocal_rank_fusion([["a", "b"], ["b", "c"]], k=60)[0][0]
'b'
>>> citations("Paris [p1] is big [p4][p1].")
['p1', 'p4']
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Final

from stargraph.runtime import RunContext
from stargraph.skills._services import (
    node_error,
    request_fields,
    require_service,
    typed_service,
)
from stargraph.skills.refs.embed import Embedder
from stargraph.skills.refs.stores import DocumentStore, Passage, VectorStore

__all__ = [
    "CITATION",
    "RETRIEVAL_DEFAULTS",
    "ask_model",
    "citations",
    "format_passages",
    "hybrid_search",
    "index_passages",
    "reciprocal_rank_fusion",
    "retrieve",
]

CITATION: Final = re.compile(r"\[([A-Za-z0-9][A-Za-z0-9_.:#/-]*)\]")
"""A citation: a passage id or URL-ish source id in square brackets, e.g. ``[p3]``."""

RETRIEVAL_DEFAULTS: Final[Mapping[str, int]] = {"k": 4, "candidates": 20, "rrf_k": 60}
"""``k`` passages kept, ``candidates`` taken from each ranking, the RRF constant ``rrf_k``."""


def citations(text: str) -> list[str]:
    """The ids cited in ``text``, each once, in order of first appearance."""
    return list(dict.fromkeys(m.group(1) for m in CITATION.finditer(text)))


def reciprocal_rank_fusion(
    rankings: Sequence[Sequence[str]], k: int = 60
) -> list[tuple[str, float]]:
    """Fuse rankings: ``score(d) = sum over rankings of 1 / (k + rank)`` (rank from 1),
    best first, ties by id (Cormack et al., 2009)."""
    scores: dict[str, float] = {}
    for ranking in rankings:
        for rank, pid in enumerate(ranking, start=1):
            scores[pid] = scores.get(pid, 0.0) + 1.0 / (k + rank)
    return sorted(scores.items(), key=lambda item: (-item[1], item[0]))


def index_passages(
    passages: Iterable[Passage],
    *,
    docs: DocumentStore,
    vectors: VectorStore,
    embedder: Embedder,
    batch: int = 512,
) -> int:
    """Add passages to both stores (embedding their text); returns how many."""
    count = 0
    chunk: list[Passage] = []

    def flush() -> None:
        docs.add(chunk)
        vectors.add([p.id for p in chunk], embedder.embed([p.text for p in chunk]))
        chunk.clear()

    for passage in passages:
        chunk.append(passage)
        count += 1
        if len(chunk) >= batch:
            flush()
    if chunk:
        flush()
    return count


def hybrid_search(
    query: str,
    *,
    docs: DocumentStore,
    vectors: VectorStore,
    embedder: Embedder,
    k: int = 4,
    candidates: int = 20,
    rrf_k: int = 60,
) -> list[Passage]:
    """The ``k`` best passages for ``query``: ``candidates`` from the vector store and from
    keyword search, fused with :func:`reciprocal_rank_fusion`."""
    by_vector = [h.id for h in vectors.search(embedder.embed([query])[0], candidates)]
    by_words = [h.id for h in docs.search(query, candidates)]
    fused = reciprocal_rank_fusion([by_vector, by_words], k=rrf_k)
    return docs.get([pid for pid, _ in fused[:k]])


def retrieve(ctx: RunContext, query: str, config: Mapping[str, Any]) -> list[Passage]:
    """:func:`hybrid_search` for a node, with stores from ``ctx.services`` and numbers from
    ``config`` (defaults :data:`RETRIEVAL_DEFAULTS`); recorded in the run's journal.

    When ``config["embedder"]`` names an embedder, the service must be that one: vectors of
    two embedders are not comparable, and a silent swap would retrieve garbage.
    """
    settings = {
        name: int(config.get(name, default)) for name, default in RETRIEVAL_DEFAULTS.items()
    }
    request = {"query": query, **settings}

    def search() -> list[dict[str, Any]]:
        docs = typed_service(ctx, "docs", DocumentStore)
        vectors = typed_service(ctx, "vectors", VectorStore)
        embedder = typed_service(ctx, "embedder", Embedder)
        wanted = config.get("embedder")
        if wanted is not None and wanted != embedder.name:
            raise node_error(
                ctx,
                f"node {ctx.node!r} is configured for embedder {wanted!r} but "
                f"services['embedder'] is {embedder.name!r}; index and query with one embedder",
            )
        found = hybrid_search(query, docs=docs, vectors=vectors, embedder=embedder, **settings)
        return [p.model_dump() for p in found]

    rows = ctx.record_call("retrieval", ctx.node, request, search)
    return [Passage.model_validate(row) for row in rows]


def format_passages(passages: Sequence[Passage]) -> str:
    """Passages as the model reads them: ``[id] (title, source) text``, one per block."""
    blocks = []
    for p in passages:
        where = ", ".join(part for part in (p.title, p.source) if part)
        blocks.append(f"[{p.id}]" + (f" ({where})" if where else "") + f" {p.text}")
    return "\n\n".join(blocks)


def ask_model(ctx: RunContext, messages: Sequence[Any], config: Mapping[str, Any]) -> str:
    """One chat completion with ``services["model"]`` (recorded by the run's journal, like
    every model call); ``model``, ``temperature`` and the request options (``max_tokens``,
    ``seed`` ...) come from ``config``. Returns the text
    of the reply ("" when it had none)."""
    from stargraph.llm import ChatRequest

    model = require_service(
        ctx, "model", lambda found: callable(getattr(found, "complete", None)), "a ChatModel"
    )
    request = ChatRequest(
        messages=tuple(messages), model=config.get("model"), **request_fields(config)
    )
    response = model.complete(request)
    return str(response.message.content or "")
