"""Closures and factory products as graph nodes: what pins their behaviour in the hash.

A module-level function is named in the IR by its import path, and that path says which
behaviour runs. A closure (``make_agent("bob")``'s inner function) or a lambda has no such
path, and one path could not tell ``make_agent("bob")`` from ``make_agent("ada")`` anyway.
Its identity is instead a digest of

* its **code**: the function's code object - bytecode, constants (nested functions' code
  included), names, argument layout and flags. File names and line numbers are left out, so
  moving the function within its file does not change the digest; editing its body, its
  docstring or a literal in it does. Bytecode differs between Python versions (3.11 vs 3.12),
  so the digest is stable across processes and machines of one Python version, not across
  versions;
* its **captured values**: closure cells and default arguments, each of which must be JSON
  (``None``, booleans, numbers, strings, lists, tuples, dicts with string keys, sets), a
  pydantic model (its class's import path and canonical JSON: a ``ToolSpec`` is one), an
  object with a ``graph_hash`` (a ``Graph``, ``GraphIR`` or compiled graph), an enum member,
  a ``@tool`` (its spec's hash and its body's import path), a module-level function, class
  or object (by import path), another closure (by its own digest), or any object declaring
  ``__stargraph_identity__(self)`` that returns JSON. Anything else is refused, naming the
  variable, because two runs could not tell whether it changed.

A closure node resumes in another process only when the IR says how to build it again:
``with_node(id, factory=(make_agent, {"name": "bob"}))`` records the factory's import path and
its JSON arguments, and compiling that IR elsewhere calls the factory and checks that the
product's digest is the recorded one.
"""

from __future__ import annotations

import enum
import hashlib
import inspect
import types
from collections.abc import Callable, Mapping
from typing import Any, Final

import orjson
from pydantic import BaseModel

from stargraph.errors import Problem, UnreferenceableNodeError
from stargraph.refs import importable_name, resolve_ref, try_ref_of

__all__ = [
    "closure_digest",
    "closure_ref",
    "module_global_ref",
    "node_closure",
    "rebuild_closure",
    "unhashable_capture",
]

_IDENTITY: Final = "__stargraph_identity__"
"""The method an object defines to say what it is, as JSON, when a closure captures it."""

_MAX_DEPTH: Final = 32


class _Unhashable(Exception):
    """A captured value the digest cannot cover; ``path`` names where it sits."""

    def __init__(self, path: str, kind: str) -> None:
        super().__init__(path)
        self.path = path
        self.kind = kind


def _const(value: Any) -> Any:
    """A code constant as tagged JSON (frozensets sorted: their order follows the hash seed)."""
    if isinstance(value, types.CodeType):
        return ["code", _code(value)]
    if value is None or value is Ellipsis or isinstance(value, bool):
        return ["k", repr(value)]
    if isinstance(value, int):
        return ["i", str(value)]
    if isinstance(value, float):
        return ["f", value.hex()]
    if isinstance(value, complex):
        return ["z", value.real.hex(), value.imag.hex()]
    if isinstance(value, str):
        return ["s", value]
    if isinstance(value, bytes):
        return ["b", value.hex()]
    if isinstance(value, tuple):
        return ["t", [_const(v) for v in value]]
    if isinstance(value, frozenset):
        return ["fs", sorted((_const(v) for v in value), key=orjson.dumps)]
    return ["r", repr(value)]  # no other constant kind exists today


def _code(code: types.CodeType) -> list[Any]:
    return [
        code.co_name,
        code.co_argcount,
        code.co_posonlyargcount,
        code.co_kwonlyargcount,
        code.co_flags,
        code.co_code.hex(),
        [_const(c) for c in code.co_consts],
        list(code.co_names),
        list(code.co_varnames),
        list(code.co_freevars),
        list(code.co_cellvars),
    ]


