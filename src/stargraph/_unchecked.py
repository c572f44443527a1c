"""Pydantic instances built without validation, from values their maker made itself.

The runtime, the stores and the tool arbiter build several records per step from values
they have just validated or made, of the declared types. ``model_construct`` would walk
every field to fill in defaults; these helpers set what it leaves behind directly: the
instance's ``__dict__`` and pydantic's three slots (through the slots' own descriptors, a
third of the cost of ``object.__setattr__`` by name, which looks each one up on the class).
"""

from __future__ import annotations

from typing import Any, TypeVar

from pydantic import BaseModel

__all__ = ["every_field", "unchecked"]

_M = TypeVar("_M", bound=BaseModel)

_new = object.__new__
_set = object.__setattr__
_SET_FIELDS_SET = BaseModel.__dict__["__pydantic_fields_set__"].__set__
_SET_EXTRA = BaseModel.__dict__["__pydantic_extra__"].__set__
_SET_PRIVATE = BaseModel.__dict__["__pydantic_private__"].__set__
_EVERY_FIELD: dict[type[BaseModel], set[str]] = {}


def unchecked(cls: type[_M], values: dict[str, Any], fields_set: set[str]) -> _M:
    """An instance of ``cls`` whose fields are ``values`` (handed over: the instance keeps
    the dict itself) and whose set fields are ``fields_set``, with no validation: what
    ``cls.model_construct(**values)`` makes when ``values`` names every field."""
    instance = _new(cls)
    _set(instance, "__dict__", values)
    _SET_FIELDS_SET(instance, fields_set)
    _SET_EXTRA(instance, None)
    _SET_PRIVATE(instance, None)
    return instance


def every_field(cls: type[BaseModel]) -> set[str]:
    """The names of every field of ``cls``, as one set shared by all its records (treat it
    as read-only: frozen records never add to it, and ``model_copy`` copies it first; a
    shared set is also one object fewer per record for the garbage collector)."""
    every = _EVERY_FIELD.get(cls)
    if every is None:
        every = _EVERY_FIELD[cls] = set(cls.model_fields)
    return every
