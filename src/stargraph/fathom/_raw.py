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

The :class:`Watchdog` needs four CLIPS functions clipspy does not declare. They are exported
by clipspy's own extension module, so a second, ABI-level cffi handle on that same (already
loaded) library reaches them: same code, same environments.
"""

from __future__ import annotations

import functools
import math
import time
from collections.abc import Iterator, Mapping
from typing import Any, Final

import clips
import clips._clips
from clips._clips import ffi, lib
from clips.values import clips_value, python_value

from stargraph.errors import RuleRuntimeError

__all__ = [
    "CallBuilder",
    "Watchdog",
    "assert_fact",
    "error_message",
    "has_activations",
    "iter_facts",
    "SlotNames",
]

_SYMBOL: Final = int(clips.common.CLIPSType.SYMBOL)


@functools.cache
def _c_api() -> tuple[Any, Any]:
    """The ABI-level handle and the library, made on the first watchdog: declaring the
    functions runs cffi's C parser (pycparser), which costs more than the rest of the
    package's import, and a process that decides no rule never needs it."""
    import cffi  # type: ignore[import-untyped]  # clipspy depends on it; no stubs

    abi = cffi.FFI()
    abi.cdef(
        """
        typedef struct environment Environment;
        typedef void VoidCallFunction(Environment *, void *);
        bool AddPeriodicFunction(Environment *, const char *, VoidCallFunction *, int, void *);
        bool RemovePeriodicFunction(Environment *, const char *);
        bool EnablePeriodicFunctions(Environment *, bool);
        void SetHaltExecution(Environment *, bool);
        long long MemUsed(Environment *);
        """
    )
    return abi, abi.dlopen(clips._clips.__file__)


_WATCHDOG: Final = b"sg-watchdog"


class Watchdog:
    """Stops a decision that overruns its time or memory budget, from inside CLIPS.

    CLIPS calls its *periodic functions* after every rule firing, every iteration of a loop
    (``loop-for-count``, ``progn$``, ``foreach``, a fact query's actions) and every top-level
    call. While armed, the one registered here compares the clock with the deadline and the
    environment's memory (``MemUsed``: every byte CLIPS holds) with the limit; past either, it
    sets CLIPS's halt flag, which ends the running actions, loop and agenda at the next check
    in the same thread. Nothing runs on another thread and nothing is polled: periodic
    functions are enabled only while armed (the engine's own calls around the agenda make
    several top-level calls that need no check), so a decision costs an arm, a disarm and one
    check per firing plus one at the end of the run, about 2 us in all.

    What happens *between* two checks is bounded by the allowlist (:mod:`._allow`): no
    recursion, no unbounded loop, and a bounded amount of building per rule firing.

    The callback closes over this object only, never the engine. :meth:`close` unregisters it
    before the environment goes, so CLIPS never calls a freed callback.
    """

    __slots__ = (
        "_abi",
        "_c",
        "_callback",
        "_env",
        "deadline",
        "limit",
        "timeout",
        "tripped",
        "used",
    )

    def __init__(self, env: Any, *, timeout: float, limit: int) -> None:
        self._abi, self._c = _c_api()
        self._env = self._abi.cast("Environment *", int(ffi.cast("uintptr_t", env)))
        self.timeout = timeout
        self.limit = limit
        self.deadline = math.inf
        self.tripped: str | None = None
        self.used = 0
        clock, mem_used, halt = time.monotonic, self._c.MemUsed, self._c.SetHaltExecution

        def check(raw: Any, _context: Any) -> None:
            if self.deadline == math.inf:
                return  # not deciding (or already tripped)
            if clock() > self.deadline:
                self.tripped = "time"
            else:
                used = mem_used(raw)
                if used <= self.limit:
                    return
                self.used, self.tripped = used, "memory"
            self.deadline = math.inf
            halt(raw, True)

        self._callback = self._abi.callback("VoidCallFunction", check)
        if not self._c.AddPeriodicFunction(self._env, _WATCHDOG, self._callback, 0, self._abi.NULL):
            raise RuleRuntimeError("CLIPS refused the watchdog")  # pragma: no cover - a bug
        self._c.EnablePeriodicFunctions(self._env, False)

    def arm(self) -> None:
        """Start the budget of one decision."""
        self.tripped = None
        self.deadline = time.monotonic() + self.timeout
        self._c.EnablePeriodicFunctions(self._env, True)

    def disarm(self) -> str | None:
        """End the decision; ``"time"`` or ``"memory"`` if the watchdog stopped it.

        The halt flag is cleared here, so the environment runs again at the next decision.
        """
        self.deadline = math.inf
        self._c.EnablePeriodicFunctions(self._env, False)
        tripped = self.tripped
        if tripped is not None:
            self._c.SetHaltExecution(self._env, False)
        return tripped

    def settle(self) -> str | None:
        """Check the budget once more, then :meth:`disarm`: for work in which CLIPS may call
        no periodic function (a reset asserts every deffacts fact in one call)."""
        if self.tripped is None and self.deadline != math.inf:
            if time.monotonic() > self.deadline:
                self.tripped = "time"
            else:
                used = int(self._c.MemUsed(self._env))
                if used > self.limit:
                    self.used, self.tripped = used, "memory"
        return self.disarm()

    def close(self) -> None:
        """Unregister from CLIPS (idempotent); call before the environment is destroyed."""
        if self._env != self._abi.NULL:
            self._c.RemovePeriodicFunction(self._env, _WATCHDOG)
            self._env = self._abi.NULL


