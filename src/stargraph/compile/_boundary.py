"""Compiling a graph's boundary: its input and output models and its private channels."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from pydantic import BaseModel

from stargraph.errors import Problem
from stargraph.ir import GraphIR
from stargraph.refs import resolve_ref
from stargraph.runtime._schemas import schema_problems_of

__all__ = ["Boundary", "boundary_of"]


class Boundary:
    """The resolved boundary of a graph (what ``Plan`` is given)."""

    __slots__ = ("input_model", "managed", "output_model", "private")

    def __init__(
        self,
        input_model: type[BaseModel] | None,
        output_model: type[BaseModel] | None,
        private: Mapping[str, Any],
        managed: frozenset[str] = frozenset(),
    ) -> None:
        self.input_model = input_model
        self.output_model = output_model
        # Name -> default of every channel that never crosses the boundary: the private
        # channels and the managed values (which no input sets and no output shows).
        self.private = private
        self.managed = managed


def _model(
    ref: str | None, label: str, impls: Mapping[str, Callable[..., Any]], problems: list[Problem]
) -> type[BaseModel] | None:
    if ref is None:
        return None
    try:
        found = impls[ref] if ref in impls else resolve_ref(ref)
    except (ImportError, AttributeError) as exc:
        problems.append(
            Problem(
                f"/{label}_model",
                f"the {label} model {ref!r} cannot be imported: {exc}",
                "make its module importable, or define the model at module level",
            )
        )
        return None
    if not (isinstance(found, type) and issubclass(found, BaseModel)):
        problems.append(
            Problem(f"/{label}_model", f"{ref!r} is not a pydantic model", "name a BaseModel")
        )
        return None
    return found


def boundary_of(
    ir: GraphIR, state: type[BaseModel], impls: Mapping[str, Callable[..., Any]]
) -> tuple[list[Problem], Boundary]:
    """The graph's boundary, and what is wrong with it."""
    problems: list[Problem] = []
    input_model = _model(ir.input_model, "input", impls, problems)
    output_model = _model(ir.output_model, "output", impls, problems)
    private = {
        f.name: state.model_fields[f.name].get_default(call_default_factory=True)
        for f in ir.state.fields
        if (f.private or f.managed) and f.name in state.model_fields
    }
    managed = frozenset(f.name for f in ir.state.fields if f.managed)
    for f in ir.state.fields:
        if f.managed and f.type != "int":
            problems.append(
                Problem(
                    f"/state/fields/{f.name}",
                    f"field {f.name!r} is marked RemainingSteps but its type is {f.type}; "
                    "the steps left are an int",
                    f"declare {f.name}: Annotated[int, RemainingSteps] = 0",
                )
            )
    problems.extend(schema_problems_of(state, frozenset(private), input_model, output_model))
    return problems, Boundary(input_model, output_model, private, managed)