def _value(value: Any, path: str, seen: dict[int, str], depth: int) -> Any:
    """A captured value as tagged JSON, or :class:`_Unhashable` naming where it failed."""
    if depth > _MAX_DEPTH:
        raise _Unhashable(path, "a value nested too deeply")
    if value is None or isinstance(value, bool | str):
        return value
    if isinstance(value, enum.Enum):
        return ["enum", _ref(type(value), path), value.name]
    if isinstance(value, int):
        return ["int", str(value)]
    if isinstance(value, float):
        return ["float", value.hex()]
    identity = getattr(type(value), _IDENTITY, None)
    if identity is not None and not isinstance(value, type):
        declared = identity(value)
        return ["identity", _ref(type(value), path), _value(declared, path, seen, depth + 1)]
    if isinstance(value, list | tuple):
        return ["seq", [_value(v, f"{path}[{i}]", seen, depth + 1) for i, v in enumerate(value)]]
    if isinstance(value, dict):
        if not all(isinstance(k, str) for k in value):
            raise _Unhashable(path, "a dict with keys that are not strings")
        return ["map", {k: _value(v, f"{path}[{k!r}]", seen, depth + 1) for k, v in value.items()}]
    if isinstance(value, set | frozenset):
        items = [_value(v, f"{path}{{}}", seen, depth + 1) for v in value]
        return ["set", sorted(items, key=orjson.dumps)]
    if isinstance(value, BaseModel):
        return ["model", _ref(type(value), path), value.model_dump(mode="json")]
    graph_hash = getattr(value, "graph_hash", None)
    if isinstance(graph_hash, str) and not isinstance(value, type):
        return ["graph", graph_hash]
    if isinstance(value, types.FunctionType):
        found = try_ref_of(value)
        if isinstance(found, str):
            return ["ref", found]
        if id(value) in seen:  # a closure that calls itself (or one that calls it back)
            return ["again", seen[id(value)]]
        return ["fn", _function(value, path, seen, depth + 1)]
    if isinstance(value, type | types.BuiltinFunctionType):
        return ["ref", _ref(value, path)]
    if isinstance(value, types.ModuleType):
        return ["module", importable_name(value.__name__)]
    spec = getattr(value, "spec", None)
    spec_hash = getattr(spec, "spec_hash", None)
    if isinstance(spec, BaseModel) and isinstance(spec_hash, str):
        # A @tool: its spec (the contract) and the import path of its body.
        return ["tool", spec_hash, str(getattr(value, "source", ""))]
    named = try_ref_of(value)
    if isinstance(named, str):  # a module-level object, importable by this name
        return ["ref", named]
    raise _Unhashable(path, f"a {type(value).__qualname__!r} object")


def _ref(obj: Any, path: str) -> str:
    found = try_ref_of(obj)
    if isinstance(found, Problem):
        raise _Unhashable(path, f"{obj!r}, which has no import path")
    return found


def _cell(cell: types.CellType) -> tuple[bool, Any]:
    try:
        return True, cell.cell_contents
    except ValueError:  # a cell not assigned yet: the variable is bound later
        return False, None


def _function(fn: types.FunctionType, path: str, seen: dict[int, str], depth: int) -> Any:
    seen[id(fn)] = path or fn.__qualname__
    cells = {}
    for name, cell in zip(fn.__code__.co_freevars, fn.__closure__ or (), strict=True):
        filled, value = _cell(cell)
        where = f"{path}.{name}" if path else name
        cells[name] = _value(value, where, seen, depth) if filled else ["unset"]
    defaults = [
        _value(v, f"{path}(default {i})" if path else f"default {i}", seen, depth)
        for i, v in enumerate(fn.__defaults__ or ())
    ]
    kwdefaults = {
        k: _value(v, f"{path}.{k}" if path else k, seen, depth)
        for k, v in (fn.__kwdefaults__ or {}).items()
    }
    return [_code(fn.__code__), cells, defaults, kwdefaults]


def _plain_function(fn: Any) -> types.FunctionType | None:
    target = inspect.unwrap(fn)
    return target if isinstance(target, types.FunctionType) else None


def closure_digest(fn: Callable[..., Any]) -> str:
    """``sha256:`` of ``fn``'s code and captured values; raises ``_Unhashable`` (caught by
    :func:`unhashable_capture`) for a capture it cannot cover."""
    target = _plain_function(fn)
    if target is None:
        raise _Unhashable("", f"a {type(fn).__qualname__!r} object, not a Python function")
    view = _function(target, "", {}, 0)
    digest = hashlib.sha256(orjson.dumps(view, option=orjson.OPT_SORT_KEYS)).hexdigest()
    return f"sha256:{digest}"


def module_global_ref(fn: Callable[..., Any]) -> str | None:
    """``module:name`` when ``fn`` (a lambda, say) is bound to exactly one global name of the
    module it was defined in, so importing that name gives it back."""
    module = inspect.getmodule(fn)
    if module is None:
        return None
    names = [name for name, value in vars(module).items() if value is fn]
    if len(names) != 1 or not names[0].isidentifier():
        return None
    return f"{importable_name(module.__name__)}:{names[0]}"


