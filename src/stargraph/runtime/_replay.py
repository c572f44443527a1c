"""Replay: run a recorded run again, offline, from its record.

The graph executes step by step as it did live, with the record standing in for the world:

- ``must_stub`` nodes (LLM ``think`` nodes, side-effecting steps) never run; their recorded
  writes are merged instead - and so are those of the nodes the replay's ``stub`` names, or
  of every node with ``stub="all"`` (see ``runtime._replayplan``);
- every other node runs, but each recorded call it makes - model, tool, clock, id, random,
  ``ctx.once``, interrupt answers - is served from the record, matched by
  ``(node, step, index)`` and position, with the request's fingerprint checked;
- each step must schedule the tasks the record ran, and each re-executed node must write what
  it wrote live; anything else is a :class:`~stargraph.errors.ReplayDivergenceError` naming
  node, step and both sides. A call the record does not hold is a ``ReplayMissError``.

Replay writes nothing to any store and never calls a model or runs a tool body; what a
re-executed node's own code does besides its calls happens again (``ReplayPlan.reruns``).

The replay is the step loop's own (``StepLoop.step_once``), with a :class:`ReplayRunner` as
its task runner in place of the live one: the same events, merges, rules and scheduling.

Subgraph nodes: a child run is a run of its own (``<run>::<site>@<step>.<index>``), so a
replayed subgraph node replays its child *from the child's recording* (:func:`replay_child`)
instead of running it: the run's :class:`~stargraph.runtime._recorded.ReplaySource` is
handed down to its tasks' journals, and finds the child in the ``children`` a cassette
carries (``export_cassette`` writes every descendant run) or, when the recording has none, in
the graph's store. The child's events bubble up as they did live; its input is checked
against the recorded one; a child recording that cannot be found is a ``ReplayMissError``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

from stargraph.checkpoint import Recording, StepRecord
from stargraph.checkpoint._records import ENDED_STATUSES
from stargraph.errors import (
    GraphHashMismatch,
    ReplayDivergenceError,
    ReplayError,
    StargraphError,
)
from stargraph.runtime._cache import CACHE_CALL
from stargraph.runtime._durable import decode_writes, joins_from, tasks_from
from stargraph.runtime._events import Event
from stargraph.runtime._plan import Task
from stargraph.runtime._recorded import ReplaySource, Stub
from stargraph.runtime._replayplan import ReplayPlan, plan_replay, served_nodes
from stargraph.runtime._run import Run, initial_values, jsonable
from stargraph.runtime._steploop import StepLoop
from stargraph.runtime._tasks import StepOutcome, execute_sync, worker_threads

__all__ = ["ReplayDriver", "ReplayRunner", "replay_child"]

_SPECIAL = ("__update__", "__migration__")


class ReplayRunner:
    """The task runner of a replay: each step's tasks of a ``served`` node are served their
    recorded writes, the others run here with every call served from the record, and what
    they write must be what the record holds (else :class:`ReplayDivergenceError`)."""

    __slots__ = ("served", "steps")

    def __init__(self, steps: Mapping[int, StepRecord], served: frozenset[str]) -> None:
        self.steps = steps
        self.served = served

    def run_step(self, run: Run, tasks: Sequence[Task]) -> StepOutcome:
        """Replay step ``run.step``'s ``tasks`` from its record."""
        record = self.steps[run.step]
        channels = run.plan.channels
        calls: dict[tuple[str, int], list[Any]] = {}
        for entry in record.calls:
            calls.setdefault((entry.node, entry.index), []).append(entry)
        served = self.served
        run.done = {
            (w.node, w.index): decode_writes(channels, run.run_id, run.step, w.writes)
            for w in record.writes
            if w.node in served
        }
        run.replay_calls = calls
        hits = run.cache_hits
        if hits is not None:
            # A served cached node's events say whether the live one hit, as its record does.
            hits.update(
                key
                for key, entries in calls.items()
                if key[0] in served
                and any(
                    e.kind == CACHE_CALL and isinstance(e.value, dict) and e.value.get("hit")
                    for e in entries
                )
            )
        try:
            outcome = execute_sync(run, tasks, worker_threads)  # never on an executor
        finally:
            run.done = {}
            run.replay_calls = None
        if outcome.interrupt is not None:
            task, _ = outcome.interrupt[0]
            raise ReplayDivergenceError(
                f"replay of run {run.run_id!r}: node {task.node!r} interrupted at step "
                f"{run.step} but the recorded run has no answer for it",
                **run.where(task.node),
            )
        _check_writes(run, record, outcome.results)
        return outcome


def _check_writes(
    run: Run, record: StepRecord, results: Sequence[tuple[Task, dict[str, Any]]]
) -> None:
    channels = run.plan.channels
    recorded = {(w.node, w.index): w.writes for w in record.writes}
    for task, writes in results:
        replayed = jsonable(channels, writes)
        if replayed != recorded[task.key]:
            raise ReplayDivergenceError(
                f"replay of run {run.run_id!r} at step {record.step}: node "
                f"{task.node!r} wrote {replayed!r} but the recorded run wrote "
                f"{recorded[task.key]!r}; the node's code changed or it is not "
                "deterministic given its inputs and recorded calls",
                **run.where(task.node),
            )


