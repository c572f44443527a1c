"""Messages with ids and how a list of them merges a write (the ``add_messages`` reducer).

The public names are in :mod:`stargraph.messages`; they live here, below the reducers, so that
``stargraph.reducers`` can merge messages without importing the module that declares
``MessagesState`` with its reducer.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Final, Literal, cast

import orjson
from pydantic import BaseModel, ConfigDict, model_validator

from stargraph._unchecked import unchecked
from stargraph.errors import ChatDataError, InvalidWriteError, Problem
from stargraph.llm._messages import ChatMessage, ToolCall, _ChatData

if TYPE_CHECKING:
    from langchain_core.messages import BaseMessage

__all__ = ["REMOVE_ALL_MESSAGES", "AnyMessage", "Message", "RemoveMessage", "merge_messages"]

REMOVE_ALL_MESSAGES: Final = "__remove_all__"
"""The id of the :class:`RemoveMessage` that clears the whole list."""

_FROZEN: Final = ConfigDict(frozen=True, extra="forbid")
_CHAT_FIELDS: Final = tuple(ChatMessage.model_fields)
_LANGCHAIN_ROLES: Final = {"human": "user", "ai": "assistant", "system": "system", "tool": "tool"}


def _text(content: Any) -> str | None:
    """Text of message content given as a string or as a list of content parts."""
    if content is None or isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = [
            part if isinstance(part, str) else str(part.get("text", ""))
            for part in content
            if isinstance(part, str) or (isinstance(part, Mapping) and part.get("type") == "text")
        ]
        return "".join(parts)
    return str(content)


def _wire_call(call: Any) -> Any:
    """A tool call given in the OpenAI wire form (``{"id", "function": {...}}``), flattened."""
    if isinstance(call, Mapping) and isinstance(call.get("function"), Mapping):
        function = call["function"]
        return {
            "id": call.get("id") or "",
            "name": function.get("name") or "",
            "arguments": function.get("arguments") or "",
        }
    return call


def _is_langchain(value: Any) -> bool:
    # By module name, so that nothing here imports langchain_core to find out.
    return type(value).__module__.startswith("langchain_core.")


class Message(ChatMessage):
    """A chat message with an id: what a :class:`MessagesState` conversation holds.

    >>> Message.user("2+2?").to_openai()
    {'role': 'user', 'content': '2+2?'}
    >>> Message.model_validate({"role": "user", "content": "hi", "id": "m1"}).id
    'm1'
    """

    model_config = _FROZEN

    id: str | None = None
    """The message's id; :data:`add_messages` gives one to a message written without."""

    @model_validator(mode="before")
    @classmethod
    def _coerce(cls, data: Any) -> Any:
        # Everything a user may hand over as a message becomes the fields of one.
        if isinstance(data, str):
            return {"role": "user", "content": data}
        if isinstance(data, ChatMessage) and not isinstance(data, Message):
            return {name: getattr(data, name) for name in _CHAT_FIELDS}
        if _is_langchain(data):
            return _langchain_fields(data)
        if isinstance(data, Mapping):
            calls = data.get("tool_calls")
            content = data.get("content")
            # Only well-formed shapes are converted; anything else goes to the field
            # validators, which name the field in a typed error.
            calls_ok = isinstance(calls, (list, tuple)) and all(
                isinstance(call, Mapping) for call in calls
            )
            if calls_ok or (content is not None and not isinstance(content, str)):
                data = dict(data)
                if calls and calls_ok:
                    data["tool_calls"] = [_wire_call(call) for call in calls]
                data["content"] = _text(content)
        return data

    @classmethod
    def system(cls, content: str, *, id: str | None = None) -> Message:
        """A system prompt (with id ``id``, or one the reducer derives)."""
        return cls(role="system", content=content, id=id)

    @classmethod
    def user(cls, content: str, *, id: str | None = None) -> Message:
        """A user turn."""
        return cls(role="user", content=content, id=id)

    @classmethod
    def assistant(
        cls,
        content: str | None = None,
        tool_calls: tuple[ToolCall, ...] | list[ToolCall] = (),
        *,
        id: str | None = None,
    ) -> Message:
        """An assistant turn: text, tool calls, or both."""
        return cls(role="assistant", content=content, tool_calls=tuple(tool_calls), id=id)

    @classmethod
    def tool(
        cls, tool_call_id: str, content: str, *, name: str | None = None, id: str | None = None
    ) -> Message:
        """A tool result answering ``tool_call_id``."""
        if (
            cls is Message
            and type(content) is str
            and type(tool_call_id) is str
            and (name is None or type(name) is str)
            and (id is None or type(id) is str)
        ):
            # Text fields of text validate to themselves (an agent answers every tool call
            # with one): the message without the validation.
            values: dict[str, Any] = {"role": "tool", "content": content, "tool_calls": ()}
            values.update(tool_call_id=tool_call_id, name=name, id=id)
            fields = {"role", "content", "tool_call_id"}
            fields.update(k for k in ("name", "id") if values[k] is not None)
            return unchecked(Message, values, fields)
        return cls(role="tool", content=content, tool_call_id=tool_call_id, name=name, id=id)

    @classmethod
    def from_openai(cls, message: Mapping[str, Any]) -> Message:
        """From an OpenAI-style message dict (tool calls in the wire form, content as text
        or as a list of text parts); an ``id`` key, if any, is kept."""
        return cls.model_validate(message)

    @classmethod
    def from_chat(cls, message: ChatMessage, *, id: str | None = None) -> Message:
        """The :class:`~stargraph.llm.ChatMessage` ``message`` with id ``id``."""
        values = {name: getattr(message, name) for name in _CHAT_FIELDS}
        values["id"] = id if id is not None else getattr(message, "id", None)
        if cls is Message and type(message) in (ChatMessage, Message):
            # A validated message's values validate to themselves (every model reply of an
            # agent comes this way): the message without validating them again.
            fields = set(message.model_fields_set)
            if values["id"] is not None:
                fields.add("id")
            return unchecked(Message, values, fields)
        return cls(**values)

    def as_chat(self) -> ChatMessage:
        """This message as a plain :class:`~stargraph.llm.ChatMessage` (without the id)."""
        return ChatMessage(**{name: getattr(self, name) for name in _CHAT_FIELDS})

    @classmethod
    def from_langchain(cls, message: BaseMessage) -> Message:
        """From a LangChain message (``HumanMessage``, ``AIMessage`` with its tool calls,
        ``SystemMessage``, ``ToolMessage``); needs ``langchain_core``."""
        return cls(**_langchain_fields(message))

    def to_langchain(self) -> BaseMessage:
        """This message as the LangChain message of its role, id included; needs
        ``langchain_core`` (``pip install langchain-core``)."""
        messages = _langchain_messages()
        content = self.content or ""
        made: BaseMessage
        if self.role == "user":
            made = messages.HumanMessage(content=content, id=self.id, name=self.name)
            return made
        if self.role == "system":
            made = messages.SystemMessage(content=content, id=self.id, name=self.name)
            return made
        if self.role == "tool":
            made = messages.ToolMessage(
                content=content, tool_call_id=self.tool_call_id or "", id=self.id, name=self.name
            )
            return made
        calls: list[dict[str, Any]] = []
        invalid: list[dict[str, Any]] = []
        for call in self.tool_calls:
            try:
                args = orjson.loads(call.arguments or "{}")
            except orjson.JSONDecodeError as exc:
                args = exc
            if isinstance(args, dict):
                calls.append({"name": call.name, "args": args, "id": call.id})
            else:
                error = "arguments are not a JSON object"
                invalid.append(
                    {"name": call.name, "args": call.arguments, "id": call.id, "error": error}
                )
        made = messages.AIMessage(
            content=content, tool_calls=calls, invalid_tool_calls=invalid, id=self.id
        )
        return made


