"""The runtime: executor, run context, events.

``CompiledGraph`` is produced by ``Graph.compile()``; nodes that take a second argument get a
:class:`RunContext`; ``stream()`` yields :data:`Event` values as they happen (or, with
``mode=``, updates, values, :class:`CustomEvent` and :class:`MessageChunk` items), and
``iter()`` yields one :class:`Superstep` per step. ``CompiledGraph.cancel`` and
:func:`cancel_on_signals` (Ctrl-C, SIGTERM) stop runs at a step boundary, resumably.

These are the names a user of a compiled graph meets. The compiler's side of the runtime
(the plan's specs, the rule-engine seam) is imported from the private modules that define
it (``runtime._plan``, ``runtime._rules``).
"""

from __future__ import annotations

from stargraph.runtime import _events
from stargraph.runtime._cancel import SignalScope, cancel_on_signals
from stargraph.runtime._context import Entropy, RunContext, SeededEntropy, SystemEntropy
from stargraph.runtime._events import *
from stargraph.runtime._executor import DEFAULT_MAX_STEPS, CompiledGraph
from stargraph.runtime._interrupts import Interrupt, interrupt_of
from stargraph.runtime._stream import CustomEvent, MessageChunk, Superstep

__all__ = [
    "CompiledGraph",
    "CustomEvent",
    "DEFAULT_MAX_STEPS",
    "Entropy",
    "Interrupt",
    "MessageChunk",
    "RunContext",
    "SeededEntropy",
    "SignalScope",
    "Superstep",
    "SystemEntropy",
    "cancel_on_signals",
    "interrupt_of",
]
# The event types are listed once, in _events.__all__.
__all__ += _events.__all__
__all__.sort()