class ReplayDriver:
    """Replays one recording through one graph's step loop."""

    def __init__(
        self,
        loop: StepLoop,
        source: Recording | ReplaySource,
        *,
        until_step: int | None = None,
        emit: Callable[[Event], None] | None = None,
        path: tuple[str, ...] = (),
        collect: list[tuple[str, dict[str, Any]]] | None = None,
        stub: Stub = "must",
    ) -> None:
        """``source``: the recording (its descendants' recordings from the cassette it
        carries, else the loop's store) replayed with ``stub``, or a child's
        :class:`ReplaySource` (which carries its own). ``path`` and ``collect`` are set for
        a child run (as ``run_nested`` sets them live)."""
        if isinstance(source, Recording):
            source = ReplaySource(source, store=loop.store, stub=stub)
        recording = source.recording
        plan = loop.plan
        if recording.run.graph_hash != plan.graph_hash:
            raise GraphHashMismatch(
                run_id=recording.run.run_id,
                stored=recording.run.graph_hash,
                current=plan.graph_hash,
            )
        steps = {s.step: s for s in recording.steps}
        if not steps or 0 not in steps or sorted(steps) != list(range(len(steps))):
            raise ReplayError(
                f"recording of run {recording.run.run_id!r} has steps {sorted(steps)}; a "
                "replay needs every step from 0 without gaps",
                run_id=recording.run.run_id,
            )
        self.loop = loop
        self.source = source
        self.until_step = until_step
        self.recording = recording
        self.steps = steps
        self.runner = ReplayRunner(steps, served_nodes(plan, source.stub, path))
        self.last = max(steps) if until_step is None else min(until_step, max(steps))
        first = steps[0]
        if first.snapshot is None:
            raise ReplayError(
                f"step 0 of run {recording.run.run_id!r} has no snapshot; the recording is damaged",
                run_id=recording.run.run_id,
                step=0,
            )
        values = decode_writes(plan.channels, recording.run.run_id, 0, first.snapshot)
        self.run = loop.make_run(
            recording.run.run_id, values, max_steps=max(self.last, 1), emit=emit
        )
        self.run.path, self.run.collect, self.run.replay = path, collect, source
        self.run.thread = recording.run.thread_id
        self.first = first

    def plan(self) -> ReplayPlan:
        """What this replay will re-execute and serve (read from the record, nothing run)."""
        return plan_replay(self.loop, self.source, until_step=self.until_step)

    def steps_run(self) -> Iterator[int]:
        """Replay step by step; yields after each replayed step."""
        loop, run = self.loop, self.run
        try:
            # Begin as the live run began (same events, fresh rule engines), then take the
            # recorded first tasks: a forked run did not start at the graph's entry.
            loop.begin(run, fresh=True)
            run.tasks = tasks_from(self.first.next)
            run.joins_seen = joins_from(self.first)
            while run.step < self.last:
                record = self.steps[run.step + 1]
                if [w.node for w in record.writes] and all(
                    w.node in _SPECIAL for w in record.writes
                ):
                    self._apply_special(record)
                else:
                    self._check_scheduled(record)
                    loop.step_once(run, self.runner)
                yield run.step
            recorded = self.recording.run
            if self.last == max(self.steps) and recorded.status in ENDED_STATUSES and not run.tasks:
                loop.finish(run)
        except StargraphError as exc:
            loop.fail(run, exc)
            raise
        finally:
            loop.end(run)  # close the rule engines; the run no longer executes

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
                decode_writes(run.plan.channels, run.run_id, run.step, w.writes),
            )
            for w in record.writes
        ]
        run.merge(results)
        # An update routed as a node (fork or resume with as_node) chose its own next
        # tasks; one that was not kept the tasks before it, which its record repeats.
        run.tasks = tasks_from(record.next)
        run.joins_seen = joins_from(record)

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


def replay_child(
    child: StepLoop,
    input: Mapping[str, Any],
    *,
    run_id: str,
    source: ReplaySource | None,
    parent_run_id: str,
    path: tuple[str, ...],
    emit: Callable[[Event], None] | None,
    thread: str | None = None,
) -> tuple[dict[str, Any], list[tuple[str, dict[str, Any]]]]:
    """Replay child run ``run_id`` of a subgraph node being replayed in ``parent_run_id``
    (whose replay ``source`` the node's journal carries); return what
    ``CompiledGraph.run_nested`` returns live (final values, raw writes)."""
    if source is None:
        raise ReplayError(
            f"subgraph child {run_id!r} was asked to replay outside a replay of its parent "
            f"run {parent_run_id!r}",
            run_id=run_id,
        )
    child_source = source.child(run_id, child.store)
    recording = child_source.recording
    given = jsonable(child.plan.channels, initial_values(child.plan.state_model, input, run_id))
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
    driver = ReplayDriver(child, child_source, emit=emit, path=path, collect=raw)
    driver.run.thread = thread  # the parent's, as the live child had it
    for _ in driver.steps_run():
        pass
    return driver.run.values, raw
