"""What real OpenAI-compatible servers do that OpenAI does not, and how the client copes.

The scripted server plays llama-cpp-python's server (``behaves_like="llama.cpp"``, measured
against the real one in tests/real_model); the regressions of issue 20 (P1, P3, P4, P8 and the
retry rules) are pinned here against it.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from pydantic import BaseModel

from stargraph.errors import LLMError
from stargraph.llm import (
    GENERIC,
    LLAMA_CPP,
    OLLAMA,
    OPENAI,
    VLLM,
    ChatMessage,
    ChatRequest,
    EndpointProfile,
    OpenAIChatModel,
    ResponseFormat,
    ToolCall,
    detect_profile,
    profile_for_url,
)
from stargraph.testing import Reply, ScriptedOpenAIServer

ModelFactory = Callable[..., OpenAIChatModel]

CALC = {
    "type": "function",
    "function": {
        "name": "calc",
        "description": "Evaluate arithmetic.",
        "parameters": {
            "type": "object",
            "properties": {"expression": {"type": "string"}},
            "required": ["expression"],
        },
    },
}
CALL = ToolCall(id="call_1", name="calc", arguments='{"expression": "6*7"}')
# A conversation after one tool call: the assistant message only calls a tool.
AFTER_A_TOOL_CALL = (
    ChatMessage.user("What is 6*7?"),
    ChatMessage.assistant(None, [CALL]),
    ChatMessage.tool("call_1", "42", name="calc"),
)


class Answer(BaseModel):
    value: int


@pytest.fixture
def llama() -> Iterator[ScriptedOpenAIServer]:
    """The scripted server answering like llama-cpp-python's."""
    with ScriptedOpenAIServer(behaves_like="llama.cpp") as server:
        yield server


@pytest.fixture
def llama_model(llama: ScriptedOpenAIServer, sleeps: list[float]) -> Iterator[ModelFactory]:
    built: list[OpenAIChatModel] = []

    def factory(**options: Any) -> OpenAIChatModel:
        options.setdefault("base_url", llama.base_url)
        options.setdefault("timeout", 5.0)
        model = OpenAIChatModel("smollm2", sleep=sleeps.append, **options)
        built.append(model)
        return model

    yield factory
    for model in built:
        model.close()


def sent(server: ScriptedOpenAIServer, index: int = -1) -> dict[str, Any]:
    body = server.chat_requests[index].body
    assert body is not None
    return body


# ----------------------------------------------------------------------------- P1 null content


def test_p1_a_tool_call_only_message_is_accepted_by_llama_cpp(
    llama: ScriptedOpenAIServer, llama_model: ModelFactory, sleeps: list[float]
) -> None:
    """P1: ``"content": null`` is a validation error (HTTP 500) there; the client sends ``""``
    for an unknown server and for the llama.cpp profile, and the call goes through."""
    llama.enqueue(Reply.text("42."), Reply.text("42 again."))
    for model in (llama_model(), llama_model(profile="llama.cpp")):
        response = model.complete(ChatRequest(messages=AFTER_A_TOOL_CALL))
        assert response.message.content in ("42.", "42 again.")
        assert sent(llama)["messages"][1]["content"] == ""
    assert len(llama.chat_requests) == 2
    assert sleeps == []


def test_p1_openai_keeps_null_content_and_llama_cpp_refuses_it_without_retries(
    llama: ScriptedOpenAIServer, llama_model: ModelFactory, sleeps: list[float]
) -> None:
    """With the OpenAI profile the null goes out as OpenAI documents it; llama.cpp's HTTP 500
    carries a validation error, which is not retried (it would fail the same way)."""
    model = llama_model(profile="openai", max_retries=3)
    with pytest.raises(LLMError) as caught:
        model.complete(ChatRequest(messages=AFTER_A_TOOL_CALL))
    assert sent(llama)["messages"][1]["content"] is None
    message = str(caught.value)
    assert "failed after 1 attempt: HTTP 500" in message
    assert "Input should be a valid string" in message
    assert "validation error sent as HTTP 500" in message
    assert "not retried" in message
    assert len(llama.chat_requests) == 1
    assert sleeps == []


