"""Reducers: how a channel combines its current value with a node's write.

Declare one on a state field with ``Annotated``::

    class State(BaseModel):
        items: Annotated[list[str], reducers.append] = []

Writes from nodes that ran in the same step are applied in a fixed order (node id, then send
index), so parallel branches merge identically in every run. A channel without a reducer takes
a single write per step; two writes in one step are an error, never last-writer-wins.

A custom reducer is any module-level function ``(current, update) -> new`` used the same way;
it is referenced in the IR by its import path.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

__all__ = ["BUILTIN_REDUCERS", "Reducer", "add", "add_messages", "append", "merge", "replace"]


@dataclass(frozen=True, slots=True)
class Reducer:
    """A named reducer. ``id`` is what the IR records, so it must stay stable."""

    id: str
    fn: Callable[[Any, Any], Any]
    doc: str = ""

    def __call__(self, current: Any, update: Any) -> Any:
        """Combine ``current`` with ``update``."""
        return self.fn(current, update)


def _append(current: Sequence[Any], update: Sequence[Any]) -> Any:
    # Build a new list: earlier states (and checkpoints of them) must never change.
    return [*current, *update]


def _add(current: Any, update: Any) -> Any:
    return current + update


def _merge(current: Mapping[Any, Any], update: Mapping[Any, Any]) -> dict[Any, Any]:
    return {**current, **update}


def _replace(current: Any, update: Any) -> Any:
    return update


append: Final = Reducer("append", _append, "list concatenation: current + update")
"""``current + update`` for lists: each write appends its items."""

add: Final = Reducer("add", _add, "numeric sum")
"""``current + update`` for numbers: each write adds to the total."""

merge: Final = Reducer("merge", _merge, "dict merge, update wins per key")
"""``{**current, **update}``: each write sets some keys."""

replace: Final = Reducer("replace", _replace, "take the write (several per step: last by node id)")
"""Take the write; several writes in one step apply in node-id order, the last one stays."""


@functools.cache
def _merger() -> Callable[[Any, Any], Any]:
    # Imported at the first merge (this module stays free of the chat data it merges) and
    # kept: an import statement in _add_messages cost every write to a conversation µs.
    from stargraph.llm._history import merge_messages

    return merge_messages


def _add_messages(current: Sequence[Any], update: Any) -> Any:
    return _merger()(current, update)


add_messages: Final = Reducer(
    "add_messages", _add_messages, "message list: append, replace by id, remove by id"
)
"""A conversation's reducer (see :mod:`stargraph.messages`): a write appends its messages,
one whose id is in the list replaces that message in place, a ``RemoveMessage`` removes one
(or, with ``REMOVE_ALL_MESSAGES``, all); messages without an id get a derived one."""

BUILTIN_REDUCERS: Final[Mapping[str, Reducer]] = {
    r.id: r for r in (append, add, merge, replace, add_messages)
}
"""The built-in reducers by IR id."""
