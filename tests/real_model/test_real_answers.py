"""Real answers from a real local model: tasks Qwen2.5-Coder-0.5B-Instruct solves at
temperature 0 with a fixed seed, each checked for the right answer (the number, the file, the
typed field, the machine's output, the cited passage), not only for having ended.

Replies are bounded by ``max_tokens``; the only clocks are deadlines that catch a hung server.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterator
from pathlib import Path

import pytest
from pydantic import BaseModel

from stargraph.checkpoint import SqliteStore
from stargraph.llm import OpenAIChatModel, RequestOptions, ResponseFormat
from stargraph.runtime import MessageChunk
from stargraph.skills.machine import MachineRuntime, parse_skillspec
from stargraph.skills.react import react_graph
from stargraph.tools import SqliteCommitLog
from tests.real_model import realagent

pytestmark = pytest.mark.real_model  # a llama.cpp model server (scripts/ensure_llama_server.sh)

MACHINE_DEADLINE_S = 600.0  # a hung server, not a slow one: every reply is bounded by tokens


def numbers(text: str | None) -> list[float]:
    return [float(n) for n in re.findall(r"-?\d+(?:\.\d+)?", text or "")]


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    root = tmp_path / "ws"
    root.mkdir()
    return root


@pytest.fixture
def store(tmp_path: Path) -> Iterator[SqliteStore]:
    db = SqliteStore(tmp_path / "runs.db")
    yield db
    db.close()


def test_tool_arithmetic_answers_the_product(
    chat: OpenAIChatModel, store: SqliteStore, workspace: Path
) -> None:
    with realagent.arbiter(workspace) as arbiter:
        app = realagent.answer_graph().compile(
            store=store, services={"model": chat, "arbiter": arbiter}
        )
        final = app.invoke({"task": "What is 17*23? Use the calc tool."}, run_id="calc")
    assert [(c.tool, c.status) for c in final.tool_calls] == [(realagent.CALC, "success")]
    assert 391.0 in numbers(final.final_answer), final.final_answer
    assert store.get_run("calc").stopped_by == "exit/final_answer"


def test_a_file_write_lands_in_the_workspace(
    chat: OpenAIChatModel, store: SqliteStore, workspace: Path, tmp_path: Path
) -> None:
    log = SqliteCommitLog(tmp_path / "commit.db")
    with realagent.arbiter(workspace, commit_log=log) as arbiter:
        app = realagent.answer_graph().compile(
            store=store, services={"model": chat, "arbiter": arbiter}
        )
        final = app.invoke(
            {"task": "Append the line hello world to the file greeting.txt with the note tool."},
            run_id="write",
        )
    assert (workspace / "greeting.txt").read_text(encoding="utf-8").strip() == "hello world"
    assert [(r.tool, r.status) for r in log.records()] == [(realagent.NOTE, "success")]
    assert store.get_run("write").status == "done", final


class Total(BaseModel):
    """The typed answer."""

    total: float


def test_a_typed_answer_holds_the_total(
    chat: OpenAIChatModel, store: SqliteStore, workspace: Path
) -> None:
    graph = react_graph(
        name="typed",
        tools=[realagent.CALC],
        system_prompt=realagent.ANSWER_SYSTEM,
        output_model=Total,
        max_steps=4,
        temperature=0.0,
        request=RequestOptions(
            max_tokens=128,
            response_format=ResponseFormat.for_schema(Total),
            extra={"seed": realagent.SEED},
        ),
    )
    with realagent.arbiter(workspace) as arbiter:
        app = graph.compile(store=store, services={"model": chat, "arbiter": arbiter})
        final = app.invoke(
            {"task": "Three items cost 4.50 EUR each. What is the total? Use calc."},
            run_id="typed",
        )
    assert final.final_output is not None, final.final_answer
    assert math.isclose(Total.model_validate(final.final_output).total, 13.5)


MACHINE = {
    "name": "compute_and_report",
    "description": "Compute an arithmetic result with the calculator, then report it.",
    "initial_state": "compute",
    "input_schema": {
        "type": "object",
        "properties": {"expression": {"type": "string"}},
        "required": ["expression"],
    },
    "output_schema": {
        "type": "object",
        "properties": {"answer": {"type": "number"}},
        "required": ["answer"],
    },
    "states": {
        "compute": {
            "objective": "Call the calc tool on the input expression. Once a calc result is "
            "in the notes, signal the event computed.",
            "allowed_tools": [realagent.CALC],
            "transitions": [{"on": "computed", "to": "report"}],
        },
        "report": {
            "objective": "Call finish with answer set to the calc result from the notes.",
            "terminal": True,
        },
    },
    "max_steps": 6,
}


def test_a_two_state_machine_reports_the_computed_value(
    chat: OpenAIChatModel, workspace: Path, tmp_path: Path
) -> None:
    spec = parse_skillspec(MACHINE, tools=realagent.registry())
    with realagent.arbiter(workspace) as arbiter:
        runtime = MachineRuntime(
            model=realagent.Sampled(chat, max_tokens=96),
            arbiter=arbiter,
            skills=[spec],
            store=SqliteStore(tmp_path / "machine.db"),
        )
        result = runtime.run(
            "compute_and_report", {"expression": "19*21"}, timeout=MACHINE_DEADLINE_S
        )
    assert (result.run_status, result.stopped_by) == ("done", "machine/done"), result
    assert [(t["from"], t["to"]) for t in result.transitions][:1] == [("compute", "report")]
    assert result.output == {"answer": 399}


def test_tokens_stream_through_the_graph_while_tools_are_offered(
    chat: OpenAIChatModel, store: SqliteStore, workspace: Path
) -> None:
    """Mode ``"messages"``: the final answer's text arrives in pieces, on a request that
    offers the tools, and the pieces make up the recorded answer."""
    with realagent.arbiter(workspace) as arbiter:
        app = realagent.answer_graph().compile(
            store=store, services={"model": chat, "arbiter": arbiter}
        )
        chunks: list[MessageChunk] = []
        final_state = None
        for mode, item in app.stream(
            {"task": "Say hello in three words. Do not use any tool."},
            run_id="stream",
            mode=["messages", "values"],
        ):
            if mode == "messages":
                chunks.append(item)
            else:
                final_state = item
    assert final_state is not None
    answer = final_state.final_answer
    assert answer, final_state
    assert len(chunks) > 1  # streamed, not delivered in one piece
    assert "".join(c.text for c in chunks).strip() == answer.strip()
    assert app.replay("stream") == app.get_state("stream")


NOTES = (
    ("p1", "The staging database listens on port 5433; production uses port 5432."),
    ("p2", "Deploys happen on Thursdays, after the morning stand-up."),
    ("p3", "Bees communicate the direction of flowers with a waggle dance."),
    ("p4", "The lighthouse on the north cape was automated in 1987."),
    ("p5", "Backups of the staging database run every night at 02:00."),
)


def test_rag_with_the_minilm_embedder_answers_from_the_right_passage(
    chat: OpenAIChatModel, tmp_path: Path
) -> None:
    from stargraph.skills.refs.embed import MiniLMEmbedder
    from stargraph.skills.refs.rag import rag_graph
    from stargraph.skills.refs.retrieval import index_passages
    from stargraph.skills.refs.stores import Passage, SqliteDocumentStore, SqliteVectorStore

    embedder = MiniLMEmbedder()
    docs = SqliteDocumentStore(tmp_path / "docs.db")
    vectors = SqliteVectorStore(tmp_path / "vectors.db")
    try:
        passages = [Passage(id=pid, text=text) for pid, text in NOTES]
        index_passages(passages, docs=docs, vectors=vectors, embedder=embedder)
        services = {
            "docs": docs,
            "vectors": vectors,
            "embedder": embedder,
            "model": realagent.Sampled(chat, max_tokens=96),
        }
        app = rag_graph(k=2, temperature=0.0).compile(services=services)
        final = app.invoke({"question": "Which port does the staging database listen on?"})
    finally:
        docs.close()
        vectors.close()
    assert final.passages[0].id == "p1"  # the embedder ranks the right passage first
    assert final.outcome == "answered", final
    assert "p1" in final.citations
    assert 5433.0 in numbers(final.answer), final.answer
