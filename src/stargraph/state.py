"""State schemas: from a pydantic model to IR fields and runtime channels.

A graph's state is a pydantic model; each field is a *channel*. This module reads the model
once (types, reducers, defaults, fact markers), turns it into :class:`FieldIR` for the hash and
into :class:`Channel` objects the executor uses on its hot path.
"""

from __future__ import annotations

import collections.abc
import types
import typing
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Annotated, Any, Final, Literal, Union, get_args, get_origin

from pydantic import BaseModel, ConfigDict, PydanticUserError, TypeAdapter
from pydantic_core import PydanticUndefined

from stargraph._text import lone_surrogate
from stargraph._unchecked import unchecked
from stargraph.errors import Problem
from stargraph.ir import FieldIR, StateSchemaIR, content_hash
from stargraph.reducers import BUILTIN_REDUCERS, Reducer
from stargraph.refs import importable_name, resolve_ref, try_ref_of

__all__ = [
    "Channel",
    "Checker",
    "build_channels",
    "fast_state",
    "json_problem",
    "schema_ir",
    "schema_problems",
    "set_field_problem",
    "type_repr",
    "value_checker",
]

# Mutable sets in any spelling: their iteration order is not stable, so a state holding one
# would not hash or replay identically.
_SETS: Final = (set, collections.abc.MutableSet, typing.MutableSet)


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
        name = f"{importable_name(tp.__module__)}.{tp.__qualname__}"
        if issubclass(tp, BaseModel):
            return f"{name}#{content_hash(tp.model_json_schema())[7:23]}"
        return name
    return repr(tp)


def set_field_problem(
    where: str, name: str, annotation: Any, *, nested_in: str | None = None
) -> Problem | None:
    """The problem with field ``name`` (of nested model ``nested_in``, if given) when its type
    holds a set at any depth: sets have no stable order. ``None`` when it holds none."""
    stack = [annotation]
    while stack:
        current = stack.pop()
        if current in _SETS or get_origin(current) in _SETS:
            of = "" if nested_in is None else f" of nested model {nested_in}"
            return Problem(
                where,
                f"field {name!r}{of} has type {type_repr(annotation)}: sets have no stable "
                "order, so states would not hash or replay identically",
                "use frozenset (merged in sorted order) or a list",
            )
        stack.extend(a for a in get_args(current) if not isinstance(a, str | int))
    return None


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
        unordered = set_field_problem(where, name, info.annotation)
        if unordered is not None:
            problems.append(unordered)
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
                private=any(
                    getattr(type(m), "__stargraph_private__", False) for m in info.metadata
                ),
                managed=next(
                    (
                        kind
                        for m in info.metadata
                        if isinstance(kind := getattr(type(m), "__stargraph_managed__", None), str)
                    ),
                    None,
                ),
                metadata={"description": info.description} if info.description else {},
            )
        )
    return StateSchemaIR(ref=ref, fields=tuple(fields))


Checker = Callable[[Any], "tuple[str, str] | None"]
"""Finds the part of a (validated) value that would not come back from a checkpoint store as
it was: ``(path, why)`` with ``path`` like ``"['k'][0]"`` (empty for the value itself), or
``None`` when the whole value round-trips."""

_TEXT_FIX = "use valid Unicode text"


def _text_why(text: str) -> str | None:
    if text.isascii():  # the common case, without a call
        return None
    at = lone_surrogate(text)
    if at is None:
        return None
    return (
        f"a string holding a lone surrogate {text[at]!r} at index {at}, "
        f"which cannot be stored as UTF-8; {_TEXT_FIX}"
    )


def _bytes_why(data: bytes) -> str | None:
    if data.isascii():
        return None
    try:
        data.decode()
    except UnicodeDecodeError as exc:
        return (
            f"bytes that are not UTF-8 (byte {data[exc.start]:#04x} at index {exc.start}), "
            "which JSON cannot hold; store text, or base64-encode the bytes into a str"
        )
    return None


def _type_why(value: Any) -> str:
    """Why a value of this type is not JSON data that round-trips exactly."""
    kind = type(value)
    name = kind.__qualname__
    if kind is tuple:
        return (
            "a tuple, which the store keeps as a JSON array, so a resumed run would see a "
            "list; use a list, or give the field a type such as tuple[int, int]"
        )
    if kind is set or kind is frozenset:
        return (
            f"a {name}, which the store keeps as a JSON array, so a resumed run would see a "
            "list; use a sorted list, or give the field a type such as frozenset[str]"
        )
    if kind is bytes or kind is bytearray:
        return (
            f"{name}, which JSON cannot hold exactly; store text, base64-encode the bytes "
            "into a str, or give the field the type bytes"
        )
    if isinstance(value, BaseModel):
        return (
            f"a {name} model, which the store keeps as a JSON object, so a resumed run would "
            f"see a dict; give the field the type {name}, or store model.model_dump()"
        )
    for base in (bool, str, int, float, dict, list):
        if isinstance(value, base):
            return (
                f"a {name} (a subclass of {base.__name__}), which a resumed run would see as "
                f"a plain {base.__name__}; store a plain {base.__name__}, or give the field "
                f"the type {name}"
            )
    return (
        f"an object of type {name}, which is not JSON data; store JSON data (None, bool, int, "
        "float, str, list, dict with str keys) or give the field a type pydantic can serialize"
    )


