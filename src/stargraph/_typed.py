"""The base of public pydantic models whose validation errors are stargraph errors.

pydantic reports bad input with its own ``ValidationError``, which is not in the one
exception tree. A model that users build (a graph's IR, a SkillSpec, a prompt level, a tool
output) derives from :class:`TypedModel` and names the tree's error for it in
``typed_error``; building it (constructor, ``model_validate``, ``model_validate_json``) or
assigning to it then raises that error, listing every problem at its JSON pointer.

The constructor wrapper is marked as pydantic's own ``__init__``, so that validating a parent
builds its nested models inside pydantic-core, without a Python call per nested model: their
problems reach the parent's wrapper with their full path. The wrapper replaces pydantic's own
``__init__``, so a model built directly costs what a plain pydantic model costs.
"""

from __future__ import annotations

from typing import Any, ClassVar, Self, TypeVar, cast

from pydantic import BaseModel, ConfigDict, ValidationError

from stargraph.errors import (
    CompileError,
    StargraphError,
    _problems_message,
    _ProblemsError,
    problems_of_validation,
)

__all__ = ["TypedModel", "validate_json_raw", "validate_raw"]


class TypedModel(BaseModel):
    """A pydantic model that raises :attr:`typed_error` (never a bare ``ValidationError``)."""

    model_config = ConfigDict(defer_build=True)

    typed_error: ClassVar[type[StargraphError]] = CompileError
    """The error class its validation problems are raised as: one that carries problems
    (a :class:`~stargraph.errors.CompileError`, ...), or any other taking one message (a
    run-time error such as :class:`~stargraph.errors.CassetteError`), which then gets every
    problem rendered in its message."""

    @classmethod
    def _typed(cls, exc: ValidationError) -> StargraphError:
        subject = f"{cls.__name__} data"
        error = cls.typed_error
        if issubclass(error, _ProblemsError):
            return error.from_validation(exc, subject=subject)
        return error(_problems_message(tuple(problems_of_validation(exc)), subject))

    def __init__(self, /, **data: Any) -> None:
        # What BaseModel.__init__ does, called directly: one Python call per model, not two
        # (IR models are built by the thousand when big graphs compile).
        try:
            self.__pydantic_validator__.validate_python(data, self_instance=self)
        except ValidationError as exc:
            raise type(self)._typed(exc) from None

    __init__.__pydantic_base_init__ = True  # type: ignore[attr-defined]

    def __setattr__(self, name: str, value: Any) -> None:
        # A frozen model refuses with pydantic's error; keep the one tree.
        try:
            super().__setattr__(name, value)
        except ValidationError as exc:
            raise type(self)._typed(exc) from None

    @classmethod
    def model_validate(cls, obj: Any, **options: Any) -> Self:
        """Validate ``obj``; :attr:`typed_error` naming every bad field."""
        try:
            return super().model_validate(obj, **options)
        except ValidationError as exc:
            raise cls._typed(exc) from None

    @classmethod
    def model_validate_json(cls, json_data: str | bytes | bytearray, **options: Any) -> Self:
        """Validate JSON text; :attr:`typed_error` naming every bad field."""
        try:
            return super().model_validate_json(json_data, **options)
        except ValidationError as exc:
            raise cls._typed(exc) from None


_M = TypeVar("_M", bound=BaseModel)


def validate_raw(model: type[_M], data: Any, **options: Any) -> _M:
    """``data`` validated as ``model``, bad input raising pydantic's own ``ValidationError``
    even for a :class:`TypedModel`: for the callers that turn it into an error of their own
    (a run's input, a stored row), naming where the data came from."""
    return cast("_M", model.__pydantic_validator__.validate_python(data, **options))


def validate_json_raw(model: type[_M], data: str | bytes | bytearray, **options: Any) -> _M:
    """JSON text validated as ``model``; see :func:`validate_raw`."""
    return cast("_M", model.__pydantic_validator__.validate_json(data, **options))
