"""The wiki reference skill end to end: planned queries fanned out with Send, research over
the fixture corpus, a Markdown entry whose every claim cites a retrieved source."""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Literal

from pydantic import BaseModel

from stargraph import reducers
from stargraph.checkpoint import SqliteStore
from stargraph.graph import END, START, Graph
from stargraph.llm import OpenAIChatModel
from stargraph.nodes import SubgraphNode
from stargraph.skills import SkillKind
from stargraph.skills.refs.stores import Passage
from stargraph.skills.refs.wiki import WikiClaim, split_claims, wiki_skill
from stargraph.testing import RecordedRequest, Reply, ScriptedOpenAIServer
from tests.skills.refs.conftest import Corpus

PLAN = '```json\n["honeybee colony", "waggle dance", "Varroa mite"]\n```'
GOOD = (
    "# Honeybee\n\n"
    "The western honeybee lives in colonies of up to 60,000 workers [p1]. "
    "Workers dance to show where flowers are [p2].\n\n"
    "## Threats\n\n"
    "- The Varroa mite spreads deformed wing virus [p7]."
)


class Host(BaseModel):
    """A parent graph's state: the skill's input and declared outputs."""

    topic: str = ""
    entry: str | None = None
    claims: list[WikiClaim] = []
    queries: list[str] = []
    sources: Annotated[list[Passage], reducers.append] = []
    uncited: list[str] = []
    attempts: int = 0
    outcome: Literal["written", "insufficient_context", "rejected"] | None = None


def host_graph() -> Graph[Host]:
    return (
        Graph("host", state=Host)
        .with_node(SubgraphNode.from_skill(wiki_skill, site="wiki-step"))
        .with_edge(START, "wiki-step")
        .with_edge("wiki-step", END)
    )


def source_text(request: RecordedRequest) -> dict[str, str]:
    user = next(m["content"] for m in request.messages if m["role"] == "user")
    return dict(re.findall(r"^\[(\w+)\](?: \([^)]*\))? (.+)$", user, re.MULTILINE))


def script(*drafts: str) -> tuple[Callable[[RecordedRequest], Reply], list[dict[str, str]]]:
    """Plan first, then the drafts in turn; records the sources each write request showed."""
    shown: list[dict[str, str]] = []

    def answer(request: RecordedRequest) -> Reply:
        if "Topic:" in request.messages[1]["content"] and "Sources:" not in str(request.messages):
            return Reply.text(PLAN)
        shown.append(source_text(request))
        return Reply.text(drafts[len(shown) - 1])

    return answer, shown


def test_wiki_is_an_agent_skill_fanning_out_with_send() -> None:
    assert wiki_skill.kind is SkillKind.AGENT
    ir = wiki_skill.subgraph
    assert ir is not None
    assert not isinstance(ir, str)
    assert sorted(n.id for n in ir.nodes if n.must_stub) == ["plan", "write"]


def test_every_claim_cites_a_retrieved_source(
    scripted_openai: ScriptedOpenAIServer,
    chat: OpenAIChatModel,
    corpus: Corpus,
    tmp_path: Path,
) -> None:
    answer, shown = script(GOOD)
    scripted_openai.set_script(answer)
    store = SqliteStore(tmp_path / "runs.db")
    app = host_graph().compile(store=store, services=corpus.services(model=chat))
    events = list(app.stream({"topic": "Honeybees"}, run_id="wiki"))
    final = app.get_state("wiki")
    assert final.outcome == "written"
    assert final.queries == ["honeybee colony", "waggle dance", "Varroa mite"]
    # The three research tasks ran in one step, one per query (the Send fan-out).
    research = [e for e in events if e.kind == "node_finished" and e.node == "research"]
    assert len(research) == 3
    assert len({e.step for e in research}) == 1
    assert final.entry == GOOD
    assert len(final.claims) == 3
    fetched = {p.id: p.text for p in final.sources}
    for claim in final.claims:
        assert claim.sources, f"uncited claim: {claim.text}"
        for cited in claim.sources:
            assert cited in fetched, f"{cited} was never retrieved"
            # The writer was shown the cited source's text.
            assert shown[0][cited] == fetched[cited]
    assert final.uncited == []
    assert final.attempts == 1
    store.close()


def test_an_uncited_claim_triggers_a_retry(
    scripted_openai: ScriptedOpenAIServer, chat: OpenAIChatModel, corpus: Corpus
) -> None:
    bad = GOOD + "\n\nBees can count to four."
    answer, _ = script(bad, GOOD)
    scripted_openai.set_script(answer)
    final = (
        host_graph().compile(services=corpus.services(model=chat)).invoke({"topic": "Honeybees"})
    )
    assert (final.outcome, final.entry, final.attempts) == ("written", GOOD, 2)
    retry = scripted_openai.chat_requests[-1].messages
    assert retry[-2] == {"role": "assistant", "content": bad}
    assert "cite no source: ['Bees can count to four.']" in retry[-1]["content"]


def test_uncited_or_invented_claims_within_the_budget_end_rejected(
    scripted_openai: ScriptedOpenAIServer, chat: OpenAIChatModel, corpus: Corpus
) -> None:
    answer, _ = script("# Bees\nBees can count to four.", "# Bees\nBees vote [p99].")
    scripted_openai.set_script(answer)
    final = (
        host_graph().compile(services=corpus.services(model=chat)).invoke({"topic": "Honeybees"})
    )
    assert (final.outcome, final.entry, final.claims, final.attempts) == ("rejected", None, [], 2)
    feedback = scripted_openai.chat_requests[-1].messages[-1]["content"]
    assert "cite no source: ['Bees can count to four.']" in feedback
    assert final.uncited == []  # the last draft cited, but a source never retrieved


def test_empty_corpus_ends_with_insufficient_context(
    scripted_openai: ScriptedOpenAIServer, chat: OpenAIChatModel, empty_corpus: Corpus
) -> None:
    answer, shown = script()
    scripted_openai.set_script(answer)
    final = (
        host_graph()
        .compile(services=empty_corpus.services(model=chat))
        .invoke({"topic": "Honeybees"})
    )
    assert (final.outcome, final.entry, final.sources) == ("insufficient_context", None, [])
    assert shown == []  # only the plan was asked of the model


def test_claim_splitting() -> None:
    text = "# T\n\n1. A is B [p1]. C is D.[p2] E [p3]\n---\n| x | y |\nNo cite here!"
    assert [(c.text, c.sources) for c in split_claims(text)] == [
        ("A is B [p1].", ["p1"]),
        ("C is D.[p2]", ["p2"]),
        ("E [p3]", ["p3"]),
        ("No cite here!", []),
    ]
