"""What a node's ``Command`` does to its run: the writes that carry where it goes.

A ``Command`` returned by a node becomes that task's writes, with where it goes under
``GOTO_KEY`` (or, for the parent graph of a child run, ``PARENT_KEY``): stored with the
step like any write, so a crashed step's pending writes and a replay's served writes route
as the live run did. The merge takes the routing out again (:func:`take_gotos`); the step's
scheduling adds it to what the edges chose.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, NamedTuple, Protocol

from pydantic_core import PydanticSerializationError, to_jsonable_python

from stargraph.errors import RunError
from stargraph.ir import END
from stargraph.runtime._plan import Command, Send, Task, by_task
from stargraph.runtime._values import GOTO_KEY, PARENT_KEY, ROUTING_KEYS

if TYPE_CHECKING:
    from stargraph.errors import InvalidWriteError, _RunAt
    from stargraph.runtime._plan import Plan

__all__ = ["commanded", "take_gotos"]


class Run(Protocol):
    """What of a run (``runtime._run.Run``, which imports this module) a Command uses."""

    run_id: str
    step: int
    path: tuple[str, ...]
    plan: Plan
    gotos: list[list[Any]] | None
    to_parent: bool
    collect: list[tuple[str, dict[str, Any]]] | None

    def where(self, node: str | None = None) -> _RunAt:
        """Where the run is, as a RunError's keywords."""
        ...

    def validate_writes(self, task: Task, result: Any) -> dict[str, Any]:
        """A task's return value, checked as writes."""
        ...

    def write_error(self, task: Task, what: str) -> InvalidWriteError:
        """An error about what the task wrote."""
        ...


def commanded(run: Run, task: Task, command: Command) -> dict[str, Any]:
    """A task's ``Command``: its update checked as any write, and where it goes kept
    under :data:`GOTO_KEY` with the writes, so the step's record (pending writes of a
    crashed step, the committed step a replay serves) holds the routing too."""
    if command.resume is not None or command.graph not in (None, Command.PARENT):
        what = "resume=" if command.resume is not None else f"graph={command.graph!r}"
        raise RunError(
            f"node {task.node!r} at step {run.step} of run {run.run_id!r} returned a "
            f"Command with {what}, which a node cannot use; return "
            "Command(update=..., goto=..., graph=Command.PARENT or None), and resume an "
            "interrupted run with resume(run_id, response)",
            **run.where(task.node),
        )
    if command.graph is not None:
        return {PARENT_KEY: _for_parent(run, task, command)}
    writes = {} if command.update is None else run.validate_writes(task, command.update)
    allowed = run.plan.specs[task.node].destinations
    targets = _targets_of(command.goto, lambda node: node in allowed or node == END)
    if isinstance(targets, _Refused):
        raise _bad_goto(run, task, targets.node, allowed)
    if targets:
        writes[GOTO_KEY] = targets
    return writes


def _for_parent(run: Run, task: Task, command: Command) -> dict[str, Any]:
    """A ``Command(graph=PARENT)``: for the subgraph node running this child run, which
    checks its update against the skill's outputs and its goto against its own
    destinations. Here: that there is a parent, and that it is JSON to store."""
    if not run.path:
        raise RunError(
            f"node {task.node!r} at step {run.step} of run {run.run_id!r} returned "
            "Command(graph=Command.PARENT), but the run is no subgraph's: there is no "
            "parent graph to route; drop graph= to route this graph",
            **run.where(task.node),
        )
    update = command.update or {}
    targets = _targets_of(command.goto, lambda node: node != END)
    if isinstance(targets, _Refused):
        raise RunError(
            f"node {task.node!r} at step {run.step} of run {run.run_id!r} returned "
            f"Command(graph=Command.PARENT) with goto={targets.node!r}; name nodes of the "
            "parent graph (or Send objects to them)",
            **run.where(task.node),
        )
    try:
        data = to_jsonable_python(dict(update))
    except PydanticSerializationError as exc:
        raise run.write_error(
            task,
            f"returned Command(graph=Command.PARENT) with an update that is not JSON "
            f"({exc}); send the parent JSON values",
        ) from exc
    return {"update": data, "goto": targets}


def _bad_goto(run: Run, task: Task, node: Any, allowed: frozenset[str]) -> RunError:
    declared = sorted(allowed)
    return RunError(
        f"node {task.node!r} at step {run.step} of run {run.run_id!r} returned a "
        f"Command with goto={node!r}, which is not one of its declared destinations "
        f"{declared}; declare it with with_node({task.node!r}, ..., "
        f"destinations=[{', '.join(repr(d) for d in [*declared, node] if d != END)}])",
        **run.where(task.node),
    )


def take_gotos(
    run: Run, results: Sequence[tuple[Task, dict[str, Any]]]
) -> Sequence[tuple[Task, dict[str, Any]]]:
    """Where the step's Commands go (into ``gotos``, in task order), and the writes
    without it to merge. The writes the step commits keep it: see :func:`commanded`."""
    gotos: list[list[Any]] = []
    merged: list[tuple[Task, dict[str, Any]]] = []
    for task, writes in sorted(results, key=by_task):
        if ROUTING_KEYS.isdisjoint(writes):
            merged.append((task, writes))
            continue
        channels = dict(writes)
        if GOTO_KEY in channels:
            gotos.append(channels.pop(GOTO_KEY))
        if PARENT_KEY in channels:
            # The child run ends here; its subgraph node finds the command among the
            # raw writes it projects (see stargraph.nodes._runner).
            run.to_parent = True
            if run.collect is not None:
                run.collect.append((task.node, {PARENT_KEY: channels.pop(PARENT_KEY)}))
            else:
                del channels[PARENT_KEY]
        merged.append((task, channels))
    run.gotos = gotos or None
    return merged


class _Refused(NamedTuple):
    """A goto target that may not be gone to."""

    node: Any


def _targets_of(goto: Any, allowed: Callable[[str], bool]) -> list[Any] | _Refused:
    """A Command's ``goto`` as stored: node ids and ``{"node", "payload"}`` sends (``END``
    dropped), or the first target ``allowed`` refuses (a ``Send`` never goes to ``END``)."""
    items = [goto] if isinstance(goto, str | Send) else list(goto)
    targets: list[Any] = []
    for item in items:
        node = item.node if isinstance(item, Send) else item
        if not isinstance(node, str) or not allowed(node):
            return _Refused(node)
        if isinstance(item, Send):
            if node == END:
                return _Refused(node)
            targets.append({"node": node, "payload": dict(item.payload)})
        elif node != END:
            targets.append(node)
    return targets
