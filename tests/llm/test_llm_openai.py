"""OpenAIChatModel against the scripted server: the real openai client over real HTTP."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Iterator, Sequence

import openai
import pytest

from stargraph.errors import LLMError
from stargraph.llm import (
    ChatMessage,
    ChatRequest,
    ChatResponse,
    OpenAIChatModel,
    ToolCall,
    Usage,
    normalize_tool_calls,
)
from stargraph.testing import Reply, ScriptedOpenAIServer, check_chat_model

ModelFactory = Callable[..., OpenAIChatModel]

TOOLS = (
    {
        "type": "function",
        "function": {
            "name": "calc",
            "description": "Evaluate an arithmetic expression.",
            "parameters": {
                "type": "object",
                "properties": {"expr": {"type": "string"}},
                "required": ["expr"],
            },
        },
    },
    {
        "type": "function",
        "function": {
            "name": "clock",
            "description": "The current time.",
            "parameters": {"type": "object", "properties": {}},
        },
    },
)
QUESTION = ChatMessage.user("What is 2+2, and what time is it?")


def ask(*messages: ChatMessage, **options: object) -> ChatRequest:
    return ChatRequest(messages=messages or (QUESTION,), **options)


def test_plain_text_reply(scripted_openai: ScriptedOpenAIServer, make_model: ModelFactory) -> None:
    scripted_openai.enqueue(Reply.text("Four."))
    response = make_model().complete(ask(ChatMessage.system("Be brief."), QUESTION))

    assert response.message == ChatMessage.assistant("Four.")
    assert response.finish_reason == "stop"
    assert (response.id, response.model) == ("chatcmpl-0001", "gpt-test")
    (seen,) = scripted_openai.chat_requests
    assert seen.headers["authorization"] == "Bearer sk-test"
    assert seen.body == {
        "model": "gpt-test",
        "messages": [
            {"role": "system", "content": "Be brief."},
            {"role": "user", "content": "What is 2+2, and what time is it?"},
        ],
    }


def test_request_fields_reach_the_endpoint(
    scripted_openai: ScriptedOpenAIServer, make_model: ModelFactory
) -> None:
    scripted_openai.enqueue(Reply.text("ok"))
    make_model().complete(
        ask(
            model="other-model",
            tools=TOOLS,
            tool_choice="required",
            temperature=0.0,
            parallel_tool_calls=False,
            extra={"seed": 7, "vendor_knob": {"k": 1}},
        )
    )
    body = scripted_openai.chat_requests[0].body
    assert body is not None
    assert body["model"] == "other-model"
    assert body["tools"] == list(TOOLS)
    assert (body["tool_choice"], body["temperature"]) == ("required", 0.0)
    assert body["parallel_tool_calls"] is False
    # Fields the openai package has no keyword for still go through.
    assert (body["seed"], body["vendor_knob"]) == (7, {"k": 1})


def test_parallel_tool_calls_and_tool_call_id_round_trip(
    scripted_openai: ScriptedOpenAIServer, make_model: ModelFactory
) -> None:
    scripted_openai.enqueue(
        Reply.tool_calls([("calc", {"expr": "2+2"}), ("clock", {})]),
        Reply.text("4, and it is noon."),
    )
    model = make_model()
    first = model.complete(ask(tools=TOOLS, parallel_tool_calls=True))

    assert first.finish_reason == "tool_calls"
    assert first.message.content is None
    assert first.tool_calls == (
        ToolCall(id="call_0001", name="calc", arguments='{"expr": "2+2"}'),
        ToolCall(id="call_0002", name="clock", arguments="{}"),
    )
    results = {"call_0001": "4", "call_0002": "12:00"}
    answers = [ChatMessage.tool(c.id, results[c.id], name=c.name) for c in first.tool_calls]
    final = model.complete(ask(QUESTION, first.message, *answers, tools=TOOLS))

    assert final.message.content == "4, and it is noon."
    sent = scripted_openai.chat_requests[1].messages
    assert [call["id"] for call in sent[1]["tool_calls"]] == ["call_0001", "call_0002"]
    assert sent[1]["tool_calls"][0]["function"] == {"name": "calc", "arguments": '{"expr": "2+2"}'}
    assert [(m["role"], m["tool_call_id"], m["content"]) for m in sent[2:]] == [
        ("tool", "call_0001", "4"),
        ("tool", "call_0002", "12:00"),
    ]


def test_usage_is_recorded(scripted_openai: ScriptedOpenAIServer, make_model: ModelFactory) -> None:
    usage = Usage(prompt_tokens=12, completion_tokens=3, total_tokens=15)
    scripted_openai.enqueue(Reply.text("hi", usage=usage), Reply.text("two words"))
    model = make_model()
    assert model.complete(ask()).usage == usage
    # Unscripted usage is the server's word count: 8 words in, 2 out.
    assert model.complete(ask()).usage == Usage(
        prompt_tokens=8, completion_tokens=2, total_tokens=10
    )


def test_429_is_retried_with_backoff(
    scripted_openai: ScriptedOpenAIServer, make_model: ModelFactory, sleeps: list[float]
) -> None:
    scripted_openai.enqueue(Reply.error(429, "slow down"), Reply.text("ok"))
    response = make_model(backoff=0.25).complete(ask())

    assert response.message.content == "ok"
    assert len(scripted_openai.chat_requests) == 2
    assert sleeps == [0.25]


def test_retry_after_header_lengthens_the_backoff(
    scripted_openai: ScriptedOpenAIServer, make_model: ModelFactory, sleeps: list[float]
) -> None:
    scripted_openai.enqueue(
        Reply.error(429, retry_after=3), Reply.error(503, retry_after=99), Reply.text("ok")
    )
    make_model(backoff=0.25, max_backoff=10).complete(ask())
    assert sleeps == [3.0, 10.0]


def test_500_exhausted_raises_llm_error_naming_everything(
    scripted_openai: ScriptedOpenAIServer, make_model: ModelFactory, sleeps: list[float]
) -> None:
    scripted_openai.enqueue(*[Reply.error(500, "boom")] * 3)
    with pytest.raises(LLMError) as caught:
        make_model(max_retries=2).complete(ask())

    assert str(caught.value) == (
        f"chat model 'gpt-test' at {scripted_openai.base_url} failed after 3 attempts: "
        "HTTP 500: boom; transient errors (429, 5xx, timeouts, connection errors) are retried "
        "with backoff; check that the endpoint is up, or raise max_retries / timeout"
    )
    assert isinstance(caught.value.__cause__, openai.InternalServerError)
    assert len(scripted_openai.chat_requests) == 3
    assert sleeps == [0.5, 1.0]


def test_client_errors_are_not_retried(
    scripted_openai: ScriptedOpenAIServer, make_model: ModelFactory, sleeps: list[float]
) -> None:
    scripted_openai.enqueue(Reply.error(400, "unknown model 'gpt-test'"), Reply.text("unused"))
    with pytest.raises(LLMError) as caught:
        make_model().complete(ask())

    assert str(caught.value) == (
        f"chat model 'gpt-test' at {scripted_openai.base_url} failed after 1 attempt: "
        "HTTP 400: unknown model 'gpt-test'; this error is not retried; check the model name, "
        "API key and request"
    )
    assert len(scripted_openai.chat_requests) == 1
    assert sleeps == []


def test_timeout_is_retried(
    scripted_openai: ScriptedOpenAIServer, make_model: ModelFactory, sleeps: list[float]
) -> None:
    scripted_openai.enqueue(Reply.text("too late").delayed(5.0), Reply.text("in time"))
    response = make_model(timeout=0.3).complete(ask())

    assert response.message.content == "in time"
    assert len(scripted_openai.chat_requests) == 2
    assert sleeps == [0.5]


def test_persistent_timeout_says_so(
    scripted_openai: ScriptedOpenAIServer, make_model: ModelFactory
) -> None:
    scripted_openai.enqueue(*[Reply.text("late").delayed(5.0)] * 2)
    with pytest.raises(LLMError, match=r"failed after 2 attempts: timed out after 0\.2s"):
        make_model(timeout=0.2, max_retries=1).complete(ask())


def test_connection_errors_are_retried_then_reported(sleeps: list[float]) -> None:
    with ScriptedOpenAIServer() as server:
        dead_url = server.base_url

    async def asleep(seconds: float) -> None:
        sleeps.append(seconds)

    with (
        OpenAIChatModel("m", base_url=dead_url, max_retries=1, sleep=sleeps.append) as model,
        pytest.raises(
            LLMError,
            match=r"at http://127\.0\.0\.1:\d+/v1 failed after 2 attempts: "
            r"connection error",
        ),
    ):
        model.complete(ask())
    assert sleeps == [0.5]


@pytest.mark.parametrize(
    ("reply", "kind", "call_id"),
    [
        (Reply.refusal("I won't do arithmetic."), "refusal", None),
        (Reply.raw_arguments("not json", name="calc"), "invalid_json", "call_0001"),
        (Reply.tool_calls([("rm_rf", {"path": "/"})]), "unknown_tool", "call_0001"),
    ],
)
def test_model_mistakes_become_observations(
    scripted_openai: ScriptedOpenAIServer,
    make_model: ModelFactory,
    reply: Reply,
    kind: str,
    call_id: str | None,
) -> None:
    scripted_openai.enqueue(reply, Reply.text("Sorry; 4."))
    model = make_model()
    response = model.complete(ask(tools=TOOLS))
    result = normalize_tool_calls(response, {"calc", "clock"})

    assert result.calls == ()
    (problem,) = result.problems
    assert (problem.kind, problem.tool_call_id) == (kind, call_id)
    # The observation goes back to the model and the conversation stays valid.
    final = model.complete(ask(QUESTION, response.message, *result.observations, tools=TOOLS))
    assert final.message.content == "Sorry; 4."
    last = scripted_openai.chat_requests[1].messages[-1]
    assert last["content"] == problem.message
    if call_id is None:
        assert last["role"] == "user"
    else:
        assert (last["role"], last["tool_call_id"]) == ("tool", call_id)


def test_refusal_is_returned_as_data(
    scripted_openai: ScriptedOpenAIServer, make_model: ModelFactory
) -> None:
    scripted_openai.enqueue(Reply.refusal("I can't help with that."))
    response = make_model().complete(ask())
    assert (response.refusal, response.message.content) == ("I can't help with that.", None)


def test_env_vars_configure_the_model(
    scripted_openai: ScriptedOpenAIServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OPENAI_BASE_URL", scripted_openai.base_url)
    monkeypatch.setenv("OPENAI_API_KEY", "sk-from-env")
    scripted_openai.enqueue(Reply.text("configured"))
    with OpenAIChatModel("env-model") as model:
        assert model.base_url == scripted_openai.base_url
        assert model.complete(ask()).message.content == "configured"
    assert scripted_openai.chat_requests[0].headers["authorization"] == "Bearer sk-from-env"


def test_arguments_win_over_env_vars(
    scripted_openai: ScriptedOpenAIServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OPENAI_BASE_URL", "http://127.0.0.1:9/v1")
    monkeypatch.setenv("OPENAI_API_KEY", "sk-from-env")
    scripted_openai.enqueue(Reply.text("ok"))
    with OpenAIChatModel("m", base_url=scripted_openai.base_url, api_key="sk-arg") as model:
        model.complete(ask())
    assert scripted_openai.chat_requests[0].headers["authorization"] == "Bearer sk-arg"


def test_a_custom_endpoint_needs_no_key(
    scripted_openai: ScriptedOpenAIServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    scripted_openai.enqueue(Reply.text("ok"))
    with OpenAIChatModel("m", base_url=scripted_openai.base_url) as model:
        assert model.complete(ask()).message.content == "ok"


def test_openai_itself_needs_a_key_but_only_when_called(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    model = OpenAIChatModel("gpt-x")  # building it is fine: replay never calls it
    with pytest.raises(LLMError, match="has no API key: set OPENAI_API_KEY"):
        model.complete(ask())


def test_acomplete_answers_and_retries(
    scripted_openai: ScriptedOpenAIServer, make_model: ModelFactory, sleeps: list[float]
) -> None:
    scripted_openai.enqueue(
        Reply.error(502), Reply.tool_calls([("calc", {"expr": "1"})]), Reply.text("b")
    )
    model = make_model()

    async def main() -> list[ChatResponse]:
        first = await model.acomplete(ask(tools=TOOLS))
        return [first, await model.acomplete(ask())]

    first, second = asyncio.run(main())
    assert first.tool_calls == (ToolCall(id="call_0001", name="calc", arguments='{"expr": "1"}'),)
    assert second.message.content == "b"
    assert len(scripted_openai.chat_requests) == 3
    assert sleeps == [0.5]


def test_acomplete_gives_up_with_llm_error(
    scripted_openai: ScriptedOpenAIServer, make_model: ModelFactory
) -> None:
    scripted_openai.enqueue(*[Reply.error(503, "down")] * 2)
    with pytest.raises(LLMError, match="failed after 2 attempts: HTTP 503: down"):
        asyncio.run(make_model(max_retries=1).acomplete(ask()))


def test_openai_chat_model_conforms(sleeps: list[float]) -> None:
    @contextlib.contextmanager
    def harness(script: Sequence[ChatResponse]) -> Iterator[OpenAIChatModel]:
        with (
            ScriptedOpenAIServer([Reply.from_response(r) for r in script]) as server,
            OpenAIChatModel("m", base_url=server.base_url, sleep=sleeps.append) as model,
        ):
            yield model

    check_chat_model(harness)
    assert sleeps == []