def test_the_scripted_llama_server_refuses_a_missing_content_too(
    llama: ScriptedOpenAIServer,
) -> None:
    body = {
        "model": "m",
        "messages": [{"role": "assistant", "tool_calls": [CALL.to_openai()]}],
    }
    status, payload = _post(llama, body)
    assert status == 500
    assert payload["error"]["message"] == "'dict object' has no attribute 'content'"
    assert llama.chat_requests[0].body == body


# ----------------------------------------------------------------------------- P2 tool_choice


def test_p2_tools_reach_llama_cpp_because_tool_choice_is_sent(
    llama: ScriptedOpenAIServer, llama_model: ModelFactory
) -> None:
    """llama.cpp offers no tools without ``tool_choice``; the client says ``auto``."""
    llama.enqueue(Reply.tool_calls([("calc", {"expression": "6*7"})]))
    response = llama_model().complete(
        ChatRequest(messages=(ChatMessage.user("6*7?"),), tools=(CALC,))
    )
    assert [call.name for call in response.tool_calls] == ["calc"]
    assert sent(llama)["tool_choice"] == "auto"


def test_p2_the_scripted_llama_server_hides_tools_without_tool_choice(
    llama: ScriptedOpenAIServer,
) -> None:
    """What P2 was: the same request without ``tool_choice`` gets text, not a call."""
    llama.enqueue(Reply.tool_calls([("calc", {"expression": "6*7"})], content="thinking"))
    body = {"model": "m", "messages": [{"role": "user", "content": "6*7?"}], "tools": [CALC]}
    status, payload = _post(llama, body)
    assert status == 200
    choice = payload["choices"][0]
    assert choice["message"]["content"] == "thinking"
    assert "tool_calls" not in choice["message"]
    assert choice["finish_reason"] == "stop"


def test_tool_choice_the_endpoint_cannot_honour_fails_before_sending(
    llama: ScriptedOpenAIServer, llama_model: ModelFactory
) -> None:
    request = ChatRequest(messages=(ChatMessage.user("6*7?"),), tools=(CALC,))
    with pytest.raises(LLMError, match=r"'llama\.cpp' does not support tool_choice='required'"):
        llama_model(profile="llama.cpp").complete(
            request.model_copy(update={"tool_choice": "required"})
        )
    assert llama.chat_requests == []
    # What the server would have done with it: an empty HTTP 500.
    body = {"messages": [{"role": "user", "content": "x"}], "tools": [CALC]}
    status, payload = _post(llama, {**body, "tool_choice": "required"})
    assert (status, payload["error"]["message"]) == (500, "")


def test_no_tool_choice_is_sent_without_tools(scripted_openai: ScriptedOpenAIServer) -> None:
    scripted_openai.enqueue(Reply.text("hi"))
    with OpenAIChatModel("m", base_url=scripted_openai.base_url) as model:
        model.complete(ChatRequest(messages=(ChatMessage.user("hi"),), tool_choice="auto"))
    body = scripted_openai.chat_requests[0].body
    assert body is not None
    assert "tool_choice" not in body


# ----------------------------------------------------------------------------- P3 aborted streams


def test_p3_a_stream_that_ends_without_finish_reason_is_an_error(
    scripted_openai: ScriptedOpenAIServer, make_model: ModelFactory
) -> None:
    """P3: the server drops the stream after two chunks; the answer is not passed off as
    a complete (shorter) one."""
    scripted_openai.enqueue(Reply.text("The answer is forty two").aborted(after=2))
    request = ChatRequest(messages=(ChatMessage.user("?"),))
    deltas: list[str] = []

    def read_all() -> None:
        with make_model().stream(request) as stream:
            deltas.extend(delta.content for delta in stream)

    with pytest.raises(LLMError) as caught:
        read_all()
    assert deltas == ["", "The"]
    assert "ended before the model finished (no finish_reason" in str(caught.value)
    assert "'gpt-test'" in str(caught.value)


