"""What a dispatched call gives back: ``ToolResult`` and, for refusals, ``ToolFailure``.

Every outcome is normalised to ``{status, summary, artifact_ref}`` plus the payload when
it is small. ``exposure`` and ``prompt_mask`` travel with the result so lane routing and
prompt building need no registry lookup.
"""

from __future__ import annotations

from typing import Any, Literal, TypeVar

import orjson
from pydantic import BaseModel, ConfigDict, Field, JsonValue

from stargraph._typed import TypedModel
from stargraph._unchecked import unchecked
from stargraph.errors import (
    LockTimeoutError,
    ToolArgumentError,
    ToolError,
    ToolNotAllowedError,
    ToolTimeoutError,
)

Exposure = Literal["edge", "core", "both", "none"]
"""The lanes that may see a tool's results (a spec declares it, a result carries it): defined
with the result, so that reading results does not import the tool specs."""

__all__ = [
    "FieldProblem",
    "ToolFailure",
    "ToolOutput",
    "ToolResult",
    "ToolStatus",
    "built",
    "failure_of",
]

_ModelT = TypeVar("_ModelT", bound=BaseModel)


def built(cls: type[_ModelT], values: dict[str, Any], given: set[str]) -> _ModelT:
    """``cls(**values)`` without validation, for the records the arbiter and the ReAct loop
    make on every tool call from values they validated or computed themselves: ``values``
    holds every field in declaration order, ``given`` names those set. Measured, validating
    them again cost a fake-model ReAct step about a sixth of its time.

    ``cls`` must be frozen: records may then share one ``given`` set (a frozen record never
    adds to it, and ``model_copy`` copies it first)."""
    return unchecked(cls, values, given)


ToolStatus = Literal["success", "error", "timeout", "denied", "invalid"]
"""``success``; ``error`` (the body raised); ``timeout``; ``denied`` (allowlist, policy, path,
lock timeout, no tool host); ``invalid`` (unknown tool or arguments failing the schema)."""

FailureCode = Literal[
    "unknown_tool",
    "invalid_arguments",
    "tool_not_allowed",
    "policy_denied",
    "path_escape",
    "lock_timeout",
    "tool_timeout",
    "tool_failed",
    "host_unavailable",
]


class FieldProblem(TypedModel):
    """One argument that failed validation: JSON-pointer-like ``field`` and the reason."""

    typed_error = ToolError

    model_config = ConfigDict(frozen=True)

    field: str = Field(description="Dotted path of the argument, e.g. 'path' or 'items.0'.")
    message: str = Field(description="Why the value was refused.")
    type: str = Field("", description="Machine-readable pydantic error type, e.g. 'int_type'.")


class ToolFailure(TypedModel):
    """Structured description of a refused or failed call, attached to the raised ToolError.

    The ReAct act node turns it into the tool message the model sees, so the model can retry
    with the right tool or arguments.
    """

    typed_error = ToolError

    model_config = ConfigDict(frozen=True)

    code: FailureCode = Field(description="Machine-readable reason.")
    tool: str = Field(description="The tool id (or the unknown name) the call asked for.")
    message: str = Field(description="Human-readable reason naming the culprit.")
    hint: str = Field("", description="What to do instead.")
    fields: tuple[FieldProblem, ...] = Field((), description="Failed arguments, if any.")
    details: dict[str, JsonValue] = Field(
        default_factory=dict, description="Code-specific extras (allowed tools, holders ...)."
    )


_STATUS_BY_CODE: dict[str, ToolStatus] = {
    "unknown_tool": "invalid",
    "invalid_arguments": "invalid",
    "tool_not_allowed": "denied",
    "policy_denied": "denied",
    "path_escape": "denied",
    "lock_timeout": "denied",
    "tool_timeout": "timeout",
    "tool_failed": "error",
    "host_unavailable": "denied",
}


def failure_of(exc: ToolError) -> ToolFailure:
    """The :class:`ToolFailure` the arbiter attached to ``exc`` (synthesised if absent)."""
    failure = exc.failure
    if isinstance(failure, ToolFailure):
        return failure
    code: FailureCode = "tool_failed"
    if isinstance(exc, ToolArgumentError):
        code = "invalid_arguments"
    elif isinstance(exc, ToolNotAllowedError):
        code = "tool_not_allowed"
    elif isinstance(exc, LockTimeoutError):
        code = "lock_timeout"
    elif isinstance(exc, ToolTimeoutError):
        code = "tool_timeout"
    return ToolFailure(code=code, tool="", message=str(exc))


