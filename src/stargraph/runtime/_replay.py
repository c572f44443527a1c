"""Replay: run a recorded run again, offline, from its record.

The graph executes step by step as it did live, with the record standing in for the world:

- ``must_stub`` nodes (LLM ``think`` nodes, side-effecting steps) never run; their recorded
  writes are merged instead;
- every other node runs, but each recorded call it makes - model, tool, clock, id, random,
  ``ctx.once``, interrupt answers - is served from the record, matched by
  ``(node, step, index)`` and position, with the request's fingerprint checked;
- each step must schedule the tasks the record ran, and each re-executed node must write what
  it wrote live; anything else is a :class:`~stargraph.errors.ReplayDivergenceError` naming
  node, step and both sides. A call the record does not hold is a ``ReplayMissError``.

Replay writes nothing to any store and never calls a model or runs a tool body.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING, Any

from stargraph.checkpoint import Recording, StepRecord
from stargraph.errors import (
    GraphHashMismatch,
    ReplayDivergenceError,
    ReplayError,
    StargraphError,
)
from stargraph.runtime._durable import decode_writes, joins_from, tasks_from
from stargraph.runtime._events import Event
from stargraph.runtime._plan import Task
from stargraph.runtime._run import Run, jsonable
from stargraph.runtime._tasks import execute_sync

if TYPE_CHECKING:
    from stargraph.runtime._executor import CompiledGraph

__all__ = ["ReplayDriver"]

_SPECIAL = ("__update__", "__migration__")


class ReplayDriver:
    """Replays one recording through one compiled graph."""

    def __init__(
        self,
        graph: CompiledGraph[Any],
        recording: Recording,
        *,
        until_step: int | None = None,
        emit: Callable[[Event], None] | None = None,
    ) -> None:
        if recording.run.graph_hash != graph.graph_hash:
            raise GraphHashMismatch(
                run_id=recording.run.run_id,
                stored=recording.run.graph_hash,
                current=graph.graph_hash,
            )
        steps = {s.step: s for s in recording.steps}
        if not steps or 0 not in steps or sorted(steps) != list(range(len(steps))):
            raise ReplayError(
                f"recording of run {recording.run.run_id!r} has steps {sorted(steps)}; a "
                "replay needs every step from 0 without gaps",
                run_id=recording.run.run_id,
            )
        self.graph = graph
        self.recording = recording
        self.steps = steps
        self.last = max(steps) if until_step is None else min(until_step, max(steps))
        first = steps[0]
        if first.snapshot is None:
            raise ReplayError(
                f"step 0 of run {recording.run.run_id!r} has no snapshot; the recording is damaged",
                run_id=recording.run.run_id,
                step=0,
            )
        values = decode_writes(graph.channels, recording.run.run_id, 0, first.snapshot)
        self.run = Run(
            graph,
            recording.run.run_id,
            values,
            max_steps=max(self.last, 1),
            entropy=graph._entropy_factory(),
            emit=emit,
        )
        self.first = first

    def steps_run(self) -> Iterator[int]:
        """Replay step by step; yields after each replayed step."""
        graph, run = self.graph, self.run
        try:
            # Begin as the live run began (same events, fresh rule engines), then take the
            # recorded first tasks: a forked run did not start at the graph's entry.
            graph._begin(run, fresh=True)
            run.tasks = tasks_from(self.first.next)
            run.joins_seen = joins_from(self.first)
            while run.step < self.last:
                record = self.steps[run.step + 1]
                if [w.node for w in record.writes] and all(
                    w.node in _SPECIAL for w in record.writes
                ):
                    self._apply_special(record)
                    yield run.step
                    continue
                self._check_scheduled(record)
                self._replay_step(record)
                yield run.step
            recorded = self.recording.run
            if self.last == max(self.steps) and recorded.status == "done" and not run.tasks:
                graph._finish(run)
        except StargraphError as exc:
            graph._fail(run, exc)
            raise
        finally:
            if run.rules is not None:
                run.rules.close()
                run.rules = None

    def _apply_special(self, record: StepRecord) -> None:
        run = self.run
        if any(w.node == "__migration__" for w in record.writes):
            raise ReplayError(
                f"run {run.run_id!r} was migrated to another graph at step {record.step}; "
                f"replay it up to step {record.step - 1} (until_step=) with the old graph",
                run_id=run.run_id,
                step=record.step,
            )
        run.step = record.step
        results = [
            (
                Task(w.node, w.index),
                decode_writes(run.graph.channels, run.run_id, run.step, w.writes),
            )
            for w in record.writes
        ]
        run.merge(results)

    def _check_scheduled(self, record: StepRecord) -> None:
        run = self.run
        scheduled = sorted((t.node, t.index) for t in run.tasks)
        recorded = sorted((w.node, w.index) for w in record.writes)
        if scheduled != recorded:
            raise ReplayDivergenceError(
                f"replay of run {run.run_id!r} at step {record.step}: the graph scheduled "
                f"{scheduled} but the recorded run ran {recorded}; the graph's control flow "
                "changed since the recording",
                run_id=run.run_id,
                step=record.step,
            )

    def _replay_step(self, record: StepRecord) -> None:
        graph, run = self.graph, self.run
        step = record.step
        stubbed = {
            (w.node, w.index): decode_writes(graph.channels, run.run_id, step, w.writes)
            for w in record.writes
            if graph.specs[w.node].must_stub
        }
        calls: dict[tuple[str, int], list[Any]] = {}
        for entry in record.calls:
            calls.setdefault((entry.node, entry.index), []).append(entry)
        run.done = stubbed
        run.replay_calls = calls
        run.step = step
        graph._emit_started(run, run.tasks)
        outcome = execute_sync(run, run.tasks, graph._threads)
        if outcome.interrupt is not None:
            task, _ = outcome.interrupt
            raise ReplayDivergenceError(
                f"replay of run {run.run_id!r}: node {task.node!r} interrupted at step {step} "
                "but the recorded run has no answer for it",
                run_id=run.run_id,
                step=step,
                node=task.node,
            )
        self._check_writes(record, outcome.results)
        graph._complete_step(run, outcome.results)
        run.done = {}
        run.replay_calls = None
        run.rule_park = None  # a recorded rule interrupt was answered by the recorded resume

    def _check_writes(
        self, record: StepRecord, results: Sequence[tuple[Task, dict[str, Any]]]
    ) -> None:
        channels = self.graph.channels
        recorded = {(w.node, w.index): w.writes for w in record.writes}
        for task, writes in results:
            replayed = jsonable(channels, writes)
            if replayed != recorded[task.key]:
                raise ReplayDivergenceError(
                    f"replay of run {self.run.run_id!r} at step {record.step}: node "
                    f"{task.node!r} wrote {replayed!r} but the recorded run wrote "
                    f"{recorded[task.key]!r}; the node's code changed or it is not "
                    "deterministic given its inputs and recorded calls",
                    run_id=self.run.run_id,
                    step=record.step,
                    node=task.node,
                )
