"""The capabilities the runtime recognises on objects it is handed, named.

The runtime never imports a concrete chat model, arbiter or node kind; it notices what they
can do. Each capability it looks for is a protocol here rather than an attribute name
spelled at the place that looks:

* :class:`Journal` - what a service bound to a task's journal calls (``TaskJournal`` is the
  implementation);
* :class:`Journaled` - a service (a chat model, an arbiter) that can route its calls through
  such a journal, so they are recorded live and served in replay;
* :class:`Warmable` - a service with set-up to do before its first call (a chat model's
  client library and HTTP client), done when a graph is compiled with it;
* :class:`PositionalEntropy` - an entropy source that draws by *where* a value is drawn
  (``SeededEntropy``), so a resumed run draws what an uninterrupted one does;
* :class:`HasCodeHash` - a node callable that stands for a whole graph (a subgraph node),
  hashed by its graph's code rather than by its own source.

Only the protocols tested with ``isinstance`` are ``runtime_checkable``; the entropy one is
tested per draw, where :func:`is_positional` (one ``hasattr``) is cheaper than a protocol
``isinstance`` check.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from datetime import datetime
from typing import Any, Protocol, TypeGuard, runtime_checkable

__all__ = [
    "HasCodeHash",
    "Journal",
    "Journaled",
    "PositionalEntropy",
    "Warmable",
    "is_positional",
]


class Journal(Protocol):
    """The slice of ``TaskJournal`` a journaled service needs.

    It may also carry ``tokens`` (a callable taking each piece of a model's reply, or
    ``None``), read with ``getattr``: journals that do not stream need not have it. Likewise
    ``conversation`` (a ``runtime.Conversation``), where a chat model keeps its task's last
    encoded request: a journal without one only makes each request cost its whole length.
    """

    def call(
        self,
        kind: str,
        key: str,
        compute: Callable[[], Any],
        *,
        request: Any = None,
        fingerprint: str | None = None,
    ) -> Any:
        """The recorded value, or ``compute()`` recorded (``fingerprint``: the request's,
        when the caller already knows it)."""
        ...

    async def acall(
        self,
        kind: str,
        key: str,
        compute: Callable[[], Awaitable[Any]],
        *,
        request: Any = None,
        fingerprint: str | None = None,
    ) -> Any:
        """Async :meth:`call`: ``compute`` is awaited only when there is no record."""
        ...


@runtime_checkable
class Journaled(Protocol):
    """A service whose calls can go through a task's journal (a chat model, an arbiter):
    every task gets ``bind_journal(its journal)`` in its ``ctx.services`` instead."""

    def bind_journal(self, journal: Journal, /) -> object:
        """This service, routed through ``journal``."""
        ...


@runtime_checkable
class Warmable(Protocol):
    """A service that can do its set-up ahead of its first call: ``compile(services=...)``
    calls :meth:`warm`, where the user already waits for set-up, rather than the first run
    paying it in the middle of a step."""

    def warm(self) -> None:
        """Do the set-up now (idempotent; never fails for want of a call's settings)."""
        ...


class PositionalEntropy(Protocol):
    """What an entropy source (``runtime.Entropy``) offers besides sequential draws when it
    draws by position (run, path, step, node, index, draw): the same position gives the same
    value in every process."""

    def now_at(self, position: str, step: int, draw: int) -> datetime:
        """The time at ``position`` (the ``draw``-th draw of step ``step``)."""
        ...

    def uuid_at(self, position: str) -> str:
        """The id at ``position``."""
        ...

    def random_at(self, position: str) -> float:
        """A float in [0, 1) at ``position``."""
        ...


def is_positional(entropy: object) -> TypeGuard[PositionalEntropy]:
    """Whether ``entropy`` draws by position (it has ``now_at``, ``uuid_at``, ``random_at``)."""
    return (
        hasattr(entropy, "now_at") and hasattr(entropy, "uuid_at") and hasattr(entropy, "random_at")
    )


@runtime_checkable
class HasCodeHash(Protocol):
    """A node callable that runs a whole graph: its code is its graph's ``code_hash``."""

    @property
    def code_hash(self) -> str:
        """``"sha256:<hex>"`` of the source of the graph's nodes and routers."""
        ...
