"""Chat models whose calls go through a task's journal: recorded live, served in replay.

The executor binds every service that has ``bind_journal`` to the journal of the task that
uses it, so node code keeps calling ``ctx.services["model"].complete(request)`` and the
record happens underneath: the request's fingerprint and the response are stored with the
step, a re-executed step (after a crash) gets the recorded response instead of a second
call, and a replay never reaches the network.
"""

from __future__ import annotations

from typing import Any, Protocol

from stargraph.llm._messages import ChatRequest, ChatResponse

__all__ = ["JournaledChatModel", "Journal"]

KIND = "llm"
"""Journal kind of chat-model calls."""


class Journal(Protocol):
    """The slice of ``stargraph.runtime.TaskJournal`` a journaled service needs."""

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
        """The recorded response to ``request``, or the model's (then recorded)."""
        value = self.journal.call(
            KIND,
            "chat",
            lambda: self.model.complete(request).model_dump(mode="json"),
            request=request.model_dump(mode="json", exclude_defaults=True),
        )
        return ChatResponse.model_validate(value)

    async def acomplete(self, request: ChatRequest) -> ChatResponse:
        """Async :meth:`complete`."""

        async def compute() -> Any:
            return (await self.model.acomplete(request)).model_dump(mode="json")

        value = await self.journal.acall(
            KIND,
            "chat",
            compute,
            request=request.model_dump(mode="json", exclude_defaults=True),
        )
        return ChatResponse.model_validate(value)
