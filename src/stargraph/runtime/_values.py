"""Channel values as data: JSON dumps of values and writes, and exception descriptions.

The bottom of the runtime's layers: used by the step loop, the stores' bridge and the
remote executor alike, and importing none of them.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pydantic import ValidationError

from stargraph.reducers import append as _append
from stargraph.state import Channel

__all__ = ["describe_exception", "describe_validation", "jsonable", "reduce_writes"]

_APPEND = _append.fn


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