def closure_ref(fn: Callable[..., Any], digest: str) -> str:
    """The registry id a closure node is known by: where it was defined and its digest (two
    products of one factory in a graph are told apart)."""
    module = importable_name(str(getattr(fn, "__module__", "?")))
    return f"{module}:{getattr(fn, '__qualname__', '?')}#{digest.removeprefix('sha256:')[:16]}"


def unhashable_capture(fn: Callable[..., Any], pointer: str, subject: str) -> str:
    """``fn``'s digest, or the :class:`~stargraph.errors.UnreferenceableNodeError` naming the
    captured variable that cannot be hashed and what to do."""
    try:
        return closure_digest(fn)
    except _Unhashable as exc:
        where = f"captured variable {exc.path!r}" if exc.path else "it"
        raise UnreferenceableNodeError.at(
            pointer,
            f"{getattr(fn, '__qualname__', fn)!r} is a closure and {where} is {exc.kind}, "
            "which the graph hash cannot cover",
            "capture JSON values, pydantic models, graphs or module-level functions only, give "
            "the object a __stargraph_identity__(self) method returning JSON, or pass "
            "ref='ns.name' to name the callable yourself (its captures then go unhashed)",
            subject=subject,
        ) from None


def rebuild_closure(
    factory: str, args: Mapping[str, Any], digest: str, where: str, what: str
) -> Callable[..., Any] | Problem:
    """Call ``factory(**args)`` and check that its product is the closure the IR recorded."""
    try:
        make = resolve_ref(factory)
    except (ImportError, AttributeError) as exc:
        return Problem(
            where,
            f"{what}'s factory {factory!r} cannot be imported: {exc}",
            "make the factory's module importable here, or supply the node with "
            "Graph(ir, impls={...})",
        )
    try:
        product = make(**args)
    except Exception as exc:  # the factory's own failure, reported with the other problems
        return Problem(
            where,
            f"{what}'s factory {factory!r} raised {type(exc).__name__}: {exc}",
            "fix the factory, or the arguments the IR records for it",
        )
    if not callable(product):
        return Problem(
            where,
            f"{what}'s factory {factory!r} returned {type(product).__name__}, not a callable",
            "make the factory return the node function",
        )
    try:
        rebuilt = closure_digest(product)
    except _Unhashable as exc:
        return Problem(where, f"{what}'s rebuilt closure captures {exc.kind}", "capture JSON")
    if rebuilt != digest:
        return Problem(
            where,
            f"{what}'s factory {factory!r} builds a different closure here (recorded "
            f"{digest}, rebuilt {rebuilt}): its code or captured values changed",
            "rebuild the IR from the current code, or restore the factory as it was",
        )
    return product  # type: ignore[no-any-return]


def node_closure(
    ref: str,
    closure: Any,
    what: str,
    *,
    impls: Mapping[str, Callable[..., Any]],
    where: str,
    resolve: Callable[[], Callable[..., Any] | Problem],
) -> Callable[..., Any] | Problem:
    """The callable of a closure node or router (``closure`` set; ``what`` names it): from
    ``impls`` (built in this process), rebuilt by its factory, or imported by ``resolve``
    and checked against the digest; else the problem saying to give it a factory."""
    if ref in impls:
        return impls[ref]
    if closure.factory is not None:
        return rebuild_closure(closure.factory, closure.args, closure.code, where, what)
    if "#" in ref:
        return Problem(
            where,
            f"{what} is a closure ({ref}) that this IR cannot build again: it records "
            "no factory, and no impls supply it (in another process - a worker, "
            "'stargraph resume' - nothing can)",
            "build the node with with_node(id, factory=(make_fn, {json keyword args})) so any "
            "process can rebuild it, or supply it with Graph(ir, impls={ref: fn})",
        )
    found = resolve()
    if isinstance(found, Problem):
        return found
    try:
        digest = closure_digest(found)
    except _Unhashable as exc:
        return Problem(where, f"{what}'s imported function captures {exc.kind}", "capture JSON")
    if digest != closure.code:
        return Problem(
            where,
            f"{what}'s function {ref!r} is not the one the IR recorded (recorded "
            f"{closure.code}, imported {digest}): its code or captured values changed",
            "rebuild the IR from the current code, or restore the function as it was",
        )
    return found
