"""Compiling node input models (``with_node(..., input=Model)``; see ``runtime._inputs``)."""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping
from typing import Any

from pydantic import BaseModel

from stargraph.errors import Problem, UntrustedRefError
from stargraph.ir import FunctionNodeIR, GraphIR
from stargraph.refs import resolve_ref

__all__ = ["input_models"]


def _resolve(ref: str, impls: Mapping[str, Callable[..., Any]]) -> Any:
    """The object ``ref`` names, or a ``(message, hint)`` pair saying why there is none."""
    if ref in impls:
        return impls[ref]
    if ":" not in ref:
        return (
            f"input model ref {ref!r} is a registry id that nothing registered",
            f"supply it with Graph(ir, impls={{{ref!r}: Model}})",
        )
    try:
        return resolve_ref(ref)
    except UntrustedRefError as exc:
        refused = exc.problems[0]
        return (f"input model ref {refused.pointer}: {refused.message}", refused.hint)
    except (ImportError, AttributeError) as exc:
        return (
            f"input model ref {ref!r} cannot be imported: {exc}",
            "check the module path and name, and that the module is importable",
        )


def input_models(
    ir: GraphIR,
    impls: Mapping[str, Callable[..., Any]],
    problems: list[Problem],
    *,
    remote: bool,
) -> dict[str, type[BaseModel]]:
    """The input model of each node that declares one, by node id; every problem (a ref
    that does not resolve to a pydantic model, a node the executor would run remotely) is
    appended to ``problems``."""
    models: dict[str, type[BaseModel]] = {}
    for i, node in enumerate(ir.nodes):
        if not isinstance(node, FunctionNodeIR) or node.input is None:
            continue
        where = f"/nodes/{i}/input"
        found = _resolve(node.input, impls)
        if isinstance(found, tuple):
            problems.append(Problem(where, found[0], found[1]))
            continue
        if not (inspect.isclass(found) and issubclass(found, BaseModel)):
            problems.append(
                Problem(
                    where,
                    f"input model ref {node.input!r} of node {node.id!r} is not a pydantic model",
                    "point it at a BaseModel subclass",
                )
            )
            continue
        if remote and node.blocking:
            # A worker process rebuilds the state from the payload's state fields only.
            problems.append(
                Problem(
                    where,
                    f"node {node.id!r} has an input model and blocking=True, so "
                    "compile(executor=...) would run it in another process, which gets state "
                    "fields only",
                    "pass blocking=False for this node (it then runs in this process)",
                )
            )
            continue
        models[node.id] = found
    return models