def _path(where: Any) -> str:
    parts: list[str] = []
    while where is not None:
        where, key = where
        parts.append(f"[{key}]" if type(key) is int else f"[{key!r}]")
    return "".join(reversed(parts))


def json_problem(value: Any) -> tuple[str, str] | None:
    """The first part of ``value`` that is not JSON data which round-trips exactly through a
    checkpoint store (see :data:`Checker`), or ``None``.

    JSON data is ``None``, ``bool``, ``int``, ``float`` (NaN and infinities included: the
    stores keep them), valid Unicode ``str``, ``list`` and ``dict`` with ``str`` keys, each
    of exactly that type. Walked without recursion, so nesting depth costs no stack.

    >>> json_problem({"a": [1, 2.5, None, {"b": "ok"}]}) is None
    True
    >>> json_problem({"a": [1, (2, 3)]})[0]
    "['a'][1]"
    """
    stack: list[tuple[Any, Any]] = [(value, None)]
    while stack:
        item, where = stack.pop()
        kind = type(item)
        if kind is str:
            why = _text_why(item)
            if why is not None:
                return _path(where), why
        elif kind is int or kind is float or kind is bool or item is None:
            continue
        elif kind is list:
            stack.extend((sub, (where, i)) for i, sub in enumerate(item))
        elif kind is dict:
            for key, sub in item.items():
                if type(key) is not str:
                    return _path(where), (
                        f"a dict with the {type(key).__qualname__} key {key!r}: JSON object "
                        f"keys are strings, so a resumed run would see the key {str(key)!r}; "
                        "use str keys, or give the field a type such as dict[int, str]"
                    )
                why = _text_why(key)
                if why is not None:
                    return _path(where), f"a dict key that is {why}"
                stack.append((sub, (where, key)))
        else:
            return _path(where), _type_why(item)
    return None


def _text_only(value: Any) -> tuple[str, str] | None:
    """Strings and bytes anywhere in plain containers must be storable (for unions whose
    arms cannot be told apart without validating again)."""
    stack: list[tuple[Any, Any]] = [(value, None)]
    while stack:
        item, where = stack.pop()
        why = None
        if isinstance(item, str):
            why = _text_why(item)
        elif isinstance(item, bytes):
            why = _bytes_why(item)
        elif isinstance(item, list | tuple | set | frozenset):
            stack.extend((sub, (where, i)) for i, sub in enumerate(item))
        elif isinstance(item, dict):
            stack.extend((sub, (where, k)) for k, sub in item.items())
            stack.extend((k, where) for k in item)
        if why is not None:
            return _path(where), why
    return None


def _check_text(value: Any) -> tuple[str, str] | None:
    if type(value) is not str or value.isascii():  # the common case, without a call
        return None
    why = _text_why(value)
    return None if why is None else ("", why)


def _check_bytes(value: Any) -> tuple[str, str] | None:
    why = _bytes_why(value) if isinstance(value, bytes) else None
    return None if why is None else ("", why)


def _any_key(key: Any) -> tuple[str, str] | None:
    if type(key) is not str:
        return "", (
            f"the {type(key).__qualname__} key {key!r}: JSON object keys are strings, so a "
            f"resumed run would see {str(key)!r}; use str keys, or type the keys (dict[int, ...])"
        )
    return _check_text(key)


def _text_items(value: Any) -> tuple[str, str] | None:
    """:func:`_items_checker` of ``_check_text``, without a call per item (``list[str]``
    channels are common and written on every step)."""
    try:
        if all(map(str.isascii, value)):  # every item ASCII text: no Python loop
            return None
    except TypeError:
        pass  # an item that is not a str: looked at one by one below
    for i, text in enumerate(value):
        if type(text) is str and not text.isascii():
            why = _text_why(text)
            if why is not None:
                return f"[{i}]", why
    return None


def _items_checker(item: Checker) -> Checker:
    if item is _check_text:
        return _text_items

    def check(value: Any) -> tuple[str, str] | None:
        for i, sub in enumerate(value):
            found = item(sub)
            if found is not None:
                return f"[{i}]{found[0]}", found[1]
        return None

    return check


