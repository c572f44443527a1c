"""Chat data, request fingerprints, normalize_tool_calls and ScriptedChatModel (no network)."""

from __future__ import annotations

import asyncio
import contextlib
import random
import re
import subprocess
import sys
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from stargraph.errors import ChatDataError, LLMError
from stargraph.llm import (
    ChatMessage,
    ChatModel,
    ChatRequest,
    ChatResponse,
    OpenAIChatModel,
    ScriptedChatModel,
    ToolCall,
    normalize_tool_calls,
)
from stargraph.testing import check_chat_model

# ----------------------------------------------------------------------------- fingerprints

json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(10**9), 10**9)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=8),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=4)
    ),
    max_leaves=12,
)
json_objects = st.dictionaries(st.text(max_size=6), json_values, max_size=5)


def shuffled(value: Any, rng: random.Random) -> Any:
    """The same JSON value with every object's keys in a random order."""
    if isinstance(value, dict):
        items = list(value.items())
        rng.shuffle(items)
        return {key: shuffled(item, rng) for key, item in items}
    if isinstance(value, list):
        return [shuffled(item, rng) for item in value]
    return value


def request_with(extra: dict[str, Any], parameters: dict[str, Any]) -> ChatRequest:
    tool = {"type": "function", "function": {"name": "t", "parameters": parameters}}
    return ChatRequest(
        messages=(ChatMessage.user("hi"),), tools=(tool,), tool_choice="auto", extra=extra
    )


@given(extra=json_objects, parameters=json_objects, rng=st.randoms(use_true_random=False))
def test_fingerprint_ignores_key_order(
    extra: dict[str, Any], parameters: dict[str, Any], rng: random.Random
) -> None:
    original = request_with(extra, parameters)
    reordered = request_with(shuffled(extra, rng), shuffled(parameters, rng))
    assert original.fingerprint() == reordered.fingerprint()
    assert re.fullmatch(r"sha256:[0-9a-f]{64}", original.fingerprint())


@given(extra=json_objects)
def test_fingerprint_changes_with_content(extra: dict[str, Any]) -> None:
    base = request_with(extra, {})
    changed = {
        base.model_copy(update={"model": "other"}).fingerprint(),
        base.model_copy(update={"temperature": 0.5}).fingerprint(),
        base.model_copy(update={"tool_choice": "none"}).fingerprint(),
        base.model_copy(update={"extra": {**extra, "added": 1}}).fingerprint(),
        base.model_copy(update={"messages": (ChatMessage.user("ho"),)}).fingerprint(),
    }
    assert base.fingerprint() not in changed
    assert len(changed) == 5


def test_fingerprint_is_pinned_and_ignores_defaults() -> None:
    # Pinned: recordings made today must still match tomorrow, in any process. The hex is
    # sha256 of the JCS text below, computed outside Python (printf ... | sha256sum).
    request = ChatRequest(messages=(ChatMessage.system("s"), ChatMessage.user("u")), model="m")
    # {"messages":[{"content":"s","role":"system"},{"content":"u","role":"user"}],"model":"m"}
    assert request.fingerprint() == (
        "sha256:f9709674e9941eea87ebf66d8a68b11ef68e03e0b20597cac3fa6d43e5bc646e"
    )
    spelled_out = ChatRequest(
        messages=request.messages, model="m", tools=(), extra={}, temperature=None
    )
    assert spelled_out.fingerprint() == request.fingerprint()


def test_fingerprint_is_the_same_in_another_process() -> None:
    code = (
        "from stargraph.llm import ChatRequest, ChatMessage;"
        "print(ChatRequest(messages=(ChatMessage.user('u'),), extra={'b': 1, 'a': [1.5]})"
        ".fingerprint())"
    )
    here = ChatRequest(messages=(ChatMessage.user("u"),), extra={"a": [1.5], "b": 1})
    there = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        check=True,
        env={"PYTHONHASHSEED": "123"},
    )
    assert there.stdout.strip() == here.fingerprint()


# ----------------------------------------------------------------------------- data


def test_data_is_frozen_and_round_trips_through_json() -> None:
    response = ChatResponse(
        message=ChatMessage.assistant("x", [ToolCall(id="c1", name="t", arguments='{"a": 1}')]),
        finish_reason="tool_calls",
    )
    with pytest.raises(ChatDataError, match="frozen"):
        response.message.content = "changed"
    assert ChatResponse.model_validate_json(response.model_dump_json()) == response


def test_messages_convert_to_the_wire_format() -> None:
    call = ToolCall(id="c1", name="calc", arguments="{}")
    assert ChatMessage.assistant(None, [call]).to_openai() == {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "calc", "arguments": "{}"}}
        ],
    }
    assert ChatMessage.tool("c1", "4", name="calc").to_openai() == {
        "role": "tool",
        "content": "4",
        "tool_call_id": "c1",
        "name": "calc",
    }


def test_importing_stargraph_llm_does_not_import_openai() -> None:
    code = "import sys, stargraph.llm, stargraph.testing; print('openai' in sys.modules)"
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    )
    assert result.stdout.strip() == "False"


# ----------------------------------------------------------------------------- problems


def reply_calling(*calls: tuple[str, str]) -> ChatResponse:
    tool_calls = [ToolCall(id=f"c{i}", name=n, arguments=a) for i, (n, a) in enumerate(calls)]
    return ChatResponse(message=ChatMessage.assistant(None, tool_calls))


