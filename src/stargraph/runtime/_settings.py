"""The runtime's part of a graph's compile options, as one frozen value.

``Graph.compile(...)`` packs its keywords into a ``stargraph.compile.RunOptions``, a subclass
of :class:`RunSettings` that adds the compiler's own options. A ``CompiledGraph`` and its
``StepLoop`` take those options as they are: no field is handed on one by one.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Literal

from stargraph.checkpoint import CheckpointStore
from stargraph.runtime._context import Entropy, SystemEntropy
from stargraph.runtime._durable import Durability

__all__ = ["DEFAULT_MAX_STEPS", "RunSettings"]

DEFAULT_MAX_STEPS = 10_000
"""Supersteps a run may take before :class:`StepLimitExceeded` (override per compile/run)."""


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class RunSettings:
    """How the runs of a compiled graph are made and kept: ``Graph.compile``'s
    ``max_steps``, ``entropy``, ``store``, ``durability``, ``snapshot_every`` and
    ``on_code_change`` (see there for what each does)."""

    max_steps: int = DEFAULT_MAX_STEPS
    entropy: Callable[[], Entropy] = SystemEntropy
    store: CheckpointStore | None = None
    durability: Durability = "sync"
    snapshot_every: int = 50
    on_code_change: Literal["warn", "error"] = "warn"
