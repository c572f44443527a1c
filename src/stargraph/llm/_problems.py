"""Turning what a model got wrong into observations it can read, instead of crashes.

Models refuse, emit malformed JSON arguments, and call tools that do not exist. None of that
is an error of the *run*: the ReAct loop shows the model what was wrong (as the ``tool``
message answering the bad call, so the conversation stays valid for the API) and spends one
unit of its error budget. :func:`normalize_tool_calls` sorts a response into calls that can
be dispatched and problems that become observations. Argument *schema* validation is not done
here: that belongs to the tools pipeline, which raises ``ToolArgumentError`` before any lock
is taken.
"""

from __future__ import annotations

from collections.abc import Collection
from typing import Any, Literal

import orjson
from pydantic import ConfigDict

from stargraph._typed import TypedModel
from stargraph.errors import ChatDataError
from stargraph.llm._messages import ChatMessage, ChatResponse, ToolCall

__all__ = ["NormalizedToolCalls", "ParsedToolCall", "ProblemKind", "ToolCallProblem"]

ProblemKind = Literal["refusal", "unknown_tool", "invalid_json", "arguments_not_object"]
"""What a :class:`ToolCallProblem` is about."""

_FROZEN = ConfigDict(frozen=True, extra="forbid")
# A model that emits a megabyte of garbage must not get it all echoed back into its context.
_ECHO_LIMIT = 200


class ParsedToolCall(TypedModel):
    """A tool call that names a known tool and carries a JSON object of arguments."""

    typed_error = ChatDataError

    model_config = _FROZEN

    id: str
    """The call id, to be echoed as ``tool_call_id`` in the tool's answer."""
    name: str
    """A tool among the ``known_tools`` given to :func:`normalize_tool_calls`."""
    arguments: dict[str, Any]
    """The parsed arguments (not yet validated against the tool's schema)."""


class ToolCallProblem(TypedModel):
    """Something the model got wrong, with the text that tells it how to do better."""

    typed_error = ChatDataError

    model_config = _FROZEN

    kind: ProblemKind
    """``refusal``, ``unknown_tool``, ``invalid_json`` or ``arguments_not_object``."""
    tool_call_id: str | None
    """The offending call's id; ``None`` for a refusal, which belongs to no call."""
    tool_name: str | None
    """The name the model used, if the problem is about a call."""
    message: str
    """What was wrong and what to do instead, addressed to the model."""

    def observation(self) -> ChatMessage:
        """The message to append to the conversation.

        A bad call is answered by a ``tool`` message with its id (the API requires an answer
        to every call id); a refusal, which answers no call, becomes a ``user`` message.
        """
        if self.tool_call_id is None:
            return ChatMessage.user(self.message)
        return ChatMessage.tool(self.tool_call_id, self.message, name=self.tool_name)


class NormalizedToolCalls(TypedModel):
    """A response sorted into dispatchable calls and problems, both in the model's order."""

    typed_error = ChatDataError

    model_config = _FROZEN

    calls: tuple[ParsedToolCall, ...] = ()
    """Calls the tools pipeline may dispatch."""
    problems: tuple[ToolCallProblem, ...] = ()
    """Everything that must go back to the model as an observation instead."""

    @property
    def observations(self) -> tuple[ChatMessage, ...]:
        """One observation message per problem."""
        return tuple(problem.observation() for problem in self.problems)

    @property
    def ok(self) -> bool:
        """True when there is nothing to report back to the model."""
        return not self.problems


def normalize_tool_calls(
    response: ChatResponse, known_tools: Collection[str]
) -> NormalizedToolCalls:
    """Sort ``response``'s tool calls into :class:`ParsedToolCall` s and problems.

    ``known_tools`` are the names the model was offered (the allowlist). Empty arguments
    (``""``) count as ``{}``, since several endpoints send that for parameterless tools.

        >>> from stargraph.llm import ChatResponse, ChatMessage, ToolCall
        >>> reply = ChatResponse(message=ChatMessage.assistant(tool_calls=[
        ...     ToolCall(id="call_1", name="calc", arguments='{"x": 1}'),
        ...     ToolCall(id="call_2", name="rm_rf", arguments="{}")]))
        >>> result = normalize_tool_calls(reply, {"calc"})
        >>> [c.arguments for c in result.calls], [p.kind for p in result.problems]
        ([{'x': 1}], ['unknown_tool'])
    """
    calls: list[ParsedToolCall] = []
    problems: list[ToolCallProblem] = []
    refusal = response.refusal
    if refusal:
        problems.append(
            ToolCallProblem(
                kind="refusal",
                tool_call_id=None,
                tool_name=None,
                message=(
                    f"You refused to continue: {_echo(refusal)}. If the task can be done "
                    "safely, continue by calling a tool or giving your final answer; "
                    "otherwise give a final answer that explains why it cannot be done."
                ),
            )
        )
    offered = ", ".join(repr(name) for name in sorted(known_tools)) or "(none)"
    for call in response.message.tool_calls:
        parsed = _parse_call(call, known_tools, offered)
        if isinstance(parsed, ParsedToolCall):
            calls.append(parsed)
        else:
            problems.append(parsed)
    return NormalizedToolCalls(calls=tuple(calls), problems=tuple(problems))


def _parse_call(
    call: ToolCall, known_tools: Collection[str], offered: str
) -> ParsedToolCall | ToolCallProblem:
    """``call`` with its arguments parsed, or the one problem that stops it from running."""
    if call.name not in known_tools:
        return _problem(
            call,
            "unknown_tool",
            f"There is no tool named {call.name!r}; this call was not run. "
            f"The tools you can call are: {offered}.",
        )
    try:
        parsed = orjson.loads(call.arguments.strip() or "{}")
    except orjson.JSONDecodeError as exc:
        return _problem(
            call,
            "invalid_json",
            f"The arguments of your call to {call.name!r} are not valid JSON "
            f"({exc}); this call was not run. You sent: {_echo(call.arguments)}. "
            "Call the tool again with a JSON object that matches its parameters.",
        )
    if not isinstance(parsed, dict):
        return _problem(
            call,
            "arguments_not_object",
            f"The arguments of your call to {call.name!r} must be a JSON object, "
            f"not a {_json_type(parsed)}; this call was not run. You sent: "
            f"{_echo(call.arguments)}. Call the tool again with an object such "
            'as {"name": value}.',
        )
    return ParsedToolCall(id=call.id, name=call.name, arguments=parsed)


def _problem(call: ToolCall, kind: ProblemKind, message: str) -> ToolCallProblem:
    return ToolCallProblem(kind=kind, tool_call_id=call.id, tool_name=call.name, message=message)


def _echo(text: str) -> str:
    if len(text) > _ECHO_LIMIT:
        text = text[:_ECHO_LIMIT] + f"... ({len(text)} characters in all)"
    return repr(text)


def _json_type(value: object) -> str:
    if isinstance(value, list):
        return "JSON array"
    if isinstance(value, str):
        return "JSON string"
    if isinstance(value, bool):
        return "JSON boolean"
    if value is None:
        return "JSON null"
    return "JSON number"
