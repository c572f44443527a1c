"""Private node input: a node may declare an input model instead of reading the state.

``with_node("work", fn, input=WorkItem)`` makes ``fn`` receive a ``WorkItem`` as its first
argument (``fn(item)`` or ``fn(item, ctx)``), like a LangGraph node with a private input
schema. The instance is validated from

- the task's ``Send`` payload, when it has one: ``Send("work", {"url": ..., "depth": 2})``
  may carry any keys ``WorkItem`` accepts, state fields or not (the payload is checkpointed
  with the pending task, so a resumed or replayed task gets the same input);
- otherwise (the node was reached by an edge, or sent an empty payload), the state's values
  of the fields ``WorkItem`` declares.

The node still *writes* state channels, validated as for any node. A payload that does not
fit the model is an :class:`~stargraph.errors.InvalidPayloadError` naming node, step and the
fields at fault, raised before the node runs.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel, ValidationError

from stargraph._typed import validate_raw
from stargraph.errors import InvalidPayloadError
from stargraph.runtime._plan import Task

__all__ = ["node_input"]


def _where(loc: tuple[int | str, ...]) -> str:
    return ".".join(str(part) for part in loc)


def node_input(
    values: Mapping[str, Any], task: Task, model: type[BaseModel], *, run_id: str, step: int
) -> BaseModel:
    """The validated input of ``task`` (at ``step`` of ``run_id``, whose state is ``values``),
    whose node declares ``model`` as its input."""
    if task.payload:
        data: Any = task.payload
        source = "the Send payload"
    else:
        data = {name: values[name] for name in model.model_fields if name in values}
        source = "the state"
    try:
        return validate_raw(model, data)
    except ValidationError as exc:
        errors = exc.errors()
        problems = "; ".join(f"{_where(e['loc']) or '<payload>'}: {e['msg']}" for e in errors)
        keys = sorted(map(str, data)) if isinstance(data, dict) else []
        raise InvalidPayloadError(
            f"node {task.node!r} at step {step} of run {run_id!r}: {source} "
            f"(keys {keys}) does not fit its input model {model.__name__}: {problems}; send a "
            f"payload that {model.__name__} accepts, e.g. Send({task.node!r}, "
            f"{{...fields of {model.__name__}...}})",
            run_id=run_id,
            step=step,
            node=task.node,
            field=_where(errors[0]["loc"]) if errors else "",
        ) from exc
