"""Chat models whose calls go through a task's journal: recorded live, served in replay.

The executor binds every service that has ``bind_journal`` to the journal of the task that
uses it, so node code keeps calling ``ctx.services["model"].complete(request)`` and the
record happens underneath: the request's fingerprint and the response are stored with the
step, a re-executed step (after a crash) gets the recorded response instead of a second
call, and a replay never reaches the network.

When the run streams model tokens, the runtime puts a callable on the journal as
``journal.tokens``; a call that really reaches the model then streams its reply and hands each
piece of content to it as it arrives. The record is the same either way (the request, never
``stream``, and the assembled response), so a streamed run replays exactly like an unstreamed
one. A call served from the record delivers no tokens: nothing is generated.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

from stargraph.llm._messages import ChatRequest, ChatResponse

__all__ = ["JournaledChatModel", "Journal", "TokenSink"]

KIND = "llm"
"""Journal kind of chat-model calls."""

TokenSink = Callable[[str], None]
"""Takes each piece of a reply's content as the model produces it."""


class Journal(Protocol):
    """The slice of ``stargraph.runtime.TaskJournal`` a journaled service needs.

    It may also carry ``tokens`` (a :data:`TokenSink` or ``None``), read with ``getattr``:
    journals that do not stream have no such attribute.
    """

    def call(self, kind: str, key: str, compute: Any, *, request: Any = None) -> Any:
        """Recorded value, or ``compute()`` recorded."""
        ...

    async def acall(self, kind: str, key: str, compute: Any, *, request: Any = None) -> Any:
        """Async :meth:`call`."""
        ...


class _Model(Protocol):
    def complete(self, request: ChatRequest) -> ChatResponse: ...

    async def acomplete(self, request: ChatRequest) -> ChatResponse: ...


class JournaledChatModel:
    """A chat model bound to one task's journal (see the module docstring)."""

    def __init__(self, model: _Model, journal: Journal) -> None:
        self.model = model
        self.journal = journal

    def complete(self, request: ChatRequest) -> ChatResponse:
        """The recorded response to ``request``, or the model's (then recorded); streamed
        when the journal carries ``tokens``."""
        tokens: TokenSink | None = getattr(self.journal, "tokens", None)

        def compute() -> Any:
            if tokens is None:
                return self.model.complete(request).model_dump(mode="json")
            return _streamed(self.model, request, tokens).model_dump(mode="json")

        value = self.journal.call(
            KIND,
            "chat",
            compute,
            request=request.model_dump(mode="json", exclude_defaults=True),
        )
        return ChatResponse.model_validate(value)

    async def acomplete(self, request: ChatRequest) -> ChatResponse:
        """Async :meth:`complete`."""
        tokens: TokenSink | None = getattr(self.journal, "tokens", None)

        async def compute() -> Any:
            if tokens is None:
                return (await self.model.acomplete(request)).model_dump(mode="json")
            return (await _astreamed(self.model, request, tokens)).model_dump(mode="json")

        value = await self.journal.acall(
            KIND,
            "chat",
            compute,
            request=request.model_dump(mode="json", exclude_defaults=True),
        )
        return ChatResponse.model_validate(value)


def _streamed(model: _Model, request: ChatRequest, tokens: TokenSink) -> ChatResponse:
    """``model``'s answer, its content handed to ``tokens`` as it is produced: piece by
    piece by a model that can stream (``complete_streaming``), else whole, once it is there."""
    stream = getattr(model, "complete_streaming", None)
    if stream is not None:
        response: ChatResponse = stream(request, tokens)
        return response
    response = model.complete(request)
    if response.message.content:
        tokens(response.message.content)
    return response


async def _astreamed(model: _Model, request: ChatRequest, tokens: TokenSink) -> ChatResponse:
    """Async :func:`_streamed`."""
    stream = getattr(model, "acomplete_streaming", None)
    if stream is not None:
        response: ChatResponse = await stream(request, tokens)
        return response
    response = await model.acomplete(request)
    if response.message.content:
        tokens(response.message.content)
    return response
