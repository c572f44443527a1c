"""A conversation as state: messages with stable ids and the reducer that merges them.

:class:`Message` is a :class:`~stargraph.llm.ChatMessage` with an ``id``, so one is sent to
a chat model as it is (the id never reaches the wire, nor a request's fingerprint).
:data:`add_messages` is the reducer of a message list: a write appends its messages, a
message whose id is already in the list replaces that message in place, a
:class:`RemoveMessage` removes the message of its id, and
``RemoveMessage(id=REMOVE_ALL_MESSAGES)`` clears the list. :class:`MessagesState` is the
state base with that channel::

    class State(MessagesState):
        summary: str = ""

    def chat(state: State) -> dict[str, Any]:
        return {"messages": [Message.assistant("Hello!")]}

A message written without an id gets one derived from its content and from the id of the
message before it, so the same run gives the same ids in every process and in its replay
(no random ids), and two equal messages at different places in a conversation get
different ids. Because ids are stable, merging is idempotent: a subgraph that returns the
whole history it was given plus its own messages adds only its own.

Writes and inputs may give a message as a ``Message``, a ``ChatMessage``, an OpenAI-style
dict (``{"role": "user", "content": "hi"}``, tool calls in the wire form included), a
LangChain message object (when ``langchain_core`` is installed; never imported otherwise),
or a plain string (a user turn).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, cast

from pydantic import field_validator

from stargraph._typed import TypedModel
from stargraph.errors import InvalidInputError
from stargraph.llm._history import (
    REMOVE_ALL_MESSAGES,
    AnyMessage,
    Message,
    RemoveMessage,
    merge_messages,
)
from stargraph.reducers import add_messages

__all__ = [
    "Message",
    "MessagesState",
    "REMOVE_ALL_MESSAGES",
    "RemoveMessage",
    "add_messages",
]


class MessagesState(TypedModel):
    """A state whose ``messages`` channel is a conversation merged by :data:`add_messages`;
    subclass it to add channels. An input's messages get their ids at once (the same ones
    in every run of that input).

    >>> state = MessagesState.model_validate({"messages": ["hi", "hi"]})
    >>> [m.content for m in state.messages], len({m.id for m in state.messages})
    (['hi', 'hi'], 2)
    """

    typed_error = InvalidInputError

    if TYPE_CHECKING:
        # What a type checker sees: after the reducer the list holds messages only.
        messages: Annotated[list[Message], add_messages] = []
    else:
        # What pydantic (and the graph hash) sees: a write may hold removal markers.
        messages: Annotated[list[AnyMessage], add_messages] = []
    """The conversation, in order; it never holds a :class:`RemoveMessage` (a write may)."""

    @field_validator("messages", mode="after")
    @classmethod
    def _with_ids(cls, messages: list[AnyMessage]) -> list[Message]:
        if all(isinstance(m, Message) and m.id is not None for m in messages):
            return cast(list[Message], messages)
        return merge_messages((), messages)
