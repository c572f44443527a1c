"""References from the IR to Python objects: ``module:qualname`` import paths.

The IR never holds Python objects, only references, so a graph can be saved, hashed, sent to
another process and loaded again. A callable that has no stable import path (a lambda, a
closure, a method of a local class) cannot be referenced by path; give it a registry id
instead (``with_node("n", fn, ref="myns.name")``).
"""

from __future__ import annotations

import importlib
from typing import Any

from stargraph.errors import Problem

__all__ = ["ref_of", "resolve_ref", "try_ref_of"]


def try_ref_of(obj: Any) -> str | Problem:
    """``module:qualname`` of ``obj``, or a :class:`Problem` saying why it has none."""
    module = getattr(obj, "__module__", None)
    qualname = getattr(obj, "__qualname__", None)
    name = getattr(obj, "__name__", repr(obj))
    if not module or not qualname:
        return Problem(
            repr(obj),
            "has no __module__/__qualname__ to reference it by",
            "pass ref='ns.name' and supply the callable in Graph(..., impls={...})",
        )
    if "<lambda>" in qualname or "<locals>" in qualname:
        what = "a lambda" if "<lambda>" in qualname else "defined inside a function"
        return Problem(
            f"{module}:{qualname}",
            f"{name!r} is {what}, so the IR cannot reference it by import path",
            "define it at module level, or pass ref='ns.name' to with_node and supply the "
            "callable with Graph(..., impls={'ns.name': fn}) when loading the IR",
        )
    ref = f"{module}:{qualname}"
    try:
        found = resolve_ref(ref)
    except (ImportError, AttributeError):
        found = None
    if found is not obj and getattr(found, "__wrapped__", None) is not obj:
        return Problem(
            ref,
            f"importing {ref!r} does not give back {name!r}",
            "define it at module level under its own name, or pass ref='ns.name'",
        )
    return ref


def ref_of(obj: Any) -> str:
    """Like :func:`try_ref_of`, raising ``UnreferenceableNodeError`` instead of returning."""
    from stargraph.errors import UnreferenceableNodeError

    found = try_ref_of(obj)
    if isinstance(found, Problem):
        raise UnreferenceableNodeError([found], subject="callable")
    return found


def resolve_ref(ref: str) -> Any:
    """Import ``module:qualname`` and return the object; ``ImportError``/``AttributeError``
    propagate so the caller can report the culprit."""
    module_name, sep, qualname = ref.partition(":")
    if not sep or not module_name or not qualname:
        raise ImportError(f"{ref!r} is not of the form 'module:qualname'")
    obj: Any = importlib.import_module(module_name)
    for part in qualname.split("."):
        obj = getattr(obj, part)
    return obj
