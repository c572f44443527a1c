"""Model tokens for a streamed run: a journal carrying ``tokens`` makes the bound chat model
stream its reply through the real ``openai`` client, hand each piece of content over as it
arrives, and record exactly what an unstreamed call records (so replay, which never streams,
serves it unchanged)."""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import Awaitable, Callable
from typing import Any

import pytest

from stargraph.errors import LLMError
from stargraph.llm import (
    ChatMessage,
    ChatRequest,
    ChatResponse,
    JournaledChatModel,
    OpenAIChatModel,
    ScriptedChatModel,
)
from stargraph.llm._scripted import word_pieces
from stargraph.testing import Reply, ScriptedOpenAIServer, check_chat_model

TOOLS = (
    {
        "type": "function",
        "function": {
            "name": "calc",
            "description": "Evaluate an arithmetic expression.",
            "parameters": {"type": "object", "properties": {"expr": {"type": "string"}}},
        },
    },
)
REQUEST = ChatRequest(
    messages=(ChatMessage.user("What is 2+2? Use tools if you must."),), tools=TOOLS
)
PLAIN_REQUEST = ChatRequest(messages=(ChatMessage.user("What is 2+2?"),))

REPLIES = {
    "text": Reply.text("The answer is 4, as far as I can tell."),
    "tool calls with text": Reply.tool_calls(
        [("calc", {"expr": "2+2"}), ("calc", "{broken")], content="Let me check that."
    ),
    "tool calls only": Reply.tool_calls([("calc", {"expr": "12345 * 678"})]),
    "refusal": Reply.refusal("I can't help with that request."),
}


class FakeJournal:
    """What a task journal does for a chat model: records each call (kind, key, request,
    value) live, serves the record back in replay; ``tokens`` as the runtime sets it."""

    def __init__(
        self,
        tokens: Callable[[str], None] | None = None,
        *,
        record: list[dict[str, Any]] | None = None,
    ) -> None:
        self.tokens = tokens
        self.replay = record is not None
        self.entries: list[dict[str, Any]] = list(record or ())
        self.seq = 0

    def _served(self, kind: str, key: str, request: Any) -> dict[str, Any] | None:
        seq, self.seq = self.seq, self.seq + 1
        if seq < len(self.entries):
            entry = self.entries[seq]
            assert (entry["kind"], entry["key"], entry["request"]) == (kind, key, request)
            return entry
        assert not self.replay, f"replay miss at call #{seq}"
        return None

    def _record(self, kind: str, key: str, request: Any, value: Any) -> Any:
        self.entries.append({"kind": kind, "key": key, "request": request, "value": value})
        return value

    def call(
        self,
        kind: str,
        key: str,
        compute: Callable[[], Any],
        *,
        request: Any = None,
        fingerprint: Any = None,
    ) -> Any:
        entry = self._served(kind, key, request)
        if entry is not None:
            return entry["value"]
        return self._record(kind, key, request, compute())

    async def acall(
        self,
        kind: str,
        key: str,
        compute: Callable[[], Awaitable[Any]],
        *,
        request: Any = None,
        fingerprint: Any = None,
    ) -> Any:
        entry = self._served(kind, key, request)
        if entry is not None:
            return entry["value"]
        return self._record(kind, key, request, await compute())

    def canonical(self) -> bytes:
        """The record as bytes, to compare two records byte for byte."""
        return json.dumps(self.entries, sort_keys=True, separators=(",", ":")).encode()


def _ask(bound: JournaledChatModel, request: ChatRequest, how: str) -> ChatResponse:
    if how == "async":
        return asyncio.run(bound.acomplete(request))
    return bound.complete(request)


def _model(server: ScriptedOpenAIServer, **options: Any) -> OpenAIChatModel:
    options.setdefault("timeout", 10.0)
    return OpenAIChatModel("gpt-test", base_url=server.base_url, api_key="sk-test", **options)


