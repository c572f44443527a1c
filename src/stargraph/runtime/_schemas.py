"""A graph's input and output schemas, and its private channels.

``Graph(name, state=S, input=In, output=Out)`` says what a caller may hand a run and what a
run hands back: ``invoke``/``resume`` validate their input against ``In`` (whose fields are
state fields) and return an ``Out`` instance built from the final state's fields ``Out``
declares. Both models are named by import path in the IR, so they are part of the graph hash.

A state field annotated ``Annotated[T, Private]`` is a **private channel**: nodes that declare
it - a node whose ``input=`` model names it, or whose ``writes=`` lists it - see and write its
value; every other node sees its default, the graph's input may not set it, and the run's
output never holds it (it is reset to its default in the returned state, and an ``output=``
model may not name it). The checkpoint keeps its value, since a resumed run needs it.

A state field annotated ``Annotated[int, RemainingSteps]`` is a **managed value** (LangGraph's
``RemainingSteps``): no node writes it; every node sees it holding the run's step budget left
after the node's step (``ctx.remaining_steps``), so a loop can wind down before
:class:`~stargraph.errors.StepLimitExceeded`. Like a private channel it never crosses the
boundary: the input may not set it and the output holds its default. What a node sees is a
function of the step and the run's ``max_steps``, both recorded, so resume and replay see the
same values.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Mapping
from typing import Any, Final

from pydantic import BaseModel, ValidationError

from stargraph.errors import InvalidInputError, Problem, ReplayMissError

__all__ = [
    "Private",
    "RemainingSteps",
    "boundary_input",
    "graph_input",
    "graph_output",
    "hide_private",
    "fill_managed",
    "fill_managed_router",
    "is_managed_marker",
    "is_private_marker",
    "schema_problems_of",
]


class _PrivateMarker:
    """The type of :data:`Private`."""

    __stargraph_private__ = True

    def __repr__(self) -> str:
        return "Private"


Private: Final = _PrivateMarker()
"""Mark a state field as a private channel: ``secret: Annotated[str, Private] = ""``."""


class _RemainingStepsMarker:
    """The type of :data:`RemainingSteps`."""

    __stargraph_managed__ = "remaining_steps"

    def __repr__(self) -> str:
        return "RemainingSteps"


MANAGED_CALL: Final = "managed"
"""The kind of the journaled call that records what a managed value showed a node."""

RemainingSteps: Final = _RemainingStepsMarker()
"""Mark an ``int`` state field as the step budget left, filled in for every node:
``steps_left: Annotated[int, RemainingSteps] = 0`` (LangGraph's ``RemainingSteps``)."""


def is_managed_marker(meta: Any) -> bool:
    """Whether a field's metadata item is a managed value's marker (:data:`RemainingSteps`)."""
    return isinstance(getattr(type(meta), "__stargraph_managed__", None), str)


def is_private_marker(meta: Any) -> bool:
    """Whether a field's metadata item is :data:`Private`."""
    return bool(getattr(type(meta), "__stargraph_private__", False))


def graph_input(model: type[BaseModel], input: Any, run_id: str | None) -> Any:
    """``input`` validated against the graph's input model, as the channel values it sets."""
    if input is None:
        return None
    if isinstance(input, model):
        return input.model_dump(exclude_unset=True)
    if not isinstance(input, Mapping):
        return input  # a state instance: the state model's own checks apply
    unknown = sorted(str(k) for k in input if k not in model.model_fields)
    if unknown:
        raise InvalidInputError(
            f"input{f' of run {run_id!r}' if run_id else ''} has keys {unknown} that the "
            f"graph's input model {model.__name__} has no field for; its fields are "
            f"{', '.join(sorted(model.model_fields))} (pass only those: the other state "
            "channels are the graph's own)",
            run_id=run_id,
            step=0,
        )
    try:
        return model.model_validate(dict(input)).model_dump(exclude_unset=True)
    except ValidationError as exc:
        raise InvalidInputError(
            f"input{f' of run {run_id!r}' if run_id else ''} does not fit the graph's input "
            f"model {model.__name__}: {exc.errors(include_url=False)} (fix the values)",
            run_id=run_id,
            step=0,
        ) from exc


def boundary_input(
    input_model: type[BaseModel] | None, private: Mapping[str, Any], input: Any, run_id: str | None
) -> Any:
    """A run's ``input`` as the graph's boundary admits it: validated against the input model,
    and never setting a private channel."""
    if input_model is not None:
        input = graph_input(input_model, input, run_id)
    if private and isinstance(input, Mapping):
        inside = sorted(str(k) for k in input if k in private)
        if inside:
            raise InvalidInputError(
                f"input{f' of run {run_id!r}' if run_id else ''} sets {inside}, private "
                "channels or managed values of the graph, which only the graph sets (drop "
                "them from the input)",
                run_id=run_id,
                step=0,
            )
    return input


def graph_output(
    state: BaseModel, output: type[BaseModel] | None, private: Mapping[str, Any]
) -> BaseModel:
    """What a run hands back: an ``output`` instance, or the state with private channels
    reset to their defaults (``private``: name -> default)."""
    if output is not None:
        return output.model_validate({name: getattr(state, name) for name in output.model_fields})
    if private:
        return state.model_copy(update=dict(private))
    return state


def hide_private(
    fn: Callable[..., Any], private: Mapping[str, Any], takes_ctx: bool
) -> Callable[..., Any]:
    """``fn`` seeing the state with the private channels it does not declare at defaults."""
    update = dict(private)
    if takes_ctx:

        def with_ctx(state: Any, ctx: Any) -> Any:
            return fn(state.model_copy(update=update), ctx)

        return functools.update_wrapper(with_ctx, fn)

    def plain(state: Any) -> Any:
        return fn(state.model_copy(update=update))

    return functools.update_wrapper(plain, fn)


def fill_managed(
    fn: Callable[..., Any], managed: frozenset[str], takes_ctx: bool
) -> Callable[[Any, Any], Any]:
    """``fn`` seeing its managed fields filled with the steps left, taking ``(state, ctx)``.

    The value is read through the run's record: a resumed run may be given another
    ``max_steps`` and a replay runs to the recorded last step, but a re-executed or replayed
    step must see what the live step saw."""

    def seen(state: Any, ctx: Any) -> Any:
        try:
            left = ctx.record_call(
                MANAGED_CALL, "remaining_steps", None, lambda: ctx.remaining_steps
            )
        except ReplayMissError:
            # A node the record never ran (a new region replayed against another graph
            # version): the value is the run's own count, nothing outside it, so it is computed.
            left = ctx.remaining_steps
        return state.model_copy(update=dict.fromkeys(managed, left))

    if inspect.iscoroutinefunction(inspect.unwrap(fn)):

        async def afilled(state: Any, ctx: Any) -> Any:
            view = seen(state, ctx)
            return await (fn(view, ctx) if takes_ctx else fn(view))

        return functools.update_wrapper(afilled, fn)

    def filled(state: Any, ctx: Any) -> Any:
        view = seen(state, ctx)
        return fn(view, ctx) if takes_ctx else fn(view)

    return functools.update_wrapper(filled, fn)


def fill_managed_router(
    fn: Callable[..., Any], managed: frozenset[str], takes_ctx: bool
) -> Callable[[Any, Any], Any]:
    """Router ``fn`` seeing its managed fields filled with the steps left after the step of
    the node it follows (what that node saw), taking ``(state, ctx)``. Routers are not
    journaled: a resumed run routes by its own step budget, as its step limit applies."""

    def seen(state: Any, ctx: Any) -> Any:
        return state.model_copy(update=dict.fromkeys(managed, ctx.remaining_steps))

    if inspect.iscoroutinefunction(inspect.unwrap(fn)):

        async def afilled(state: Any, ctx: Any) -> Any:
            view = seen(state, ctx)
            return await (fn(view, ctx) if takes_ctx else fn(view))

        return functools.update_wrapper(afilled, fn)

    def filled(state: Any, ctx: Any) -> Any:
        view = seen(state, ctx)
        return fn(view, ctx) if takes_ctx else fn(view)

    return functools.update_wrapper(filled, fn)


def schema_problems_of(
    state: type[BaseModel],
    private: frozenset[str],
    input: type[BaseModel] | None,
    output: type[BaseModel] | None,
) -> list[Problem]:
    """Fields of the input and output models that are not public state fields."""
    problems = []
    for label, model in (("input", input), ("output", output)):
        if model is None:
            continue
        for name in model.model_fields:
            if name not in state.model_fields:
                problems.append(
                    Problem(
                        f"/{label}_model",
                        f"the {label} model {model.__name__} has field {name!r}, which is "
                        f"not a channel of the state {state.__name__}",
                        f"add {name!r} to the state model or remove it from {model.__name__}",
                    )
                )
            elif name in private:
                problems.append(
                    Problem(
                        f"/{label}_model",
                        f"the {label} model {model.__name__} has field {name!r}, a private "
                        "channel, which never crosses the graph's boundary",
                        f"drop {name!r} from {model.__name__}, or make the field public",
                    )
                )
    return problems