def _dumps(value: Any) -> str:
    return orjson.dumps(value).decode()


def _langchain_messages() -> Any:
    try:
        from langchain_core import messages
    except ImportError as exc:
        raise ChatDataError(
            [Problem("", "langchain_core is not installed", "pip install langchain-core")],
            subject="LangChain message conversion",
        ) from exc
    return messages


def _langchain_fields(message: Any) -> dict[str, Any]:
    """The :class:`Message` fields of a LangChain message object."""
    kind = getattr(message, "type", None)
    role = _LANGCHAIN_ROLES.get(kind) if isinstance(kind, str) else None
    if role is None:
        raise ChatDataError(
            [
                Problem(
                    "type",
                    f"a LangChain message of type {kind!r} has no chat role",
                    f"convert one of {sorted(_LANGCHAIN_ROLES)}",
                )
            ],
            subject=f"LangChain {type(message).__name__}",
        )
    fields: dict[str, Any] = {
        "role": role,
        "content": _text(message.content),
        "id": getattr(message, "id", None),
    }
    name = getattr(message, "name", None)
    if name is not None:
        fields["name"] = name
    if role == "tool":
        fields["tool_call_id"] = message.tool_call_id
    if role == "assistant":
        calls = [
            ToolCall(
                id=c.get("id") or "", name=c["name"], arguments=orjson.dumps(c["args"]).decode()
            )
            for c in getattr(message, "tool_calls", ())
        ]
        calls += [
            ToolCall(id=c.get("id") or "", name=c.get("name") or "", arguments=c.get("args") or "")
            for c in getattr(message, "invalid_tool_calls", ())
        ]
        fields["tool_calls"] = tuple(calls)
        if not fields["content"] and calls:
            fields["content"] = None
    return fields