@pytest.mark.parametrize("how", ["sync", "async"])
@pytest.mark.parametrize("name", sorted(REPLIES))
def test_issue18_streamed_call_records_what_an_unstreamed_call_records(name: str, how: str) -> None:
    # Two servers with the same script answer with the same ids, so the records can be equal.
    reply = REPLIES[name]
    tokens: list[str] = []
    plain_journal, streamed_journal = FakeJournal(), FakeJournal(tokens.append)
    with ScriptedOpenAIServer([reply]) as plain, ScriptedOpenAIServer([reply]) as streaming:
        with _model(plain) as model:
            expected = _ask(model.bind_journal(plain_journal), REQUEST, how)
        with _model(streaming) as model:
            streamed = _ask(model.bind_journal(streamed_journal), REQUEST, how)

    # Really streamed over SSE through the openai client, and only the streamed one.
    plain_body, streamed_body = plain.chat_requests[0].body, streaming.chat_requests[0].body
    assert plain_body is not None
    assert streamed_body is not None
    assert "stream" not in plain_body
    assert (streamed_body["stream"], streamed_body["stream_options"]) == (
        True,
        {"include_usage": True},
    )
    # The content arrived piece by piece, in order; the assembled reply is the plain one.
    assert tokens == word_pieces(reply.content)
    assert "".join(tokens) == (expected.message.content or "")
    if reply.content:
        assert len(tokens) > 2
    assert streamed == expected
    # The record is byte for byte the unstreamed one: request (no stream flag) and reply.
    assert streamed_journal.canonical() == plain_journal.canonical()
    assert "stream" not in streamed_journal.entries[0]["request"]

    # A replay of the streamed record is served it: no request, no tokens, the same reply.
    replay_tokens: list[str] = []
    with ScriptedOpenAIServer([]) as silent, _model(silent) as model:
        replayed = _ask(
            model.bind_journal(FakeJournal(replay_tokens.append, record=streamed_journal.entries)),
            REQUEST,
            how,
        )
    assert replayed == streamed
    assert silent.chat_requests == []
    assert replay_tokens == []


def test_issue18_tool_call_stream_assembles_the_same_reply() -> None:
    reply = REPLIES["tool calls with text"]
    tokens: list[str] = []
    with ScriptedOpenAIServer([reply]) as server, _model(server) as model:
        response = model.bind_journal(FakeJournal(tokens.append)).complete(REQUEST)

    assert [(call.id, call.name, call.arguments) for call in response.tool_calls] == [
        ("call_0001", "calc", '{"expr": "2+2"}'),
        ("call_0002", "calc", "{broken"),
    ]
    assert response.finish_reason == "tool_calls"
    assert response.message.content == "Let me check that."
    assert tokens == ["Let", " me", " check", " that."]


@pytest.mark.parametrize("how", ["sync", "async"])
def test_issue18_aborted_stream_is_an_llm_error_and_records_nothing(how: str) -> None:
    # Role chunk, two words, then the server drops the connection: no finish_reason, no [DONE].
    tokens: list[str] = []
    journal = FakeJournal(tokens.append)
    script = [Reply.text("Four it is, I think.").aborted(after=3), Reply.text("unused")]
    with (
        ScriptedOpenAIServer(script) as server,
        _model(server, backoff=0) as model,
        pytest.raises(LLMError, match="ended before the model finished") as caught,
    ):
        _ask(model.bind_journal(journal), PLAIN_REQUEST, how)

    assert "chat model 'gpt-test'" in str(caught.value)
    assert tokens == ["Four", " it"]  # delivered as they came, before the abort
    assert len(server.chat_requests) == 1  # half an answer is not asked for again
    assert journal.entries == []


def test_issue18_a_stream_that_fails_after_tokens_is_not_retried() -> None:
    import openai

    tokens: list[str] = []
    sleeps: list[float] = []
    journal = FakeJournal(tokens.append)
    script = [Reply.text("Four it is.").stalled(after=2), Reply.text("Four it is.")]
    with (
        ScriptedOpenAIServer(script) as server,
        _model(server, timeout=1.0, sleep=sleeps.append) as model,
        pytest.raises(LLMError, match="already been delivered") as caught,
    ):
        model.bind_journal(journal).complete(PLAIN_REQUEST)

    # "Four" was handed over while the stream was still open (it never ended).
    assert tokens == ["Four"]
    assert isinstance(caught.value.__cause__, openai.APITimeoutError)
    assert "failed after 1 attempt: timed out" in str(caught.value)
    assert len(server.chat_requests) == 1
    assert sleeps == []
    assert journal.entries == []


