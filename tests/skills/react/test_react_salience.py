"""Seed row E13: ``observe`` ranks the observations (salience), and a context budget makes
``think`` elide the least salient ones from the model's request."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from pathlib import Path

import orjson
import pytest

from stargraph.checkpoint import Recording, SqliteStore
from stargraph.errors import SkillValidationError
from stargraph.ir import FunctionNodeIR, GraphIR
from stargraph.llm import ChatMessage, ChatRequest, ChatResponse, ScriptedChatModel, ToolCall
from stargraph.skills.react import ReactState, react_graph, react_skill
from stargraph.tools import Arbiter, ToolRegistry, llm_name_for, tool

ADD = "demo.add@1.0.0"
NAME = llm_name_for(ADD)


@tool(id=ADD)
def add(a: int, b: int) -> dict[str, object]:
    """Add two integers; a negative first one fails."""
    if a < 0:
        raise RuntimeError("negative")
    # A result worth eliding: a marker is shorter than it.
    return {"sum": a + b, "note": "the sum of the two integers given, as asked " * 3}


@pytest.fixture
def arbiter(tmp_path: Path) -> Iterator[Arbiter]:
    with Arbiter(ToolRegistry.build(builtins=[add]), workspace=tmp_path) as arb:
        yield arb


def call(call_id: str, a: int, b: int) -> ChatResponse:
    arguments = f'{{"a": {a}, "b": {b}}}'
    return ChatResponse(
        message=ChatMessage.assistant(
            tool_calls=[ToolCall(id=call_id, name=NAME, arguments=arguments)]
        )
    )


ANSWER = ChatResponse(message=ChatMessage.assistant("done"))


def run(
    arbiter: Arbiter, script: Sequence[ChatResponse], context_budget: int | None = None
) -> tuple[ReactState, ScriptedChatModel]:
    model = ScriptedChatModel(list(script))
    app = react_graph(tools=[ADD], context_budget=context_budget).compile(
        services={"model": model, "arbiter": arbiter}
    )
    return app.invoke({"task": "sum"}), model


def chars(request: ChatRequest) -> int:
    return sum(len(m.content or "") for m in request.messages)


def tool_answers(request: ChatRequest) -> dict[str, str]:
    return {m.tool_call_id or "": m.content or "" for m in request.messages if m.role == "tool"}


def assert_paired(request: ChatRequest) -> None:
    """Every assistant message's tool calls are answered, in order, right after it."""
    messages = list(request.messages)
    for index, message in enumerate(messages):
        asked = [c.id for c in message.tool_calls]
        if asked:
            answered = messages[index + 1 : index + 1 + len(asked)]
            assert [(m.role, m.tool_call_id) for m in answered] == [("tool", i) for i in asked]


def test_E13_a_failed_call_outranks_an_old_success_and_scores_decay_by_step(
    arbiter: Arbiter,
) -> None:
    final, _ = run(arbiter, [call("ok", 1, 2), call("bad", -1, 2), ANSWER])
    assert [r.status for r in final.tool_calls] == ["success", "error"]
    # Three LLM steps: the success (step 1) has decayed twice, the failure (step 2) once.
    assert final.salience == (round(0.5 * 0.8**2, 6), round(1.0 * 0.8, 6))
    assert final.salience[1] > final.salience[0]


def test_E13_a_repeated_or_superseded_result_ranks_low(arbiter: Arbiter) -> None:
    script = [call("c1", 1, 2), call("c2", -1, 2), call("c3", 1, 2), call("c4", 5, 5), ANSWER]
    final, _ = run(arbiter, script)
    # c1 was repeated by c3 (same tool, same arguments); c2's failure was made good by c3.
    assert final.salience == (
        round(0.5 * 0.25 * 0.8**4, 6),
        round(1.0 * 0.25 * 0.8**3, 6),
        round(0.5 * 0.8**2, 6),
        0.5 * 0.8,
    )
    assert final.salience[0] < final.salience[2]


