"""Live streams: what a streamed run hands its consumer while it runs, in which modes.

A streamed run puts items on a :class:`Feed` as they happen, from whichever thread makes
them (the driver, a worker thread running a node, the run's event loop); the driver, waiting
for a step's tasks, wakes whenever an item arrives and hands it on. The typed events keep
their fixed order within a step (node started events in task order at the start of the
step, finished events in task order at its end); ``custom`` and ``messages`` items arrive in
the order the nodes make them.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import threading
from collections.abc import Sequence
from typing import Any, Final, Literal, get_args

from pydantic import ConfigDict, Field

from stargraph._typed import TypedModel
from stargraph.errors import InvalidInputError, RunError

__all__ = [
    "INTERRUPT_KEY",
    "CustomEvent",
    "Feed",
    "MessageChunk",
    "StreamMode",
    "Superstep",
    "stream_modes",
]

StreamMode = Literal["events", "updates", "values", "custom", "messages"]
"""What ``stream(..., mode=...)`` yields: ``events`` (the typed run events), ``updates``
(``{node: writes}`` per finished node), ``values`` (the state after each step), ``custom``
(:class:`CustomEvent` from ``ctx.emit``) and ``messages`` (:class:`MessageChunk` tokens).
A run that stops at an interrupt ends its ``updates`` and ``values`` streams with
``{"__interrupt__": (Interrupt(...),)}``."""

INTERRUPT_KEY: Final = "__interrupt__"
"""The key of the last ``updates``/``values`` item of a run stopped at an interrupt; its value
is a one-element tuple holding the :class:`~stargraph.Interrupt` the run waits at."""

_MODES: frozenset[str] = frozenset(get_args(StreamMode))


def stream_modes(mode: str | Sequence[str]) -> tuple[str, ...]:
    """The modes asked for, checked, in the order given (duplicates dropped)."""
    asked = (mode,) if isinstance(mode, str) else tuple(mode)
    unknown = [m for m in asked if m not in _MODES]
    if unknown or not asked:
        raise InvalidInputError(
            f"stream mode {unknown or list(asked)} is not one of {sorted(_MODES)}; pass one "
            'of them, e.g. mode="updates", or several, e.g. mode=["events", "custom"]',
            step=0,
        )
    return tuple(dict.fromkeys(asked))


class _Chunk(TypedModel):
    typed_error = RunError
    model_config = ConfigDict(frozen=True, extra="forbid")

    run_id: str
    step: int
    path: tuple[str, ...] = ()
    node: str
    index: int = 0


class CustomEvent(_Chunk):
    """A payload a node handed to ``ctx.emit(payload)`` (stream mode ``custom``)."""

    kind: Literal["custom"] = "custom"
    payload: Any = None


class MessageChunk(_Chunk):
    """A piece of a model's answer as it arrives (stream mode ``messages``)."""

    kind: Literal["message_chunk"] = "message_chunk"
    text: str


class Superstep(TypedModel):
    """One step of a run driven by ``app.iter(input)``: what ran, what runs next, and the
    state after the step (an instance of the graph's state model)."""

    typed_error = RunError

    model_config = ConfigDict(frozen=True, arbitrary_types_allowed=True)

    run_id: str
    step: int
    nodes: tuple[str, ...] = Field(description="Nodes that ran in this step, in task order.")
    next: tuple[str, ...] = Field(description="Nodes scheduled for the next step.")
    state: Any = Field(description="The state after this step.")


class Feed:
    """Items for a stream's consumer, put from any thread, with a wake-up for the driver.

    ``put`` never blocks: the driver drains the items whenever it wakes (between steps, or
    while it waits for a step's tasks), so a node is never slowed by a slow consumer beyond
    the step boundary, where the driver waits for the consumer as before.

    A ``live`` feed's items come while a step's tasks run (``custom`` and ``messages``: the
    nodes make them), so its driver runs the tasks apart from itself, to hand them on as
    they come. Every other item is made by the driver at a step's start or end, so those
    streams run their steps as ``invoke`` does; with ``events`` (``watched``) the consumer
    reads ``node_started`` while the node runs, so a step whose start was handed on runs
    on a worker thread if the consumer does not come back for more at once (see
    ``runtime._tasks.Handoff``), and the async driver runs it as a task of its own.
    """

    __slots__ = (
        "awake",
        "items",
        "live",
        "loop",
        "modes",
        "updates",
        "values",
        "wake",
        "watched",
    )

    def __init__(self, modes: tuple[str, ...]) -> None:
        self.modes = frozenset(modes)
        self.live = "custom" in self.modes or "messages" in self.modes
        self.watched = "events" in self.modes
        self.updates = "updates" in self.modes
        self.values = "values" in self.modes
        self.items: collections.deque[tuple[str, Any]] = collections.deque()
        # Only the sync driver of a live feed waits for a step's tasks (and a wake-up);
        # an events stream's steps run on the consumer's thread or are handed off.
        self.wake = threading.Event() if self.live else None
        # Set by an async driver: items put from other threads wake it on its loop.
        self.loop: asyncio.AbstractEventLoop | None = None
        self.awake: asyncio.Event | None = None

    def put(self, mode: str, item: Any) -> None:
        """Hand ``item`` (of stream mode ``mode``) to the consumer."""
        self.items.append((mode, item))
        self.signal()

    def add(self, mode: str, item: Any) -> None:
        """:meth:`put` from the driver itself, between a step's tasks: nobody to wake."""
        self.items.append((mode, item))

    def event(self, event: Any) -> None:
        """:meth:`add` of a typed event: the emit function of a run streamed in ``events``
        (bound once per run, one call per event)."""
        self.items.append(("events", event))

    def signal(self, *_: Any) -> None:
        """Wake the driver (also a future's done callback)."""
        if self.wake is not None:
            self.wake.set()
        loop, awake = self.loop, self.awake
        if loop is None or awake is None:
            return
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if running is loop:
            awake.set()
            return
        with contextlib.suppress(RuntimeError):  # a closed loop: nobody waits any more
            loop.call_soon_threadsafe(awake.set)

    def wait(self) -> None:
        """Block until something was put or signalled since the last wait."""
        assert self.wake is not None
        self.wake.wait()
        self.wake.clear()

    async def await_wake(self) -> None:
        """:meth:`wait` on the async driver's loop."""
        assert self.awake is not None
        await self.awake.wait()
        self.awake.clear()

    def drain(self) -> list[tuple[str, Any]]:
        """Take every item put so far, in order."""
        items = self.items
        out: list[tuple[str, Any]] = []
        while items:
            out.append(items.popleft())
        return out
