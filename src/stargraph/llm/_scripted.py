"""``ScriptedChatModel``: an in-memory chat model that answers from a script.

It is public API (STYLE 7: the fakes ship) so users can unit-test their graphs without a
server; ``stargraph.testing.ScriptedOpenAIServer`` is its over-HTTP sibling.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Callable, Sequence

from stargraph.errors import LLMError
from stargraph.llm._messages import ChatMessage, ChatRequest, ChatResponse
from stargraph.llm._recorded import Journal, JournaledChatModel

__all__ = ["ScriptedChatModel", "word_pieces"]

ScriptFunction = Callable[[ChatRequest], "ChatResponse | str"]


class ScriptedChatModel:
    """Answers each request with the next scripted reply, or with ``script(request)``.

    A reply may be a :class:`ChatResponse` or a plain string (a text answer). Every request
    is kept in :attr:`requests` so tests can assert on what the model was asked::

        >>> model = ScriptedChatModel(["hello"])
        >>> model.complete(ChatRequest(messages=(ChatMessage.user("hi"),))).message.content
        'hello'
        >>> len(model.requests)
        1

    Running past the end of a list script raises :class:`~stargraph.errors.LLMError`, the
    same error a real model raises when it fails for good. :meth:`complete_streaming` hands
    out a reply's text word by word, as the scripted server streams it.
    """

    def __init__(
        self,
        script: Sequence[ChatResponse | str] | ScriptFunction,
        *,
        model: str = "scripted-model",
    ) -> None:
        self.model = model
        """Reported as :attr:`ChatResponse.model` when a reply does not name one."""
        self.requests: list[ChatRequest] = []
        """Every request received, in order."""
        self._function: ScriptFunction | None = None
        self._replies: list[ChatResponse | str] = []
        if callable(script):
            self._function = script
        else:
            self._replies = list(script)
        # complete() may be called from parallel branches running in threads.
        self._lock = threading.Lock()

    def bind_journal(self, journal: Journal) -> JournaledChatModel:
        """This model routed through a task's journal: the executor calls it so that every
        call is recorded (and served, not repeated, on re-execution and in replay)."""
        return JournaledChatModel(self, journal)

    def complete(self, request: ChatRequest) -> ChatResponse:
        """Record ``request`` and return the next reply."""
        with self._lock:
            self.requests.append(request)
            index = len(self.requests)
            if self._function is not None:
                reply = self._function(request)
            elif index <= len(self._replies):
                reply = self._replies[index - 1]
            else:
                raise LLMError(
                    f"ScriptedChatModel {self.model!r} has no reply for request #{index} "
                    f"({request.fingerprint()}): its script holds {len(self._replies)} "
                    "replies; add more replies or script it with a function"
                )
        return self._as_response(reply, index)

    async def acomplete(self, request: ChatRequest) -> ChatResponse:
        """Same as :meth:`complete`; the script never blocks, so there is nothing to await."""
        return self.complete(request)

    def complete_streaming(
        self, request: ChatRequest, on_token: Callable[[str], None]
    ) -> ChatResponse:
        """:meth:`complete`, its content handed to ``on_token`` in word pieces first."""
        response = self.complete(request)
        for piece in word_pieces(response.message.content):
            on_token(piece)
        return response

    async def acomplete_streaming(
        self, request: ChatRequest, on_token: Callable[[str], None]
    ) -> ChatResponse:
        """Same as :meth:`complete_streaming`."""
        return self.complete_streaming(request, on_token)

    def _as_response(self, reply: ChatResponse | str, index: int) -> ChatResponse:
        if isinstance(reply, str):
            reply = ChatResponse(message=ChatMessage.assistant(reply), finish_reason="stop")
        updates: dict[str, str] = {}
        if not reply.model:
            updates["model"] = self.model
        if not reply.id:
            # Same id scheme as the scripted server, so the two fakes are interchangeable.
            updates["id"] = f"chatcmpl-{index:04d}"
        if not updates:
            return reply
        return reply.model_copy(update=updates)


def word_pieces(text: str | None) -> list[str]:
    """``text`` cut as a model streams it: words with their leading whitespace, so the pieces
    join back to ``text`` exactly.

    >>> word_pieces("Hi  there.")
    ['Hi', '  there.']
    """
    if not text:
        return []
    return re.findall(r"\s*\S+|\s+$", text)
