"""Reference skills: ``rag`` (workflow), ``autoresearch`` (agent) and ``wiki`` (agent).

Each is a compiled graph built only from stargraph's public API, shipped as a built-in
plugin: ``builtin_skills()`` is what the built-in ``register_skills`` hook registers. The
skills hold no live objects; stores, embedder, chat model and tool arbiter reach their nodes
as ``compile(services={...})``:

=============  =============================================================================
service        what
=============  =============================================================================
``docs``       a :class:`~stargraph.skills.refs.stores.DocumentStore` (passages, keywords)
``vectors``    a :class:`~stargraph.skills.refs.stores.VectorStore` (cosine search)
``embedder``   an :class:`~stargraph.skills.refs.embed.Embedder` (default: hashing n-grams)
``model``      a :class:`~stargraph.llm.ChatModel`
``arbiter``    a tool :class:`~stargraph.tools.Arbiter` (autoresearch only; see
               :func:`~stargraph.skills.refs.autoresearch.research_arbiter`)
=============  =============================================================================
"""

from __future__ import annotations

from stargraph.skills import Skill
from stargraph.skills.refs.embed import Embedder, HashingEmbedder, MiniLMEmbedder
from stargraph.skills.refs.retrieval import hybrid_search, index_passages
from stargraph.skills.refs.stores import (
    DocumentStore,
    Hit,
    InMemoryDocumentStore,
    InMemoryVectorStore,
    Passage,
    SqliteDocumentStore,
    SqliteVectorStore,
    StoreError,
    VectorStore,
)

__all__ = [
    "DocumentStore",
    "Embedder",
    "HashingEmbedder",
    "Hit",
    "InMemoryDocumentStore",
    "InMemoryVectorStore",
    "MiniLMEmbedder",
    "Passage",
    "SqliteDocumentStore",
    "SqliteVectorStore",
    "StoreError",
    "VectorStore",
    "builtin_skills",
    "hybrid_search",
    "index_passages",
]


def builtin_skills() -> tuple[Skill, ...]:
    """The three reference skills, with default settings: rag, autoresearch, wiki."""
    from stargraph.skills.refs.autoresearch import autoresearch_skill
    from stargraph.skills.refs.rag import rag_skill
    from stargraph.skills.refs.wiki import wiki_skill

    return (rag_skill, autoresearch_skill, wiki_skill)
