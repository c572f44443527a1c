"""``react_graph(output_model=M)`` gives back an ``M``, live, from a checkpoint and in replay."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import cast

import pytest
from pydantic import BaseModel

from stargraph import END, START, Graph
from stargraph.checkpoint import SqliteStore
from stargraph.llm import ScriptedChatModel
from stargraph.nodes import SubgraphNode
from stargraph.refs import resolve_ref, try_ref_of
from stargraph.skills.react import ReactOutput, react_graph, react_skill, react_state
from stargraph.tools import Arbiter, ToolRegistry, tool

ADD = "demo.add@1.0.0"


@tool(id=ADD)
def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


class Verdict(BaseModel):
    answer: int
    confidence: float


class Typed(BaseModel):
    """A parent graph's own channel for the skill's answer, declared as the output model."""

    final_output: Verdict | None = None


@pytest.fixture
def arbiter(tmp_path: Path) -> Iterator[Arbiter]:
    with Arbiter(ToolRegistry.build(builtins=[add]), workspace=tmp_path) as arb:
        yield arb


def test_issue44_output_model_answer_is_an_instance_live_stored_and_replayed(
    tmp_path: Path, arbiter: Arbiter
) -> None:
    model = ScriptedChatModel(['{"answer": 42, "confidence": 0.5}'])
    app = react_graph(tools=[ADD], output_model=Verdict).compile(
        services={"model": model, "arbiter": arbiter}, store=SqliteStore(tmp_path / "runs.db")
    )
    final = app.invoke({"task": "answer"}, run_id="r1")
    assert final.final_output == Verdict(answer=42, confidence=0.5)
    assert isinstance(final.final_output, Verdict)
    assert final.final_answer == '{"answer":42,"confidence":0.5}'
    # The checkpoint holds JSON; read back, it is the model again.
    stored = app.get_state("r1")
    assert isinstance(stored.final_output, Verdict)
    assert stored == final
    replayed = app.replay("r1")
    assert isinstance(replayed.final_output, Verdict)
    assert replayed.final_output == final.final_output
    # The state round-trips through JSON as the same typed value.
    state_model = type(final)
    assert state_model.model_validate_json(final.model_dump_json()) == final


def test_issue44_output_model_state_is_importable_and_parents_keep_json(
    arbiter: Arbiter,
) -> None:
    # The IR names the state by import path (a parent graph's IR holds it as a subgraph),
    # so another process must be able to import it.
    state_model = react_state(Verdict)
    ref = try_ref_of(state_model)
    assert isinstance(ref, str)
    assert resolve_ref(ref) is state_model
    assert react_graph(tools=[ADD], output_model=Verdict).to_ir().state.ref == ref
    # A parent graph on ReactOutput gets JSON-able data, as before; one that declares the
    # output model gets the model.
    skill = react_skill(name="verdict", tools=[ADD], output_model=Verdict)
    cases: tuple[tuple[type[ReactOutput | Typed], object], ...] = (
        (ReactOutput, {"answer": 7, "confidence": 1.0}),
        (Typed, Verdict(answer=7, confidence=1.0)),
    )
    for state, expected in cases:
        parent = (
            Graph("parent", state=state)
            .with_node(
                SubgraphNode.from_skill(
                    skill, site="agent", outputs={"final_output": "final_output"}
                )
            )
            .with_edge(START, "agent")
            .with_edge("agent", END)
        )
        model = ScriptedChatModel(['{"answer": 7, "confidence": 1}'])
        services = {"model": model, "arbiter": arbiter}
        done = cast("ReactOutput | Typed", parent.compile(services=services).invoke({}))
        assert done.final_output == expected
        assert type(done.final_output) is type(expected)