class RemoveMessage(_ChatData):
    """A marker written to a message list: remove the message with id ``id``
    (:data:`REMOVE_ALL_MESSAGES`: every message). It never stays in the list.

    >>> history = [Message(role="user", content=x, id=x) for x in "ab"]
    >>> [m.id for m in merge_messages(history, [RemoveMessage(id="b")])]
    ['a']
    """

    model_config = _FROZEN

    kind: Literal["remove"] = "remove"
    """Tells a stored marker from a message."""
    id: str
    """The id of the message to remove, or :data:`REMOVE_ALL_MESSAGES`."""

    @model_validator(mode="before")
    @classmethod
    def _coerce(cls, data: Any) -> Any:
        if _is_langchain(data) and getattr(data, "type", None) == "remove":
            return {"id": data.id}
        return data


def _derived_id(previous: str | None, position: int, message: Message) -> str:
    """``msg-<hex>``: a hash of the message and of where it lands (the id before it, its
    index), so a replay, or another process, derives the same id."""
    # A JSON array of text fields: one spelling in every process, no key order to settle.
    calls = [[call.id, call.name, call.arguments] for call in message.tool_calls]
    fields = (message.role, message.content, calls, message.tool_call_id, message.name)
    canonical = orjson.dumps([previous, position, *fields])
    return "msg-" + hashlib.sha256(canonical).hexdigest()[:24]


def _with_id(message: Message, id: str) -> Message:
    """``message`` with id ``id``; a plain message's validated values are kept as they are."""
    if type(message) is not Message:
        return message.model_copy(update={"id": id})
    # A Message's __dict__ is its fields (extra="forbid": nothing else).
    values = {**message.__dict__, "id": id}
    return unchecked(Message, values, {*message.model_fields_set, "id"})


def _as_message(item: Any) -> Message | RemoveMessage:
    if isinstance(item, Message | RemoveMessage):
        return item
    if isinstance(item, Mapping) and item.get("kind") == "remove":
        return RemoveMessage.model_validate(item)
    if _is_langchain(item) and getattr(item, "type", None) == "remove":
        return RemoveMessage.model_validate(item)
    return Message.model_validate(item)


def _merged_list(current: Sequence[Any]) -> tuple[list[Message], dict[str, int]] | None:
    """``current`` as a list with its id index, when it is a merged list already (plain
    messages, each with an id of its own): the state's value at every write. ``None``
    otherwise."""
    at = {m.id: i for i, m in enumerate(current) if type(m) is Message}
    if len(at) != len(current) or None in at:
        return None
    return list(current), cast(dict[str, int], at)


def merge_messages(current: Iterable[Any], update: Iterable[Any] | Any) -> list[Message]:
    """What the ``add_messages`` reducer computes (see :mod:`stargraph.messages`): ``current``
    with ``update`` merged in, as a new list."""
    if isinstance(update, str | Mapping | BaseModel) or _is_langchain(update):
        update = [update]
    given = current if isinstance(current, list | tuple) else list(current)
    ready = _merged_list(given)
    if ready is not None:
        # The common write: the state's list as it is, then the update's items.
        merged, at = ready
        items: list[tuple[int, Any]] = [(1, m) for m in update]
    else:
        merged, at = [], {}
        items = [*((0, m) for m in given), *((1, m) for m in update)]
    removed: set[int] = set()
    previous = merged[-1].id if merged else None
    for source, item in items:
        message = _as_message(item)
        if isinstance(message, RemoveMessage):
            if message.id == REMOVE_ALL_MESSAGES:
                merged, at, removed, previous = [], {}, set(), None
                continue
            index = at.get(message.id)
            if index is None or index in removed:
                known = [m.id for i, m in enumerate(merged) if i not in removed]
                raise InvalidWriteError(
                    f"RemoveMessage(id={message.id!r}) names no message of the list "
                    f"(ids: {known[:10]}{' ...' if len(known) > 10 else ''}); remove an id "
                    "that is in the list, or RemoveMessage(id=REMOVE_ALL_MESSAGES) to clear it"
                    + (" (the marker was in the current value)" if source == 0 else "")
                )
            removed.add(index)
            continue
        if message.id is None:
            message = _with_id(message, _derived_id(previous, len(merged), message))
        key = cast(str, message.id)
        index = at.get(key)
        if index is not None:
            # The same id again: that message, changed (or not), where it was.
            merged[index] = message
            removed.discard(index)
            continue
        at[key] = len(merged)
        merged.append(message)
        previous = key
    if removed:
        return [m for i, m in enumerate(merged) if i not in removed]
    return merged


AnyMessage = Message | RemoveMessage
"""What a message list channel takes in a write: messages and removal markers."""
