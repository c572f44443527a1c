"""What the scripted server answers (``Reply``) and what it records (``RecordedRequest``)."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from pydantic import ConfigDict, Field

from stargraph._typed import TypedModel
from stargraph.errors import ChatDataError
from stargraph.llm import ChatResponse, Usage

__all__ = ["RecordedRequest", "Reply", "ScriptedToolCall"]

_FROZEN = ConfigDict(frozen=True, extra="forbid")

ToolCallSpec = tuple[str, Mapping[str, Any] | str] | tuple[str, str, Mapping[str, Any] | str]
"""``(name, arguments)`` or ``(id, name, arguments)``; arguments as a dict or raw text."""


class ScriptedToolCall(TypedModel):
    """One tool call the server will send; ``id=None`` lets it number the call itself."""

    typed_error = ChatDataError

    model_config = _FROZEN

    name: str
    """Function name, sent as is (it may name a tool that does not exist)."""
    arguments: str
    """Raw argument text, sent as is (it may be malformed JSON)."""
    id: str | None = None
    """Explicit call id; ``None`` means ``call_0001``, ``call_0002`` ... per server."""


class Reply(TypedModel):
    """One scripted answer of :class:`~stargraph.testing.ScriptedOpenAIServer`.

    Build replies with the constructors; every one can be :meth:`delayed` to make a client
    time out::

        Reply.text("4")
        Reply.tool_calls([("calc", {"expr": "2+2"}), ("clock", {})])   # parallel calls
        Reply.refusal("I can't help with that.")
        Reply.raw_arguments("{not json", name="calc")
        Reply.error(429, retry_after=0)
        Reply.error(401, body={"detail": "Invalid API key"})   # a FastAPI-shaped body
        Reply.text("late").delayed(2.0)
        Reply.text("cut short").aborted(after=2)   # the server drops the connection
        Reply.text("stuck").stalled(after=2)       # the stream goes silent: a read timeout
    """

    typed_error = ChatDataError

    # Fields are named apart from the constructors (``calls``, not ``tool_calls``) because a
    # pydantic field and a classmethod cannot share a name.
    model_config = _FROZEN

    content: str | None = None
    """Assistant text."""
    calls: tuple[ScriptedToolCall, ...] = ()
    """Tool calls, in order (several means parallel calls)."""
    refusal_text: str | None = None
    """Refusal text (``message.refusal``)."""
    finish_reason: str | None = None
    """Defaults to ``tool_calls`` when there are calls, else ``stop``."""
    usage: Usage | None = None
    """Defaults to a deterministic word count of request and reply."""
    model: str | None = None
    """Defaults to the model named in the request."""
    status: int = 200
    """HTTP status; anything but 200 sends an OpenAI-style error body."""
    error_message: str = ""
    """The ``error.message`` of an error reply."""
    error_body: dict[str, Any] | None = None
    """The whole JSON body of an error reply, instead of OpenAI's ``{"error": {...}}``."""
    headers: dict[str, str] = Field(default_factory=dict)
    """Extra response headers (``Retry-After`` ...)."""
    delay: float = 0.0
    """Seconds to wait before answering (to trigger client timeouts)."""
    abort_after: int | None = None
    """Drop the connection after this many stream chunks: no ``finish_reason``, no
    ``[DONE]`` (a server that aborts the answer); a non-streamed request gets no answer."""
    stall_after: int | None = None
    """Go silent after this many stream chunks, holding the connection open until the server
    closes (a server that hangs mid-answer: the client's read timeout fires)."""

    @classmethod
    def text(cls, content: str, *, usage: Usage | None = None) -> Reply:
        """A plain text answer."""
        return cls(content=content, usage=usage)

    @classmethod
    def tool_calls(cls, calls: Sequence[ToolCallSpec], *, content: str | None = None) -> Reply:
        """One or more tool calls; dict arguments are JSON-encoded as a model would."""
        scripted: list[ScriptedToolCall] = []
        for spec in calls:
            call_id: str | None = None
            if len(spec) == 3:
                call_id, name, arguments = spec
            else:
                name, arguments = spec
            raw = arguments if isinstance(arguments, str) else json.dumps(dict(arguments))
            scripted.append(ScriptedToolCall(id=call_id, name=name, arguments=raw))
        return cls(content=content, calls=tuple(scripted))

    @classmethod
    def refusal(cls, text: str) -> Reply:
        """A refusal: ``content`` null, ``refusal`` set, ``finish_reason`` ``stop``."""
        return cls(refusal_text=text)

    @classmethod
    def raw_arguments(cls, arguments: str, *, name: str = "tool") -> Reply:
        """A single tool call whose argument text is sent verbatim (e.g. malformed JSON)."""
        return cls(calls=(ScriptedToolCall(name=name, arguments=arguments),))

    @classmethod
    def error(
        cls,
        status: int,
        message: str | None = None,
        *,
        retry_after: float | None = None,
        body: Mapping[str, Any] | None = None,
    ) -> Reply:
        """An HTTP error (429, 500, 503 ...) with an OpenAI-style error body, or with
        ``body`` as the whole JSON body (servers that are not OpenAI answer otherwise)."""
        headers = {} if retry_after is None else {"Retry-After": f"{retry_after:g}"}
        return cls(
            status=status,
            error_message=message or f"scripted HTTP {status} error",
            error_body=None if body is None else dict(body),
            headers=headers,
        )

    @classmethod
    def from_response(cls, response: ChatResponse) -> Reply:
        """The reply that makes the server answer like ``response`` (ids kept)."""
        return cls(
            content=response.message.content,
            calls=tuple(
                ScriptedToolCall(id=call.id, name=call.name, arguments=call.arguments)
                for call in response.message.tool_calls
            ),
            refusal_text=response.refusal,
            finish_reason=response.finish_reason,
            usage=response.usage,
            model=response.model or None,
        )

    def delayed(self, seconds: float) -> Reply:
        """This reply, sent only after ``seconds``."""
        return self.model_copy(update={"delay": seconds})

    def aborted(self, *, after: int = 1) -> Reply:
        """This reply, cut off by the server: a stream ends after ``after`` chunks without a
        ``finish_reason`` or ``[DONE]``; a non-streamed request gets no answer at all."""
        return self.model_copy(update={"abort_after": after})

    def stalled(self, *, after: int = 1) -> Reply:
        """This reply, streamed up to ``after`` chunks, then nothing more until the server
        closes: the client times out in the middle of the stream."""
        return self.model_copy(update={"stall_after": after})


class RecordedRequest(TypedModel):
    """One HTTP request the server received, kept for assertions."""

    typed_error = ChatDataError

    model_config = _FROZEN

    method: str
    """``GET`` or ``POST``."""
    path: str
    """Request path, e.g. ``/v1/chat/completions``."""
    headers: dict[str, str]
    """Headers, names lower-cased."""
    body: dict[str, Any] | None = None
    """The parsed JSON body, if any."""

    @property
    def messages(self) -> list[dict[str, Any]]:
        """The chat messages of a chat-completions request (``[]`` otherwise)."""
        if self.body is None:
            return []
        messages = self.body.get("messages") or []
        return list(messages)
