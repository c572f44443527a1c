"""The rag reference skill end to end: mounted in a parent graph, the real OpenAI client
against the scripted server, the fixture corpus in SQLite stores; and its replay."""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel

from stargraph.checkpoint import SqliteStore
from stargraph.graph import END, START, Graph
from stargraph.llm import OpenAIChatModel
from stargraph.nodes import SubgraphNode
from stargraph.skills import SkillKind
from stargraph.skills.refs.rag import INSUFFICIENT, make_rag_skill, rag_graph, rag_skill
from stargraph.skills.refs.stores import Passage
from stargraph.testing import RecordedRequest, Reply, ScriptedOpenAIServer
from tests.skills.refs.conftest import Corpus

QUESTION = "How do honeybees tell nestmates where the flowers are?"


class Host(BaseModel):
    """A parent graph's state sharing the rag skill's channel names."""

    question: str = ""
    answer: str | None = None
    citations: list[str] = []
    passages: list[Passage] = []
    attempts: int = 0
    outcome: Literal["answered", "insufficient_context"] | None = None
    log: list[str] = []


def prepare(state: Host) -> dict[str, Any]:
    return {"log": [*state.log, "prepared"], "question": state.question.strip()}


def report(state: Host) -> dict[str, Any]:
    return {"log": [*state.log, f"reported {state.outcome}"]}


def host_graph() -> Graph[Host]:
    """The issue's composition: ``Graph(parent_ir).with_node(SubgraphNode.from_skill(...))``."""
    parent_ir = Graph("host", state=Host).with_node("prepare", prepare).to_ir()
    return (
        Graph(parent_ir)
        .with_node(SubgraphNode.from_skill(rag_skill, site="step-3"))
        .with_node("report", report)
        .with_edge(START, "prepare")
        .with_edge("prepare", "step-3")
        .with_edge("step-3", "report")
        .with_edge("report", END)
    )


def given(request: RecordedRequest) -> dict[str, str]:
    """Passage id -> text, as the answer node showed them to the model."""
    user = next(m["content"] for m in request.messages if m["role"] == "user")
    return dict(re.findall(r"^\[(\w+)\](?: \([^)]*\))? (.+)$", user, re.MULTILINE))


def scripted(*answers: Callable[[dict[str, str]], str]) -> Callable[[RecordedRequest], Reply]:
    """A script answering the n-th request with ``answers[n](passages shown)``."""
    calls: list[int] = []

    def script(request: RecordedRequest) -> Reply:
        calls.append(1)
        return Reply.text(answers[len(calls) - 1](given(request)))

    return script


def test_rag_is_a_workflow_skill_with_separate_nodes() -> None:
    assert rag_skill.kind is SkillKind.WORKFLOW
    ir = rag_skill.subgraph
    assert ir is not None
    assert not isinstance(ir, str)
    assert sorted(n.id for n in ir.nodes) == ["answer", "give_up", "retrieve", "validate"]
    assert [n.id for n in ir.nodes if n.must_stub] == ["answer"]
    # Behaviour lives in hashed node config: another budget is another graph.
    assert make_rag_skill(budget=3).subgraph != ir
    assert rag_skill.declared_outputs == ("answer", "attempts", "citations", "outcome", "passages")


def test_answer_cites_only_retrieved_passages(
    scripted_openai: ScriptedOpenAIServer, chat: OpenAIChatModel, corpus: Corpus
) -> None:
    seen: dict[str, str] = {}

    def answer(passages: dict[str, str]) -> str:
        seen.update(passages)
        return "Workers perform the waggle dance to show direction and distance [p2]."

    scripted_openai.set_script(scripted(answer))
    final = (
        host_graph()
        .compile(services=corpus.services(model=chat))
        .invoke({"question": f"  {QUESTION} "})
    )
    # The model was given the retrieved passages' text, the best one included.
    assert "p2" in seen
    assert seen["p2"].startswith("Worker honeybees perform the waggle dance")
    assert len(seen) == 4
    assert final.outcome == "answered"
    assert final.answer == "Workers perform the waggle dance to show direction and distance [p2]."
    assert final.citations == ["p2"]
    assert set(final.citations) <= {p.id for p in final.passages}
    assert [p.id for p in final.passages] == list(seen)
    assert final.attempts == 1
    assert final.log == ["prepared", "reported answered"]
    request = scripted_openai.chat_requests[0]
    assert request.messages[0]["role"] == "system"
    assert "square brackets" in request.messages[0]["content"]


