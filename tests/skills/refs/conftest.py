"""Shared fixtures of the reference-skill tests: the fixture corpus in SQLite or memory
stores, the real OpenAI client against the scripted server, and a local web site."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from stargraph.llm import OpenAIChatModel
from stargraph.skills.refs import (
    HashingEmbedder,
    Passage,
    SqliteDocumentStore,
    SqliteVectorStore,
    index_passages,
)
from stargraph.testing import ScriptedOpenAIServer
from stargraph.testing.pytest_plugin import scripted_openai  # noqa: F401

DATA = Path(__file__).parent / "data"


def load_corpus() -> list[Passage]:
    """The twelve fixture passages (bees, lighthouses, granite)."""
    lines = (DATA / "corpus.jsonl").read_text(encoding="utf-8").splitlines()
    return [Passage.model_validate(json.loads(line)) for line in lines if line.strip()]


@dataclass
class Corpus:
    """Indexed stores plus the services a retrieval node needs."""

    docs: SqliteDocumentStore
    vectors: SqliteVectorStore
    embedder: HashingEmbedder

    def services(self, **more: Any) -> dict[str, Any]:
        return {"docs": self.docs, "vectors": self.vectors, "embedder": self.embedder, **more}


@pytest.fixture
def corpus(tmp_path: Path) -> Iterator[Corpus]:
    """The fixture corpus indexed into SQLite stores on disk."""
    found = Corpus(
        SqliteDocumentStore(tmp_path / "docs.db"),
        SqliteVectorStore(tmp_path / "vectors.db"),
        HashingEmbedder(),
    )
    index_passages(load_corpus(), docs=found.docs, vectors=found.vectors, embedder=found.embedder)
    yield found
    found.docs.close()
    found.vectors.close()


@pytest.fixture
def empty_corpus(tmp_path: Path) -> Iterator[Corpus]:
    """Stores with nothing in them."""
    found = Corpus(SqliteDocumentStore(), SqliteVectorStore(), HashingEmbedder())
    yield found
    found.docs.close()
    found.vectors.close()


@pytest.fixture
def chat(scripted_openai: ScriptedOpenAIServer) -> Iterator[OpenAIChatModel]:  # noqa: F811
    """The real OpenAI client talking to the scripted server."""
    model = OpenAIChatModel(
        "gpt-test", base_url=scripted_openai.base_url, api_key="sk-test", timeout=5.0
    )
    yield model
    model.close()


@pytest.fixture
def site() -> Iterator[str]:
    """``tests/skills/refs/data/site`` served on 127.0.0.1; yields the base URL (no trailing /)."""

    class Handler(SimpleHTTPRequestHandler):
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, directory=str(DATA / "site"), **kwargs)

        def log_message(self, *_: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()
    thread.join()
