"""A tool's ``Command`` as the JSON its result carries, and back.

A tool may return ``Command(update=..., goto=..., graph=Command.PARENT)`` (LangGraph's
ToolNode lets a tool return one): the arbiter stores it as the result's payload under
:data:`COMMAND_KEY`, so it is journaled, committed and replayed like any return value,
and the node that dispatched the call (the prebuilt agent's ``act``) applies it. Messages
in the update are stored as messages (a LangChain message or a dict becomes a ``Message``
with its fields), so what is replayed is what was checked.
"""

from __future__ import annotations

from typing import Any, Final

from pydantic_core import to_jsonable_python

from stargraph.llm._history import _as_message

__all__ = ["COMMAND_KEY", "command_of", "command_payload", "is_command"]

COMMAND_KEY: Final = "__stargraph_command__"
"""The one key of a result payload that holds a tool's ``Command``."""


def is_command(value: object) -> bool:
    """Whether ``value`` is a :class:`stargraph.Command` (told by its class's marker: the
    tools layer sits above the runtime and does not import it)."""
    return getattr(type(value), "__stargraph_command__", False) is True


def command_payload(command: Any) -> tuple[str, dict[str, Any]]:
    """The (summary, payload) of a result whose tool returned ``command``."""
    update = dict(command.update or {})
    if "messages" in update:
        given = update["messages"]
        items = given if isinstance(given, list | tuple) else [given]
        update["messages"] = [_as_message(m).model_dump(mode="json") for m in items]
    goto = command.goto
    # A goto is a node id, a Send (node and payload), or a list of them.
    items = list(goto) if isinstance(goto, list | tuple) else [goto] if goto else []
    targets = [
        t
        if isinstance(t, str)
        else {"node": t.node, "payload": to_jsonable_python(dict(t.payload))}
        for t in items
    ]
    stored = {
        "update": to_jsonable_python(update),
        "goto": targets,
        "graph": None if command.graph is None else str(command.graph),
    }
    summary = f"Command(update={sorted(update)}, goto={targets})"
    return summary, {COMMAND_KEY: stored}


def command_of(payload: Any) -> dict[str, Any] | None:
    """The stored command of a result payload (``update``, ``goto``, ``graph``), or
    ``None`` when the tool returned something else."""
    if type(payload) is dict and len(payload) == 1 and COMMAND_KEY in payload:
        stored: dict[str, Any] = payload[COMMAND_KEY]
        return stored
    return None
