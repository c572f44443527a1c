"""The conformance suite every :class:`~stargraph.llm.ChatModel` implementation passes.

Call :func:`check_chat_model` from a test with a *harness*: a function that takes a list of
:class:`~stargraph.llm.ChatResponse` and returns a context manager yielding a model that will
answer the next requests with exactly those responses (for a real client: a scripted server
behind it). The suite sends its requests in order and raises ``AssertionError`` naming the
first property that does not hold::

    def test_my_model_conforms() -> None:
        check_chat_model(lambda script: contextlib.nullcontext(ScriptedChatModel(script)))
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from typing import Final

from stargraph.llm import (
    ChatMessage,
    ChatModel,
    ChatRequest,
    ChatResponse,
    ToolCall,
    Usage,
)

__all__ = ["CONFORMANCE_SCRIPT", "ChatModelHarness", "check_chat_model"]

ChatModelHarness = Callable[[Sequence[ChatResponse]], AbstractContextManager[ChatModel]]
"""Builds a model scripted to answer with the given responses, in order."""

_TOOL = {
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
}


def _reply(message: ChatMessage, finish_reason: str, prompt: int, completion: int) -> ChatResponse:
    total = prompt + completion
    usage = Usage(prompt_tokens=prompt, completion_tokens=completion, total_tokens=total)
    return ChatResponse(message=message, finish_reason=finish_reason, usage=usage)


CONFORMANCE_SCRIPT: Final[tuple[ChatResponse, ...]] = (
    _reply(ChatMessage.assistant("Hello there."), "stop", 3, 2),
    # Parallel calls, one with malformed JSON and one to a tool nobody offered: the model
    # must hand all three back verbatim (judging them is normalize_tool_calls' job).
    _reply(
        ChatMessage.assistant(
            tool_calls=[
                ToolCall(id="call_a", name="calc", arguments='{"expr": "2+2"}'),
                ToolCall(id="call_b", name="calc", arguments='{"expr": '),
                ToolCall(id="call_c", name="no_such_tool", arguments="{}"),
            ]
        ),
        "tool_calls",
        7,
        11,
    ),
    _reply(ChatMessage.assistant("The answer is 4."), "stop", 20, 4),
    ChatResponse(
        message=ChatMessage.assistant(None),
        finish_reason="stop",
        usage=Usage(prompt_tokens=4, completion_tokens=6, total_tokens=10),
        refusal="I can't help with that.",
    ),
    # Used only by a model that can stream (complete_streaming / acomplete_streaming).
    _reply(ChatMessage.assistant("Streamed, piece by piece."), "stop", 3, 5),
    _reply(
        ChatMessage.assistant(
            "Checking.",
            tool_calls=[ToolCall(id="call_d", name="calc", arguments='{"expr": "3*3"}')],
        ),
        "tool_calls",
        7,
        9,
    ),
)
"""What the harness is asked to script, in the order the suite consumes it (the last two
only by a model that can stream its replies)."""


def check_chat_model(harness: ChatModelHarness) -> None:
    """Run the conformance suite against the model ``harness`` builds.

    Checked: replies come back as :class:`ChatResponse` with role ``assistant``; text,
    finish reason and usage survive; parallel tool calls keep their order, ids and raw
    argument text (malformed or naming unknown tools, without raising); a conversation
    carrying tool results is accepted; ``acomplete`` answers like ``complete``; a refusal is
    returned as data. A model that can stream (``complete_streaming(request, on_token)`` and
    ``acomplete_streaming``) must return the same reply as unstreamed, having handed over its
    content in pieces that join to it exactly. Uses ``asyncio.run``, so call it outside a
    running event loop.
    """
    script = CONFORMANCE_SCRIPT
    with harness(script) as model:
        if not isinstance(model, ChatModel):
            raise AssertionError(f"{model!r} does not implement the ChatModel protocol")
        question = ChatMessage.user("What is 2+2? Use the calculator.")
        first = ChatRequest(messages=(ChatMessage.system("Be brief."), ChatMessage.user("Hi")))
        _expect("plain text reply", model.complete(first), script[0])

        ask = ChatRequest(messages=(question,), tools=(_TOOL,), parallel_tool_calls=True)
        calls = model.complete(ask)
        _expect("parallel tool calls", calls, script[1])

        # The tool_call_id round trip: the assistant message goes back as received, each
        # call answered by a tool message carrying its id.
        answers = tuple(ChatMessage.tool(c.id, "4", name=c.name) for c in calls.tool_calls)
        follow_up = ChatRequest(messages=(question, calls.message, *answers), tools=(_TOOL,))
        _expect(
            "async reply after tool results", asyncio.run(model.acomplete(follow_up)), script[2]
        )
        _expect("refusal", model.complete(first), script[3])

        stream = getattr(model, "complete_streaming", None)
        astream = getattr(model, "acomplete_streaming", None)
        if stream is None and astream is None:
            return
        if stream is None or astream is None:
            raise AssertionError(
                f"{model!r} has only one of complete_streaming and acomplete_streaming"
            )
        pieces: list[str] = []
        _expect("streamed reply", stream(first, pieces.append), script[4])
        _expect_pieces("streamed reply", pieces, script[4])
        pieces = []
        _expect("async streamed tool calls", asyncio.run(astream(ask, pieces.append)), script[5])
        _expect_pieces("async streamed tool calls", pieces, script[5])


def _expect(what: str, got: object, want: ChatResponse) -> None:
    if not isinstance(got, ChatResponse):
        raise AssertionError(f"{what}: expected a ChatResponse, got {type(got).__name__}")
    checks = {
        "message": (got.message, want.message),
        "finish_reason": (got.finish_reason, want.finish_reason),
        "usage": (got.usage, want.usage),
        "refusal": (got.refusal, want.refusal),
    }
    for field, (actual, expected) in checks.items():
        if actual != expected:
            raise AssertionError(f"{what}: {field} is {actual!r}, expected {expected!r}")
    if got.message.role != "assistant":
        raise AssertionError(f"{what}: role is {got.message.role!r}, expected 'assistant'")


def _expect_pieces(what: str, pieces: list[str], want: ChatResponse) -> None:
    text = want.message.content or ""
    if "".join(pieces) != text:
        raise AssertionError(f"{what}: the streamed pieces {pieces!r} do not join to {text!r}")