_SYMBOL_TYPE: Final = clips.Symbol
_FCB_RESET: Final = lib.FCBReset
_FCB_APPEND: Final = lib.FCBAppend
_FCB_CALL: Final = lib.FCBCall
_CREATE_INTEGER: Final = lib.CreateInteger
_CREATE_STRING: Final = lib.CreateString
_CREATE_SYMBOL: Final = lib.CreateSymbol
_CREATE_FLOAT: Final = lib.CreateFloat


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
        _FCB_RESET(builder)
        # The C functions are module constants: a lookup on ``lib`` per argument cost as
        # much as the call (every decision passes seven).
        for arg in args:
            kind = type(arg)
            if kind is int:
                value.value = _CREATE_INTEGER(env, arg)
            elif kind is str:
                value.value = _CREATE_STRING(env, arg.encode())
            elif kind is _SYMBOL_TYPE:
                value.value = _CREATE_SYMBOL(env, arg.encode())
            elif kind is float:
                value.value = _CREATE_FLOAT(env, arg)
            else:
                raise RuleRuntimeError(f"cannot pass a {kind.__name__} to CLIPS")
            _FCB_APPEND(builder, value)
        return int(_FCB_CALL(builder, name, self._result))

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


SlotNames = dict[str, tuple[tuple[str, bytes], ...]]
"""Slot names by template name (text and the bytes CLIPS takes), read once per template."""

_INTEGER: Final = int(clips.common.CLIPSType.INTEGER)
_STRING: Final = int(clips.common.CLIPSType.STRING)
_FLOAT: Final = int(clips.common.CLIPSType.FLOAT)


def _python(env: Any, value: Any) -> Any:
    """``python_value(env, value)``: the plain types inline (a snapshot reads every slot of
    every fact), the others through clipspy."""
    kind = value.header.type
    if kind == _INTEGER:
        return int(value.integerValue.contents)
    if kind == _SYMBOL:
        return clips.Symbol(ffi.string(value.lexemeValue.contents).decode())
    if kind == _STRING:
        return ffi.string(value.lexemeValue.contents).decode()
    if kind == _FLOAT:
        return float(value.floatValue.contents)
    return python_value(env, value)


def iter_facts(
    env: Any, slot_names: SlotNames | None = None
) -> Iterator[tuple[str, dict[str, Any]]]:
    """Every fact as ``(template name, {slot: clipspy value})``, in fact-index order.

    Facts are read through the C API and never wrapped (see the module docstring).
    ``slot_names`` keeps each template's slot names across calls (an engine's templates
    are fixed once its packs are loaded), so a fact costs one read per slot.
    """
    value = ffi.new("CLIPSValue *")
    names = {} if slot_names is None else slot_names
    fact = lib.GetNextFact(env, ffi.NULL)
    while fact != ffi.NULL:
        template = ffi.string(lib.DeftemplateName(lib.FactDeftemplate(fact))).decode()
        slots_of = names.get(template)
        if slots_of is None:
            lib.FactSlotNames(fact, value)
            slots_of = names[template] = tuple(
                (str(name), str(name).encode()) for name in python_value(env, value)
            )
        slots: dict[str, Any] = {}
        for name, raw_name in slots_of:
            if lib.GetFactSlot(fact, raw_name, value) != lib.GSE_NO_ERROR:
                raise clips.CLIPSError(env, message=f"cannot read slot {name} of {template}")
            slots[name] = _python(env, value)
        yield template, slots
        fact = lib.GetNextFact(env, fact)


def assert_fact(env: Any, template: str, slots: Mapping[str, Any]) -> None:
    """Assert one fact of ``template`` with plain slot values, keeping no handle to it.

    Raises :class:`~stargraph.errors.RuleRuntimeError` for an unknown template, a slot the
    template lacks or a value it refuses, and clips.CLIPSError when CLIPS refuses the fact.
    """
    builder = lib.CreateFactBuilder(env, ffi.NULL)
    try:
        if lib.FBSetDeftemplate(builder, template.encode()) != lib.FBE_NO_ERROR:
            raise RuleRuntimeError(f"no template {template!r}")
        for slot, slot_value in slots.items():
            code = lib.FBPutSlot(builder, slot.encode(), clips_value(env, value=slot_value))
            if code != 0:  # PSE_NO_ERROR
                raise RuleRuntimeError(
                    f"template {template!r} refuses slot {slot!r} = {slot_value!r}"
                )
        if lib.FBAssert(builder) == ffi.NULL:
            raise clips.CLIPSError(env, code=lib.FBError(env))
    finally:
        lib.FBDispose(builder)
