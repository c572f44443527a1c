"""References from the IR to Python objects: ``module:qualname`` import paths.

The IR never holds Python objects, only references, so a graph can be saved, hashed, sent to
another process and loaded again. A callable that has no stable import path (a lambda, a
closure, a method of a local class) cannot be referenced by path; give it a registry id
instead (``with_node("n", fn, ref="myns.name")``).

Resolving a ref imports its module and later calls what it names, so an IR file is code:
loading one from someone else runs whatever it points at. :func:`trusted_modules` limits
resolution to modules you name (``docs/trust.md``).
"""

from __future__ import annotations

import builtins
import contextlib
import contextvars
import importlib
import inspect
from collections.abc import Iterable, Iterator
from typing import Any

from stargraph.errors import Problem

__all__ = ["ref_of", "resolve_ref", "trusted_modules", "try_ref_of"]

# The module prefixes refs may resolve under, or None for no restriction (the default).
_TRUSTED: contextvars.ContextVar[tuple[str, ...] | None] = contextvars.ContextVar(
    "stargraph_trusted_modules", default=None
)


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
        # The object is already in hand: naming it is not resolving a ref from outside, so
        # trusted_modules() does not apply here.
        found = _import(module, qualname)
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


@contextlib.contextmanager
def trusted_modules(*prefixes: str) -> Iterator[tuple[str, ...]]:
    """Within the block, refs resolve only to objects defined under these module prefixes.

    ``trusted_modules("myapp", "stargraph")`` admits ``myapp``, ``myapp.nodes`` and
    ``stargraph.skills.react``, but not ``myapp_evil``, ``os`` or ``subprocess``. A ref
    outside them raises :class:`~stargraph.errors.UntrustedRefError` naming it, *before*
    its module is imported. The check also refuses a ref that reaches another module through
    a trusted one (``myapp:os.system`` when ``myapp`` imports ``os``) or names an object
    defined elsewhere (``myapp:run`` after ``from subprocess import run``). Exception
    classes from ``builtins`` (``builtins:TimeoutError`` in a retry policy) are always
    allowed; nothing else from ``builtins`` is.

    Nested blocks narrow: a ref must be trusted by every enclosing block. The restriction is
    per thread and per asyncio task (a context variable), so wrap the code that loads and
    compiles the IR, in the thread that runs it.

    >>> from stargraph.errors import UntrustedRefError
    >>> with trusted_modules("stargraph"):
    ...     resolve_ref("stargraph.refs:resolve_ref") is resolve_ref
    True
    >>> with trusted_modules("stargraph"):
    ...     resolve_ref("os:system")
    Traceback (most recent call last):
    ...
    stargraph.errors.UntrustedRefError: ref 'os:system' is invalid: ...
    """
    cleaned = tuple(p.strip(".") for p in prefixes)
    if not cleaned or any(not p for p in cleaned):
        raise ValueError("trusted_modules needs module prefixes such as 'myapp'")
    outer = _TRUSTED.get()
    token = _TRUSTED.set(cleaned if outer is None else _narrow(outer, cleaned))
    try:
        yield cleaned
    finally:
        _TRUSTED.reset(token)


def _narrow(outer: tuple[str, ...], inner: tuple[str, ...]) -> tuple[str, ...]:
    """Prefixes trusted by both: each inner prefix that lies under an outer one, and each
    outer prefix that lies under an inner one."""
    both = {p for p in inner if _under(p, outer)} | {p for p in outer if _under(p, inner)}
    return tuple(sorted(both)) or ("",)  # ("",) trusts nothing: no module is named ""


def _under(module: str, prefixes: Iterable[str]) -> bool:
    return any(p and (module == p or module.startswith(p + ".")) for p in prefixes)


def _untrusted(ref: str, why: str, trusted: tuple[str, ...]) -> Exception:
    from stargraph.errors import UntrustedRefError

    names = ", ".join(repr(p) for p in trusted if p) or "none"
    return UntrustedRefError(
        [
            Problem(
                ref,
                f"{why}; only modules under {names} are trusted here, and resolving a ref "
                "imports its module and later calls what it names",
                "load IR files only from people you trust; if this module is yours, add it "
                "to trusted_modules(...)",
            )
        ],
        subject=f"ref {ref!r}",
    )


def resolve_ref(ref: str) -> Any:
    """Import ``module:qualname`` and return the object; ``ImportError``/``AttributeError``
    propagate so the caller can report the culprit.

    Inside :func:`trusted_modules`, a ref outside the trusted modules raises
    :class:`~stargraph.errors.UntrustedRefError` (an ``ImportError``) and imports nothing.
    """
    module_name, sep, qualname = ref.partition(":")
    if not sep or not module_name or not qualname:
        raise ImportError(f"{ref!r} is not of the form 'module:qualname'")
    trusted = _TRUSTED.get()
    if trusted is None:
        return _import(module_name, qualname)
    return _resolve_trusted(ref, module_name, qualname, trusted)


def _import(module_name: str, qualname: str) -> Any:
    obj: Any = importlib.import_module(module_name)
    for part in qualname.split("."):
        obj = getattr(obj, part)
    return obj


def _resolve_trusted(ref: str, module_name: str, qualname: str, trusted: tuple[str, ...]) -> Any:
    if module_name == "builtins":
        found = getattr(builtins, qualname, None) if "." not in qualname else None
        if inspect.isclass(found) and issubclass(found, BaseException):
            return found
        raise _untrusted(ref, "only exception classes may be named from builtins", trusted)
    if not _under(module_name, trusted):
        raise _untrusted(ref, f"module {module_name!r} is not trusted", trusted)
    obj: Any = importlib.import_module(module_name)
    for part in qualname.split("."):
        obj = getattr(obj, part)
        if inspect.ismodule(obj):
            raise _untrusted(ref, f"{part!r} is a module reached through {module_name!r}", trusted)
    defined_in = getattr(obj, "__module__", None)
    if isinstance(defined_in, str) and not _under(defined_in, trusted):
        raise _untrusted(ref, f"it names an object defined in {defined_in!r}", trusted)
    return obj
