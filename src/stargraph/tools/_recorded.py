"""The arbiter bound to a task's journal: every tool call recorded live, served in replay.

Every call is recorded - not only write/external ones - because replay must reproduce a run
without running *any* tool body; refusals are recorded too (with their structured failure),
so a replayed agent sees the same rejections it saw live.

This module sits below the arbiter (``Arbiter.bind_journal`` imports it): it knows the arbiter
and its calls only through the two small protocols here.
"""

from __future__ import annotations

from typing import Any, Protocol

from stargraph import errors
from stargraph.errors import ToolError
from stargraph.runtime._protocols import Journal
from stargraph.tools._result import ToolFailure, ToolResult, failure_of

__all__ = ["JournaledArbiter", "tool_message_content"]


class _Call(Protocol):
    """What recording needs of a :class:`~stargraph.tools.ToolCall`."""

    @property
    def tool(self) -> str: ...

    @property
    def node(self) -> str | None: ...

    def model_dump(self, *, mode: str) -> dict[str, Any]: ...


class _Dispatcher(Protocol):
    """What recording needs of an :class:`~stargraph.tools.Arbiter`: its two dispatches."""

    def dispatch(self, call: Any, /) -> ToolResult: ...

    async def adispatch(self, call: Any, /) -> ToolResult: ...


KIND = "tool"
"""Journal kind of tool calls."""


def _request_of(call: _Call) -> Any:
    """What the journal records of ``call``: its JSON dump (a ``ToolCall`` makes it faster
    itself, with ``journal_request``)."""
    dump = getattr(call, "journal_request", None)
    return dump() if dump is not None else call.model_dump(mode="json")


def _outcome(result: ToolResult) -> dict[str, Any]:
    return {"result": result.journal_value()}


def _failure(exc: ToolError) -> dict[str, Any]:
    return {
        "error": type(exc).__name__,
        "message": str(exc),
        "failure": failure_of(exc).model_dump(mode="json"),
    }


def _unpack(value: Any, call: _Call) -> ToolResult:
    if "result" in value:
        return ToolResult.model_validate(value["result"])
    cls = getattr(errors, str(value.get("error")), None)
    if not (isinstance(cls, type) and issubclass(cls, ToolError)):
        cls = ToolError
    failure = ToolFailure.model_validate(value["failure"])
    raise cls(str(value.get("message", "")), node=call.node, failure=failure)


def tool_message_content(request: Any, value: Any) -> str | None:
    """The ``content`` of the ``tool`` message that answers a recorded tool call, as the
    ReAct loop words it (``ToolResult.model_text`` for the call's lane, a failure as
    ``ToolResult.from_error``), from the call's recorded ``request`` and ``value``; ``None``
    for a record that is not a tool call's.

    A stored model request refers to the tool call for such a message instead of repeating
    the result (see ``stargraph.checkpoint._compact``), so each result is stored once.
    """
    if not isinstance(request, dict) or not isinstance(value, dict):
        return None
    lane = request.get("lane")
    if not isinstance(lane, str):
        return None
    try:
        if "result" in value:
            result = ToolResult.model_validate(value["result"])
        else:
            failure = ToolFailure.model_validate(value["failure"])
            error = ToolError(str(value.get("message", "")), failure=failure)
            result = ToolResult.from_error(error)
    except (KeyError, ValueError, ToolError):  # ToolError: the stored result is malformed
        return None
    return result.model_text(lane)


class JournaledArbiter:
    """An :class:`Arbiter` whose dispatches go through one task's journal."""

    def __init__(self, arbiter: _Dispatcher, journal: Journal) -> None:
        self.arbiter = arbiter
        self.journal = journal

    def __getattr__(self, name: str) -> Any:
        # Everything else (registry, commit log ...) is the arbiter's own.
        return getattr(self.arbiter, name)

    def dispatch(self, call: _Call) -> ToolResult:
        """The recorded outcome of ``call``, or the arbiter's (then recorded)."""

        live: list[tuple[ToolResult, Any]] = []

        def compute() -> dict[str, Any]:
            try:
                result = self.arbiter.dispatch(call)
            except ToolError as exc:
                return _failure(exc)
            outcome = _outcome(result)
            live.append((result, outcome))
            return outcome

        value = self.journal.call(KIND, call.tool, compute, request=_request_of(call))
        # A result just made is returned as it is (frozen; the record holds its dump),
        # unless the journal masked a secret in it: the node gets what a replay will get.
        return live[0][0] if live and live[0][1] is value else _unpack(value, call)

    async def adispatch(self, call: _Call) -> ToolResult:
        """Async :meth:`dispatch`."""

        live: list[tuple[ToolResult, Any]] = []

        async def compute() -> dict[str, Any]:
            try:
                result = await self.arbiter.adispatch(call)
            except ToolError as exc:
                return _failure(exc)
            outcome = _outcome(result)
            live.append((result, outcome))
            return outcome

        value = await self.journal.acall(KIND, call.tool, compute, request=_request_of(call))
        return live[0][0] if live and live[0][1] is value else _unpack(value, call)
