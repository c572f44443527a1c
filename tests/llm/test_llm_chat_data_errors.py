"""Chat data built from bad input is a typed ``ChatDataError`` (invariant 9), never a bare
pydantic ``ValidationError``: it names each field, the value given and the fix, and is still
a ``ValueError`` for callers who do not know stargraph."""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import BaseModel, ValidationError

from stargraph.errors import ChatDataError, LLMError, StargraphError
from stargraph.llm import ChatMessage, ChatRequest, ChatResponse, ToolCall


def _problems(exc: ChatDataError) -> list[tuple[str, str]]:
    return [(p.pointer, p.hint) for p in exc.problems]


def test_a_bad_chat_message_names_the_field_the_value_and_the_fix() -> None:
    with pytest.raises(ChatDataError) as info:
        ChatMessage(role="bot", content=3)
    error = info.value
    assert not isinstance(error, ValidationError)
    assert isinstance(error, LLMError)
    assert isinstance(error, ValueError)
    assert isinstance(error, StargraphError)
    assert _problems(error) == [
        ("role", "use one of 'system', 'user', 'assistant' or 'tool'"),
        ("content", "pass a value of the documented type"),
    ]
    assert "ChatMessage data has 2 problems" in str(error)
    assert "(got 'bot')" in str(error)


def test_a_bad_request_names_the_nested_message_field() -> None:
    with pytest.raises(ChatDataError) as info:
        ChatRequest(messages=[{"role": "user", "content": "x", "colour": "red"}])
    assert _problems(info.value) == [("messages.0.colour", "remove it or check its spelling")]
    with pytest.raises(ChatDataError, match=r"ChatRequest data is invalid: messages: "):
        ChatRequest.model_validate({"messages": "hello"})
    with pytest.raises(ChatDataError, match=r"Invalid JSON"):
        ChatRequest.model_validate_json(b"{")


def test_a_bad_reply_is_typed_from_data_json_and_the_wire() -> None:
    with pytest.raises(ChatDataError) as info:
        ChatResponse.model_validate({"message": {"role": "robot"}})
    assert [p for p, _ in _problems(info.value)] == ["message.role"]
    with pytest.raises(ChatDataError, match=r"message.tool_calls.0.id"):
        ChatResponse.model_validate_json(
            b'{"message": {"role": "assistant", "tool_calls": [{"name": "f"}]}}'
        )
    # A malformed wire reply (content that is no text) is the same typed error.
    with pytest.raises(ChatDataError, match=r"ChatMessage data is invalid: content: "):
        ChatResponse.from_openai({"choices": [{"message": {"content": {"text": 1}}}]})


def test_assigning_to_frozen_chat_data_is_typed_and_says_how_to_change_it() -> None:
    message = ChatMessage.user("hi")
    with pytest.raises(ChatDataError) as info:
        message.content = "bye"
    assert _problems(info.value) == [
        ("content", "chat data is frozen: make a changed copy with model_copy(update={...})")
    ]
    assert message.model_copy(update={"content": "bye"}).content == "bye"


def test_a_users_model_holding_chat_messages_still_validates_them() -> None:
    class Transcript(BaseModel):
        messages: tuple[ChatMessage, ...]

    good = Transcript.model_validate({"messages": [{"role": "user", "content": "hi"}]})
    assert good.messages == (ChatMessage.user("hi"),)
    # The user's own model reports its own pydantic error, with the nested path.
    with pytest.raises(ValidationError, match=r"messages\.0\.role"):
        Transcript.model_validate({"messages": [{"role": "bot"}]})


_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=5),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner),
    max_leaves=8,
)
_FIELDS = ["role", "content", "tool_calls", "tool_call_id", "name", "messages", "message",
           "id", "arguments", "tools", "usage", "model", "temperature"]  # fmt: skip


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    model=st.sampled_from([ChatMessage, ChatRequest, ChatResponse, ToolCall]),
    data=st.dictionaries(st.sampled_from(_FIELDS) | st.text(max_size=4), _VALUES, max_size=5),
)
def test_any_bad_chat_data_raises_only_chat_data_errors(
    model: type[BaseModel], data: dict[str, Any]
) -> None:
    builds: list[Callable[[], BaseModel]] = [
        lambda: model(**data),
        lambda: model.model_validate(data),
    ]
    for build in builds:
        with contextlib.suppress(ChatDataError):
            build()