def test_issue18_a_stream_that_fails_before_any_token_is_retried() -> None:
    # Only the role chunk came before the stall: nothing was delivered, so a new attempt
    # cannot deliver anything twice.
    tokens: list[str] = []
    sleeps: list[float] = []
    script = [Reply.text("Four it is.").stalled(after=1), Reply.text("Four it is.")]
    with (
        ScriptedOpenAIServer(script) as server,
        _model(server, timeout=1.0, sleep=sleeps.append) as model,
    ):
        response = model.bind_journal(FakeJournal(tokens.append)).complete(PLAIN_REQUEST)

    assert response.message.content == "Four it is."
    assert tokens == ["Four", " it", " is."]
    assert len(server.chat_requests) == 2
    assert sleeps == [0.5]


def test_issue18_llama_cpp_with_tools_is_called_unstreamed() -> None:
    # llama-cpp-python aborts a stream offering tools with tool_choice="auto": the call is
    # made unstreamed and its text delivered whole, instead of failing the run.
    reply = Reply.tool_calls([("calc", {"expr": "2+2"})], content="Let me check.")
    tokens: list[str] = []
    with (
        ScriptedOpenAIServer([reply, Reply.text("It is 4.")], behaves_like="llama.cpp") as server,
        _model(server, profile="llama.cpp") as model,
    ):
        bound = model.bind_journal(FakeJournal(tokens.append))
        response = bound.complete(REQUEST)
        assert [call.name for call in response.tool_calls] == ["calc"]
        assert tokens == ["Let me check."]
        # Without tools the same endpoint streams.
        assert bound.complete(PLAIN_REQUEST).message.content == "It is 4."

    bodies = [r.body or {} for r in server.chat_requests]
    assert [body.get("stream", False) for body in bodies] == [False, True]
    assert tokens == ["Let me check.", "It", " is", " 4."]


@pytest.mark.parametrize("how", ["sync", "async"])
def test_issue18_scripted_chat_model_streams_word_pieces(how: str) -> None:
    tokens: list[str] = []
    plain, streamed = FakeJournal(), FakeJournal(tokens.append)
    expected = _ask(ScriptedChatModel(["Four, I think."]).bind_journal(plain), PLAIN_REQUEST, how)
    response = _ask(
        ScriptedChatModel(["Four, I think."]).bind_journal(streamed), PLAIN_REQUEST, how
    )

    assert response == expected
    assert tokens == ["Four,", " I", " think."]
    assert streamed.canonical() == plain.canonical()


class _UnstreamedModel:
    """A chat model that cannot stream: only ``complete`` / ``acomplete``."""

    def complete(self, request: ChatRequest) -> ChatResponse:
        return ChatResponse(message=ChatMessage.assistant("Four."), finish_reason="stop")

    async def acomplete(self, request: ChatRequest) -> ChatResponse:
        return self.complete(request)


@pytest.mark.parametrize("how", ["sync", "async"])
def test_issue18_a_model_that_cannot_stream_delivers_its_text_whole(how: str) -> None:
    tokens: list[str] = []
    response = _ask(
        JournaledChatModel(_UnstreamedModel(), FakeJournal(tokens.append)), PLAIN_REQUEST, how
    )
    assert response.message.content == "Four."
    assert tokens == ["Four."]


def test_issue18_the_conformance_suite_checks_streaming() -> None:
    class LosesAPiece(ScriptedChatModel):
        def complete_streaming(
            self, request: ChatRequest, on_token: Callable[[str], None]
        ) -> ChatResponse:
            return super().complete_streaming(request, lambda piece: None)

    check_chat_model(lambda script: contextlib.nullcontext(ScriptedChatModel(script)))
    with pytest.raises(AssertionError, match="streamed reply: the streamed pieces"):
        check_chat_model(lambda script: contextlib.nullcontext(LosesAPiece(script)))
