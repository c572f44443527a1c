"""Chat data built directly for plain values (the role constructors, usage sums, a scripted
reply's stamp) equals what pydantic makes of them."""

from __future__ import annotations

from typing import Any

import pytest

from stargraph.errors import ChatDataError
from stargraph.llm import (
    ChatMessage,
    ChatRequest,
    ChatResponse,
    ScriptedChatModel,
    ToolCall,
    Usage,
)

_CALLS = (ToolCall(id="c", name="n", arguments='{"a": 1}'), ToolCall(id="d", name="m"))


def _same(direct: Any, validated: Any) -> None:
    assert direct == validated
    assert direct.__dict__ == validated.__dict__
    assert list(direct.__dict__) == list(validated.__dict__)
    assert direct.model_fields_set == validated.model_fields_set


@pytest.mark.parametrize("name", [None, "calc"])
def test_issue19_tool_message_is_the_validated_one(name: str | None) -> None:
    direct = ChatMessage.tool("call_1", "4", name=name)
    _same(direct, ChatMessage(role="tool", content="4", tool_call_id="call_1", name=name))


def test_issue19_tool_message_still_validates_other_values() -> None:
    content: Any = 4
    with pytest.raises(ChatDataError):
        ChatMessage.tool("call_1", content)


@pytest.mark.parametrize("content", [None, "hi"])
@pytest.mark.parametrize("calls", [(), _CALLS])
def test_issue19_assistant_message_is_the_validated_one(
    content: str | None, calls: tuple[ToolCall, ...]
) -> None:
    direct = ChatMessage.assistant(content, list(calls))
    _same(direct, ChatMessage(role="assistant", content=content, tool_calls=calls))


def test_issue19_assistant_message_still_validates_other_values() -> None:
    calls: Any = [{"id": 1}]
    with pytest.raises(ChatDataError):
        ChatMessage.assistant(tool_calls=calls)


def test_issue19_usage_sum_is_the_validated_one() -> None:
    total = Usage(prompt_tokens=1, completion_tokens=2, total_tokens=3) + Usage(
        prompt_tokens=10, completion_tokens=20, total_tokens=30
    )
    _same(total, Usage(prompt_tokens=11, completion_tokens=22, total_tokens=33))


def test_issue19_scripted_reply_is_stamped_like_model_copy() -> None:
    reply = ChatResponse(message=ChatMessage.assistant("hi"), finish_reason="stop")
    model = ScriptedChatModel([reply], model="m")
    stamped = model.complete(ChatRequest(messages=(ChatMessage.user("q"),)))
    _same(stamped, reply.model_copy(update={"model": "m", "id": "chatcmpl-0001"}))