def test_citing_a_passage_not_retrieved_is_retried_then_insufficient_context(
    scripted_openai: ScriptedOpenAIServer, chat: OpenAIChatModel, corpus: Corpus
) -> None:
    # p10 (granite) exists in the corpus but is never retrieved for a bee question.
    scripted_openai.set_script(
        scripted(
            lambda _: "Bees dance [p2] on granite [p10].",
            lambda _: "Still granite [p10].",
        )
    )
    app = host_graph().compile(services=corpus.services(model=chat))
    final = app.invoke({"question": QUESTION})
    assert "p10" not in {p.id for p in final.passages}
    assert final.answer == INSUFFICIENT
    assert final.outcome == "insufficient_context"
    assert final.citations == []
    assert final.attempts == 2
    retry = scripted_openai.chat_requests[1].messages
    assert retry[-2] == {"role": "assistant", "content": "Bees dance [p2] on granite [p10]."}
    assert "cites ['p10'], which are not among the passages" in retry[-1]["content"]


def test_a_retry_can_recover(
    scripted_openai: ScriptedOpenAIServer, chat: OpenAIChatModel, corpus: Corpus
) -> None:
    scripted_openai.set_script(scripted(lambda _: "They dance.", lambda _: "They dance [p2]."))
    final = rag_graph().compile(services=corpus.services(model=chat)).invoke({"question": QUESTION})
    assert (final.outcome, final.answer, final.attempts) == ("answered", "They dance [p2].", 2)
    assert "cites no passage" in scripted_openai.chat_requests[1].messages[-1]["content"]


def test_model_saying_insufficient_context_is_not_retried(
    scripted_openai: ScriptedOpenAIServer, chat: OpenAIChatModel, corpus: Corpus
) -> None:
    scripted_openai.set_script(scripted(lambda _: "INSUFFICIENT CONTEXT"))
    final = (
        rag_graph()
        .compile(services=corpus.services(model=chat))
        .invoke({"question": "Who won the 1998 World Cup?"})
    )
    assert (final.answer, final.outcome, final.attempts) == (
        INSUFFICIENT,
        "insufficient_context",
        1,
    )


def test_empty_corpus_ends_with_insufficient_context_without_a_model_call(
    scripted_openai: ScriptedOpenAIServer, chat: OpenAIChatModel, empty_corpus: Corpus
) -> None:
    final = (
        host_graph()
        .compile(services=empty_corpus.services(model=chat))
        .invoke({"question": QUESTION})
    )
    assert (final.answer, final.outcome, final.passages) == (
        INSUFFICIENT,
        "insufficient_context",
        [],
    )
    assert scripted_openai.chat_requests == []


def test_recorded_run_replays_offline_with_the_server_stopped(
    tmp_path: Path, corpus: Corpus
) -> None:
    store = SqliteStore(tmp_path / "runs.db")
    graph = host_graph()
    with ScriptedOpenAIServer(
        [Reply.text("Bees dance [p9]."), Reply.text("Bees dance [p2] [p1].")]
    ) as server:
        live_model = OpenAIChatModel("gpt-test", base_url=server.base_url, api_key="x")
        live = graph.compile(store=store, services=corpus.services(model=live_model))
        final = live.invoke({"question": QUESTION}, run_id="golden")
        live_model.close()
    assert final.outcome == "answered"
    assert final.citations == ["p2", "p1"]
    # Offline: the server is gone, and no store is given - retrieval is served from the record.
    dead = OpenAIChatModel("gpt-test", base_url="http://127.0.0.1:9/v1", api_key="x")
    offline = graph.compile(store=store, services={"model": dead})
    assert offline.replay("golden") == final == live.get_state("golden")
    dead.close()
    store.close()
