"""What the ReAct node keeps about its conversation between steps (the transcript, the
request's other fields) is the run's, and what it sends is what the plain idiom would send:
the validated request of the whole conversation, whatever the run did in between."""

from __future__ import annotations

import random
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from stargraph.llm import ChatMessage, ChatRequest, ChatResponse, ScriptedChatModel, ToolCall
from stargraph.runtime import RunContext, SeededEntropy
from stargraph.runtime._context import Conversation
from stargraph.skills.react import ReactStep, _head, _observation_step, _transcript, react_graph
from stargraph.tools import Arbiter, ToolRegistry, llm_name_for, tool

ECHO = "demo.echo@1.0.0"
_TOOLS = ({"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}},)


@tool(id=ECHO)
def echo(i: int) -> str:
    """Echo a number."""
    return f"echo {i}"


@pytest.fixture
def arbiter(tmp_path: Path) -> Iterator[Arbiter]:
    with Arbiter(ToolRegistry.build(builtins=[echo]), workspace=tmp_path) as arb:
        yield arb


def _script(calls: int) -> list[ChatResponse]:
    replies = [
        ChatResponse(
            message=ChatMessage.assistant(
                tool_calls=[
                    ToolCall(id=f"c{i}", name=llm_name_for(ECHO), arguments=f'{{"i": {i}}}')
                ]
            )
        )
        for i in range(calls)
    ]
    return [*replies, ChatResponse(message=ChatMessage.assistant("done"), finish_reason="stop")]


def _plain(request: ChatRequest) -> ChatRequest:
    """``request`` validated whole, from its fields: what the plain idiom sends."""
    return ChatRequest(**{name: getattr(request, name) for name in ChatRequest.model_fields})


def test_issue45_every_request_of_a_run_is_the_validated_whole_conversation(
    arbiter: Arbiter,
) -> None:
    model = ScriptedChatModel(_script(6))
    graph = react_graph(tools=[ECHO], model="m", temperature=0.5, system_prompt="be brief")
    app = graph.compile(services={"model": model, "arbiter": arbiter})
    final = app.invoke({"task": "count"})
    assert final.final_answer == "done"
    assert len(model.requests) == 7
    messages = [ChatMessage.system("be brief"), *(s.message for s in final.trajectory)]
    for request in model.requests:
        assert request == _plain(request)
        assert list(request.messages) == messages[: len(request.messages)]
        assert (request.model, request.temperature) == ("m", 0.5)


def test_issue45_two_runs_of_one_app_at_once_keep_their_own_conversations(
    arbiter: Arbiter,
) -> None:
    graph = react_graph(tools=[ECHO])
    model = ScriptedChatModel([*_script(3), *_script(3)])
    app = graph.compile(services={"model": model, "arbiter": arbiter})
    first = app.invoke({"task": "one"})
    second = app.invoke({"task": "two"})
    assert first.trajectory[0].message.content == "one"
    assert second.trajectory[0].message.content == "two"
    # The second run's requests carry its own task, never the first run's steps.
    later = model.requests[4:]
    assert len(later) == 4
    assert all(r.messages[0].content == "two" for r in later)
    # Each step adds the reply and its tool's answer.
    assert [len(r.messages) for r in later] == [1, 3, 5, 7]


def test_issue45_transcript_equals_the_steps_messages_whatever_the_trajectory_did() -> None:
    """Extended, cut, edited or started over: the kept transcript never shows a step the
    trajectory does not hold now."""
    rnd = random.Random(45)
    conversation = Conversation()
    steps: list[ReactStep] = []
    for turn in range(300):
        pick = rnd.random()
        if pick < 0.6 or not steps:
            steps = [*steps, _observation_step(turn, ChatMessage.user(f"m{turn}"))]
        elif pick < 0.7:
            steps = steps[: rnd.randrange(len(steps))]
        elif pick < 0.8:
            at = rnd.randrange(len(steps))
            steps = [*steps[:at], _observation_step(turn, ChatMessage.user("edit")), *steps[at:]]
        elif pick < 0.9:
            steps = [_observation_step(turn, ChatMessage.user("fresh"))]
        given: Any = tuple(steps) if rnd.random() < 0.3 else list(steps)
        assert _transcript(given, conversation) == tuple(s.message for s in steps)


def test_issue45_head_is_validated_again_when_the_configuration_changes() -> None:
    conversation = Conversation()
    config = {"model": "m", "temperature": 0.5, "request": {"max_tokens": 7}}
    first = _head(config, _TOOLS, conversation)
    assert first == ChatRequest(
        messages=(), model="m", tools=_TOOLS, temperature=0.5, max_tokens=7, extra={}
    )
    assert _head(dict(config), _TOOLS, conversation) == first
    changed = _head({**config, "temperature": 0.7}, _TOOLS, conversation)
    assert changed.temperature == 0.7
    assert _head(config, (), conversation).tools == ()


def test_issue45_a_context_made_by_hand_keeps_nothing_and_still_thinks(
    arbiter: Arbiter,
) -> None:
    from stargraph.skills import react

    model = ScriptedChatModel(_script(1))
    ctx = RunContext(
        run_id="r",
        step=1,
        node="think",
        index=0,
        path=(),
        config={"tools": [ECHO], "error_budget": 3, "max_steps": 5},
        entropy=SeededEntropy(0),
        services={"model": model, "arbiter": arbiter},
    )
    assert ctx.conversation is not ctx.conversation
    out = react.think(react.ReactState(task="look"), ctx)
    assert [s.kind for s in out["trajectory"]] == ["task", "reply"]
    assert [m.content for m in model.requests[0].messages] == ["look"]


def test_issue19_step_of_other_values_is_validated() -> None:
    message: Any = {"role": "user", "content": "hi"}
    step = _observation_step(1, message)
    assert step.message == ChatMessage.user("hi")  # validated: the dict became a message
    assert step.model_fields_set == {"llm_step", "kind", "message"}


def _same(made: Any, validated: Any) -> None:
    assert made == validated
    assert made.__dict__ == validated.__dict__
    assert made.model_fields_set == validated.model_fields_set


def test_issue19_steps_are_the_validated_ones() -> None:
    from stargraph.llm import Usage
    from stargraph.skills.react import _reply_step

    reply = ChatMessage.assistant(tool_calls=[ToolCall(id="c", name="f", arguments="{}")])
    usage = Usage(prompt_tokens=1, completion_tokens=2, total_tokens=3)
    response = ChatResponse(message=reply, usage=usage, finish_reason="tool_calls")
    _same(
        _reply_step(3, response),
        ReactStep(llm_step=3, kind="reply", message=reply, usage=usage, finish_reason="tool_calls"),
    )
    note = ChatMessage.tool("c", "ok")
    _same(_observation_step(3, note), ReactStep(llm_step=3, kind="observation", message=note))


def test_issue19_call_records_of_a_run_are_the_validated_ones(arbiter: Arbiter) -> None:
    from stargraph.skills.react import ToolCallRecord

    model = ScriptedChatModel(_script(3))
    app = react_graph(tools=[ECHO]).compile(services={"model": model, "arbiter": arbiter})
    final = app.invoke({"task": "count"})
    assert len(final.tool_calls) == 3
    for record in final.tool_calls:
        _same(record, ToolCallRecord(**record.model_dump()))
    for step in final.trajectory:
        _same(step, ReactStep(**step.model_dump(exclude_unset=True)))
