"""Rule engines reused across the runs of one compiled graph.

Creating a CLIPS environment and loading its packs costs ~1.5 ms; resetting a used engine to
the state of a new one costs ~10 µs, so a graph invoked many times (a ReAct agent serving
requests) keeps its engines. Engines are bound to the thread that made them (CLIPS
environments are not thread-safe), so the pool is per thread.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from typing import Any

from stargraph.fathom._engine import RuleEngine

__all__ = ["EnginePool", "PooledEngine"]


class EnginePool:
    """Hands out rule engines made by ``make``, each returned to the pool by its ``close()``.

    The compiler gives the runtime ``pool.acquire`` as the factory of a graph's (or a
    node's) engine: every run takes one engine and gives it back when it ends.
    """

    def __init__(self, make: Callable[[], RuleEngine]) -> None:
        self._make = make
        self._local = threading.local()

    def acquire(self) -> PooledEngine:
        """An engine in its initial state (made on this thread); ``close()`` on it returns
        it to the pool."""
        free: list[PooledEngine] | None = getattr(self._local, "free", None)
        if free is None:
            free = self._local.free = []
        if free:
            return free.pop()
        return PooledEngine(self._make(), free)


class PooledEngine:
    """A rule engine whose ``close()`` resets it and hands it back to its pool; a
    ``stargraph.runtime`` decision maker like the engine itself."""

    __slots__ = ("_engine", "_free", "decide")

    def __init__(self, engine: RuleEngine, free: list[PooledEngine]) -> None:
        self._engine = engine
        self._free = free
        # Bound once: the step loop asks for a decision at every step.
        self.decide = engine.decide

    def snapshot(self) -> dict[str, Any]:
        """The engine's facts, for the step's checkpoint."""
        return self._engine.snapshot()

    def restore(self, snapshot: Mapping[str, Any]) -> None:
        """Load facts saved by :meth:`snapshot`."""
        self._engine.restore(snapshot)

    def close(self) -> None:
        """Reset to a new engine's state and return to the pool (really close if that fails)."""
        try:
            self._engine.reset()
        except Exception:  # a broken engine is simply not reused
            self._engine.close()
            return
        self._free.append(self)
