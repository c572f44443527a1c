"""The passage of whole state values into CLIPS and back, as clipspy values.

Strings are escaped by :func:`~stargraph.fathom._values.encode_string` on the way in and
decoded on the way out (see :mod:`stargraph.fathom._values` for why); this module adds the
symbols, the optional ``nil`` and the multifields, and is the one that imports clipspy.
"""

from __future__ import annotations

from typing import Any, Final

import clips

from stargraph.errors import RuleRuntimeError
from stargraph.fathom._values import FactField, decode_string, encode_string

__all__ = ["decode_value", "encode_text", "encode_value", "plain", "to_clips"]


_INT64: Final = (-(2**63), 2**63 - 1)
_TRUE: Final = clips.Symbol("TRUE")
_FALSE: Final = clips.Symbol("FALSE")
_NIL: Final = clips.Symbol("nil")


def encode_value(name: str, field: FactField, value: Any, *, step: int, node: str) -> Any:
    """Convert one state value to the clipspy value its slot accepts.

    Raises RuleRuntimeError naming the field when the value does not fit, because CLIPS would
    otherwise reject it with a message that names neither the field nor the step.
    """
    if value is None and field.optional:
        return _NIL
    base = field.base
    ok = isinstance(value, base) and not (base is int and isinstance(value, bool))
    if base is float and isinstance(value, int) and not isinstance(value, bool):
        value, ok = float(value), True
    if ok and base is int and not _INT64[0] <= value <= _INT64[1]:
        ok = False
    if not ok:
        raise RuleRuntimeError(
            f"fact {name!r} = {value!r} at step {step} (node {node!r}) is not a "
            f"{'optional ' if field.optional else ''}{base.__name__} as declared; fix the "
            "node that wrote it or the field's annotation (ints must fit in 64 bits)",
            step=step,
            node=node,
        )
    if base is bool:
        return _TRUE if value else _FALSE
    if base is str:
        return encode_string(value)
    return value


def encode_text(value: str | None) -> Any:
    """Convert an optional engine string (event, tool result) to a clipspy value."""
    return _NIL if value is None else encode_string(value)


# A tuple, not ``bool | int | float``: Python 3.11 builds that union anew at every call, and
# a snapshot decodes every slot of every fact.
_SCALARS: Final = (bool, int, float)
_SYMBOL_TYPE: Final = clips.Symbol


def decode_value(value: Any) -> Any:
    """Convert a clipspy value read back from CLIPS into plain JSON-able Python.

    Symbols become ``{"symbol": name}`` so a restore can tell the symbol ``nil`` from the
    string ``"nil"``; multifields become lists.
    """
    kind = type(value)
    # The exact types first (clips.Symbol is a str subclass, so these tests are not the
    # isinstance chain's order): a snapshot decodes every slot of every fact.
    if kind is str:
        return decode_string(value)
    if kind is int or kind is float:
        return value
    if kind is _SYMBOL_TYPE:
        return {"symbol": str(value)}
    if isinstance(value, clips.Symbol):
        return {"symbol": str(value)}
    if isinstance(value, str):
        return decode_string(value)
    if isinstance(value, tuple):
        return [decode_value(v) for v in value]
    if isinstance(value, _SCALARS):
        return value
    raise RuleRuntimeError(f"unexpected CLIPS value {value!r}: rules cannot hand it over")


def to_clips(value: Any) -> Any:
    """Inverse of :func:`decode_value`: JSON snapshot value -> clipspy value."""
    if isinstance(value, dict):
        return clips.Symbol(value["symbol"])
    if isinstance(value, str):
        return encode_string(value)
    if isinstance(value, list):
        return tuple(to_clips(v) for v in value)
    return value


def plain(value: Any) -> Any:
    """A decision slot read back from CLIPS: ``nil`` -> None, strings decoded."""
    if isinstance(value, clips.Symbol):
        return None if value == "nil" else str(value)
    if isinstance(value, str):
        return decode_string(value)
    return value
