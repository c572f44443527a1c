"""A sub-agent's skill workflow in phases: GATHER -> ANALYZE -> PLAN -> APPLY.

:func:`phased_graph` builds the workflow as a graph of four nodes, one per phase, run in that
order. Compiled with a checkpoint store, the engine commits a step when each phase ends, so
every phase boundary is a checkpoint in the run's history (:func:`phase_checkpoints` reads
them back), and a run that crashes inside a phase resumes with ``app.resume(run_id)`` at the
start of that phase: the phases before it are not run again.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, Final, TypeVar

from pydantic import BaseModel

from stargraph.graph import END, START, Graph
from stargraph.runtime import CompiledGraph

__all__ = ["PHASES", "Phase", "PhaseCheckpoint", "phase_checkpoints", "phased_graph"]

StateT = TypeVar("StateT", bound=BaseModel)


class Phase(StrEnum):
    """The phases of a sub-agent's task, in the order they run."""

    GATHER = "GATHER"
    """Collect what the task needs: files, memory, the parent's context."""
    ANALYZE = "ANALYZE"
    """Understand what was gathered."""
    PLAN = "PLAN"
    """Decide the changes."""
    APPLY = "APPLY"
    """Make them."""


PHASES: Final[tuple[Phase, ...]] = tuple(Phase)
"""The phases in order."""


@dataclass(frozen=True, slots=True)
class PhaseCheckpoint:
    """A phase boundary as the run's history holds it."""

    phase: Phase
    """The phase that ended."""
    step: int
    """The committed step that ended it (resume continues after it)."""


def phased_graph(
    name: str,
    *,
    state: type[StateT],
    gather: Callable[..., Any],
    analyze: Callable[..., Any],
    plan: Callable[..., Any],
    apply: Callable[..., Any],
) -> Graph[StateT]:
    """A graph running the four phase functions in order, one node (and so one checkpoint)
    per phase; the nodes are named by :class:`Phase`.

    Each function is a node function (``fn(state)`` or ``fn(state, ctx)`` returning channel
    writes), so it must be importable by reference like any node of a stored graph.
    """
    graph = Graph(name, state=state)
    for phase, fn in zip(PHASES, (gather, analyze, plan, apply), strict=True):
        graph = graph.with_node(phase.value, fn, metadata={"phase": phase.value})
    previous = START
    for phase in PHASES:
        graph = graph.with_edge(previous, phase.value)
        previous = phase.value
    return graph.with_edge(previous, END)


def phase_checkpoints(app: CompiledGraph[Any], run_id: str) -> list[PhaseCheckpoint]:
    """The phase boundaries run ``run_id`` has committed, oldest first: where it stands, and
    where a resume goes on from."""
    names = {p.value: p for p in PHASES}
    return [
        PhaseCheckpoint(names[write.node], record.step)
        for record in app.history(run_id)
        for write in record.writes
        if write.node in names
    ]