def test_p3_reading_the_response_of_an_aborted_stream_is_an_error(
    scripted_openai: ScriptedOpenAIServer, make_model: ModelFactory
) -> None:
    scripted_openai.enqueue(Reply.text("never sent").aborted(after=0))
    stream = make_model().stream(ChatRequest(messages=(ChatMessage.user("?"),)))
    with pytest.raises(LLMError, match="ended before the model finished"):
        _ = stream.response


def test_p3_llama_cpp_aborts_a_stream_offering_tools_with_auto(
    llama: ScriptedOpenAIServer, llama_model: ModelFactory
) -> None:
    """The real server raises "Automatic streaming tool choice is not supported" after the
    response has begun: the stream is empty and has no [DONE]."""
    llama.enqueue(Reply.text("never sent"))
    request = ChatRequest(messages=(ChatMessage.user("6*7?"),), tools=(CALC,))
    with pytest.raises(LLMError, match="cannot stream a reply while tools are offered"):
        _ = llama_model().stream(request).response
    # The scripted reply was not consumed: the server refused before generating.
    response = llama_model().complete(request)
    assert response.message.content == "never sent"


def test_streams_on_llama_cpp_carry_no_usage_and_are_not_asked_for_it(
    llama: ScriptedOpenAIServer, llama_model: ModelFactory
) -> None:
    llama.enqueue(Reply.text("hello there"), Reply.text("hello again"))
    request = ChatRequest(messages=(ChatMessage.user("hi"),))
    assert llama_model().stream(request).response.message.content == "hello there"
    assert sent(llama)["stream_options"] == {"include_usage": True}  # generic profile asks
    response = llama_model(profile="llama.cpp").stream(request).response
    assert response.message.content == "hello again"
    assert response.usage.total_tokens == 0
    assert "stream_options" not in sent(llama)


def test_a_non_streamed_call_the_server_drops_is_retried(
    scripted_openai: ScriptedOpenAIServer, make_model: ModelFactory, sleeps: list[float]
) -> None:
    scripted_openai.enqueue(Reply.text("lost").aborted(), Reply.text("ok"))
    response = make_model(backoff=0.25).complete(ChatRequest(messages=(ChatMessage.user("?"),)))
    assert response.message.content == "ok"
    assert sleeps == [0.25]


# ----------------------------------------------------------------------------- P4 early exit


def test_p4_response_after_leaving_the_loop_early_is_the_whole_answer(
    scripted_openai: ScriptedOpenAIServer, make_model: ModelFactory
) -> None:
    """P4: breaking out of the delta loop and reading ``.response`` drains the rest."""
    scripted_openai.enqueue(Reply.text("one two three four"))
    stream = make_model().stream(ChatRequest(messages=(ChatMessage.user("count"),)))
    for delta in stream:
        if delta.content:
            break
    response = stream.response
    assert response.message.content == "one two three four"
    assert response.finish_reason == "stop"
    assert list(stream) == []  # finished: iterating again yields nothing


def test_p4_response_of_a_stream_closed_early_says_so(
    scripted_openai: ScriptedOpenAIServer, make_model: ModelFactory
) -> None:
    scripted_openai.enqueue(Reply.text("one two three four"))
    with make_model().stream(ChatRequest(messages=(ChatMessage.user("count"),))) as stream:
        next(stream)
    with pytest.raises(LLMError) as caught:
        _ = stream.response
    message = str(caught.value)
    assert "was closed before it ended" in message
    assert "connection error" not in message
    assert "endpoint is up" not in message


