"""The run context handed to nodes that accept a second ``ctx`` argument.

All non-determinism a node needs (time, ids, random numbers) comes from one injectable
:class:`Entropy` source, so a test can pin it and the replay engine can record it.
"""

from __future__ import annotations

import random as _random
import uuid as _uuid
from collections.abc import Callable, Mapping
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any, Protocol, TypeVar, runtime_checkable

if TYPE_CHECKING:
    from stargraph.checkpoint import JournalEntry

__all__ = [
    "Entropy",
    "GraphInterrupt",
    "RunContext",
    "SeededEntropy",
    "SystemEntropy",
    "TaskJournal",
]

T = TypeVar("T")


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


class GraphInterrupt(BaseException):
    """Raised by ``ctx.interrupt()`` to park the run; the executor catches it.

    It derives from ``BaseException`` so that a node's own ``except Exception`` cannot
    swallow it by accident.
    """

    def __init__(self, payload: Any, seq: int) -> None:
        super().__init__(payload)
        self.payload = payload
        self.seq = seq


class TaskJournal:
    """The recorded calls of one task execution (clock, ids, ``once``, interrupt responses).

    The first execution records each call as it happens (persisting it at once through
    ``persist``); a re-execution of the same task - after a crash, a retry or an interrupt -
    is served the recorded values in order, so effects are not repeated.
    """

    __slots__ = ("entries", "index", "node", "persist", "seq", "step")

    def __init__(
        self,
        *,
        step: int,
        node: str,
        index: int,
        entries: list[JournalEntry],
        persist: Callable[[JournalEntry], None] | None,
    ) -> None:
        self.step = step
        self.node = node
        self.index = index
        self.entries = entries
        self.persist = persist
        self.seq = 0

    def restart(self) -> None:
        """A new attempt of the task replays the journal from its first call."""
        self.seq = 0

    def call(self, kind: str, key: str, compute: Callable[[], Any]) -> Any:
        """The recorded value of call number ``seq`` if there is one, else ``compute()``
        (recorded). A recorded call of another kind or key means the node is not
        deterministic given its inputs; that is reported, never papered over."""
        from stargraph.checkpoint import JournalEntry
        from stargraph.errors import ReplayDivergenceError

        seq = self.seq
        self.seq += 1
        if seq < len(self.entries):
            entry = self.entries[seq]
            if entry.kind != kind or entry.key != key:
                raise ReplayDivergenceError(
                    f"node {self.node!r} at step {self.step} made call #{seq} {kind}({key!r}) "
                    f"but the journal recorded {entry.kind}({entry.key!r}) there; a node must "
                    "make the same calls in the same order when it is re-executed",
                    step=self.step,
                    node=self.node,
                )
            return entry.value
        value = compute()
        entry = JournalEntry(
            step=self.step,
            node=self.node,
            index=self.index,
            seq=seq,
            kind=kind,
            key=key,
            value=value,
        )
        if self.persist is not None:
            self.persist(entry)
        self.entries.append(entry)
        return value

    def peek(self, kind: str) -> JournalEntry | None:
        """The recorded entry at the current position if it has this kind (no advance)."""
        if self.seq < len(self.entries) and self.entries[self.seq].kind == kind:
            return self.entries[self.seq]
        return None


class RunContext:
    """What a node may know and use about the run it is part of.

    ``idempotency_key`` is stable for one node execution across retries and resumes of the
    same step, so a node can make an external side effect idempotent with it. ``now()``,
    ``uuid()``, ``random()`` and ``once()`` are journaled in durable runs: a re-execution of
    the same step gets the same values and does not repeat a ``once`` effect.
    """

    __slots__ = (
        "config",
        "entropy",
        "events",
        "index",
        "journal",
        "node",
        "path",
        "run_id",
        "services",
        "step",
    )

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
        journal: TaskJournal | None = None,
        services: Mapping[str, Any] | None = None,
        events: list[Any] | None = None,
    ) -> None:
        self.journal = journal
        # Where a subgraph node puts its child's events; the executor streams them, in task
        # order, before this node's own node_finished event. None when nobody is streaming.
        self.events = events
        # Live objects a node needs but the IR cannot hold (a chat model, a tool arbiter, a
        # database handle), given to compile(services=...); never part of the hash.
        self.services: Mapping[str, Any] = services or {}
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
        """The current time from the run's entropy source (journaled in durable runs)."""
        if self.journal is None:
            return self.entropy.now()
        text = self.journal.call("now", "", lambda: self.entropy.now().isoformat())
        return datetime.fromisoformat(text)

    def uuid(self) -> str:
        """A fresh id from the run's entropy source (journaled in durable runs)."""
        if self.journal is None:
            return self.entropy.uuid()
        return str(self.journal.call("uuid", "", self.entropy.uuid))

    def random(self) -> float:
        """A random float in [0, 1) from the run's entropy source (journaled)."""
        if self.journal is None:
            return self.entropy.random()
        return float(self.journal.call("random", "", self.entropy.random))

    def once(self, name: str, effect: Callable[[], T]) -> T:
        """Run ``effect()`` once for this node execution and journal its (JSON) result.

        A re-execution of the same step (after a crash, a retry, an interrupt) gets the
        recorded result instead of running the effect again. Without a checkpoint store
        there is nothing to resume, and the effect simply runs.
        """
        if self.journal is None:
            return effect()
        return self.journal.call("once", name, effect)  # type: ignore[no-any-return]

    def interrupt(self, payload: Any = None) -> Any:
        """Park the run until a human answers; returns the answer on resume.

        The first time, this raises a control-flow signal: the run is saved with status
        ``interrupted`` and ``payload``. ``resume(run_id, response=...)`` re-executes the node
        from its start; this call then returns ``response``. Effects before the interrupt
        should go through ``ctx.once`` so the re-execution does not repeat them.
        """
        from stargraph.errors import RunError

        if self.journal is None:
            raise RunError(
                f"node {self.node!r} called ctx.interrupt() but the graph has no checkpoint "
                "store to park the run in; compile it with store=SqliteStore(...) or "
                "MemoryStore()",
                run_id=self.run_id,
                step=self.step,
                node=self.node,
            )
        recorded = self.journal.peek("interrupt")
        if recorded is not None:
            self.journal.seq += 1
            return recorded.value["response"] if isinstance(recorded.value, dict) else None
        raise GraphInterrupt(payload, self.journal.seq)
