"""Streaming: SSE chunks from the scripted server, assembled by OpenAIChatModel.stream."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from stargraph.errors import LLMError
from stargraph.llm import (
    ChatDelta,
    ChatMessage,
    ChatRequest,
    OpenAIChatModel,
    StreamAssembler,
    ToolCallDelta,
    Usage,
)
from stargraph.testing import Reply, ScriptedOpenAIServer

ModelFactory = Callable[..., OpenAIChatModel]
REQUEST = ChatRequest(messages=(ChatMessage.user("Tell me, and use tools if you must."),))

REPLIES = {
    "text": Reply.text("The answer is 4, as far as I can tell."),
    "parallel tool calls": Reply.tool_calls(
        [("calc", {"expr": "2+2", "precision": 10}), ("clock", {}), ("calc", "{broken")],
        content="Let me check.",
    ),
    "refusal": Reply.refusal("I can't help with that request."),
}


@pytest.mark.parametrize("name", sorted(REPLIES))
def test_streamed_equals_non_streamed(name: str) -> None:
    # Two servers with one script each: deterministic ids make the responses fully equal.
    reply = REPLIES[name]
    with ScriptedOpenAIServer([reply]) as plain, ScriptedOpenAIServer([reply]) as streaming:
        with OpenAIChatModel("m", base_url=plain.base_url) as model:
            expected = model.complete(REQUEST)
        with OpenAIChatModel("m", base_url=streaming.base_url) as model:
            with model.stream(REQUEST) as stream:
                deltas = list(stream)
            assembled = stream.response

    assert assembled == expected
    assert len(deltas) > 3  # really streamed in pieces, not one blob
    assert deltas[-1].usage == expected.usage
    body = streaming.chat_requests[0].body
    assert body is not None
    assert (body["stream"], body["stream_options"]) == (True, {"include_usage": True})


def test_stream_deltas_carry_tool_call_fragments(
    scripted_openai: ScriptedOpenAIServer, make_model: ModelFactory
) -> None:
    scripted_openai.enqueue(Reply.tool_calls([("calc", {"expr": "12345 * 678"}), ("clock", {})]))
    with make_model().stream(REQUEST) as stream:
        fragments = [f for delta in stream for f in delta.tool_calls]

    firsts = [f for f in fragments if f.id is not None]
    assert [(f.index, f.id, f.name) for f in firsts] == [
        (0, "call_0001", "calc"),
        (1, "call_0002", "clock"),
    ]
    pieces = [f.arguments for f in fragments if f.index == 0 and f.arguments]
    assert len(pieces) > 1
    assert "".join(pieces) == '{"expr": "12345 * 678"}'
    assert stream.response.finish_reason == "tool_calls"


def test_stream_without_usage(
    scripted_openai: ScriptedOpenAIServer, make_model: ModelFactory
) -> None:
    scripted_openai.enqueue(Reply.text("short answer"))
    with make_model().stream(REQUEST, include_usage=False) as stream:
        assert all(delta.usage is None for delta in stream)
    assert stream.response.usage == Usage()
    body = scripted_openai.chat_requests[0].body
    assert body is not None
    assert "stream_options" not in body


def test_reading_the_response_drains_the_stream(
    scripted_openai: ScriptedOpenAIServer, make_model: ModelFactory
) -> None:
    scripted_openai.enqueue(Reply.text("one two three"))
    with make_model().stream(REQUEST) as stream:
        assert stream.response.message.content == "one two three"


def test_opening_a_stream_is_retried(
    scripted_openai: ScriptedOpenAIServer, make_model: ModelFactory, sleeps: list[float]
) -> None:
    scripted_openai.enqueue(Reply.error(429), Reply.text("streamed after all"))
    with make_model().stream(REQUEST) as stream:
        assert stream.response.message.content == "streamed after all"
    assert len(scripted_openai.chat_requests) == 2
    assert sleeps == [0.5]


def test_a_stream_that_cannot_open_raises_llm_error(
    scripted_openai: ScriptedOpenAIServer, make_model: ModelFactory
) -> None:
    scripted_openai.enqueue(*[Reply.error(500, "down")] * 2)
    with pytest.raises(LLMError, match="failed after 2 attempts: HTTP 500: down"):
        make_model(max_retries=1).stream(REQUEST)


def test_assembler_orders_calls_by_index_and_keeps_the_last_usage() -> None:
    assembler = StreamAssembler()
    for delta in [
        ChatDelta(tool_calls=(ToolCallDelta(index=1, id="b", name="clock"),)),
        ChatDelta(tool_calls=(ToolCallDelta(index=0, id="a", name="calc", arguments='{"x"'),)),
        ChatDelta(tool_calls=(ToolCallDelta(index=0, arguments=": 1}"),)),
        ChatDelta(finish_reason="tool_calls"),
        ChatDelta(usage=Usage(prompt_tokens=1, completion_tokens=2, total_tokens=3)),
    ]:
        assembler.add(delta)
    response = assembler.response(model="m", id="x")
    assert [(c.id, c.name, c.arguments) for c in response.tool_calls] == [
        ("a", "calc", '{"x": 1}'),
        ("b", "clock", ""),
    ]
    assert response.message.content is None
    assert response.usage.total_tokens == 3