# ----------------------------------------------------------------------------- P8 error text


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        ({"detail": "Invalid API key"}, "HTTP 401: Invalid API key"),
        (
            {"detail": [{"loc": ["body", "messages"], "msg": "Field required"}]},
            "HTTP 401: body.messages: Field required",
        ),
        ({"error": "key revoked"}, "HTTP 401: key revoked"),
        ({"message": "no such key"}, "HTTP 401: no such key"),
        ({"error": {"message": "Incorrect API key provided"}}, "Incorrect API key provided"),
    ],
)
def test_p8_the_servers_own_words_reach_the_error(
    scripted_openai: ScriptedOpenAIServer,
    make_model: ModelFactory,
    body: dict[str, Any],
    expected: str,
) -> None:
    """P8: ``{"detail": "Invalid API key"}`` (FastAPI: llama-cpp-python, vLLM) used to
    become "HTTP 401: Error code: 401"."""
    scripted_openai.enqueue(Reply.error(401, body=body))
    with pytest.raises(LLMError) as caught:
        make_model().complete(ChatRequest(messages=(ChatMessage.user("hi"),)))
    assert expected in str(caught.value)
    assert "failed after 1 attempt" in str(caught.value)


# ----------------------------------------------------------------------------- retries


def test_a_timeout_on_a_single_slot_server_is_not_sent_again(
    llama: ScriptedOpenAIServer, llama_model: ModelFactory, sleeps: list[float]
) -> None:
    """The llama.cpp server keeps generating the abandoned answer: re-sending would queue."""
    llama.enqueue(Reply.text("late").delayed(30), Reply.text("never asked"))
    model = llama_model(profile="llama.cpp", timeout=0.2, max_retries=3)
    with pytest.raises(LLMError) as caught:
        model.complete(ChatRequest(messages=(ChatMessage.user("?"),)))
    message = str(caught.value)
    assert "failed after 1 attempt: timed out after 0.2s" in message
    assert "not re-sent" in message
    assert "raise timeout=" in message
    assert len(llama.chat_requests) == 1
    assert sleeps == []


def test_a_timeout_elsewhere_is_still_retried(
    scripted_openai: ScriptedOpenAIServer, make_model: ModelFactory, sleeps: list[float]
) -> None:
    scripted_openai.enqueue(Reply.text("late").delayed(30), Reply.text("ok"))
    response = make_model(timeout=0.2, backoff=0.5).complete(
        ChatRequest(messages=(ChatMessage.user("?"),))
    )
    assert response.message.content == "ok"
    assert sleeps == [0.5]


def test_a_plain_500_is_still_retried(
    scripted_openai: ScriptedOpenAIServer, make_model: ModelFactory, sleeps: list[float]
) -> None:
    scripted_openai.enqueue(Reply.error(500, "boom"), Reply.text("ok"))
    response = make_model(backoff=0.5).complete(ChatRequest(messages=(ChatMessage.user("?"),)))
    assert response.message.content == "ok"
    assert sleeps == [0.5]


# ----------------------------------------------------------------------------- profiles


def test_profiles_by_name_url_and_detection(llama: ScriptedOpenAIServer) -> None:
    assert EndpointProfile.named("llama.cpp") is LLAMA_CPP
    assert EndpointProfile.named("LlamaCpp") is LLAMA_CPP
    assert [EndpointProfile.named(n) for n in ("openai", "vllm", "ollama", "generic")] == [
        OPENAI,
        VLLM,
        OLLAMA,
        GENERIC,
    ]
    with pytest.raises(LLMError, match=r"unknown endpoint profile 'tgi'; use one of 'openai'"):
        EndpointProfile.named("tgi")
    with pytest.raises(LLMError, match="unknown endpoint profile"):
        OpenAIChatModel("m", base_url="http://127.0.0.1:1/v1", profile="tgi")
    assert profile_for_url("https://api.openai.com/v1") is OPENAI
    assert profile_for_url("http://localhost:11434/v1") is OLLAMA
    assert profile_for_url("http://127.0.0.1:8080/v1") is GENERIC
    assert OpenAIChatModel("m").profile is OPENAI
    assert detect_profile({"data": [{"id": "x", "owned_by": "vllm"}]}) is VLLM
    assert detect_profile(["library"]) is OLLAMA
    assert detect_profile({"data": []}, "http://h:11434/v1") is OLLAMA
    assert detect_profile({}) is GENERIC

    with OpenAIChatModel("m", base_url=llama.base_url, profile="detect") as model:
        assert model.profile is LLAMA_CPP
        assert model.profile is LLAMA_CPP
    # Asked once: the second read did not go to the server again.
    assert [r.path for r in llama.requests] == ["/v1/models"]


