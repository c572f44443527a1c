"""State schemas: from a pydantic model to IR fields and runtime channels.

A graph's state is a pydantic model; each field is a *channel*. This module reads the model
once (types, reducers, defaults, fact markers), turns it into :class:`FieldIR` for the hash and
into :class:`Channel` objects the executor uses on its hot path.
"""

from __future__ import annotations

import types
import typing
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Annotated, Any, Literal, Union, get_args, get_origin

from pydantic import BaseModel, TypeAdapter
from pydantic_core import PydanticUndefined

from stargraph.errors import Problem
from stargraph.ir import FieldIR, StateSchemaIR, content_hash
from stargraph.reducers import BUILTIN_REDUCERS, Reducer
from stargraph.refs import resolve_ref, try_ref_of

__all__ = ["Channel", "build_channels", "fast_state", "schema_ir", "schema_problems", "type_repr"]


def type_repr(tp: Any) -> str:
    """A canonical spelling of a type annotation, stable across processes.

    Nested pydantic models are spelled with a hash of their JSON schema, so changing a nested
    model's fields changes the graph hash too.
    """
    origin = get_origin(tp)
    args = get_args(tp)
    if origin is Annotated:
        return type_repr(args[0])
    if origin in (Union, types.UnionType):
        return " | ".join(type_repr(a) for a in args)
    if origin is Literal:
        return "Literal[" + ", ".join(repr(a) for a in args) + "]"
    if origin is not None:
        inner = ", ".join(type_repr(a) for a in args)
        return f"{type_repr(origin)}[{inner}]" if args else type_repr(origin)
    if tp is None or tp is type(None):
        return "None"
    if tp is Any:
        return "Any"
    if isinstance(tp, type):
        if tp.__module__ == "builtins":
            return tp.__qualname__
        name = f"{tp.__module__}.{tp.__qualname__}"
        if issubclass(tp, BaseModel):
            return f"{name}#{content_hash(tp.model_json_schema())[7:23]}"
        return name
    return repr(tp)


def _contains_set(tp: Any) -> bool:
    origin = get_origin(tp)
    if tp is set or origin is set or tp is typing.MutableSet or origin is typing.MutableSet:
        return True
    return any(_contains_set(a) for a in get_args(tp) if not isinstance(a, str | int))


def _is_fact_marker(meta: Any) -> bool:
    # The marker class lives in stargraph.fathom; matching by attribute keeps this layer free
    # of a clipspy import.
    return bool(getattr(type(meta), "__stargraph_fact__", False))


def _reducer_candidates(metadata: list[Any]) -> list[Reducer | Callable[[Any, Any], Any]]:
    found: list[Reducer | Callable[[Any, Any], Any]] = []
    for meta in metadata:
        if isinstance(meta, Reducer | types.FunctionType | types.BuiltinFunctionType):
            found.append(meta)
    return found


def _reducer_id(reducer: Reducer | Callable[[Any, Any], Any]) -> str | Problem:
    if isinstance(reducer, Reducer):
        if BUILTIN_REDUCERS.get(reducer.id) is reducer:
            return reducer.id
        return try_ref_of(reducer)
    return try_ref_of(reducer)


def schema_problems(model: type[BaseModel], pointer: str = "/state") -> list[Problem]:
    """Every problem with a state model: set fields, conflicting or unreferenceable reducers."""
    problems: list[Problem] = []
    for name, info in model.model_fields.items():
        where = f"{pointer}/fields/{name}"
        if _contains_set(info.annotation):
            problems.append(
                Problem(
                    where,
                    f"field {name!r} has type {type_repr(info.annotation)}: sets have no "
                    "stable order, so states would not hash or replay identically",
                    "use frozenset (merged in sorted order) or a list",
                )
            )
        candidates = _reducer_candidates(list(info.metadata))
        if len(candidates) > 1:
            names = [getattr(c, "id", getattr(c, "__name__", repr(c))) for c in candidates]
            problems.append(
                Problem(
                    where,
                    f"field {name!r} declares {len(candidates)} reducers {names}: conflicting",
                    "keep exactly one reducer in the Annotated[...] metadata",
                )
            )
        elif candidates:
            rid = _reducer_id(candidates[0])
            if isinstance(rid, Problem):
                problems.append(
                    Problem(where, f"reducer of field {name!r}: {rid.message}", rid.hint)
                )
    return problems


def _default_json(info: Any, annotation: Any) -> tuple[Any, bool]:
    if info.default is not PydanticUndefined:
        value = info.default
    elif info.default_factory is not None:
        value = info.default_factory()
    else:
        return None, True
    return TypeAdapter(annotation).dump_python(value, mode="json"), False


def schema_ir(model: type[BaseModel], ref: str) -> StateSchemaIR:
    """The IR of a state model (call :func:`schema_problems` first: this assumes it is valid)."""
    fields = []
    for name, info in model.model_fields.items():
        candidates = _reducer_candidates(list(info.metadata))
        reducer = _reducer_id(candidates[0]) if candidates else None
        default, required = _default_json(info, info.annotation)
        fields.append(
            FieldIR(
                name=name,
                type=type_repr(info.annotation),
                reducer=reducer if isinstance(reducer, str) else None,
                default=default,
                required=required,
                fact=any(_is_fact_marker(m) for m in info.metadata),
                metadata={"description": info.description} if info.description else {},
            )
        )
    return StateSchemaIR(ref=ref, fields=tuple(fields))


@dataclass(frozen=True, slots=True)
class Channel:
    """Runtime view of one state field: validate a write, then reduce it into the value.

    ``validate`` validates (and copies containers of) a written value against the field's
    type; it is pydantic-core's validator itself, bound once, because the TypeAdapter wrapper
    around it doubles the cost on the executor's hot path.
    """

    name: str
    reducer: Callable[[Any, Any], Any] | None
    adapter: TypeAdapter[Any]
    validate: Callable[[Any], Any]


def build_channels(model: type[BaseModel], schema: StateSchemaIR) -> Mapping[str, Channel]:
    """Channels for every field, with reducers resolved from their IR ids."""
    channels: dict[str, Channel] = {}
    for f in schema.fields:
        info = model.model_fields[f.name]
        reducer: Callable[[Any, Any], Any] | None = None
        if f.reducer is not None:
            found = BUILTIN_REDUCERS.get(f.reducer) or resolve_ref(f.reducer)
            # Call the plain function: the Reducer wrapper's __call__ costs a frame per write.
            reducer = found.fn if isinstance(found, Reducer) else found
        adapter: TypeAdapter[Any] = TypeAdapter(Any if info.annotation is None else info.annotation)
        channels[f.name] = Channel(f.name, reducer, adapter, adapter.validator.validate_python)
    return channels


def fast_state(model: type[BaseModel], values: dict[str, Any]) -> Any:
    """Build a model instance from already-validated values without re-validating.

    Every value was validated when it was written (:meth:`Channel.validate`), so re-running
    the model validator on each step would only repeat that work; this is what pydantic's
    ``model_construct`` does, minus its per-field default handling.
    """
    instance = model.__new__(model)
    object.__setattr__(instance, "__dict__", values)
    object.__setattr__(instance, "__pydantic_fields_set__", set(values))
    object.__setattr__(instance, "__pydantic_extra__", None)
    object.__setattr__(instance, "__pydantic_private__", None)
    return instance
