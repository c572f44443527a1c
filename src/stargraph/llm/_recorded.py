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
import threading
from collections import OrderedDict
from collections.abc import Callable, Sequence
from typing import Any, Final

import orjson

from stargraph.ir import canonical_json
from stargraph.llm._messages import ChatMessage, ChatRequest, ChatResponse, ToolCall, Usage
from stargraph.llm._protocol import ChatModel
from stargraph.runtime._protocols import Journal

__all__ = ["Journal", "JournaledChatModel", "TokenSink", "encode_request", "response_json"]

KIND = "llm"
"""Journal kind of chat-model calls."""

TokenSink = Callable[[str], None]
"""Takes each piece of a reply's content as the model produces it."""


_HEAD_FIELDS: Final = tuple(name for name in ChatRequest.model_fields if name != "messages")
"""The request's fields but its messages, which a conversation usually repeats as they were."""


class _Encoded:
    """One encoded request, kept so the next request of its conversation (the same messages,
    and more) is encoded from it: the messages' JSON and the hash state after them, and the
    other fields (as given, and as JSON with the bytes that close the hashed text)."""

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
        self.messages = messages  # held: the ids keying the cache stay theirs
        self.fields = fields
        self.head = head
        self.tail = tail
        self.dumped = dumped
        self.state = state


_RECENT: Final = 256
"""Conversations whose last request is kept (least recently used ones are dropped)."""

_recent: OrderedDict[int, _Encoded] = OrderedDict()
_recent_lock = threading.Lock()


def _field(key: str, value: Any) -> bytes:
    return canonical_json(key) + b":" + canonical_json(value)


def _starts_with(messages: Sequence[ChatMessage], prefix: Sequence[ChatMessage]) -> bool:
    """``messages[:len(prefix)] == prefix``: one comparison of two tuples in C, which takes
    each pair of elements by identity first (a conversation's messages are the same objects
    request after request), so the common case compares no message's fields."""
    return len(messages) >= len(prefix) and tuple(messages[: len(prefix)]) == tuple(prefix)


def _previous(messages: Sequence[ChatMessage], fields: tuple[Any, ...]) -> _Encoded | None:
    """The kept request whose messages start ``messages`` (ending a few messages back)."""
    with _recent_lock:
        for end in range(len(messages) - 1, max(len(messages) - 9, -1), -1):
            found = _recent.get(id(messages[end]))
            if (
                found is not None
                and len(found.messages) == end + 1
                and found.messages[end] is messages[end]
                and found.fields == fields
                and _starts_with(messages, found.messages)
            ):
                _recent.move_to_end(id(messages[end]))
                return found
    return None


def encode_request(request: ChatRequest) -> tuple[dict[str, Any], str]:
    """``request`` as recorded JSON (``model_dump(mode="json", exclude_defaults=True)``) and
    its fingerprint (``content_hash`` of that JSON), in time proportional to what is new
    since the previous request of the same conversation: its messages' JSON is reused and
    the hash continues from the state after them (RFC 8785 JSON is the fields in key order,
    so the messages' bytes are a run that a new message only extends).

    >>> from stargraph.ir import content_hash
    >>> first = ChatRequest(messages=(ChatMessage.user("hi"),), temperature=0.5)
    >>> body, fingerprint = encode_request(first)
    >>> fingerprint == content_hash(first.model_dump(mode="json", exclude_defaults=True))
    True
    """
    messages = request.messages
    # Compared as given (the offered tools are the same objects call after call), so the
    # fields are dumped and encoded only when they change, not at every call.
    fields = tuple(map(request.__dict__.__getitem__, _HEAD_FIELDS))
    previous = _previous(messages, fields) if messages else None
    if previous is None:
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
    else:
        head, tail = previous.head, previous.tail
        start, dumped, state = len(previous.messages), [*previous.dumped], previous.state.copy()
    for message in messages[start:]:
        data, encoded = _encoded_message(message)
        dumped.append(data)
        state.update(b"," + encoded if len(dumped) > 1 else encoded)
    if messages:
        with _recent_lock:
            _recent[id(messages[-1])] = _Encoded(
                messages, fields=fields, head=head, tail=tail, dumped=dumped, state=state.copy()
            )
            _recent.move_to_end(id(messages[-1]))
            while len(_recent) > _RECENT:
                _recent.popitem(last=False)
    state.update(tail)
    return {"messages": dumped, **head}, "sha256:" + state.hexdigest()