def test_E13_a_budgeted_run_elides_the_least_salient_observation_and_keeps_the_pairing(
    arbiter: Arbiter,
) -> None:
    script = [call("ok", 1, 2), call("bad", -1, 2), call("worse", -2, 2), ANSWER]
    whole, plain = run(arbiter, script)
    last = plain.requests[-1]
    kept = tool_answers(last)
    # Just too small for the whole last request: one elision of the success is enough.
    budget = chars(last) - len(kept["ok"]) + 100
    final, model = run(arbiter, script, context_budget=budget)
    assert len(model.requests) == len(plain.requests)
    request = model.requests[-1]
    assert chars(request) <= budget
    sent = tool_answers(request)
    assert sent["ok"] == f"[elided to fit the context budget: result of {NAME} call ok]"
    # The failures (more salient) and the current step's observation go whole.
    assert (sent["bad"], sent["worse"]) == (kept["bad"], kept["worse"])
    for each in model.requests:
        assert_paired(each)
    # Only the request is shortened: the state keeps every observation.
    assert final.trajectory == whole.trajectory


def test_E13_the_current_steps_observations_are_never_elided(arbiter: Arbiter) -> None:
    _, model = run(arbiter, [call("ok", 1, 2), call("again", 3, 4), ANSWER], context_budget=1)
    last = tool_answers(model.requests[-1])
    assert last["ok"].startswith("[elided")
    assert orjson.loads(last["again"])["sum"] == 7
    assert_paired(model.requests[-1])


def test_E13_replay_with_the_budget_is_byte_identical(tmp_path: Path, arbiter: Arbiter) -> None:
    script = [call("ok", 1, 2), call("bad", -1, 2), call("worse", -2, 2), ANSWER]
    graph = react_graph(tools=[ADD], context_budget=400)
    with SqliteStore(tmp_path / "runs.db") as store:
        model = ScriptedChatModel(list(script))
        app = graph.compile(services={"model": model, "arbiter": arbiter}, store=store)
        final = app.invoke({"task": "sum"}, run_id="r")
        assert any("[elided" in (m.content or "") for m in model.requests[-1].messages)
        replayed = graph.compile(store=store).replay("r")
        assert replayed.model_dump_json() == final.model_dump_json()
        assert replayed.salience == final.salience
        recorded = [
            c.request
            for s in Recording.from_store(store, "r").steps
            for c in s.calls
            if c.kind == "llm"
        ]
    assert [ChatRequest.model_validate(r) for r in recorded] == model.requests
    # A second live run of the same script asks the model exactly the same.
    _, again = run(arbiter, script, context_budget=400)
    assert [r.model_dump_json() for r in again.requests] == [
        r.model_dump_json() for r in model.requests
    ]


def test_E13_without_a_budget_nothing_changes(arbiter: Arbiter) -> None:
    # The hashes of these graphs before the budget existed.
    assert react_graph(tools=[ADD]).graph_hash == (
        "sha256:cce585f18806ab627d8cb1227b60134f4c93d9bf13e816966c839042bb7b434e"
    )
    assert react_graph(tools=[ADD], done_field="done", system_prompt="x").graph_hash == (
        "sha256:d8a4c4d559222921e108c098ba88d0298f5b35d128ebd21715fb1b40c0929f9c"
    )
    assert react_graph(tools=[ADD], context_budget=None).graph_hash == (
        react_graph(tools=[ADD]).graph_hash
    )
    assert react_graph(tools=[ADD], context_budget=500).graph_hash != (
        react_graph(tools=[ADD]).graph_hash
    )
    skill = react_skill(tools=[ADD], context_budget=500)
    assert isinstance(skill.subgraph, GraphIR)
    think = next(n for n in skill.subgraph.nodes if n.id == "think")
    assert isinstance(think, FunctionNodeIR)
    assert think.config["context_budget"] == 500
    _, model = run(arbiter, [call("ok", 1, 2), call("again", 3, 4), ANSWER])
    assert not any("[elided" in (m.content or "") for r in model.requests for m in r.messages)


@pytest.mark.parametrize("budget", [0, -5, 2.5, "100", True])
def test_E13_a_context_budget_must_be_a_positive_int(budget: object) -> None:
    with pytest.raises(SkillValidationError) as caught:
        react_graph(tools=[ADD], context_budget=budget)  # type: ignore[arg-type]
    assert "/context_budget" in str(caught.value)
    assert "context_budget=20000" in str(caught.value)
