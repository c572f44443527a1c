"""The base of every agent data model: frozen, no unknown keys, typed errors.

pydantic reports bad input as its own ``ValidationError``; agent data instead raises one
:class:`~stargraph.errors.AgentConfigError` listing every problem, each naming the field
(a JSON pointer) and the value given, however the model is built (constructor,
``model_validate`` or ``model_validate_json``).
"""

from __future__ import annotations

from typing import Any, Self

from pydantic import BaseModel, ConfigDict, ValidationError

from stargraph.errors import AgentConfigError, Problem, StargraphError

__all__ = ["AgentData", "config_error"]


def _show(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def config_error(exc: ValidationError, subject: str) -> AgentConfigError:
    """``exc`` as one :class:`AgentConfigError`; a typed error raised by a validator inside
    keeps its own problems."""
    problems: list[Problem] = []
    for err in exc.errors(include_url=False):
        cause = err.get("ctx", {}).get("error")
        where = "/" + "/".join(str(p) for p in err["loc"])
        if isinstance(cause, AgentConfigError):
            # A nested agent model validated itself (its own __init__): its pointers are
            # relative to where it sits in this one.
            prefix = where.rstrip("/")
            problems.extend(
                Problem((prefix + p.pointer).rstrip("/") or "/", p.message, p.hint)
                for p in cause.problems
            )
            continue
        message = err["msg"]
        if isinstance(cause, StargraphError):
            message = str(cause)
        problems.append(
            Problem(
                where,
                f"{message} (got {_show(err.get('input'))})",
                "correct the field (see the model's documentation)",
            )
        )
    return AgentConfigError(problems, subject=subject)


class AgentData(BaseModel):
    """Frozen agent data whose validation errors are :class:`AgentConfigError`."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    def __init__(self, **data: Any) -> None:
        try:
            super().__init__(**data)
        except ValidationError as exc:
            raise config_error(exc, _subject(type(self))) from None

    def __setattr__(self, name: str, value: Any) -> None:
        # Frozen: pydantic refuses with its own ValidationError; keep the one error tree.
        try:
            super().__setattr__(name, value)
        except ValidationError as exc:
            raise config_error(exc, _subject(type(self))) from None

    @classmethod
    def model_validate(cls, obj: Any, **options: Any) -> Self:
        """Validate ``obj``; :class:`AgentConfigError` naming every bad field."""
        try:
            return super().model_validate(obj, **options)
        except ValidationError as exc:
            raise config_error(exc, _subject(cls)) from None

    @classmethod
    def model_validate_json(cls, json_data: str | bytes | bytearray, **options: Any) -> Self:
        """Validate JSON text; :class:`AgentConfigError` naming every bad field."""
        try:
            return super().model_validate_json(json_data, **options)
        except ValidationError as exc:
            raise config_error(exc, _subject(cls)) from None


def _subject(cls: type[BaseModel]) -> str:
    return f"{cls.__name__} data"
