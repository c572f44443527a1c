"""Channel values as data: JSON dumps of values and writes, and exception descriptions.

The bottom of the runtime's layers: used by the step loop, the stores' bridge and the
remote executor alike, and importing none of them.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pydantic import ValidationError

from stargraph.state import Channel

__all__ = ["describe_exception", "describe_validation", "jsonable"]


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
        channel = channels[key]
        dump = channel.dump
        out[key] = channel.adapter.dump_python(value, mode="json") if dump is None else dump(value)
    return out


def describe_validation(exc: ValidationError) -> str:
    """A pydantic validation error as ``"field.path: message; ..."`` for an error message."""
    return "; ".join(
        f"{'.'.join(str(p) for p in e['loc']) or '<root>'}: {e['msg']}" for e in exc.errors()
    )
