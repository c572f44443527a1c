"""Each reference skill's run is recorded and replays offline (issue 11): record with a
``SqliteStore``, stop the scripted model server (and the local web site), replay with
``app.replay(run_id)`` and get the same final state. The rag replay is in
``test_refs_rag.py``; autoresearch and wiki are here."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from stargraph.checkpoint import SqliteStore
from stargraph.llm import OpenAIChatModel
from stargraph.skills.refs import HashingEmbedder, SqliteDocumentStore, SqliteVectorStore
from stargraph.skills.refs.autoresearch import Report, research_arbiter
from stargraph.testing import ScriptedOpenAIServer
from tests.skills.refs import test_refs_autoresearch as autoresearch
from tests.skills.refs import test_refs_wiki as wiki
from tests.skills.refs.conftest import DATA, Corpus

DEAD = "http://127.0.0.1:9/v1"  # nothing listens there


@contextmanager
def serve_site() -> Iterator[str]:
    """``tests/skills/refs/data/site`` on 127.0.0.1 until the block ends (``conftest.site``, but
    stoppable mid-test)."""

    class Handler(SimpleHTTPRequestHandler):
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, directory=str(DATA / "site"), **kwargs)

        def log_message(self, *_: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


def _offline_arbiter(tmp_path: Path) -> Any:
    """An arbiter whose tools could answer nothing: an empty corpus, and no site."""
    (tmp_path / "offline-ws").mkdir()
    return research_arbiter(
        docs=SqliteDocumentStore(),
        vectors=SqliteVectorStore(),
        embedder=HashingEmbedder(),
        workspace=tmp_path / "offline-ws",
    )


def test_autoresearch_run_replays_offline(
    tmp_path: Path, corpus: Corpus, store: SqliteStore
) -> None:
    graph = autoresearch.host_graph()
    (tmp_path / "ws").mkdir()
    with serve_site() as site, ScriptedOpenAIServer() as server:
        url = f"{site}/waggle.html"
        claims = [
            {"text": "Karl von Frisch decoded the waggle dance.", "sources": [url]},
            {"text": "The dance gives direction and distance to flowers.", "sources": ["p2"]},
        ]
        server.set_script(autoresearch.agent(url, claims))
        live_model = OpenAIChatModel("gpt-test", base_url=server.base_url, api_key="x")
        with research_arbiter(
            docs=corpus.docs,
            vectors=corpus.vectors,
            embedder=corpus.embedder,
            workspace=tmp_path / "ws",
        ) as arbiter:
            live = graph.compile(store=store, services={"model": live_model, "arbiter": arbiter})
            final = live.invoke({"task": autoresearch.TASK}, run_id="research")
        live_model.close()
        assert len(server.chat_requests) == 3
    assert final.outcome == "reported"
    assert final.report == Report.model_validate({"claims": claims})
    assert final.sources[0] == "p2"
    assert final.sources[-1] == url
    # Offline: the model server and the site are gone, the arbiter's corpus is empty.
    dead = OpenAIChatModel("gpt-test", base_url=DEAD, api_key="x")
    with _offline_arbiter(tmp_path) as offline_arbiter:
        offline = graph.compile(store=store, services={"model": dead, "arbiter": offline_arbiter})
        assert offline.replay("research") == final == live.get_state("research")
        # Served from the record: no tool was dispatched.
        assert offline_arbiter.commit_log.records() == []
    dead.close()


def test_wiki_run_replays_offline(tmp_path: Path, corpus: Corpus, store: SqliteStore) -> None:
    graph = wiki.host_graph()
    answer, _ = wiki.script(wiki.GOOD)
    with ScriptedOpenAIServer() as server:
        server.set_script(answer)
        live_model = OpenAIChatModel("gpt-test", base_url=server.base_url, api_key="x")
        live = graph.compile(store=store, services=corpus.services(model=live_model))
        final = live.invoke({"topic": "Honeybees"}, run_id="wiki")
        live_model.close()
        assert len(server.chat_requests) == 2  # plan, then one draft
    assert final.outcome == "written"
    assert final.entry == wiki.GOOD
    assert len(final.sources) > 0
    # Offline: the server is gone, and no corpus is given - research is served from the
    # record, so the three parallel research tasks get back exactly what they retrieved.
    dead = OpenAIChatModel("gpt-test", base_url=DEAD, api_key="x")
    offline = graph.compile(store=store, services={"model": dead})
    assert offline.replay("wiki") == final == live.get_state("wiki")
    dead.close()