def _text(value: object) -> bool:
    return value is None or type(value) is str


def _message_json(message: ChatMessage) -> dict[str, Any] | None:
    """``message.model_dump(mode="json")`` of a message of text fields and plain tool calls
    (``None`` for any other)."""
    if type(message) is not ChatMessage:
        return None
    data = message.__dict__
    content, call_id, name = data["content"], data["tool_call_id"], data["name"]
    # _text() of each, inline: every new message of every request comes here.
    if not (
        type(data["role"]) is str
        and (content is None or type(content) is str)
        and (call_id is None or type(call_id) is str)
        and (name is None or type(name) is str)
    ):
        return None
    calls = []
    for call in data["tool_calls"]:
        fields = call.__dict__
        if not (
            type(call) is ToolCall
            and type(fields["id"]) is str
            and type(fields["name"]) is str
            and type(fields["arguments"]) is str
        ):
            return None
        calls.append({"id": fields["id"], "name": fields["name"], "arguments": fields["arguments"]})
    return {
        "role": data["role"],
        "content": content,
        "tool_calls": calls,
        "tool_call_id": call_id,
        "name": name,
    }


def _message_data(message: ChatMessage) -> dict[str, Any]:
    """``message.model_dump(mode="json", exclude_defaults=True)``, as a request records it,
    built from the plain dump (every request dumps the messages new since the last)."""
    whole = _message_json(message)
    if whole is None:
        dumped: dict[str, Any] = message.model_dump(mode="json", exclude_defaults=True)
        return dumped
    return _without_defaults(whole)


def _encoded_message(message: ChatMessage) -> tuple[dict[str, Any], bytes]:
    """``_message_data(message)`` and its ``canonical_json``. The data of a message of text
    fields holds only text, lists and dicts of ASCII keys, which ``canonical_json`` hands to
    orjson as they are: it goes there directly, without that function's walk over it."""
    whole = _message_json(message)
    if whole is None:
        data = _message_data(message)
        return data, canonical_json(data)
    data = _without_defaults(whole)
    return data, orjson.dumps(data, option=orjson.OPT_SORT_KEYS)


def _without_defaults(whole: dict[str, Any]) -> dict[str, Any]:
    """A message's plain dump (``_message_json``) without the fields left at their
    defaults."""
    data: dict[str, Any] = {"role": whole["role"]}
    if whole["content"] is not None:
        data["content"] = whole["content"]
    if whole["tool_calls"]:
        data["tool_calls"] = [
            call if call["arguments"] != "" else {"id": call["id"], "name": call["name"]}
            for call in whole["tool_calls"]
        ]
    if whole["tool_call_id"] is not None:
        data["tool_call_id"] = whole["tool_call_id"]
    if whole["name"] is not None:
        data["name"] = whole["name"]
    return data


def response_json(response: ChatResponse) -> dict[str, Any]:
    """``response.model_dump(mode="json")``, what a call's record holds, built directly for a
    response of text fields, plain counts and a plain message (any other is dumped)."""
    data = response.__dict__
    usage = data["usage"]
    counts = usage.__dict__
    message = _message_json(data["message"]) if type(response) is ChatResponse else None
    # The three counts by name, not a generator and a comprehension over their names: two
    # frames more at every model call.
    if (
        message is None
        or type(usage) is not Usage
        or type(prompt := counts["prompt_tokens"]) is not int
        or type(completion := counts["completion_tokens"]) is not int
        or type(total := counts["total_tokens"]) is not int
        or not (type(data["model"]) is str and type(data["id"]) is str)
        or not (_text(data["finish_reason"]) and _text(data["refusal"]))
    ):
        dumped: dict[str, Any] = response.model_dump(mode="json")
        return dumped
    return {
        "message": message,
        "finish_reason": data["finish_reason"],
        "usage": {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": total},
        "model": data["model"],
        "id": data["id"],
        "refusal": data["refusal"],
    }


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
            dumped = response_json(response)
            live.append((response, dumped))
            return dumped

        body, fingerprint = encode_request(request)
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
            dumped = response_json(response)
            live.append((response, dumped))
            return dumped

        body, fingerprint = encode_request(request)
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
