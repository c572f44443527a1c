"""The agent lifecycle as data, checked by the one state-machine validator.

The default is the seed's six states::

    PENDING -> INITIALIZING -> READY -> BUSY -> TERMINATED
       |            |            |        |
       +------------+------------+--------+--> FAILED

A lifecycle is a plain document (``initial_state`` and ``states`` with ``transitions`` of
``{on, to}`` and a ``terminal`` flag, the SkillSpec shape); :meth:`Lifecycle.from_data`
validates it with :func:`~stargraph.skills.machine.validate_machine`, so a custom lifecycle
is held to the same rules as every other machine.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, Final

from stargraph.errors import CompileError, LifecycleError, Problem
from stargraph.skills.machine._validate import MachineShape, StateShape, validate_machine

__all__ = ["DEFAULT_LIFECYCLE", "LIFECYCLE_DATA", "AgentState", "Lifecycle"]


class AgentState(StrEnum):
    """The states of the default lifecycle."""

    PENDING = "PENDING"
    """Agent id allocated; nothing started yet."""
    INITIALIZING = "INITIALIZING"
    """Loading skills and checking tool access."""
    READY = "READY"
    """Idle, waiting for a task."""
    BUSY = "BUSY"
    """Executing a task."""
    TERMINATED = "TERMINATED"
    """Done, resources released (terminal)."""
    FAILED = "FAILED"
    """Failed in some phase (terminal; retry with a new agent)."""


def _fail() -> dict[str, str]:
    return {"on": "fail", "to": "FAILED"}


LIFECYCLE_DATA: Final[Mapping[str, Any]] = {
    "initial_state": "PENDING",
    "states": {
        "PENDING": {"transitions": [{"on": "spawn", "to": "INITIALIZING"}, _fail()]},
        "INITIALIZING": {"transitions": [{"on": "ready", "to": "READY"}, _fail()]},
        "READY": {"transitions": [{"on": "assign", "to": "BUSY"}, _fail()]},
        "BUSY": {"transitions": [{"on": "terminate", "to": "TERMINATED"}, _fail()]},
        "TERMINATED": {"terminal": True},
        "FAILED": {"terminal": True},
    },
}
"""The seed's lifecycle as data: ``fail`` leads to ``FAILED`` from every non-terminal state."""


@dataclass(frozen=True)
class Lifecycle:
    """A validated lifecycle machine. Build it with :meth:`from_data`.

    >>> DEFAULT_LIFECYCLE.target("READY", "assign")
    'BUSY'
    >>> DEFAULT_LIFECYCLE.event_for("BUSY", "FAILED")
    'fail'
    """

    initial: str
    """The state a new agent starts in."""
    transitions: Mapping[str, Mapping[str, str]]
    """``state -> {event: next state}``."""
    terminal: frozenset[str]
    """States with no way out."""

    @classmethod
    def from_data(cls, data: Mapping[str, Any], *, where: str = "lifecycle") -> Lifecycle:
        """Validate a lifecycle document; ``CompileError`` lists every problem."""
        problems: list[Problem] = []
        initial = data.get("initial_state") if isinstance(data, Mapping) else None
        raw_states = data.get("states") if isinstance(data, Mapping) else None
        if not isinstance(initial, str):
            problems.append(Problem(f"{where}#/initial_state", "missing or not a string"))
        if not isinstance(raw_states, Mapping) or not raw_states:
            problems.append(Problem(f"{where}#/states", "missing or not a non-empty mapping"))
            raise CompileError(problems, subject="agent lifecycle")
        shapes: dict[str, StateShape] = {}
        for name, raw in raw_states.items():
            here = f"{where}#/states/{name}"
            if not isinstance(raw, Mapping):
                problems.append(Problem(here, "a state must be a mapping"))
                continue
            pairs: list[tuple[str, str]] = []
            for i, t in enumerate(raw.get("transitions", ())):
                if not (
                    isinstance(t, Mapping)
                    and isinstance(t.get("on"), str)
                    and isinstance(t.get("to"), str)
                ):
                    problems.append(Problem(f"{here}/transitions/{i}", "needs string on and to"))
                    continue
                pairs.append((t["on"], t["to"]))
            shapes[str(name)] = StateShape(pairs, bool(raw.get("terminal", False)))
        if isinstance(initial, str):
            problems += validate_machine(MachineShape(initial, shapes, where=f"{where}#"))
        if problems:
            raise CompileError(problems, subject="agent lifecycle")
        assert isinstance(initial, str)
        return cls(
            initial=initial,
            transitions={n: dict(s.transitions) for n, s in shapes.items()},
            terminal=frozenset(n for n, s in shapes.items() if s.terminal),
        )

    def target(self, state: str, event: str) -> str:
        """The state ``event`` leads to from ``state``; ``LifecycleError`` if none."""
        found = self.transitions.get(state, {}).get(event)
        if found is None:
            raise LifecycleError(
                f"illegal lifecycle transition: no event {event!r} from state {state!r} "
                f"(allowed there: {sorted(self.transitions.get(state, {}))})"
            )
        return found

    def event_for(self, state: str, to: str) -> str:
        """The event that moves ``state`` to ``to``; ``LifecycleError`` if none."""
        for event, target in self.transitions.get(state, {}).items():
            if target == to:
                return event
        allowed = sorted(set(self.transitions.get(state, {}).values()))
        raise LifecycleError(
            f"illegal lifecycle transition {state} -> {to}"
            + (f" (from {state} only: {allowed})" if allowed else f" ({state} is terminal)")
        )


DEFAULT_LIFECYCLE: Final = Lifecycle.from_data(LIFECYCLE_DATA, where="default lifecycle")
"""The seed's six-state lifecycle, validated at import."""
