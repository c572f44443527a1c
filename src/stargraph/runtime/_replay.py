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

Subgraph nodes: a child run is a run of its own (``<run>::<site>@<step>.<index>``), so a
replayed subgraph node replays its child *from the child's recording* (:func:`replay_child`)
instead of running it: from the ``children`` a cassette carries (``export_cassette`` writes
every descendant run) or, when the recording has none, from the graph's store. The child's
events bubble up as they did live; its input is checked against the recorded one; a child
recording that cannot be found is a ``ReplayMissError``.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from stargraph.checkpoint import Recording, StepRecord
from stargraph.errors import (
    GraphHashMismatch,
    ReplayDivergenceError,
    ReplayError,
    ReplayMissError,
    StargraphError,
)
from stargraph.runtime._durable import decode_writes, joins_from, tasks_from
from stargraph.runtime._events import Event
from stargraph.runtime._plan import Task
from stargraph.runtime._run import Run, jsonable
from stargraph.runtime._tasks import execute_sync

if TYPE_CHECKING:
    from stargraph.runtime._executor import CompiledGraph

__all__ = ["ReplayDriver", "replay_child"]

_SPECIAL = ("__update__", "__migration__")

# Drivers replaying right now, by run id (a stack per id), so a subgraph node replayed inside
# one - on any worker thread - finds where its child recordings come from.
_ACTIVE: dict[str, list[ReplayDriver]] = {}
_ACTIVE_LOCK = threading.Lock()


class ReplayDriver:
    """Replays one recording through one compiled graph."""

    def __init__(
        self,
        graph: CompiledGraph[Any],
        recording: Recording,
        *,
        until_step: int | None = None,
        emit: Callable[[Event], None] | None = None,
        path: tuple[str, ...] = (),
        collect: list[tuple[str, dict[str, Any]]] | None = None,
        children: Mapping[str, Recording] | None = None,
    ) -> None:
        """``path``/``collect`` are set for a child run (as ``run_nested`` sets them live);
        ``children`` are the recordings of descendant runs, by run id. By default they come
        from the recording's own ``children`` (a loaded cassette), else from the store."""
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
        self.run.path, self.run.collect = path, collect
        self.first = first
        if children is None:
            carried = getattr(recording, "children", None)
            if carried is not None:
                children = {child.run.run_id: child for child in carried}
        self.children = children

    def _child_ids(self, run_id: str) -> list[str]:
        """``run_id``, then - for a fork, at a step it copied from its parent - the id the
        child has under the parent run (a fork copies steps, not the child runs they made)."""
        record = self.recording.run
        prefix = f"{record.run_id}::"
        ids = [run_id]
        if record.parent_run_id is None or record.parent_step is None:
            return ids
        if not run_id.startswith(prefix):
            return ids
        rest = run_id[len(prefix) :]
        _, _, at = rest.split("::", 1)[0].rpartition("@")
        step = at.split(".", 1)[0]
        if step.isdigit() and int(step) <= record.parent_step:
            ids.append(f"{record.parent_run_id}::{rest}")
        return ids

    def child_recording(self, run_id: str) -> Recording:
        """The recording of child run ``run_id`` (from the cassette, else the store)."""
        ids = self._child_ids(run_id)
        if self.children is not None:
            for candidate in ids:
                found = self.children.get(candidate)
                if found is not None:
                    return found
            where = "the cassette's children"
        else:
            store = self.graph.store
            if store is not None:
                for candidate in ids:
                    try:
                        return Recording.from_store(store, candidate)
                    except LookupError:
                        pass
            where = "the graph's store" if store is not None else "a store (the graph has none)"
        raise ReplayMissError(
            f"replay of run {self.recording.run.run_id!r}: subgraph child run {run_id!r} is "
            f"not in {where}; export the cassette again (export_cassette includes child runs) "
            "or replay from the store that holds the run",
            run_id=self.recording.run.run_id,
        )

    def steps_run(self) -> Iterator[int]:
        """Replay step by step; yields after each replayed step."""
        graph, run = self.graph, self.run
        with _ACTIVE_LOCK:
            _ACTIVE.setdefault(run.run_id, []).append(self)
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
            with _ACTIVE_LOCK:
                stack = _ACTIVE[run.run_id]
                stack.remove(self)
                if not stack:
                    del _ACTIVE[run.run_id]
            graph._end(run)  # close the rule engines; the run no longer executes

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


def replay_child(
    child: CompiledGraph[Any],
    input: Mapping[str, Any],
    *,
    run_id: str,
    parent_run_id: str,
    path: tuple[str, ...],
    emit: Callable[[Event], None] | None,
) -> tuple[dict[str, Any], list[tuple[str, dict[str, Any]]]]:
    """Replay child run ``run_id`` of a subgraph node being replayed in ``parent_run_id``;
    return what ``CompiledGraph.run_nested`` returns live (final values, raw writes)."""
    with _ACTIVE_LOCK:
        stack = _ACTIVE.get(parent_run_id)
        parent = stack[-1] if stack else None
    if parent is None:
        raise ReplayError(
            f"subgraph child {run_id!r} was asked to replay outside a replay of its parent "
            f"run {parent_run_id!r}",
            run_id=run_id,
        )
    recording = parent.child_recording(run_id)
    given = jsonable(child.channels, child._initial_values(input, run_id))
    first = next((s for s in recording.steps if s.step == 0), None)
    if first is not None and first.snapshot is not None and given != first.snapshot:
        raise ReplayDivergenceError(
            f"replay of run {parent_run_id!r}: subgraph child run {run_id!r} gets input "
            f"{given!r} but the recorded child started from {first.snapshot!r}; the parent "
            "state handed to the skill changed since the recording",
            run_id=parent_run_id,
            node=path[-1] if path else None,
        )
    raw: list[tuple[str, dict[str, Any]]] = []
    driver = ReplayDriver(
        child, recording, emit=emit, path=path, collect=raw, children=parent.children
    )
    for _ in driver.steps_run():
        pass
    return driver.run.values, raw
