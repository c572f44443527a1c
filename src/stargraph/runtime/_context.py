"""The run context handed to nodes that accept a second ``ctx`` argument.

All non-determinism a node needs (time, ids, random numbers) comes from one injectable
:class:`Entropy` source, so a test can pin it and the replay engine can record it.
"""

from __future__ import annotations

import random as _random
import uuid as _uuid
from collections.abc import Mapping
from datetime import UTC, datetime, timedelta
from typing import Any, Protocol, runtime_checkable

__all__ = ["Entropy", "RunContext", "SeededEntropy", "SystemEntropy"]


@runtime_checkable
class Entropy(Protocol):
    """Where clocks, ids and random numbers come from."""

    def now(self) -> datetime:
        """The current time (timezone-aware, UTC)."""
        ...

    def uuid(self) -> str:
        """A fresh unique id."""
        ...

    def random(self) -> float:
        """A float in [0, 1)."""
        ...


class SystemEntropy:
    """The real clock, ``uuid4`` and the OS-seeded ``random`` module."""

    def __init__(self) -> None:
        # Seeding a Random from the OS costs ~10 µs; most runs never draw, so do it lazily.
        self._rng: _random.Random | None = None

    def now(self) -> datetime:
        """``datetime.now(UTC)``."""
        return datetime.now(UTC)

    def uuid(self) -> str:
        """``uuid4()`` as a string."""
        return str(_uuid.uuid4())

    def random(self) -> float:
        """A float from a privately owned ``random.Random``."""
        if self._rng is None:
            self._rng = _random.Random()
        return self._rng.random()


class SeededEntropy:
    """Deterministic entropy for tests: a fixed start time ticking one second per call, ids
    and random numbers from a seeded generator."""

    def __init__(self, seed: int = 0, start: datetime | None = None) -> None:
        self._rng = _random.Random(seed)
        self._now = start or datetime(2026, 1, 1, tzinfo=UTC)

    def now(self) -> datetime:
        """The start time plus one second per previous call."""
        current = self._now
        self._now = current + timedelta(seconds=1)
        return current

    def uuid(self) -> str:
        """A UUID built from the seeded generator."""
        return str(_uuid.UUID(int=self._rng.getrandbits(128), version=4))

    def random(self) -> float:
        """A float from the seeded generator."""
        return self._rng.random()


class RunContext:
    """What a node may know and use about the run it is part of.

    ``idempotency_key`` is stable for one node execution across retries and resumes of the
    same step, so a node can make an external side effect idempotent with it.
    """

    __slots__ = ("config", "entropy", "index", "node", "path", "run_id", "step")

    def __init__(
        self,
        *,
        run_id: str,
        step: int,
        node: str,
        index: int,
        path: tuple[str, ...],
        config: Mapping[str, Any],
        entropy: Entropy,
    ) -> None:
        self.run_id = run_id
        self.step = step
        self.node = node
        self.index = index
        self.path = path
        self.config = config
        self.entropy = entropy

    @property
    def idempotency_key(self) -> str:
        """``run/path/step/node/index``: the same for every attempt of this execution."""
        path = "/".join(self.path)
        return f"{self.run_id}/{path}/{self.step}/{self.node}/{self.index}"

    def now(self) -> datetime:
        """The current time from the run's entropy source."""
        return self.entropy.now()

    def uuid(self) -> str:
        """A fresh id from the run's entropy source."""
        return self.entropy.uuid()

    def random(self) -> float:
        """A random float in [0, 1) from the run's entropy source."""
        return self.entropy.random()
