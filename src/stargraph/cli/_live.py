"""Showing a run's events while it runs: plain lines, or a rich live view on a terminal.

Progress goes to stderr and results to stdout, so ``stargraph run g.json | jq`` gets the
final state alone while the person at the terminal still watches the run.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterable, Iterator
from typing import Any, Protocol, TextIO

from stargraph.checkpoint._records import describe_outcome
from stargraph.runtime import (
    Event,
    NodeFinished,
    NodeStarted,
    RuleDecided,
    RunFailed,
    RunFinished,
    RunInterrupted,
    RunStarted,
    StepCompleted,
)

__all__ = ["LiveView", "PlainView", "View", "describe_event", "watch"]

_MAX_WRITES = 160  # characters of a node's writes shown on one progress line


class View(Protocol):
    """Something that shows events as they arrive."""

    def show(self, event: Event) -> None:
        """Show one event."""
        ...

    def close(self) -> None:
        """Stop showing (leave the last frame on screen)."""
        ...


def _compact(value: Any, limit: int = _MAX_WRITES) -> str:
    text = json.dumps(value, ensure_ascii=False, sort_keys=True, default=str)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _who(event: Event) -> str:
    node = event.node or ""
    return "/".join([*event.path, node]) if event.path else node


def _ended(event: RunFinished) -> str:
    """``halted by rule R: reason`` (or ``done by rule ...``) of a run a rule ended."""
    return describe_outcome(event.status, event.stopped_by, event.stop_reason)


def describe_event(event: Event) -> str | None:
    """One progress line for ``event`` (``None`` for events not worth a line)."""
    at = f"[step {event.step}]"
    if isinstance(event, RunStarted):
        verb = "resumed" if event.resumed else "started"
        return f"run {event.run_id} {verb} (graph {event.graph_hash})"
    if isinstance(event, NodeFinished):
        retries = f" after {event.attempts} attempts" if event.attempts > 1 else ""
        return f"{at} {_who(event)} finished{retries}: {_compact(event.writes)}"
    if isinstance(event, RuleDecided):
        target = f" -> {event.target}" if event.target else ""
        reason = f" ({event.reason})" if event.reason else ""
        return f"{at} rule {event.rule}: {event.decision}{target}{reason}"
    if isinstance(event, RunInterrupted):
        return f"{at} run {event.run_id} is waiting"
    if isinstance(event, RunFinished):
        if event.status == "halted":
            return f"{at} run {event.run_id} {_ended(event)}"
        by = f" ({_ended(event)})" if event.stopped_by else ""
        return f"{at} run {event.run_id} finished{by}"
    if isinstance(event, RunFailed):
        where = f" in {_who(event)}" if event.node else ""
        return f"{at} run {event.run_id} failed{where}: {event.error_type}"
    return None  # node_started and step_completed: the live view shows them instead


class PlainView:
    """One line per interesting event, for logs and pipes."""

    def __init__(self, stream: TextIO) -> None:
        self.stream = stream

    def show(self, event: Event) -> None:
        """Print the event's line, if it has one."""
        line = describe_event(event)
        if line is not None:
            print(line, file=self.stream, flush=True)

    def close(self) -> None:
        """Nothing to tear down."""


class LiveView:
    """A rich live panel: run, step, running nodes, recent rule decisions, elapsed time.

    Event lines scroll above the panel, so the terminal keeps a full log after the run.
    """

    def __init__(self, console: Any, *, clock: Callable[[], float] = time.monotonic) -> None:
        from rich.live import Live

        self.console = console
        self.run_id = "-"
        self.step = 0
        self.running: list[str] = []
        self.decisions: list[str] = []
        self.nodes_done = 0
        self.clock = clock
        self.started = clock()
        # Live's refresh thread redraws what it was given: a panel built once would show
        # the elapsed time of the last event. An object that builds the panel when drawn
        # keeps the clock ticking between events (a node waiting on a model).
        self.live = Live(_Drawn(self), console=console, refresh_per_second=8, transient=False)
        self.live.start()

    def _panel(self) -> Any:
        from rich.panel import Panel
        from rich.table import Table

        table = Table.grid(padding=(0, 2))
        table.add_column(style="bold")
        table.add_column()
        table.add_row("run", self.run_id)
        table.add_row("step", str(self.step))
        table.add_row("running", ", ".join(self.running) or "-")
        table.add_row("nodes done", str(self.nodes_done))
        table.add_row("rules", "; ".join(self.decisions[-3:]) or "-")
        table.add_row("elapsed", f"{self.clock() - self.started:.1f}s")
        return Panel(table, title="stargraph", expand=False)

    def show(self, event: Event) -> None:
        """Update the panel and log the event's line above it."""
        self.run_id = event.run_id if not event.path else self.run_id
        self.step = event.step if not event.path else self.step
        if isinstance(event, NodeStarted):
            self.running.append(_who(event))
        elif isinstance(event, NodeFinished):
            self.nodes_done += 1
            who = _who(event)
            if who in self.running:
                self.running.remove(who)
        elif isinstance(event, StepCompleted) and not event.path:
            self.running = []
        elif isinstance(event, RuleDecided):
            self.decisions.append(f"{event.rule}: {event.decision}")
        line = describe_event(event)
        if line is not None:
            self.live.console.print(line, markup=False, highlight=False)
        self.live.refresh()

    def close(self) -> None:
        """Draw the last frame and stop refreshing."""
        self.live.refresh()
        self.live.stop()


class _Drawn:
    """The live panel of ``view`` as it is at each redraw."""

    def __init__(self, view: LiveView) -> None:
        self.view = view

    def __rich__(self) -> Any:
        """Rich's hook for a renderable made on demand."""
        return self.view._panel()


def watch(events: Iterable[Event], view: View) -> Iterator[Event]:
    """Show each event, then hand it on; the view is closed however the stream ends."""
    try:
        for event in events:
            view.show(event)
            yield event
    finally:
        view.close()
