"""References from the IR to Python objects: ``module:qualname`` import paths.

The IR never holds Python objects, only references, so a graph can be saved, hashed, sent to
another process and loaded again. A callable that has no stable import path (a lambda, a
closure, a method of a local class) cannot be referenced by path; give it a registry id
instead (``with_node("n", fn, ref="myns.name")``).

A script run as ``python triage.py`` is the module ``__main__``, a name no other process can
import. Refs never say ``__main__``: they name the module the script's file is importable as
(``triage:classify``), so the graph hashes the same whether it was built by the script or
imported by ``stargraph run triage:graph``; in the script's own process such a ref resolves to
the running ``__main__`` module (the file is not imported, and run, a second time).

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
import keyword
import sys
from collections.abc import Iterable, Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

from stargraph.errors import CompileError, Problem

__all__ = [
    "importable_name",
    "module_name_for_file",
    "ref_of",
    "resolve_ref",
    "trusted_modules",
    "try_ref_of",
]

# The module prefixes refs may resolve under, or None for no restriction (the default).
_TRUSTED: contextvars.ContextVar[tuple[str, ...] | None] = contextvars.ContextVar(
    "stargraph_trusted_modules", default=None
)


def module_name_for_file(path: str | Path) -> tuple[str, Path] | None:
    """The dotted module name a ``.py`` file is imported as, and the folder that must be on
    ``sys.path`` for that; ``None`` when no import statement can name it.

    Folders holding an ``__init__.py`` are packages, so ``app/flows/triage.py`` inside package
    ``app`` is ``app.flows.triage`` under the folder above ``app``; a file outside a package
    is its stem. A name part that is not an identifier (``my-flow.py``) has no import name.
    """
    file = Path(path).resolve()
    if file.suffix != ".py":
        return None
    parts = [] if file.stem == "__init__" else [file.stem]
    folder = file.parent
    while (folder / "__init__.py").is_file() and folder.parent != folder:
        parts.insert(0, folder.name)
        folder = folder.parent
    if not parts or not all(p.isidentifier() and not keyword.iskeyword(p) for p in parts):
        return None
    return ".".join(parts), folder


# __main__'s importable name, by the script's path (the path walk costs a few stat calls).
_MAIN_NAMES: dict[str, str | None] = {}


def _main_name() -> str | None:
    """The name the running ``__main__`` module is importable as, if it has one."""
    main = sys.modules.get("__main__")
    spec = getattr(main, "__spec__", None)
    name = getattr(spec, "name", None)
    if isinstance(name, str) and name and name != "__main__":
        return name  # python -m pkg.mod: the module's own name
    file = getattr(main, "__file__", None)
    if not isinstance(file, str) or not file:
        return None  # an interactive session, python -c, a notebook: nothing to import
    if file not in _MAIN_NAMES:
        found = module_name_for_file(file)
        _MAIN_NAMES[file] = found[0] if found is not None else None
    return _MAIN_NAMES[file]


def importable_name(module: str) -> str:
    """``module``, except that ``__main__`` becomes the name its file is importable as.

    ``python triage.py`` runs ``triage.py`` as ``__main__``; its functions are named
    ``triage:...`` so another process (``stargraph resume``, a worker) finds them. A
    ``__main__`` without an importable file (``python -c``, a notebook, ``my-flow.py``)
    stays ``__main__``.
    """
    if module != "__main__":
        return module
    return _main_name() or module


def _module(name: str) -> ModuleType:
    """Import ``name``; the script running as ``__main__`` answers for its own name."""
    found = sys.modules.get(name)
    if found is not None:
        return found
    if name != "__main__" and name == _main_name():
        return sys.modules["__main__"]
    return importlib.import_module(name)


def try_ref_of(obj: Any) -> str | Problem:
    """``module:qualname`` of ``obj``, or a :class:`Problem` saying why it has none.

    An object defined by a script run as ``__main__`` is named by the module the script is
    importable as (see :func:`importable_name`).
    """
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
    module = importable_name(module)
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
    defined elsewhere (``myapp:run`` after ``from subprocess import run``), and one that
    walks attributes through an object that names no defining module (a function's
    ``__builtins__`` dict, a bound method of a builtin object). Exception
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
        raise CompileError.at(
            "trusted_modules()",
            "needs module prefixes",
            "e.g. trusted_modules('myapp')",
            subject="trusted_modules",
        )
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
    return UntrustedRefError.at(
        ref,
        f"{why}; only modules under {names} are trusted here, and resolving a ref "
        "imports its module and later calls what it names",
        "load IR files only from people you trust; if this module is yours, add it "
        "to trusted_modules(...)",
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
    obj: Any = _module(module_name)
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
    obj: Any = _module(module_name)
    for part in qualname.split("."):
        obj = getattr(obj, part)
        if inspect.ismodule(obj):
            raise _untrusted(ref, f"{part!r} is a module reached through {module_name!r}", trusted)
        # Every object on the way must say where it is defined, and be defined under a
        # trusted module: a builtins dict, a bound method of a builtin object or a code
        # object says nothing, and attributes walked through one reach anything.
        defined_in = getattr(obj, "__module__", None)
        if not isinstance(defined_in, str):
            raise _untrusted(
                ref,
                f"{part!r} is a {type(obj).__name__!r} object reached through {module_name!r} that "
                "names no module it is defined in",
                trusted,
            )
        if not _under(importable_name(defined_in), trusted):
            raise _untrusted(ref, f"it names an object defined in {defined_in!r}", trusted)
    return obj