class ToolOutput(TypedModel):
    """What a tool body may return to set its summary explicitly.

    A body may also return any JSON-able value (summary: its compact JSON, truncated) or
    ``None`` (summary ``"ok"``).
    """

    typed_error = ToolError

    model_config = ConfigDict(frozen=True)

    summary: str = Field(description="Short text the model sees even when prompt_mask is on.")
    payload: JsonValue = Field(None, description="The full result (stored by reference).")


class ToolResult(TypedModel):
    """The normalised outcome of one dispatched call."""

    typed_error = ToolError

    model_config = ConfigDict(frozen=True)

    tool: str = Field(description="Canonical tool id.")
    call_id: str | None = Field(None, description="The model's tool_call id, if any.")
    status: ToolStatus = Field(description="Outcome; see ToolStatus.")
    summary: str = Field(description="Short description of the outcome.")
    artifact_ref: str | None = Field(
        None, description="'sha256:<hex>' of the stored payload; fetch it from the store."
    )
    payload: JsonValue = Field(
        None, description="The payload inline when small; None when only stored by ref."
    )
    exposure: Exposure = Field("both", description="Lanes that may see this result.")
    prompt_mask: bool = Field(False, description="Prompt shows status/summary/ref only.")
    error: ToolFailure | None = Field(None, description="Why the call failed, if it did.")

    @classmethod
    def from_error(cls, exc: ToolError, *, call_id: str | None = None) -> ToolResult:
        """The result a model should see for a refused or failed call.

        Errors go back to the calling lane regardless of ``exposure``: the model must learn
        that its call failed to be able to correct it.
        """
        failure = failure_of(exc)
        return cls(
            tool=failure.tool,
            call_id=call_id,
            status=_STATUS_BY_CODE[failure.code],
            summary=failure.message,
            error=failure,
        )

    def journal_value(self) -> dict[str, Any]:
        """``model_dump(mode="json")``: what a journal records for this result."""
        dumped: dict[str, Any] = self.model_dump(mode="json")
        return dumped

    def visible_to(self, lane: str) -> bool:
        """Whether ``lane`` (``"edge"`` or ``"core"``) may see this result in a prompt."""
        if self.error is not None:
            return True
        return self.exposure in ("both", lane)

    def prompt_view(self) -> dict[str, Any]:
        """The dict a prompt may contain: status, summary, ref, and payload unless masked."""
        view: dict[str, Any] = {
            "status": self.status,
            "summary": self.summary,
            "artifact_ref": self.artifact_ref,
        }
        if self.error is not None:
            view["error"] = self.error.model_dump(mode="json", exclude_defaults=True)
        elif not self.prompt_mask and self.payload is not None:
            view["payload"] = self.payload
        return view

    def model_text(self, lane: str) -> str:
        """What a model reads of this result in its tool message: the tool's payload itself
        (text as it is, anything else as compact JSON; the summary when the payload is only
        stored by reference), or ``Error: ...`` with the reason and the fix.

        The envelope (status, summary, artifact ref) stays in the record, not in the prompt:
        small models copy such blobs into their replies. A result ``lane`` may not see, or a
        masked one, is the restricted JSON view of :meth:`to_tool_message`.

            >>> r = ToolResult(tool="t.x@1.0.0", status="success", summary="{}", payload={"a": 1})
            >>> r.model_text("core")
            '{"a":1}'
        """
        failure = self.error
        if failure is not None:
            message = failure.message
            hint = failure.hint
            return f"Error: {message}" + (f" (fix: {hint})" if hint and hint not in message else "")
        if not self.visible_to(lane) or self.prompt_mask:
            content: str = self.to_tool_message(lane)["content"]
            return content
        payload = self.payload
        if payload is None:
            return self.summary
        if isinstance(payload, str):
            return payload
        return orjson.dumps(payload).decode()

    def to_tool_message(self, lane: str) -> dict[str, Any]:
        """An OpenAI ``{"role": "tool", ...}`` message for ``lane``.

        A lane that may not see the result still gets a message (the API requires one per
        tool call) but it carries only the status and a note that the result is withheld.
        """
        if self.visible_to(lane):
            content = self.prompt_view()
        else:
            content = {"status": self.status, "note": f"result withheld from {lane} lane"}
        return {
            "role": "tool",
            "tool_call_id": self.call_id or "",
            "content": orjson.dumps(content).decode(),
        }
