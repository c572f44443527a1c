"""The real ``openai`` client and stargraph's chat layer against a real llama.cpp server.

A 135M model answers badly; these tests assert what the engine and the server guarantee
(typed results, grammar-constrained shapes, typed errors, what is retried), never what the
model says.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import pytest
from pydantic import BaseModel, Field

from stargraph.errors import LLMError
from stargraph.llm import (
    LLAMA_CPP,
    ChatMessage,
    ChatRequest,
    ChatResponse,
    OpenAIChatModel,
    ResponseFormat,
    ToolCall,
    normalize_tool_calls,
)
from tests.real_model import llamaserver

pytestmark = pytest.mark.real_model  # a llama.cpp model server (scripts/ensure_llama_server.sh)

CALC = {
    "type": "function",
    "function": {
        "name": "calc",
        "description": "Evaluate arithmetic.",
        "parameters": {
            "type": "object",
            "properties": {"expression": {"type": "string", "maxLength": 24}},
            "required": ["expression"],
        },
    },
}
HELLO = ChatRequest(
    messages=(ChatMessage.system("Be brief."), ChatMessage.user("Say hello.")),
    max_tokens=12,
    temperature=0.0,
)


class Reading(BaseModel):
    """What the structured-output test asks for."""

    word: str = Field(max_length=12)
    ok: bool


def test_the_profile_is_detected_as_llama_cpp(chat: OpenAIChatModel) -> None:
    assert chat.profile is LLAMA_CPP


def test_plain_chat_sync_async_and_streaming(chat: OpenAIChatModel) -> None:
    response = chat.complete(HELLO)
    assert isinstance(response, ChatResponse)
    assert isinstance(response.message.content, str)
    assert response.message.role == "assistant"
    assert response.finish_reason in ("stop", "length")
    assert response.model == llamaserver.ALIAS
    assert response.usage.completion_tokens >= 1
    usage = response.usage
    assert usage.total_tokens == usage.prompt_tokens + usage.completion_tokens

    async_response = asyncio.run(chat.acomplete(HELLO))
    assert isinstance(async_response.message.content, str)
    assert async_response.finish_reason in ("stop", "length")

    with chat.stream(HELLO) as stream:
        pieces = [delta.content for delta in stream]
    streamed = stream.response
    assert "".join(pieces) == (streamed.message.content or "")
    assert streamed.finish_reason in ("stop", "length")
    # llama.cpp sends no usage in streams, and the profile does not ask for it.
    assert streamed.usage.total_tokens == 0


def test_a_stream_the_server_aborts_is_a_typed_error(chat: OpenAIChatModel) -> None:
    """P3 on the real server: it cannot stream while offering tools with tool_choice=auto,
    raises after the response has begun, and the stream just ends."""
    request = ChatRequest(messages=(ChatMessage.user("What is 6*7?"),), tools=(CALC,))
    with pytest.raises(LLMError, match="ended before the model finished"):
        _ = chat.stream(request).response


def test_tool_calls_over_several_turns(chat: OpenAIChatModel) -> None:
    """Forced calls, their results, a forced second call and a tool-free answer: every turn
    after the first sends an assistant message that only calls a tool (P1), and every turn
    offers the tools (P2)."""
    named = {"type": "function", "function": {"name": "calc"}}
    messages = [
        ChatMessage.system("Use the calc tool."),
        ChatMessage.user("What is 6*7? Then add 1."),
    ]
    for turn in range(2):
        response = chat.complete(
            ChatRequest(messages=tuple(messages), tools=(CALC,), tool_choice=named, temperature=0.0)
        )
        assert response.finish_reason == "tool_calls"
        (call,) = response.tool_calls
        assert call.name == "calc"
        # The server's grammar follows the schema's shape but lets control characters into
        # strings, so the JSON may still be broken: either way the call is sorted, as data.
        parsed = normalize_tool_calls(response, {"calc"})
        for good in parsed.calls:
            assert set(good.arguments) <= {"expression"}
        assert {p.kind for p in parsed.problems} <= {"invalid_json", "arguments_not_object"}
        assert len(parsed.calls) + len(parsed.problems) == 1
        messages += [response.message, ChatMessage.tool(call.id, f"{40 + turn}", name="calc")]
    final = chat.complete(
        ChatRequest(
            messages=tuple(messages),
            tools=(CALC,),
            tool_choice="none",
            max_tokens=16,
            temperature=0.0,
        )
    )
    assert final.tool_calls == ()
    assert isinstance(final.message.content, str)


def test_structured_output_is_sent_in_the_form_the_server_takes(
    chat: OpenAIChatModel,
) -> None:
    """``{"type": "json_object", "schema": ...}``: the server constrains the reply to the
    schema, so it validates whatever the model meant."""
    response = chat.complete(
        ChatRequest(
            messages=(ChatMessage.user("Give one word and whether it is a greeting."),),
            response_format=ResponseFormat.for_schema(Reading),
            max_tokens=40,
            temperature=0.0,
        )
    )
    assert response.finish_reason == "stop"
    reading = Reading.model_validate_json(response.message.content or "")
    assert isinstance(reading.ok, bool)


def test_openai_shaped_requests_are_refused_once_not_retried(
    llama: llamaserver.LlamaServer,
) -> None:
    """With the OpenAI profile: ``"content": null`` and ``json_schema`` are validation errors
    answered with HTTP 500; they are reported with the server's words, after one attempt."""
    sleeps: list[float] = []
    with OpenAIChatModel(
        llamaserver.ALIAS,
        base_url=llama.base_url,
        api_key=llamaserver.API_KEY,
        profile="openai",
        sleep=sleeps.append,
    ) as model:
        history = ChatRequest(
            messages=(
                ChatMessage.user("6*7?"),
                ChatMessage.assistant(None, [ToolCall(id="c1", name="calc", arguments="{}")]),
                ChatMessage.tool("c1", "42"),
            ),
            max_tokens=4,
        )
        with pytest.raises(LLMError) as caught:
            model.complete(history)
        assert "failed after 1 attempt: HTTP 500" in str(caught.value)
        assert "Input should be a valid string" in str(caught.value)
        schema = ChatRequest(
            messages=(ChatMessage.user("x"),),
            response_format=ResponseFormat.for_schema(Reading),
            max_tokens=4,
        )
        with pytest.raises(LLMError, match="Input should be 'text' or 'json_object'"):
            model.complete(schema)
    assert sleeps == []


