"""The autoresearch reference skill end to end: the ReAct loop with the built-in http.fetch
(against a local site) and the retrieval tool (against the fixture corpus), the real OpenAI
client and the scripted server, producing a source-checked structured Report."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, Literal

import pytest
from pydantic import BaseModel

from stargraph.checkpoint import SqliteStore
from stargraph.graph import END, START, Graph
from stargraph.llm import OpenAIChatModel
from stargraph.nodes import SubgraphNode
from stargraph.skills import SkillKind
from stargraph.skills.refs.autoresearch import (
    FETCH_TOOL,
    RETRIEVE_TOOL,
    Report,
    autoresearch_skill,
    research_arbiter,
)
from stargraph.testing import RecordedRequest, Reply, ScriptedOpenAIServer
from stargraph.tools import Arbiter
from tests.skills.refs.conftest import Corpus

# The names the model is offered (and calls) for the two tools.
FETCH = "fetch"
RETRIEVE = "retrieve"
TASK = "Who decoded the honeybee waggle dance, and what does it tell other bees?"


class Host(BaseModel):
    """A parent graph's state: the skill's input and its declared outputs."""

    task: str = ""
    report: Report | None = None
    outcome: Literal["reported", "unsupported", "no_report"] | None = None
    unsupported: list[str] = []
    sources: list[str] = []
    final_answer: str | None = None


def host_graph() -> Graph[Host]:
    return (
        Graph("host", state=Host)
        .with_node(SubgraphNode.from_skill(autoresearch_skill, site="research-step"))
        .with_edge(START, "research-step")
        .with_edge("research-step", END)
    )


@pytest.fixture
def arbiter(corpus: Corpus, tmp_path: Path) -> Iterator[Arbiter]:
    (tmp_path / "ws").mkdir()
    with research_arbiter(
        docs=corpus.docs,
        vectors=corpus.vectors,
        embedder=corpus.embedder,
        workspace=tmp_path / "ws",
    ) as arb:
        yield arb


def tool_results(request: RecordedRequest) -> list[Any]:
    return [json.loads(m["content"]) for m in request.messages if m["role"] == "tool"]


def agent(url: str, claims: list[dict[str, Any]]) -> Callable[[RecordedRequest], Reply]:
    """Retrieve, then fetch ``url``, then report ``claims``; checks what the tools returned."""

    def script(request: RecordedRequest) -> Reply:
        results = tool_results(request)
        if not results:
            assert request.body is not None
            offered = [t["function"]["name"] for t in request.body["tools"]]
            assert offered == [FETCH, RETRIEVE]
            return Reply.tool_calls([(RETRIEVE, {"query": "honeybee waggle dance"})])
        if len(results) == 1:
            passages = results[0]
            assert passages[0]["id"] == "p2"
            assert "waggle dance" in passages[0]["text"]
            return Reply.tool_calls([(FETCH, {"url": url})])
        return Reply.text(json.dumps({"claims": claims}))

    return script


def test_autoresearch_is_an_agent_skill_listing_its_tools() -> None:
    assert autoresearch_skill.kind is SkillKind.AGENT
    assert autoresearch_skill.tools == (FETCH_TOOL, RETRIEVE_TOOL)
    assert "report" in autoresearch_skill.declared_outputs


def test_structured_report_with_sources_the_agent_saw(
    scripted_openai: ScriptedOpenAIServer,
    chat: OpenAIChatModel,
    arbiter: Arbiter,
    site: str,
    tmp_path: Path,
) -> None:
    url = f"{site}/waggle.html"
    claims = [
        {"text": "Karl von Frisch decoded the waggle dance.", "sources": [url]},
        {"text": "The dance gives direction and distance to flowers.", "sources": ["p2"]},
    ]
    scripted_openai.set_script(agent(url, claims))
    store = SqliteStore(tmp_path / "runs.db")
    app = host_graph().compile(store=store, services={"model": chat, "arbiter": arbiter})
    final = app.invoke({"task": TASK}, run_id="research")
    assert final.outcome == "reported"
    assert final.report == Report.model_validate({"claims": claims})
    assert final.unsupported == []
    assert final.sources[0] == "p2"
    assert final.sources[-1] == url
    # The fetch really went to the local site: its text reached the model.
    page = tool_results(scripted_openai.chat_requests[2])[1]
    assert page["status"] == 200
    assert "Karl von Frisch" in page["body"]
    # The Report schema was required of the model.
    assert (
        "the field claims (list of object {text: string, sources: list of string})"
        in (scripted_openai.chat_requests[0].messages[0]["content"])
    )
    store.close()


def test_an_invented_source_is_rejected(
    scripted_openai: ScriptedOpenAIServer, chat: OpenAIChatModel, arbiter: Arbiter, site: str
) -> None:
    url = f"{site}/waggle.html"
    claims = [
        {"text": "Bees dance.", "sources": ["p2"]},
        {"text": "Bees vote.", "sources": ["https://example.org/made-up", "p99"]},
    ]
    scripted_openai.set_script(agent(url, claims))
    final = (
        host_graph().compile(services={"model": chat, "arbiter": arbiter}).invoke({"task": TASK})
    )
    assert final.outcome == "unsupported"
    assert final.report is None
    assert final.unsupported == ["https://example.org/made-up", "p99"]


def test_an_unreachable_url_is_not_a_source(
    scripted_openai: ScriptedOpenAIServer, chat: OpenAIChatModel, arbiter: Arbiter, site: str
) -> None:
    missing = f"{site}/no-such-page.html"  # HTTP 404
    dead = "http://127.0.0.1:9/down.html"  # connection refused
    calls = iter(
        [
            Reply.tool_calls([(FETCH, {"url": missing}), (FETCH, {"url": dead})]),
            Reply.text(json.dumps({"claims": [{"text": "x", "sources": [missing, dead]}]})),
        ]
    )
    scripted_openai.set_script(lambda _: next(calls))
    final = (
        host_graph().compile(services={"model": chat, "arbiter": arbiter}).invoke({"task": TASK})
    )
    assert (final.outcome, final.report, final.sources) == ("unsupported", None, [])
    assert final.unsupported == [missing, dead]


def test_no_valid_report_within_the_budget(
    scripted_openai: ScriptedOpenAIServer, chat: OpenAIChatModel, arbiter: Arbiter
) -> None:
    scripted_openai.set_script(lambda _: Reply.text("Bees are nice."))  # never a Report
    final = (
        host_graph().compile(services={"model": chat, "arbiter": arbiter}).invoke({"task": TASK})
    )
    assert (final.outcome, final.report) == ("no_report", None)
    assert len(scripted_openai.chat_requests) == 3  # the loop's error budget
