"""Request options on the reference skills (issue 47): ``rag_graph``, ``wiki_graph`` and
``autoresearch_graph`` take ``temperature=`` and ``request=RequestOptions(...)`` as ReAct
does, every model call they make sends them (the real ``openai`` client against the scripted
server), the run's record keeps them and replays offline, and a node without options
hashes as before."""

# Fixtures are imported from test_refs_autoresearch and then requested as arguments, which
# pyflakes reads as redefinitions.
# ruff: noqa: F811

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from stargraph.checkpoint import SqliteStore
from stargraph.errors import SkillValidationError
from stargraph.graph import Graph
from stargraph.llm import OpenAIChatModel, RequestOptions
from stargraph.skills.refs.autoresearch import autoresearch_graph
from stargraph.skills.refs.rag import rag_graph
from stargraph.skills.refs.wiki import wiki_graph
from stargraph.testing import RecordedRequest, Reply, ScriptedOpenAIServer
from stargraph.tools import Arbiter
from tests.skills.refs import test_refs_wiki
from tests.skills.refs.conftest import Corpus
from tests.skills.refs.test_refs_autoresearch import TASK, agent, arbiter  # noqa: F401
from tests.skills.refs.test_refs_rag import QUESTION

OPTIONS = RequestOptions(max_tokens=64, seed=7)


def sent_options(request: RecordedRequest) -> tuple[Any, Any, Any]:
    """(temperature, max tokens, seed) as the server received them."""
    body = request.body
    assert body is not None
    tokens = body.get("max_tokens", body.get("max_completion_tokens"))
    return body.get("temperature"), tokens, body.get("seed")


def test_issue47_rag_sends_its_request_options_and_replays_them_offline(
    scripted_openai: ScriptedOpenAIServer, chat: OpenAIChatModel, corpus: Corpus, tmp_path: Path
) -> None:
    # A first answer citing nothing is retried: both model calls carry the options.
    scripted_openai.set_script([Reply.text("They dance."), Reply.text("They dance [p2].")])
    graph = rag_graph(temperature=0.2, request=OPTIONS)
    store = SqliteStore(tmp_path / "runs.db")
    live = graph.compile(store=store, services=corpus.services(model=chat))
    final = live.invoke({"question": QUESTION}, run_id="rag")
    assert (final.outcome, final.attempts) == ("answered", 2)
    assert [sent_options(r) for r in scripted_openai.chat_requests] == [(0.2, 64, 7)] * 2
    # The record holds the options (whole in the first request of the conversation) ...
    recorded = [e.request for s in store.get_steps("rag") for e in s.calls if e.kind == "llm"]
    assert len(recorded) == 2
    assert (recorded[0]["temperature"], recorded[0]["max_tokens"], recorded[0]["seed"]) == (
        0.2,
        64,
        7,
    )
    # ... and the run replays from it with no server at all.
    dead = OpenAIChatModel("gpt-test", base_url="http://127.0.0.1:9/v1", api_key="x")
    offline = graph.compile(store=store, services={"model": dead})
    assert offline.replay("rag") == final == live.get_state("rag")
    dead.close()
    store.close()


def test_issue47_wiki_sends_its_request_options_from_plan_and_write(
    scripted_openai: ScriptedOpenAIServer, chat: OpenAIChatModel, corpus: Corpus
) -> None:
    answer, _ = test_refs_wiki.script(test_refs_wiki.GOOD)
    scripted_openai.set_script(answer)
    graph = wiki_graph(temperature=0.0, request=OPTIONS)
    final = graph.compile(services=corpus.services(model=chat)).invoke({"topic": "Honeybees"})
    assert final.outcome == "written"
    requests = scripted_openai.chat_requests
    assert len(requests) == 2  # the plan, then the entry
    assert [sent_options(r) for r in requests] == [(0.0, 64, 7)] * 2


def test_issue47_autoresearch_sends_its_request_options_with_the_report_schema(
    scripted_openai: ScriptedOpenAIServer, chat: OpenAIChatModel, arbiter: Arbiter, site: str
) -> None:
    url = f"{site}/waggle.html"
    claims = [{"text": "Karl von Frisch decoded the waggle dance.", "sources": [url]}]
    scripted_openai.set_script(agent(url, claims))
    graph = autoresearch_graph(temperature=0.5, request=OPTIONS)
    app = graph.compile(services={"model": chat, "arbiter": arbiter})
    final = app.invoke({"task": TASK})
    assert final.outcome == "reported"
    requests = scripted_openai.chat_requests
    assert len(requests) == 3
    assert [sent_options(r) for r in requests] == [(0.5, 64, 7)] * 3


@pytest.mark.parametrize(
    "build", [rag_graph, wiki_graph, autoresearch_graph], ids=["rag", "wiki", "autoresearch"]
)
def test_issue47_options_are_in_the_hash_and_no_options_hash_as_before(build: Any) -> None:
    plain: Graph[Any] = build()
    # Default options are no options: the same graph, the same hash.
    assert build(request=RequestOptions()).graph_hash == plain.graph_hash
    assert build(temperature=None, request=None).graph_hash == plain.graph_hash
    assert build(request=RequestOptions(seed=7)).graph_hash != plain.graph_hash
    assert (
        build(request=RequestOptions(seed=8)).graph_hash
        != build(request=RequestOptions(seed=7)).graph_hash
    )


@pytest.mark.parametrize("build", [rag_graph, wiki_graph, autoresearch_graph])
def test_issue47_bad_options_are_refused_naming_the_argument(build: Any) -> None:
    with pytest.raises(SkillValidationError) as info:
        build(temperature=3, request={"max_tokens": 64})
    pointers = [p.pointer for p in info.value.problems]
    assert pointers == ["/temperature", "/request"]
    assert "pass request=RequestOptions(max_tokens=256, seed=7)" in str(info.value)
