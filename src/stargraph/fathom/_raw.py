"""The few CLIPS calls on the decision path, made through the C API without clipspy's objects.

Two reasons not to go through clipspy's high-level wrappers here:

* **Leaks.** clipspy 1.0.6 wraps every fact it hands to Python (a ``facts()`` iteration, an
  ``assert_fact``, a function returning a fact address) in an object that calls
  ``RetainFact`` and, on deletion, ``ReleaseFact`` with the wrong arity: the ``TypeError`` is
  swallowed, so the fact is never released. Once such a fact is retracted (every step
  modifies the engine facts), CLIPS keeps it as busy garbage and every later retract walks
  past it: decisions got ~30 µs slower per thousand snapshots or restores. Nothing here
  creates such an object.
* **Speed.** ``Environment.call`` allocates a value per argument and converts the result
  (a fact address, which leaks as above) on every call. A decision makes two calls, so the
  arguments go through one reused builder and one reused result value instead.

Only plain values cross: integers, floats, strings and symbols, never CLIPS source text.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any, Final

import clips
from clips._clips import ffi, lib
from clips.values import clips_value, python_value

__all__ = ["CallBuilder", "assert_fact", "error_message", "has_activations", "iter_facts"]

_SYMBOL: Final = int(clips.common.CLIPSType.SYMBOL)


class CallBuilder:
    """Calls CLIPS functions with plain arguments through one reused function-call builder.

    The result of :meth:`call` is left in CLIPS (not converted) unless asked for with
    :meth:`result`, so a function returning a fact address costs nothing and leaks nothing.
    """

    __slots__ = ("_builder", "_env", "_result", "_value")

    def __init__(self, env: Any) -> None:
        self._env = env
        self._builder = lib.CreateFunctionCallBuilder(env, 16)
        self._value = ffi.new("CLIPSValue *")
        self._result = ffi.new("CLIPSValue *")

    def call(self, name: bytes, args: tuple[Any, ...] | list[Any]) -> int:
        """Call CLIPS function ``name``; returns the FCB error code (0 on success).

        Raises OverflowError for an int outside 64 bits and TypeError for an unsupported
        argument type (the caller has already converted values to the slot types).
        """
        env, builder, value = self._env, self._builder, self._value
        lib.FCBReset(builder)
        for arg in args:
            kind = type(arg)
            if kind is clips.Symbol:
                value.value = lib.CreateSymbol(env, arg.encode())
            elif kind is str:
                value.value = lib.CreateString(env, arg.encode())
            elif kind is int:
                value.value = lib.CreateInteger(env, arg)
            elif kind is float:
                value.value = lib.CreateFloat(env, arg)
            else:
                raise TypeError(f"cannot pass {kind.__name__} to CLIPS")
            lib.FCBAppend(builder, value)
        return int(lib.FCBCall(builder, name, self._result))

    def result(self) -> Any:
        """The last result as a Python value (only for results holding no fact address)."""
        return python_value(self._env, self._result)

    def close(self) -> None:
        """Release the builder (idempotent)."""
        builder, self._builder = self._builder, ffi.NULL
        if builder != ffi.NULL:
            lib.FCBDispose(builder)


def error_message(env: Any, probe: Any) -> str | None:
    """The environment's ``(get-error)`` value as text, or None when no error is set.

    ``probe`` is a reused ``UDFValue *``. A symbol (``FALSE``) means no error, which is how
    clipspy's ``error_state`` reads it too.
    """
    lib.GetErrorFunction(env, ffi.NULL, probe)
    if probe.header.type == _SYMBOL:
        return None
    return str(python_value(env, probe))


def has_activations(env: Any) -> bool:
    """Whether any rule activation is still on the agenda."""
    return bool(lib.GetNextActivation(env, ffi.NULL) != ffi.NULL)


def iter_facts(env: Any) -> Iterator[tuple[str, dict[str, Any]]]:
    """Every fact as ``(template name, {slot: clipspy value})``, in fact-index order.

    Facts are read through the C API and never wrapped (see the module docstring).
    """
    value = ffi.new("CLIPSValue *")
    fact = lib.GetNextFact(env, ffi.NULL)
    while fact != ffi.NULL:
        template = ffi.string(lib.DeftemplateName(lib.FactDeftemplate(fact))).decode()
        lib.FactSlotNames(fact, value)
        names = python_value(env, value)
        slots: dict[str, Any] = {}
        for name in names:
            if lib.GetFactSlot(fact, str(name).encode(), value) != lib.GSE_NO_ERROR:
                raise clips.CLIPSError(env, message=f"cannot read slot {name} of {template}")
            slots[str(name)] = python_value(env, value)
        yield template, slots
        fact = lib.GetNextFact(env, fact)


def assert_fact(env: Any, template: str, slots: Mapping[str, Any]) -> None:
    """Assert one fact of ``template`` with plain slot values, keeping no handle to it.

    Raises LookupError for an unknown template, ValueError for a slot the template lacks or
    a value it refuses, and clips.CLIPSError when CLIPS refuses the fact.
    """
    builder = lib.CreateFactBuilder(env, ffi.NULL)
    try:
        if lib.FBSetDeftemplate(builder, template.encode()) != lib.FBE_NO_ERROR:
            raise LookupError(f"no template {template!r}")
        for slot, slot_value in slots.items():
            code = lib.FBPutSlot(builder, slot.encode(), clips_value(env, value=slot_value))
            if code != 0:  # PSE_NO_ERROR
                raise ValueError(f"template {template!r} refuses slot {slot!r} = {slot_value!r}")
        if lib.FBAssert(builder) == ffi.NULL:
            raise clips.CLIPSError(env, code=lib.FBError(env))
    finally:
        lib.FBDispose(builder)