def test_detection_happens_at_the_first_call_sync_and_async(
    llama: ScriptedOpenAIServer,
) -> None:
    import asyncio

    llama.enqueue(Reply.text("a"), Reply.text("b"))
    request = ChatRequest(messages=(ChatMessage.user("6*7?"),), tools=(CALC,))
    with OpenAIChatModel("m", base_url=llama.base_url, profile="detect") as model:
        model.complete(request)
    with OpenAIChatModel("m", base_url=llama.base_url, profile="detect") as model:
        asyncio.run(model.acomplete(request))
    assert [r.path for r in llama.requests] == [
        "/v1/models",
        "/v1/chat/completions",
        "/v1/models",
        "/v1/chat/completions",
    ]
    # llama.cpp detected: tools offered with tool_choice=auto, the schema in its own form.
    assert all(r.body is not None and r.body["tool_choice"] == "auto" for r in llama.chat_requests)


def test_a_server_without_models_is_generic(scripted_openai: ScriptedOpenAIServer) -> None:
    with OpenAIChatModel(
        "m", base_url=scripted_openai.base_url + "/nowhere", profile="detect"
    ) as model:
        assert model.profile is GENERIC


def test_the_body_each_profile_sends() -> None:
    request = ChatRequest(
        messages=AFTER_A_TOOL_CALL,
        tools=(CALC,),
        max_tokens=64,
        response_format=ResponseFormat.for_schema(Answer),
    )
    schema = Answer.model_json_schema()
    openai_body = OPENAI.body(request, "gpt")
    assert openai_body["messages"][1]["content"] is None
    assert "tool_choice" not in openai_body
    assert openai_body["max_completion_tokens"] == 64
    assert "max_tokens" not in openai_body
    assert openai_body["response_format"] == {
        "type": "json_schema",
        "json_schema": {"name": "Answer", "schema": schema},
    }
    llama_body = LLAMA_CPP.body(request, "m")
    assert llama_body["messages"][1]["content"] == ""
    assert llama_body["tool_choice"] == "auto"
    assert llama_body["max_tokens"] == 64
    # llama.cpp turns a schema into a grammar over the whole reply, which leaves no room for a
    # tool call: with tools offered the schema is not sent; without tools it is, in its form.
    assert "response_format" not in llama_body
    no_tools = request.model_copy(update={"tools": ()})
    assert LLAMA_CPP.body(no_tools, "m")["response_format"] == {
        "type": "json_object",
        "schema": schema,
    }
    assert "response_format" not in GENERIC.body(request, "m")
    assert GENERIC.body(no_tools, "m")["response_format"]["type"] == "json_schema"
    # A field set by hand in extra wins over the profile.
    custom = request.model_copy(update={"extra": {"response_format": {"type": "text"}}})
    assert LLAMA_CPP.body(custom, "m")["response_format"] == {"type": "text"}
    assert ResponseFormat(type="json_object").to_openai() == {"type": "json_object"}
    assert ResponseFormat.for_schema({"type": "object"}).to_openai("json_object") == {
        "type": "json_object"
    }


