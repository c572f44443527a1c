"""Channel values as data: JSON dumps of values and writes, and exception descriptions.

The bottom of the runtime's layers: used by the step loop, the stores' bridge and the
remote executor alike, and importing none of them.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Mapping
from typing import Annotated, Any, Final, Literal, TypeVar, get_args, get_origin

from pydantic import BaseModel, ValidationError

from stargraph._typed import validate_raw
from stargraph._unchecked import unchecked
from stargraph.errors import InvalidWriteError
from stargraph.reducers import append as _append
from stargraph.state import Channel

__all__ = [
    "GOTO_KEY",
    "PARENT_KEY",
    "ROUTING_KEYS",
    "describe_exception",
    "describe_validation",
    "jsonable",
    "reduce_writes",
    "state_of",
    "values_item",
]

GOTO_KEY: Final = "__goto__"
"""The key under which a task's writes carry where its ``Command`` goes: stored with the
writes (JSON: node ids and ``{"node", "payload"}`` sends), never a channel (a state field
cannot be named so), and taken out before the writes are merged."""

PARENT_KEY: Final = "__parent__"
"""The key under which a child run's task writes carry its ``Command(graph=PARENT)``:
``{"update": {parent channel: JSON value}, "goto": [...]}``, for the parent's subgraph node
to write and route; stored and taken out like :data:`GOTO_KEY`."""

ROUTING_KEYS: Final = frozenset({GOTO_KEY, PARENT_KEY})
"""The keys of a task's writes that say where the run goes, not what a channel holds."""

_APPEND = _append.fn
_M = TypeVar("_M", bound=BaseModel)


def describe_exception(exc: BaseException) -> str:
    """``"Type: message"`` for an error message, even when the exception's ``__str__``
    raises (then ``"Type: <unprintable Type>"``): describing a failure must never fail."""
    name = type(exc).__name__
    try:
        text = str(exc)
    except Exception:
        text = f"<unprintable {name}>"
    return f"{name}: {text}"


def jsonable(channels: Mapping[str, Channel], values: Mapping[str, Any]) -> dict[str, Any]:
    """Channel values (or writes) as JSON data, through each channel's type (NaN and
    infinities stay floats: the stores keep them)."""
    out: dict[str, Any] = {}
    for key, value in values.items():
        try:
            channel = channels[key]
        except KeyError:
            if key not in ROUTING_KEYS:
                raise
            out[key] = value  # JSON already: node ids, sends' payloads, a parent's update
            continue
        kind = type(value)
        if kind in channel.as_is:  # text, a number, a flag: dumped as it is
            out[key] = value
            continue
        if kind is list and not value and channel.empty_list:
            out[key] = []  # what the dump makes of it (a ReAct step empties a list channel)
            continue
        dump = channel.dump
        out[key] = channel.adapter.dump_python(value, mode="json") if dump is None else dump(value)
    return out


def describe_validation(exc: ValidationError) -> str:
    """A pydantic validation error as ``"field.path: message; ..."`` for an error message."""
    return "; ".join(
        f"{'.'.join(str(p) for p in e['loc']) or '<root>'}: {e['msg']}" for e in exc.errors()
    )


def state_of(model: type[_M], values: Mapping[str, Any], run_id: str, step: int) -> _M:
    """The state model instance of a run's channel ``values`` at ``step``.

    Every write was held to its field's type and constraints, but a ``@field_validator`` or
    ``@model_validator`` sees only the whole state: a refusal here is an
    :class:`InvalidWriteError` naming the run and the fields, not a bare pydantic error.
    """
    try:
        return validate_raw(model, values)
    except ValidationError as exc:
        raise InvalidWriteError(
            f"the state of run {run_id!r} at step {step} does not validate against "
            f"{model.__name__}: {describe_validation(exc)}; its @field_validator and "
            "@model_validator methods see the whole state, at the start and the end of a "
            "run, not each write: put a check of one value in the field's type instead "
            "(Annotated[int, Field(ge=0)] or AfterValidator), which every write is held to",
            run_id=run_id,
            step=step,
        ) from exc


_IMMUTABLE: Final = frozenset({str, int, float, bool, bytes, complex, type(None)})
_FLAT: Final = frozenset({list, dict, set})
_KEPT: Final = frozenset({tuple, frozenset})


