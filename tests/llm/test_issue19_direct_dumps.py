"""Chat data built or dumped directly for plain values (the role constructors, usage sums,
a response's record, a request's new messages) equals what pydantic makes of them."""

from __future__ import annotations

import itertools
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
from stargraph.llm._recorded import _message_data, response_json

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


def test_issue19_response_record_is_the_json_dump() -> None:
    for content, calls, finish, refusal, usage, model in itertools.product(
        [None, "", "hi"],
        [(), _CALLS],
        [None, "stop"],
        [None, "no"],
        [Usage(), Usage(prompt_tokens=3, completion_tokens=2, total_tokens=5)],
        ["", "m"],
    ):
        response = ChatResponse(
            message=ChatMessage(role="assistant", content=content, tool_calls=calls),
            finish_reason=finish,
            refusal=refusal,
            usage=usage,
            model=model,
            id="x",
        )
        direct, dumped = response_json(response), response.model_dump(mode="json")
        assert direct == dumped
        assert list(direct) == list(dumped)
        assert list(direct["message"]) == list(dumped["message"])


def test_issue19_request_message_data_is_the_dump_without_defaults() -> None:
    roles: list[Any] = ["user", "assistant", "tool", "system"]
    for role, content, calls, call_id, name in itertools.product(
        roles,
        [None, "", "hi"],
        [(), _CALLS],
        [None, "", "c1"],
        [None, "nm"],
    ):
        message = ChatMessage(
            role=role,
            content=content,
            tool_calls=calls,
            tool_call_id=call_id,
            name=name,
        )
        direct = _message_data(message)
        dumped = message.model_dump(mode="json", exclude_defaults=True)
        assert direct == dumped
        assert list(direct) == list(dumped)
        for a, b in zip(direct.get("tool_calls", ()), dumped.get("tool_calls", ()), strict=True):
            assert list(a) == list(b)


def test_issue19_scripted_reply_is_stamped_like_model_copy() -> None:
    reply = ChatResponse(message=ChatMessage.assistant("hi"), finish_reason="stop")
    model = ScriptedChatModel([reply], model="m")
    stamped = model.complete(ChatRequest(messages=(ChatMessage.user("q"),)))
    _same(stamped, reply.model_copy(update={"model": "m", "id": "chatcmpl-0001"}))


def test_issue19_plain_messages_and_sums_are_not_validated_again(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def refuse(self: Any, **data: Any) -> None:
        raise AssertionError("validated")

    one = Usage(prompt_tokens=1, completion_tokens=1, total_tokens=2)
    monkeypatch.setattr(ChatMessage, "__init__", refuse)
    monkeypatch.setattr(Usage, "__init__", refuse)
    assert ChatMessage.tool("c", "ok").content == "ok"
    assert ChatMessage.assistant("hi", list(_CALLS)).tool_calls == _CALLS
    assert (one + one).total_tokens == 4