def test_good_calls_are_parsed_in_order() -> None:
    result = normalize_tool_calls(
        reply_calling(("calc", '{"expr": "1"}'), ("clock", ""), ("calc", " {} ")),
        {"calc", "clock"},
    )
    assert result.ok
    assert [(c.id, c.name, c.arguments) for c in result.calls] == [
        ("c0", "calc", {"expr": "1"}),
        ("c1", "clock", {}),  # empty arguments mean "no arguments"
        ("c2", "calc", {}),
    ]


def test_each_problem_names_the_call_and_says_what_to_do() -> None:
    result = normalize_tool_calls(
        reply_calling(("calc", "[1, 2]"), ("shell", "{}"), ("calc", '{"expr": '), ("calc", "{}")),
        ["calc", "clock"],
    )
    assert [c.id for c in result.calls] == ["c3"]
    assert [(p.kind, p.tool_call_id, p.tool_name) for p in result.problems] == [
        ("arguments_not_object", "c0", "calc"),
        ("unknown_tool", "c1", "shell"),
        ("invalid_json", "c2", "calc"),
    ]
    messages = [p.message for p in result.problems]
    assert messages[0] == (
        "The arguments of your call to 'calc' must be a JSON object, not a JSON array; this "
        "call was not run. You sent: '[1, 2]'. Call the tool again with an object such as "
        '{"name": value}.'
    )
    assert messages[1] == (
        "There is no tool named 'shell'; this call was not run. "
        "The tools you can call are: 'calc', 'clock'."
    )
    assert messages[2].startswith("The arguments of your call to 'calc' are not valid JSON (")
    assert messages[2].endswith(
        "this call was not run. You sent: '{\"expr\": '. Call the tool again with a JSON "
        "object that matches its parameters."
    )
    assert [o.to_openai() for o in result.observations] == [
        {"role": "tool", "content": m, "tool_call_id": f"c{i}", "name": n}
        for i, (m, n) in enumerate(zip(messages, ["calc", "shell", "calc"], strict=True))
    ]


def test_refusal_becomes_a_user_observation() -> None:
    response = ChatResponse(message=ChatMessage.assistant(None), refusal="No.")
    (problem,) = normalize_tool_calls(response, {"calc"}).problems
    assert problem.kind == "refusal"
    assert problem.observation() == ChatMessage.user(
        "You refused to continue: 'No.'. If the task can be done safely, continue by calling "
        "a tool or giving your final answer; otherwise give a final answer that explains why "
        "it cannot be done."
    )


def test_huge_garbage_is_not_echoed_in_full() -> None:
    garbage = "x" * 10_000
    (problem,) = normalize_tool_calls(reply_calling(("calc", garbage)), {"calc"}).problems
    assert "... (10000 characters in all)" in problem.message
    assert len(problem.message) < 600


# ----------------------------------------------------------------------------- scripted model


def test_scripted_model_answers_in_order_and_records_requests() -> None:
    reply = ChatResponse(message=ChatMessage.assistant("second"), finish_reason="stop")
    model = ScriptedChatModel(["first", reply])
    request = ChatRequest(messages=(ChatMessage.user("q"),))
    first = model.complete(request)
    second = asyncio.run(model.acomplete(request))

    assert isinstance(model, ChatModel)
    assert (first.message.content, first.finish_reason, first.id) == (
        "first",
        "stop",
        "chatcmpl-0001",
    )
    assert (second.message.content, second.id, second.model) == (
        "second",
        "chatcmpl-0002",
        "scripted-model",
    )
    assert model.requests == [request, request]


def test_scripted_model_past_its_script_raises_llm_error() -> None:
    model = ScriptedChatModel(["only"], model="fake")
    request = ChatRequest(messages=(ChatMessage.user("q"),))
    model.complete(request)
    with pytest.raises(LLMError) as caught:
        model.complete(request)
    assert str(caught.value) == (
        f"ScriptedChatModel 'fake' has no reply for request #2 ({request.fingerprint()}): its "
        "script holds 1 replies; add more replies or script it with a function"
    )


def test_scripted_model_with_a_function() -> None:
    model = ScriptedChatModel(lambda request: f"{len(request.messages)} messages")
    request = ChatRequest(messages=(ChatMessage.system("s"), ChatMessage.user("q")))
    assert model.complete(request).message.content == "2 messages"


def test_scripted_model_conforms() -> None:
    check_chat_model(lambda script: contextlib.nullcontext(ScriptedChatModel(script)))


def test_the_conformance_suite_catches_a_lossy_model() -> None:
    class DropsUsage(ScriptedChatModel):
        def complete(self, request: ChatRequest) -> ChatResponse:
            return super().complete(request).model_copy(update={"usage": None})

    with pytest.raises(AssertionError, match="plain text reply: usage is None"):
        check_chat_model(lambda script: contextlib.nullcontext(DropsUsage(script)))


def test_openai_model_is_a_chat_model() -> None:
    assert isinstance(OpenAIChatModel("m", base_url="http://127.0.0.1:9/v1"), ChatModel)


@pytest.mark.parametrize(
    "module", ["stargraph.llm._messages", "stargraph.llm._problems", "stargraph.llm._scripted"]
)
def test_docstring_examples_run(module: str) -> None:
    import doctest
    import importlib

    failed, attempted = doctest.testmod(importlib.import_module(module))
    assert attempted > 0
    assert failed == 0