def values_item(model: type[_M]) -> Callable[[Mapping[str, Any]], _M] | None:
    """How a stream's ``values`` item is made of a run's channel values: an instance of
    ``model`` equal to :func:`state_of` of the same values, without validating them again
    (every value was validated when it was written), over copies of their containers made
    here, so that a consumer who changes an item changes neither the run nor a later item.
    ``None`` when only validation makes an equal instance: a model with a validator of the
    whole state or of a field, a ``model_post_init``, private attributes or extra fields.

    A container is copied as validation would rebuild it: lists, dicts and sets down to
    their leaves, which are kept (a nested model instance, as pydantic keeps one), with a
    one-level copy where the field's type says the items are leaves."""
    decorators = model.__pydantic_decorators__
    if (
        decorators.validators
        or decorators.field_validators
        or decorators.root_validators
        or decorators.model_validators
        or model.__pydantic_post_init__ is not None
        or model.__private_attributes__
        or model.model_config.get("extra") == "allow"
    ):
        return None
    copiers: list[tuple[str, Callable[[Any], Any]]] = []
    for name, info in model.model_fields.items():
        copier = _copier(info.annotation)
        if copier is _revalidated:
            return None
        if copier is not None:
            copiers.append((name, copier))

    def item(values: Mapping[str, Any]) -> _M:
        copied = dict(values)
        for name, copy in copiers:
            copied[name] = copy(copied[name])
        return unchecked(model, copied, set(copied))

    return item


def _copier(annotation: Any) -> Callable[[Any], Any] | None:
    """How to copy a value of field type ``annotation`` for a ``values`` item (``None``:
    kept as it is, a leaf)."""
    while get_origin(annotation) is Annotated:
        annotation = get_args(annotation)[0]
    if annotation in _IMMUTABLE or get_origin(annotation) is Literal:
        return None
    if isinstance(annotation, type):
        if issubclass(annotation, BaseModel):
            # pydantic keeps an instance as it is unless its model says to revalidate it.
            revalidate = annotation.model_config.get("revalidate_instances", "never")
            return None if revalidate == "never" else _revalidated
        if issubclass(annotation, enum.Enum):
            return None
    origin = get_origin(annotation)
    args = get_args(annotation)
    parts = [_copier(arg) for arg in args if arg is not Ellipsis]
    if _revalidated in parts:
        return _revalidated
    leaves = bool(args) and all(part is None for part in parts)
    if origin in _KEPT and leaves:
        return None
    if origin in _FLAT and leaves:
        return _flat
    return _deep


def _revalidated(value: Any) -> Any:
    """Not a copier but a mark (never called): a field whose values only validation copies
    as it would (a model that revalidates its instances)."""
    return value


def _flat(value: Any) -> Any:
    """A container of leaves: copied one level deep."""
    return value.copy() if type(value) in _FLAT else _deep(value)


def _deep(value: Any) -> Any:
    """Lists, dicts, sets and tuples copied down to their leaves, which are kept."""
    kind = type(value)
    if kind is list:
        return [_deep(v) for v in value]
    if kind is dict:
        return {k: _deep(v) for k, v in value.items()}
    if kind is set:
        return set(value)
    if kind is tuple:
        return tuple(_deep(v) for v in value)
    return value


def reduce_writes(
    channels: Mapping[str, Channel],
    values: dict[str, Any],
    writes: Mapping[str, Any],
    *,
    owned: bool | set[str] = False,
) -> None:
    """Fold one task's validated ``writes`` into ``values``, in place, through the channels'
    reducers (a channel without one takes the written value). The one merge of the runtime:
    a live step, an update, a thread's new input and a run loaded from its store's steps all
    go through it, task after task in ``(node, index)`` order.

    ``owned``: the lists in ``values`` are the caller's own (decoded from a store), so an
    ``append`` channel is extended in place rather than copied at every step. A set: the
    names of the lists already copied (the merge of one step's several tasks copies each
    list once, then extends it, and records it here).
    """
    for key, value in writes.items():
        reducer = channels[key].reducer
        if reducer is None:
            values[key] = value
        elif owned is not False and reducer is _APPEND and type(values[key]) is list:
            if owned is True or key in owned:
                values[key].extend(value)
            else:
                values[key] = [*values[key], *value]
                owned.add(key)
        else:
            values[key] = reducer(values[key], value)
