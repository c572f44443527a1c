"""The one state-machine validator: SkillSpecs, nested schemas and lifecycle machines.

A machine is data - states, each with its ``(on, to)`` transitions and a terminal flag - and
:func:`validate_machine` checks it the same way whoever wrote it:
the initial state exists, every ``to`` names a state, at least one state is terminal, no
terminal state has transitions, no non-terminal state is a dead end, every state is reachable
from the initial one (all unreachable states listed), and no state has two transitions on one
event. Every problem is collected, each naming its JSON pointer; nothing stops at the first.
"""

from __future__ import annotations

import re
from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Final

from stargraph.errors import Problem

__all__ = ["EVENT_NAME", "STATE_NAME", "MachineShape", "StateShape", "validate_machine"]

STATE_NAME: Final = re.compile(r"^[A-Za-z][A-Za-z0-9_-]{0,63}$")
"""State names: a letter, then letters, digits, ``_`` or ``-`` (they become graph node ids;
names starting with ``_`` are reserved for the engine's own nodes)."""

EVENT_NAME: Final = re.compile(r"^[A-Za-z][A-Za-z0-9_-]{0,63}$")
"""Event names: they are offered to the model as function names, so they must be valid
OpenAI function names; ``finish`` is reserved."""

RESERVED_EVENTS: Final = frozenset({"finish"})


@dataclass(frozen=True, slots=True)
class StateShape:
    """What the validator needs of one state: its transitions and whether it is terminal."""

    transitions: Sequence[tuple[str, str]]
    terminal: bool = False


@dataclass(frozen=True, slots=True)
class MachineShape:
    """A machine as the validator sees it; ``where`` prefixes every pointer
    (``file.json#`` or ``file.json#/schemas/main``)."""

    initial: str
    states: Mapping[str, StateShape]
    where: str = ""


def validate_machine(machine: MachineShape) -> list[Problem]:
    """Every structural problem of ``machine`` (empty when it is well formed).

    >>> ok = MachineShape("a", {"a": StateShape([("go", "b")]), "b": StateShape([], True)})
    >>> validate_machine(ok)
    []
    >>> bad = MachineShape("a", {"a": StateShape([("go", "x")]), "b": StateShape([], True)})
    >>> [p.message for p in validate_machine(bad)][0]
    "state 'a' on event 'go' goes to unknown state 'x'"
    """
    where = machine.where
    states = machine.states
    problems: list[Problem] = []
    names = sorted(states)
    if machine.initial not in states:
        problems.append(
            Problem(
                f"{where}/initial_state",
                f"initial_state {machine.initial!r} is not a state (states: {names})",
                "set initial_state to one of the states",
            )
        )
    for name in names:
        if not STATE_NAME.match(name):
            problems.append(
                Problem(
                    f"{where}/states/{name}",
                    f"state name {name!r} is not a plain name",
                    "use letters, digits, '_' or '-', starting with a letter",
                )
            )
    if states and not any(s.terminal for s in states.values()):
        problems.append(
            Problem(
                f"{where}/states",
                "no terminal state: the machine can never end",
                'mark at least one state "terminal": true',
            )
        )
    for name in names:
        problems.extend(_state_problems(where, name, states[name], states))
    if machine.initial in states:
        reachable = _reachable(machine.initial, states)
        unreachable = [n for n in names if n not in reachable]
        if unreachable:
            problems.append(
                Problem(
                    f"{where}/states",
                    f"unreachable states (no path from {machine.initial!r}): {unreachable}",
                    "add transitions into them or delete them",
                )
            )
    return problems


def _state_problems(
    where: str, name: str, state: StateShape, states: Mapping[str, StateShape]
) -> list[Problem]:
    here = f"{where}/states/{name}"
    problems: list[Problem] = []
    if state.terminal and state.transitions:
        problems.append(
            Problem(
                f"{here}/transitions",
                f"terminal state {name!r} declares transitions "
                f"{[on for on, _ in state.transitions]}",
                "remove the transitions or drop terminal: true",
            )
        )
    if not state.terminal and not state.transitions:
        problems.append(
            Problem(
                f"{here}/transitions",
                f"state {name!r} is a dead end: not terminal and no transitions",
                'add a transition or mark it "terminal": true',
            )
        )
    seen: dict[str, int] = {}
    for i, (on, to) in enumerate(state.transitions):
        if on in seen:
            problems.append(
                Problem(
                    f"{here}/transitions/{i}/on",
                    f"state {name!r} has two transitions on event {on!r} "
                    f"(#{seen[on]} and #{i}): ambiguous",
                    "rename one event or merge the transitions",
                )
            )
        else:
            seen[on] = i
        if not EVENT_NAME.match(on) or on in RESERVED_EVENTS:
            problems.append(
                Problem(
                    f"{here}/transitions/{i}/on",
                    f"event {on!r} of state {name!r} is not a valid event name"
                    + (" ('finish' is reserved)" if on in RESERVED_EVENTS else ""),
                    "use letters, digits, '_' or '-', starting with a letter",
                )
            )
        if to not in states:
            problems.append(
                Problem(
                    f"{here}/transitions/{i}/to",
                    f"state {name!r} on event {on!r} goes to unknown state {to!r}",
                    f"point it at one of {sorted(states)}",
                )
            )
    return problems


def _reachable(initial: str, states: Mapping[str, StateShape]) -> set[str]:
    seen = {initial}
    queue = deque([initial])
    while queue:
        for _, to in states[queue.popleft()].transitions:
            if to in states and to not in seen:
                seen.add(to)
                queue.append(to)
    return seen