def _tuple_checker(items: list[Checker | None]) -> Checker:
    def check(value: Any) -> tuple[str, str] | None:
        for i, (sub, item) in enumerate(zip(value, items, strict=False)):
            found = None if item is None else item(sub)
            if found is not None:
                return f"[{i}]{found[0]}", found[1]
        return None

    return check


def _dict_checker(key: Checker | None, item: Checker | None) -> Checker:
    def check(value: Any) -> tuple[str, str] | None:
        for k, sub in value.items():
            found = None if key is None else key(k)
            if found is not None:
                return "", f"a dict with {found[1]}"
            found = None if item is None else item(sub)
            if found is not None:
                return f"[{k!r}]{found[0]}", found[1]
        return None

    return check


def _model_checker(fields: list[tuple[str, Checker]]) -> Checker:
    text = _check_text

    def check(value: Any) -> tuple[str, str] | None:
        # A model's fields are in its __dict__: one dict lookup each, not an attribute
        # lookup through pydantic's __getattr__ hook (several models are written per step).
        data = value.__dict__
        for name, item in fields:
            sub = data.get(name)
            # A text field (most of a message's) holding ASCII or None: what _check_text
            # answers, without its call (several per message, written at every step).
            if item is text and (type(sub) is not str or sub.isascii()):
                continue
            found = item(sub)
            if found is not None:
                return f".{name}{found[0]}", found[1]
        return None

    return check


_SEQUENCES = (
    list,
    set,
    frozenset,
    collections.abc.Sequence,
    collections.abc.MutableSequence,
    collections.abc.Set,
    collections.abc.MutableSet,
    collections.abc.Iterable,
    collections.abc.Collection,
)
_MAPPINGS = (dict, collections.abc.Mapping, collections.abc.MutableMapping)


def value_checker(tp: Any, _models: dict[type, Checker | None] | None = None) -> Checker | None:
    """A :data:`Checker` for values of type ``tp``, or ``None`` when every valid value of it
    round-trips through a store by itself (numbers, enums, dates ...).

    ``Any`` parts must hold JSON data (:func:`json_problem`); ``str`` and ``bytes`` parts
    must be storable as UTF-8. Typed containers (``tuple[int, int]``, ``dict[int, str]``,
    ``frozenset[str]``) need no check: validation rebuilds them from JSON.
    """
    models = {} if _models is None else _models
    origin, args = get_origin(tp), get_args(tp)
    if origin is Annotated:
        return value_checker(args[0], models)
    if tp is Any or tp is object:
        return json_problem
    if tp is str:
        return _check_text
    if tp is bytes:
        return _check_bytes
    if origin in (Union, types.UnionType):
        arms = [a for a in args if a is not type(None)]
        if any(a is Any or a is object for a in arms):
            return json_problem
        checkers = [value_checker(a, models) for a in arms]
        if all(c is None for c in checkers):
            return None
        if len(arms) == 1 and checkers[0] is not None:
            only = checkers[0]
            if only is _check_text:
                return _check_text  # it passes None (any non-str) by itself
            return lambda value: None if value is None else only(value)
        return _text_only
    if tp in (list, set, frozenset, tuple):
        return _items_checker(json_problem)
    if tp is dict:
        return _dict_checker(_any_key, json_problem)
    if origin is tuple:
        if len(args) == 2 and args[1] is Ellipsis:
            item = value_checker(args[0], models)
            return None if item is None else _items_checker(item)
        items = [value_checker(a, models) for a in args]
        return None if all(c is None for c in items) else _tuple_checker(items)
    if origin in _SEQUENCES:
        item = value_checker(args[0], models) if args else json_problem
        return None if item is None else _items_checker(item)
    if origin in _MAPPINGS:
        loose_keys = not args or args[0] is Any or args[0] is object
        key = _any_key if loose_keys else value_checker(args[0], models)
        item = value_checker(args[1], models) if len(args) > 1 else json_problem
        return None if key is None and item is None else _dict_checker(key, item)
    if isinstance(tp, type) and issubclass(tp, BaseModel):
        if tp in models:
            # A recursive model: check through the table, where its checker is once built.
            def recursive(value: Any) -> tuple[str, str] | None:
                found = models.get(tp)
                return None if found is None else found(value)

            return recursive
        models[tp] = _text_only  # placeholder while the fields are read (recursion)
        fields = [
            (name, c)
            for name, info in tp.model_fields.items()
            if (c := value_checker(info.annotation, models)) is not None
        ]
        checker = _model_checker(fields) if fields else None
        models[tp] = checker
        return checker
    return None


_DUMP_CONFIG = ConfigDict(ser_json_inf_nan="constants")


