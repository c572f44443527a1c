"""ScriptedOpenAIServer itself: determinism, routes, scripts and failure modes."""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from typing import Any

import openai
import pytest

from stargraph.errors import LLMError
from stargraph.llm import ChatMessage, ChatRequest, OpenAIChatModel
from stargraph.testing import FIXED_CREATED, RecordedRequest, Reply, ScriptedOpenAIServer

ModelFactory = Callable[..., OpenAIChatModel]
REQUEST = ChatRequest(messages=(ChatMessage.user("hi"),))
SCRIPT = [
    Reply.text("hello"),
    Reply.tool_calls([("calc", {"expr": "1+1"}), ("clock", {})]),
    Reply.tool_calls([("calc", {"expr": "2+2"})]),
]


def post(url: str, body: dict[str, Any]) -> tuple[int, bytes]:
    request = urllib.request.Request(
        url,
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json"},
    )
    try:
        with urllib.request.urlopen(request, timeout=5) as response:
            return response.status, response.read()
    except urllib.error.HTTPError as error:
        with error:
            return error.code, error.read()


def test_two_servers_answer_byte_for_byte_alike() -> None:
    body = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
    answers = []
    for _ in range(2):
        with ScriptedOpenAIServer(SCRIPT) as server:
            answers.append([post(server.base_url + "/chat/completions", body) for _ in SCRIPT])
    assert answers[0] == answers[1]

    completions = [json.loads(raw) for _, raw in answers[0]]
    assert [c["id"] for c in completions] == ["chatcmpl-0001", "chatcmpl-0002", "chatcmpl-0003"]
    assert {c["created"] for c in completions} == {FIXED_CREATED}
    calls = [
        call["id"] for c in completions[1:] for call in c["choices"][0]["message"]["tool_calls"]
    ]
    # Call ids are numbered per server, across completions.
    assert calls == ["call_0001", "call_0002", "call_0003"]


def test_deterministic_ids_through_the_openai_client() -> None:
    seen = []
    for _ in range(2):
        with (
            ScriptedOpenAIServer(SCRIPT) as server,
            OpenAIChatModel("m", base_url=server.base_url) as model,
        ):
            seen.append([model.complete(REQUEST) for _ in SCRIPT])
    assert seen[0] == seen[1]
    assert [c.id for r in seen[0] for c in r.tool_calls] == ["call_0001", "call_0002", "call_0003"]


def test_explicit_call_ids_are_kept() -> None:
    reply = Reply.tool_calls([("my-id", "calc", {"expr": "1"}), ("clock", {})])
    with (
        ScriptedOpenAIServer([reply]) as server,
        OpenAIChatModel("m", base_url=server.base_url) as model,
    ):
        calls = model.complete(REQUEST).tool_calls
    assert [c.id for c in calls] == ["my-id", "call_0001"]


def test_models_route_lists_the_scripted_models() -> None:
    with (
        ScriptedOpenAIServer(models=("alpha", "beta")) as server,
        openai.OpenAI(base_url=server.base_url, api_key="k", max_retries=0) as client,
    ):
        assert [m.id for m in client.models.list()] == ["alpha", "beta"]
        assert [(r.method, r.path) for r in server.requests] == [("GET", "/v1/models")]


def test_unknown_route_is_404() -> None:
    with ScriptedOpenAIServer() as server:
        status, raw = post(server.base_url + "/embeddings", {})
    assert status == 404
    assert json.loads(raw)["error"]["message"] == "no route for POST /v1/embeddings"


def test_script_function_sees_each_request(
    scripted_openai: ScriptedOpenAIServer, make_model: ModelFactory
) -> None:
    def echo(request: RecordedRequest) -> Reply:
        return Reply.text("you said: " + request.messages[-1]["content"])

    scripted_openai.set_script(echo)
    model = make_model()
    answers = [model.complete(ChatRequest(messages=(ChatMessage.user(w),))) for w in ("a", "b")]
    assert [a.message.content for a in answers] == ["you said: a", "you said: b"]


def test_exhausted_script_fails_loudly_without_retries(
    scripted_openai: ScriptedOpenAIServer, make_model: ModelFactory
) -> None:
    scripted_openai.enqueue(Reply.text("only one"))
    model = make_model()
    model.complete(REQUEST)
    with pytest.raises(
        LLMError,
        match=r"failed after 1 attempt: HTTP 400: ScriptedOpenAIServer "
        r"has no reply for chat request #2: its script holds 1 replies",
    ):
        model.complete(REQUEST)
    assert len(scripted_openai.chat_requests) == 2


def test_A14_set_script_answers_from_its_own_first_reply(
    scripted_openai: ScriptedOpenAIServer, make_model: ModelFactory
) -> None:
    """A script set after some requests starts at its first reply, not at the reply whose
    index is the number of requests the server answered before."""
    model = make_model()
    scripted_openai.set_script([Reply.text("one"), Reply.text("two")])
    assert [model.complete(REQUEST).message.content for _ in range(2)] == ["one", "two"]
    scripted_openai.set_script([Reply.text("a"), Reply.text("b"), Reply.text("c")])
    assert [model.complete(REQUEST).message.content for _ in range(3)] == ["a", "b", "c"]
    with pytest.raises(LLMError, match=r"no reply for chat request #4: its script holds 3"):
        model.complete(REQUEST)
    # A function script in between does not shift the next list script either.
    scripted_openai.set_script(lambda _: Reply.text("f"))
    assert model.complete(REQUEST).message.content == "f"
    scripted_openai.set_script([Reply.text("x")])
    assert model.complete(REQUEST).message.content == "x"


def test_a_raising_script_function_is_reported(
    scripted_openai: ScriptedOpenAIServer, make_model: ModelFactory
) -> None:
    def broken(request: RecordedRequest) -> Reply:
        raise KeyError("nope")

    scripted_openai.set_script(broken)
    with pytest.raises(LLMError, match=r"script function raised KeyError\('nope'\)"):
        make_model().complete(REQUEST)


def test_error_reply_body_and_headers() -> None:
    with ScriptedOpenAIServer([Reply.error(429, "slow down", retry_after=2)]) as server:
        status, raw = post(server.base_url + "/chat/completions", {"model": "m", "messages": []})
    assert status == 429
    assert json.loads(raw) == {
        "error": {"message": "slow down", "type": "rate_limit_error", "param": None, "code": None}
    }


def test_close_wakes_delayed_replies_promptly() -> None:
    server = ScriptedOpenAIServer([Reply.text("late").delayed(30)]).start()
    with (
        OpenAIChatModel("m", base_url=server.base_url, timeout=0.2, max_retries=0) as model,
        pytest.raises(LLMError, match="timed out"),
    ):
        model.complete(REQUEST)
    started = time.monotonic()
    server.close()
    assert time.monotonic() - started < 5


def test_base_url_needs_a_running_server() -> None:
    server = ScriptedOpenAIServer()
    with pytest.raises(RuntimeError, match="not started"):
        _ = server.base_url
    with server:
        assert server.base_url.startswith("http://127.0.0.1:")
        assert server.base_url.endswith("/v1")
