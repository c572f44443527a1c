"""The ReAct loop builds its records from values it holds validated already: each equals
what the validating constructor makes, and think's request fields are validated once per
node configuration, not at every step."""

from __future__ import annotations

from typing import Any

import pytest

from stargraph.llm import ChatMessage, ChatRequest, ChatResponse, ToolCall, Usage
from stargraph.skills.react import (
    ReactStep,
    ToolCallRecord,
    _call_record,
    _head,
    _observation_step,
    _reply_step,
)

_TOOLS = ({"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}},)


def _same(direct: Any, validated: Any) -> None:
    assert direct == validated
    assert direct.__dict__ == validated.__dict__
    assert direct.model_fields_set == validated.model_fields_set


def test_issue19_reply_step_is_the_validated_one() -> None:
    reply = ChatMessage.assistant(tool_calls=[ToolCall(id="c", name="f", arguments="{}")])
    usage = Usage(prompt_tokens=1, completion_tokens=2, total_tokens=3)
    response = ChatResponse(message=reply, usage=usage, finish_reason="tool_calls")
    direct = _reply_step(3, response)
    _same(
        direct,
        ReactStep(llm_step=3, kind="reply", message=reply, usage=usage, finish_reason="tool_calls"),
    )


def test_issue19_observation_step_is_the_validated_one() -> None:
    message = ChatMessage.tool("c", "ok")
    _same(
        _observation_step(3, message),
        ReactStep(llm_step=3, kind="observation", message=message),
    )


def test_issue19_step_of_other_values_is_validated() -> None:
    message: Any = {"role": "user", "content": "hi"}
    step = _observation_step(1, message)
    assert step.message == ChatMessage.user("hi")  # validated: the dict became a message
    assert step.model_fields_set == {"llm_step", "kind", "message"}


def test_issue19_call_record_is_the_validated_one() -> None:
    values: dict[str, Any] = {
        "llm_step": 2,
        "call_id": "c",
        "name": "f",
        "arguments": "{}",
        "tool": "t@1.0.0",
        "status": "success",
        "summary": "done",
        "error_code": None,
        "artifact_ref": None,
    }
    _same(_call_record(dict(values)), ToolCallRecord(**values))
    odd = {**values, "llm_step": "2"}
    assert _call_record(odd).llm_step == 2  # validated: the text became an int


def test_issue19_head_is_validated_once_per_configuration() -> None:
    config = {"model": "m", "temperature": 0.5, "request": {"max_tokens": 7}}
    first = _head(config, _TOOLS)
    assert _head(config, _TOOLS) is first
    assert first == ChatRequest(
        messages=(), model="m", tools=_TOOLS, temperature=0.5, max_tokens=7, extra={}
    )
    # Another value object (an edited configuration) validates again.
    changed = _head({**config, "temperature": 0.7}, _TOOLS)
    assert changed is not first
    assert changed.temperature == 0.7


def test_issue19_plain_steps_and_records_are_not_validated_again(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def refuse(self: Any, **data: Any) -> None:
        raise AssertionError("validated")

    monkeypatch.setattr(ReactStep, "__init__", refuse)
    monkeypatch.setattr(ToolCallRecord, "__init__", refuse)
    assert _observation_step(1, ChatMessage.tool("c", "ok")).llm_step == 1
    record = _call_record(
        {
            "llm_step": 1,
            "call_id": "c",
            "name": "f",
            "arguments": "{}",
            "tool": "t",
            "status": "success",
            "summary": "s",
            "error_code": None,
            "artifact_ref": None,
        }
    )
    assert record.summary == "s"
