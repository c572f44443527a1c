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

import hashlib
import operator
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, Final

from stargraph.ir import canonical_json
from stargraph.llm._messages import ChatMessage, ChatRequest, ChatResponse
from stargraph.llm._protocol import ChatModel
from stargraph.runtime._protocols import Journal

if TYPE_CHECKING:
    from stargraph.runtime._context import Conversation

__all__ = ["Journal", "JournaledChatModel", "TokenSink", "encode_request"]

KIND = "llm"
"""Journal kind of chat-model calls."""

TokenSink = Callable[[str], None]
"""Takes each piece of a reply's content as the model produces it."""


_HEAD_FIELDS: Final = operator.attrgetter(
    *(name for name in ChatRequest.model_fields if name != "messages")
)
"""The request's fields but its messages, which a conversation usually repeats as they were."""


class _Encoded:
    """One encoded request, kept so the next request of its conversation (the same messages,
    and more) is encoded from it: the messages' JSON and the hash state after them, and the
    other fields (as given, and as JSON with the bytes that close the hashed text). Never
    changed once made: the next request copies what it extends."""

    __slots__ = ("dumped", "fields", "head", "messages", "state", "tail")

    def __init__(
        self,
        messages: Sequence[ChatMessage],
        *,
        fields: tuple[Any, ...],
        head: dict[str, Any],
        tail: bytes,
        dumped: list[Any],
        state: Any,
    ) -> None:
        self.messages = messages
        self.fields = fields
        self.head = head
        self.tail = tail
        self.dumped = dumped
        self.state = state


def _field(key: str, value: Any) -> bytes:
    return canonical_json(key) + b":" + canonical_json(value)


def _continues(messages: Sequence[ChatMessage], fields: tuple[Any, ...], kept: Any) -> bool:
    """Whether ``kept`` (a conversation's last encoded request) is ``messages``' start with
    the same other fields: two tuple comparisons in C, which take each pair of elements by
    identity first (a conversation's messages and offered tools are the same objects request
    after request), so the common case compares no message's fields."""
    return (
        type(kept) is _Encoded
        and len(messages) >= len(kept.messages)
        and kept.fields == fields
        and tuple(messages[: len(kept.messages)]) == tuple(kept.messages)
    )


def encode_request(
    request: ChatRequest, conversation: Conversation | None = None
) -> tuple[dict[str, Any], str]:
    """``request`` as recorded JSON (``model_dump(mode="json", exclude_defaults=True)``) and
    its fingerprint (``content_hash`` of that JSON). Given the ``conversation`` it belongs to,
    in time proportional to what is new since that conversation's previous request: its
    messages' JSON is reused and the hash continues from the state after them (RFC 8785 JSON
    is the fields in key order, so the messages' bytes are a run that a new message only
    extends).

    >>> from stargraph.ir import content_hash
    >>> first = ChatRequest(messages=(ChatMessage.user("hi"),), temperature=0.5)
    >>> body, fingerprint = encode_request(first)
    >>> fingerprint == content_hash(first.model_dump(mode="json", exclude_defaults=True))
    True
    """
    messages = request.messages
    # Compared as given, so the fields are dumped and encoded only when they change.
    fields = _HEAD_FIELDS(request)
    kept = None if conversation is None else conversation.request
    if kept is not None and _continues(messages, fields, kept):
        head, tail = kept.head, kept.tail
        start, dumped, state = len(kept.messages), [*kept.dumped], kept.state.copy()
    else:
        head = request.model_dump(mode="json", exclude_defaults=True, exclude={"messages"})
        tail = (
            b"]" + b"".join(b"," + _field(k, head[k]) for k in sorted(head) if k > "messages")
        ) + b"}"
        start, dumped = 0, []
        state = hashlib.sha256(
            b"{"
            + b"".join(_field(k, head[k]) + b"," for k in sorted(head) if k < "messages")
            + b'"messages":['
        )
    for message in messages[start:]:
        data = message.model_dump(mode="json", exclude_defaults=True)
        dumped.append(data)
        encoded = canonical_json(data)
        state.update(b"," + encoded if len(dumped) > 1 else encoded)
    if conversation is not None:
        conversation.request = _Encoded(
            messages, fields=fields, head=head, tail=tail, dumped=dumped, state=state.copy()
        )
    state.update(tail)
    return {"messages": dumped, **head}, "sha256:" + state.hexdigest()


class JournaledChatModel:
    """A chat model bound to one task's journal (see the module docstring)."""

    def __init__(self, model: ChatModel, journal: Journal) -> None:
        self.model = model
        self.journal = journal

    def complete(self, request: ChatRequest) -> ChatResponse:
        """The recorded response to ``request``, or the model's (then recorded); streamed
        when the journal carries ``tokens``."""
        tokens: TokenSink | None = getattr(self.journal, "tokens", None)
        live: list[tuple[ChatResponse, Any]] = []

        def compute() -> Any:
            if tokens is None:
                response = self.model.complete(request)
            else:
                response = _streamed(self.model, request, tokens)
            dumped = response.model_dump(mode="json")
            live.append((response, dumped))
            return dumped

        body, fingerprint = encode_request(request, getattr(self.journal, "conversation", None))
        value = self.journal.call(
            KIND,
            "chat",
            compute,
            request=body,
            fingerprint=fingerprint,
        )
        # A reply just made is returned as it is (frozen, and what was recorded is its
        # dump): rebuilding it from the dump would only repeat its validation. Unless the
        # journal masked a secret in it: the node gets what a replay will get.
        return live[0][0] if live and live[0][1] is value else ChatResponse.model_validate(value)

    async def acomplete(self, request: ChatRequest) -> ChatResponse:
        """Async :meth:`complete`."""
        tokens: TokenSink | None = getattr(self.journal, "tokens", None)
        live: list[tuple[ChatResponse, Any]] = []

        async def compute() -> Any:
            if tokens is None:
                response = await self.model.acomplete(request)
            else:
                response = await _astreamed(self.model, request, tokens)
            dumped = response.model_dump(mode="json")
            live.append((response, dumped))
            return dumped

        body, fingerprint = encode_request(request, getattr(self.journal, "conversation", None))
        value = await self.journal.acall(
            KIND, "chat", compute, request=body, fingerprint=fingerprint
        )
        return live[0][0] if live and live[0][1] is value else ChatResponse.model_validate(value)


def _streamed(model: ChatModel, request: ChatRequest, tokens: TokenSink) -> ChatResponse:
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


async def _astreamed(model: ChatModel, request: ChatRequest, tokens: TokenSink) -> ChatResponse:
    """Async :func:`_streamed`."""
    stream = getattr(model, "acomplete_streaming", None)
    if stream is not None:
        response: ChatResponse = await stream(request, tokens)
        return response
    response = await model.acomplete(request)
    if response.message.content:
        tokens(response.message.content)
    return response