def _dumper(annotation: Any) -> tuple[TypeAdapter[Any], Callable[[Any], Any]]:
    """The channel's adapter and its JSON-mode serializer, which keeps NaN and +/-infinity
    as floats (pydantic's default turns them into ``None`` inside ``Any`` values)."""
    try:
        adapter: TypeAdapter[Any] = TypeAdapter(annotation, config=_DUMP_CONFIG)
    except PydanticUserError:
        # A model (or dataclass, TypedDict) has its own config: serialize it inside a
        # one-item tuple, whose config reaches the model's fields.
        adapter = TypeAdapter(annotation)
        wrapper: TypeAdapter[Any] = TypeAdapter(tuple[annotation], config=_DUMP_CONFIG)
        to_python = wrapper.serializer.to_python
        return adapter, lambda value: to_python((value,), mode="json")[0]
    to_python = adapter.serializer.to_python
    return adapter, lambda value: to_python(value, mode="json")


@dataclass(frozen=True, slots=True)
class Channel:
    """Runtime view of one state field: validate a write, then reduce it into the value.

    ``validate`` validates (and copies containers of) a written value against the field's
    type; it is pydantic-core's validator itself, bound once, because the TypeAdapter wrapper
    around it doubles the cost on the executor's hot path. ``dump`` turns a value into JSON
    data (NaN and infinities kept); ``check`` (``None`` when not needed) finds a part of a
    valid value that a checkpoint store could not give back as it was (see
    :func:`value_checker`). ``as_is``: the exact types whose values ``dump`` gives back
    unchanged (see :func:`_dumped_as_is`), which need no call to dump; ``empty_list``: an
    empty list dumps to an empty list (a list field without a serializer of its own).
    """

    name: str
    reducer: Callable[[Any, Any], Any] | None
    adapter: TypeAdapter[Any]
    validate: Callable[[Any], Any]
    dump: Callable[[Any], Any] | None = None
    check: Checker | None = None
    as_is: frozenset[type] = frozenset()
    empty_list: bool = False


_SCALARS: Final = (str, int, bool)


def _inert(marker: Any) -> bool:
    """Whether a field's metadata item surely leaves its values' serialization alone: a
    reducer or a fact marker. Anything else (``PlainSerializer`` ...) may change it."""
    return (
        isinstance(marker, Reducer)
        or getattr(marker, "__stargraph_fact__", False) is True
        or getattr(marker, "__stargraph_private__", False) is True
        or isinstance(getattr(type(marker), "__stargraph_managed__", None), str)
    )


def _dumps_empty_list(annotation: Any, metadata: Sequence[Any] = ()) -> bool:
    """Whether a channel of field type ``annotation`` (with ``metadata``) dumps an empty
    list to an empty list: a ``list`` field without metadata that could serialize it
    otherwise (an empty list has no items for their type to serialize)."""
    return (annotation is list or get_origin(annotation) is list) and all(map(_inert, metadata))


def _dumped_as_is(annotation: Any, metadata: Sequence[Any] = ()) -> frozenset[type]:
    """The exact types (``str``, ``int``, ``bool``, ``NoneType``) whose values a channel of
    field type ``annotation`` (with ``metadata``) dumps to JSON data as they are: a field
    typed ``str``, ``int``, ``bool``, or one of them or ``None``, without metadata that
    could serialize it otherwise. Empty for any other type."""
    if not all(map(_inert, metadata)):
        return frozenset()
    if annotation in _SCALARS:
        return frozenset((annotation,))
    if get_origin(annotation) in (Union, types.UnionType):
        arms = get_args(annotation)
        if len(arms) == 2 and type(None) in arms:
            (base,) = (a for a in arms if a is not type(None))
            if base in _SCALARS:
                return frozenset((base, type(None)))
    return frozenset()


def _constrained(annotation: Any, metadata: Sequence[Any]) -> Any:
    """``annotation`` with the field's constraint ``metadata`` put back, as ``Annotated``."""
    if not metadata:
        return annotation
    return Annotated[annotation, *metadata]


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
        annotation = Any if info.annotation is None else info.annotation
        # A field's constraints (``Field(ge=0)``, ``Annotated[str, Field(max_length=9)]``)
        # are its metadata, not part of ``info.annotation``: a write is held to them as the
        # model itself would hold it, so a bad value is refused where it is written.
        adapter, dump = _dumper(_constrained(annotation, info.metadata))
        channels[f.name] = Channel(
            f.name,
            reducer,
            adapter,
            adapter.validator.validate_python,
            dump,
            value_checker(annotation),
            _dumped_as_is(annotation, info.metadata),
            _dumps_empty_list(annotation, info.metadata),
        )
    return channels


def fast_state(model: type[BaseModel], values: dict[str, Any]) -> Any:
    """Build a model instance from already-validated values without re-validating.

    Every value was validated when it was written (:meth:`Channel.validate`), so re-running
    the model validator on each step would only repeat that work; this is what pydantic's
    ``model_construct`` does, minus its per-field default handling.
    """
    return unchecked(model, values, set(values))