def test_llama_cpp_is_sent_string_bounds_its_grammar_builder_accepts() -> None:
    long_text: dict[str, Any] = {"type": "string", "maxLength": 100_000}
    tool: dict[str, Any] = {
        "type": "function",
        "function": {
            "name": "mail",
            "description": "Send a mail.",
            "parameters": {
                "type": "object",
                "properties": {
                    "body": long_text,
                    "subject": {"type": "string", "maxLength": 200},
                    # An argument called maxLength is a name, not a bound.
                    "maxLength": {"type": "integer", "maximum": 5000},
                    "to": {"type": "array", "items": {"type": "string", "maxLength": 1254}},
                },
            },
        },
    }
    request = ChatRequest(messages=(ChatMessage.user("mail Ada"),), tools=(tool,))
    sent_schema = LLAMA_CPP.body(request, "m")["tools"][0]["function"]["parameters"]
    assert sent_schema["properties"] == {
        "body": {"type": "string", "maxLength": 1000},
        "subject": {"type": "string", "maxLength": 200},
        "maxLength": {"type": "integer", "maximum": 5000},
        "to": {"type": "array", "items": {"type": "string", "maxLength": 1000}},
    }
    assert tool["function"]["parameters"]["properties"]["body"] == long_text  # not mutated
    assert OPENAI.body(request, "m")["tools"] == [tool]
    answer = {"type": "object", "properties": {"text": long_text}}
    schema_only = ChatRequest(
        messages=(ChatMessage.user("hi"),), response_format=ResponseFormat.for_schema(answer)
    )
    lowered = LLAMA_CPP.body(schema_only, "m")["response_format"]["schema"]
    assert lowered["properties"]["text"]["maxLength"] == 1000


def test_new_request_fields_keep_old_fingerprints() -> None:
    """Recorded runs stay replayable: unset new fields do not enter the fingerprint."""
    request = ChatRequest(messages=(ChatMessage.user("hi"),))
    canonical = b'{"messages":[{"content":"hi","role":"user"}]}'
    assert request.fingerprint() == "sha256:" + hashlib.sha256(canonical).hexdigest()
    assert request.model_copy(update={"max_tokens": 5}).fingerprint() != request.fingerprint()


def test_structured_output_on_llama_cpp_sends_the_schema_it_accepts(
    llama: ScriptedOpenAIServer, llama_model: ModelFactory
) -> None:
    llama.enqueue(Reply.text('{"value": 42}'))
    request = ChatRequest(
        messages=(ChatMessage.user("6*7 as JSON"),),
        response_format=ResponseFormat.for_schema(Answer),
    )
    response = llama_model(profile="llama.cpp").complete(request)
    assert Answer.model_validate_json(response.message.content or "") == Answer(value=42)
    assert sent(llama)["response_format"]["type"] == "json_object"
    # OpenAI's form is a validation error there, and is not retried.
    with pytest.raises(LLMError, match="Input should be 'text' or 'json_object'"):
        llama_model(profile="openai").complete(request)
    assert len(llama.chat_requests) == 2


def _post(server: ScriptedOpenAIServer, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
    import urllib.error
    import urllib.request

    request = urllib.request.Request(
        server.base_url + "/chat/completions",
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json"},
    )
    try:
        with urllib.request.urlopen(request, timeout=5) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as error:
        with error:
            return error.code, json.loads(error.read())


def test_an_unreachable_server_is_judged_by_its_url_and_asked_again_later() -> None:
    """Detection that cannot reach the server decides nothing for good; the call reports
    the connection problem."""
    url = "http://127.0.0.1:9/v1"  # the discard port: nothing listens there
    with OpenAIChatModel("m", base_url=url, profile="detect", max_retries=0) as model:
        assert model.profile is GENERIC
        with pytest.raises(LLMError, match="connection error"):
            model.complete(ChatRequest(messages=(ChatMessage.user("?"),)))
        assert model.profile is GENERIC
