"""Waiting for runs to change: what a live view sleeps on between two reads of the store.

A store whose writes announce themselves offers ``watch(run_id)`` (:class:`WatchableStore`):
``PostgresStore`` notifies a channel in each write's own transaction and its watch
``LISTEN``s on a dedicated connection, so it wakes as soon as any process commits. Any other
store is polled (:class:`PollingWatch`): SQLite has no notices across processes.
:func:`watch_runs` picks. A watch says *that* a run may have changed, never *what*: read the
store after each wake-up.
"""

from __future__ import annotations

import asyncio
from contextlib import aclosing
from dataclasses import KW_ONLY, dataclass, field
from types import TracebackType
from typing import TYPE_CHECKING, Any, Protocol, Self, runtime_checkable

from stargraph.errors import CheckpointError, StoreUnavailableError

if TYPE_CHECKING:
    import psycopg

__all__ = ["ListenWatch", "PollingWatch", "RunWatch", "WatchableStore", "watch_runs"]


class RunWatch(Protocol):
    """Waits for changes of one run (or of any run), as an async context manager: entering
    starts watching (changes committed from then on are seen), leaving stops it.

    A watch that subclasses it inherits the context manager: ``__aenter__`` returns the
    watch, ``__aexit__`` calls :meth:`aclose`; it overrides what it must start or release."""

    async def __aenter__(self) -> Self:
        """Start watching (by default there is nothing to start)."""
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        """Stop watching: :meth:`aclose`."""
        await self.aclose()

    async def aclose(self) -> None:
        """Release what the watch holds (a connection); safe to call twice. By default
        there is nothing to release."""
        return None

    async def wait(self, timeout_s: float) -> bool:
        """Sleep until the watched run may have changed (``True``) or ``timeout_s`` passed
        (``False``). Changes that came while nobody waited wake the next call at once."""
        ...


@runtime_checkable
class WatchableStore(Protocol):
    """A checkpoint store that can tell when a run changes (``PostgresStore``)."""

    def watch(self, run_id: str | None = None) -> RunWatch:
        """A watch of run ``run_id``'s changes (of every run's: ``None``)."""
        ...


class PollingWatch(RunWatch):
    """The watch of a store that cannot tell: every ``poll_s`` a run may have changed."""

    def __init__(self, poll_s: float) -> None:
        if not poll_s > 0:
            raise CheckpointError(f"poll_s must be a positive number of seconds, got {poll_s}")
        self.poll_s = poll_s

    async def wait(self, timeout_s: float) -> bool:
        """Sleep ``poll_s`` (``True``: look again), or ``timeout_s`` if that is shorter."""
        if timeout_s < self.poll_s:
            await asyncio.sleep(max(timeout_s, 0.0))
            return False
        await asyncio.sleep(self.poll_s)
        return True


@dataclass(eq=False)
class ListenWatch(RunWatch):
    """The watch of a ``PostgresStore`` (made by :meth:`PostgresStore.watch
    <stargraph.checkpoint.PostgresStore.watch>`): a connection of its own in ``LISTEN`` mode
    on the store's channel, woken by the notice each write sends when it commits."""

    dsn: str = field(repr=False)  # it may hold the password
    channel: str
    run_id: str | None
    _: KW_ONLY
    where: str
    password: str | None = field(repr=False)
    connect_timeout: int
    application_name: str
    _conn: psycopg.AsyncConnection[Any] | None = field(default=None, init=False, repr=False)

    def _unavailable(self, exc: Exception) -> StoreUnavailableError:
        from stargraph.checkpoint._dsn import redact

        reason = " ".join(redact(str(exc), self.password).split())
        return StoreUnavailableError(
            f"cannot listen for run changes on PostgreSQL at {self.where} (channel "
            f"{self.channel}): {reason}; check that the server is up (a live view falls back "
            "to polling)"
        )

    async def __aenter__(self) -> ListenWatch:
        """Open the connection and ``LISTEN``: changes committed from now on wake :meth:`wait`."""
        import psycopg

        try:
            self._conn = await psycopg.AsyncConnection.connect(
                self.dsn,
                autocommit=True,
                connect_timeout=self.connect_timeout,
                application_name=self.application_name,
            )
            # The channel comes from a schema name checked against [a-z_][a-z0-9_]*.
            await self._conn.execute(f'LISTEN "{self.channel}"')
        except psycopg.Error as exc:
            await self.aclose()
            raise self._unavailable(exc) from None
        return self

    async def aclose(self) -> None:
        """Close the connection (the server forgets the ``LISTEN`` with it); safe to call
        twice."""
        conn, self._conn = self._conn, None
        if conn is not None:
            await conn.close()

    def _wanted(self, payload: str) -> bool:
        # '' is a run id no payload could carry: it may be ours.
        return self.run_id is None or payload in (self.run_id, "")

    async def wait(self, timeout_s: float) -> bool:
        """Sleep until a notice for the watched run arrives (``True``) or ``timeout_s``
        passed (``False``). Notices already queued are drained with it: one read of the store
        covers them all."""
        import psycopg

        conn = self._conn
        if conn is None:
            raise CheckpointError(
                f"the watch of channel {self.channel} is not open; use it as "
                "`async with store.watch(run_id) as watch:`"
            )
        try:
            # aclosing: a notifies() generator holds the connection's lock until closed.
            async with aclosing(conn.notifies(timeout=max(timeout_s, 0.0))) as notes:
                async for note in notes:
                    if self._wanted(note.payload):
                        break
                else:
                    return False
            async with aclosing(conn.notifies(timeout=0.0)) as rest:
                async for _ in rest:
                    pass
        except psycopg.Error as exc:
            raise self._unavailable(exc) from None
        return True


def watch_runs(store: object, run_id: str | None = None, *, poll_s: float) -> RunWatch:
    """A watch of run ``run_id`` (of every run: ``None``) in ``store``: the store's own if
    it can tell when runs change (:class:`WatchableStore`), else one polling every
    ``poll_s`` seconds."""
    if isinstance(store, WatchableStore):
        return store.watch(run_id)
    return PollingWatch(poll_s)
