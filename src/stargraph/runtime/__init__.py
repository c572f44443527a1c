"""The runtime: executor, run context, events.

``CompiledGraph`` is produced by ``Graph.compile()``; nodes that take a second argument get a
:class:`RunContext`; ``stream()`` yields :data:`Event` values as they happen (or, with
``mode=``, updates, values, :class:`CustomEvent` and :class:`MessageChunk` items), and
``iter()`` yields one :class:`Superstep` per step. ``CompiledGraph.cancel`` and
:func:`cancel_on_signals` (Ctrl-C, SIGTERM) stop runs at a step boundary, resumably.
"""

from __future__ import annotations

from stargraph.runtime._cancel import SignalScope, cancel_on_signals
from stargraph.runtime._context import Entropy, RunContext, SeededEntropy, SystemEntropy
from stargraph.runtime._events import (
    Event,
    NodeFinished,
    NodeStarted,
    RuleDecided,
    RunCancelled,
    RunFailed,
    RunFinished,
    RunInterrupted,
    RunStarted,
    StepCompleted,
)
from stargraph.runtime._executor import DEFAULT_MAX_STEPS, CompiledGraph
from stargraph.runtime._interrupts import Interrupt, interrupt_of
from stargraph.runtime._plan import JoinSpec, NodeSpec, RouterSpec, Task, accepts_ctx
from stargraph.runtime._rules import DecisionMaker, RuleSet, StepDecision
from stargraph.runtime._stream import CustomEvent, MessageChunk, Superstep

__all__ = [
    "CompiledGraph",
    "CustomEvent",
    "DEFAULT_MAX_STEPS",
    "DecisionMaker",
    "Entropy",
    "Event",
    "Interrupt",
    "JoinSpec",
    "MessageChunk",
    "NodeFinished",
    "NodeSpec",
    "NodeStarted",
    "RouterSpec",
    "RuleDecided",
    "RuleSet",
    "RunCancelled",
    "RunContext",
    "RunFailed",
    "RunFinished",
    "RunInterrupted",
    "RunStarted",
    "SeededEntropy",
    "SignalScope",
    "StepCompleted",
    "StepDecision",
    "Superstep",
    "SystemEntropy",
    "Task",
    "accepts_ctx",
    "cancel_on_signals",
    "interrupt_of",
]