def test_a_wrong_api_key_names_the_servers_reason(llama: llamaserver.LlamaServer) -> None:
    """P8 on the real server: its 401 body is ``{"detail": "Invalid API key"}``."""
    with (
        OpenAIChatModel(
            llamaserver.ALIAS, base_url=llama.base_url, api_key="sk-wrong", profile="llama.cpp"
        ) as model,
        pytest.raises(LLMError) as caught,
    ):
        model.complete(HELLO)
    assert "failed after 1 attempt: HTTP 401: Invalid API key" in str(caught.value)


def test_a_tool_with_long_string_bounds_is_offered_and_the_server_stays_up(
    start_llama: Callable[[], llamaserver.LlamaServer],
) -> None:
    """llama.cpp's grammar builder refuses a string bound above 1,000 and llama-cpp-python's
    server then stops; the llama.cpp profile lowers the bound, so the call is made."""
    server = start_llama()
    write = {
        "type": "function",
        "function": {
            "name": "write",
            "description": "Write a note.",
            "parameters": {
                "type": "object",
                "properties": {"text": {"type": "string", "maxLength": 100_000}},
                "required": ["text"],
            },
        },
    }
    request = ChatRequest(
        messages=(ChatMessage.user("Write the note 'hi'."),),
        tools=(write,),
        tool_choice={"type": "function", "function": {"name": "write"}},
        temperature=0.0,
    )
    with OpenAIChatModel(
        llamaserver.ALIAS, base_url=server.base_url, profile="llama.cpp", max_retries=0
    ) as model:
        response = model.complete(request)
        assert response.finish_reason == "tool_calls"
        (call,) = response.tool_calls
        assert call.name == "write"
        assert len(call.arguments) <= 1000 + len('{"text": ""}') + 8  # held to the lowered bound
        assert server.running
