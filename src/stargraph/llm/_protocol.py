"""The ``ChatModel`` seam: the only way the engine talks to a language model.

The runtime and the skills depend on this protocol, never on ``openai``; the run context
carries one implementation (a real client, the scripted model in tests, or the replaying model
during replay). ``stargraph.testing.check_chat_model`` is the conformance suite any
implementation can run.
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

from stargraph.llm._messages import ChatRequest, ChatResponse

__all__ = ["ChatModel"]


@runtime_checkable
class ChatModel(Protocol):
    """Answers a :class:`ChatRequest` with a :class:`ChatResponse`, synchronously or not.

    Implementations retry transient failures themselves and raise
    :class:`stargraph.errors.LLMError` once they give up; anything the *model* got wrong
    (a refusal, malformed tool arguments, an unknown tool) is returned as data, not raised.

    A model that can stream also offers ``complete_streaming(request, on_token)`` and its
    async twin ``acomplete_streaming``: the same response, its content handed to
    ``on_token`` piece by piece as it is produced (a run streaming model tokens uses them;
    a model without them has its content delivered whole).
    """

    def complete(self, request: ChatRequest) -> ChatResponse:
        """Answer ``request``, blocking."""
        ...

    async def acomplete(self, request: ChatRequest) -> ChatResponse:
        """Answer ``request`` without blocking the event loop."""
        ...
